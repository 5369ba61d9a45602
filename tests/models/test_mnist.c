/*
 * test_mnist.c - checks the IDX reader and the epoch order (models/mnist.c):
 *  - malformed files written to a temporary directory (wrong magic on
 *    either file, truncated header or payload, count mismatch, missing
 *    file or directory, trailing data, a label out of range, insane
 *    dimensions, a corrupted gzip stream) each fail with a message naming
 *    the file and the fault; a small valid pair loads with the documented
 *    normalisation;
 *  - mnist_epoch_order is a permutation, deterministic, and differs
 *    between epochs and seeds; mnist_rank_part tiles a batch;
 *  - the installed Fashion-MNIST (MNIST_DEFAULT_DIR): the 10k test set and
 *    the 60k training set have the right counts, dimensions, labels
 *    (1000 / 6000 per class) and normalisation (training mean 0, standard
 *    deviation 1). Without it the rest still runs and the test exits 77
 *    (skipped) with a line saying why.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "mnist.h"
#include "unit/expect.h"

static char tmpdir[] = "/tmp/test_mnist.XXXXXX";

/* Writes dir/name gzip-compressed: the big-endian header words, then
 * payload bytes (value i*37+salt mod 256, or 'label' values mod 10). */
static void write_idx(const char *name, const uint32_t *hdr, int nhdr,
                      size_t payload, int labels) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", tmpdir, name);
  gzFile gz = gzopen(path, "wb");
  if (!gz) {
    perror(path);
    exit(1);
  }
  for (int i = 0; i < nhdr; i++) {
    unsigned char b[4] = {(unsigned char)(hdr[i] >> 24),
                          (unsigned char)(hdr[i] >> 16),
                          (unsigned char)(hdr[i] >> 8), (unsigned char)hdr[i]};
    gzwrite(gz, b, 4);
  }
  for (size_t i = 0; i < payload; i++) {
    unsigned char v = (unsigned char)(labels ? i % 10 : (i * 37 + 11) % 256);
    gzwrite(gz, &v, 1);
  }
  gzclose(gz);
}

#define IMG "t10k-images-idx3-ubyte.gz"
#define LAB "t10k-labels-idx1-ubyte.gz"

/* A valid pair of n images of r x c. */
static void write_pair(uint32_t n, uint32_t r, uint32_t c) {
  uint32_t ih[4] = {0x803, n, r, c}, lh[2] = {0x801, n};
  write_idx(IMG, ih, 4, (size_t)n * r * c, 0);
  write_idx(LAB, lh, 2, n, 1);
}

static void remove_pair(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", tmpdir, IMG);
  unlink(path);
  snprintf(path, sizeof path, "%s/%s", tmpdir, LAB);
  unlink(path);
}

/* Loading tmpdir must fail, the message naming `file` and holding `what`. */
static void expect_fail(const char *label, const char *file, const char *what) {
  mnist_set_t s;
  char err[512] = "";
  int rc = mnist_load(tmpdir, 0, &s, err, sizeof err);
  EXPECT(rc == -1, "%s: loaded (rc %d)", label, rc);
  EXPECT(s.images == NULL && s.labels == NULL && s.n == 0,
         "%s: set not zeroed on failure", label);
  EXPECT(strstr(err, file) != NULL, "%s: message does not name %s: %s", label,
         file, err);
  EXPECT(strstr(err, what) != NULL, "%s: message lacks '%s': %s", label, what,
         err);
  printf("  %-22s -> %s\n", label, err);
  if (rc == 0)
    mnist_free(&s);
}

static void test_malformed(void) {
  EXPECT(mkdtemp(tmpdir) != NULL, "mkdtemp");
  printf("malformed files:\n");

  /* a valid small pair: loads, normalised as documented */
  write_pair(5, 4, 3);
  mnist_set_t s;
  char err[512] = "";
  EXPECT(mnist_load(tmpdir, 0, &s, err, sizeof err) == 0, "valid pair: %s",
         err);
  if (s.images) {
    EXPECT(s.n == 5 && s.rows == 4 && s.cols == 3, "n %d dims %d x %d", s.n,
           s.rows, s.cols);
    for (int i = 0; i < 5 * 12; i++) {
      double want = (((i * 37 + 11) % 256) / 255.0 - MNIST_MEAN) / MNIST_STD;
      EXPECT(fabs(s.images[i] - want) < 1e-6, "pixel %d %g, expected %g", i,
             s.images[i], want);
    }
    for (int i = 0; i < 5; i++)
      EXPECT(s.labels[i] == i % 10, "label %d = %d", i, s.labels[i]);
    mnist_free(&s);
    EXPECT(s.images == NULL && s.n == 0, "mnist_free zeroes");
  }

  uint32_t ih[4] = {0x803, 5, 4, 3}, lh[2] = {0x801, 5};
  ih[0] = 0x801;
  write_idx(IMG, ih, 4, 60, 0);
  expect_fail("images magic", IMG, "magic number 0x00000801");
  ih[0] = 0x803;
  write_idx(IMG, ih, 4, 60, 0);
  lh[0] = 0x803;
  write_idx(LAB, lh, 2, 5, 1);
  expect_fail("labels magic", LAB, "magic number 0x00000803");
  lh[0] = 0x801;

  write_idx(IMG, ih, 2, 0, 0);
  write_idx(LAB, lh, 2, 5, 1);
  expect_fail("truncated header", IMG, "truncated header");
  write_idx(IMG, ih, 4, 59, 0);
  expect_fail("truncated images", IMG, "truncated: 59 of 60");
  write_idx(IMG, ih, 4, 60, 0);
  write_idx(LAB, lh, 2, 4, 1);
  expect_fail("truncated labels", LAB, "truncated: 4 of 5");
  write_idx(IMG, ih, 4, 61, 0);
  write_idx(LAB, lh, 2, 5, 1);
  expect_fail("trailing data", IMG, "more data");
  write_idx(IMG, ih, 4, 60, 0);
  lh[1] = 4;
  write_idx(LAB, lh, 2, 4, 1);
  expect_fail("count mismatch", LAB, "4 labels but");
  lh[1] = 5;
  /* a label above 9 */
  {
    uint32_t bad[2] = {0x801, 11};
    uint32_t ih11[4] = {0x803, 11, 4, 3};
    write_idx(IMG, ih11, 4, 11 * 12, 0);
    write_idx(LAB, bad, 2, 11, 0); /* values (i*37+11) % 256: 11 first */
    expect_fail("label out of range", LAB, "outside 0..9");
  }
  uint32_t zero_rows[4] = {0x803, 5, 0, 3};
  write_idx(IMG, zero_rows, 4, 0, 0);
  write_idx(LAB, lh, 2, 5, 1);
  expect_fail("zero rows", IMG, "header claims 5 images of 0 x 3");
  uint32_t huge[4] = {0x803, 50000000, 28, 28};
  write_idx(IMG, huge, 4, 1000, 0);
  lh[1] = 50000000;
  write_idx(LAB, lh, 2, 1000, 1);
  expect_fail("count beyond the data", IMG, "truncated: 1000 of");
  lh[1] = 5;

  /* a corrupted gzip stream: flip bytes in the compressed middle */
  write_pair(200, 28, 28);
  {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, IMG);
    FILE *f = fopen(path, "r+b");
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    for (long off = len / 3; off < len / 3 + 16; off++) {
      fseek(f, off, SEEK_SET);
      int ch = fgetc(f);
      fseek(f, off, SEEK_SET);
      fputc(ch ^ 0x5a, f);
    }
    fclose(f);
    expect_fail("corrupted gzip", IMG, ": ");
  }

  remove_pair();
  write_pair(5, 4, 3);
  {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, LAB);
    unlink(path);
  }
  expect_fail("missing labels", LAB, "cannot open");
  remove_pair();
  expect_fail("missing images", IMG, "cannot open");

  /* a missing directory other than the default: no install hint */
  char missing[600];
  snprintf(missing, sizeof missing, "%s/nowhere", tmpdir);
  int rc = mnist_load(missing, 1, &s, err, sizeof err);
  EXPECT(rc == -1 && strstr(err, "train-images-idx3-ubyte.gz") &&
             !strstr(err, "install"),
         "missing dir: rc %d: %s", rc, err);
  rmdir(tmpdir);
}

static void test_order(void) {
  enum { N = 1000 };
  static int32_t a[N], b[N], c[N], e[N];
  mnist_epoch_order(42, 0, N, a);
  mnist_epoch_order(42, 0, N, b);
  mnist_epoch_order(42, 1, N, c);
  mnist_epoch_order(43, 0, N, e);
  static int seen[N];
  int ok = 1, fixed = 0;
  for (int i = 0; i < N; i++) {
    if (a[i] < 0 || a[i] >= N || seen[a[i]]++)
      ok = 0;
    fixed += a[i] == i;
  }
  EXPECT(ok, "epoch order is not a permutation of 0..%d", N - 1);
  EXPECT(fixed < 10, "%d fixed points: not shuffled", fixed);
  EXPECT(memcmp(a, b, sizeof a) == 0, "same seed and epoch, other order");
  EXPECT(memcmp(a, c, sizeof a) != 0, "epoch 1 repeats epoch 0");
  EXPECT(memcmp(a, e, sizeof a) != 0, "seed 43 repeats seed 42");
  int32_t one = -1;
  mnist_epoch_order(1, 1, 1, &one);
  EXPECT(one == 0, "n = 1: %d", one);
  mnist_epoch_order(1, 1, 0, NULL);

  static const int batches[] = {0, 1, 7, 64, 65, 100};
  for (size_t t = 0; t < sizeof batches / sizeof *batches; t++)
    for (int nr = 1; nr <= 5; nr++) {
      int next = 0, lo = 1 << 30, hi = 0;
      for (int r = 0; r < nr; r++) {
        int f, cnt;
        mnist_rank_part(batches[t], nr, r, &f, &cnt);
        EXPECT(f == next, "batch %d ranks %d rank %d starts at %d, not %d",
               batches[t], nr, r, f, next);
        next = f + cnt;
        lo = cnt < lo ? cnt : lo;
        hi = cnt > hi ? cnt : hi;
      }
      EXPECT(next == batches[t] && hi - lo <= 1,
             "batch %d over %d ranks: covers %d, sizes %d..%d", batches[t], nr,
             next, lo, hi);
    }
  int f = 5, cnt = 5;
  mnist_rank_part(10, 2, 2, &f, &cnt);
  EXPECT(f == 0 && cnt == 0, "rank outside: %d %d", f, cnt);
}

/* The installed set: counts, dimensions, labels, normalisation. */
static void check_real(int train) {
  mnist_set_t s;
  char err[512] = "";
  int want_n = train ? 60000 : 10000;
  int rc = mnist_load(NULL, train, &s, err, sizeof err);
  EXPECT(rc == 0, "load %s: %s", train ? "train" : "test", err);
  if (rc != 0)
    return;
  EXPECT(s.n == want_n && s.rows == 28 && s.cols == 28, "n %d dims %d x %d",
         s.n, s.rows, s.cols);
  int per[MNIST_CLASSES] = {0}, bad = 0;
  for (int i = 0; i < s.n; i++) {
    if (s.labels[i] < 0 || s.labels[i] >= MNIST_CLASSES)
      bad++;
    else
      per[s.labels[i]]++;
  }
  EXPECT(bad == 0, "%d labels out of range", bad);
  for (int k = 0; k < MNIST_CLASSES; k++)
    EXPECT(per[k] == want_n / MNIST_CLASSES, "class %d has %d samples", k,
           per[k]);
  double sum = 0, sq = 0, lo = 1e9, hi = -1e9;
  size_t np = (size_t)s.n * 784;
  for (size_t i = 0; i < np; i++) {
    sum += s.images[i];
    sq += (double)s.images[i] * s.images[i];
    lo = fmin(lo, s.images[i]);
    hi = fmax(hi, s.images[i]);
  }
  double mean = sum / (double)np, sd = sqrt(sq / (double)np - mean * mean);
  double tol = train ? 2e-3 : 2e-2; /* the constants are the train set's */
  EXPECT(fabs(mean) < tol, "normalised mean %g", mean);
  EXPECT(fabs(sd - 1) < tol, "normalised standard deviation %g", sd);
  EXPECT(fabs(lo + MNIST_MEAN / MNIST_STD) < 1e-6 &&
             fabs(hi - (1 - MNIST_MEAN) / MNIST_STD) < 1e-6,
         "range %g..%g", lo, hi);
  printf("%s set: %d images %dx%d, normalised mean %.4f sd %.4f\n",
         train ? "training" : "test", s.n, s.rows, s.cols, mean, sd);
  mnist_free(&s);
}

int main(void) {
  test_malformed();
  test_order();
  struct stat st;
  int have = stat(MNIST_DEFAULT_DIR, &st) == 0;
  if (have) {
    check_real(0);
    check_real(1);
  } else {
    mnist_set_t s;
    char err[512] = "";
    EXPECT(mnist_load(NULL, 0, &s, err, sizeof err) == -1 &&
               strstr(err, "install dataset-fashion-mnist"),
           "missing default dir: %s", err);
  }
  printf("test_mnist: %d passed, %d failed\n", passed, failed);
  if (failed)
    return 1;
  if (!have) {
    printf("test_mnist: SKIP real data: %s absent (install "
           "dataset-fashion-mnist)\n",
           MNIST_DEFAULT_DIR);
    return 77;
  }
  return 0;
}
