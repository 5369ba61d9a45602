/*
 * units.c - a model from a unit list (sharc-plan --model units:FILE): one
 * line per layer or block with its parameter count, forward FLOPs and
 * activation bytes per sample, made into the engine's model description
 * the way builtin.c hands over the reference models' own. Each line is one
 * stage; a line whose parameters are "=NAME" is another stage of an earlier
 * unit (tied weights, as a GPT's output head uses the embedding). Pure
 * logic: the caller reads the file and passes its text. The format is in
 * docs/plan.md ("A unit list"); docs/units/gpt2-124m.units is an example.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sharc_plan.h"

#define NAME_MAX_LEN 63
#define MAX_STAGES (1 << 17)
#define MAX_PARAMS ((uint64_t)1 << 40) /* per unit: 1.1e12 */
#define MAX_BYTES ((uint64_t)1 << 44)  /* per sample, and the fixed part */
#define MAX_FLOPS 1e24                 /* per sample */
#define BYTES_CAP ((uint64_t)1 << 44)  /* a callback's answer saturates */
#define MAX_FIELDS 7

/* One line: a stage, with its unit. Bytes are per sample, except
 * scratch_fixed (per call, whatever the micro-batch). */
typedef struct {
  char name[NAME_MAX_LEN + 1];
  int unit;   /* index into the units */
  int line;   /* where it was given, for messages */
  int is_new; /* 1: this line declares its unit; 0: a tied stage */
  char tie[NAME_MAX_LEN + 1]; /* a tied stage's unit, by name */
  uint64_t params;
  double flops;
  uint64_t saved, out, scratch, scratch_fixed;
} ustage_t;

struct sharc_plan_units {
  ustage_t *st;
  int nstages, nunits, cap;
  sharc_unit_spec_t *units;
  sharc_stage_spec_t *stages;
  sharc_model_t model;
  sharc_plan_model_t pm;
  char label[128];
};

/* bytes per sample x n + fixed, saturating at BYTES_CAP (16 TiB): far past
 * any GPU, and low enough that the planner's sums of every stage's
 * buffers cannot overflow. */
static size_t scaled(uint64_t per, uint64_t fixed, int n) {
  if (n <= 0)
    return 0;
  uint64_t un = (uint64_t)n;
  if (per && un > (BYTES_CAP - fixed) / per)
    return (size_t)BYTES_CAP;
  return (size_t)(per * un + fixed);
}

static size_t cb_out(void *ctx, int stage, int n) {
  const struct sharc_plan_units *u = ctx;
  return stage >= 0 && stage < u->nstages ? scaled(u->st[stage].out, 0, n) : 0;
}

static size_t cb_saved(void *ctx, int stage, int n) {
  const struct sharc_plan_units *u = ctx;
  return stage >= 0 && stage < u->nstages ? scaled(u->st[stage].saved, 0, n)
                                          : 0;
}

static size_t cb_scratch(void *ctx, int stage, int n) {
  const struct sharc_plan_units *u = ctx;
  if (stage < 0 || stage >= u->nstages)
    return 0;
  return scaled(u->st[stage].scratch, u->st[stage].scratch_fixed, n);
}

static double cb_flops(void *ctx, int stage, int n) {
  const struct sharc_plan_units *u = ctx;
  return stage >= 0 && stage < u->nstages ? u->st[stage].flops * n : 0;
}

/* Formats "line N: ..." into err; returns SHARC_ERR_INVALID_ARG. */
static sharc_status_t bad(char *err, size_t errlen, int line, const char *fmt,
                          ...) __attribute__((format(printf, 4, 5)));
static sharc_status_t bad(char *err, size_t errlen, int line, const char *fmt,
                          ...) {
  int k = line > 0 ? snprintf(err, errlen, "line %d: ", line) : 0;
  if (k < 0 || (size_t)k >= errlen)
    k = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
  va_end(ap);
  return SHARC_ERR_INVALID_ARG;
}

/* A field of one line: its text is s[0..len). */
typedef struct {
  const char *s;
  size_t len;
} field_t;

/* A whole number in [lo, hi]: decimal digits only. */
static int whole(field_t f, uint64_t lo, uint64_t hi, uint64_t *v) {
  if (f.len == 0 || f.len > 20)
    return -1;
  uint64_t x = 0;
  for (size_t i = 0; i < f.len; i++) {
    unsigned d = (unsigned)(f.s[i] - '0');
    if (d > 9 || x > (UINT64_MAX - d) / 10)
      return -1;
    x = x * 10 + d;
  }
  if (x < lo || x > hi)
    return -1;
  *v = x;
  return 0;
}

/* A number in [0, hi] as strtod reads it (1.5e9), the whole field. */
static int real(field_t f, double hi, double *v) {
  char buf[64];
  if (f.len == 0 || f.len >= sizeof buf)
    return -1;
  memcpy(buf, f.s, f.len);
  buf[f.len] = '\0';
  if (buf[0] == '-' || buf[0] == '+')
    return -1;
  char *end;
  errno = 0;
  double d = strtod(buf, &end);
  if (*end || errno || !(d >= 0 && d <= hi))
    return -1;
  *v = d;
  return 0;
}

static int same(field_t f, const char *name) {
  return strlen(name) == f.len && memcmp(name, f.s, f.len) == 0;
}

/* Splits one line (comment removed) into at most cap fields; returns the
 * count, or cap + 1 when there are more. */
static int split(const char *s, size_t len, field_t *f, int cap) {
  int n = 0;
  size_t i = 0;
  while (i < len) {
    while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r'))
      i++;
    if (i == len)
      break;
    size_t b = i;
    while (i < len && s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
      i++;
    if (n == cap)
      return cap + 1;
    f[n].s = s + b;
    f[n].len = i - b;
    n++;
  }
  return n;
}

static const char *const usage_line =
    "give NAME PARAMS FLOPS SAVED [OUT [SCRATCH [SCRATCH_FIXED]]] (params, "
    "forward FLOPs and bytes per sample; PARAMS =NAME for a stage of an "
    "earlier unit)";

/* Parses one unit line into st (the stages before it are u->st[0..n)). */
static sharc_status_t parse_stage(struct sharc_plan_units *u, field_t *f,
                                  int nf, int line, ustage_t *st, char *err,
                                  size_t errlen) {
  if (nf < 4)
    return bad(err, errlen, line, "%d field%s; %s", nf, nf == 1 ? "" : "s",
               usage_line);
  if (f[0].len > NAME_MAX_LEN)
    return bad(err, errlen, line, "name '%.*s...' is longer than %d bytes",
               NAME_MAX_LEN, f[0].s, NAME_MAX_LEN);
  if (f[0].s[0] == '=')
    return bad(err, errlen, line,
               "name '%.*s' starts with '='; a name comes first, then the "
               "parameters (=NAME there ties a stage to a unit)",
               (int)f[0].len, f[0].s);
  memcpy(st->name, f[0].s, f[0].len);
  st->name[f[0].len] = '\0';
  st->line = line;
  if (f[1].s[0] == '=') { /* resolved once every name is known */
    if (f[1].len < 2 || f[1].len - 1 > NAME_MAX_LEN)
      return bad(err, errlen, line,
                 "parameters '%.*s': give =NAME, NAME a unit on an earlier "
                 "line (at most %d bytes)",
                 (int)f[1].len, f[1].s, NAME_MAX_LEN);
    memcpy(st->tie, f[1].s + 1, f[1].len - 1);
    st->tie[f[1].len - 1] = '\0';
    st->unit = -1;
    st->is_new = 0;
  } else {
    if (whole(f[1], 1, MAX_PARAMS, &st->params))
      return bad(err, errlen, line,
                 "parameters '%.*s': give a whole number from 1 to %llu, or "
                 "=NAME to share an earlier unit's (a layer without "
                 "parameters belongs with its neighbour's line)",
                 (int)f[1].len, f[1].s, (unsigned long long)MAX_PARAMS);
    st->unit = u->nunits;
    st->is_new = 1;
  }
  if (real(f[2], MAX_FLOPS, &st->flops))
    return bad(err, errlen, line,
               "FLOPs '%.*s': give the forward FLOPs per sample, a number "
               "from 0 to %g (1.5e9 is fine)",
               (int)f[2].len, f[2].s, MAX_FLOPS);
  static const char *const what[] = {"saved bytes", "output bytes",
                                     "scratch bytes", "fixed scratch bytes"};
  uint64_t *dst[] = {&st->saved, &st->out, &st->scratch, &st->scratch_fixed};
  for (int k = 0; k < 4; k++) {
    *dst[k] = 0;
    if (3 + k < nf && whole(f[3 + k], 0, MAX_BYTES, dst[k]))
      return bad(err, errlen, line,
                 "%s '%.*s': give a whole number of bytes%s from 0 to %llu",
                 what[k], (int)f[3 + k].len, f[3 + k].s,
                 k < 3 ? " per sample" : " per call",
                 (unsigned long long)MAX_BYTES);
  }
  return SHARC_OK;
}

/* Orders stages by name, then line. */
static int by_name(const void *a, const void *b) {
  const ustage_t *x = *(const ustage_t *const *)a;
  const ustage_t *y = *(const ustage_t *const *)b;
  int c = strcmp(x->name, y->name);
  return c ? c : (x->line > y->line) - (x->line < y->line);
}

/* Refuses a repeated name and ties each =NAME stage to its unit: by a
 * sorted index, so a long list costs n log n. The error reported is the
 * one on the earliest line. */
static sharc_status_t resolve(struct sharc_plan_units *u, char *err,
                              size_t errlen) {
  int n = u->nstages;
  const ustage_t **by = malloc((size_t)n * sizeof *by);
  if (!by)
    return bad(err, errlen, 0, "sharc_plan: out of memory");
  for (int i = 0; i < n; i++)
    by[i] = &u->st[i];
  qsort(by, (size_t)n, sizeof *by, by_name);
  int dup = -1, first = -1; /* the repeat on the earliest line, and the
                             * first line of its name */
  for (int i = 1, g = 0; i < n; i++) {
    if (strcmp(by[i]->name, by[i - 1]->name)) {
      g = i;
      continue;
    }
    if (dup < 0 || by[i]->line < by[dup]->line)
      dup = i, first = g;
  }
  sharc_status_t st = SHARC_OK;
  for (int k = 0; k < n && st == SHARC_OK; k++) {
    ustage_t *s = &u->st[k];
    if (s->is_new)
      continue;
    if (dup >= 0 && by[dup]->line < s->line)
      break;
    int lo = 0, hi = n; /* the first entry named s->tie */
    while (lo < hi) {
      int mid = lo + (hi - lo) / 2;
      if (strcmp(by[mid]->name, s->tie) < 0)
        lo = mid + 1;
      else
        hi = mid;
    }
    const ustage_t *t = lo < n && !strcmp(by[lo]->name, s->tie) ? by[lo] : 0;
    if (!t || t->line > s->line)
      st = bad(err, errlen, s->line,
               "parameters '=%s': no unit '%s' on an earlier line; =NAME "
               "ties this stage to a unit declared above it",
               s->tie, s->tie);
    else if (!t->is_new)
      st = bad(err, errlen, s->line,
               "parameters '=%s': '%s' (line %d) is itself a tied stage; "
               "name its unit, '%s'",
               s->tie, s->tie, t->line, t->tie);
    else
      s->unit = t->unit;
  }
  if (st == SHARC_OK && dup >= 0)
    st = bad(err, errlen, by[dup]->line, "name '%s' already given on line %d",
             by[dup]->name, by[first]->line);
  free(by);
  return st;
}

/* A directive line: "@tokens T". */
static sharc_status_t parse_directive(struct sharc_plan_units *u, field_t *f,
                                      int nf, int line, int *seen, char *err,
                                      size_t errlen) {
  uint64_t v;
  if (!same(f[0], "@tokens"))
    return bad(err, errlen, line,
               "unknown directive '%.*s'; the one directive is @tokens T "
               "(tokens per sample)",
               (int)f[0].len, f[0].s);
  if (nf != 2 || whole(f[1], 1, (uint64_t)1 << 31, &v))
    return bad(err, errlen, line,
               "@tokens: give one whole number from 1 to 2147483648, the "
               "tokens of one sample (a sequence's length)");
  if (*seen)
    return bad(err, errlen, line, "@tokens given twice (first on line %d)",
               *seen);
  *seen = line;
  u->pm.tokens_per_sample = (double)v;
  return SHARC_OK;
}

sharc_status_t sharc_plan_units_parse(const char *text, size_t len,
                                      const char *label,
                                      sharc_plan_units_t **out, char *err,
                                      size_t errlen) {
  char scratch[8];
  if (!err || !errlen)
    err = scratch, errlen = sizeof scratch;
  err[0] = '\0';
  if (!out || (!text && len))
    return bad(err, errlen, 0, "sharc_plan_units_parse: text and out required");
  *out = NULL;
  struct sharc_plan_units *u = calloc(1, sizeof *u);
  if (!u)
    return bad(err, errlen, 0, "sharc_plan: out of memory");
  u->pm.tokens_per_sample = 1;
  sharc_status_t st = SHARC_OK;
  int line = 0, tokens_line = 0;
  size_t i = 0;
  while (i < len && st == SHARC_OK) {
    size_t b = i;
    while (i < len && text[i] != '\n')
      i++;
    size_t e = i; /* the line is text[b, e) */
    i++;
    line++;
    const void *nul = memchr(text + b, '\0', e - b);
    if (nul) {
      st = bad(err, errlen, line, "a NUL byte: a unit list is a text file");
      break;
    }
    const char *hash = memchr(text + b, '#', e - b);
    if (hash)
      e = (size_t)(hash - text);
    field_t f[MAX_FIELDS];
    int nf = split(text + b, e - b, f, MAX_FIELDS);
    if (nf == 0)
      continue;
    if (nf > MAX_FIELDS) {
      st = bad(err, errlen, line, "more than %d fields; %s", MAX_FIELDS,
               usage_line);
      break;
    }
    if (f[0].s[0] == '@') {
      st = parse_directive(u, f, nf, line, &tokens_line, err, errlen);
      continue;
    }
    if (u->nstages == MAX_STAGES) {
      st = bad(err, errlen, line, "more than %d units and stages", MAX_STAGES);
      break;
    }
    if (u->nstages == u->cap) {
      int cap = u->cap ? 2 * u->cap : 64;
      ustage_t *g = realloc(u->st, (size_t)cap * sizeof *g);
      if (!g) {
        st = bad(err, errlen, 0, "sharc_plan: out of memory");
        break;
      }
      u->st = g;
      u->cap = cap;
    }
    ustage_t *s = &u->st[u->nstages];
    memset(s, 0, sizeof *s);
    st = parse_stage(u, f, nf, line, s, err, errlen);
    if (st == SHARC_OK) {
      u->nunits += s->is_new;
      u->nstages++;
    }
  }
  if (st == SHARC_OK && u->nstages == 0)
    st = bad(err, errlen, 0,
             "no unit in %d line%s; each unit is a line NAME PARAMS FLOPS "
             "SAVED [OUT [SCRATCH [SCRATCH_FIXED]]] ('#' starts a comment)",
             line, line == 1 ? "" : "s");
  if (st == SHARC_OK)
    st = resolve(u, err, errlen);
  if (st == SHARC_OK) {
    u->units = calloc((size_t)u->nunits, sizeof *u->units);
    u->stages = calloc((size_t)u->nstages, sizeof *u->stages);
    if (!u->units || !u->stages)
      st = bad(err, errlen, 0, "sharc_plan: out of memory");
  }
  if (st != SHARC_OK) {
    sharc_plan_units_destroy(u);
    return st;
  }
  /* one flat tensor per unit: the engine pads the unit, not the tensor,
   * so its layout depends on the count alone */
  for (int k = 0; k < u->nstages; k++) {
    const ustage_t *s = &u->st[k];
    u->stages[k] = (sharc_stage_spec_t){s->unit, k};
    if (!s->is_new)
      continue;
    sharc_unit_spec_t *us = &u->units[s->unit];
    us->name = s->name;
    us->nparams = 1;
    us->params[0] = (sharc_param_spec_t){.name = "params",
                                         .ndim = 1,
                                         .shape = {(size_t)s->params},
                                         .init = SHARC_INIT_ZEROS};
  }
  snprintf(u->label, sizeof u->label, "units:%s", label ? label : "list");
  for (char *c = u->label; *c; c++) /* a label that is safe in JSON */
    if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20)
      *c = '_';
  u->model = (sharc_model_t){.name = u->label,
                             .nunits = u->nunits,
                             .units = u->units,
                             .nstages = u->nstages,
                             .stages = u->stages,
                             .ctx = u,
                             .out_bytes = cb_out,
                             .saved_bytes = cb_saved,
                             .scratch_bytes = cb_scratch,
                             .device = SHARC_DEVICE_HOST};
  u->pm.model = &u->model;
  u->pm.stage_flops = cb_flops;
  u->pm.ctx = u;
  u->pm.label = u->label;
  *out = u;
  return SHARC_OK;
}

const sharc_plan_model_t *sharc_plan_units_model(const sharc_plan_units_t *u) {
  return u ? &u->pm : NULL;
}

void sharc_plan_units_destroy(sharc_plan_units_t *u) {
  if (!u)
    return;
  free(u->units);
  free(u->stages);
  free(u->st);
  free(u);
}
