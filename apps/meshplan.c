/* meshplan: plan a scaling campaign before spending the allocation.
 *
 *   meshplan CONFIG.ini [--set k=v ...] --hw PROFILE --nodes N | --ranks N [--top K]
 *            [--all] [--stack NAME] [--compute-efficiency X] [--dtype CATEGORY=BYTES ...]
 *            [--json FILE]
 *            [--emit-sweep FILE.ini [--system NAME]]
 *   meshplan calibrate --gemm G.jsonl --coll C.jsonl --stream S.jsonl --name NAME
 *            [--attn A.jsonl] [--devices-per-node N] [--mem-gib X] [--peak-gflops X] [--overlap X] --out FILE
 *
 * Enumerates the layouts of the model and batch on N nodes, prices each with
 * the cost model (lib/plan/cost.c: memory and bytes from meshtrain --plan's
 * count of the real code, times from the profile) and prints them ranked; the sweep file runs
 * as is with `slurm/meshslurm.py campaign`. No MPI. Exit 2 with one line on
 * bad input (including a model that fits no layout, and --only's layout
 * when it does not fit: its figures still go to stdout). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__ /* (features.h, through stdio.h) */
#include <malloc.h>
#endif

#include "plan/plan.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: meshplan CONFIG.ini [--set section.key=value ...] --hw PROFILE\n"
          "                --nodes N | --ranks N [--top K] [--all] [--dtype CATEGORY=BYTES ...]\n"
          "                [--stack NAME] [--attention block|materialized]\n"
          "                [--collectives hierarchical|flat] [--compute-efficiency X]\n"
          "                [--ep-dispatch flat|per-node]\n"
          "                [--json FILE] [--emit-sweep FILE.ini [--system NAME]]\n"
          "       meshplan CONFIG.ini [--set ...] --hw PROFILE --only [--stack NAME] [--dtype ...]\n"
          "       meshplan calibrate --gemm G.jsonl --coll C.jsonl --stream S.jsonl --name NAME\n"
          "                [--attn A.jsonl] [--devices-per-node N] [--mem-gib X]\n"
          "                [--peak-gflops X] [--overlap X] --out FILE.ini\n\n"
          "Ranks every layout (tp inside a node, pp, dp, ZeRO, micro-batch, schedule,\n"
          "recompute, sp) of the configured model and global batch on N nodes by predicted\n"
          "tokens/s: memory per device by category (as meshtrain --plan), step time =\n"
          "compute + tp + pipeline bubble and messages + exposed dp + optimizer. PROFILE is\n"
          "inputs/hw/<name>.ini or a path, with a [cost] section (calibrate writes one\n"
          "from meshbench gemm, allreduce and stream JSON lines). --only prices the\n"
          "configured layout alone (its mesh as set, no --nodes) as a JSON line, and exits\n"
          "2 with one line saying it does not fit where it does not. Layouts are priced in\n"
          "the order of a lower bound until the top K (at least 10) are certain; --all\n"
          "(and --json) prices every layout that may fit. Memory counts the run's dtypes\n"
          "plus plan.headroom; --dtype overrides a category's bytes per element (weights,\n"
          "master, grads, moments, acts, grad_reduce, msg), e.g. grad_reduce=2 for a stack\n"
          "that reduces gradients in bf16. --attention materialized prices another stack's\n"
          "attention (batched GEMMs over the T x T scores, softmax and dropout through memory)\n"
          "instead of meshtrain's block attention. --collectives flat prices every collective\n"
          "across nodes as one flat ring on each rank's network link (default hierarchical:\n"
          "the ring's part inside each node, 1/k of it on the network, k ranks a node).\n"
          "--ep-dispatch per-node prices another stack's expert dispatch (DeepEP's): a token\n"
          "crosses the network once to each node holding its experts, not once an expert.\n"
          "--compute-efficiency X (0 < X <= 1.5) scales the profile's matmul and attention\n"
          "rates: how far a software stack's kernels sit from them (1: meshtrain's own).\n"
          "--stack NAME prices a published software stack: a preset of --attention,\n"
          "--collectives, --dtype and --compute-efficiency values (default meshtrain: the\n"
          "profile's and the configuration's own, efficiency 1); one of those flags given\n"
          "beside --stack overrides that value of the preset. The presets (docs/planner.md):\n");
  for (int i = 0; i < mt_plan_stack_count(); i++) {
    const mt_plan_stack *st = mt_plan_stack_at(i);
    fprintf(f, "  %-18s %s\n", st->name, st->stands_for);
    if (!st->attention && !st->collectives && !st->dtypes[0]) continue;
    fprintf(f, "  %-18s attention %s, collectives %s, compute efficiency %.3g\n  %-18s dtype", "",
            st->attention ? st->attention : "as the profile",
            st->collectives ? st->collectives : "as the profile", st->compute_efficiency, "");
    for (int k = 0; k < MT_PLAN_STACK_MAX_DTYPES && st->dtypes[k]; k++)
      fprintf(f, " %s", st->dtypes[k]);
    fputc('\n', f);
  }
}

static int calibrate(int argc, char **argv) {
  mt_calibration_input in = {.name = "calibrated", .gemm_json = NULL, .coll_json = NULL,
                            .stream_json = NULL, .attn_json = NULL, .devices_per_node = 0, .mem_gib = 16.0,
                            .peak_gflops = 0.0, .overlap = 0.0};
  const char *out = NULL;
  mt_err e = {0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      mt_err_set(&e, "calibrate: %s needs a value", a);
      break;
    }
    char *end = NULL;
    double x = strtod(v, &end);
    int is_num = end != v && !*end && x >= 0;
    if (!strcmp(a, "--gemm")) in.gemm_json = v;
    else if (!strcmp(a, "--coll")) in.coll_json = v;
    else if (!strcmp(a, "--stream")) in.stream_json = v;
    else if (!strcmp(a, "--attn")) in.attn_json = v;
    else if (!strcmp(a, "--name")) in.name = v;
    else if (!strcmp(a, "--out")) out = v;
    else if (!strcmp(a, "--devices-per-node") && is_num && x >= 1) in.devices_per_node = (int)x;
    else if (!strcmp(a, "--mem-gib") && is_num && x > 0) in.mem_gib = x;
    else if (!strcmp(a, "--peak-gflops") && is_num) in.peak_gflops = x;
    else if (!strcmp(a, "--overlap") && is_num && x <= 1) in.overlap = x;
    else {
      mt_err_set(&e, "calibrate: bad option or value '%s %s' (see --help)", a, v);
      break;
    }
    i++;
  }
  if (!e.failed && (!in.gemm_json || !in.coll_json || !in.stream_json || !out))
    mt_err_set(&e, "calibrate needs --gemm, --coll, --stream and --out");
  mt_cost_profile p;
  if (!e.failed && mt_cost_calibrate(&in, &p, &e) == 0) {
    FILE *f = fopen(out, "w");
    if (!f) {
      mt_err_set(&e, "--out %s: cannot write", out);
    } else {
      /* the files' names only: a line of the profile holds at most 198
       * characters (inih) */
      const char *g = strrchr(in.gemm_json, '/'), *c = strrchr(in.coll_json, '/'),
                 *st = strrchr(in.stream_json, '/');
      char desc[160];
      snprintf(desc, sizeof desc, "calibrated by meshplan from %.40s, %.40s, %.40s",
               g ? g + 1 : in.gemm_json, c ? c + 1 : in.coll_json, st ? st + 1 : in.stream_json);
      mt_cost_profile_write(&p, desc, f);
      fclose(f);
      const mt_price_curve *mm = &p.gemm[mt_price_width(p.act_bytes)];
      printf("meshplan: wrote %s: %d matmul sizes (%.1f-%.1f GFLOP/s), memory %.2f GB/s, "
             "inside a node %.2f GB/s + %.1f us, across %.2f GB/s + %.1f us, %d devices per node",
             out, mm->n, mm->gflops[0], mm->gflops[mm->n - 1], p.elementwise_gbs,
             p.intra_gbs, p.intra_us, p.inter_gbs, p.inter_us, p.devices_per_node);
      const int aw = mt_price_width(p.act_bytes);
      if (p.attn_gflops[aw] > 0)
        printf(", attention %.1f GFLOP/s on %d:%d tiles", p.attn_gflops[aw], p.attn_br, p.attn_bc);
      if (p.attn_given == 3u) printf(", bf16 attention %.1f GFLOP/s", p.attn_gflops[0]);
      if (p.gemm_given == 3u)
        printf(", bf16 matmuls %.1f-%.1f GFLOP/s", p.gemm[0].gflops[0],
               p.gemm[0].gflops[p.gemm[0].n - 1]);
      putchar('\n');
    }
  }
  if (e.failed) fprintf(stderr, "meshplan: error: %s\n", e.msg);
  return e.failed ? MT_EXIT_BADINPUT : MT_EXIT_OK;
}

/* how the plan sized a MoE model's expert-parallel buffers (a static line) */
static const char *moe_buffers_note(const mt_config *cfg, double capacity) {
  static char line[256];
  if (capacity > 0)
    snprintf(line, sizeof line, "MoE buffers sized by the capacity (model.moe_capacity = %g)",
             capacity);
  else if (cfg->moe_buffer_factor > 0)
    snprintf(line, sizeof line, "MoE buffers sized at %g x a balanced routing's rows "
             "(parallel.moe_buffer_factor; a run grows them where a step's routing brings more)",
             cfg->moe_buffer_factor);
  else
    snprintf(line, sizeof line, "MoE buffers sized for the worst routing "
             "(parallel.moe_buffer_factor = 0)");
  return line;
}

static void print_table(const mt_search *s, const mt_cost_profile *p, int nodes, int top) {
  printf("# %d layouts enumerated: %d certain not to fit (memory bound), %d priced (%d fit in "
         "%.1f GiB per device less the headroom), %d left unpriced by the step-time bound "
         "(%.2f s); %d priced above a lower bound\n",
         s->tried, s->pruned_mem, s->valid, s->fitting, p->mem_bytes / 1073741824.0,
         s->pruned_time, s->seconds, s->bounds_over);
  printf("%4s %3s %3s %3s %3s %4s %4s %3s %14s %5s %2s %2s %8s | %9s %11s %6s | %5s %5s %5s %5s "
         "%5s %5s %5s %5s\n",
         "rank", "tp", "pp", "cp", "ep", "dp", "zero", "mb", "schedule", "split", "sp", "rc",
         "mem GiB", "step s", "tokens/s", "MFU", "comp", "tp", "cp", "ep", "bubl", "p2p", "dp",
         "opt");
  if (s->n > 0 && s->r[0].cost.docs.priced)
    printf("documents (plan.doc_lengths): attention at %.3f of packed windows' work; in the "
           "first layout the dp ranks' work %.3f x their mean (as data.balance hands out windows)\n",
           s->r[0].cost.docs.density, s->r[0].cost.docs.imbalance);
  if (s->n > 0 && s->r[0].cost.docs.varlen)
    printf("varlen (data.seq_policy): in the first layout the dp x cp ranks' work %.3f x their "
           "mean, rows %.3f x the windows, %.2f of the micro-batches with the cp exchange\n",
           s->r[0].cost.docs.imbalance, s->r[0].cost.docs.pad_factor,
           s->r[0].cost.docs.exchange_share);
  for (int i = 0; i < s->n && i < top; i++) {
    const mt_search_row *r = &s->r[i];
    const mt_cost *c = &r->cost;
    char sched[MT_CFG_STR_MAX + 16], split[32];
    snprintf(sched, sizeof sched, "%s", r->pp > 1 ? mt_pp_sched_name(r->schedule) : "-");
    if (r->virtual_stages > 1)
      snprintf(sched + strlen(sched), sizeof sched - strlen(sched), "/%d", r->virtual_stages);
    if (r->pp_slices > 1) /* token slices */
      snprintf(sched + strlen(sched), sizeof sched - strlen(sched), "+s%d", r->pp_slices);
    if (r->pp_first) snprintf(split, sizeof split, "%d..%d", r->pp_first, r->pp_last);
    else snprintf(split, sizeof split, "%s", r->pp > 1 ? "even" : "-");
    double st = c->step_s > 0 ? c->step_s : 1.0;
    printf("%4d %3d %3d %3d %3d %4d %4d %3d %14s %5s %2d %2d %8.2f%s| %9.4f %11.0f %5.1f%% | "
           "%4.0f%% %4.0f%% %4.0f%% %4.0f%% %4.0f%% %4.0f%% %4.0f%% %4.0f%%\n",
           i + 1, r->tp, r->pp, r->cp, r->ep, r->dp, r->zero, r->micro_batch, sched, split, r->sp,
           r->recompute, c->mem_bytes / 1073741824.0, c->fits ? " " : "!", c->step_s,
           c->tokens_per_s, 100 * c->mfu, 100 * c->compute_s / st, 100 * c->tp_s / st,
           100 * c->cp_s / st, 100 * c->ep_s / st, 100 * c->pp_bubble_s / st,
           100 * c->pp_p2p_s / st, 100 * c->dp_exposed_s / st, 100 * c->optim_s / st);
  }
  (void)nodes;
}

/* one priced layout as a JSON object (no newline) */
static void row_json(FILE *f, const mt_search_row *r) {
  const mt_cost *c = &r->cost;
  fprintf(f,
          "{\"tp\": %d, \"pp\": %d, \"dp\": %d, \"cp\": %d, \"ep\": %d, \"zero\": %d, "
          "\"micro_batch\": %d, "
          "\"sp\": %d, \"recompute\": %d, \"schedule\": \"%s\", \"virtual_stages\": %d, "
          "\"pp_first_layers\": %d, \"pp_last_layers\": %d, \"pp_token_slices\": %d, "
          "\"headroom_bytes\": %.17g, "
          "\"fits\": %d, \"step_s\": %.17g, \"tokens_per_s\": %.9g, \"mfu\": %.6g, "
          "\"compute_s\": %.9g, \"tp_s\": %.9g, \"cp_s\": %.9g, \"ep_s\": %.9g, "
          "\"pp_bubble_s\": %.9g, \"pp_p2p_s\": %.9g, "
          "\"dp_exposed_s\": %.9g, \"optim_s\": %.9g, \"model_flops\": %.17g, "
          "\"mem_bytes\": %.17g, \"mem\": {",
          r->tp, r->pp, r->dp, r->cp, r->ep, r->zero, r->micro_batch, r->sp, r->recompute,
          mt_pp_sched_name(r->schedule), r->virtual_stages, r->pp_first, r->pp_last,
          r->pp_slices > 1 ? r->pp_slices : 1, c->headroom,
          c->fits, c->step_s, c->tokens_per_s, c->mfu, c->compute_s, c->tp_s, c->cp_s, c->ep_s,
          c->pp_bubble_s, c->pp_p2p_s, c->dp_exposed_s, c->optim_s, c->model_flops, c->mem_bytes);
  for (int k = 0; k < MT_MEM_NCAT; k++)
    fprintf(f, "%s\"%s\": %.17g", k ? ", " : "", mt_mem_cat_name((mt_mem_cat)k), c->mem[k]);
  fprintf(f, "}, \"step_bytes\": {\"dp\": %.17g, \"tp\": %.17g, \"pp\": %.17g}", c->dp_bytes,
          c->tp_bytes, c->pp_bytes);
  /* documents (plan.doc_lengths): attention's share, the dp ranks' imbalance */
  if (c->docs.priced)
    fprintf(f, ", \"doc_density\": %.6g, \"doc_imbalance\": %.6g", c->docs.density,
            c->docs.imbalance);
  if (c->docs.varlen)
    fprintf(f, ", \"varlen_pad_factor\": %.6g, \"varlen_exchange_share\": %.6g",
            c->docs.pad_factor, c->docs.exchange_share);
  /* optim.name = muon: optim_s's parts, the busiest rank's FLOPs, the exchange's bytes */
  if (c->optim_flops > 0)
    fprintf(f, ", \"optim_ns_s\": %.9g, \"optim_exchange_s\": %.9g, \"optim_momentum_s\": %.9g, "
               "\"optim_flops\": %.17g, \"muon_bytes\": {\"dp\": %.17g, \"tp\": %.17g}",
            c->optim_ns_s, c->optim_exchange_s, c->optim_momentum_s, c->optim_flops,
            c->muon_dp_bytes, c->muon_tp_bytes);
  /* per pipeline stage: dp collectives, hidden behind backward and the
   * cool-down, and exposed after the schedule */
  const char *keys[3] = {"dp_stage_s", "dp_stage_hidden_s", "dp_stage_exposed_s"};
  for (int k = 0; k < 3; k++) {
    fprintf(f, ", \"%s\": [", keys[k]);
    for (int st = 0; st < r->pp && st < 64; st++) {
      double tot = c->stage_dp_s[st], x = c->stage_dp_exposed_s[st];
      fprintf(f, "%s%.9g", st ? ", " : "", k == 0 ? tot : k == 1 ? (tot > x ? tot - x : 0.0) : x);
    }
    fputs("]", f);
  }
  fputs("}", f);
}

static int write_json(const mt_search *s, const char *path, mt_err *e) {
  FILE *f = fopen(path, "w");
  if (!f) {
    mt_err_set(e, "--json %s: cannot write", path);
    return -1;
  }
  fprintf(f, "[\n");
  for (int i = 0; i < s->n; i++) {
    fputs("  ", f);
    row_json(f, &s->r[i]);
    fputs(i + 1 < s->n ? ",\n" : "\n", f);
  }
  fprintf(f, "]\n");
  fclose(f);
  return 0;
}

/* the top k fitting layouts as a campaign sweep for slurm/meshslurm.py */
static int emit_sweep(const mt_search *s, const char *path, const char *config, const char *system,
                      int nodes, int tasks_per_node, int top, int n_over, char **over, mt_err *e) {
  FILE *f = fopen(path, "w");
  if (!f) {
    mt_err_set(e, "--emit-sweep %s: cannot write", path);
    return -1;
  }
  fprintf(f, "# The %d fastest layouts meshplan predicts on %d node(s); run it with\n"
             "#   python3 slurm/meshslurm.py campaign %s --account ACCOUNT\n[campaign]\n"
             "name = meshplan-%d-nodes\nsystem = %s\njob = train\nscaling = strong\nnodes = %d\n"
             "tasks_per_node = %d\nrepeats = 1\nsteps = 20\n",
          top, nodes, path, nodes, system, nodes, tasks_per_node);
  if (config) fprintf(f, "config = %s\n", config);
  fprintf(f, "layouts =");
  for (int i = 0, k = 0; i < s->n && k < top; i++) {
    if (!s->r[i].cost.fits) continue;
    char text[256];
    mt_search_layout_text(&s->r[i], text, sizeof text);
    fprintf(f, "%s %s", k ? ";" : "", text);
    k++;
  }
  fprintf(f, "\n\n[set]\n");
  for (int i = 0; i < n_over; i++) {
    const char *eq = strchr(over[i], '=');
    if (eq) fprintf(f, "%.*s = %s\n", (int)(eq - over[i]), over[i], eq + 1);
  }
  fclose(f);
  return 0;
}

int main(int argc, char **argv) {
  mt_log_init(0);
  /* a search prices thousands of layouts, each recording and replaying its
   * step in buffers of tens of MB: freed, glibc gives those back to the
   * kernel and takes them again at the next layout, page by page (half of
   * a 16,384-GPU search's time went to page faults); kept, they are reused */
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  if (argc >= 2 && !strcmp(argv[1], "calibrate")) return calibrate(argc - 1, argv + 1);
  const char *ini = NULL, *hw = NULL, *json = NULL, *sweep = NULL, *system = "leonardo-booster";
  int nodes = 0, ranks = 0, top = 10, n_over = 0, only = 0, all = 0, n_dt = 0;
  const char *attention = NULL, *collectives = NULL, *ep_dispatch = NULL, *stack_name = "meshtrain";
  double efficiency = 0.0; /* --compute-efficiency; 0: the preset's */
  char **over = mt_calloc((size_t)argc + 1, sizeof(char *));
  const char **dts = mt_calloc((size_t)argc + 1, sizeof(char *));
  mt_err e = {0};
  for (int i = 1; i < argc && !e.failed; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      free(over);
      return 0;
    } else if (!strcmp(a, "--only")) {
      only = 1;
      continue;
    } else if (!strcmp(a, "--all")) {
      all = 1;
      continue;
    } else if (a[0] != '-') {
      if (ini) mt_err_set(&e, "more than one config file ('%s' and '%s')", ini, a);
      ini = a;
      continue;
    }
    if (!v) {
      mt_err_set(&e, "%s needs a value (see --help)", a);
      break;
    }
    char *end = NULL;
    long x = strtol(v, &end, 10);
    int is_int = end != v && !*end && x >= 1 && x <= 1000000;
    if (!strcmp(a, "--set")) over[n_over++] = argv[i + 1];
    else if (!strcmp(a, "--hw")) hw = v;
    else if (!strcmp(a, "--json")) json = v;
    else if (!strcmp(a, "--emit-sweep")) sweep = v;
    else if (!strcmp(a, "--system")) system = v;
    else if (!strcmp(a, "--dtype")) dts[n_dt++] = v;
    else if (!strcmp(a, "--stack")) stack_name = v;
    else if (!strcmp(a, "--compute-efficiency")) {
      char *xend = NULL;
      efficiency = strtod(v, &xend);
      /* a rate above 1.5 x the profile's measured one, or none, is a typo */
      if (xend == v || *xend || !(efficiency > 0 && efficiency <= 1.5))
        mt_err_set(&e, "--compute-efficiency '%s' is not a number in (0, 1.5]: a factor on the "
                       "profile's matmul and attention rates (1: meshtrain's own)", v);
    }
    else if (!strcmp(a, "--attention") && (!strcmp(v, "block") || !strcmp(v, "materialized")))
      attention = v;
    else if (!strcmp(a, "--collectives") && (!strcmp(v, "hierarchical") || !strcmp(v, "flat")))
      collectives = v;
    else if (!strcmp(a, "--ep-dispatch") && (!strcmp(v, "flat") || !strcmp(v, "per-node")))
      ep_dispatch = v;
    else if (!strcmp(a, "--nodes") && is_int) nodes = (int)x;
    else if (!strcmp(a, "--ranks") && is_int) ranks = (int)x;
    else if (!strcmp(a, "--top") && is_int) top = (int)x;
    else mt_err_set(&e, "bad option or value '%s %s' (see --help)", a, v);
    i++;
  }
  if (!e.failed && (!hw || (nodes < 1 && ranks < 1 && !only)))
    mt_err_set(&e, "meshplan needs --hw PROFILE and --nodes N or --ranks N (or --only)");
  else if (!e.failed && nodes > 0 && ranks > 0)
    mt_err_set(&e, "give --nodes or --ranks, not both");
  mt_config cfg;
  mt_cost_profile p;
  mt_cost_dtypes dt;
  mt_search s;
  memset(&s, 0, sizeof s);
  const mt_plan_stack *stack = e.failed ? NULL : mt_plan_stack_find(stack_name, &e);
  if (!e.failed) mt_config_load(&cfg, ini, n_over, over, &e);
  if (!e.failed) mt_cost_profile_load(&p, hw, &e);
  if (!e.failed) mt_cost_dtypes_default(&cfg, &p, &dt);
  /* the preset first, then the flags given: an explicit flag wins */
  if (!e.failed) mt_plan_stack_apply(stack, &p, &dt, &e);
  if (!e.failed && attention) p.attn_materialized = attention[0] == 'm';
  if (!e.failed && collectives) p.coll_flat = collectives[0] == 'f';
  if (!e.failed && ep_dispatch) p.ep_per_node = ep_dispatch[0] == 'p';
  if (!e.failed && efficiency > 0) p.compute_efficiency = efficiency;
  for (int i = 0; i < n_dt && !e.failed; i++) mt_cost_dtypes_set(&dt, dts[i], &e);
  if (!e.failed && only) { /* the configured layout alone */
    mt_search_row r;
    memset(&r, 0, sizeof r);
    if (mt_cost_estimate_dt(&cfg, &p, &dt, &r.cost, &e) == 0) {
      r.tp = cfg.tp, r.pp = cfg.pp, r.dp = cfg.dp, r.cp = cfg.cp, r.zero = cfg.zero;
      r.ep = cfg.ep, r.micro_batch = cfg.micro_batch, r.sp = cfg.sp, r.recompute = cfg.recompute;
      r.virtual_stages = cfg.virtual_stages;
      r.pp_first = cfg.pp_first_layers, r.pp_last = cfg.pp_last_layers;
      r.pp_slices = cfg.pp_token_slices;
      r.schedule = cfg.pp_schedule;
      row_json(stdout, &r);
      fputc('\n', stdout);
      if (!r.cost.fits) { /* the figures stay on stdout; the verdict is the exit code */
        const double GiB = 1073741824.0;
        mt_err_set(&e, "the configured layout (tp=%d, pp=%d, cp=%d, dp=%d) does not fit: it needs "
                       "%.2f GiB per device and %.2f GiB of headroom (plan.headroom), more than the "
                       "%.2f GiB of a device of %s%s%s",
                   r.tp, r.pp, r.cp, r.dp, r.cost.mem_bytes / GiB, r.cost.headroom / GiB,
                   p.mem_bytes / GiB, p.name, cfg.moe_experts > 0 ? "; " : "",
                   cfg.moe_experts > 0 ? moe_buffers_note(&cfg, cfg.moe_capacity) : "");
      }
    }
  } else if (!e.failed) {
    /* ranked exactly: the top K (at least 10) unless every layout is asked for */
    mt_search_opts o = {.world = ranks > 0 ? ranks : nodes * p.devices_per_node,
                        .keep = all || json ? 0 : (top > 10 ? top : 10), .dt = &dt,
                        .stack = stack};
    if (mt_search_run(&cfg, &p, &o, &s, &e) == 0) {
      mt_config neutral = cfg;
      neutral.tp = neutral.pp = neutral.dp = neutral.cp = neutral.ep = neutral.etp = 1;
      neutral.sp = 0;
      mt_model_shape shape;
      mt_model_shape_from_config(&neutral, &shape, &e);
      char dtext[256];
      mt_cost_dtypes_text(&dt, dtext, sizeof dtext);
      printf("# meshplan: %s (%zu parameters, L=%d C=%d T=%d), global batch %d, on %d ranks "
             "(%d devices a node) of %s\n",
             mt_preset_name(cfg.model_preset), mt_model_num_params(&shape), shape.n_layer,
             shape.n_embd, shape.seq_len, cfg.global_batch, o.world, p.devices_per_node, p.name);
      /* (a MoE's buffers and the layouts the stack leaves out on the same
       * line: scripts read the summary as line 3) */
      char limits[160];
      mt_plan_stack_limits(stack, limits, sizeof limits);
      printf("# stack %s (attention %s, collectives %s%s, compute efficiency %.4g); bytes per "
             "element: %s; headroom %.2f GiB per device%s%s%s%s\n",
             stack->name, p.attn_materialized ? "materialized" : "block",
             p.coll_flat ? "flat" : "hierarchical",
             p.ep_per_node ? ", ep dispatch per-node" : "",
             p.compute_efficiency > 0 ? p.compute_efficiency : 1.0, dtext,
             mt_cost_headroom(&cfg, &p) / 1073741824.0, shape.moe_experts > 0 ? "; " : "",
             shape.moe_experts > 0 ? moe_buffers_note(&cfg, shape.moe_capacity) : "",
             limits[0] ? "; layouts the stack could run: " : "", limits);
      print_table(&s, &p, nodes, top);
      if (json) write_json(&s, json, &e);
      if (sweep && !e.failed)
        emit_sweep(&s, sweep, ini, system, nodes > 0 ? nodes : 1,
                   p.devices_per_node, top, n_over, over, &e);
    }
  }
  mt_search_free(&s);
  free(over);
  free(dts);
  if (e.failed) fprintf(stderr, "meshplan: error: %s\n", e.msg);
  return e.failed ? MT_EXIT_BADINPUT : MT_EXIT_OK;
}
