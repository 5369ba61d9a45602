/*
 * search.c - every configuration of a space, predicted and ranked
 * (sharc_plan_search): those that fit by step time, then the rest by
 * memory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

void sharc_plan_space_default(sharc_plan_space_t *s) {
  memset(s, 0, sizeof *s);
  const sharc_strategy_t all[] = {SHARC_FULL_SHARD, SHARC_SHARD_GRAD_OP,
                                  SHARC_HYBRID_SHARD, SHARC_HYBRID_SHARD_ZERO2,
                                  SHARC_NO_SHARD};
  s->nstrategies = 5;
  memcpy(s->strategies, all, sizeof all);
  s->optim = SHARC_OPTIM_ADAMW;
}

static int cmp(const void *pa, const void *pb) {
  const sharc_plan_result_t *a = pa, *b = pb;
  if (a->fits != b->fits)
    return b->fits - a->fits;
  if (a->fits && a->t_step != b->t_step)
    return a->t_step < b->t_step ? -1 : 1;
  if (a->mem.device != b->mem.device)
    return a->mem.device < b->mem.device ? -1 : 1;
  return a->t_step < b->t_step ? -1 : a->t_step > b->t_step;
}

static int hybrid(sharc_strategy_t s) {
  return s == SHARC_HYBRID_SHARD || s == SHARC_HYBRID_SHARD_ZERO2;
}

sharc_status_t sharc_plan_search(const sharc_plan_model_t *model,
                                 const sharc_plan_cluster_t *cl,
                                 const sharc_plan_batch_t *batch,
                                 const sharc_plan_space_t *space,
                                 sharc_plan_result_t **out, int *n, char *err,
                                 size_t errlen) {
  char scratch[8];
  if (!err || !errlen)
    err = scratch, errlen = sizeof scratch;
  err[0] = '\0';
  if (!out || !n || !space || !cl) {
    snprintf(err, errlen,
             "sharc_plan_search: space, cluster, out and n are "
             "required");
    return SHARC_ERR_INVALID_ARG;
  }
  *out = NULL;
  *n = 0;
  int world = cl->nodes * cl->gpus_per_node;
  int groups[64], ng = 0;
  if (space->ngroups > 0) {
    for (int i = 0; i < space->ngroups && i < 32; i++)
      groups[ng++] = space->groups[i];
  } else {
    for (long g = 2; g <= world && ng < 40; g *= 2)
      if (world % g == 0)
        groups[ng++] = (int)g;
    int have = 0;
    for (int i = 0; i < ng; i++)
      have |= groups[i] == cl->gpus_per_node;
    if (!have && cl->gpus_per_node > 1 && world % cl->gpus_per_node == 0)
      groups[ng++] = cl->gpus_per_node;
  }
  const int d_pf[] = {2}, d_ck[] = {0, 1}, d_off[] = {0};
  const sharc_dtype_t d_dt[] = {SHARC_BF16};
  const int *pf = space->nprefetch ? space->prefetch : d_pf;
  const int *ck = space->nckpt ? space->ckpt : d_ck;
  const int *off = space->noffload ? space->offload : d_off;
  const sharc_dtype_t *dt = space->ndtypes ? space->dtypes : d_dt;
  int npf = space->nprefetch ? space->nprefetch : 1;
  int nck = space->nckpt ? space->nckpt : 2;
  int noff = space->noffload ? space->noffload : 1;
  int ndt = space->ndtypes ? space->ndtypes : 1;
  size_t cap = (size_t)space->nstrategies * (size_t)(ng ? ng : 1) *
               (size_t)npf * (size_t)nck * (size_t)noff * (size_t)ndt;
  sharc_plan_result_t *res = calloc(cap ? cap : 1, sizeof *res);
  if (!res) {
    snprintf(err, errlen, "sharc_plan_search: out of memory");
    return SHARC_ERR_NO_MEM;
  }
  int cnt = 0;
  char last[512] = "";
  for (int si = 0; si < space->nstrategies; si++) {
    sharc_strategy_t strat = space->strategies[si];
    int gl = hybrid(strat) ? ng : 1;
    for (int gi = 0; gi < gl; gi++)
      for (int pi = 0; pi < npf; pi++)
        for (int di = 0; di < ndt; di++)
          for (int ci = 0; ci < nck; ci++)
            for (int oi = 0; oi < noff; oi++) {
              sharc_shard_config_t c;
              sharc_shard_config_default(&c);
              c.strategy = strat;
              c.shard_group = hybrid(strat) ? groups[gi] : 0;
              c.prefetch = pf[pi];
              c.param_dtype = dt[di];
              c.checkpoint_activations = ck[ci];
              c.offload = off[oi];
              c.optim.kind = space->optim;
              if (hybrid(strat) && (c.shard_group >= world || !ng))
                continue; /* one group of all: that is full / grad_op */
              char e2[512];
              sharc_status_t st = sharc_plan_predict(model, cl, batch, &c,
                                                     &res[cnt], e2, sizeof e2);
              if (st == SHARC_OK)
                cnt++;
              else if (st != SHARC_ERR_INVALID_ARG) {
                snprintf(err, errlen, "%s", e2);
                free(res);
                return st;
              } else
                snprintf(last, sizeof last, "%s", e2);
            }
  }
  if (cnt == 0) {
    snprintf(err, errlen, "%s",
             last[0] ? last
                     : "sharc_plan_search: the space holds no configuration "
                       "(no strategy, or hybrid only on one node's worth of "
                       "GPUs)");
    free(res);
    return SHARC_ERR_INVALID_ARG;
  }
  qsort(res, (size_t)cnt, sizeof *res, cmp);
  *out = res;
  *n = cnt;
  return SHARC_OK;
}
