/*
 * json.c - the planner's JSON reader (json.h): recursive descent over one
 * string, depth-limited so a hostile file cannot exhaust the stack.
 */
#include "json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PJ_MAX_DEPTH 64

typedef struct {
  const char *s;
  size_t len, pos;
  char *err;
  size_t errlen;
} rd_t;

static int bad(rd_t *r, const char *what) {
  if (r->err && r->errlen)
    snprintf(r->err, r->errlen, "JSON: %s at byte %zu", what, r->pos);
  return -1;
}

static void ws(rd_t *r) {
  while (r->pos < r->len && (r->s[r->pos] == ' ' || r->s[r->pos] == '\t' ||
                             r->s[r->pos] == '\n' || r->s[r->pos] == '\r'))
    r->pos++;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* A string starting at the opening quote into a malloc'd *out. */
static int string(rd_t *r, char **out) {
  r->pos++; /* the quote */
  size_t start = r->pos, cap = 1;
  while (r->pos < r->len && r->s[r->pos] != '"') {
    if (r->s[r->pos] == '\\')
      r->pos++;
    r->pos++;
    cap++;
  }
  if (r->pos >= r->len)
    return bad(r, "unterminated string");
  char *d = malloc(cap);
  if (!d)
    return bad(r, "out of memory");
  size_t k = 0;
  for (size_t i = start; i < r->pos; i++) {
    char c = r->s[i];
    if (c != '\\') {
      d[k++] = c;
      continue;
    }
    c = r->s[++i];
    switch (c) {
    case 'b':
      d[k++] = '\b';
      break;
    case 'f':
      d[k++] = '\f';
      break;
    case 'n':
      d[k++] = '\n';
      break;
    case 'r':
      d[k++] = '\r';
      break;
    case 't':
      d[k++] = '\t';
      break;
    case 'u': {
      int v = 0;
      for (int j = 1; j <= 4; j++) {
        int h = i + j < r->pos ? hexval(r->s[i + j]) : -1;
        if (h < 0) {
          free(d);
          return bad(r, "bad \\u escape");
        }
        v = v * 16 + h;
      }
      i += 4;
      d[k++] = v > 0 && v < 0x80 ? (char)v : '?';
      break;
    }
    default: /* " \ / and anything else: the character itself */
      d[k++] = c;
    }
  }
  d[k] = '\0';
  r->pos++; /* the closing quote */
  *out = d;
  return 0;
}

static int value(rd_t *r, pj_node_t *v, int depth);

/* An array or object: children into v->kids. */
static int compound(rd_t *r, pj_node_t *v, int depth, int obj) {
  char close = obj ? '}' : ']';
  int cap = 0;
  r->pos++;
  ws(r);
  if (r->pos < r->len && r->s[r->pos] == close) {
    r->pos++;
    return 0;
  }
  for (;;) {
    if (v->n == cap) {
      int nc = cap ? 2 * cap : 8;
      pj_node_t *k = realloc(v->kids, (size_t)nc * sizeof *k);
      if (!k)
        return bad(r, "out of memory");
      v->kids = k;
      cap = nc;
    }
    pj_node_t *kid = &v->kids[v->n];
    memset(kid, 0, sizeof *kid);
    v->n++;
    ws(r);
    if (obj) {
      if (r->pos >= r->len || r->s[r->pos] != '"')
        return bad(r, "expected a member name");
      if (string(r, &kid->key) != 0)
        return -1;
      ws(r);
      if (r->pos >= r->len || r->s[r->pos] != ':')
        return bad(r, "expected ':'");
      r->pos++;
    }
    if (value(r, kid, depth + 1) != 0)
      return -1;
    ws(r);
    if (r->pos < r->len && r->s[r->pos] == ',') {
      r->pos++;
      continue;
    }
    if (r->pos < r->len && r->s[r->pos] == close) {
      r->pos++;
      return 0;
    }
    return bad(r, obj ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

static int word(rd_t *r, const char *w) {
  size_t n = strlen(w);
  if (r->len - r->pos < n || memcmp(r->s + r->pos, w, n) != 0)
    return 0;
  r->pos += n;
  return 1;
}

static int value(rd_t *r, pj_node_t *v, int depth) {
  if (depth > PJ_MAX_DEPTH)
    return bad(r, "nested too deep");
  ws(r);
  if (r->pos >= r->len)
    return bad(r, "unexpected end");
  char c = r->s[r->pos];
  if (c == '{' || c == '[') {
    v->type = c == '{' ? PJ_OBJ : PJ_ARR;
    return compound(r, v, depth, c == '{');
  }
  if (c == '"') {
    v->type = PJ_STR;
    return string(r, &v->str);
  }
  if (word(r, "true") || word(r, "false")) {
    v->type = PJ_BOOL;
    v->num = c == 't';
    return 0;
  }
  if (word(r, "null")) {
    v->type = PJ_NULL;
    return 0;
  }
  /* a number: strtod on a bounded copy (the text need not end in '\0') */
  char buf[64];
  size_t k = 0;
  while (r->pos + k < r->len && k + 1 < sizeof buf &&
         r->s[r->pos + k] != '\0' &&
         strchr("+-0123456789.eE", r->s[r->pos + k]))
    buf[k] = r->s[r->pos + k], k++;
  buf[k] = '\0';
  char *end;
  errno = 0;
  v->num = k ? strtod(buf, &end) : 0;
  if (!k || *end || errno == ERANGE)
    return bad(r, "expected a value");
  v->type = PJ_NUM;
  r->pos += k;
  return 0;
}

int pj_parse(const char *text, size_t len, pj_node_t *out, char *err,
             size_t errlen) {
  rd_t r = {text, len, 0, err, errlen};
  memset(out, 0, sizeof *out);
  if (value(&r, out, 0) != 0)
    return -1;
  ws(&r);
  if (r.pos != r.len)
    return bad(&r, "text after the value");
  return 0;
}

void pj_free(pj_node_t *v) {
  if (!v)
    return;
  for (int i = 0; i < v->n; i++)
    pj_free(&v->kids[i]);
  free(v->kids);
  free(v->str);
  free(v->key);
  memset(v, 0, sizeof *v);
}

const pj_node_t *pj_get(const pj_node_t *o, const char *key) {
  if (!o || o->type != PJ_OBJ)
    return NULL;
  for (int i = 0; i < o->n; i++)
    if (o->kids[i].key && !strcmp(o->kids[i].key, key))
      return &o->kids[i];
  return NULL;
}

int pj_num(const pj_node_t *o, const char *key, double *v) {
  const pj_node_t *x = pj_get(o, key);
  if (!x || (x->type != PJ_NUM && x->type != PJ_BOOL))
    return -1;
  *v = x->num;
  return 0;
}

const char *pj_str(const pj_node_t *o, const char *key) {
  const pj_node_t *x = pj_get(o, key);
  return x && x->type == PJ_STR ? x->str : NULL;
}
