/*
 * ckpt.c - sharded and full checkpoints, saved atomically and loaded at
 * any world size or strategy.
 *
 * Layout under the directory the user names (DIR):
 *   DIR/step-00000020/meta          the metadata (ckpt_meta.h)
 *   DIR/step-00000020/shard-<j>.bin slices of shard j (sharded), or
 *   DIR/step-00000020/full.bin      whole units (full)
 *   DIR/latest                      "step-00000020": the last complete one
 * A save writes into step-N.tmp/, fsyncs every file, renames the directory
 * to step-N, then replaces DIR/latest through a renamed temporary file, so
 * a crash at any point leaves latest naming a complete checkpoint. Older
 * step directories except the previous one are then removed.
 * A data file holds, unit by unit, the parameter slice and then the
 * optimizer state arrays (f32, native byte order); meta records an FNV-1a
 * checksum of each file.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_meta.h"
#include "engine.h"

#define PATHMAX 4400

/* snprintf into a PATHMAX buffer (dir is at most 4000 characters, so the
 * names below always fit). */
__attribute__((format(printf, 2, 3))) static void pathf(char *out,
                                                        const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out, PATHMAX, fmt, ap);
  va_end(ap);
}

/* Every rank's ok -> 1 when all are ok (min over shard, then replicas). */
static sharc_status_t agree(struct sharc_shard *e, int *ok) {
  int32_t v = *ok;
  sharc_status_t st =
      sharc_all_reduce(&v, &v, 1, SHARC_I32, SHARC_MIN, e->shard_comm, NULL);
  if (st == SHARC_OK && e->rep_size > 1)
    st = sharc_all_reduce(&v, &v, 1, SHARC_I32, SHARC_MIN, e->rep_comm, NULL);
  if (st != SHARC_OK)
    return eng_coll_fail(e, st, "checkpoint agreement", -1);
  *ok = v;
  return SHARC_OK;
}

static int fsync_path(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

static int pread_all(int fd, void *p, size_t n, uint64_t off) {
  char *c = p;
  while (n) {
    ssize_t r = pread(fd, c, n, (off_t)off);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    c += r;
    n -= (size_t)r;
    off += (uint64_t)r;
  }
  return 0;
}

/* Removes a checkpoint directory this module wrote (its known files). */
static void remove_ckpt_dir(const char *path) {
  DIR *d = opendir(path);
  if (!d)
    return;
  struct dirent *de;
  char f[PATHMAX];
  while ((de = readdir(d))) {
    const char *n = de->d_name;
    if (strcmp(n, "meta") == 0 || strcmp(n, "meta.tmp") == 0 ||
        strcmp(n, "full.bin") == 0 || strncmp(n, "shard-", 6) == 0) {
      pathf(f, "%s/%s", path, n);
      unlink(f);
    }
  }
  closedir(d);
  rmdir(path);
}

static int nstates(const struct sharc_shard *e) {
  return e->cfg.optim.kind == SHARC_OPTIM_ADAMW ? 3 : 2;
}

static float *state_ptr(eunit_t *U, int s) {
  return s == 0 ? U->master : s == 1 ? U->opt_a : U->opt_b;
}

/* Builds the metadata of this engine (sums left zero). */
static int build_meta(struct sharc_shard *e, int full, ckpt_meta_t *m) {
  memset(m, 0, sizeof *m);
  const sharc_model_t *md = e->model;
  m->full = full;
  snprintf(m->model, sizeof m->model, "%s", md->name ? md->name : "model");
  snprintf(m->strategy, sizeof m->strategy, "%s",
           sharc_strategy_name(e->cfg.strategy));
  m->world = e->world;
  m->shards = e->shards;
  m->states = nstates(e);
  snprintf(m->optim, sizeof m->optim, "%s",
           e->cfg.optim.kind == SHARC_OPTIM_ADAMW ? "adamw" : "sgd");
  m->steps = e->steps;
  m->optim_steps = e->opt_steps;
  m->lr = e->lr;
  m->seed = e->cfg.seed;
  m->nunits = md->nunits;
  m->nfiles = full ? 1 : e->shards;
  m->units = calloc((size_t)md->nunits, sizeof *m->units);
  m->file_sums = calloc((size_t)m->nfiles, sizeof *m->file_sums);
  if (!m->units || !m->file_sums)
    return -1;
  for (int u = 0; u < md->nunits; u++) {
    const sharc_unit_spec_t *s = &md->units[u];
    ckpt_unit_t *c = &m->units[u];
    snprintf(c->name, sizeof c->name, "%s", s->name ? s->name : "unit");
    c->numel = e->units[u].lay.numel;
    c->ntensors = s->nparams;
    for (int k = 0; k < s->nparams; k++) {
      snprintf(c->tensors[k].name, CKPT_NAME, "%s",
               s->params[k].name ? s->params[k].name : "t");
      c->tensors[k].ndim = s->params[k].ndim;
      memcpy(c->tensors[k].shape, s->params[k].shape,
             sizeof c->tensors[k].shape);
    }
  }
  return 0;
}

/* Writes this rank's data file (sharded: its slices; full: the whole
 * units, gathered into buf (the largest unit's padded size) on every
 * rank; only world rank 0 writes). *sum gets its checksum. Takes part in
 * every gather even after a local write error, so ranks stay in step;
 * returns the first error. */
static sharc_status_t write_data(struct sharc_shard *e, const char *tmpdir,
                                 int full, float *buf, float *hslice,
                                 uint64_t *sum) {
  int writer = full ? e->world_rank == 0 : 1;
  int rep_rank = 0;
  sharc_comm_rank(e->rep_comm, &rep_rank);
  if (!full && rep_rank != 0) /* replicas hold the same slices */
    writer = 0;
  char path[PATHMAX];
  if (full)
    pathf(path, "%s/full.bin", tmpdir);
  else
    pathf(path, "%s/shard-%d.bin", tmpdir, e->shard_rank);
  int fd = -1;
  sharc_status_t st = SHARC_OK;
  if (writer) {
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
      st = eng_fail(e, SHARC_ERR_SYSTEM, "checkpoint: cannot create %s: %s",
                    path, strerror(errno));
  }
  uint64_t h = CKPT_FNV0;
  for (int u = 0; u < e->model->nunits; u++) {
    eunit_t *U = &e->units[u];
    for (int s = 0; s < nstates(e); s++) {
      const float *src = state_ptr(U, s);
      size_t n = U->lay.slice;
      if (hslice) {
        sharc_status_t s2 = eng_copy(e, hslice, src, n * sizeof(float));
        if (s2 != SHARC_OK && st == SHARC_OK)
          st = s2;
        src = hslice;
      }
      if (full) { /* every rank takes part in the gather */
        sharc_status_t s2 = eng_gather_f32(e, u, src, buf);
        if (s2 != SHARC_OK) { /* the communicator is gone: stop here */
          if (fd >= 0)
            close(fd);
          return s2;
        }
        src = buf;
        n = U->lay.numel;
      }
      if (fd >= 0 && st == SHARC_OK) {
        if (u == e->model->nunits / 2 &&
            eng_fault_kill("save", e->world_rank, 0,
                           "half-way through its checkpoint file"))
          raise(SIGKILL);
        h = ckpt_fnv(h, src, n * sizeof(float));
        if (write_all(fd, src, n * sizeof(float)) != 0)
          st = eng_fail(e, SHARC_ERR_SYSTEM, "checkpoint: writing %s: %s", path,
                        strerror(errno));
      }
    }
  }
  if (fd >= 0) {
    if (st == SHARC_OK && fsync(fd) != 0)
      st = eng_fail(e, SHARC_ERR_SYSTEM, "checkpoint: fsync %s: %s", path,
                    strerror(errno));
    close(fd);
  }
  *sum = writer ? h : 0;
  return st;
}

/* 1 for "step-<digits>" (a complete checkpoint's directory name). */
static int step_name(const char *n) {
  return strncmp(n, "step-", 5) == 0 && n[5] &&
         strspn(n + 5, "0123456789") == strlen(n + 5);
}

/* Keeps name and the newest complete checkpoint before it; removes older
 * step directories and every crashed save's leftover (step-N.tmp). Newer
 * complete ones (a later run that was abandoned for an older checkpoint)
 * stay. */
static void prune(const char *dir, const char *name) {
  char keep[256] = "", path[PATHMAX];
  DIR *d = opendir(dir);
  struct dirent *de;
  while (d && (de = readdir(d)))
    if (step_name(de->d_name) && strcmp(de->d_name, name) < 0 &&
        strcmp(de->d_name, keep) > 0 && strlen(de->d_name) < sizeof keep)
      strcpy(keep, de->d_name);
  if (d)
    rewinddir(d);
  while (d && (de = readdir(d))) {
    size_t len = strlen(de->d_name);
    int crashed = len > 4 && strcmp(de->d_name + len - 4, ".tmp") == 0;
    if (strncmp(de->d_name, "step-", 5) != 0 ||
        (!crashed &&
         (strcmp(de->d_name, name) >= 0 || strcmp(de->d_name, keep) == 0)))
      continue;
    pathf(path, "%s/%s", dir, de->d_name);
    remove_ckpt_dir(path);
  }
  if (d)
    closedir(d);
}

/* Rank 0: meta into tmpdir, then the renames that publish it. */
static sharc_status_t publish(struct sharc_shard *e, ckpt_meta_t *m,
                              const char *dir, const char *name) {
  char tmpdir[PATHMAX], final[PATHMAX], path[PATHMAX], tmp[PATHMAX];
  pathf(tmpdir, "%s/%s.tmp", dir, name);
  pathf(final, "%s/%s", dir, name);
  char *text;
  size_t len;
  if (ckpt_meta_print(m, &text, &len) != 0)
    return eng_fail(e, SHARC_ERR_NO_MEM, "checkpoint: out of memory");
  pathf(tmp, "%s/meta.tmp", tmpdir);
  pathf(path, "%s/meta", tmpdir);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int bad = fd < 0 || write_all(fd, text, len) != 0 || fsync(fd) != 0;
  if (fd >= 0)
    close(fd);
  free(text);
  if (bad || rename(tmp, path) != 0 || fsync_path(tmpdir) != 0)
    return eng_fail(e, SHARC_ERR_SYSTEM, "checkpoint: writing %s: %s", path,
                    strerror(errno));
  /* step-N may exist already (a re-save of the same step, or a save that
   * crashed before latest named it). Swap the new directory in with one
   * atomic exchange, so step-N is complete at every instant, and remove
   * the old one only once latest is written. */
  int swapped = 0;
  if (renameat2(AT_FDCWD, tmpdir, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
    swapped = 1; /* the old step-N now sits at tmpdir */
  } else if (errno == ENOENT) {
    if (rename(tmpdir, final) != 0)
      return eng_fail(e, SHARC_ERR_SYSTEM, "checkpoint: rename %s -> %s: %s",
                      tmpdir, final, strerror(errno));
  } else {
    return eng_fail(e, SHARC_ERR_SYSTEM,
                    "checkpoint: cannot replace %s atomically (%s); remove "
                    "it or save to another directory",
                    final, strerror(errno));
  }
  pathf(path, "%s/latest", dir);
  pathf(tmp, "%s/latest.tmp", dir);
  FILE *f = NULL;
  bad = fsync_path(dir) != 0 || !(f = fopen(tmp, "w")) ||
        fprintf(f, "%s\n", name) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0;
  if (f)
    fclose(f);
  if (bad || rename(tmp, path) != 0 || fsync_path(dir) != 0)
    return eng_fail(e, SHARC_ERR_SYSTEM, "checkpoint: updating %s: %s", path,
                    strerror(errno));
  if (swapped)
    remove_ckpt_dir(tmpdir);
  prune(dir, name);
  return SHARC_OK;
}

sharc_status_t sharc_shard_save(sharc_shard_t e, const char *dir,
                                sharc_ckpt_kind_t kind) {
  if (!e)
    return SHARC_ERR_INVALID_ARG;
  if (!dir || !*dir || strlen(dir) > 4000 ||
      (kind != SHARC_CKPT_SHARDED && kind != SHARC_CKPT_FULL))
    return eng_fail(e, SHARC_ERR_INVALID_ARG,
                    "sharc_shard_save: give a directory (at most 4000 "
                    "characters) and SHARC_CKPT_SHARDED or SHARC_CKPT_FULL");
  if (e->failed)
    return eng_failed_before(e);
  sharc_status_t st = sharc_stream_synchronize(e->stream);
  if (st != SHARC_OK)
    return eng_coll_fail(e, st, "checkpoint (pending work)", -1);
  int full = kind == SHARC_CKPT_FULL;
  char name[64], tmpdir[PATHMAX];
  snprintf(name, sizeof name, "step-%08llu", (unsigned long long)e->steps);
  pathf(tmpdir, "%s/%s.tmp", dir, name);
  /* Everything that can fail locally before data moves, then one
   * agreement, so no rank leaves the others inside a collective. */
  int ok = 1;
  ckpt_meta_t m;
  float *buf = NULL, *hslice = NULL; /* hslice: GPU training's slice */
  if (build_meta(e, full, &m) != 0) {
    ok = 0;
    eng_fail(e, SHARC_ERR_NO_MEM, "checkpoint: out of memory");
  }
  if (ok && full) {
    size_t most = 1;
    for (int u = 0; u < e->model->nunits; u++)
      if (e->units[u].lay.padded > most)
        most = e->units[u].lay.padded;
    if (!(buf = malloc(most * sizeof(float)))) {
      ok = 0;
      eng_fail(e, SHARC_ERR_NO_MEM,
               "checkpoint: out of memory for a %zu-element unit", most);
    }
  }
  if (ok && eng_at(e, MEM_PSLICE) == AT_DEV) { /* copied to the host */
    size_t most = 1;
    for (int u = 0; u < e->model->nunits; u++)
      if (e->units[u].lay.slice > most)
        most = e->units[u].lay.slice;
    if (!(hslice = malloc(most * sizeof(float)))) {
      ok = 0;
      eng_fail(e, SHARC_ERR_NO_MEM,
               "checkpoint: out of memory for a %zu-element slice", most);
    }
  }
  if (ok && e->world_rank == 0) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
      ok = 0;
      eng_fail(e, SHARC_ERR_SYSTEM, "checkpoint: cannot create %s: %s", dir,
               strerror(errno));
    } else {
      remove_ckpt_dir(tmpdir); /* left by a save that crashed */
      if (mkdir(tmpdir, 0755) != 0) {
        ok = 0;
        eng_fail(e, SHARC_ERR_SYSTEM, "checkpoint: cannot create %s: %s",
                 tmpdir, strerror(errno));
      }
    }
  }
  int mine = ok;
  if ((st = agree(e, &ok)) == SHARC_OK && !ok)
    st = mine ? eng_fail(e, SHARC_ERR_SYSTEM,
                         "checkpoint: another rank could not prepare the "
                         "save to %s (see its message); nothing was written",
                         dir)
              : SHARC_ERR_SYSTEM;
  uint64_t sum = 0;
  if (st == SHARC_OK) {
    st = write_data(e, tmpdir, full, buf, hslice, &sum);
    ok = st == SHARC_OK;
    /* every file's checksum to every rank: one writer per file adds it */
    m.file_sums[full ? 0 : e->shard_rank] = sum;
    sharc_status_t s2 =
        sharc_all_reduce(m.file_sums, m.file_sums, (size_t)m.nfiles, SHARC_U64,
                         SHARC_SUM, e->shard_comm, NULL);
    if (s2 == SHARC_OK && full && e->rep_size > 1)
      s2 = sharc_all_reduce(m.file_sums, m.file_sums, 1, SHARC_U64, SHARC_SUM,
                            e->rep_comm, NULL);
    if (s2 == SHARC_OK)
      s2 = agree(e, &ok);
    if (s2 != SHARC_OK)
      st = eng_coll_fail(e, s2, "checkpoint checksums", -1);
    else if (!ok && st == SHARC_OK)
      st = eng_fail(e, SHARC_ERR_SYSTEM,
                    "checkpoint: another rank failed to write its file (see "
                    "its message); %s/latest is unchanged",
                    dir);
  }
  if (st == SHARC_OK) {
    if (e->world_rank == 0)
      st = publish(e, &m, dir, name);
    ok = st == SHARC_OK;
    sharc_status_t s2 = agree(e, &ok);
    if (s2 != SHARC_OK)
      st = s2;
    else if (!ok && st == SHARC_OK)
      st = eng_fail(e, SHARC_ERR_SYSTEM,
                    "checkpoint: rank 0 could not publish %s/%s", dir, name);
  }
  free(buf);
  free(hslice);
  ckpt_meta_free(&m);
  return st;
}

/* ---- load ------------------------------------------------------------------
 */

/* Reads path whole into a malloc'ed buffer. */
static char *slurp(const char *path, size_t max, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  char *buf = malloc(max);
  size_t n = buf ? fread(buf, 1, max, f) : 0;
  fclose(f);
  *len = n;
  return buf;
}

static sharc_status_t check_model(struct sharc_shard *e, const ckpt_meta_t *m,
                                  const char *path) {
  const sharc_model_t *md = e->model;
  if (m->nunits != md->nunits)
    return eng_fail(e, SHARC_ERR_MISMATCH,
                    "checkpoint %s holds %d units of model '%s'; this model "
                    "('%s') has %d: a different model",
                    path, m->nunits, m->model, md->name, md->nunits);
  for (int u = 0; u < m->nunits; u++) {
    const ckpt_unit_t *c = &m->units[u];
    const sharc_unit_spec_t *s = &md->units[u];
    int same = strcmp(c->name, s->name) == 0 && c->ntensors == s->nparams &&
               c->numel == e->units[u].lay.numel;
    for (int k = 0; same && k < c->ntensors; k++) {
      const ckpt_tensor_t *t = &c->tensors[k];
      char saved[160], mine[160];
      int sl = snprintf(saved, sizeof saved, "%s", t->name);
      int ml = snprintf(mine, sizeof mine, "%s", s->params[k].name);
      for (int d = 0; d < t->ndim && sl > 0 && sl < 140; d++)
        sl += snprintf(saved + sl, sizeof saved - (size_t)sl, "%s%zu",
                       d ? "x" : " ", t->shape[d]);
      for (int d = 0; d < s->params[k].ndim && ml > 0 && ml < 140; d++)
        ml += snprintf(mine + ml, sizeof mine - (size_t)ml, "%s%zu",
                       d ? "x" : " ", s->params[k].shape[d]);
      if (strcmp(saved, mine) != 0)
        return eng_fail(e, SHARC_ERR_MISMATCH,
                        "checkpoint %s: unit %d ('%s') tensor %d is %s; this "
                        "model has %s (a different model or size)",
                        path, u, c->name, k, saved, mine);
    }
    if (!same)
      return eng_fail(e, SHARC_ERR_MISMATCH,
                      "checkpoint %s: unit %d is '%s' with %zu elements; "
                      "this model's unit %d is '%s' with %zu (a different "
                      "model or size)",
                      path, u, c->name, c->numel, u, s->name,
                      e->units[u].lay.numel);
  }
  return SHARC_OK;
}

/* Verifies a data file's size and checksum. */
static sharc_status_t check_file(struct sharc_shard *e, const ckpt_meta_t *m,
                                 const char *path, int f) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return eng_fail(e, SHARC_ERR_SYSTEM, "checkpoint: cannot open %s: %s", path,
                    strerror(errno));
  uint64_t h = CKPT_FNV0, total = 0;
  char buf[1 << 16];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) {
    h = ckpt_fnv(h, buf, (size_t)n);
    total += (uint64_t)n;
  }
  close(fd);
  if (total != ckpt_file_bytes(m))
    return eng_fail(e, SHARC_ERR_MISMATCH,
                    "checkpoint: %s has %llu bytes; its metadata says %llu "
                    "(truncated or from another save)",
                    path, (unsigned long long)total,
                    (unsigned long long)ckpt_file_bytes(m));
  if (h != m->file_sums[f])
    return eng_fail(e, SHARC_ERR_MISMATCH,
                    "checkpoint: %s checksum %016llx differs from its "
                    "metadata's %016llx (the file is corrupt)",
                    path, (unsigned long long)h,
                    (unsigned long long)m->file_sums[f]);
  return SHARC_OK;
}

/* Fills this rank's slices from the checkpoint at path. */
static sharc_status_t read_slices(struct sharc_shard *e, const ckpt_meta_t *m,
                                  const char *path, int states, float **tmp) {
  int nf = m->nfiles;
  int *fds = malloc((size_t)nf * sizeof *fds);
  if (!fds)
    return eng_fail(e, SHARC_ERR_NO_MEM, "checkpoint: out of memory");
  for (int f = 0; f < nf; f++)
    fds[f] = -1;
  sharc_status_t st = SHARC_OK;
  char fp[PATHMAX];
  for (int u = 0; u < m->nunits && st == SHARC_OK; u++) {
    eunit_t *U = &e->units[u];
    size_t lo = (size_t)e->shard_rank * U->lay.slice;
    size_t hi = lo + U->lay.slice;
    size_t S = m->full ? m->units[u].numel : ckpt_unit_slice(m, u);
    for (int f = 0; f < nf && st == SHARC_OK; f++) {
      size_t a, b; /* the saved file's elements [f*S, f*S+S) ∩ mine */
      size_t f0 = m->full ? 0 : (size_t)f * S;
      layout_overlap(lo, hi, f0, f0 + S, &a, &b);
      if (b > U->lay.numel)
        b = U->lay.numel > a ? U->lay.numel : a;
      if (a >= b)
        continue;
      if (fds[f] < 0) {
        if (m->full)
          pathf(fp, "%s/full.bin", path);
        else
          pathf(fp, "%s/shard-%d.bin", path, f);
        st = check_file(e, m, fp, f);
        if (st != SHARC_OK)
          break;
        fds[f] = open(fp, O_RDONLY | O_CLOEXEC);
        if (fds[f] < 0) {
          st = eng_fail(e, SHARC_ERR_SYSTEM, "checkpoint: cannot open %s", fp);
          break;
        }
      }
      for (int s = 0; s < states; s++) {
        uint64_t off = ckpt_unit_offset(m, u) +
                       ((uint64_t)s * S + (a - f0)) * sizeof(float);
        if (pread_all(fds[f], tmp[u * 3 + s] + (a - lo),
                      (b - a) * sizeof(float), off) != 0) {
          st = eng_fail(e, SHARC_ERR_SYSTEM,
                        "checkpoint: reading unit '%s' from file %d of %s "
                        "failed",
                        m->units[u].name, f, path);
          break;
        }
      }
    }
  }
  for (int f = 0; f < nf; f++)
    if (fds[f] >= 0)
      close(fds[f]);
  free(fds);
  return st;
}

sharc_status_t sharc_shard_load(sharc_shard_t e, const char *dir) {
  if (!e)
    return SHARC_ERR_INVALID_ARG;
  if (!dir || !*dir || strlen(dir) > 4000)
    return eng_fail(e, SHARC_ERR_INVALID_ARG,
                    "sharc_shard_load: give a checkpoint directory");
  if (e->failed)
    return eng_failed_before(e);
  sharc_status_t st = sharc_stream_synchronize(e->stream);
  if (st != SHARC_OK)
    return eng_coll_fail(e, st, "checkpoint (pending work)", -1);
  char path[PATHMAX], mp[PATHMAX], latest[256];
  pathf(path, "%s/latest", dir);
  FILE *f = fopen(path, "r");
  if (f) { /* DIR names the root: follow latest */
    if (!fgets(latest, sizeof latest, f))
      latest[0] = '\0';
    fclose(f);
    latest[strcspn(latest, "\n")] = '\0';
    if (!step_name(latest))
      return eng_fail(e, SHARC_ERR_INVALID_ARG,
                      "checkpoint: %s/latest holds '%.60s', not a step-<N> "
                      "directory name; it was not written by sharc or is "
                      "damaged",
                      dir, latest);
    pathf(path, "%s/%s", dir, latest);
  } else {
    pathf(path, "%s", dir);
  }
  pathf(mp, "%s/meta", path);
  ckpt_meta_t m;
  memset(&m, 0, sizeof m);
  size_t len = 0;
  char err[400];
  char *text = slurp(mp, 1 << 24, &len);
  if (!text)
    st = eng_fail(e, SHARC_ERR_INVALID_ARG,
                  "checkpoint: cannot read %s (%s); pass the directory given "
                  "to --save (with its 'latest' file) or one step-N "
                  "directory in it",
                  mp, strerror(errno));
  else if (ckpt_meta_parse(text, len, &m, err, sizeof err) != 0)
    st = eng_fail(e, SHARC_ERR_INVALID_ARG, "%s: %s", mp, err);
  else
    st = check_model(e, &m, path);
  free(text);
  int states = 1;
  if (st == SHARC_OK) {
    states = m.states;
    if (m.states != nstates(e)) { /* another optimizer: parameters only */
      states = 1;
      if (e->world_rank == 0)
        fprintf(stderr,
                "sharc: checkpoint %s has %s optimizer state; this run uses "
                "%s, so only the parameters are loaded\n",
                path, m.optim,
                e->cfg.optim.kind == SHARC_OPTIM_ADAMW ? "adamw" : "sgd");
    }
  }
  /* read into temporaries: a load that fails on any rank leaves every
   * rank's engine as it was */
  int nu = e->model->nunits;
  float **tmp = calloc((size_t)nu * 3, sizeof *tmp);
  if (!tmp && st == SHARC_OK)
    st = eng_fail(e, SHARC_ERR_NO_MEM, "checkpoint: out of memory");
  for (int u = 0; tmp && st == SHARC_OK && u < nu; u++)
    for (int s = 0; s < states && st == SHARC_OK; s++)
      if (!(tmp[u * 3 + s] =
                calloc(e->units[u].lay.slice ? e->units[u].lay.slice : 1,
                       sizeof(float))))
        st = eng_fail(e, SHARC_ERR_NO_MEM, "checkpoint: out of memory");
  if (st == SHARC_OK)
    st = read_slices(e, &m, path, states, tmp);
  int ok = st == SHARC_OK;
  sharc_status_t s2 = agree(e, &ok);
  if (st == SHARC_OK && s2 != SHARC_OK)
    st = s2;
  else if (st == SHARC_OK && !ok)
    st = eng_fail(e, SHARC_ERR_INVALID_ARG,
                  "checkpoint: another rank could not load %s (see its "
                  "message); nothing was changed",
                  path);
  if (st == SHARC_OK) {
    for (int u = 0; u < nu; u++)
      for (int s = 0; s < nstates(e); s++) {
        float *dst = state_ptr(&e->units[u], s);
        size_t bytes = e->units[u].lay.slice * sizeof(float);
        sharc_status_t s3 = SHARC_OK;
        if (s < states)
          s3 = eng_copy(e, dst, tmp[u * 3 + s], bytes);
        else if (eng_at(e, MEM_OPTIM) == AT_DEV) /* another optimizer's */
          s3 = dev_zero(&e->dv, dst, bytes);     /* state: start it afresh */
        else
          memset(dst, 0, bytes);
        if (s3 != SHARC_OK && st == SHARC_OK)
          st = s3;
      }
    e->steps = m.steps;
    e->opt_steps = states == m.states ? m.optim_steps : 0;
    if (st != SHARC_OK) /* a device copy failed after the ranks agreed: */
      e->failed = 1;    /* this rank is half loaded, its peers are not */
  }
  for (int i = 0; tmp && i < nu * 3; i++)
    free(tmp[i]);
  free(tmp);
  ckpt_meta_free(&m);
  return st;
}
