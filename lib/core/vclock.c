/* Virtual time: the rank's clock on the virtual device and the prices the
 * cost model and the emulation share (see core.h). */
#include "core/core.h"

#include <math.h>
#include <stdio.h>

double mt_price_gemm_gflops(const mt_price *p, double flops) {
  if (p->n_gemm < 1) return 1.0; /* no curve: a loaded profile always has one */
  if (flops <= p->gemm_flops[0]) return p->gemm_gflops[0];
  for (int i = 1; i < p->n_gemm; i++)
    if (flops <= p->gemm_flops[i]) {
      double t = (log(flops) - log(p->gemm_flops[i - 1])) /
                 (log(p->gemm_flops[i]) - log(p->gemm_flops[i - 1]));
      return exp(log(p->gemm_gflops[i - 1]) +
                 t * (log(p->gemm_gflops[i]) - log(p->gemm_gflops[i - 1])));
    }
  return p->gemm_gflops[p->n_gemm - 1];
}

double mt_price_gemm_s(const mt_price *p, double m, double n, double k, double calls) {
  double flops = 2.0 * m * n * k;
  if (!(flops > 0) || !(calls > 0)) return 0.0;
  return calls * flops / (mt_price_gemm_gflops(p, flops) * 1e9);
}

double mt_price_attn_fwd_s(const mt_price *p, double heads, long q0, int Tq, long k0, int Tk,
                           int causal, double hs) {
  const int br = p->attn_br > 0 ? p->attn_br : 64, bc = p->attn_bc > 0 ? p->attn_bc : 256;
  double visible = 0.0, whole = 0.0, calls = 0.0; /* per head */
  for (int r0 = 0; r0 < Tq; r0 += br) {
    int rows = Tq - r0 < br ? Tq - r0 : br;
    long keys = causal ? q0 + r0 + rows - k0 : Tk; /* up to the block's last row */
    if (keys <= 0) continue;
    if (keys > Tk) keys = Tk;
    long tiles = (keys + bc - 1) / bc;
    visible += 4.0 * rows * (double)keys * hs;
    whole += 4.0 * br * (double)tiles * bc * hs;
    calls += 2.0 * (double)tiles;
  }
  if (!(heads > 0) || calls == 0) return 0.0;
  if (p->attn_gflops > 0) return heads * whole / (p->attn_gflops * 1e9);
  return heads * visible / (mt_price_gemm_gflops(p, visible / calls) * 1e9);
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

double mt_price_coll_lat_s(const mt_price *p, int n, int k) {
  if (k >= n) return p->intra_us * 1e-6;
  if (p->coll_flat) return p->inter_us * 1e-6;
  return (k > 1 ? p->intra_us * 1e-6 : 0.0) + p->inter_us * 1e-6;
}

double mt_price_coll_s(const mt_price *p, double bytes, int n, int k, int alltoall) {
  if (k >= n || n <= 1) return mt_price_link_s(p, 1, bytes);
  if (k <= 1 || p->coll_flat) return mt_price_link_s(p, 0, bytes);
  const double lat = mt_price_coll_lat_s(p, n, k);
  if (!(bytes > 0)) return lat;
  const double ibw = p->intra_gbs * 1e9, ebw = p->inter_gbs * 1e9;
  if (alltoall) {
    double across = bytes * (n - k) / (n - 1), inside = bytes * (k - 1) / (n - 1);
    return (across / ebw > inside / ibw ? across / ebw : inside / ibw) + lat;
  }
  const double whole = bytes * n / (n - 1), N = (double)n / k; /* per (n-1)/n of the tensor */
  return whole * (k - 1) / k / ibw + whole * (N - 1) / (N * k) / ebw + lat;
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
