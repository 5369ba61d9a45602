/*
 * mnist.h - reads the Fashion-MNIST (or MNIST) IDX files, gzip-compressed,
 * into normalised float images and int32 labels, and draws the epoch's
 * sample order every rank agrees on.
 *
 * Files in the directory: train-images-idx3-ubyte.gz,
 * train-labels-idx1-ubyte.gz (train = 1) or t10k-images-idx3-ubyte.gz,
 * t10k-labels-idx1-ubyte.gz (train = 0). The Debian package
 * dataset-fashion-mnist installs them in MNIST_DEFAULT_DIR.
 */
#ifndef SHARC_MODELS_MNIST_H
#define SHARC_MODELS_MNIST_H

#include <stddef.h>
#include <stdint.h>

#define MNIST_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"
/* Fashion-MNIST training-set pixel mean and standard deviation (of
 * pixel/255): images are stored as (pixel/255 - MEAN) / STD. */
#define MNIST_MEAN 0.2860
#define MNIST_STD 0.3530
#define MNIST_CLASSES 10

typedef struct {
  int n, rows, cols;
  float *images;   /* n*rows*cols, row-major per image, normalised */
  int32_t *labels; /* n, in 0..MNIST_CLASSES-1 */
} mnist_set_t;

/* Loads the training (train = 1) or test set from dir (NULL: the default
 * directory). Checks the magic numbers (0x00000803 images, 0x00000801
 * labels), that dimensions are sane and the counts agree, that labels are
 * in range and that each file holds exactly its items (neither truncated
 * nor followed by more data). Returns 0 with *out filled (free it with
 * mnist_free), or -1 with *out zeroed and a message in err naming the file
 * and what is wrong. Blocking file I/O; thread safe. */
int mnist_load(const char *dir, int train, mnist_set_t *out, char *err,
               size_t errlen);

/* Frees what mnist_load allocated and zeroes *s (a zeroed set is fine). */
void mnist_free(mnist_set_t *s);

/* perm (n) = a permutation of 0..n-1, a pure function of (seed, epoch, n):
 * every rank draws the same order. Global batch b of the epoch is
 * perm[b*B, (b+1)*B); each rank takes a contiguous part of it
 * (mnist_rank_part). */
void mnist_epoch_order(uint64_t seed, uint64_t epoch, int n, int32_t *perm);

/* Rank's contiguous part [*first, *first + *count) of a global batch of
 * batch samples over nranks ranks: the first batch % nranks ranks take one
 * sample more. A rank outside 0..nranks-1 gets an empty part. */
void mnist_rank_part(int batch, int nranks, int rank, int *first, int *count);

#endif /* SHARC_MODELS_MNIST_H */
