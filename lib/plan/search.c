/* The layouts of a model on N nodes, each priced by the cost model: tp
 * inside a node (dividing the heads), pp dividing the layers, cp (ring)
 * where the sequence splits into 2 cp chunks (cp = 2, or more while a rank
 * keeps 1024 tokens or more), ep dividing the experts of a
 * MoE model (etp = 1), dp the rest;
 * ZeRO 0-3 (2 and 3 with one stage), every micro-batch that divides a dp
 * rank's share of the batch, the pipeline schedules (1F1B, interleaved with
 * two chunks where it divides, zero-bubble), recompute off and on, sequence
 * parallelism with tp. A layout the run would refuse is not listed; the
 * memory and bytes are the plan's (mt_plan_rank_build). */
#include "plan/plan.h"

#include <stdlib.h>
#include <string.h>

static void add(mt_search *s, const mt_config *cfg, const mt_cost *c) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 64;
    s->r = realloc(s->r, (size_t)s->cap * sizeof *s->r);
    if (!s->r) mt_die("out of memory (layouts)");
  }
  mt_search_row *row = &s->r[s->n++];
  row->cost = *c;
  row->tp = cfg->tp;
  row->pp = cfg->pp;
  row->dp = cfg->dp;
  row->cp = cfg->cp;
  row->ep = cfg->ep;
  row->zero = cfg->zero;
  row->micro_batch = cfg->micro_batch;
  row->sp = cfg->sp;
  row->recompute = cfg->recompute;
  row->virtual_stages = cfg->virtual_stages;
  snprintf(row->schedule, sizeof row->schedule, "%s", cfg->pp_schedule);
}

static int by_speed(const void *a, const void *b) {
  const mt_search_row *x = a, *y = b;
  if (x->cost.fits != y->cost.fits) return y->cost.fits - x->cost.fits;
  if (x->cost.tokens_per_s != y->cost.tokens_per_s)
    return x->cost.tokens_per_s < y->cost.tokens_per_s ? 1 : -1;
  return x->cost.mem_bytes < y->cost.mem_bytes ? -1 : x->cost.mem_bytes > y->cost.mem_bytes;
}

int mt_search_layouts(const mt_config *base, const mt_cost_profile *p, int nodes, mt_search *s,
                      mt_err *e) {
  memset(s, 0, sizeof *s);
  mt_model_shape shape;
  if (mt_model_shape_from_config(base, &shape, e) != 0) return -1;
  const int world = nodes * p->devices_per_node, L = shape.n_layer;
  double t0 = mt_now();
  for (int tp = 1; tp <= p->devices_per_node; tp *= 2) {
    if (world % tp || shape.n_head % tp || shape.n_embd % tp) continue;
    for (int pp = 1; pp <= L && pp * tp <= world; pp++) {
      if (L % pp || (world / tp) % pp) continue;
      /* cp: 2, or more while each rank keeps at least 1024 tokens of a
       * sequence (shorter chunks only add exchanges) */
      for (int cp = 1; cp * tp * pp <= world && cp <= 64; cp *= 2) {
      if ((world / (tp * pp)) % cp || shape.seq_len % (2 * cp)) continue;
      if (cp > 2 && shape.seq_len / cp < 1024) continue;
      if (cp > 1 && shape.moe_experts > 0) continue; /* refused by the run */
      const int dp = world / (tp * pp * cp);
      if (base->global_batch % dp) continue;
      const int per_rank = base->global_batch / dp;
      for (int ep = 1; ep <= (shape.moe_experts > 0 ? shape.moe_experts : 1); ep *= 2) {
      if (shape.moe_experts > 0 && (shape.moe_experts % ep || (tp * cp * dp) % ep)) continue;
      for (int mb = 1; mb <= per_rank && mb <= 64; mb *= 2) {
        if (per_rank % mb) continue;
        for (int zero = 0; zero <= 3; zero++) {
          if (zero >= 2 && pp > 1) continue;
          if (zero >= 1 && dp == 1) continue;
          static const char *scheds[] = {"1f1b", "interleaved", "zb-h1"};
          for (int si = 0; si < (pp > 1 ? 3 : 1); si++) {
            for (int rc = 0; rc <= 1; rc++) {
              for (int sp = 0; sp <= (tp > 1); sp++) {
                mt_config cfg = *base;
                cfg.tp = tp;
                cfg.pp = pp;
                cfg.dp = dp;
                cfg.cp = cp;
                cfg.ep = ep;
                cfg.etp = 1;
                snprintf(cfg.cp_mode, sizeof cfg.cp_mode, "ring");
                cfg.zero = zero;
                cfg.micro_batch = mb;
                cfg.micro_batches = 0;
                cfg.recompute = rc;
                cfg.sp = sp;
                cfg.virtual_stages = si == 1 ? 2 : 1;
                cfg.pp_split[0] = '\0';
                cfg.save_params = 0;
                snprintf(cfg.pp_schedule, sizeof cfg.pp_schedule, "%s", scheds[si]);
                mt_err le = {0};
                mt_cost c;
                s->tried++;
                if (mt_cost_estimate(&cfg, p, &c, &le) != 0) continue; /* refused by the run */
                s->valid++;
                s->fitting += c.fits;
                if (!s->smallest_mem || c.mem_bytes < s->smallest_mem) s->smallest_mem = c.mem_bytes;
                add(s, &cfg, &c);
              }
            }
          }
        }
      }
      }
      }
    }
  }
  s->seconds = mt_now() - t0;
  qsort(s->r, (size_t)s->n, sizeof *s->r, by_speed);
  if (s->valid == 0) {
    mt_err_set(e, "no valid layout of %s on %d node(s) x %d devices (%d ranks): the mesh, batch "
                  "or layers do not divide", base->model_preset, nodes, p->devices_per_node, world);
    return -1;
  }
  if (s->fitting == 0) {
    mt_err_set(e, "%s does not fit on %d node(s) of %s at any layout: the smallest needs %.2f GiB "
                  "per device, the profile has %.2f GiB (%.2f GiB short)",
               base->model_preset, nodes, p->name, s->smallest_mem / 1073741824.0,
               p->mem_bytes / 1073741824.0, (s->smallest_mem - p->mem_bytes) / 1073741824.0);
    return -1;
  }
  return 0;
}

void mt_search_free(mt_search *s) {
  free(s->r);
  memset(s, 0, sizeof *s);
}

/* "tp=2,pp=1,zero=1,mb=4,..." : the keys meshslurm.py's campaign layouts take */
void mt_search_layout_text(const mt_search_row *r, char *buf, size_t len) {
  int n = snprintf(buf, len, "tp=%d,pp=%d,cp=%d,dp=%d,zero=%d,mb=%d,sp=%d,recompute=%d,schedule=%s,v=%d",
                   r->tp, r->pp, r->cp, r->dp, r->zero, r->micro_batch, r->sp, r->recompute,
                   r->schedule, r->virtual_stages);
  if (r->ep > 1 && n > 0 && (size_t)n < len) snprintf(buf + n, len - (size_t)n, ",ep=%d", r->ep);
}
