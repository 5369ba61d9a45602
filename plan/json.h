/*
 * json.h - a small JSON reader for the planner's calibration inputs
 * (sharc-bench -J files and sharc-train --log lines): parses a string into
 * a tree, no I/O. Numbers are doubles; strings keep their escapes decoded
 * for \" \\ \/ \b \f \n \r \t and \uXXXX below 0x80 (others become '?'),
 * which is all those files ever hold.
 */
#ifndef SHARC_PLAN_JSON_H
#define SHARC_PLAN_JSON_H

#include <stddef.h>

typedef enum { PJ_NULL, PJ_BOOL, PJ_NUM, PJ_STR, PJ_ARR, PJ_OBJ } pj_type_t;

typedef struct pj_node {
  pj_type_t type;
  double num; /* PJ_NUM; PJ_BOOL: 0 or 1 */
  char *str;  /* PJ_STR: the decoded text */
  char *key;  /* a member of an object: its name; else NULL */
  int n;      /* PJ_ARR, PJ_OBJ: children */
  struct pj_node *kids;
} pj_node_t;

/* Parses text[0..len) (one value, surrounded by white space only) into
 * *out. Returns 0, or -1 with a message naming the byte offset in err.
 * Free with pj_free (also after a failure). */
int pj_parse(const char *text, size_t len, pj_node_t *out, char *err,
             size_t errlen);
void pj_free(pj_node_t *v);

/* The member key of object o, or NULL (also when o is not an object). */
const pj_node_t *pj_get(const pj_node_t *o, const char *key);
/* Member key as a number (or bool) into *v: 0, or -1 when absent or not
 * a number. */
int pj_num(const pj_node_t *o, const char *key, double *v);
/* Member key's text, or NULL when absent or not a string. */
const char *pj_str(const pj_node_t *o, const char *key);

#endif /* SHARC_PLAN_JSON_H */
