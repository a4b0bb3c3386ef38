/* The layouts of a model on N ranks, each priced by the cost model. The
 * rules are plan.h's (mt_search_run); a layout the run would refuse is not
 * listed; the memory and bytes are the plan's (mt_plan_rank_model).
 *
 * How it finishes on a 1T model and 3,072 GPUs: the divisors of the ranks
 * are enumerated once; each candidate is first bounded from the shape alone
 * (mt_cost_mem_lower_bound: the state of its largest stage; a candidate
 * that cannot fit is never priced) and by a step-time lower bound
 * (mt_cost_step_lower_bound); candidates are then priced in the order of
 * their lower bounds, and once `keep` fitting layouts are priced, a
 * candidate whose bound exceeds the keep-th fastest cannot enter them and
 * is not priced (nor any after it). The cost model prices one stage of
 * each kind (mt_cost_estimate_dt), not every stage. */
#include "plan/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* a candidate, compactly: the mesh and options, and its bounds */
typedef struct {
  short tp, pp, cp, ep, zero, mb, sp, rc, v, sched, first, last, k;
  int dp;
  double step_lb, mem_lb;
} cand;

enum { SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZBH1, SCHED_BFS, SCHED_ZBV, N_SCHED };
static const mt_pp_sched g_sched_kinds[] = {MT_SCHED_1F1B, MT_SCHED_INTERLEAVED, MT_SCHED_ZBH1,
                                            MT_SCHED_BFS, MT_SCHED_ZBV};
/* the virtual stages tried per schedule: interleaved and breadth-first 2
 * and 4, zb-v 2 (its V), the others 1 */
static int v_lo(int si) { return si == SCHED_INTERLEAVED || si == SCHED_BFS || si == SCHED_ZBV ? 2 : 1; }
static int v_hi(int si) { return si == SCHED_INTERLEAVED || si == SCHED_BFS ? 4 : v_lo(si); }

/* the candidate's layout over base: as a row of the table is applied */
static void apply(const cand *c, const mt_config *base, mt_config *cfg) {
  mt_search_row r = {.tp = c->tp, .pp = c->pp, .dp = c->dp, .cp = c->cp, .ep = c->ep,
                     .zero = c->zero, .micro_batch = c->mb, .sp = c->sp, .recompute = c->rc,
                     .virtual_stages = c->v, .pp_first = c->first, .pp_last = c->last,
                     .pp_slices = c->k, .schedule = g_sched_kinds[c->sched]};
  *cfg = *base;
  mt_search_row_apply(&r, cfg);
  cfg->save_params = 0;
}

static void add_row(mt_search *s, const mt_config *cfg, const mt_cost *c) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 64;
    s->r = realloc(s->r, (size_t)s->cap * sizeof *s->r);
    if (!s->r) mt_die("out of memory (layouts)");
  }
  mt_search_row *row = &s->r[s->n++];
  memset(row, 0, sizeof *row);
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
  row->pp_first = cfg->pp_first_layers;
  row->pp_last = cfg->pp_last_layers;
  row->pp_slices = cfg->pp_token_slices;
  row->schedule = cfg->pp_schedule;
}

static int by_speed(const void *a, const void *b) {
  const mt_search_row *x = a, *y = b;
  if (x->cost.tokens_per_s != y->cost.tokens_per_s)
    return x->cost.tokens_per_s < y->cost.tokens_per_s ? 1 : -1;
  return x->cost.mem_bytes < y->cost.mem_bytes ? -1 : x->cost.mem_bytes > y->cost.mem_bytes;
}

static int by_bound(const void *a, const void *b) {
  const cand *x = a, *y = b;
  return x->step_lb < y->step_lb ? -1 : x->step_lb > y->step_lb;
}

/* The split of L layers over pp stages (v chunks each) that balances the
 * first stage (the embedding's) and the last (the LM head's) against the
 * others: first and last stage counts, the middle stages an equal share
 * (Megatron's first/last stage counts), each a multiple of v, minimising
 * the slowest stage's compute. 0 when it is the even split (or none). */
static int balanced_split(int L, int pp, int v, double layer_s, double embed_s, double head_s,
                          int *first, int *last) {
  double best = INFINITY;
  int bf = 0, bl = 0;
  for (int f = v; f <= L; f += v)
    for (int l = v; f + l <= L; l += v) {
      int mid = L - f - l, per = 0;
      if (pp == 2 ? mid != 0 : (mid < pp - 2 || mid % (pp - 2) != 0)) continue;
      if (pp > 2) per = mid / (pp - 2);
      if (per % v) continue;
      double t = fmax(f * layer_s + embed_s, l * layer_s + head_s);
      if (pp > 2) t = fmax(t, per * layer_s);
      if (!bf || t < best * (1.0 - 1e-12)) best = t, bf = f, bl = l; /* the first of equals */
    }
  if (!bf || (L % pp == 0 && bf == L / pp && bl == L / pp)) return 0;
  *first = bf;
  *last = bl;
  return 1;
}

/* the most layers a stage holds under the split (first, last: 0 = even) */
static int most_layers(int L, int pp, int first, int last) {
  if (!first) return (L + pp - 1) / pp;
  int most = first > last ? first : last;
  if (pp > 2 && (L - first - last) / (pp - 2) > most) most = (L - first - last) / (pp - 2);
  return most;
}

/* Token slices (TeraPipe) are tried where they can pay: a pipeline with
 * fewer than 2 pp micro-batches a step (a bubble over a third), 1F1B or
 * interleaved, slices of 512 tokens or more, and what the run takes with
 * them (cp = 1, no MoE, not varlen: plan/layout.c) */
static int slices_apply(const mt_config *base, const mt_model_shape *sh, int si, int pp, int cp,
                        int m, int k) {
  return pp > 1 && m < 2 * pp && (si == SCHED_1F1B || si == SCHED_INTERLEAVED) && cp == 1 &&
         sh->moe_experts == 0 && base->seq_policy != MT_SEQ_VARLEN && sh->seq_len % k == 0 &&
         sh->seq_len / k >= 512;
}

/* The most activation sets the first stage holds at once under a schedule
 * (forwarded and not yet backed: a split backward's input pass releases
 * it here, the executor no earlier), from the schedule's own op list; the
 * memory bound's count (mt_cost_mem_lower_bound). Kept per schedule
 * shape: the search asks for the same few many times. */
typedef struct {
  int si, pp, m, v, k, sets;
} sets_entry;
typedef struct {
  sets_entry *e;
  int n, cap;
} sets_cache;

static int first_stage_sets(sets_cache *c, int si, int pp, int m, int v, int k) {
  for (int i = 0; i < c->n; i++) {
    const sets_entry *x = &c->e[i];
    if (x->si == si && x->pp == pp && x->m == m && x->v == v && x->k == k) return x->sets;
  }
  mt_pp_schedule s;
  mt_pp_schedule_build_sliced(&s, g_sched_kinds[si], pp, m, v, si == SCHED_ZBV, k);
  int held = 0, most = 0;
  for (int i = 0; i < s.n_ops[0]; i++) {
    const mt_pp_op_kind kind = s.ops[0][i].kind;
    if (kind == MT_PP_FWD && ++held > most) most = held;
    if (kind == MT_PP_BWD || kind == MT_PP_BWD_INPUT) held--;
  }
  mt_pp_schedule_free(&s);
  if (c->n == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 64;
    c->e = realloc(c->e, (size_t)c->cap * sizeof *c->e);
    if (!c->e) mt_die("out of memory (schedule shapes)");
  }
  c->e[c->n++] = (sets_entry){si, pp, m, v, k, most};
  return most;
}

typedef struct {
  cand *c;
  size_t n, cap;
} cand_list;

static void push(cand_list *l, const cand *c) {
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 4096;
    l->c = realloc(l->c, l->cap * sizeof *l->c);
    if (!l->c) mt_die("out of memory (layout candidates)");
  }
  l->c[l->n++] = *c;
}

int mt_search_run(const mt_config *base, const mt_cost_profile *p, const mt_search_opts *o,
                  mt_search *s, mt_err *e) {
  memset(s, 0, sizeof *s);
  double t0 = mt_now();
  /* the model's shape, on a neutral mesh */
  mt_config neutral = *base;
  neutral.tp = neutral.pp = neutral.dp = neutral.cp = neutral.ep = neutral.etp = 1;
  neutral.sp = 0;
  mt_model_shape sh;
  MT_TRY(e, mt_model_shape_from_config(&neutral, &sh, e));
  /* a histogram of document lengths that cannot be read fails the search,
   * not each layout (which would read as "no valid layout") */
  mt_plan_docs docs;
  MT_TRY(e, mt_plan_docs_price(&neutral, &sh, &docs, e));
  mt_cost_dtypes dt;
  if (o->dt) dt = *o->dt;
  else mt_cost_dtypes_default(base, p, &dt);
  const int world = o->world, L = sh.n_layer, dpn = p->devices_per_node;
  const double cap = p->mem_bytes - mt_cost_headroom(base, p);
  const int moe = sh.moe_experts > 0;
  /* the divisors of the ranks, once */
  int *div = mt_calloc((size_t)world + 1, sizeof(int)), n_div = 0;
  for (int d = 1; d <= world; d++)
    if (world % d == 0) div[n_div++] = d;
  cand_list cl = {0};
  sets_cache sets_c = {0};
  /* tp and ep groups inside a node (their collectives run in every layer),
   * unless plan.across_nodes asks for them across */
  const int group_max = base->plan_across_nodes ? world : dpn;
  for (int tp = 1; tp <= group_max && tp <= world; tp *= 2) {
    if (world % tp || sh.n_head % tp || sh.n_embd % tp) continue;
    for (int ip = 0; ip < n_div; ip++) {
      const int pp = div[ip];
      if (pp > L || pp > MT_PP_MAX_CHUNKS || (world / tp) % pp) continue;
      /* splits: even where the layers divide, and the one balancing the
       * embedding's and the head's stages (per chunk count v) */
      for (int cp = 1; cp * tp * pp <= world && cp <= 64; cp *= 2) {
        if ((world / (tp * pp)) % cp || sh.seq_len % (2 * cp)) continue;
        /* context parallelism only where a rank would otherwise hold more
         * than plan.cp_min_tokens tokens of a sequence, and each keeps 1024 */
        if (cp > 1 && (sh.seq_len <= base->plan_cp_min_tokens || sh.seq_len / cp < 1024)) continue;
        const int dp = world / (tp * pp * cp);
        if (base->global_batch % dp) continue;
        const int per_rank = base->global_batch / dp;
        for (int ep = 1; ep <= (moe ? sh.moe_experts : 1); ep *= 2) {
          if (moe && (sh.moe_experts % ep || (tp * cp * dp) % ep)) continue;
          if (ep > group_max || group_max % ep) continue; /* ep ranks are neighbours (etp = 1) */
          for (int mb = 1; mb <= per_rank && mb <= 64; mb *= 2) {
            if (per_rank % mb) continue;
            const int m = per_rank / mb;
            for (int rc = 0; rc <= 1; rc++) {
              mt_config probe;
              cand c0 = {.tp = (short)tp, .pp = (short)pp, .cp = (short)cp, .ep = (short)ep,
                         .mb = (short)mb, .rc = (short)rc, .v = 1, .dp = dp};
              apply(&c0, base, &probe);
              double layer_s, embed_s, head_s;
              mt_cost_layer_times(&probe, p, &sh, &layer_s, &embed_s, &head_s);
              for (int si = 0; si < (pp > 1 ? N_SCHED : 1); si++)
                for (int k = 1; k <= 8; k *= 2) { /* token slices */
                  if (k > 1 && !slices_apply(base, &sh, si, pp, cp, m, k)) continue;
                  if (pp > 1 && m * k < pp) continue; /* a unit per stage at least */
                  for (int v = v_lo(si); v <= v_hi(si); v *= 2) {
                    mt_err se = {0};
                    if (v > 1 && (pp * v > L ||
                                  mt_pp_sched_check(g_sched_kinds[si], pp, m * k, v, L, &se) != 0))
                      continue;
                    const int sets = pp > 1 && k == 1 ? first_stage_sets(&sets_c, si, pp, m, v, k) : 0;
                    /* the balancing split puts the embedding and the head on
                     * the first and the last rank: not zb-v's V (both on rank 0) */
                    for (int split = 0; split <= (pp > 1 && si != SCHED_ZBV); split++) {
                      int first = 0, last = 0;
                      if (split == 0 && (L % pp || (L / pp) % v)) continue;
                      if (split == 1 &&
                          !balanced_split(L, pp, v, layer_s, embed_s, head_s, &first, &last))
                        continue;
                      const int l_most = most_layers(L, pp, first, last);
                      for (int zero = 0; zero <= 3; zero++) {
                        if (zero >= 1 && dp * cp == 1) continue;
                        for (int sp = 0; sp <= (tp > 1); sp++) {
                          if (sp && (sh.seq_len / cp / k) % tp) continue;
                          if (!mt_plan_stack_runs(o->stack, tp, pp, cp, zero, sp, k,
                                                  g_sched_kinds[si]))
                            continue; /* not a layout the stack could run */
                          cand c = {.tp = (short)tp, .pp = (short)pp, .cp = (short)cp,
                                    .ep = (short)ep, .zero = (short)zero, .mb = (short)mb,
                                    .sp = (short)sp, .rc = (short)rc, .v = (short)v,
                                    .sched = (short)si, .first = (short)first,
                                    .last = (short)last, .k = (short)k, .dp = dp};
                          mt_config cfg;
                          apply(&c, base, &cfg);
                          s->tried++;
                          c.mem_lb = mt_cost_mem_lower_bound(&cfg, &dt, &sh,
                                                             first ? first : L / pp, l_most,
                                                             sets);
                          if (c.mem_lb > cap) {
                            s->pruned_mem++;
                            if (!s->smallest_mem || c.mem_lb < s->smallest_mem)
                              s->smallest_mem = c.mem_lb;
                            continue;
                          }
                          int l_mid = first ? (pp > 2 ? (L - first - last) / (pp - 2) : first)
                                            : L / pp;
                          c.step_lb = mt_cost_step_lower_bound(&cfg, p, &sh, dt.acts, dt.msg,
                                                               first ? first : L / pp,
                                                               l_mid, first ? last : L / pp);
                          push(&cl, &c);
                        }
                      }
                    }
                  }
                }
            }
          }
        }
      }
    }
  }
  free(div);
  free(sets_c.e);
  /* price in the order of the lower bounds; stop once keep layouts are
   * priced that no later candidate can beat */
  if (cl.n) qsort(cl.c, cl.n, sizeof *cl.c, by_bound); /* (qsort of NULL is undefined) */
  const int keep = o->keep;
  double *best = keep > 0 ? mt_calloc((size_t)keep, sizeof(double)) : NULL; /* sorted */
  int n_best = 0;
  double smallest_priced = 0.0;
  for (size_t i = 0; i < cl.n; i++) {
    const cand *c = &cl.c[i];
    if (keep > 0 && n_best == keep && c->step_lb > best[keep - 1]) {
      s->pruned_time += (int)(cl.n - i);
      break;
    }
    mt_config cfg;
    apply(c, base, &cfg);
    mt_err le = {0};
    mt_cost cost;
    if (mt_cost_estimate_dt(&cfg, p, &dt, &cost, &le) != 0) continue; /* refused by the run */
    s->valid++;
    /* the pruning's premise, checked on every layout priced: neither bound
     * exceeds the exact price (a relative 1e-9 for rounding) */
    if (c->step_lb > cost.step_s * (1.0 + 1e-9) || c->mem_lb > cost.mem_bytes * (1.0 + 1e-9))
      s->bounds_over++;
    if (!smallest_priced || cost.mem_bytes + cost.headroom < smallest_priced)
      smallest_priced = cost.mem_bytes + cost.headroom;
    if (!cost.fits) continue;
    s->fitting++;
    add_row(s, &cfg, &cost);
    if (keep > 0 && (n_best < keep || cost.step_s < best[keep - 1])) { /* the keep fastest */
      int at = n_best < keep ? n_best++ : keep - 1;
      best[at] = cost.step_s;
      for (; at > 0 && best[at - 1] > best[at]; at--) {
        double t = best[at];
        best[at] = best[at - 1];
        best[at - 1] = t;
      }
    }
  }
  free(best);
  free(cl.c);
  if (smallest_priced && (!s->smallest_mem || smallest_priced - mt_cost_headroom(base, p) <
                                                    s->smallest_mem))
    s->smallest_mem = smallest_priced - mt_cost_headroom(base, p);
  s->seconds = mt_now() - t0;
  if (s->n) qsort(s->r, (size_t)s->n, sizeof *s->r, by_speed);
  if (s->tried == 0 || (s->valid == 0 && s->pruned_mem == 0)) {
    mt_err_set(e, "no valid layout of %s on %d ranks (%d devices a node): the mesh, batch or "
                  "layers do not divide", mt_preset_name(base->model_preset), world, dpn);
    return -1;
  }
  if (s->fitting == 0) {
    const double GiB = 1073741824.0;
    mt_err_set(e, "%s does not fit on %d ranks of %s at any layout: the leanest needs at least %.2f GiB "
                  "per device, the profile has %.2f GiB less %.2f GiB of headroom (plan.headroom): "
                  "%.2f GiB short",
               mt_preset_name(base->model_preset), world, p->name, s->smallest_mem / GiB,
               p->mem_bytes / GiB,
               mt_cost_headroom(base, p) / GiB, (s->smallest_mem - cap) / GiB);
    return -1;
  }
  return 0;
}

int mt_search_layouts(const mt_config *base, const mt_cost_profile *p, int nodes, mt_search *s,
                      mt_err *e) {
  mt_search_opts o = {.world = nodes * p->devices_per_node, .keep = 0, .dt = NULL};
  MT_TRY(e, mt_search_run(base, p, &o, s, e));
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
                   mt_pp_sched_name(r->schedule), r->virtual_stages);
  if (r->ep > 1 && n > 0 && (size_t)n < len) n += snprintf(buf + n, len - (size_t)n, ",ep=%d", r->ep);
  if (r->pp_first && n > 0 && (size_t)n < len)
    n += snprintf(buf + n, len - (size_t)n, ",pp_first=%d,pp_last=%d", r->pp_first, r->pp_last);
  if (r->pp_slices > 1 && n > 0 && (size_t)n < len)
    snprintf(buf + n, len - (size_t)n, ",slices=%d", r->pp_slices);
}

void mt_search_row_apply(const mt_search_row *r, mt_config *cfg) {
  cfg->tp = r->tp;
  cfg->pp = r->pp;
  cfg->dp = r->dp;
  cfg->cp = r->cp;
  cfg->ep = r->ep > 0 ? r->ep : 1;
  cfg->etp = 1;
  if (r->cp > 1) cfg->cp_mode = MT_CP_RING;
  cfg->zero = r->zero;
  cfg->micro_batch = r->micro_batch;
  cfg->micro_batches = 0;
  cfg->sp = r->sp;
  cfg->recompute = r->recompute;
  cfg->virtual_stages = r->virtual_stages;
  cfg->pp_split[0] = '\0';
  cfg->pp_first_layers = r->pp_first;
  cfg->pp_last_layers = r->pp_last;
  cfg->pp_token_slices = r->pp_slices > 1 ? r->pp_slices : 1;
  cfg->pp_schedule = r->schedule;
}
