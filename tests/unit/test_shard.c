/*
 * test_shard.c - the FSDP engine's pure logic: flat-buffer layout and
 * padding, each rank's slice, re-slicing overlaps, deterministic
 * initialisation, and the checkpoint metadata format (round trip and
 * refusal of malformed files).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../shard/ckpt_meta.h"
#include "../shard/layout.h"
#include "unit/expect.h"

static sharc_unit_spec_t unit2(size_t a, size_t b, size_t c) {
  sharc_unit_spec_t u = {.name = "u", .nparams = 2};
  u.params[0] = (sharc_param_spec_t){.name = "w",
                                     .ndim = 2,
                                     .shape = {a, b},
                                     .init = SHARC_INIT_NORMAL,
                                     .init_scale = 0.02};
  u.params[1] = (sharc_param_spec_t){.name = "b",
                                     .ndim = 1,
                                     .shape = {c},
                                     .init = SHARC_INIT_UNIFORM,
                                     .init_scale = 0.5};
  return u;
}

static void test_layout(void) {
  char err[256];
  for (size_t a = 1; a <= 7; a++)
    for (size_t c = 1; c <= 5; c++)
      for (int shards = 1; shards <= 9; shards++) {
        sharc_unit_spec_t u = unit2(a, 3, c);
        layout_t l;
        EXPECT(layout_unit(&u, shards, &l, err, sizeof err) == 0, "%s", err);
        size_t numel = a * 3 + c;
        EXPECT(l.numel == numel, "numel %zu", l.numel);
        EXPECT(l.padded % (size_t)shards == 0 && l.padded >= numel &&
                   l.padded < numel + (size_t)shards,
               "padded %zu for %zu over %d", l.padded, numel, shards);
        EXPECT(l.slice * (size_t)shards == l.padded, "slice");
        EXPECT(l.off[0] == 0 && l.off[1] == a * 3 && l.count[1] == c, "off");
        size_t real = 0;
        for (int r = 0; r < shards; r++)
          real += layout_slice_real(&l, r);
        EXPECT(real == numel, "real elements %zu of %zu", real, numel);
      }
  sharc_unit_spec_t bad = unit2(0, 3, 1);
  layout_t l;
  EXPECT(layout_unit(&bad, 2, &l, err, sizeof err) != 0 &&
             strstr(err, "dimension"),
         "a zero dimension is refused: %s", err);
  bad = unit2(2, 3, 1);
  bad.params[0].ndim = 5;
  EXPECT(layout_unit(&bad, 2, &l, err, sizeof err) != 0, "ndim 5 refused");
  bad.params[0].ndim = 2;
  bad.params[0].shape[0] = SIZE_MAX / 2;
  EXPECT(layout_unit(&bad, 2, &l, err, sizeof err) != 0, "overflow refused");
  EXPECT(layout_unit(&bad, 0, &l, err, sizeof err) != 0, "0 shards refused");
  size_t lo, hi;
  layout_overlap(0, 10, 5, 20, &lo, &hi);
  EXPECT(lo == 5 && hi == 10, "overlap %zu %zu", lo, hi);
  layout_overlap(0, 5, 7, 20, &lo, &hi);
  EXPECT(lo >= hi, "disjoint is empty");
}

static void test_init(void) {
  sharc_unit_spec_t u = unit2(64, 64, 1000);
  double s = 0, s2 = 0, mx = 0;
  for (size_t i = 0; i < 4096; i++) {
    float v = layout_init_value(&u.params[0], 7, 3, 0, i);
    EXPECT(v == layout_init_value(&u.params[0], 7, 3, 0, i), "pure");
    s += v;
    s2 += (double)v * v;
  }
  double mean = s / 4096, sd = sqrt(s2 / 4096 - mean * mean);
  EXPECT(fabs(mean) < 0.002 && fabs(sd - 0.02) < 0.002,
         "normal(0, 0.02): mean %g sd %g", mean, sd);
  for (size_t i = 0; i < 1000; i++) {
    float v = layout_init_value(&u.params[1], 7, 3, 1, i);
    mx = fmax(mx, fabs(v));
  }
  EXPECT(mx <= 0.5 && mx > 0.45, "uniform in [-0.5, 0.5]: max %g", mx);
  EXPECT(layout_init_value(&u.params[0], 7, 3, 0, 5) !=
             layout_init_value(&u.params[0], 8, 3, 0, 5),
         "the seed matters");
  EXPECT(layout_init_value(&u.params[0], 7, 3, 0, 5) !=
             layout_init_value(&u.params[0], 7, 4, 0, 5),
         "the unit matters");
}

static ckpt_meta_t sample(void) {
  ckpt_meta_t m;
  memset(&m, 0, sizeof m);
  strcpy(m.model, "mlp");
  strcpy(m.strategy, "hybrid");
  strcpy(m.optim, "adamw");
  m.world = 4;
  m.shards = 2;
  m.states = 3;
  m.steps = 20;
  m.optim_steps = 17;
  m.lr = 3e-4;
  m.seed = 12345678901234ull;
  m.nunits = 2;
  m.units = calloc(2, sizeof *m.units);
  strcpy(m.units[0].name, "fc1");
  m.units[0].numel = 7 * 5 + 7;
  m.units[0].ntensors = 2;
  m.units[0].tensors[0] = (ckpt_tensor_t){"weight", 2, {7, 5}};
  m.units[0].tensors[1] = (ckpt_tensor_t){"bias", 1, {7}};
  strcpy(m.units[1].name, "fc2");
  m.units[1].numel = 3;
  m.units[1].ntensors = 1;
  m.units[1].tensors[0] = (ckpt_tensor_t){"bias", 1, {3}};
  m.nfiles = 2;
  m.file_sums = calloc(2, sizeof *m.file_sums);
  m.file_sums[0] = 0x0123456789abcdefull;
  m.file_sums[1] = 42;
  return m;
}

static int parses(const char *text, char *err, size_t n) {
  ckpt_meta_t m;
  int rc = ckpt_meta_parse(text, strlen(text), &m, err, n);
  ckpt_meta_free(&m);
  return rc == 0;
}

/* Replaces the first occurrence of from in text by to (static buffer). */
static const char *edit(const char *text, const char *from, const char *to) {
  static char buf[4096];
  const char *p = strstr(text, from);
  if (!p)
    return text;
  snprintf(buf, sizeof buf, "%.*s%s%s", (int)(p - text), text, to,
           p + strlen(from));
  return buf;
}

static void test_meta(void) {
  ckpt_meta_t m = sample(), back;
  char *text, err[256];
  size_t len;
  EXPECT(ckpt_meta_print(&m, &text, &len) == 0, "print");
  EXPECT(ckpt_meta_parse(text, len, &back, err, sizeof err) == 0, "%s", err);
  EXPECT(back.nunits == 2 && back.units[0].numel == 42 &&
             back.units[0].tensors[0].shape[1] == 5 && back.world == 4 &&
             back.shards == 2 && back.states == 3 && back.steps == 20 &&
             back.lr == 3e-4 && back.seed == m.seed && back.optim_steps == 17 &&
             back.file_sums[0] == m.file_sums[0] &&
             strcmp(back.strategy, "hybrid") == 0,
         "round trip");
  /* offsets: each file holds states x slice per unit */
  EXPECT(ckpt_unit_slice(&back, 0) == 21 && ckpt_unit_slice(&back, 1) == 2,
         "slices");
  EXPECT(ckpt_unit_offset(&back, 1) == 3 * 21 * 4 &&
             ckpt_file_bytes(&back) == 3 * (21 + 2) * 4,
         "offsets");
  ckpt_meta_free(&back);
  /* every truncation fails cleanly */
  for (size_t cut = 0; cut + 1 < len; cut++) {
    int rc = ckpt_meta_parse(text, cut, &back, err, sizeof err);
    ckpt_meta_free(&back);
    EXPECT(rc != 0, "a file cut at %zu bytes parsed", cut);
  }
  struct {
    const char *from, *to, *says;
  } bad[] = {
      {"sharc-checkpoint 1", "sharc-checkpoint 2", "not a sharc checkpoint"},
      {"kind sharded", "kind half", "kind"},
      {"shards 2", "shards 0", "shards"},
      {"shards 2", "shards -1", "shards"},
      {"states 3", "states 4", "states"},
      {"optim adamw", "optim lion", "optim"},
      {"optim_steps 17", "optim_step 17", "optim_steps"},
      {"\nlr ", "\nlr nan", "lr"},
      {"units 2", "units 99999", "units"},
      {"unit fc1 42 2", "unit fc1 43 2", "tensors hold"},
      {"tensor weight 2 7 5", "tensor weight 2 7 0", "dimension"},
      {"tensor weight 2 7 5", "tensor weight 3 7 5", "tensor"},
      {"tensor weight 2 7 5", "tensor weight 2 1099511627776 1099511627776",
       "dimension"},
      {"files 2", "files 3", "files"},
      {"sum 1 000000000000002a", "sum 1 00000000000002a", "sum"},
      {"sum 1 000000000000002a", "sum 0 000000000000002a", "sum"},
      {"end", "ends", "end"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *t = edit(text, bad[i].from, bad[i].to);
    EXPECT(t != text, "edit %zu applies", i);
    EXPECT(!parses(t, err, sizeof err) && strstr(err, bad[i].says),
           "'%s' -> '%s' refused mentioning '%s': %s", bad[i].from, bad[i].to,
           bad[i].says, err);
  }
  /* embedded NUL and overlong lines */
  char nul[64] = "sharc-checkpoint 1\nkind sh";
  size_t nl = strlen(nul) + 1;
  EXPECT(ckpt_meta_parse(nul, nl + 5, &back, err, sizeof err) != 0,
         "NUL refused");
  ckpt_meta_free(&back);
  char *longl = malloc(2000);
  memset(longl, 'a', 1999);
  longl[1999] = 0;
  EXPECT(!parses(longl, err, sizeof err) && strstr(err, "longer"),
         "long line: %s", err);
  free(longl);
  free(text);
  ckpt_meta_free(&m);
}

int main(void) {
  test_layout();
  test_init();
  test_meta();
  printf("test_shard: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
