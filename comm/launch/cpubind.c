/*
 * cpubind.c - which CPUs each rank sharcrun starts may run on (--bind).
 *
 * The CPUs are those sharcrun itself may run on (sched_getaffinity: a
 * taskset, cgroup or batch system's choice is kept), ordered by package,
 * then core, then CPU number, so that the SMT siblings of a core sit next
 * to each other. With N ranks on C such CPUs:
 *   - N <= C: rank r gets the block [r*C/N, (r+1)*C/N): whole cores before
 *     SMT siblings are split, every rank at least one CPU of its own;
 *   - N > C (core, and shared up to N = 2C): rank r gets CPU r mod C.
 * auto binds only when N <= C; core always; none never.
 *
 * The default, shared, binds only when the ranks share CPUs two to one at
 * most (C < N <= 2C). There pinning rank r to CPU r mod C kept 4 ranks
 * on the 2-core development VM in its fast mode: 8-byte all-reduce
 * 3.8 us a call in 6 of 6 runs, against 6.5-8 us in 5 of 6 unbound
 * (alternating runs), 8 KiB 5.4-7.0 against 8.7-10.7 us, 3 ranks
 * unchanged (bench/results/peers/binding.md). With more ranks per CPU a
 * broadcast root shares its CPU with receivers that preempt it as they
 * wake (8 ranks: 8 KiB 10 us pinned, 1.7-7.3 unbound), and with a CPU or
 * more per rank pinning changed nothing here
 * (8-byte calls at 2 ranks 0.37-0.39 us in most runs either way; 2-rank
 * CNN training 1744 and 1781 samples/s against 1674 and 1683 unbound)
 * while it would crowd jobs that share a many-core machine onto its
 * first CPUs: there the scheduler keeps them. Intel MPI pins by default
 * and Open MPI binds to cores for up to two ranks; on machines with many
 * cores and NUMA nodes `--bind auto` is what MPI launchers do.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* cpu_set_t, sched_getaffinity */
#endif
#include "cpubind.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cpubind_parse(const char *s, cpubind_mode_t *out) {
  if (strcmp(s, "auto") == 0)
    *out = CPUBIND_AUTO;
  else if (strcmp(s, "none") == 0)
    *out = CPUBIND_NONE;
  else if (strcmp(s, "core") == 0)
    *out = CPUBIND_CORE;
  else if (strcmp(s, "shared") == 0)
    *out = CPUBIND_SHARED;
  else
    return -1;
  return 0;
}

/* -1 when the file is missing or holds no number. */
static long topo_value(int cpu, const char *what) {
  char path[128];
  snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/%s", cpu,
           what);
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  long v = -1;
  if (fscanf(f, "%ld", &v) != 1)
    v = -1;
  fclose(f);
  return v;
}

typedef struct {
  long pkg, core;
  int cpu;
} cpu_key_t;

static int cmp_key(const void *a, const void *b) {
  const cpu_key_t *x = a, *y = b;
  if (x->pkg != y->pkg)
    return x->pkg < y->pkg ? -1 : 1;
  if (x->core != y->core)
    return x->core < y->core ? -1 : 1;
  return (x->cpu > y->cpu) - (x->cpu < y->cpu);
}

int cpubind_plan(cpubind_mode_t mode, int n, cpubind_t *out) {
  memset(out, 0, sizeof *out);
  if (mode == CPUBIND_NONE || n < 1)
    return 0;
  cpu_set_t own;
  CPU_ZERO(&own);
  if (sched_getaffinity(0, sizeof own, &own) != 0)
    return 0; /* nothing known: leave the ranks to the scheduler */
  int c = CPU_COUNT(&own);
  if (c < 2 || (mode == CPUBIND_AUTO && n > c) ||
      (mode == CPUBIND_SHARED && (n <= c || n > 2 * c)))
    return 0;
  cpu_key_t *keys = calloc((size_t)c, sizeof *keys);
  out->sets = calloc((size_t)n, sizeof *out->sets);
  if (!keys || !out->sets) {
    free(keys);
    free(out->sets);
    out->sets = NULL;
    return -1;
  }
  int k = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE && k < c; cpu++)
    if (CPU_ISSET(cpu, &own))
      keys[k++] = (cpu_key_t){topo_value(cpu, "physical_package_id"),
                              topo_value(cpu, "core_id"), cpu};
  qsort(keys, (size_t)k, sizeof *keys, cmp_key);
  for (int r = 0; r < n; r++) {
    CPU_ZERO(&out->sets[r]);
    if (n <= k) {
      long lo = (long)r * k / n, hi = (long)(r + 1) * k / n;
      for (long i = lo; i < hi; i++)
        CPU_SET(keys[i].cpu, &out->sets[r]);
    } else {
      CPU_SET(keys[r % k].cpu, &out->sets[r]);
    }
  }
  free(keys);
  out->n = n;
  return 0;
}

void cpubind_list(const cpu_set_t *set, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int cpu = 0; cpu < CPU_SETSIZE && used + 1 < len; cpu++) {
    if (!CPU_ISSET(cpu, set) || (cpu > 0 && CPU_ISSET(cpu - 1, set)))
      continue;
    int last = cpu;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, set))
      last++;
    int w = last > cpu ? snprintf(buf + used, len - used, "%s%d-%d",
                                  used ? "," : "", cpu, last)
                       : snprintf(buf + used, len - used, "%s%d",
                                  used ? "," : "", cpu);
    if (w < 0 || (size_t)w >= len - used)
      break;
    used += (size_t)w;
  }
}

void cpubind_free(cpubind_t *b) {
  free(b->sets);
  b->sets = NULL;
  b->n = 0;
}
