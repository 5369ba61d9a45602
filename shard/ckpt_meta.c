/*
 * ckpt_meta.c - the checkpoint metadata text format (see ckpt_meta.h):
 *
 *   sharc-checkpoint 1
 *   kind sharded            (or full)
 *   model mlp
 *   strategy full
 *   world 4
 *   shards 4
 *   states 3
 *   optim adamw
 *   steps 20
 *   optim_steps 20
 *   lr 0.001
 *   seed 7
 *   units 2
 *   unit fc1 100480 2      (name, elements, tensors)
 *   tensor weight 2 128 784
 *   tensor bias 1 128
 *   ...
 *   files 4
 *   sum 0 89abcdef01234567  (FNV-1a 64 of shard-0.bin)
 *   ...
 *   end
 */
#include "ckpt_meta.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t ckpt_fnv(uint64_t h, const void *p, size_t len) {
  const unsigned char *b = p;
  for (size_t i = 0; i < len; i++) {
    h ^= b[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

void ckpt_meta_free(ckpt_meta_t *m) {
  free(m->units);
  free(m->file_sums);
  memset(m, 0, sizeof *m);
}

size_t ckpt_unit_slice(const ckpt_meta_t *m, int u) {
  size_t n = m->units[u].numel, s = (size_t)m->shards;
  return (n + s - 1) / s;
}

uint64_t ckpt_unit_offset(const ckpt_meta_t *m, int u) {
  uint64_t off = 0;
  for (int i = 0; i < u; i++)
    off += (uint64_t)m->states *
           (m->full ? m->units[i].numel : ckpt_unit_slice(m, i)) *
           sizeof(float);
  return off;
}

uint64_t ckpt_file_bytes(const ckpt_meta_t *m) {
  return ckpt_unit_offset(m, m->nunits);
}

/* ---- parsing --------------------------------------------------------------
 */

typedef struct {
  const char *p, *end;
  int line;
  char buf[512];
  char *err;
  size_t errlen;
} rd_t;

static int fail(rd_t *r, const char *fmt, ...) {
  va_list ap;
  int n = snprintf(r->err, r->errlen, "checkpoint metadata line %d: ", r->line);
  va_start(ap, fmt);
  if (n >= 0 && (size_t)n < r->errlen)
    vsnprintf(r->err + n, r->errlen - (size_t)n, fmt, ap);
  va_end(ap);
  return -1;
}

/* Reads the next line into r->buf; -1 at the end or on an overlong line. */
static int next_line(rd_t *r) {
  if (r->p >= r->end)
    return fail(r, "the file ends early (no 'end' line); it is truncated");
  const char *nl = memchr(r->p, '\n', (size_t)(r->end - r->p));
  size_t n = nl ? (size_t)(nl - r->p) : (size_t)(r->end - r->p);
  r->line++;
  if (n >= sizeof r->buf)
    return fail(r, "longer than %zu bytes", sizeof r->buf - 1);
  memcpy(r->buf, r->p, n);
  r->buf[n] = '\0';
  if (memchr(r->buf, '\0', n))
    return fail(r, "contains a NUL byte");
  r->p += n + (nl ? 1 : 0);
  return 0;
}

/* "key value": checks the key, returns the value text. */
static const char *keyed(rd_t *r, const char *key) {
  if (next_line(r) != 0)
    return NULL;
  size_t k = strlen(key);
  if (strncmp(r->buf, key, k) != 0 || r->buf[k] != ' ') {
    fail(r, "expected '%s <value>', found '%.60s'", key, r->buf);
    return NULL;
  }
  return r->buf + k + 1;
}

static int get_u64(rd_t *r, const char *key, uint64_t lo, uint64_t hi,
                   uint64_t *v) {
  const char *s = keyed(r, key);
  if (!s)
    return -1;
  char *e;
  unsigned long long x = strtoull(s, &e, 10);
  if (e == s || *e || s[0] == '-' || x < lo || x > hi)
    return fail(r, "%s '%.40s' is not an integer in %llu..%llu", key, s,
                (unsigned long long)lo, (unsigned long long)hi);
  *v = x;
  return 0;
}

static int get_int(rd_t *r, const char *key, int lo, int hi, int *v) {
  uint64_t x;
  if (get_u64(r, key, (uint64_t)lo, (uint64_t)hi, &x) != 0)
    return -1;
  *v = (int)x;
  return 0;
}

static int get_word(rd_t *r, const char *key, char *out, size_t n) {
  const char *s = keyed(r, key);
  if (!s)
    return -1;
  size_t len = strlen(s);
  if (len == 0 || len >= n || strpbrk(s, " \t\r"))
    return fail(r, "%s '%.40s' must be one word of 1..%zu characters", key, s,
                n - 1);
  memcpy(out, s, len + 1);
  return 0;
}

/* Splits r->buf into at most max words; returns their number. */
static int words(char *s, char **w, int max) {
  int n = 0;
  for (char *t = strtok(s, " "); t; t = strtok(NULL, " ")) {
    if (n == max)
      return max + 1;
    w[n++] = t;
  }
  return n;
}

static int parse_size(const char *s, size_t lo, size_t hi, size_t *v) {
  char *e;
  unsigned long long x = strtoull(s, &e, 10);
  if (e == s || *e || s[0] == '-' || x < lo || x > hi)
    return -1;
  *v = (size_t)x;
  return 0;
}

static int parse_unit(rd_t *r, ckpt_unit_t *u) {
  char *w[8];
  if (next_line(r) != 0)
    return -1;
  size_t nt;
  if (words(r->buf, w, 4) != 4 || strcmp(w[0], "unit") != 0 ||
      strlen(w[1]) >= CKPT_NAME ||
      parse_size(w[2], 1, (size_t)1 << 40, &u->numel) != 0 ||
      parse_size(w[3], 1, SHARC_UNIT_MAX_PARAMS, &nt) != 0)
    return fail(r, "expected 'unit <name> <elements 1..2^40> <tensors 1..%d>'",
                SHARC_UNIT_MAX_PARAMS);
  strcpy(u->name, w[1]);
  u->ntensors = (int)nt;
  size_t total = 0;
  for (int k = 0; k < u->ntensors; k++) {
    ckpt_tensor_t *t = &u->tensors[k];
    if (next_line(r) != 0)
      return -1;
    int n = words(r->buf, w, 3 + SHARC_TENSOR_MAX_DIMS);
    size_t nd;
    if (n < 4 || n > 3 + SHARC_TENSOR_MAX_DIMS || strcmp(w[0], "tensor") != 0 ||
        strlen(w[1]) >= CKPT_NAME ||
        parse_size(w[2], 1, SHARC_TENSOR_MAX_DIMS, &nd) != 0 ||
        (int)nd != n - 3)
      return fail(r, "expected 'tensor <name> <ndim 1..%d> <dims...>'",
                  SHARC_TENSOR_MAX_DIMS);
    strcpy(t->name, w[1]);
    t->ndim = (int)nd;
    size_t count = 1;
    for (int d = 0; d < t->ndim; d++) {
      if (parse_size(w[3 + d], 1, (size_t)1 << 40, &t->shape[d]) != 0 ||
          count > ((size_t)1 << 40) / t->shape[d])
        return fail(r,
                    "tensor '%s': dimension %d is not in 1..2^40 or the "
                    "tensor is too large",
                    t->name, d);
      count *= t->shape[d];
    }
    total += count;
    if (total > u->numel)
      break;
  }
  if (total != u->numel)
    return fail(r, "unit '%s' says %zu elements but its tensors hold %zu",
                u->name, u->numel, total);
  return 0;
}

int ckpt_meta_parse(const char *text, size_t len, ckpt_meta_t *m, char *err,
                    size_t errlen) {
  memset(m, 0, sizeof *m);
  rd_t r = {.p = text, .end = text + len, .err = err, .errlen = errlen};
  char kind[16];
  uint64_t v;
  if (next_line(&r) != 0)
    return -1;
  if (strcmp(r.buf, "sharc-checkpoint 1") != 0)
    return fail(&r,
                "not a sharc checkpoint (expected 'sharc-checkpoint 1', "
                "found '%.40s')",
                r.buf);
  if (get_word(&r, "kind", kind, sizeof kind) != 0)
    return -1;
  if (strcmp(kind, "sharded") && strcmp(kind, "full"))
    return fail(&r, "kind '%s'; expected sharded or full", kind);
  m->full = strcmp(kind, "full") == 0;
  if (get_word(&r, "model", m->model, sizeof m->model) != 0 ||
      get_word(&r, "strategy", m->strategy, sizeof m->strategy) != 0 ||
      get_int(&r, "world", 1, CKPT_MAX_FILES, &m->world) != 0 ||
      get_int(&r, "shards", 1, CKPT_MAX_FILES, &m->shards) != 0 ||
      get_int(&r, "states", 1, 3, &m->states) != 0 ||
      get_word(&r, "optim", m->optim, sizeof m->optim) != 0 ||
      get_u64(&r, "steps", 0, UINT64_MAX / 2, &m->steps) != 0 ||
      get_u64(&r, "optim_steps", 0, UINT64_MAX / 2, &m->optim_steps) != 0)
    return -1;
  if (strcmp(m->optim, "sgd") && strcmp(m->optim, "adamw"))
    return fail(&r, "optim '%s'; expected sgd or adamw", m->optim);
  const char *s = keyed(&r, "lr");
  if (!s)
    return -1;
  char *e;
  m->lr = strtod(s, &e);
  if (e == s || *e || !(m->lr >= 0 && m->lr < 1e9))
    return fail(&r, "lr '%.40s' is not a number in [0, 1e9)", s);
  if (get_u64(&r, "seed", 0, UINT64_MAX, &m->seed) != 0 ||
      get_u64(&r, "units", 1, CKPT_MAX_UNITS, &v) != 0)
    return -1;
  m->nunits = (int)v;
  m->units = calloc((size_t)m->nunits, sizeof *m->units);
  if (!m->units)
    return fail(&r, "out of memory for %d units", m->nunits);
  for (int u = 0; u < m->nunits; u++)
    if (parse_unit(&r, &m->units[u]) != 0)
      return -1;
  if (get_int(&r, "files", 1, CKPT_MAX_FILES, &m->nfiles) != 0)
    return -1;
  if (m->nfiles != (m->full ? 1 : m->shards))
    return fail(&r, "files %d, but a %s checkpoint of %d shards has %d",
                m->nfiles, kind, m->shards, m->full ? 1 : m->shards);
  m->file_sums = calloc((size_t)m->nfiles, sizeof *m->file_sums);
  if (!m->file_sums)
    return fail(&r, "out of memory");
  for (int f = 0; f < m->nfiles; f++) {
    if (next_line(&r) != 0)
      return -1;
    char *w[4];
    size_t idx;
    if (words(r.buf, w, 3) != 3 || strcmp(w[0], "sum") != 0 ||
        parse_size(w[1], (size_t)f, (size_t)f, &idx) != 0 ||
        strlen(w[2]) != 16 || strspn(w[2], "0123456789abcdef") != 16)
      return fail(&r, "expected 'sum %d <16 hex digits>'", f);
    m->file_sums[f] = strtoull(w[2], NULL, 16);
  }
  if (next_line(&r) != 0)
    return -1;
  if (strcmp(r.buf, "end") != 0)
    return fail(&r, "expected 'end', found '%.40s'", r.buf);
  return 0;
}

/* ---- printing ----------------------------------------------------------- */

typedef struct {
  char *p;
  size_t len, cap;
  int bad;
} sb_t;

static void put(sb_t *b, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->bad = 1;
      return;
    }
    if (b->len + (size_t)n < b->cap) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = (b->cap + (size_t)n + 1) * 2;
    char *q = realloc(b->p, cap);
    if (!q) {
      b->bad = 1;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
}

int ckpt_meta_print(const ckpt_meta_t *m, char **out, size_t *len) {
  sb_t b = {.p = malloc(1024), .cap = 1024};
  if (!b.p)
    return -1;
  put(&b, "sharc-checkpoint 1\nkind %s\nmodel %s\nstrategy %s\n",
      m->full ? "full" : "sharded", m->model, m->strategy);
  put(&b, "world %d\nshards %d\nstates %d\noptim %s\nsteps %llu\n", m->world,
      m->shards, m->states, m->optim, (unsigned long long)m->steps);
  put(&b, "optim_steps %llu\n", (unsigned long long)m->optim_steps);
  put(&b, "lr %.17g\nseed %llu\nunits %d\n", m->lr, (unsigned long long)m->seed,
      m->nunits);
  for (int u = 0; u < m->nunits && !b.bad; u++) {
    const ckpt_unit_t *U = &m->units[u];
    put(&b, "unit %s %zu %d\n", U->name, U->numel, U->ntensors);
    for (int k = 0; k < U->ntensors; k++) {
      put(&b, "tensor %s %d", U->tensors[k].name, U->tensors[k].ndim);
      for (int d = 0; d < U->tensors[k].ndim; d++)
        put(&b, " %zu", U->tensors[k].shape[d]);
      put(&b, "\n");
    }
  }
  put(&b, "files %d\n", m->nfiles);
  for (int f = 0; f < m->nfiles; f++)
    put(&b, "sum %d %016llx\n", f, (unsigned long long)m->file_sums[f]);
  put(&b, "end\n");
  if (b.bad) {
    free(b.p);
    return -1;
  }
  *out = b.p;
  *len = b.len;
  return 0;
}
