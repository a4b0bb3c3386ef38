/* test_plan_moe: the planner prices MoE layouts fast and as before.
 * - A routing reused (mt_ep_route: under the null backend every
 *   micro-batch of every MoE block of a plan is routed alike, so the plan
 *   routes once and replays the counts) gives the very prices of routing
 *   every time (MT_TEST_NO_ROUTING_REUSE): layouts of a SwiGLU and a GELU
 *   MoE over ep, tp with and without sp, cp, pipelines (1F1B, interleaved,
 *   ZB-V), recompute, ZeRO 0-3, bf16, capacity dropping, least-loaded
 *   expert placement, shared experts and dense blocks between MoE blocks:
 *   every figure of mt_cost equal bit for bit.
 * - The search's lower bounds (step time with the routed experts' matmuls
 *   and elementwise work, memory with their activations and the experts'
 *   state over edp) never exceed the exact price: every layout of those
 *   models that may fit on 4 ranks is priced and none is priced above a
 *   bound (tests/plan/search_bounds.sh: the SwiGLU one in bf16); and
 *   the step-time bound is worth having (the pruned search prices fewer
 *   layouts and ranks the same ten).
 * - A per-node expert dispatch (ep_dispatch) sends the share of the network
 *   bytes a count of the routings gives, and saves nothing inside a node. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

#include "../check.h"
#include "plan_config.h"

/* the SwiGLU MoE (GPT-OSS-like, small) and a GELU one with a shared expert
 * and MoE every second block */
static const char *g_llama[] = {"model.preset=custom", "model.arch=llama", "model.n_layer=4",
                                "model.n_embd=128", "model.n_head=4", "model.n_kv_head=2",
                                "model.seq_len=2048", "model.vocab_size=512",
                                "model.moe_experts=16", "model.moe_topk=4", "model.moe_ffn=64",
                                "train.global_batch=16"};
static const char *g_gelu[] = {"model.preset=custom", "model.n_layer=4", "model.n_embd=64",
                               "model.n_head=4", "model.seq_len=2048", "model.vocab_size=256",
                               "model.moe_experts=8", "model.moe_topk=2", "model.moe_every=2",
                               "model.moe_shared=1", "train.global_batch=16"};

static void reuse_prices(const mt_cost_profile *p) {
  static const char *layouts[] = {
      "parallel.dp=8 parallel.ep=8 train.micro_batch=2",
      "parallel.dp=8 parallel.ep=4 train.micro_batch=1 train.recompute=true parallel.zero=1",
      "parallel.dp=4 parallel.tp=2 parallel.ep=2 train.micro_batch=2",
      "parallel.dp=4 parallel.tp=2 parallel.sp=true parallel.ep=8 parallel.zero=3",
      "parallel.dp=2 parallel.cp=2 parallel.ep=4 parallel.zero=2",
      "parallel.dp=4 parallel.pp=2 parallel.ep=4 train.micro_batch=1",
      "parallel.dp=2 parallel.pp=2 parallel.ep=2 parallel.schedule=interleaved "
      "parallel.virtual_stages=2 train.micro_batch=1 train.precision=bf16",
      "parallel.dp=4 parallel.pp=2 parallel.ep=2 parallel.schedule=zb-v parallel.virtual_stages=2 "
      "train.micro_batch=1 train.recompute=true",
      "parallel.dp=8 parallel.ep=4 train.micro_batch=1 model.moe_capacity=1.25",
      "parallel.dp=8 parallel.ep=4 train.micro_batch=1 parallel.ep_balance=least-loaded",
  };
  const struct {
    const char **model;
    int n;
    const char *name;
  } models[] = {{g_llama, N_OF(g_llama), "swiglu"}, {g_gelu, N_OF(g_gelu), "gelu"}};
  for (int mi = 0; mi < 2; mi++)
    for (int li = 0; li < N_OF(layouts); li++) {
      mt_config cfg;
      mt_err e = {0};
      char layout[400]; /* (shorter sequences: the test runs under the sanitizers too) */
      snprintf(layout, sizeof layout, "model.seq_len=512 %s", layouts[li]);
      if (plan_config_load(&cfg, models[mi].model, models[mi].n, layout, &e) != 0) {
        MT_FAIL("%s, %s: %s", models[mi].name, layouts[li], e.msg);
        continue;
      }
      mt_cost with, without;
      unsetenv("MT_TEST_NO_ROUTING_REUSE");
      int rc = mt_cost_estimate_dt(&cfg, p, NULL, &with, &e);
      setenv("MT_TEST_NO_ROUTING_REUSE", "1", 1);
      int rc2 = mt_cost_estimate_dt(&cfg, p, NULL, &without, &e);
      unsetenv("MT_TEST_NO_ROUTING_REUSE");
      if (rc != 0 || rc2 != 0) {
        MT_FAIL("%s, %s: not priced: %s", models[mi].name, layouts[li], e.msg);
        continue;
      }
      MT_CHECK(memcmp(&with, &without, sizeof with) == 0 && with.ep_s == without.ep_s,
               "%s, %s: routing reused prices %.17g s (ep %.17g s), routing every time %.17g s "
               "(ep %.17g s)",
               models[mi].name, layouts[li], with.step_s, with.ep_s, without.step_s,
               without.ep_s);
      MT_CHECK(with.step_s > 0 && (cfg.ep == 1 || with.ep_s > 0), "%s, %s: priced %g s, ep %g s",
               models[mi].name, layouts[li], with.step_s, with.ep_s);
    }
}

/* ep_dispatch = per-node (DeepEP's): the share of a flat dispatch's
 * network bytes against every choice of a token's experts counted by hand
 * (8 experts on 4 nodes, top-2: 4 of the 28 pairs on one node, 52 / 28
 * nodes a token, 13/14 of 2 copies), none saved inside one node or at
 * top-1; a layout whose ep spans 2 nodes pays less for its all-to-alls by
 * at most that share (the calls' latencies stay), one inside a node the
 * same */
static void ep_per_node(const mt_cost_profile *h100) {
  MT_CHECK(mt_cost_ep_node_share(8, 2, 4) - 13.0 / 14 <= 1e-12 &&
               13.0 / 14 - mt_cost_ep_node_share(8, 2, 4) <= 1e-12,
           "8 experts on 4 nodes, top-2: share %.15g, counted 13/14",
           mt_cost_ep_node_share(8, 2, 4));
  MT_CHECK(mt_cost_ep_node_share(256, 8, 1) == 1.0 && mt_cost_ep_node_share(64, 1, 8) == 1.0,
           "one node or top-1 saves nothing: %g %g", mt_cost_ep_node_share(256, 8, 1),
           mt_cost_ep_node_share(64, 1, 8));
  const double ds = mt_cost_ep_node_share(256, 8, 8);
  MT_CHECK(ds > 0.6 && ds < 0.7, "DeepSeek-V3's routing over 8 nodes: share %g", ds);
  const char *layouts[] = {"parallel.dp=16 parallel.ep=16 train.micro_batch=1 train.global_batch=32",
                           "parallel.dp=8 parallel.ep=8 train.micro_batch=2"};
  for (int li = 0; li < 2; li++) {
    mt_config cfg;
    mt_err e = {0};
    if (plan_config_load(&cfg, g_llama, N_OF(g_llama), layouts[li], &e) != 0) {
      MT_FAIL("%s: %s", layouts[li], e.msg);
      continue;
    }
    mt_cost_profile node = *h100;
    node.ep_per_node = 1;
    mt_cost flat, per;
    if (mt_cost_estimate_dt(&cfg, h100, NULL, &flat, &e) != 0 ||
        mt_cost_estimate_dt(&cfg, &node, NULL, &per, &e) != 0) {
      MT_FAIL("%s: not priced: %s", layouts[li], e.msg);
      continue;
    }
    const double share = mt_cost_ep_node_share(16, 4, cfg.ep / 8 > 1 ? cfg.ep / 8 : 1);
    if (li == 0)
      MT_CHECK(per.ep_s < flat.ep_s && per.ep_s >= share * flat.ep_s,
               "ep over 2 nodes: per-node %.9g s, flat %.9g s, share %g", per.ep_s, flat.ep_s,
               share);
    else
      MT_CHECK(per.ep_s == flat.ep_s && flat.ep_s > 0,
               "ep inside a node: per-node %.9g s, flat %.9g s", per.ep_s, flat.ep_s);
  }
}

/* every layout that may fit on `ranks` priced: no bound above its price;
 * then the pruned search: fewer priced, the same ten */
static void bounds(const mt_cost_profile *p, const char **model, int n, const char *extra,
                   int ranks, const char *name) {
  mt_config cfg;
  mt_err e = {0};
  if (plan_config_load(&cfg, model, n, extra, &e) != 0) {
    MT_FAIL("%s: %s", name, e.msg);
    return;
  }
  mt_search all, top;
  mt_search_opts o = {.world = ranks, .keep = 0, .dt = NULL};
  MT_CHECK(mt_search_run(&cfg, p, &o, &all, &e) == 0, "%s: %s", name, e.msg);
  o.keep = 10;
  MT_CHECK(mt_search_run(&cfg, p, &o, &top, &e) == 0, "%s: %s", name, e.msg);
  printf("%s on %d ranks: %d layouts, %d priced (%d fit), %d priced above a bound; pruned: %d "
         "priced, %d left by the step-time bound\n",
         name, ranks, all.tried, all.valid, all.fitting, all.bounds_over, top.valid,
         top.pruned_time);
  MT_CHECK(all.valid > 50 && all.bounds_over == 0,
           "%s: %d of %d layouts priced above a lower bound", name, all.bounds_over, all.valid);
  MT_CHECK(top.bounds_over == 0 && top.pruned_time > 0 && top.valid < all.valid,
           "%s: the step-time bound left %d layouts unpriced (%d priced of %d)", name,
           top.pruned_time, top.valid, all.valid);
  int same = top.n >= 10 && all.n >= 10;
  for (int i = 0; i < 10 && same; i++)
    same = memcmp(&top.r[i], &all.r[i], sizeof top.r[i]) == 0;
  MT_CHECK(same, "%s: the ten fastest differ with and without the step-time pruning", name);
  mt_search_free(&all);
  mt_search_free(&top);
}

int main(void) {
  mt_cost_profile test, h100;
  mt_err e = {0};
  if (mt_cost_profile_load(&test, "tests/plan/cost-test.ini", &e) != 0 ||
      mt_cost_profile_load(&h100, "h100-sxm", &e) != 0) {
    MT_FAIL("profiles: %s", e.msg);
    return mt_check_summary("test_plan_moe");
  }
  reuse_prices(&h100);
  ep_per_node(&h100);
  bounds(&h100, g_llama, N_OF(g_llama), "", 4, "swiglu MoE, h100-sxm");
  bounds(&test, g_gelu, N_OF(g_gelu), "", 4, "gelu MoE every 2nd block, cost-test");
  return mt_check_summary("test_plan_moe");
}
