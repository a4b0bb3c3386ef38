/* Expert parallelism: routing decisions (capacity, send order, the counts
 * exchanged over the folded mesh) and the dispatch and combine of a MoE
 * layer's token rows. The decisions are integer bookkeeping on the host
 * (the router's choices are downloaded); the rows move through comm in the
 * backend's memory and are reordered by the backend's gather op. */
#include "model/model_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int group_size(const mt_group *g) { return g ? g->size : 1; }
static int group_rank(const mt_group *g) { return g ? g->rank : 0; }

int mt_ep_capacity(double c, int T, int k, int E) {
  if (c <= 0.0) return 0;
  double cap = ceil(c * (double)T * (double)k / (double)E - 1e-9);
  return cap < 1.0 ? 1 : (int)cap;
}

void mt_ep_bounds(int E, int k, int ep, int etp, int T, double capacity, double factor, int S,
                  int Ts, size_t *max_send, size_t *max_recv, size_t *max_rows) {
  const size_t N = (size_t)S * (size_t)Ts, E_l = (size_t)(E / ep);
  const int cap = mt_ep_capacity(capacity, T, k, E);
  /* from one source rank: each token sends at most one slot per expert */
  size_t per_expert = N;
  if (cap > 0 && (size_t)S * (size_t)cap < per_expert) per_expert = (size_t)S * (size_t)cap;
  size_t kk = (size_t)k < E_l ? (size_t)k : E_l;
  size_t per_source = E_l * per_expert < N * kk ? E_l * per_expert : N * kk;
  *max_send = N * (size_t)k;
  *max_recv = (size_t)ep * per_source;
  /* a balanced routing brings each rank what it sends, N k rows: the
   * buffers start at factor x that (they grow where a routing needs more:
   * mt_ep_fit) */
  if (factor > 0.0) {
    double want = ceil(factor * (double)N * (double)k - 1e-9);
    if (want < (double)*max_recv) *max_recv = want < 1.0 ? 1 : (size_t)want;
  }
  *max_rows = (size_t)etp * *max_recv;
}

/* rows of a bound grown to hold n: a quarter more than before at least
 * (a routing drifting up grows it a few times, not at every step), at
 * most the worst case */
static size_t grown(size_t now, size_t n, size_t worst) {
  size_t to = now + now / 4;
  if (to < n) to = n;
  return to > worst ? (worst > n ? worst : n) : to;
}

int mt_ep_fit(mt_ep *x, size_t n_recv, size_t n_rows) {
  if (n_recv <= x->max_recv && n_rows <= x->max_rows) return 0;
  if (n_recv > x->max_recv) x->max_recv = grown(x->max_recv, n_recv, x->worst_recv);
  if (n_rows > x->max_rows) x->max_rows = grown(x->max_rows, n_rows, x->worst_rows);
  free(x->perm_h);
  x->perm_h = mt_calloc(2 * x->max_rows + 16, sizeof(int));
  return 1;
}

void mt_ep_create(mt_ep *x, mt_group *ep_g, mt_group *etp_g, mt_group *seq_g, const mt_ops *ops,
                  int E, int k, int T, double capacity, double factor, int max_seqs, int ts,
                  const int *owner) {
  memset(x, 0, sizeof *x);
  x->ep_g = ep_g && ep_g->size > 1 ? ep_g : NULL;
  x->etp_g = etp_g && etp_g->size > 1 ? etp_g : NULL;
  x->seq_g = seq_g && seq_g->size > 1 ? seq_g : NULL;
  x->ops = ops;
  x->E = E;
  x->k = k;
  x->ep = group_size(x->ep_g);
  x->ep_rank = group_rank(x->ep_g);
  x->etp = group_size(x->etp_g);
  x->etp_rank = group_rank(x->etp_g);
  x->seq_size = group_size(x->seq_g);
  x->seq_rank = group_rank(x->seq_g);
  x->E_l = E / x->ep;
  /* each expert's ep rank, and the experts in send order: by owner, then
   * index (each owner holds E_l of them) */
  x->owner = mt_calloc(3 * (size_t)E, sizeof(int));
  x->order = x->owner + E;
  x->local = x->order + E;
  int i = 0;
  for (int p = 0; p < x->ep; p++) {
    int held = 0;
    for (int e = 0; e < E; e++) {
      x->owner[e] = owner ? owner[e] : e / x->E_l;
      if (x->owner[e] == p) x->local[e] = held++, x->order[i++] = e;
    }
    if (held != x->E_l)
      mt_die("expert parallelism: ep rank %d owns %d experts, not E/ep = %d", p, held, x->E_l);
  }
  x->T = T;
  x->cap = mt_ep_capacity(capacity, T, k, E);
  x->max_seqs = max_seqs;
  x->max_tokens = max_seqs * ts;
  mt_ep_bounds(E, k, x->ep, x->etp, T, capacity, 0.0, max_seqs, ts, &x->max_send,
               &x->worst_recv, &x->worst_rows);
  mt_ep_bounds(E, k, x->ep, x->etp, T, capacity, factor, max_seqs, ts, &x->max_send,
               &x->max_recv, &x->max_rows);
  /* host scratch: choices, per-sequence counts of every seq rank, slots,
   * send order, received counts of every etp rank; the permutations apart
   * (they grow with the row bound) */
  size_t cnt = (size_t)max_seqs * k * E;
  x->h_n = 3 * (size_t)x->max_tokens * k + (size_t)(x->seq_size + 2) * cnt + 3 * (size_t)E +
           (size_t)x->etp * x->ep * x->E_l + 16;
  x->h = mt_calloc(x->h_n, sizeof(int));
  x->perm_h = mt_calloc(2 * x->max_rows + 16, sizeof(int));
  x->reuse_off = getenv("MT_TEST_NO_ROUTING_REUSE") != NULL;
}

void mt_ep_destroy(mt_ep *x) {
  free(x->h);
  free(x->perm_h);
  free(x->reuse.meta);
  free(x->reuse.local);
  free(x->reuse.frac);
  free(x->owner);
  memset(x, 0, sizeof *x);
}

int mt_ep_meta_ints(int ep, int etp, int E_l, int llep) {
  int H = 0, L = 0;
  if (llep) mt_ep_llep_caps(E_l, ep, &H, &L);
  return MT_EP_HEAD + 2 * ep + etp + E_l + H + 1 + (llep ? MT_LLEP_HEAD + H + 2 * L : 0);
}
const int *mt_ep_send_counts(const mt_ep *x, const int *meta) {
  (void)x;
  return meta + MT_EP_HEAD;
}
const int *mt_ep_recv_counts(const mt_ep *x, const int *meta) { return meta + MT_EP_HEAD + x->ep; }
const int *mt_ep_etp_rows(const mt_ep *x, const int *meta) {
  return meta + MT_EP_HEAD + 2 * x->ep;
}
const int *mt_ep_expert_off(const mt_ep *x, const int *meta) {
  return meta + MT_EP_HEAD + 2 * x->ep + x->etp;
}

/* the routing decisions to backend memory (the permutations wait for
 * mt_ep_upload_perm: where they go may have to grow first) */
static void upload_route(mt_ep *x, const int *meta, int N, int *slot, const int *h_slot,
                         int *send_tok, const int *h_send) {
  const int n_send = meta[MT_EP_N_SEND];
  if (N > 0) x->ops->upload(slot, h_slot, (size_t)N * x->k * sizeof(int));
  if (n_send > 0) x->ops->upload(send_tok, h_send, (size_t)n_send * sizeof(int));
  x->perm_rows = meta[MT_EP_N_ROWS];
}

void mt_ep_upload_perm(mt_ep *x, int *perm, int *inv) {
  if (x->perm_rows > 0) {
    x->ops->upload(perm, x->perm_h, (size_t)x->perm_rows * sizeof(int));
    x->ops->upload(inv, x->perm_h + x->max_rows, (size_t)x->perm_rows * sizeof(int));
  }
  x->perm_rows = 0;
}

/* the host scratch h, carved */
typedef struct {
  int *choice;   /* (N,k) the router's choices */
  int *slot;     /* (N,k) send position or -1 */
  int *send;     /* token of each sent slot */
  int *total;    /* [s][j][e], every slice */
  int *seen;     /* [s][j][e] running count in this slice */
  int *all;      /* [r][s][j][e] */
  int *kept;     /* E: kept slots per expert */
  int *fill;     /* E: send positions handed out */
  int *packed;   /* E: kept, in send order */
  int *recv_all; /* [t][p][e_l] */
} route_scratch;

static route_scratch carve(const mt_ep *x) {
  const size_t Nk = (size_t)x->max_tokens * x->k, cnt = (size_t)x->max_seqs * x->k * x->E;
  route_scratch r;
  int *h = x->h;
  r.choice = h;   h += Nk;
  r.slot = h;     h += Nk;
  r.send = h;     h += Nk;
  r.total = h;    h += cnt;
  r.seen = h;     h += cnt;
  r.all = h;      h += (size_t)x->seq_size * cnt;
  r.kept = h;     h += x->E;
  r.fill = h;     h += x->E;
  r.packed = h;   h += x->E;
  r.recv_all = h;
  return r;
}

/* the ints of a routing record that mt_ep_route writes without LLEP */
static int route_ints(const mt_ep *x) { return MT_EP_HEAD + 2 * x->ep + x->etp + x->E_l + 1; }

/* this slice's counts per (sequence, choice, expert) to every slice's (all) */
static void exchange_seq_counts(const mt_ep *x, const int *local, int *all, size_t cnt_n) {
  if (x->seq_g) mt_allgather(x->seq_g, local, all, cnt_n, MT_DT_I32, MT_LOC_HOST);
  else memcpy(all, local, cnt_n * sizeof(int));
}

/* each peer's kept slots (packed: E, in send order) for each of this
 * rank's experts, over ep, then every etp rank's of those (recv_all) */
static void exchange_expert_counts(const mt_ep *x, const int *packed, int *recv_all) {
  const int ep = x->ep, E_l = x->E_l;
  int *recv_mine = recv_all + (size_t)x->etp_rank * ep * E_l; /* [p][e_l] */
  if (x->ep_g) mt_alltoall(x->ep_g, packed, recv_mine, (size_t)E_l, MT_DT_I32, MT_LOC_HOST);
  else memcpy(recv_mine, packed, (size_t)E_l * sizeof(int));
  if (x->etp_g) {
    int *mine = mt_malloc((size_t)ep * E_l * sizeof(int) + 16);
    memcpy(mine, recv_mine, (size_t)ep * E_l * sizeof(int));
    mt_allgather(x->etp_g, mine, recv_all, (size_t)ep * E_l, MT_DT_I32, MT_LOC_HOST);
    free(mine);
  }
}

static int count_only(const mt_group *g) { return !g || g->backend == MT_COMM_COUNT; }

/* The routing of top_idx is the last one's where the backend made the same
 * choices up (its routing id) for the same micro-batch shape, without
 * LLEP, and every group is count-only (so the counts that come back are
 * this rank's own, as the last time): the id, or 0 where it cannot be
 * reused. */
static unsigned reusable_id(const mt_ep *x, const int *top_idx) {
  if (x->reuse_off || x->H > 0 || !x->ops->moe_routing_id || !count_only(x->ep_g) ||
      !count_only(x->etp_g) || !count_only(x->seq_g))
    return 0;
  return x->ops->moe_routing_id(top_idx);
}

/* The last routing again (reusable_id): the same collectives of the same
 * counts, the same statistics, record and sequences' fractions, from what
 * it kept and the scratch it left; the index arrays are not uploaded again
 * (the backend computes nothing from them: ops->moe_routing_id). */
static void route_again(mt_ep *x, int S, float *seq_frac, int *meta, mt_ep_stats *st) {
  const size_t cnt_n = (size_t)S * x->k * x->E;
  const route_scratch h = carve(x);
  if (st)
    for (size_t i = 0; i < cnt_n; i++) st->tokens[i % (size_t)x->E] += x->reuse.local[i];
  /* the counts' exchange as counted, bringing nothing back: every group
   * is count-only here (reusable_id), where it would bring this rank's
   * counts in every slice's place into the scratch, which nothing after
   * the routing reads (a seq_size x cnt_n copy per MoE block and
   * micro-batch: a quarter of a 1,024-GPU MoE search) */
  if (x->seq_g) mt_allgather(x->seq_g, x->reuse.local, NULL, cnt_n, MT_DT_I32, MT_LOC_HOST);
  if (S > 0) x->ops->upload(seq_frac, x->reuse.frac, (size_t)S * x->E * sizeof(float));
  memcpy(meta, x->reuse.meta, (size_t)route_ints(x) * sizeof(int));
  if (st) st->dropped += meta[MT_EP_DROPPED];
  exchange_expert_counts(x, h.packed, h.recv_all);
  if (st) st->rows += meta[MT_EP_N_ROWS];
}

void mt_ep_route(mt_ep *x, const int *top_idx, int S, int Ts, int *slot, int *send_tok,
                 float *seq_frac, int *meta, mt_ep_stats *st) {
  const int E = x->E, k = x->k, E_l = x->E_l, ep = x->ep, etp = x->etp;
  const int N = S * Ts;
  x->perm_rows = 0;
  if (S > x->max_seqs || N > x->max_tokens)
    mt_die("MoE routing of %d sequences x %d tokens exceeds the %d tokens it was sized for", S,
           Ts, x->max_tokens);
  const unsigned id = reusable_id(x, top_idx);
  if (id && id == x->reuse.id && S == x->reuse.S && Ts == x->reuse.Ts) {
    route_again(x, S, seq_frac, meta, st);
    return;
  }
  x->reuse.id = 0; /* the scratch is rewritten */
  if (id && !x->reuse.meta) {
    x->reuse.meta = mt_calloc((size_t)route_ints(x), sizeof(int));
    x->reuse.local = mt_calloc((size_t)x->max_seqs * k * E + 1, sizeof(int));
    x->reuse.frac = mt_calloc((size_t)x->max_seqs * E + 1, sizeof(float));
  }
  const size_t cnt_n = (size_t)S * k * E;
  const route_scratch h = carve(x);
  int *choice = h.choice, *h_slot = h.slot, *h_send = h.send, *total = h.total;
  int *seen = h.seen, *all = h.all, *kept = h.kept, *fill = h.fill, *packed = h.packed;
  int *recv_all = h.recv_all;
  if (N > 0) x->ops->download(choice, top_idx, (size_t)N * k * sizeof(int));

  /* 1. counts per (sequence, choice, expert): this slice's, then every slice's */
  int *local = seen;
  memset(local, 0, cnt_n * sizeof(int));
  for (int n = 0; n < N; n++)
    for (int j = 0; j < k; j++) local[((size_t)(n / Ts) * k + j) * E + choice[(size_t)n * k + j]]++;
  if (st)
    for (size_t i = 0; i < cnt_n; i++) st->tokens[i % (size_t)E] += local[i];
  if (id) memcpy(x->reuse.local, local, cnt_n * sizeof(int));
  exchange_seq_counts(x, local, all, cnt_n);
  memset(total, 0, cnt_n * sizeof(int));
  for (int r = 0; r < x->seq_size; r++)
    for (size_t i = 0; i < cnt_n; i++) total[i] += all[(size_t)r * cnt_n + i];

  /* 2. the fraction of each whole sequence's slots routed to each expert
   * (the load-balancing loss), before any dropping */
  if (S > 0) { /* (kept for a replay where the routing may repeat) */
    float *host = x->reuse.frac;
    if (!id) host = mt_malloc((size_t)S * E * sizeof(float) + 64);
    const double slots = (double)Ts * x->seq_size * k;
    for (int s = 0; s < S; s++)
      for (int e = 0; e < E; e++) {
        int c = 0;
        for (int j = 0; j < k; j++) c += total[((size_t)s * k + j) * E + e];
        host[(size_t)s * E + e] = (float)((double)c / slots);
      }
    x->ops->upload(seq_frac, host, (size_t)S * E * sizeof(float));
    if (!id) free(host);
  }

  /* 3. capacity: a slot's priority among its sequence's slots for its
   * expert is (earlier choices, earlier slices, earlier positions) */
  int dropped = 0;
  memset(kept, 0, (size_t)E * sizeof(int));
  memset(seen, 0, cnt_n * sizeof(int));
  for (int n = 0; n < N; n++) {
    int s = n / Ts;
    for (int j = 0; j < k; j++) {
      int e = choice[(size_t)n * k + j];
      size_t sje = ((size_t)s * k + j) * E + e;
      int keep = 1;
      if (x->cap > 0) {
        long prio = seen[sje];
        for (int jj = 0; jj < j; jj++) prio += total[((size_t)s * k + jj) * E + e];
        for (int r = 0; r < x->seq_rank; r++) prio += all[(size_t)r * cnt_n + sje];
        keep = prio < x->cap;
      }
      seen[sje]++;
      h_slot[(size_t)n * k + j] = keep ? 0 : -1;
      if (keep) kept[e]++;
      else dropped++;
    }
  }
  if (st) st->dropped += dropped;
  meta[MT_EP_DROPPED] = dropped;
  if (x->H > 0) { /* least-loaded: the plan decides where rows go (moe_llep.c) */
    int moved = mt_ep_route_llep(x, choice, N, kept, h_slot, h_send, meta);
    if (st) st->rows += meta[MT_EP_N_ROWS], st->moved += x->ep_rank == 0 ? moved : 0;
    upload_route(x, meta, N, slot, h_slot, send_tok, h_send);
    return;
  }

  /* 4. the send order: by the experts' ranks, expert-major within each,
   * tokens in order (a token sends at most one slot to an expert) */
  int n_send = 0;
  for (int i = 0; i < E; i++) {
    int e = x->order[i];
    fill[e] = n_send;
    n_send += kept[e];
    packed[i] = kept[e];
  }
  for (int n = 0; n < N; n++)
    for (int j = 0; j < k; j++) {
      size_t nj = (size_t)n * k + j;
      if (h_slot[nj] < 0) continue;
      int pos = fill[choice[nj]]++;
      h_slot[nj] = pos;
      h_send[pos] = n;
    }
  int *sc = meta + MT_EP_HEAD, *rc = sc + ep, *etp_rows = rc + ep, *off = etp_rows + etp;
  for (int p = 0; p < ep; p++) sc[p] = 0;
  for (int e = 0; e < E; e++) sc[x->owner[e]] += kept[e];

  /* 5. counts over ep (each peer's slots for each of my experts), then over etp */
  exchange_expert_counts(x, packed, recv_all);
  const int *recv_mine = recv_all + (size_t)x->etp_rank * ep * E_l; /* [p][e_l] */
  int n_recv = 0, n_rows = 0;
  for (int p = 0; p < ep; p++) {
    rc[p] = 0;
    for (int el = 0; el < E_l; el++) rc[p] += recv_mine[p * E_l + el];
    n_recv += rc[p];
  }
  for (int t = 0; t < etp; t++) {
    etp_rows[t] = 0;
    for (int i = 0; i < ep * E_l; i++) etp_rows[t] += recv_all[(size_t)t * ep * E_l + i];
    n_rows += etp_rows[t];
  }
  if ((size_t)n_send > x->max_send)
    mt_die("MoE dispatch of %d slots exceeds its bound %zu", n_send, x->max_send);
  mt_ep_fit(x, (size_t)n_recv, (size_t)n_rows);
  int *h_perm = x->perm_h, *h_inv = x->perm_h + x->max_rows;

  /* 6. expert-major order over the gathered rows: expert, etp rank, ep source */
  int i = 0;
  for (int el = 0; el < E_l; el++) {
    off[el] = i;
    int t_base = 0;
    for (int t = 0; t < etp; t++) {
      const int *cnt = recv_all + (size_t)t * ep * E_l; /* [p][e_l] of etp rank t */
      int p_base = t_base;
      for (int p = 0; p < ep; p++) {
        int before = 0; /* rows from p for experts before el */
        for (int e2 = 0; e2 < el; e2++) before += cnt[p * E_l + e2];
        for (int r = 0; r < cnt[p * E_l + el]; r++) {
          h_perm[i] = p_base + before + r;
          h_inv[p_base + before + r] = i;
          i++;
        }
        for (int e2 = 0; e2 < E_l; e2++) p_base += cnt[p * E_l + e2];
      }
      t_base += etp_rows[t];
    }
  }
  off[E_l] = i;
  meta[MT_EP_N_SEND] = n_send;
  meta[MT_EP_N_RECV] = n_recv;
  meta[MT_EP_N_ROWS] = n_rows;
  if (st) st->rows += n_rows;
  upload_route(x, meta, N, slot, h_slot, send_tok, h_send);
  if (id) { /* kept for the next micro-batch or block routed alike */
    memcpy(x->reuse.meta, meta, (size_t)route_ints(x) * sizeof(int));
    x->reuse.id = id;
    x->reuse.S = S;
    x->reuse.Ts = Ts;
  }
}


/* parts in elements (rows x C) */
static void parts(const int *rows, int n, int C, size_t *out) {
  for (int i = 0; i < n; i++) out[i] = (size_t)rows[i] * (size_t)C;
}

/* meta's row counts as element counts (C a row), in one allocation (free
 * send): to each ep rank, from each, and each etp rank's rows */
typedef struct {
  size_t *send, *recv, *etp;
} ep_parts;

static ep_parts ep_parts_of(const mt_ep *x, const int *meta, int C) {
  size_t *a = mt_malloc((2 * (size_t)x->ep + (size_t)x->etp) * sizeof(size_t));
  ep_parts p = {a, a + x->ep, a + 2 * x->ep};
  parts(mt_ep_send_counts(x, meta), x->ep, C, p.send);
  parts(mt_ep_recv_counts(x, meta), x->ep, C, p.recv);
  parts(mt_ep_etp_rows(x, meta), x->etp, C, p.etp);
  return p;
}

/* bf16 rows (x->dt) move as 16-bit bits: half fp32's bytes */
static void rows_copy(const mt_ep *x, mt_act *dst, const mt_act *src, size_t n) {
  x->ops->copy(x->dt, dst, src, n);
}

static void rows_alltoallv(const mt_ep *x, const mt_act *send, const size_t *a, mt_act *recv,
                           const size_t *b) {
  mt_alltoallv(x->ep_g, send, a, recv, b, x->dt, x->ops->loc);
}

void mt_ep_dispatch(const mt_ep *x, const int *meta, const mt_act *send, mt_act *recv,
                    mt_act *rows, int C) {
  ep_parts p = ep_parts_of(x, meta, C);
  if (x->ep_g) rows_alltoallv(x, send, p.send, recv, p.recv);
  else if (recv != send) rows_copy(x, recv, send, p.send[0]);
  if (x->etp_g)
    mt_allgatherv_packed(x->etp_g, recv, rows, p.etp, x->dt, x->ops->loc);
  else if (rows != recv)
    rows_copy(x, rows, recv, (size_t)meta[MT_EP_N_RECV] * (size_t)C);
  free(p.send);
}

void mt_ep_combine(const mt_ep *x, const int *meta, const mt_act *rows, mt_act *recv,
                   mt_act *send, int C) {
  ep_parts p = ep_parts_of(x, meta, C);
  if (x->etp_g) /* bf16: each addition of two ranks' parts rounded */
    mt_reduce_scatter_packed(x->etp_g, rows, recv, p.etp, x->dt, x->ops->loc);
  else if (recv != rows)
    rows_copy(x, recv, rows, (size_t)meta[MT_EP_N_RECV] * (size_t)C);
  if (x->ep_g) rows_alltoallv(x, recv, p.recv, send, p.send);
  else if (send != recv) rows_copy(x, send, recv, p.recv[0]);
  free(p.send);
}
