/* Virtual time: the rank's clock on the virtual device and the prices the
 * cost model and the emulation share (see core.h). */
#include "core/core.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The logs of the points of the last curve of each width this thread
 * interpolated on (the same curve for every matmul of a search: the
 * interpolation's four logs a call were a tenth of meshplan's time); the
 * same operations on the same values, so the same rates. */
typedef struct {
  mt_price_curve c;
  double log_flops[MT_PRICE_MAX_GEMM], log_gflops[MT_PRICE_MAX_GEMM];
} gemm_logs;
static _Thread_local gemm_logs g_logs[2];

static const gemm_logs *curve_logs(const mt_price_curve *curve, int w) {
  gemm_logs *c = &g_logs[w];
  const size_t bytes = (size_t)curve->n * sizeof(double);
  if (c->c.n != curve->n || memcmp(c->c.flops, curve->flops, bytes) != 0 ||
      memcmp(c->c.gflops, curve->gflops, bytes) != 0) {
    c->c = *curve;
    for (int i = 0; i < curve->n; i++) {
      c->log_flops[i] = log(curve->flops[i]);
      c->log_gflops[i] = log(curve->gflops[i]);
    }
  }
  return c;
}

double mt_price_gemm_gflops(const mt_price *p, double es, double flops) {
  if (es <= 0.0) { /* a bound for either width: the faster curve's rate */
    double a = mt_price_gemm_gflops(p, 2.0, flops), b = mt_price_gemm_gflops(p, 4.0, flops);
    return a > b ? a : b;
  }
  int w = mt_price_width(es);
  if (p->gemm[w].n < 1) w = 1 - w; /* a hand-made price with one curve */
  const mt_price_curve *g = &p->gemm[w];
  if (g->n < 1) return 1.0; /* no curve: a loaded profile always has both */
  if (flops <= g->flops[0]) return g->gflops[0];
  for (int i = 1; i < g->n; i++)
    if (flops <= g->flops[i]) {
      const gemm_logs *c = curve_logs(g, w);
      double t = (log(flops) - c->log_flops[i - 1]) / (c->log_flops[i] - c->log_flops[i - 1]);
      return exp(c->log_gflops[i - 1] + t * (c->log_gflops[i] - c->log_gflops[i - 1]));
    }
  return g->gflops[g->n - 1];
}

double mt_price_gemm_s(const mt_price *p, double es, double m, double n, double k, double calls) {
  double flops = 2.0 * m * n * k;
  if (!(flops > 0) || !(calls > 0)) return 0.0;
  double s = flops / (mt_price_gemm_gflops(p, es, flops) * 1e9);
  if (p->elementwise_gbs > 0) {
    double mem = es * (m * k + k * n + m * n) / (p->elementwise_gbs * 1e9);
    if (mem > s) s = mem;
  }
  return calls * s;
}

/* block attention's work per head, summed over its row blocks: the FLOPs
 * of visible pairs, of whole touched tiles, and the products */
typedef struct {
  long q0, k0;
  int Tq, Tk, causal, br, bc;
  double hs;
  double visible, whole, calls;
} attn_work;

static void attn_work_sum(attn_work *w) {
  double visible = 0.0, whole = 0.0, calls = 0.0;
  for (int r0 = 0; r0 < w->Tq; r0 += w->br) {
    int rows = w->Tq - r0 < w->br ? w->Tq - r0 : w->br;
    long keys = w->causal ? w->q0 + r0 + rows - w->k0 : w->Tk; /* up to the block's last row */
    if (keys <= 0) continue;
    if (keys > w->Tk) keys = w->Tk;
    long tiles = (keys + w->bc - 1) / w->bc;
    visible += 4.0 * rows * (double)keys * w->hs;
    whole += 4.0 * w->br * (double)tiles * w->bc * w->hs;
    calls += 2.0 * (double)tiles;
  }
  w->visible = visible, w->whole = whole, w->calls = calls;
}

/* The sums of the last shapes priced, by a hash of the shape (a priced
 * layout runs the same few attention shapes in every layer and
 * micro-batch: the row-block loop was a tenth of meshplan's time) */
enum { ATTN_MEMO = 64 };
static _Thread_local attn_work g_attn_memo[ATTN_MEMO];
static _Thread_local int g_attn_memo_used[ATTN_MEMO];

double mt_price_attn_fwd_s(const mt_price *p, double es, double heads, long q0, int Tq, long k0,
                           int Tk, int causal, double hs) {
  const int br = p->attn_br > 0 ? p->attn_br : 64, bc = p->attn_bc > 0 ? p->attn_bc : 256;
  attn_work key = {.q0 = q0, .k0 = k0, .Tq = Tq, .Tk = Tk, .causal = causal, .br = br, .bc = bc,
                   .hs = hs};
  unsigned long h = (unsigned long)q0 * 0x9E3779B97F4A7C15ul;
  h ^= (unsigned long)k0 * 0xC2B2AE3D27D4EB4Ful + (unsigned long)Tq * 0x165667B19E3779F9ul;
  h ^= (unsigned long)Tk * 0x27D4EB2F165667C5ul + (unsigned long)(causal + 2 * br + 131 * bc);
  h ^= (unsigned long)(hs * 8.0) * 0x85EBCA77C2B2AE63ul;
  attn_work *w = &g_attn_memo[(h >> 32) % ATTN_MEMO];
  int *used = &g_attn_memo_used[(h >> 32) % ATTN_MEMO];
  if (!*used || w->q0 != q0 || w->k0 != k0 || w->Tq != Tq || w->Tk != Tk ||
      w->causal != causal || w->br != br || w->bc != bc || w->hs != hs) {
    *w = key;
    attn_work_sum(w);
    *used = 1;
  }
  if (!(heads > 0) || w->calls == 0) return 0.0;
  /* the fused rate of the operands' width (es 0: the faster, a bound for
   * either; the other's where a hand-made price has one) */
  const double *ag = p->attn_gflops;
  const int aw = mt_price_width(es);
  const double rate = es <= 0 || !(ag[aw] > 0) ? (ag[0] > ag[1] ? ag[0] : ag[1]) : ag[aw];
  if (rate > 0) return heads * w->whole / (rate * 1e9);
  return heads * w->visible / (mt_price_gemm_gflops(p, es, w->visible / w->calls) * 1e9);
}

double mt_price_elem_s(const mt_price *p, double bytes) {
  return bytes > 0 ? bytes / (p->elementwise_gbs * 1e9) : 0.0;
}

double mt_price_link_s(const mt_price *p, int inside, double bytes) {
  double bw = (inside ? p->intra_gbs : p->inter_gbs) * 1e9;
  double lat = (inside ? p->intra_us : p->inter_us) * 1e-6;
  return (bytes > 0 ? bytes / bw : 0.0) + lat;
}

int mt_price_per_node(const mt_price *p, int stride, int size) {
  const int dpn = p->devices_per_node;
  if (dpn <= 0 || size <= 1) return size > 1 ? size : 1;
  if (stride >= dpn) return 1;
  int k = dpn / (stride > 0 ? stride : 1);
  return k < size ? k : size;
}

int mt_price_same_node(const mt_price *p, int a, int b) {
  const int dpn = p->devices_per_node;
  return dpn <= 0 || a / dpn == b / dpn;
}

int mt_price_group_per_node(const mt_price *p, int world0, int stride, int size) {
  int k = 1;
  while (k < size && mt_price_same_node(p, world0, world0 + k * stride)) k++;
  return k;
}

/* the levels' latencies: one inside a node, one across (flat: one) */
static double level_lat_s(const mt_price *p, int n, int k) {
  if (k >= n) return p->intra_us * 1e-6;
  if (p->coll_flat) return p->inter_us * 1e-6;
  return (k > 1 ? p->intra_us * 1e-6 : 0.0) + p->inter_us * 1e-6;
}

/* the ring steps' latency of a collective of `kind` over n ranks, k a node,
 * a step costing step[0] inside a node, step[1] across (seconds) */
static double steps_s(const mt_price *p, int n, int k, int kind, const double step[2]) {
  if (n <= 1 || (step[0] <= 0 && step[1] <= 0)) return 0.0;
  const int one_node = k >= n, flat = !one_node && (k <= 1 || p->coll_flat);
  const double in = step[0] * 1e-6, out = step[1] * 1e-6;
  if (kind == MT_PRICE_ALLTOALL) return one_node ? in : out;
  const double N = one_node ? 1.0 : flat ? n : ceil((double)n / k);
  const double pass = one_node ? (n - 1) * in : flat ? (n - 1) * out
                                              : (n - N) * in + (N - 1) * out;
  if (kind != MT_PRICE_ALLREDUCE) return pass;
  /* an all-reduce: the ring twice, or up and down a tree (the ranks of a
   * node in a chain, the nodes in a binary tree) */
  const double tree = 2.0 * ((one_node ? n - 1 : flat ? 0 : k - 1) * in + ceil(log2(N)) * out);
  return 2.0 * pass < tree || N == 1 ? 2.0 * pass : tree;
}

double mt_price_coll_lat_s(const mt_price *p, int n, int k, int kind) {
  double large = steps_s(p, n, k, kind, p->ring_step_us);
  if (p->small_step_us[0] > 0 || p->small_step_us[1] > 0) {
    double small = steps_s(p, n, k, kind, p->small_step_us);
    if (small < large) large = small;
  }
  return level_lat_s(p, n, k) + large;
}

/* the bytes' seconds at the links' bandwidths times `slow` (the levels'
 * latencies apart) */
static double xfer_s(const mt_price *p, double bytes, int n, int k, int kind, double slow) {
  if (!(bytes > 0)) return 0.0;
  const double ibw = p->intra_gbs * 1e9 / slow, ebw = p->inter_gbs * 1e9 / slow;
  if (k >= n || n <= 1) return bytes / ibw;
  if (k <= 1 || p->coll_flat) return bytes / ebw;
  if (kind == MT_PRICE_ALLTOALL) {
    double across = bytes * (n - k) / (n - 1), inside = bytes * (k - 1) / (n - 1);
    return across / ebw > inside / ibw ? across / ebw : inside / ibw;
  }
  const double whole = bytes * n / (n - 1), N = (double)n / k; /* per (n-1)/n of the tensor */
  return whole * (k - 1) / k / ibw + whole * (N - 1) / (N * k) / ebw;
}

double mt_price_coll_s(const mt_price *p, double bytes, int n, int k, int kind) {
  const double lat = level_lat_s(p, n, k);
  double t = lat + xfer_s(p, bytes, n, k, kind, 1.0) + steps_s(p, n, k, kind, p->ring_step_us);
  if (p->small_step_us[0] > 0 || p->small_step_us[1] > 0) {
    double small = lat + xfer_s(p, bytes, n, k, kind, 4.0) + steps_s(p, n, k, kind, p->small_step_us);
    if (small < t) t = small;
  }
  return t;
}

/* ------------------------------------------------------------------ */
/* the clock                                                           */

static mt_vclock_state g_v;

void mt_vclock_save(mt_vclock_state *s) { *s = g_v; }
void mt_vclock_restore(const mt_vclock_state *s) { g_v = *s; }

void mt_vclock_start(const mt_price *p) {
  g_v.price = *p;
  g_v.now = g_v.busy = 0.0;
  g_v.checks = g_v.violations = 0;
  g_v.on = 1;
}

int mt_vclock_on(void) { return g_v.on; }
const mt_price *mt_vclock_price(void) { return &g_v.price; }

void mt_vclock_advance(double s) {
  if (s > 0) g_v.now += s, g_v.busy += s;
}

double mt_vclock_busy(void) { return g_v.busy; }

void mt_vclock_wait_until(double t) {
  if (t > g_v.now) g_v.now = t;
}

void mt_vclock_check(double complete, double issued, const char *what) {
  g_v.checks++;
  if (complete >= issued) return;
  if (g_v.violations++ == 0)
    fprintf(stderr, "meshtrain: causality violated: %s completed at %.9f s, before its send was "
                    "issued at %.9f s (virtual time)\n", what, complete, issued);
}

long mt_vclock_checks(void) { return g_v.checks; }
long mt_vclock_violations(void) { return g_v.violations; }

double mt_now(void) { return g_v.on ? g_v.now : mt_wall_now(); }
