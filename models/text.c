/*
 * text.c - byte-token windows from a text file (see text.h).
 */
#include "text.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int text_load(const char *path, text_t *t, char *err, size_t errlen) {
  memset(t, 0, sizeof *t);
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "text: cannot open '%s': %s", path, strerror(errno));
    return -1;
  }
  size_t cap = 1 << 16, len = 0;
  uint8_t *buf = malloc(cap);
  /* read to the end rather than trust the size: pipes and /proc work too */
  while (buf) {
    len += fread(buf + len, 1, cap - len, f);
    if (len < cap)
      break;
    uint8_t *grown = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
    if (!grown) {
      free(buf);
      buf = NULL;
    } else {
      buf = grown;
      cap *= 2;
    }
  }
  int bad = !buf || ferror(f);
  int e = errno;
  fclose(f);
  if (bad) {
    snprintf(err, errlen, "text: cannot read '%s': %s", path,
             buf ? strerror(e) : "out of memory");
    free(buf);
    return -1;
  }
  if (len < 2) {
    snprintf(err, errlen,
             "text: '%s' has %zu bytes; a window needs at least 2 (T+1 for "
             "context T)",
             path, len);
    free(buf);
    return -1;
  }
  t->path = strdup(path);
  if (!t->path) {
    snprintf(err, errlen, "text: out of memory loading '%s'", path);
    free(buf);
    return -1;
  }
  t->bytes = buf;
  t->len = len;
  t->train_len = len;
  return 0;
}

int text_check(const text_t *t, int T, char *err, size_t errlen) {
  if (T < 1 || text_windows(t, T) == 0) {
    snprintf(err, errlen,
             "text: '%s' has %zu bytes, too short for context %d (needs %lld "
             "bytes); use a longer file or a smaller ctx",
             t->path ? t->path : "(not loaded)", t->len, T, (long long)T + 1);
    return -1;
  }
  return 0;
}

void text_free(text_t *t) {
  free(t->bytes);
  free(t->path);
  memset(t, 0, sizeof *t);
}

uint64_t text_windows(const text_t *t, int T) {
  if (T < 1 || t->train_len < (size_t)T + 1)
    return 0;
  return (uint64_t)(t->train_len - (size_t)T);
}

int text_holdout(text_t *t, double frac, int T, char *err, size_t errlen) {
  t->train_len = t->len;
  if (frac <= 0)
    return 0;
  size_t need = (size_t)T + 1, held = (size_t)((double)t->len * frac);
  if (held < need)
    held = need;
  if (T < 1 || frac >= 1 || t->len < held + need) {
    snprintf(err, errlen,
             "text: '%s' has %zu bytes, too short to hold out %.3g of it and "
             "keep a window of context %d (%zu bytes) on each side; use a "
             "longer file, a smaller ctx or --holdout 0",
             t->path ? t->path : "(not loaded)", t->len, frac, T, need);
    return -1;
  }
  t->train_len = t->len - held;
  return 0;
}

uint64_t text_eval_windows(const text_t *t, int T) {
  if (T < 1 || t->len < t->train_len + (size_t)T + 1)
    return 0;
  return (uint64_t)((t->len - t->train_len - 1) / (size_t)T);
}

void text_eval_window(const text_t *t, int T, uint64_t i, int32_t *x,
                      int32_t *y) {
  size_t at = t->train_len + (size_t)i * (size_t)T;
  for (int k = 0; k < T; k++) {
    x[k] = t->bytes[at + (size_t)k];
    y[k] = t->bytes[at + (size_t)k + 1];
  }
}

/* splitmix64's finaliser: a window's start is a hash of the seed and the
 * sample's global index, so every world size reads the same windows. */
static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void text_window(const text_t *t, int T, uint64_t seed, uint64_t global_index,
                 int32_t *x, int32_t *y) {
  if (T < 1)
    return;
  if (t->len == 0) {
    memset(x, 0, (size_t)T * sizeof *x);
    memset(y, 0, (size_t)T * sizeof *y);
    return;
  }
  uint64_t h = mix(mix(seed) + global_index);
  uint64_t starts = text_windows(t, T);
  size_t n = t->train_len ? t->train_len : t->len;
  size_t at = (size_t)(h % (starts ? starts : n));
  for (int i = 0; i < T; i++) {
    /* the modulo only bites when the text is shorter than the window */
    x[i] = t->bytes[(at + (size_t)i) % n];
    y[i] = t->bytes[(at + (size_t)i + 1) % n];
  }
}

void text_batch(const text_t *t, int T, uint64_t seed, uint64_t first, int n,
                int32_t *x, int32_t *y) {
  for (int b = 0; b < n; b++)
    text_window(t, T, seed, first + (uint64_t)b, x + (size_t)b * (size_t)T,
                y + (size_t)b * (size_t)T);
}
