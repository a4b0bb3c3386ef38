/* test_plan_scaled: a rank of a step of many micro-batches priced from
 * three shorter steps (mt_plan_rank_world_scaled) has the whole step's
 * figures (mt_plan_rank_world): memory by category, bytes per group, the
 * dp state, Muon's figures and the executor's bytes and op seconds per
 * chunk, each within a relative 1e-9 (NaN fails), over a dense GPT and a
 * SwiGLU MoE, pipelines of 1F1B, interleaved, ZB-H1 and ZB-V, one stage,
 * token slices, ZeRO 0-3, recompute and bf16; and it did run the shorter
 * steps (its world ran fewer micro-batches), except under GPipe and
 * breadth-first (every micro-batch's activations held: the whole step, the
 * same figures bit for bit). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan/plan.h"

#include "../check.h"
#include "plan_config.h"

static const char *g_gpt[] = {"model.preset=custom", "model.n_layer=8", "model.n_embd=64",
                              "model.n_head=4", "model.seq_len=256", "model.vocab_size=256"};
static const char *g_moe[] = {"model.preset=custom", "model.arch=llama", "model.n_layer=4",
                              "model.n_embd=64", "model.n_head=4", "model.n_kv_head=2",
                              "model.seq_len=256", "model.vocab_size=256",
                              "model.moe_experts=8", "model.moe_topk=2", "model.moe_ffn=32"};

/* a relative difference within 1e-9 (both 0 is equal; NaN is not) */
static int within(double a, double b) {
  const double size = fmax(fabs(a), fabs(b));
  return size == 0.0 || fabs(a - b) / size <= 1e-9;
}

static double worst = 0.0; /* the largest relative difference seen */

static void same(const char *name, const char *what, double whole, double scaled) {
  const double size = fmax(fabs(whole), fabs(scaled));
  if (size > 0 && fabs(whole - scaled) / size > worst) worst = fabs(whole - scaled) / size;
  MT_CHECK(within(whole, scaled), "%s: %s %.17g whole, %.17g from the shorter steps", name, what,
           whole, scaled);
}

static void compare(const mt_config *cfg, const mt_price *price, const char *name,
                    int expect_scaled) {
  mt_layout lay;
  mt_err e = {0};
  if (mt_layout_validate(cfg, 0, &lay, &e) != 0) {
    MT_FAIL("%s: %s", name, e.msg);
    mt_layout_free(&lay);
    return;
  }
  for (int st = 0; st < cfg->pp; st += cfg->pp > 1 ? cfg->pp - 1 : 1) {
    mt_plan_rank a, b;
    mt_plan_world wa, wb;
    if (mt_plan_rank_world(cfg, &lay, st, 0, 0, 0, price, &a, &wa, &e) != 0) {
      MT_FAIL("%s stage %d: whole: %s", name, st, e.msg);
      break;
    }
    if (mt_plan_rank_world_scaled(cfg, &lay, st, price, &b, &wb, &e) != 0) {
      MT_FAIL("%s stage %d: scaled: %s", name, st, e.msg);
      mt_plan_world_destroy(&wa);
      break;
    }
    char at[160];
    snprintf(at, sizeof at, "%s stage %d (%d micro-batches)", name, st, lay.accum);
    const int scaled = wb.batch.n_mb < lay.accum;
    MT_CHECK(scaled == expect_scaled, "%s: %s", at,
             expect_scaled ? "ran the whole step, not three shorter ones"
                           : "ran shorter steps where it must run the whole");
    for (int c = 0; c < MT_MEM_NCAT; c++) same(at, "memory", a.mem[c], b.mem[c]);
    const double fa[] = {a.dp_bytes,     a.tp_bytes,      a.pp_bytes,        a.cp_bytes,
                         a.ep_bytes,     a.etp_bytes,     a.edp_bytes,       a.dp_state_bytes,
                         a.dp_update_bytes, a.params_numel, a.moments_numel, a.muon_dp_bytes};
    const double fb[] = {b.dp_bytes,     b.tp_bytes,      b.pp_bytes,        b.cp_bytes,
                         b.ep_bytes,     b.etp_bytes,     b.edp_bytes,       b.dp_state_bytes,
                         b.dp_update_bytes, b.params_numel, b.moments_numel, b.muon_dp_bytes};
    for (int i = 0; i < N_OF(fa); i++) same(at, "bytes or elements", fa[i], fb[i]);
    MT_CHECK(a.n_buckets == b.n_buckets && a.layers == b.layers && a.pp_rank == b.pp_rank,
             "%s: buckets %d / %d, layers %d / %d", at, a.n_buckets, b.n_buckets, a.layers,
             b.layers);
    for (int c = 0; c < lay.chunks; c++) {
      for (int k = 0; k < 4; k++)
        same(at, "a chunk's bytes", wa.step.exec.chunk_bytes[c][k], wb.step.exec.chunk_bytes[c][k]);
      for (int k = 0; k < 3; k++)
        same(at, "a chunk's op seconds", wa.step.exec.chunk_s[c][k], wb.step.exec.chunk_s[c][k]);
    }
    MT_CHECK(wa.step.exec.chunk_s[0][0] > 0 && wa.step.exec.chunk_bytes[0][0] >= 0,
             "%s: no op seconds counted", at);
    mt_plan_world_destroy(&wa);
    mt_plan_world_destroy(&wb);
  }
  mt_layout_free(&lay);
}

int main(void) {
  mt_cost_profile h100;
  mt_err e = {0};
  if (mt_cost_profile_load(&h100, "h100-sxm", &e) != 0) {
    MT_FAIL("profile: %s", e.msg);
    return mt_check_summary("test_plan_scaled");
  }
  mt_price price;
  mt_cost_price(&h100, &price);
  static const struct {
    int moe, scaled;
    const char *layout;
  } cases[] = {
      {0, 1, "train.global_batch=40"},
      {0, 1, "train.global_batch=80 parallel.pp=2 parallel.zero=0"},
      {0, 1, "train.global_batch=162 parallel.pp=2 parallel.dp=2 parallel.zero=1 "
             "train.precision=bf16"},
      {0, 1, "train.global_batch=72 parallel.pp=2 parallel.schedule=interleaved "
             "parallel.virtual_stages=2 parallel.zero=0"},
      {0, 1, "train.global_batch=140 parallel.pp=2 parallel.dp=2 parallel.schedule=zb-h1 "
             "parallel.zero=2"},
      {0, 1, "train.global_batch=138 parallel.pp=2 parallel.dp=2 parallel.schedule=zb-v "
             "parallel.virtual_stages=2 parallel.zero=3 train.recompute=true"},
      {0, 1, "train.global_batch=132 parallel.pp=4 parallel.zero=0 parallel.tp=2 "
             "parallel.sp=true"},
      {0, 1, "train.global_batch=70 parallel.pp=2 parallel.pp_token_slices=2"},
      {0, 1, "train.global_batch=84 parallel.pp=4 parallel.schedule=interleaved "
             "parallel.virtual_stages=2 parallel.pp_token_slices=2 parallel.zero=1"},
      {0, 1, "train.global_batch=95 parallel.pp=4 parallel.zero=0"},
      {0, 0, "train.global_batch=80 parallel.pp=2 parallel.schedule=gpipe"},
      {0, 0, "train.global_batch=80 parallel.pp=2 parallel.schedule=breadth-first "
             "parallel.virtual_stages=2"},
      {1, 1, "train.global_batch=144 parallel.pp=2 parallel.dp=2 parallel.ep=2 "
             "parallel.zero=3"},
      {1, 1, "train.global_batch=68 parallel.pp=2 parallel.ep=1 parallel.zero=0 "
             "train.recompute=true parallel.schedule=zb-h1"},
  };
  for (int i = 0; i < N_OF(cases); i++) {
    mt_config cfg;
    const char **model = cases[i].moe ? g_moe : g_gpt;
    const int n = cases[i].moe ? N_OF(g_moe) : N_OF(g_gpt);
    char layout[400];
    snprintf(layout, sizeof layout, "train.micro_batch=1 %s", cases[i].layout);
    if (plan_config_load(&cfg, model, n, layout, &e) != 0) {
      MT_FAIL("%s: %s", cases[i].layout, e.msg);
      continue;
    }
    compare(&cfg, &price, cases[i].layout, cases[i].scaled);
  }
  printf("largest relative difference, whole step against the shorter steps: %.3g\n", worst);
  return mt_check_summary("test_plan_scaled");
}
