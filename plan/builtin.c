/*
 * builtin.c - the models sharc-plan knows by name: the reference CNN and
 * the GPT decoder of models/ (their own sharc_model_t, so units, padding
 * and activation sizes are the ones sharc-train runs), with the floating-
 * point operations of each stage's forward.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnn.h"
#include "gpt.h"
#include "sharc_plan.h"

struct sharc_plan_builtin {
  cnn_t *cnn;
  gpt_t *gpt;
  gpt_config_t g;
  sharc_plan_model_t pm;
  char label[96];
};

/* Forward FLOPs per image of the CNN's stages (multiply-adds x 2):
 * conv1 26x26 outputs x 32 channels x 9 taps; conv2 24x24 x 64 x (32 x 9);
 * fc1 9216 x 128; fc2 128 x 10. */
static double cnn_flops(void *ctx, int stage, int n) {
  static const double per[CNN_STAGES] = {2.0 * 26 * 26 * 32 * 9,
                                         2.0 * 24 * 24 * 64 * 32 * 9,
                                         2.0 * 9216 * 128, 2.0 * 128 * 10};
  (void)ctx;
  return stage >= 0 && stage < CNN_STAGES ? per[stage] * n : 0;
}

/* Forward FLOPs per sequence of the GPT's stages: a block's four matrix
 * products (qkv 3C^2, proj C^2, fc 4C^2, proj 4C^2 multiply-adds per
 * token) and attention's two (T x T x C each, computed in full as the host
 * model does); the head's logits (V x C per token); the embedding a
 * lookup. Norms and elementwise work are left out. */
static double gpt_flops(void *ctx, int stage, int n) {
  const struct sharc_plan_builtin *b = ctx;
  double T = b->g.ctx, C = b->g.channels, V = b->g.vocab;
  double per;
  if (stage == 0)
    per = 2.0 * T * C;
  else if (stage <= b->g.layers)
    per = 2.0 * T * 12.0 * C * C + 2.0 * 2.0 * T * T * C;
  else
    per = 2.0 * T * V * C;
  return per * n;
}

/* Llama-like sizes in sharc's GPT block (4C MLP, no grouped queries):
 * layers, channels, heads, vocabulary, sequence. */
static const struct {
  const char *name;
  gpt_config_t cfg; /* vocab, ctx, layers, heads, channels */
} big[] = {
    {"gpt2-124m", {50257, 1024, 12, 12, 768}},
    {"7b", {32000, 4096, 32, 32, 4096}},
    {"13b", {32000, 4096, 40, 40, 5120}},
    {"70b", {32000, 4096, 80, 64, 8192}},
};

static int parse_gpt(const char *s, gpt_config_t *g, char *err, size_t n) {
  if (gpt_config_preset(s, g) == 0)
    return 0;
  for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
    if (strcmp(s, big[i].name) == 0) {
      *g = big[i].cfg;
      return 0;
    }
  long v[5];
  int k = 0;
  const char *p = s;
  while (k < 5) {
    char *end;
    if (!isdigit((unsigned char)*p))
      break;
    v[k++] = strtol(p, &end, 10);
    p = end;
    if (*p != ',')
      break;
    p++;
  }
  if (k != 5 || *p) {
    snprintf(err, n,
             "model 'gpt:%s': give a preset (tiny, small, gpt2, gpt2-124m, "
             "7b, 13b, 70b) or L,C,H,V,T (layers, channels, heads, "
             "vocabulary, sequence), e.g. gpt:80,8192,64,32000,4096",
             s);
    return -1;
  }
  for (int i = 0; i < 5; i++)
    if (v[i] < 1 || v[i] > (1L << 24)) {
      snprintf(err, n, "model 'gpt:%s': value %ld out of range", s, v[i]);
      return -1;
    }
  g->layers = (int)v[0];
  g->channels = (int)v[1];
  g->heads = (int)v[2];
  g->vocab = (int)v[3];
  g->ctx = (int)v[4];
  return 0;
}

int sharc_plan_builtin_create(const char *spec, int seq,
                              sharc_plan_builtin_t **out, char *err,
                              size_t errlen) {
  char scratch[8];
  if (!err || !errlen)
    err = scratch, errlen = sizeof scratch;
  if (!out || !spec) {
    snprintf(err, errlen, "sharc_plan_builtin_create: spec and out required");
    return -1;
  }
  *out = NULL;
  struct sharc_plan_builtin *b = calloc(1, sizeof *b);
  if (!b) {
    snprintf(err, errlen, "sharc_plan: out of memory");
    return -1;
  }
  const sharc_model_t *m = NULL;
  if (strcmp(spec, "cnn") == 0) {
    if (seq > 0) {
      snprintf(err, errlen, "--seq is for GPT models; the cnn reads images");
      goto fail;
    }
    if (cnn_create(&b->cnn, 0, 1) != 0) {
      snprintf(err, errlen, "sharc_plan: out of memory (cnn)");
      goto fail;
    }
    m = cnn_model(b->cnn);
    b->pm.stage_flops = cnn_flops;
    b->pm.tokens_per_sample = 1;
    snprintf(b->label, sizeof b->label, "cnn");
  } else if (strncmp(spec, "gpt:", 4) == 0 || strncmp(spec, "gpt-", 4) == 0) {
    if (parse_gpt(spec + 4, &b->g, err, errlen) != 0)
      goto fail;
    if (seq > 0)
      b->g.ctx = seq;
    if (gpt_create(&b->gpt, &b->g, err, errlen) != 0)
      goto fail;
    m = gpt_model(b->gpt);
    b->pm.stage_flops = gpt_flops;
    b->pm.tokens_per_sample = b->g.ctx;
    snprintf(b->label, sizeof b->label, "gpt L%d C%d H%d V%d T%d", b->g.layers,
             b->g.channels, b->g.heads, b->g.vocab, b->g.ctx);
  } else {
    snprintf(err, errlen,
             "model '%s': use cnn, gpt:PRESET (tiny, small, gpt2, "
             "gpt2-124m, 7b, 13b, 70b) or gpt:L,C,H,V,T",
             spec);
    goto fail;
  }
  b->pm.model = m;
  b->pm.ctx = b;
  b->pm.label = b->label;
  *out = b;
  return 0;
fail:
  sharc_plan_builtin_destroy(b);
  return -1;
}

const sharc_plan_model_t *
sharc_plan_builtin_model(const sharc_plan_builtin_t *b) {
  return b ? &b->pm : NULL;
}

void sharc_plan_builtin_destroy(sharc_plan_builtin_t *b) {
  if (!b)
    return;
  cnn_destroy(b->cnn);
  gpt_destroy(b->gpt);
  free(b);
}
