/* test_count: the mechanism the plan is counted with.
 * - The null op table is complete; its allocations are counted per category
 *   into the account in use, and the process's own figures stay as they
 *   were; what the host uploads (small records) comes back on download,
 *   anything else reads as zeros; the router's choices are a balanced
 *   round robin (with k = E every token chooses every expert), named by
 *   a routing id equal for equal shapes.
 * - A count-only mesh places every rank where mt_mesh_create and
 *   mt_mesh_fold would (coordinates and each group's size and rank); a
 *   collective on its groups moves nothing and counts the bytes the MPI
 *   path counts (mt_bytes_*), point-to-point counts the sender's bytes, and
 *   integers come back as if every rank had sent this one's.
 * - The plan counts one rank per class of equal figures: for a 64-rank
 *   mesh with ZeRO-1 fewer ranks are built than planned, and the ranks of
 *   a class agree with a plan of that rank alone.
 * - The virtual device's op table is complete, counts memory as the null
 *   one, and moves the virtual clock (mt_now once started) by the shared
 *   prices: a matmul by mt_price_gemm_s of its shape, a block of
 *   attention as the cost model prices block attention (the visible keys of
 *   each row block on the matmul curve, or a fused rate on whole tiles;
 *   backward 2.5 x), an elementwise op by
 *   its bytes over the bandwidth; the cost model's matmul curve is the same
 *   function. No MPI. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "kernels/kernels.h"
#include "plan/plan.h"

#include "../check.h"

static void null_backend(void) {
  const mt_ops *o = mt_ops_null();
  char names[512];
  MT_CHECK(mt_ops_missing(o, names, sizeof names) == 0, "null op table: missing %s", names);
  size_t own = mt_mem_current(MT_MEM_ACTIV);
  mt_mem_account acct;
  memset(&acct, 0, sizeof acct);
  mt_mem_account *prev = mt_mem_account_use(&acct);
  float *a = o->alloc(MT_MEM_ACTIV, 1000), *b = o->alloc(MT_MEM_ACTIV, 24);
  float *g = o->alloc(MT_MEM_GRADS, 4096);
  MT_CHECK(a && b && a != b, "null alloc: distinct addresses %p %p", (void *)a, (void *)b);
  MT_CHECK(mt_mem_current(MT_MEM_ACTIV) == 1024 && mt_mem_current(MT_MEM_GRADS) == 4096,
           "null alloc counted %zu activation, %zu gradient bytes",
           mt_mem_current(MT_MEM_ACTIV), mt_mem_current(MT_MEM_GRADS));
  o->free(MT_MEM_ACTIV, b, 24);
  MT_CHECK(mt_mem_current(MT_MEM_ACTIV) == 1000 && mt_mem_peak(MT_MEM_ACTIV) == 1024,
           "after a free: %zu now, peak %zu", mt_mem_current(MT_MEM_ACTIV),
           mt_mem_peak(MT_MEM_ACTIV));
  /* ops do nothing (a touch of these addresses would fault) */
  o->matmul_forward(MT_DT_F32, a, a, a, NULL, 4, 4, 4);
  o->zero(MT_DT_F32, g, 1024);
  MT_CHECK(o->sum(MT_DT_F32, a, 250) == 0.0 && o->sumsq(MT_DT_F32, g, 1024) == 0.0,
           "null sum and sumsq are 0");
  /* the host's records come back; other memory reads as zeros */
  int rec[5] = {7, 1, 2, 3, 4}, back[5], zeros[3] = {9, 9, 9};
  o->upload(g, rec, sizeof rec);
  o->download(back, g, sizeof back);
  MT_CHECK(memcmp(back, rec, sizeof rec) == 0, "an uploaded record comes back");
  o->download(zeros, a, sizeof zeros);
  MT_CHECK(zeros[0] == 0 && zeros[1] == 0 && zeros[2] == 0, "unknown memory reads as zeros");
  /* balanced routing: 6 tokens, k = E = 4 */
  int top[24], hits[4] = {0, 0, 0, 0};
  int *dev_top = (int *)o->alloc(MT_MEM_ACTIV, sizeof top);
  o->moe_router_forward(a, a, dev_top, a, a, NULL, 6, 4, 4, 0);
  o->download(top, dev_top, sizeof top);
  for (int n = 0; n < 6; n++) {
    int seen = 0;
    for (int j = 0; j < 4; j++) {
      hits[top[n * 4 + j]]++;
      seen |= 1 << top[n * 4 + j];
    }
    MT_CHECK(seen == 15, "token %d does not choose every expert (mask %x)", n, seen);
  }
  MT_CHECK(hits[0] == 6 && hits[1] == 6 && hits[2] == 6 && hits[3] == 6, "routing unbalanced");
  /* the choices are named by what makes them (the host reuses what it
   * derived from equal ones): the same shape the same id, another shape
   * another; a part of them reads as the whole's start; an upload over
   * them is data again */
  int *dev_top2 = (int *)o->alloc(MT_MEM_ACTIV, sizeof top), part[5];
  unsigned id = o->moe_routing_id(dev_top);
  o->moe_router_forward(a, a, dev_top2, a, a, NULL, 6, 4, 4, 0);
  MT_CHECK(id > 0 && o->moe_routing_id(dev_top2) == id, "routing ids %u and %u", id,
           o->moe_routing_id(dev_top2));
  o->moe_router_forward(a, a, dev_top2, a, a, NULL, 5, 4, 4, 0);
  MT_CHECK(o->moe_routing_id(dev_top2) != id && o->moe_routing_id(dev_top2) > 0,
           "5 tokens' routing has the id of 6 tokens'");
  o->download(part, dev_top, sizeof part);
  MT_CHECK(memcmp(part, top, sizeof part) == 0, "a part of the choices differs from the whole's");
  o->upload(dev_top2, top, sizeof top);
  MT_CHECK(o->moe_routing_id(dev_top2) == 0 && o->moe_routing_id((const int *)a) == 0,
           "uploaded data has a routing id");
  mt_mem_account_use(prev);
  MT_CHECK(mt_mem_current(MT_MEM_ACTIV) == own, "the process's own account was touched");
  mt_ops_null_reset();
}

static void count_mesh(void) {
  mt_err e = {0};
  const int tp = 2, cp = 2, dp = 3, pp = 2;
  for (int w = 0; w < tp * cp * dp * pp; w++) {
    mt_mesh m;
    MT_CHECK(mt_mesh_count(&m, tp, cp, dp, pp, w, 2, 3, &e) == 0, "rank %d: %s", w, e.msg);
    MT_CHECK(mt_mesh_rank_of(&m, m.tp_rank, m.cp_rank, m.dp_rank, m.pp_rank) == w,
             "rank %d: coordinates (%d %d %d %d) give rank %d", w, m.tp_rank, m.cp_rank,
             m.dp_rank, m.pp_rank, mt_mesh_rank_of(&m, m.tp_rank, m.cp_rank, m.dp_rank, m.pp_rank));
    int q = w % (tp * cp * dp), etp_r, ep_r, edp_r;
    mt_mesh_fold_coords(q, 2, 3, &etp_r, &ep_r, &edp_r);
    MT_CHECK(m.dpcp_g.size == dp * cp && m.dpcp_g.rank == m.cp_rank + cp * m.dp_rank &&
                 m.etp_g.rank == etp_r && m.ep_g.rank == ep_r && m.edp_g.size == 2 &&
                 m.edp_g.rank == edp_r && m.tp_g.backend == MT_COMM_COUNT,
             "rank %d: the groups' sizes and ranks", w);
    mt_mesh_destroy(&m);
  }
  MT_CHECK(mt_mesh_count(&(mt_mesh){0}, 2, 1, 2, 1, 0, 3, 1, &e) != 0 && strstr(e.msg, "etp"),
           "a fold that does not divide the stage is refused: '%s'", e.msg);
  mt_mesh m;
  e = (mt_err){0};
  mt_mesh_count(&m, 4, 1, 2, 1, 5, 1, 1, &e);
  float *nowhere = (float *)(uintptr_t)64; /* never read: the call moves nothing */
  mt_allreduce(&m.tp_g, nowhere, 1000, MT_DT_F32, MT_RED_SUM, MT_LOC_DEVICE);
  MT_CHECK(m.tp_g.bytes == mt_bytes_allreduce(4000, 4) && m.tp_g.calls == 1,
           "allreduce over 4 ranks counted %g bytes", m.tp_g.bytes);
  mt_request r;
  mt_isend(&m.tp_g, nowhere, 10, MT_DT_F32, 1, MT_TAG_PP_ACT, MT_LOC_DEVICE, &r);
  mt_wait(&r);
  MT_CHECK(m.tp_g.bytes == mt_bytes_allreduce(4000, 4) + 40, "a send counts its 40 bytes");
  mt_allreduce(&m.pp_g, nowhere, 1000, MT_DT_F32, MT_RED_SUM,
               MT_LOC_DEVICE); /* one rank: nothing */
  MT_CHECK(m.pp_g.bytes == 0 && m.pp_g.calls == 0, "a group of one counts nothing");
  int mine[2] = {3, 5}, all[8];
  mt_allgather(&m.tp_g, mine, all, 2, MT_DT_I32, MT_LOC_HOST);
  MT_CHECK(all[0] == 3 && all[1] == 5 && all[6] == 3 && all[7] == 5,
           "integers gathered as this rank's");
  int to[8] = {0, 1, 2, 3, 4, 5, 6, 7}, from[8];
  mt_alltoall(&m.tp_g, to, from, 2, MT_DT_I32, MT_LOC_HOST); /* tp rank 1 sends {2,3} to itself */
  MT_CHECK(from[0] == 2 && from[1] == 3 && from[4] == 2 && from[7] == 3,
           "all-to-all as every rank sending this one's block to it");
  mt_mesh_destroy(&m);
}

static void plan_classes(void) {
  mt_config cfg;
  mt_err e = {0};
  char *over[] = {"model.preset=tiny", "parallel.dp=32", "parallel.tp=2", "parallel.zero=1",
                  "train.global_batch=64", "train.micro_batch=1", "parallel.bucket_mb=0.01"};
  MT_CHECK(mt_config_load(&cfg, NULL, 7, over, &e) == 0, "config: %s", e.msg);
  mt_plan p;
  MT_CHECK(mt_plan_build(&cfg, 0, &p, &e) == 0, "plan: %s", e.msg);
  MT_CHECK(p.n == 64 && p.counted > 1 && p.counted < p.n, "64 ranks, %d counted", p.counted);
  for (int w = 0; w < p.n; w += 9) { /* a sample of ranks, each planned alone */
    mt_plan_rank one;
    const mt_plan_rank *r = &p.r[w];
    MT_CHECK(mt_plan_rank_build(&cfg, &p.lay, r->pp_rank, r->dp_rank, r->cp_rank, r->tp_rank,
                                &one, &e) == 0, "rank %d: %s", w, e.msg);
    int same = one.world_rank == w && one.dp_bytes == r->dp_bytes &&
               one.tp_bytes == r->tp_bytes && one.dp_state_bytes == r->dp_state_bytes;
    for (int c = 0; c < MT_MEM_NCAT; c++) same &= one.mem[c] == r->mem[c];
    MT_CHECK(same, "rank %d: its class's figures differ from its own", w);
  }
  mt_plan_free(&p);
}

static int near(double a, double b) { return fabs(a - b) <= 1e-12 * fabs(b); }

/* (last: the virtual clock, once started, is what mt_now reads) */
static void virtual_backend(void) {
  const mt_ops *o = mt_ops_virtual();
  char names[512];
  MT_CHECK(mt_ops_missing(o, names, sizeof names) == 0, "virtual op table: missing %s", names);
  /* the profile's activations bf16 (the curve gemm[0]); an fp32 curve a
   * third as fast */
  mt_price p = {.gemm = {{3, {1e6, 1e8, 1e10}, {10, 50, 100}}, {3, {1e6, 1e8, 1e10}, {3, 15, 30}}},
                .elementwise_gbs = 20, .act_bytes = 2, .devices_per_node = 4, .intra_gbs = 5,
                .intra_us = 10, .inter_gbs = 1, .inter_us = 30};
  mt_cost_profile cp;
  memset(&cp, 0, sizeof cp);
  cp.gemm[0] = p.gemm[0], cp.gemm[1] = p.gemm[1];
  const double fl[] = {5e5, 1e6, 3e7, 1e8, 4e9, 1e11};
  for (int w = 0; w < 2; w++)
    for (int i = 0; i < 6; i++)
      MT_CHECK(mt_cost_gemm_gflops(&cp, 2.0 * (1 + w), fl[i]) ==
                   mt_price_gemm_gflops(&p, 2.0 * (1 + w), fl[i]),
               "the cost model's curve at %g FLOPs: %g, the virtual device's %g", fl[i],
               mt_cost_gemm_gflops(&cp, 2.0 * (1 + w), fl[i]),
               mt_price_gemm_gflops(&p, 2.0 * (1 + w), fl[i]));
  mt_vclock_start(&p);
  mt_mem_account acct;
  memset(&acct, 0, sizeof acct);
  mt_mem_account *prev = mt_mem_account_use(&acct);
  float *a = o->alloc(MT_MEM_ACTIV, 4096);
  MT_CHECK(mt_mem_current(MT_MEM_ACTIV) == 4096, "virtual alloc counted %zu bytes",
           mt_mem_current(MT_MEM_ACTIV));
  double t0 = mt_now();
  o->matmul_forward(MT_DT_F32, a, a, a, NULL, 64, 128, 256); /* 2 x 64 x 256 x 128 FLOPs */
  /* an fp32 op of an fp32 run on a bf16 profile: priced as the mixed
   * precision it stands for, at the bf16 curve's rate (compute-bound) */
  double want = 2.0 * 64 * 256 * 128 / (mt_price_gemm_gflops(&p, 2, 2.0 * 64 * 256 * 128) * 1e9);
  MT_CHECK(near(mt_now() - t0, want), "matmul moved the clock %.9g s, priced %.9g s",
           mt_now() - t0, want);
  /* a diagonal causal block of 4 x 4 rows, B x NH = 6 heads of 8: in one
   * block of (default) 64 rows, its 4 keys, two products of 4 x 4 x 8 on
   * the matmul curve (4 hs FLOPs a pair, 16 pairs: the CPU backend computes
   * the block's visible keys whole); the backward 2.5 times that */
  mt_attn_block blk = {.B = 2, .NH = 3, .hs = 8, .Tq = 4, .Tk = 4, .causal = 1};
  t0 = mt_now();
  o->attn_forward(MT_DT_F32, &blk, a, a, a, a, a);
  want = 6.0 * 4 * 16 * 8 / (mt_price_gemm_gflops(&p, 2, 2.0 * 4 * 4 * 8) * 1e9);
  MT_CHECK(near(mt_now() - t0, want), "causal block moved the clock %.9g s, priced %.9g s",
           mt_now() - t0, want);
  t0 = mt_now();
  o->attn_backward(MT_DT_F32, &blk, a, a, a, a, a, a, a, a, a);
  MT_CHECK(near(mt_now() - t0, 2.5 * want), "its backward moved the clock %.9g s, priced %.9g s",
           mt_now() - t0, 2.5 * want);
  /* a fused kernel's rate on whole 2 x 2 tiles: the diagonal block's row
   * blocks see 2 and 4 keys, 1 and 2 tiles: 3 tiles of 4 pairs; a block
   * below the diagonal (queries at 4..7, keys 0..3) sees every key: 4 tiles */
  mt_price fused = p;
  fused.attn_br = 2, fused.attn_bc = 2, fused.attn_gflops[0] = 1000;
  MT_CHECK(near(mt_price_attn_fwd_s(&fused, 2, 6, 0, 4, 0, 4, 1, 8), 6.0 * 3 * 4 * 4 * 8 / 1e12),
           "fused price of a diagonal block: %.9g s", mt_price_attn_fwd_s(&fused, 2, 6, 0, 4, 0, 4, 1, 8));
  MT_CHECK(near(mt_price_attn_fwd_s(&fused, 2, 6, 4, 4, 0, 4, 1, 8), 6.0 * 4 * 4 * 4 * 8 / 1e12),
           "fused price of a block below the diagonal: %.9g s",
           mt_price_attn_fwd_s(&fused, 2, 6, 4, 4, 0, 4, 1, 8));
  MT_CHECK(mt_price_attn_fwd_s(&fused, 2, 6, 0, 4, 4, 4, 1, 8) == 0.0,
           "a block above the diagonal (keys after every query) costs nothing");
  /* by width: fp32 operands at fp32's rate, es 0 (a bound) at the faster;
   * a price with one rate takes it for both */
  const double bf = mt_price_attn_fwd_s(&fused, 2, 6, 0, 4, 0, 4, 1, 8);
  MT_CHECK(mt_price_attn_fwd_s(&fused, 4, 6, 0, 4, 0, 4, 1, 8) == bf,
           "one fused rate: fp32 operands priced as bf16's");
  fused.attn_gflops[1] = 250;
  MT_CHECK(near(mt_price_attn_fwd_s(&fused, 4, 6, 0, 4, 0, 4, 1, 8), 4.0 * bf),
           "fp32 attention at a quarter of bf16's rate: %.9g s, priced %.9g s",
           mt_price_attn_fwd_s(&fused, 4, 6, 0, 4, 0, 4, 1, 8), 4.0 * bf);
  MT_CHECK(mt_price_attn_fwd_s(&fused, 0, 6, 0, 4, 0, 4, 1, 8) == bf,
           "the bound (es 0) prices attention at the faster width");
  t0 = mt_now();
  o->layernorm_forward(MT_DT_F32, a, a, a, a, a, a, 10,
                       100); /* reads and writes 10 x 100 elements */
  want = 2.0 * 2 * 10 * 100 / 20e9;
  MT_CHECK(near(mt_now() - t0, want), "layernorm moved the clock %.9g s, priced %.9g s",
           mt_now() - t0, want);
  o->free(MT_MEM_ACTIV, a, 4096);
  mt_mem_account_use(prev);
}

/* a matmul's price by its operands' width and shape (mt_price_gemm_s):
 * each width on its own curve, a skinny matmul at its bytes through
 * memory, es 0 a bound under both; the virtual device's width for each op */
static void gemm_widths(void) {
  mt_price p = {.gemm = {{2, {1e6, 1e10}, {10, 100}}, {2, {1e6, 1e10}, {4, 40}}},
                .elementwise_gbs = 20, .act_bytes = 4};
  const double sq = 2.0 * 512 * 512 * 512;
  for (int w = 0; w < 2; w++) {
    double es = 2.0 * (1 + w), got = mt_price_gemm_s(&p, es, 512, 512, 512, 3);
    double rate = mt_price_gemm_gflops(&p, es, sq);
    MT_CHECK(near(got, 3.0 * sq / (rate * 1e9)), "a square matmul of %g-byte elements: %.9g s, "
             "its curve's rate says %.9g s", es, got, 3.0 * sq / (rate * 1e9));
  }
  MT_CHECK(near(mt_price_gemm_gflops(&p, 2, sq) / mt_price_gemm_gflops(&p, 4, sq), 2.5),
           "bf16 over fp32 rate %g, the curves say 2.5",
           mt_price_gemm_gflops(&p, 2, sq) / mt_price_gemm_gflops(&p, 4, sq));
  /* one row against 4096 x 4096 weights: 3.4e7 FLOPs at about 33 GFLOP/s
   * (1 ms), the weights read once at 20 GB/s (1.7 ms) */
  const double bytes = 2.0 * (4096.0 + 4096.0 * 4096 + 4096.0);
  double skinny = mt_price_gemm_s(&p, 2, 1, 4096, 4096, 1);
  MT_CHECK(near(skinny, bytes / 20e9), "a one-row matmul: %.9g s, its bytes through memory "
           "%.9g s", skinny, bytes / 20e9);
  const double shapes[][3] = {{1, 4096, 4096}, {512, 512, 512}, {8, 64, 1 << 20}, {3, 5, 7}};
  for (int i = 0; i < 4; i++) {
    const double *d = shapes[i];
    double lo = mt_price_gemm_s(&p, 0, d[0], d[1], d[2], 1);
    double a = mt_price_gemm_s(&p, 2, d[0], d[1], d[2], 1);
    double b = mt_price_gemm_s(&p, 4, d[0], d[1], d[2], 1);
    MT_CHECK(lo <= a && lo <= b && lo > 0, "the bound (es 0) of %g x %g x %g: %.9g s, the "
             "widths' prices %.9g and %.9g s", d[0], d[1], d[2], lo, a, b);
  }
  /* a hand-made price with one curve serves both widths */
  mt_price one = p;
  one.gemm[0].n = 0;
  MT_CHECK(mt_price_gemm_gflops(&one, 2, sq) == mt_price_gemm_gflops(&p, 4, sq),
           "one curve: the bf16 rate is not the fp32 curve's");
  /* the virtual device: a bf16 run (bytes_as_sent) prices each op at its
   * own type's width; an fp32 run at the profile's (act_bytes 4 here) */
  const mt_ops *o = mt_ops_virtual();
  mt_vclock_state keep;
  mt_vclock_save(&keep);
  for (int sent = 0; sent < 2; sent++)
    for (int t = 0; t < 2; t++) {
      mt_price q = p;
      q.bytes_as_sent = sent;
      mt_vclock_start(&q);
      const mt_dtype dt = t ? MT_DT_F32 : MT_DT_BF16;
      o->matmul_forward(dt, NULL, NULL, NULL, NULL, 512, 512, 512);
      double want = mt_price_gemm_s(&q, sent ? (double)mt_dtype_bytes(dt) : 4.0, 512, 512, 512, 1);
      MT_CHECK(near(mt_now(), want), "virtual %s matmul (bytes_as_sent %d): %.9g s, priced %.9g s",
               t ? "fp32" : "bf16", sent, mt_now(), want);
    }
  mt_vclock_restore(&keep);
}

/* a profile's curves by width: gemm the width trained in (act_bytes), the
 * other from its own key or gemm's scaled by the [hw] peaks' ratio; a
 * profile written back loads to the same curves */
static int load_text(const char *text, mt_cost_profile *p, mt_err *e) {
  char path[] = "/tmp/mt_test_count_XXXXXX";
  int fd = mkstemp(path);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) return -1;
  fputs(text, f);
  fclose(f);
  int rc = mt_cost_profile_load(p, path, e);
  remove(path);
  return rc;
}

/* the profile head + keys is refused with a message that holds want */
static void refused(const char *head, const char *keys, const char *want, const char *what) {
  char text[1024];
  snprintf(text, sizeof text, "%s%s", head, keys);
  mt_cost_profile p;
  mt_err e = {0};
  MT_CHECK(load_text(text, &p, &e) != 0 && strstr(e.msg, want), "%s: '%s'", what, e.msg);
}

static void profile_widths(void) {
  const char *head = "[hw]\npeak_gflops_fp32 = 25\npeak_gflops_bf16 = 100\n[cost]\n"
                     "devices_per_node = 4\nmem_gib = 1\npeak_gflops = 100\nelementwise_gbs = 10\n"
                     "intra_gbs = 5\nintra_us = 20\ninter_gbs = 1\ninter_us = 50\noverlap = 0.5\n";
  char text[1024];
  mt_cost_profile p;
  mt_err e = {0};
  snprintf(text, sizeof text, "%sact_bytes = 2\ngemm = 1e5:5 1e9:80\n", head);
  MT_CHECK(load_text(text, &p, &e) == 0, "a bf16 profile: %s", e.msg);
  MT_CHECK(p.gemm[0].n == 2 && p.gemm[0].gflops[1] == 80 && near(p.gemm[1].gflops[1], 20),
           "the fp32 curve not gemm's at the peaks' ratio 1/4: %g", p.gemm[1].gflops[1]);
  MT_CHECK(p.attn_given == 0 && p.attn_gflops[0] == 0 && p.attn_gflops[1] == 0,
           "no attention rate given, none derived: %g %g", p.attn_gflops[0], p.attn_gflops[1]);
  snprintf(text, sizeof text, "%sact_bytes = 2\ngemm = 1e5:5 1e9:80\nattn_gflops = 60\n", head);
  MT_CHECK(load_text(text, &p, &e) == 0, "a bf16 profile with attention: %s", e.msg);
  MT_CHECK(p.attn_given == 1u && p.attn_gflops[0] == 60 && near(p.attn_gflops[1], 15),
           "fp32 attention not bf16's at the peaks' ratio: %g", p.attn_gflops[1]);
  snprintf(text, sizeof text, "%sgemm = 1e5:5 1e9:80\nattn_gflops_bf16 = 36\n", head);
  MT_CHECK(load_text(text, &p, &e) == 0, "an fp32 profile with bf16 attention only: %s", e.msg);
  MT_CHECK(p.attn_given == 1u && p.attn_gflops[0] == 36 && near(p.attn_gflops[1], 9),
           "fp32 attention not derived from bf16's: %g", p.attn_gflops[1]);
  snprintf(text, sizeof text, "%sgemm_bf16 = 1e5:15 1e9:240\ngemm = 1e5:5 1e9:80\n"
                              "attn_gflops = 30\nattn_gflops_bf16 = 70\nep_dispatch = per-node\n"
                              "ring_step_us = 3.4:14\nsmall_step_us = 0.6:2.7\n", head);
  MT_CHECK(load_text(text, &p, &e) == 0, "an fp32 profile with a bf16 curve: %s", e.msg);
  MT_CHECK(p.gemm[1].gflops[1] == 80 && p.gemm[0].gflops[1] == 240 && p.gemm_given == 3u,
           "gemm_bf16 not read as given: %g, %g", p.gemm[1].gflops[1], p.gemm[0].gflops[1]);
  FILE *f = tmpfile();
  mt_cost_profile_write(&p, "round trip", f);
  rewind(f);
  char back[2048];
  size_t n = fread(back, 1, sizeof back - 1, f);
  back[n] = 0;
  fclose(f);
  mt_cost_profile q;
  MT_CHECK(load_text(back, &q, &e) == 0, "the written profile: %s", e.msg);
  MT_CHECK(memcmp(&q.gemm, &p.gemm, sizeof p.gemm) == 0, "the written curves load back otherwise");
  MT_CHECK(p.attn_given == 3u && p.attn_gflops[1] == 30 && p.attn_gflops[0] == 70 &&
               memcmp(q.attn_gflops, p.attn_gflops, sizeof p.attn_gflops) == 0 &&
               q.attn_given == 3u,
           "attention by width, given and written back: %g %g, back %g %g", p.attn_gflops[0],
           p.attn_gflops[1], q.attn_gflops[0], q.attn_gflops[1]);
  MT_CHECK(p.ep_per_node == 1 && q.ep_per_node == 1, "ep_dispatch = per-node read %d, back %d",
           p.ep_per_node, q.ep_per_node);
  refused(head, "gemm = 1e5:5 1e9:80\nep_dispatch = deepep\n",
          "ep_dispatch = 'deepep' is not flat or per-node", "a bad ep_dispatch");
  MT_CHECK(q.ring_step_us[0] == 3.4 && q.ring_step_us[1] == 14 && q.small_step_us[0] == 0.6 &&
               q.small_step_us[1] == 2.7,
           "ring steps written and read back: %g:%g %g:%g", q.ring_step_us[0], q.ring_step_us[1],
           q.small_step_us[0], q.small_step_us[1]);
  refused(head, "gemm = 1e5:5 1e9:80\nring_step_us = 3.4\n",
          "ring_step_us = '3.4' is not INSIDE:ACROSS", "one ring step latency");
  refused(head, "act_bytes = 2\ngemm = 1e5:5 1e9:80\ngemm_bf16 = 1e5:5\n",
          "gemm_bf16 is gemm's own width", "gemm_bf16 on a bf16 profile");
  refused(head, "gemm = 1e5:5 1e9:80\nattn_gflops_fp32 = 5\n",
          "attn_gflops_fp32 is attn_gflops's own width", "attn_gflops_fp32 on an fp32 profile");
  refused(head, "gemm = 1e5:5 1e9:80\nattn_gflops_fp16 = 5\n", "unknown key 'attn_gflops_fp16'",
          "attn_gflops_fp16");
  refused(head, "gemm = 1e5:5 1e9:80\ngemm_bf16 = 1e9:5 1e5:9\n",
          "gemm_bf16 = '1e9:5 1e5:9' is not", "a falling gemm_bf16");
}

/* collectives priced hierarchically across nodes (mt_price_coll_s) */
static void coll_prices(void) {
  mt_price p = {.devices_per_node = 4, .intra_gbs = 100, .intra_us = 2, .inter_gbs = 10,
                .inter_us = 20};
  const double S = 1e9; /* the tensor's bytes */
  /* ranks of a group in one node: by stride */
  MT_CHECK(mt_price_per_node(&p, 1, 8) == 4 && mt_price_per_node(&p, 2, 8) == 2 &&
               mt_price_per_node(&p, 4, 8) == 1 && mt_price_per_node(&p, 1, 2) == 2,
           "ranks a node: %d %d %d %d", mt_price_per_node(&p, 1, 8), mt_price_per_node(&p, 2, 8),
           mt_price_per_node(&p, 4, 8), mt_price_per_node(&p, 1, 2));
  /* inside a node and a flat ring across nodes: the link's alpha-beta */
  double ar4 = 2.0 * 3 / 4 * S, ar16 = 2.0 * 15 / 16 * S;
  MT_CHECK(near(mt_price_coll_s(&p, ar4, 4, 4, 0), ar4 / 100e9 + 2e-6), "inside: %.9g",
           mt_price_coll_s(&p, ar4, 4, 4, 0));
  MT_CHECK(near(mt_price_coll_s(&p, ar16, 16, 1, 0), ar16 / 10e9 + 20e-6), "flat: %.9g",
           mt_price_coll_s(&p, ar16, 16, 1, 0));
  /* 16 ranks, 4 a node (N = 4 nodes): 2 x 3/4 S inside, 2 x 3/16 S on every
   * rank's network link, one latency a level */
  double h = 2.0 * 0.75 * S / 100e9 + 2.0 * 3.0 / 16 * S / 10e9 + 22e-6;
  MT_CHECK(near(mt_price_coll_s(&p, ar16, 16, 4, 0), h), "hierarchical all-reduce %.9g, want %.9g",
           mt_price_coll_s(&p, ar16, 16, 4, 0), h);
  MT_CHECK(near(mt_price_coll_lat_s(&p, 16, 4, 0), 22e-6) &&
               near(mt_price_coll_lat_s(&p, 4, 4, 0), 2e-6),
           "latencies");
  /* an all-to-all: 12/16 of the tensor leaves the node over the network link,
   * 3/16 crosses it beside that */
  double a2a = 15.0 / 16 * S;
  MT_CHECK(near(mt_price_coll_s(&p, a2a, 16, 4, 1), 0.75 * S / 10e9 + 22e-6),
           "hierarchical all-to-all %.9g", mt_price_coll_s(&p, a2a, 16, 4, 1));
  /* a profile whose collectives are flat (collectives = flat) prices
   * every group across nodes as the flat ring, one network latency */
  mt_price flat = p;
  flat.coll_flat = 1;
  MT_CHECK(mt_price_coll_s(&flat, ar16, 16, 4, 0) == mt_price_coll_s(&p, ar16, 16, 1, 0) &&
               mt_price_coll_s(&flat, ar4, 4, 4, 0) == mt_price_coll_s(&p, ar4, 4, 4, 0),
           "flat collectives: %.9g", mt_price_coll_s(&flat, ar16, 16, 4, 0));
  /* the hierarchy never costs more than the flat ring */
  MT_CHECK(mt_price_coll_s(&p, ar16, 16, 4, 0) < mt_price_coll_s(&p, ar16, 16, 1, 0),
           "hierarchical above flat");
  /* ring steps (3 us inside a node, 10 us across): a pass over 64 ranks on
   * 16 nodes takes 48 steps inside and 15 across; an all-reduce two passes
   * (126 us + 300 us) or a tree's 2 (3 x 3 + 4 x 10) us, the fewer; an
   * all-to-all one step across; inside one node n - 1 steps inside */
  mt_price st = p;
  st.ring_step_us[0] = 3, st.ring_step_us[1] = 10;
  const double pass = 48 * 3e-6 + 15 * 10e-6, tree = 2 * (3 * 3e-6 + 4 * 10e-6);
  MT_CHECK(near(mt_price_coll_lat_s(&st, 64, 4, MT_PRICE_PASS), 22e-6 + pass) &&
               near(mt_price_coll_lat_s(&st, 64, 4, MT_PRICE_ALLREDUCE), 22e-6 + tree) &&
               near(mt_price_coll_lat_s(&st, 64, 4, MT_PRICE_ALLTOALL), 22e-6 + 10e-6) &&
               near(mt_price_coll_lat_s(&st, 4, 4, MT_PRICE_ALLREDUCE), 2e-6 + 2 * 3 * 3e-6),
           "ring steps: pass %.9g, all-reduce %.9g, all-to-all %.9g, in a node %.9g",
           mt_price_coll_lat_s(&st, 64, 4, MT_PRICE_PASS),
           mt_price_coll_lat_s(&st, 64, 4, MT_PRICE_ALLREDUCE),
           mt_price_coll_lat_s(&st, 64, 4, MT_PRICE_ALLTOALL),
           mt_price_coll_lat_s(&st, 4, 4, MT_PRICE_ALLREDUCE));
  MT_CHECK(near(mt_price_coll_s(&st, ar16, 16, 4, MT_PRICE_PASS),
                mt_price_coll_s(&p, ar16, 16, 4, 0) + 12 * 3e-6 + 3 * 10e-6),
           "a pass's steps on top of its bytes: %.9g", mt_price_coll_s(&st, ar16, 16, 4, 0));
  /* the small-message protocol (0.5 and 2 us a step, a quarter of the
   * bandwidth) where it is faster: a 1 KB gather on it, 1 GB on the other */
  mt_price sm = st;
  sm.small_step_us[0] = 0.5, sm.small_step_us[1] = 2;
  const double kb = 1024.0 * 63 / 64;
  double small = 22e-6 + 4.0 * (kb * 64 / 63 * 3 / 4 / 100e9 + kb * 64 / 63 * 15 / 64 / 10e9) +
                 48 * 0.5e-6 + 15 * 2e-6;
  MT_CHECK(near(mt_price_coll_s(&sm, kb, 64, 4, MT_PRICE_PASS), small),
           "1 KB on the small-message protocol: %.9g, want %.9g",
           mt_price_coll_s(&sm, kb, 64, 4, MT_PRICE_PASS), small);
  MT_CHECK(near(mt_price_coll_s(&sm, S, 64, 4, MT_PRICE_PASS),
                mt_price_coll_s(&st, S, 64, 4, MT_PRICE_PASS)),
           "1 GB not on the large-message protocol");
}

int main(void) {
  mt_log_init(0);
  null_backend();
  count_mesh();
  plan_classes();
  gemm_widths();
  profile_widths();
  virtual_backend();
  coll_prices();
  return mt_check_summary("test_count");
}
