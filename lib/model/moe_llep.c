/* Least-loaded expert parallelism (LLEP): under skewed routing, the rows
 * over a rank's bound go to the least-loaded ranks of the ep group with a
 * copy of their expert's weights for the block, and the copies' gradients
 * come back to the owner.
 *
 * The plan is integer bookkeeping every rank of the ep group computes alike
 * from the same numbers: the kept slots of every (source rank, expert),
 * all-gathered. An expert's rows are ordered by source rank, then token;
 * its owner keeps a prefix [0, keep) and each piece a range after it, taken
 * from the tail. A piece (expert, helper) ships the expert's four tensors
 * once per pass that needs them (forward, backward input pass) and its
 * gradients once (the pass that makes them). Rows still meet the same
 * weights and the owner sums the same rows' gradients, so the block's
 * outputs are those without LLEP, and its gradients up to the order of a
 * sum. */
#include "model/model_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void mt_ep_set_balance(mt_ep *x, double alpha, int min_rows) {
  if (alpha < 1.0 || x->ep < 2 || x->etp > 1)
    mt_die("least-loaded expert parallelism needs alpha >= 1, ep > 1 and etp = 1 (alpha %g, ep "
           "%d, etp %d)", alpha, x->ep, x->etp);
  x->alpha = alpha;
  x->min_rows = min_rows;
  mt_ep_llep_caps(x->E_l, x->ep, &x->H, &x->L);
}

void mt_ep_llep_caps(int E_l, int ep, int *H, int *L) {
  *H = E_l;
  *L = E_l * (ep - 1) < ep - 1 ? E_l * (ep - 1) : E_l > ep - 1 ? E_l : ep - 1;
}

const int *mt_ep_llep(const mt_ep *x, const int *meta) {
  return mt_ep_expert_off(x, meta) + x->E_l + x->H + 1;
}

typedef struct {
  int e, q, start, n; /* rows [start, start + n) of expert e go to rank q */
} piece;

/* |[a, a + n) ∩ [lo, hi)| */
static int overlap(int a, int n, int lo, int hi) {
  int l = a > lo ? a : lo, h = a + n < hi ? a + n : hi;
  return h > l ? h - l : 0;
}

/* The plan of one block from K[p][e] (kept slots of source p for expert e):
 * keep[e] rows stay with the owner; the pieces, grouped by expert (pfirst,
 * pn). Returns the number of pieces. */
static int plan_pieces(const mt_ep *x, const int *K, int *keep, piece *pc, int *pfirst, int *pn,
                       long *load, int *nhelp, int *nlend) {
  const int E = x->E, ep = x->ep, H = x->H, L = x->L;
  long tot = 0;
  for (int p = 0; p < ep; p++) load[p] = 0, nhelp[p] = 0, nlend[p] = 0;
  for (int e = 0; e < E; e++) {
    keep[e] = 0;
    for (int p = 0; p < ep; p++) keep[e] += K[(size_t)p * E + e];
    load[x->owner[e]] += keep[e];
    tot += keep[e];
    pfirst[e] = 0;
    pn[e] = 0;
  }
  const long cap = (long)ceil(x->alpha * (double)tot / (double)ep - 1e-9);
  int n = 0;
  for (int r = 0; r < ep; r++) {
    const int *mine = x->order + (size_t)r * x->E_l;
    int done = 0;
    /* r's experts, heaviest first (ties: lower index) */
    for (int t = 0; t < x->E_l && !done && load[r] > cap; t++) {
      int e = -1;
      for (int i = 0; i < x->E_l; i++) {
        int c = mine[i];
        if (pn[c] < 0) continue; /* taken already */
        if (e < 0 || keep[c] > keep[e] || (keep[c] == keep[e] && c < e)) e = c;
      }
      pfirst[e] = n;
      pn[e] = -1;
      int made = 0;
      while (load[r] > cap && keep[e] > 0) {
        int q = -1;
        for (int p = 0; p < ep; p++)
          if (p != r && load[p] < cap && nhelp[p] < H && (q < 0 || load[p] < load[q])) q = p;
        if (q < 0 || nlend[r] >= L) {
          done = 1;
          break;
        }
        long give = load[r] - cap;
        if (keep[e] < give) give = keep[e];
        if (cap - load[q] < give) give = cap - load[q];
        if (give < x->min_rows) break; /* not worth an expert's weights: the next expert */
        keep[e] -= (int)give;
        pc[n++] = (piece){.e = e, .q = q, .start = keep[e], .n = (int)give};
        made++;
        load[q] += give;
        load[r] -= give;
        nhelp[q]++;
        nlend[r]++;
      }
      pn[e] = -1 - made; /* marked taken; fixed below */
    }
    for (int i = 0; i < x->E_l; i++)
      if (pn[mine[i]] < 0) pn[mine[i]] = -1 - pn[mine[i]];
  }
  return n;
}

/* the pieces a rank helps with, ordered by owner, then expert (the order
 * their weights arrive in); returns how many */
static int helped_by(const mt_ep *x, const piece *pc, int n, int q, int *out) {
  int c = 0;
  for (int i = 0; i < n; i++) {
    if (pc[i].q != q) continue;
    int j = c++;
    while (j > 0 && (x->owner[pc[out[j - 1]].e] > x->owner[pc[i].e] ||
                     (x->owner[pc[out[j - 1]].e] == x->owner[pc[i].e] && pc[out[j - 1]].e > pc[i].e))) {
      out[j] = out[j - 1];
      j--;
    }
    out[j] = i;
  }
  return c;
}

int mt_ep_route_llep(mt_ep *x, const int *choice, int N, const int *kept, int *h_slot,
                     int *h_send, int *meta) {
  const int E = x->E, k = x->k, E_l = x->E_l, ep = x->ep, H = x->H, me = x->ep_rank;
  const int S_max = E_l + H; /* slots of a destination: its experts, then helped ones */
  const size_t epE = (size_t)ep * E;
  int *K = mt_malloc((2 * epE + 4 * (size_t)E + 3 * (size_t)ep + 2 * (size_t)ep * H +
                      2 * (size_t)ep * S_max + 1) * sizeof(int));
  int *pre = K + epE;                  /* [p][e]: rows of e from sources before p */
  int *keep = pre + epE;               /* [e]: the prefix of e's rows its owner keeps */
  int *pfirst = keep + E, *pn = pfirst + E, *idx = pn + E;
  const int *el_of = x->local;
  int *nhelp = idx + E, *nlend = nhelp + ep, *nslot = nlend + ep;
  int *help = nslot + ep;              /* [d][H]: pieces helped by d, arrival order */
  int *slot_of = help + (size_t)ep * H; /* [piece]: its slot at its helper */
  int *sendc = slot_of + (size_t)ep * H; /* [d][slot]: my rows to d */
  int *recvc = sendc + (size_t)ep * S_max; /* [p][slot]: rows from p to my slots */
  piece *pc = mt_malloc(((size_t)ep * H + 1) * sizeof(piece));
  long *load = mt_malloc((size_t)ep * sizeof(long));

  /* 1. every source's kept slots per expert, and the plan */
  mt_allgather(x->ep_g, kept, K, (size_t)E, MT_DT_I32, MT_LOC_HOST);
  for (int e = 0; e < E; e++) {
    int s = 0;
    for (int p = 0; p < ep; p++) pre[(size_t)p * E + e] = s, s += K[(size_t)p * E + e];
  }
  const int n_pc = plan_pieces(x, K, keep, pc, pfirst, pn, load, nhelp, nlend);
  for (int d = 0; d < ep; d++) {
    nslot[d] = E_l + helped_by(x, pc, n_pc, d, help + (size_t)d * H);
    for (int j = 0; j < nslot[d] - E_l; j++) slot_of[help[(size_t)d * H + j]] = E_l + j;
  }

  /* 2. rows per (destination, slot) from me, and per (source, slot) to me */
  for (int d = 0; d < ep; d++)
    for (int j = 0; j < S_max; j++) sendc[(size_t)d * S_max + j] = 0;
  for (int e = 0; e < E; e++) {
    const int a = pre[(size_t)me * E + e], n = K[(size_t)me * E + e];
    sendc[(size_t)x->owner[e] * S_max + el_of[e]] += overlap(a, n, 0, keep[e]);
    for (int i = pfirst[e]; i < pfirst[e] + pn[e]; i++)
      sendc[(size_t)pc[i].q * S_max + slot_of[i]] += overlap(a, n, pc[i].start, pc[i].start + pc[i].n);
  }
  for (int p = 0; p < ep; p++)
    for (int j = 0; j < nslot[me]; j++) {
      int e, lo, hi;
      if (j < E_l) {
        e = x->order[(size_t)me * E_l + j];
        lo = 0;
        hi = keep[e];
      } else {
        const piece *q = &pc[help[(size_t)me * H + j - E_l]];
        e = q->e;
        lo = q->start;
        hi = q->start + q->n;
      }
      recvc[(size_t)p * S_max + j] =
          overlap(pre[(size_t)p * E + e], K[(size_t)p * E + e], lo, hi);
    }

  /* 3. send positions: by destination, slot, then token */
  int *fill = sendc; /* running positions, in place of the counts */
  int *sc = meta + MT_EP_HEAD, *rc = sc + ep, *etp_rows = rc + ep, *off = etp_rows + 1;
  int n_send = 0;
  for (int d = 0; d < ep; d++) {
    sc[d] = 0;
    for (int j = 0; j < S_max; j++) {
      int c = fill[(size_t)d * S_max + j];
      fill[(size_t)d * S_max + j] = n_send;
      n_send += c;
      sc[d] += c;
    }
  }
  for (int e = 0; e < E; e++) idx[e] = 0;
  for (int n = 0; n < N; n++)
    for (int j = 0; j < k; j++) {
      size_t nj = (size_t)n * k + j;
      if (h_slot[nj] < 0) continue;
      const int e = choice[nj], g = pre[(size_t)me * E + e] + idx[e]++;
      int d = x->owner[e], s = el_of[e];
      for (int i = pfirst[e]; g >= keep[e] && i < pfirst[e] + pn[e]; i++)
        if (g >= pc[i].start && g < pc[i].start + pc[i].n) d = pc[i].q, s = slot_of[i];
      int pos = fill[(size_t)d * S_max + s]++;
      h_slot[nj] = pos;
      h_send[pos] = n;
    }

  /* 4. received rows (source, slot order) into slot-major order */
  int n_recv = 0;
  for (int p = 0; p < ep; p++) {
    rc[p] = 0;
    for (int j = 0; j < nslot[me]; j++) rc[p] += recvc[(size_t)p * S_max + j];
    n_recv += rc[p];
  }
  etp_rows[0] = n_recv;
  if ((size_t)n_send > x->max_send)
    mt_die("MoE dispatch (least-loaded) of %d slots exceeds its bound %zu", n_send, x->max_send);
  mt_ep_fit(x, (size_t)n_recv, (size_t)n_recv);
  int *h_perm = x->perm_h, *h_inv = x->perm_h + x->max_rows;
  int i = 0;
  for (int j = 0; j < nslot[me]; j++) {
    off[j] = i;
    int base = 0;
    for (int p = 0; p < ep; p++) {
      int before = 0;
      for (int j2 = 0; j2 < j; j2++) before += recvc[(size_t)p * S_max + j2];
      for (int r = 0; r < recvc[(size_t)p * S_max + j]; r++) {
        h_perm[i] = base + before + r;
        h_inv[base + before + r] = i;
        i++;
      }
      base += rc[p];
    }
  }
  for (int j = nslot[me]; j <= S_max; j++) off[j] = i;
  meta[MT_EP_N_SEND] = n_send;
  meta[MT_EP_N_RECV] = n_recv;
  meta[MT_EP_N_ROWS] = n_recv;

  /* 5. the exchange record */
  int *rec = (int *)mt_ep_llep(x, meta), *help_e = rec + MT_LLEP_HEAD, *lend_e = help_e + H,
      *lend_q = lend_e + x->L;
  rec[MT_LLEP_N_HELP] = nslot[me] - E_l;
  for (int j = 0; j < nslot[me] - E_l; j++) help_e[j] = pc[help[(size_t)me * H + j]].e;
  int nl = 0;
  for (int d = 0; d < ep; d++) /* by helper, then expert (each helper's arrival order) */
    for (int j = 0; j < nslot[d] - E_l; j++) {
      const piece *q = &pc[help[(size_t)d * H + j]];
      if (x->owner[q->e] != me) continue;
      lend_e[nl] = q->e;
      lend_q[nl] = d;
      nl++;
    }
  rec[MT_LLEP_N_LEND] = nl;
  rec[MT_LLEP_PAIRS] = n_pc;
  int moved = 0;
  for (int p = 0; p < n_pc; p++) moved += pc[p].n;
  free(load);
  free(pc);
  free(K);
  return moved;
}

/* ------------------------------------------------------------------ */
/* the experts' weights out to their helpers, the gradients back       */

/* elements of an expert's fc weight, fc bias, proj weight, proj bias (the
 * fc's Fin = Fe, or 2 Fe for SwiGLU's gate|up; no biases: 0) */
static void expert_sizes(const mt_moe *x, size_t sz[4]) {
  const size_t C = (size_t)x->C, Fe = (size_t)x->Fe_local;
  const size_t Fin = Fe * (size_t)x->fin;
  sz[0] = Fin * C;
  sz[1] = x->has_bias ? Fin : 0;
  sz[2] = C * Fe;
  sz[3] = x->has_bias ? C : 0;
}

size_t mt_moe_expert_floats(const mt_moe *x) {
  size_t sz[4];
  expert_sizes(x, sz);
  return sz[0] + sz[1] + sz[2] + sz[3];
}

size_t mt_moe_llep_floats(const mt_moe *x) {
  return (2 * (size_t)x->ep.H + (size_t)x->ep.L) * mt_moe_expert_floats(x);
}

/* region r of x->llep, tensor t of it: H experts' (MT_LLEP_HELP_W, _HELP_G),
 * L experts' (MT_LLEP_LEND, after the other two) */
float *mt_moe_llep_region(const mt_moe *x, int r, int t) {
  size_t sz[4];
  expert_sizes(x, sz);
  const size_t n = r == MT_LLEP_LEND ? (size_t)x->ep.L : (size_t)x->ep.H; /* experts */
  size_t at = (size_t)r * (size_t)x->ep.H * mt_moe_expert_floats(x);
  for (int i = 0; i < t; i++) at += n * sz[i];
  return x->llep + at;
}

/* per ep rank, the floats of one tensor t going to (lend) or coming from
 * (help) it */
static void pair_counts(const mt_ep *ep, const int *rec, size_t per, size_t *to, size_t *from) {
  const int *help_e = rec + MT_LLEP_HEAD, *lend_q = help_e + ep->H + ep->L;
  for (int p = 0; p < ep->ep; p++) to[p] = from[p] = 0;
  for (int i = 0; i < rec[MT_LLEP_N_LEND]; i++) to[lend_q[i]] += per;
  for (int i = 0; i < rec[MT_LLEP_N_HELP]; i++) from[ep->owner[help_e[i]]] += per;
}

void mt_moe_llep_weights(mt_moe *x, mt_dtype dt, const mt_block_tensors *w, const int *meta) {
  const mt_ep *ep = &x->ep;
  const int *rec = mt_ep_llep(ep, meta);
  if (rec[MT_LLEP_PAIRS] == 0) return; /* the same on every rank of the group */
  const int *lend_e = rec + MT_LLEP_HEAD + ep->H;
  const size_t es = mt_dtype_bytes(dt); /* bytes of an element */
  const char *src[4] = {w->e_fc_w, w->e_fc_b, w->e_proj_w, w->e_proj_b};
  size_t sz[4], *cnt = mt_malloc(2 * (size_t)ep->ep * sizeof(size_t));
  expert_sizes(x, sz);
  for (int t = 0; t < 4; t++) {
    if (sz[t] == 0) continue; /* no biases */
    char *lend = (char *)mt_moe_llep_region(x, MT_LLEP_LEND, t);
    void *help = mt_moe_llep_region(x, MT_LLEP_HELP_W, t);
    for (int i = 0; i < rec[MT_LLEP_N_LEND]; i++) {
      void *to = lend + (size_t)i * sz[t] * es;
      const void *from = src[t] + (size_t)ep->local[lend_e[i]] * sz[t] * es;
      x->ep.ops->copy(dt, to, from, sz[t]);
    }
    pair_counts(ep, rec, sz[t], cnt, cnt + ep->ep);
    mt_alltoallv(ep->ep_g, lend, cnt, help, cnt + ep->ep, dt, x->ep.ops->loc);
  }
  free(cnt);
}

void mt_moe_llep_zero_grads(mt_moe *x, const int *meta) {
  const int *rec = mt_ep_llep(&x->ep, meta);
  size_t sz[4];
  expert_sizes(x, sz);
  for (int t = 0; t < 4; t++)
    x->ep.ops->zero(MT_DT_F32, mt_moe_llep_region(x, MT_LLEP_HELP_G, t),
                    (size_t)rec[MT_LLEP_N_HELP] * sz[t]);
}

void mt_moe_llep_grads(mt_moe *x, mt_block_tensors *g, const int *meta) {
  const mt_ep *ep = &x->ep;
  const int *rec = mt_ep_llep(ep, meta);
  if (rec[MT_LLEP_PAIRS] == 0) return;
  const int *lend_e = rec + MT_LLEP_HEAD + ep->H;
  float *dst[4] = {g->e_fc_w, g->e_fc_b, g->e_proj_w, g->e_proj_b};
  size_t sz[4], *cnt = mt_malloc(2 * (size_t)ep->ep * sizeof(size_t));
  expert_sizes(x, sz);
  for (int t = 0; t < 4; t++) {
    if (sz[t] == 0) continue; /* no biases */
    float *lend = mt_moe_llep_region(x, MT_LLEP_LEND, t);
    pair_counts(ep, rec, sz[t], cnt, cnt + ep->ep);
    mt_alltoallv(ep->ep_g, mt_moe_llep_region(x, MT_LLEP_HELP_G, t), cnt + ep->ep, lend, cnt,
                 MT_DT_F32, x->ep.ops->loc);
    for (int i = 0; i < rec[MT_LLEP_N_LEND]; i++)
      x->ep.ops->axpy(MT_DT_F32, dst[t] + (size_t)ep->local[lend_e[i]] * sz[t], 1.0f,
                      lend + (size_t)i * sz[t], sz[t]);
  }
  free(cnt);
}
