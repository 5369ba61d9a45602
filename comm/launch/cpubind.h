/*
 * cpubind.h - sharcrun's --bind: the CPUs each rank may run on
 * (cpubind.c says how they are chosen).
 */
#ifndef SHARC_CPUBIND_H
#define SHARC_CPUBIND_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <stddef.h>

typedef enum {
  CPUBIND_AUTO,
  CPUBIND_NONE,
  CPUBIND_CORE,
  CPUBIND_SHARED /* the default */
} cpubind_mode_t;

typedef struct {
  int n;           /* ranks planned; 0: no binding */
  cpu_set_t *sets; /* n sets, rank r's at sets[r] */
} cpubind_t;

/* "auto", "none", "core" or "shared" into *out; -1 for anything else. */
int cpubind_parse(const char *s, cpubind_mode_t *out);

/* Plans the sets of n ranks under mode; out->n stays 0 when they run
 * unbound (none; auto with more ranks than CPUs; shared with at most
 * one rank or more than two per CPU; one CPU; affinity unknown). -1 only when
 * out of memory. */
int cpubind_plan(cpubind_mode_t mode, int n, cpubind_t *out);

/* "0-3,8" into buf (truncated to len). */
void cpubind_list(const cpu_set_t *set, char *buf, size_t len);

void cpubind_free(cpubind_t *b);

#endif
