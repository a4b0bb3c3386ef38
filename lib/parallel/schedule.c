/* Pipeline schedules as data: per pp rank, the list of forward, backward and
 * point-to-point operations in program order, and a validator that runs the
 * lists in a unit-time simulation.
 *
 * Each schedule is first a compute order per rank (which micro-batch and
 * chunk to forward or back next); the sends and receives are then inserted
 * around the compute ops the same way for every schedule: a receive right
 * before the op that needs the data, a send right after the op that made it.
 * An executor with non-blocking sends and blocking receives in this order
 * cannot deadlock when the simulation below finishes (the simulation is such
 * an executor with fixed op times; the order alone decides whether a wait
 * cycle exists).
 *
 *   gpipe        all forwards, then all backwards (v = 1)
 *   1f1b         PipeDream-Flush: pp - rank - 1 warm-up forwards, then one
 *                forward one backward, then the remaining backwards
 *   interleaved  Megatron's interleaved 1F1B over v chunks per rank
 *                (m % pp == 0); forwards in groups of pp micro-batches per
 *                chunk, backwards likewise with the chunks reversed
 *   zb-h1        zero bubble H1 (Qi et al., 2023): the backward split into
 *                B (input gradient) and W (weight gradient); stage r
 *                delays its W passes by r micro-batches, so they fill what
 *                would be 1F1B's bubbles; at most pp micro-batches held on
 *                any stage (F to W), the peak 1F1B has on stage 0.
 *   breadth-first
 *                Breadth-First Pipeline Parallelism (Lamy-Poirier, 2023):
 *                the looping placement of interleaved (v chunks per rank,
 *                v >= 1), but every micro-batch of a virtual stage runs
 *                before the next virtual stage: forwards chunk by chunk,
 *                then backwards with the chunks reversed. All m x v
 *                activation sets are held (as GPipe's m); in exchange a
 *                rank runs m micro-batches of one chunk in a row, so
 *                ZeRO-3 gathers a chunk's parameters once per step for
 *                forward and once for backward, and ZeRO-2/3 reduce its
 *                gradients once, after its last micro-batch (pp.c).
 *   zb-v         the zero-bubble V schedule (Qi et al., 2023, ZB-V): v = 2
 *                chunks per rank placed in a V (rank r holds virtual stages
 *                r and 2pp-1-r, so the turn at the bottom of the V stays on
 *                rank pp-1 and the first and last stages share rank 0),
 *                the backward split into B and W. The order comes from a
 *                unit-time list scheduler (F = B = W): a rank runs a ready
 *                B first, else a ready F while it holds fewer than 2pp
 *                chunk activation sets (pp micro-batches of a whole stage,
 *                1F1B's peak), else a pending W, which fills the time the
 *                others would idle. */
#include "parallel/parallel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *mt_pp_op_name(mt_pp_op_kind kind) {
  static const char *n[] = {"F", "B", "BI", "BW", "SA", "RA", "SG", "RG"};
  return (unsigned)kind < MT_PP_NKINDS ? n[kind] : "?";
}

int mt_pp_sched_check(mt_pp_sched kind, int pp, int m, int v, int n_layer, mt_err *e) {
  const char *name = mt_pp_sched_name(kind);
  if (kind != MT_SCHED_GPIPE && kind != MT_SCHED_BFS && m < pp) {
    mt_err_set(e,
               "train.micro_batches = %d is smaller than parallel.pp = %d: parallel.schedule = "
               "%s needs at least one micro-batch per stage",
               m, pp, name);
    return -1;
  }
  if (kind == MT_SCHED_ZBV && v != 2) {
    mt_err_set(e, "parallel.schedule = zb-v needs parallel.virtual_stages = 2 (got %d)", v);
    return -1;
  }
  if (kind != MT_SCHED_INTERLEAVED && kind != MT_SCHED_BFS && kind != MT_SCHED_ZBV && v != 1) {
    mt_err_set(e,
               "parallel.virtual_stages = %d needs parallel.schedule = interleaved or "
               "breadth-first (got %s)",
               v, name);
    return -1;
  }
  if (kind == MT_SCHED_INTERLEAVED && v < 2) {
    mt_err_set(e, "parallel.schedule = interleaved needs parallel.virtual_stages >= 2 (got %d)",
               v);
    return -1;
  }
  if (kind == MT_SCHED_INTERLEAVED && m % pp != 0) {
    mt_err_set(e,
               "parallel.schedule = interleaved needs train.micro_batches = %d to be a multiple "
               "of parallel.pp = %d",
               m, pp);
    return -1;
  }
  if ((long)pp * v > n_layer) {
    mt_err_set(e, "parallel.pp x parallel.virtual_stages = %d x %d exceeds model.n_layer = %d",
               pp, v, n_layer);
    return -1;
  }
  return 0;
}

int mt_pp_slices_check(mt_pp_sched kind, int k, int T, mt_err *e) {
  if (k <= 1) return 0;
  if (kind != MT_SCHED_GPIPE && kind != MT_SCHED_1F1B && kind != MT_SCHED_INTERLEAVED) {
    mt_err_set(e,
               "parallel.pp_token_slices = %d needs parallel.schedule = gpipe, 1f1b or "
               "interleaved (got %s)",
               k, mt_pp_sched_name(kind));
    return -1;
  }
  if (T % k != 0) {
    mt_err_set(e, "parallel.pp_token_slices = %d does not divide the %d tokens of a sequence",
               k, T);
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------------ */
/* building                                                            */

/* The unit the b-th backward of a unit order visits: a micro-batch's
 * slices in reverse (k = 1: b itself). */
static int back_unit(const mt_pp_schedule *s, int b) {
  return b / s->k * s->k + (s->k - 1 - b % s->k);
}

typedef struct {
  mt_pp_op *ops;
  int n, cap;
} op_list;

static void push(op_list *l, mt_pp_op_kind kind, int mb, int chunk) {
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 64;
    l->ops = realloc(l->ops, (size_t)l->cap * sizeof *l->ops);
    if (!l->ops) mt_die("out of memory (pipeline schedule)");
  }
  l->ops[l->n++] = (mt_pp_op){.kind = kind, .mb = mb, .chunk = chunk};
}

int mt_pp_vs_of(const mt_pp_schedule *s, int r, int c) {
  return s->vshape && c == 1 ? 2 * s->pp - 1 - r : c * s->pp + r;
}

int mt_pp_vs_rank(const mt_pp_schedule *s, int vs) {
  return mt_registry_vs_rank(s->pp, s->vshape, vs);
}

/* A compute op with the receive it needs before and the send it makes after
 * (none where the neighbouring virtual stage is on the same rank: the V's
 * turn). */
static void push_compute(op_list *l, mt_pp_op_kind kind, int mb, int chunk, int rank,
                         const mt_pp_schedule *s) {
  const int pp = s->pp, v = s->v;
  int vs = mt_pp_vs_of(s, rank, chunk), last = pp * v - 1;
  int remote_prev = vs > 0 && mt_pp_vs_rank(s, vs - 1) != rank;
  int remote_next = vs < last && mt_pp_vs_rank(s, vs + 1) != rank;
  if (kind == MT_PP_FWD) {
    if (remote_prev) push(l, MT_PP_RECV_ACT, mb, chunk);
    push(l, kind, mb, chunk);
    if (remote_next) push(l, MT_PP_SEND_ACT, mb, chunk);
  } else if (kind == MT_PP_BWD || kind == MT_PP_BWD_INPUT) {
    if (remote_next) push(l, MT_PP_RECV_GRAD, mb, chunk);
    push(l, kind, mb, chunk);
    if (remote_prev) push(l, MT_PP_SEND_GRAD, mb, chunk);
  } else {
    push(l, kind, mb, chunk);
  }
}

/* ZB-V's order by list scheduling in unit time (see the top): every rank's
 * compute ops, then push_compute adds the messages. Returns the most chunk
 * activation sets a rank held (F to W). */
static int build_zbv(op_list *lists, const mt_pp_schedule *s) {
  const int pp = s->pp, m = s->m;
  const int nvs = 2 * pp, cap = 2 * pp;
  /* per cell (vs, mb): when its F and its B finished (-1: not yet), W done */
  int n = nvs * m;
  int *f_end = malloc((size_t)n * sizeof(int)), *b_end = malloc((size_t)n * sizeof(int));
  char *w_done = calloc((size_t)n, 1);
  int *busy_until = calloc((size_t)pp, sizeof(int)), *held = calloc((size_t)pp, sizeof(int));
  int *next_f = calloc((size_t)pp * 2, sizeof(int)), *next_b = calloc((size_t)pp * 2, sizeof(int));
  int *next_w = calloc((size_t)pp * 2, sizeof(int));
  if (!f_end || !b_end || !w_done || !busy_until || !held || !next_f || !next_b || !next_w)
    mt_die("out of memory (zb-v schedule)");
  for (int i = 0; i < n; i++) f_end[i] = b_end[i] = -1;
  int left = 3 * n, peak = 0;
  for (int t = 0; left > 0; t++) {
    if (t > 16 * n + 16) mt_die("zb-v: the list scheduler made no progress (pp %d, m %d)", pp, m);
    for (int r = 0; r < pp; r++) {
      if (busy_until[r] > t) continue;
      int kind = -1, c = -1, mb = -1;
      /* a ready B: the chunk further down the V first (its gradient came first) */
      for (int k = 1; k >= 0 && kind < 0; k--) {
        int vs = mt_pp_vs_of(s, r, k), i = next_b[r * 2 + k];
        if (i >= m) continue;
        int up = (vs + 1) * m + i; /* the cell whose B sends this one its gradient */
        int ready = f_end[vs * m + i] >= 0 && f_end[vs * m + i] <= t &&
                    (vs == nvs - 1 || (b_end[up] >= 0 && b_end[up] <= t));
        if (ready) kind = MT_PP_BWD_INPUT, c = k, mb = i;
      }
      /* a ready F within the memory cap: the chunk further along first */
      for (int k = 1; k >= 0 && kind < 0 && held[r] < cap; k--) {
        int vs = mt_pp_vs_of(s, r, k), i = next_f[r * 2 + k];
        if (i >= m) continue;
        if (vs == 0 || (f_end[(vs - 1) * m + i] >= 0 && f_end[(vs - 1) * m + i] <= t))
          kind = MT_PP_FWD, c = k, mb = i;
      }
      /* else the oldest pending W: a chunk's B passes and W passes each
       * run in micro-batch order (B ends increase), so its oldest pending W
       * is its next W's, pending once that B has ended */
      for (int k = 0; k < 2 && kind < 0; k++) {
        int vs = mt_pp_vs_of(s, r, k), i = next_w[r * 2 + k];
        if (i < m && b_end[vs * m + i] >= 0 && b_end[vs * m + i] <= t && !w_done[vs * m + i])
          kind = MT_PP_BWD_WEIGHT, c = k, mb = i;
      }
      if (kind < 0) continue;
      int cell = mt_pp_vs_of(s, r, c) * m + mb;
      if (kind == MT_PP_FWD) {
        f_end[cell] = t + 1;
        next_f[r * 2 + c]++;
        if (++held[r] > peak) peak = held[r];
      } else if (kind == MT_PP_BWD_INPUT) {
        b_end[cell] = t + 1;
        next_b[r * 2 + c]++;
      } else {
        w_done[cell] = 1;
        next_w[r * 2 + c]++;
        held[r]--;
      }
      busy_until[r] = t + 1;
      left--;
      push_compute(&lists[r], (mt_pp_op_kind)kind, mb, c, r, s);
    }
  }
  free(f_end); free(b_end); free(w_done); free(busy_until); free(held); free(next_f); free(next_b);
  free(next_w);
  return peak;
}

/* Megatron's interleaved order: the k-th forward (backward) of a rank. */
static void interleaved_op(int k, int pp, int v, int backward, int *mb, int *chunk) {
  int c = (k / pp) % v;
  *chunk = backward ? v - 1 - c : c;
  *mb = (k / (pp * v)) * pp + k % pp;
}

/* the k-th backward of a rank in 1F1B's order: with token slices each
 * micro-batch's slices in reverse */
static void backward_op(int k, const mt_pp_schedule *s, int *u, int *chunk) {
  interleaved_op(k, s->pp, s->v, 1, u, chunk);
  *u = back_unit(s, *u);
}

/* 1F1B and interleaved: the warm-up forwards, then one forward one
 * backward, then the remaining backwards. With token slices a micro-batch's
 * backward starts at its last slice, so every rank's warm-up grows by the
 * forwards the last rank (the shortest warm-up) must run before each
 * backward's own forward is there (1F1B: k - 1): the ranks keep 1F1B's
 * offsets to each other, and no backward waits on a forward.
 * Returns the warm-up forwards (the sets held at once: one more). */
static int build_1f1b_like(op_list *l, int rank, const mt_pp_schedule *s) {
  const int pp = s->pp, m = s->m, v = s->v;
  int total = m * v;
  int warm = v == 1 ? pp - rank - 1 : (pp - rank - 1) * 2 + (v - 1) * pp;
  int mb, c;
  if (s->k > 1) { /* the last rank's backward b runs after its forward base + b */
    const int base = v == 1 ? 0 : (v - 1) * pp;
    int *f_pos = mt_malloc((size_t)total * sizeof(int));
    for (int k = 0; k < total; k++) {
      interleaved_op(k, pp, v, 0, &mb, &c);
      f_pos[mb * v + c] = k;
    }
    int more = 0;
    for (int k = 0; k < total; k++) {
      backward_op(k, s, &mb, &c);
      if (f_pos[mb * v + c] - (base + k) > more) more = f_pos[mb * v + c] - (base + k);
    }
    free(f_pos);
    warm += more;
  }
  if (warm > total) warm = total;
  for (int k = 0; k < warm; k++) {
    interleaved_op(k, pp, v, 0, &mb, &c);
    push_compute(l, MT_PP_FWD, mb, c, rank, s);
  }
  for (int k = 0; k < total - warm; k++) {
    interleaved_op(warm + k, pp, v, 0, &mb, &c);
    push_compute(l, MT_PP_FWD, mb, c, rank, s);
    backward_op(k, s, &mb, &c);
    push_compute(l, MT_PP_BWD, mb, c, rank, s);
  }
  for (int k = total - warm; k < total; k++) {
    backward_op(k, s, &mb, &c);
    push_compute(l, MT_PP_BWD, mb, c, rank, s);
  }
  return warm;
}

/* ZB-H1 (Qi et al., 2023, Fig. 3), stage r of p: min(p - r, m) warm-up
 * forwards, then for each micro-batch k: B(k), W(k - r) once k >= r (the
 * later a stage, the longer it delays W, so W fills what would be waiting
 * time), and the next F; the W passes left at the end. Stage r holds at most
 * p micro-batches (F to W): 1F1B's peak, which stage 0 has there too. */
static void build_zbh1(op_list *l, int r, const mt_pp_schedule *s) {
  const int pp = s->pp, m = s->m;
  int warm = pp - r < m ? pp - r : m, next_f = 0, next_w = 0;
  for (; next_f < warm; next_f++) push_compute(l, MT_PP_FWD, next_f, 0, r, s);
  for (int k = 0; k < m; k++) {
    push_compute(l, MT_PP_BWD_INPUT, k, 0, r, s);
    if (k >= r) push_compute(l, MT_PP_BWD_WEIGHT, next_w++, 0, r, s);
    if (next_f < m) push_compute(l, MT_PP_FWD, next_f++, 0, r, s);
  }
  while (next_w < m) push_compute(l, MT_PP_BWD_WEIGHT, next_w++, 0, r, s);
}

void mt_pp_schedule_build(mt_pp_schedule *s, mt_pp_sched kind, int pp, int m, int v) {
  mt_pp_schedule_build_placed(s, kind, pp, m, v, kind == MT_SCHED_ZBV);
}

void mt_pp_schedule_build_placed(mt_pp_schedule *s, mt_pp_sched kind, int pp, int m, int v,
                                 int vshape) {
  mt_pp_schedule_build_sliced(s, kind, pp, m, v, vshape, 1);
}

void mt_pp_schedule_build_sliced(mt_pp_schedule *s, mt_pp_sched kind, int pp, int m, int v,
                                 int vshape, int k) {
  memset(s, 0, sizeof *s);
  s->kind = kind;
  s->pp = pp;
  s->k = k > 1 ? k : 1;
  s->m = m * s->k;
  m = s->m;
  s->v = v;
  s->n_ops = mt_calloc((size_t)pp, sizeof(int));
  s->ops = mt_calloc((size_t)pp, sizeof(mt_pp_op *));
  s->max_inflight = mt_calloc((size_t)pp, sizeof(int));
  s->vshape = vshape;
  op_list *lists = mt_calloc((size_t)pp, sizeof(op_list));
  int zbv_peak = kind == MT_SCHED_ZBV ? build_zbv(lists, s) : 0;
  for (int r = 0; r < pp; r++) {
    int lim = pp - r;
    switch (kind) {
    case MT_SCHED_GPIPE: /* v > 1 (not offered by config): chunk by chunk per micro-batch */
      for (int i = 0; i < m; i++)
        for (int c = 0; c < v; c++) push_compute(&lists[r], MT_PP_FWD, i, c, r, s);
      for (int i = 0; i < m; i++)
        for (int c = v - 1; c >= 0; c--)
          push_compute(&lists[r], MT_PP_BWD, back_unit(s, i), c, r, s);
      lim = m * v;
      break;
    case MT_SCHED_1F1B:
    case MT_SCHED_INTERLEAVED:
      lim = build_1f1b_like(&lists[r], r, s) + 1;
      break;
    case MT_SCHED_ZBH1:
      build_zbh1(&lists[r], r, s);
      lim = pp;
      break;
    case MT_SCHED_BFS: /* every micro-batch of a chunk, chunk after chunk */
      for (int c = 0; c < v; c++)
        for (int i = 0; i < m; i++) push_compute(&lists[r], MT_PP_FWD, i, c, r, s);
      for (int c = v - 1; c >= 0; c--)
        for (int i = 0; i < m; i++) push_compute(&lists[r], MT_PP_BWD, i, c, r, s);
      lim = m * v;
      break;
    case MT_SCHED_ZBV: /* built above, all ranks together */
      lim = zbv_peak;
      break;
    }
    s->max_inflight[r] = lim < m * v ? lim : m * v;
    s->n_ops[r] = lists[r].n;
    s->ops[r] = lists[r].ops;
  }
  free(lists);
}

void mt_pp_schedule_free(mt_pp_schedule *s) {
  for (int r = 0; r < s->pp; r++) free(s->ops[r]);
  free(s->ops);
  free(s->n_ops);
  free(s->max_inflight);
  memset(s, 0, sizeof *s);
}

void mt_pp_schedule_print(const mt_pp_schedule *s, int rank, FILE *f) {
  fprintf(f, "# schedule %s, pp = %d, micro_batches = %d, virtual_stages = %d, ",
          mt_pp_sched_name(s->kind), s->pp, s->m / s->k, s->v);
  if (s->k > 1) fprintf(f, "token slices = %d, ", s->k);
  fprintf(f, "rank %d: %d ops, at most %d activation sets held\n", rank, s->n_ops[rank],
          s->max_inflight[rank]);
  for (int i = 0; i < s->n_ops[rank]; i++) {
    const mt_pp_op *o = &s->ops[rank][i];
    if (s->k > 1)
      fprintf(f, "%s mb=%d slice=%d chunk=%d\n", mt_pp_op_name(o->kind), o->mb / s->k,
              o->mb % s->k, o->chunk);
    else
      fprintf(f, "%s mb=%d chunk=%d\n", mt_pp_op_name(o->kind), o->mb, o->chunk);
  }
}

/* ------------------------------------------------------------------ */
/* validation by simulation                                            */

/* One message in flight on a channel: which (mb, virtual stage) it carries. */
typedef struct {
  int mb, vs;
  double t; /* send time */
} msg;

typedef struct {
  msg *q;
  int head, n;
} channel;

/* the channel from src to dst carrying activations (is_act) or gradients */
static int chan(int src, int dst, int is_act, int pp) {
  return (src * 2 + (is_act ? 0 : 1)) * 2 + (dst == (src + 1) % pp ? 0 : 1);
}

int mt_pp_schedule_validate(const mt_pp_schedule *s, double t_f, double t_b, double t_bi,
                            double t_bw, mt_pp_sim *out, mt_err *e) {
  return mt_pp_schedule_simulate(s, t_f, t_b, t_bi, t_bw, NULL, out, e);
}

int mt_pp_schedule_simulate(const mt_pp_schedule *s, double t_f, double t_b, double t_bi,
                            double t_bw, const mt_pp_link *links, mt_pp_sim *out, mt_err *e) {
  mt_pp_times *t = mt_malloc((size_t)s->pp * sizeof *t);
  for (int r = 0; r < s->pp; r++) t[r] = (mt_pp_times){t_f, t_b, t_bi, t_bw};
  int rc = mt_pp_schedule_simulate_ranks(s, t, links, out, e);
  free(t);
  return rc;
}

int mt_pp_schedule_simulate_ranks(const mt_pp_schedule *s, const mt_pp_times *times,
                                  const mt_pp_link *links, mt_pp_sim *out, mt_err *e) {
  return mt_pp_schedule_simulate_trace(s, times, links, NULL, NULL, out, e);
}

int mt_pp_schedule_simulate_trace(const mt_pp_schedule *s, const mt_pp_times *times,
                                  const mt_pp_link *links, double *const *start,
                                  double *const *end, mt_pp_sim *out, mt_err *e) {
  const int pp = s->pp, m = s->m, v = s->v, nvs = pp * v, k = s->k > 1 ? s->k : 1;
  int rc = -1;
  /* per virtual stage and micro-batch: what has happened */
  size_t cells = (size_t)nvs * m;
  char *f_done = mt_calloc(cells, 1), *b_done = mt_calloc(cells, 1), *bi_done = mt_calloc(cells, 1);
  char *w_done = mt_calloc(cells, 1), *have_act = mt_calloc(cells, 1);
  char *have_grad = mt_calloc(cells, 1), *sent_act = mt_calloc(cells, 1);
  char *sent_grad = mt_calloc(cells, 1);
  /* channels: [src][kind 0 act, 1 grad][dst 0: src+1, 1: src-1 (mod pp)]; a
   * V sends activations both ways */
  const int nch = 4 * pp;
  channel *ch = mt_calloc((size_t)nch, sizeof(channel));
  int cap = 2 * m * v + 1;
  for (int i = 0; i < nch; i++) ch[i].q = mt_calloc((size_t)cap, sizeof(msg));
  int *pc = mt_calloc((size_t)pp, sizeof(int)), *inflight = mt_calloc((size_t)pp, sizeof(int));
  int *peak = mt_calloc((size_t)pp, sizeof(int));
  double *clock = mt_calloc((size_t)pp, sizeof(double)), *busy = mt_calloc((size_t)pp,
                                                                            sizeof(double));
  double *grads_end = mt_calloc((size_t)pp, sizeof(double));
  double *chunk_end = mt_calloc((size_t)pp * v, sizeof(double));
  double *link_free = mt_calloc((size_t)2 * pp, sizeof(double));
#define FAIL(...)                                   \
  do {                                              \
    mt_err_set(e, __VA_ARGS__);                     \
    goto done;                                      \
  } while (0)
  for (;;) {
    int progress = 0, finished = 1;
    for (int r = 0; r < pp; r++) {
      while (pc[r] < s->n_ops[r]) {
        const mt_pp_op *o = &s->ops[r][pc[r]];
        const double op_t0 = clock[r];
        if (o->mb < 0 || o->mb >= m || o->chunk < 0 || o->chunk >= v)
          FAIL("rank %d op %d: micro-batch %d / chunk %d out of range", r, pc[r], o->mb,
               o->chunk);
        int vs = mt_pp_vs_of(s, r, o->chunk);
        size_t cell = (size_t)vs * m + o->mb;
        const char *nm = mt_pp_op_name(o->kind);
        if (o->kind == MT_PP_RECV_ACT || o->kind == MT_PP_RECV_GRAD) {
          int is_act = o->kind == MT_PP_RECV_ACT;
          if (is_act ? vs == 0 : vs == nvs - 1)
            FAIL("rank %d op %d: %s mb %d on virtual stage %d has no sender", r, pc[r], nm,
                 o->mb, vs);
          int src = mt_pp_vs_rank(s, is_act ? vs - 1 : vs + 1);
          if (src == r)
            FAIL("rank %d op %d: %s mb %d on virtual stage %d from its own rank", r, pc[r], nm,
                 o->mb, vs);
          channel *c = &ch[chan(src, r, is_act, pp)];
          if (c->head == c->n) break; /* waits for its send */
          msg *g = &c->q[c->head++];
          int want_vs = is_act ? vs - 1 : vs + 1;
          if (g->mb != o->mb || g->vs != want_vs)
            FAIL("rank %d op %d: %s expects mb %d from virtual stage %d, the channel from rank "
                 "%d delivers mb %d of virtual stage %d (order differs)",
                 r, pc[r], nm, o->mb, want_vs, src, g->mb, g->vs);
          if (g->t > clock[r]) clock[r] = g->t;
          (is_act ? have_act : have_grad)[cell] = 1;
        } else if (o->kind == MT_PP_SEND_ACT || o->kind == MT_PP_SEND_GRAD) {
          int is_act = o->kind == MT_PP_SEND_ACT;
          if (is_act ? vs == nvs - 1 : vs == 0)
            FAIL("rank %d op %d: %s mb %d from virtual stage %d has no receiver", r, pc[r], nm,
                 o->mb, vs);
          if (is_act ? !f_done[cell] : !(b_done[cell] || bi_done[cell]))
            FAIL("rank %d op %d: %s mb %d before the op that computes it", r, pc[r], nm, o->mb);
          char *sent = is_act ? sent_act : sent_grad;
          if (sent[cell]) FAIL("rank %d op %d: %s mb %d sent twice", r, pc[r], nm, o->mb);
          sent[cell] = 1;
          int dst = mt_pp_vs_rank(s, is_act ? vs + 1 : vs - 1);
          if (dst == r)
            FAIL("rank %d op %d: %s mb %d from virtual stage %d to its own rank", r, pc[r], nm,
                 o->mb, vs);
          channel *c = &ch[chan(r, dst, is_act, pp)];
          double t = clock[r];
          if (links) {
            int l = 2 * r + (dst == (r + 1) % pp ? 0 : 1);
            if (link_free[l] > t) t = link_free[l];
            link_free[l] = t + links[l].xfer;
            t = link_free[l] + links[l].lat;
          }
          c->q[c->n++] = (msg){.mb = o->mb, .vs = vs, .t = t};
        } else {
          double dt = 0;
          if (o->kind == MT_PP_FWD) {
            if (f_done[cell]) FAIL("rank %d op %d: F mb %d chunk %d twice", r, pc[r], o->mb, o->chunk);
            if (vs > 0 && !have_act[cell])
              FAIL("rank %d op %d: F mb %d chunk %d before its input activation arrived", r,
                   pc[r], o->mb, o->chunk);
            if (o->mb % k > 0 && !f_done[cell - 1])
              FAIL("rank %d op %d: F of micro-batch %d slice %d chunk %d before slice %d (the "
                   "keys and values it attends)",
                   r, pc[r], o->mb / k, o->mb % k, o->chunk, o->mb % k - 1);
            f_done[cell] = 1;
            if (++inflight[r] > peak[r]) peak[r] = inflight[r];
            if (inflight[r] > s->max_inflight[r])
              FAIL("rank %d op %d: %d activation sets held, the schedule promises at most %d",
                   r, pc[r], inflight[r], s->max_inflight[r]);
            dt = times[r].f;
            if (vs < nvs - 1 && mt_pp_vs_rank(s, vs + 1) == r) { /* the V's turn: no message */
              have_act[cell + (size_t)m] = 1;
              sent_act[cell] = 1;
            }
          } else if (o->kind == MT_PP_BWD || o->kind == MT_PP_BWD_INPUT) {
            if (b_done[cell] || bi_done[cell])
              FAIL("rank %d op %d: backward of mb %d chunk %d twice", r, pc[r], o->mb, o->chunk);
            if (!f_done[cell])
              FAIL("rank %d op %d: %s mb %d chunk %d before its forward", r, pc[r], nm, o->mb,
                   o->chunk);
            if (vs < nvs - 1 && !have_grad[cell])
              FAIL("rank %d op %d: %s mb %d chunk %d before its output gradient arrived", r,
                   pc[r], nm, o->mb, o->chunk);
            if (o->mb % k < k - 1 && !(b_done[cell + 1] || bi_done[cell + 1]))
              FAIL("rank %d op %d: %s of micro-batch %d slice %d chunk %d before slice %d's "
                   "(whose backward adds to its keys' and values' gradients)",
                   r, pc[r], nm, o->mb / k, o->mb % k, o->chunk, o->mb % k + 1);
            if (vs > 0 && mt_pp_vs_rank(s, vs - 1) == r) {
              have_grad[cell - (size_t)m] = 1;
              sent_grad[cell] = 1;
            }
            if (o->kind == MT_PP_BWD) {
              b_done[cell] = 1;
              inflight[r]--;
              dt = times[r].b;
            } else {
              bi_done[cell] = 1;
              dt = times[r].bi;
            }
          } else if (o->kind == MT_PP_BWD_WEIGHT) {
            if (!bi_done[cell] || w_done[cell])
              FAIL("rank %d op %d: W mb %d chunk %d without its B first (or twice)", r, pc[r],
                   o->mb, o->chunk);
            w_done[cell] = 1;
            inflight[r]--;
            dt = times[r].bw;
          } else {
            FAIL("rank %d op %d: unknown op kind %d", r, pc[r], (int)o->kind);
          }
          clock[r] += dt;
          busy[r] += dt;
          if (o->kind == MT_PP_BWD || o->kind == MT_PP_BWD_WEIGHT)
            grads_end[r] = chunk_end[(size_t)r * v + o->chunk] = clock[r];
        }
        if (start && start[r]) { /* op pc[r]: begun when the rank reached it, ended now */
          start[r][pc[r]] = op_t0;
          end[r][pc[r]] = clock[r];
        }
        pc[r]++;
        progress = 1;
      }
      if (pc[r] < s->n_ops[r]) finished = 0;
    }
    if (finished) break;
    if (!progress) {
      int r = 0;
      while (pc[r] >= s->n_ops[r]) r++;
      const mt_pp_op *o = &s->ops[r][pc[r]];
      FAIL("deadlock: rank %d waits forever at op %d (%s mb %d chunk %d)", r, pc[r],
           mt_pp_op_name(o->kind), o->mb, o->chunk);
    }
  }
  /* completeness: every cell forwarded and backed once, every boundary crossed */
  for (int vs = 0; vs < nvs; vs++)
    for (int i = 0; i < m; i++) {
      size_t cell = (size_t)vs * m + i;
      if (!f_done[cell]) FAIL("virtual stage %d never forwards mb %d", vs, i);
      if (!(b_done[cell] || (bi_done[cell] && w_done[cell])))
        FAIL("virtual stage %d never completes the backward of mb %d", vs, i);
      if (vs < nvs - 1 && !sent_act[cell]) FAIL("virtual stage %d never sends mb %d on", vs, i);
      if (vs > 0 && !sent_grad[cell]) FAIL("virtual stage %d never sends mb %d's gradient back", vs, i);
    }
  for (int i = 0; i < nch; i++)
    if (ch[i].head != ch[i].n) FAIL("rank %d sends a message nobody receives", i / 4);
  if (out) {
    memset(out, 0, sizeof *out);
    double span = 0;
    for (int r = 0; r < pp; r++) span = clock[r] > span ? clock[r] : span;
    out->makespan = span;
    double acc = 0;
    for (int r = 0; r < pp; r++) {
      double b = span > 0 ? (span - busy[r]) / span : 0.0;
      acc += b;
      if (r < 64) {
        out->rank_bubble[r] = b;
        out->peak_inflight[r] = peak[r];
        out->rank_grads_end[r] = grads_end[r];
        for (int c = 0; c < v && c < 8; c++)
          out->chunk_grads_end[r][c] = chunk_end[(size_t)r * v + c];
      }
    }
    out->bubble = acc / pp;
  }
  rc = 0;
done:
#undef FAIL
  for (int i = 0; i < nch; i++) free(ch[i].q);
  free(ch); free(pc); free(inflight); free(peak); free(clock); free(busy);
  free(grads_end); free(link_free); free(chunk_end);
  free(f_done); free(b_done); free(bi_done); free(w_done); free(have_act); free(have_grad);
  free(sent_act); free(sent_grad);
  return rc;
}
