/*
 * text.h - byte-token training windows from any text file: the file is
 * read whole, each byte is a token (V = 256), and sample i of a run is the
 * window of T+1 bytes at an offset drawn from (seed, i) alone, so every
 * rank draws the same sample for the same global index whatever the world
 * size. x is the window's first T bytes, y the same shifted by one (the
 * next byte to predict).
 *
 * A held-out split (text_holdout) keeps the file's last bytes out of the
 * training windows; evaluation reads them as consecutive windows
 * (text_eval_window), each of its tokens predicted once.
 */
#ifndef SHARC_MODELS_TEXT_H
#define SHARC_MODELS_TEXT_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  size_t len;       /* bytes */
  size_t train_len; /* training windows lie in [0, train_len): len, or less
                       after text_holdout; the rest is held out */
  uint8_t *bytes;   /* the whole file */
  char *path;       /* as given to text_load, for messages */
} text_t;

/* Reads the file at path into t (owned by t; free with text_free).
 * Returns 0, or -1 with a message naming the file in err (missing,
 * unreadable, or shorter than 2 bytes: no window of any T fits). On
 * failure t is left empty (text_free is still safe). */
int text_load(const char *path, text_t *t, char *err, size_t errlen);

/* Checks that t holds at least one window for context T (T+1 bytes).
 * Returns 0, or -1 with a message naming the file and both sizes. */
int text_check(const text_t *t, int T, char *err, size_t errlen);

/* Holds out the last fraction frac (0 <= frac < 1) of t's bytes from
 * training: at least T+1 bytes (one evaluation window) when frac > 0, and
 * the training part keeps at least T+1 bytes. frac 0 holds out nothing.
 * Returns 0, or -1 with a message naming the file and the sizes when the
 * text is too short for both parts. */
int text_holdout(text_t *t, double frac, int T, char *err, size_t errlen);

/* Evaluation windows of context T in the held-out part: consecutive and
 * disjoint in their predicted tokens (window i starts at train_len + i*T),
 * so each held-out byte after the first is predicted once. */
uint64_t text_eval_windows(const text_t *t, int T);

/* Evaluation window i (< text_eval_windows) into x and y (T each). */
void text_eval_window(const text_t *t, int T, uint64_t i, int32_t *x,
                      int32_t *y);

/* Frees what text_load allocated and empties t. */
void text_free(text_t *t);

/* Training windows of context T: distinct start offsets in the training
 * part (0 when it is shorter than T+1 bytes). */
uint64_t text_windows(const text_t *t, int T);

/* Sample global_index: x (T) and y (T) int32 tokens in [0, 256), from a
 * start offset that is a pure function of (seed, global_index, len, T).
 * A text shorter than T+1 bytes (text_check fails) wraps around instead
 * of reading past its end; an empty one gives zeros. Thread safe. */
void text_window(const text_t *t, int T, uint64_t seed, uint64_t global_index,
                 int32_t *x, int32_t *y);

/* n consecutive samples first .. first+n-1 into x and y, (n,T) each: the
 * x and y of a sharc_batch_t whose first is first. */
void text_batch(const text_t *t, int T, uint64_t seed, uint64_t first, int n,
                int32_t *x, int32_t *y);

#endif /* SHARC_MODELS_TEXT_H */
