/*
 * mnist.c - IDX reader for (Fashion-)MNIST through zlib, and the epoch's
 * shuffled sample order (see mnist.h).
 *
 * IDX: a big-endian header (magic 0x00000803 for images: count, rows,
 * cols; 0x00000801 for labels: count), then one unsigned byte per pixel or
 * label. Payloads are read in growing chunks, so a header that claims more
 * items than the file holds fails as truncated instead of allocating what
 * it claims.
 */
#include "mnist.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define IDX_IMAGES 0x00000803u
#define IDX_LABELS 0x00000801u
#define MAX_ITEMS 100000000 /* sanity bounds on header fields */
#define MAX_SIDE 4096

typedef struct {
  gzFile gz;
  char path[4096];
  char *err;
  size_t errlen;
} idx_file_t;

static int fail(idx_file_t *f, const char *fmt, ...) {
  int k = snprintf(f->err, f->errlen, "mnist: %s: ", f->path);
  if (k >= 0 && (size_t)k < f->errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->err + k, f->errlen - (size_t)k, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* Reads up to len bytes; returns the count read (short at end of file) or
 * -1 with the message set on a read or decompression error. */
static long long read_some(idx_file_t *f, void *buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    size_t want = len - got > (1u << 30) ? (1u << 30) : len - got;
    int r = gzread(f->gz, (char *)buf + got, (unsigned)want);
    if (r < 0) {
      int zerr;
      const char *msg = gzerror(f->gz, &zerr);
      size_t plen = strlen(f->path);
      /* zlib prefixes the path, which fail() already names */
      if (strncmp(msg, f->path, plen) == 0 && strncmp(msg + plen, ": ", 2) == 0)
        msg += plen + 2;
      fail(f, "read failed: %s; the file is damaged, reinstall it",
           zerr == Z_ERRNO ? strerror(errno) : msg);
      return -1;
    }
    if (r == 0)
      break;
    got += (size_t)r;
  }
  return (long long)got;
}

static int open_idx(idx_file_t *f, const char *dir, const char *name,
                    int default_dir, char *err, size_t errlen) {
  f->err = err;
  f->errlen = errlen;
  snprintf(f->path, sizeof f->path, "%s/%s", dir, name);
  errno = 0;
  f->gz = gzopen(f->path, "rb");
  if (!f->gz)
    return fail(f, "cannot open: %s%s", errno ? strerror(errno) : "no memory",
                default_dir ? "; install dataset-fashion-mnist (or pass the "
                              "directory that holds the IDX files)"
                            : "");
  return 0;
}

/* Reads the header: magic, then ndims-1 more big-endian u32 fields. */
static int read_header(idx_file_t *f, uint32_t magic, int nfields,
                       uint32_t *fields) {
  unsigned char h[16];
  size_t len = 4 * (size_t)(nfields + 1);
  long long r = read_some(f, h, len);
  if (r < 0)
    return -1;
  if ((size_t)r < len)
    return fail(f, "truncated header: %lld of %zu bytes", r, len);
  for (int i = 0; i <= nfields; i++) {
    uint32_t v = (uint32_t)h[4 * i] << 24 | (uint32_t)h[4 * i + 1] << 16 |
                 (uint32_t)h[4 * i + 2] << 8 | h[4 * i + 3];
    if (i == 0 && v != magic)
      return fail(f,
                  "magic number 0x%08x, expected 0x%08x (%s); not an IDX "
                  "file of this kind",
                  v, magic, magic == IDX_IMAGES ? "images" : "labels");
    if (i > 0)
      fields[i - 1] = v;
  }
  return 0;
}

/* Reads exactly len payload bytes into a new buffer (*out), growing it as
 * data arrives, then checks that nothing follows. */
static int read_payload(idx_file_t *f, size_t len, const char *what,
                        unsigned char **out) {
  size_t cap = 0, got = 0;
  unsigned char *buf = NULL;
  *out = NULL;
  while (got < len) {
    size_t next = cap ? cap * 2 : (size_t)1 << 20;
    if (next > len)
      next = len;
    unsigned char *nb = realloc(buf, next);
    if (!nb) {
      free(buf);
      return fail(f, "out of memory for %zu bytes of %s", len, what);
    }
    buf = nb;
    cap = next;
    long long r = read_some(f, buf + got, cap - got);
    if (r < 0) {
      free(buf);
      return -1;
    }
    got += (size_t)r;
    if (got < cap) {
      free(buf);
      return fail(f, "truncated: %zu of %zu bytes of %s", got, len, what);
    }
  }
  unsigned char extra;
  long long r = read_some(f, &extra, 1);
  if (r != 0) {
    free(buf);
    return r < 0 ? -1
                 : fail(f,
                        "more data after the %zu bytes of %s the header "
                        "declares",
                        len, what);
  }
  *out = buf;
  return 0;
}

int mnist_load(const char *dir, int train, mnist_set_t *out, char *err,
               size_t errlen) {
  const char *pre = train ? "train" : "t10k";
  int default_dir = !dir || strcmp(dir, MNIST_DEFAULT_DIR) == 0;
  char iname[64], lname[64];
  idx_file_t fi = {0}, fl = {0};
  unsigned char *pix = NULL, *lab = NULL;
  uint32_t ih[3], lh[1];
  int rc = -1;
  memset(out, 0, sizeof *out);
  if (!dir)
    dir = MNIST_DEFAULT_DIR;
  snprintf(iname, sizeof iname, "%s-images-idx3-ubyte.gz", pre);
  snprintf(lname, sizeof lname, "%s-labels-idx1-ubyte.gz", pre);

  if (open_idx(&fi, dir, iname, default_dir, err, errlen) != 0)
    goto done;
  if (read_header(&fi, IDX_IMAGES, 3, ih) != 0)
    goto done;
  if (ih[0] < 1 || ih[0] > MAX_ITEMS || ih[1] < 1 || ih[1] > MAX_SIDE ||
      ih[2] < 1 || ih[2] > MAX_SIDE) {
    fail(&fi,
         "header claims %u images of %u x %u; expected 1..%d images of "
         "1..%d pixels a side",
         ih[0], ih[1], ih[2], MAX_ITEMS, MAX_SIDE);
    goto done;
  }
  if (open_idx(&fl, dir, lname, default_dir, err, errlen) != 0)
    goto done;
  if (read_header(&fl, IDX_LABELS, 1, lh) != 0)
    goto done;
  if (lh[0] != ih[0]) {
    fail(&fl, "%u labels but %s holds %u images; the two files must match",
         lh[0], fi.path, ih[0]);
    goto done;
  }
  size_t npix = (size_t)ih[1] * ih[2], n = ih[0];
  if (read_payload(&fi, n * npix, "pixels", &pix) != 0 ||
      read_payload(&fl, n, "labels", &lab) != 0)
    goto done;
  for (size_t i = 0; i < n; i++)
    if (lab[i] >= MNIST_CLASSES) {
      fail(&fl, "label %u of item %zu is outside 0..%d", lab[i], i,
           MNIST_CLASSES - 1);
      goto done;
    }
  out->images = malloc(n * npix * sizeof(float));
  out->labels = malloc(n * sizeof(int32_t));
  if (!out->images || !out->labels) {
    fail(&fi, "out of memory for %zu images", n);
    mnist_free(out);
    goto done;
  }
  float lut[256];
  for (int v = 0; v < 256; v++)
    lut[v] = (float)((v / 255.0 - MNIST_MEAN) / MNIST_STD);
  for (size_t i = 0; i < n * npix; i++)
    out->images[i] = lut[pix[i]];
  for (size_t i = 0; i < n; i++)
    out->labels[i] = lab[i];
  out->n = (int)n;
  out->rows = (int)ih[1];
  out->cols = (int)ih[2];
  rc = 0;
done:
  free(lab);
  free(pix);
  if (fl.gz)
    gzclose(fl.gz);
  if (fi.gz)
    gzclose(fi.gz);
  return rc;
}

void mnist_free(mnist_set_t *s) {
  free(s->images);
  free(s->labels);
  memset(s, 0, sizeof *s);
}

/* splitmix64 step: the shuffle's generator. */
static uint64_t next64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [0, bound) without modulo bias (rejection). */
static uint64_t below(uint64_t *s, uint64_t bound) {
  uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t r;
  do
    r = next64(s);
  while (r >= limit);
  return r % bound;
}

void mnist_epoch_order(uint64_t seed, uint64_t epoch, int n, int32_t *perm) {
  uint64_t s = seed ^ 0x6a09e667f3bcc909ull, e = epoch;
  uint64_t k = next64(&s) ^ next64(&e);
  s = k;
  for (int i = 0; i < n; i++)
    perm[i] = i;
  /* Fisher-Yates from the top */
  for (int i = n - 1; i > 0; i--) {
    int j = (int)below(&s, (uint64_t)i + 1);
    int32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

void mnist_rank_part(int batch, int nranks, int rank, int *first, int *count) {
  if (nranks < 1 || rank < 0 || rank >= nranks || batch < 0) {
    *first = *count = 0;
    return;
  }
  int q = batch / nranks, r = batch % nranks;
  *count = q + (rank < r);
  *first = rank * q + (rank < r ? rank : r);
}
