/* The layout of a run: what a configuration derives for a world size (model
 * shape, batch split, pipeline schedule and stage split, dtypes) and the
 * checks of what it derives; the checks of the configuration itself are
 * mt_config_check's (core/config_check.c), called from here. No data and no
 * MPI: meshtrain --check, --plan and setup all call it, so every rank fails
 * the same way before any collective. */
#include "plan/plan.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* validation                                                          */

/* parallel.pp_split "a,b,c" -> layers per stage; 0, or -1 with e set */
static int parse_pp_split(const char *text, int pp, int n_layer, int *split, mt_err *e) {
  int n = 0, sum = 0;
  const char *p = text;
  while (*p) {
    char *end;
    long x = strtol(p, &end, 10);
    if (end != p && x == 0 && n < pp) {
      mt_err_set(e, "parallel.pp_split = '%s': stage %d has no layers (give every stage at "
                    "least one, or lower parallel.pp)", text, n);
      return -1;
    }
    if (end == p || x < 1 || n == pp) {
      mt_err_set(e, "parallel.pp_split = '%s': expected %d comma-separated layer counts >= 1 "
                    "(one per stage)", text, pp);
      return -1;
    }
    split[n++] = (int)x;
    sum += (int)x;
    p = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') {
      mt_err_set(e, "parallel.pp_split = '%s': expected comma-separated integers", text);
      return -1;
    }
  }
  if (n != pp) {
    mt_err_set(e, "parallel.pp_split = '%s' gives %d stages, parallel.pp = %d", text, n, pp);
    return -1;
  }
  if (sum != n_layer) {
    mt_err_set(e, "parallel.pp_split = '%s' sums to %d layers, model.n_layer = %d", text, sum,
               n_layer);
    return -1;
  }
  return 0;
}

/* parallel.pp_first_layers / pp_last_layers -> layers per stage: the first
 * and last stages as given (0: not given), the other stages an equal share
 * of the rest (Megatron's --decoder-first/last-pipeline-num-layers); 0, or
 * -1 with e naming the keys to change */
static int first_last_split(const mt_config *cfg, int n_layer, int *split, mt_err *e) {
  const int pp = cfg->pp, F = cfg->pp_first_layers, L = cfg->pp_last_layers;
  if (pp < 2) {
    mt_err_set(e, "parallel.pp_first_layers / pp_last_layers need parallel.pp >= 2 (got %d)", pp);
    return -1;
  }
  int rest = n_layer - F - L, others = pp - (F > 0) - (L > 0);
  if (rest < 0 || (others == 0 && rest != 0)) {
    mt_err_set(e, "parallel.pp_first_layers = %d + parallel.pp_last_layers = %d %s model.n_layer "
                  "= %d over parallel.pp = %d stages (change them so the stages hold every "
                  "layer)", F, L, rest < 0 ? "exceed" : "leave layers of", n_layer, pp);
    return -1;
  }
  if (others > 0 && (rest < others || rest % others != 0)) {
    mt_err_set(e, "parallel.pp_first_layers = %d, parallel.pp_last_layers = %d leave %d of "
                  "model.n_layer = %d layers for the other %d stages: %s (change the two keys, "
                  "or give every stage in parallel.pp_split)", F, L, rest, n_layer, others,
               rest < others ? "a stage would be empty" : "they do not share them equally");
    return -1;
  }
  for (int s = 0; s < pp; s++) split[s] = others ? rest / others : 0;
  if (F > 0) split[0] = F;
  if (L > 0) split[pp - 1] = L;
  return 0;
}

/* An explicit split (pp_split or first/last) under interleaving: every
 * stage's layers must cut into virtual_stages equal chunks. */
static int check_split_chunks(const mt_config *cfg, int v, const int *split, mt_err *e) {
  for (int s = 0; s < cfg->pp; s++)
    if (split[s] % v != 0) {
      mt_err_set(e, "parallel.virtual_stages = %d does not divide the %d layers of pipeline "
                    "stage %d (set by parallel.%s): give each stage a multiple of %d layers",
                 v, split[s], s, cfg->pp_split[0] ? "pp_split" : "pp_first_layers/pp_last_layers",
                 v);
      return -1;
    }
  return 0;
}

void mt_layout_stage_layers(const mt_config *cfg, const mt_layout *lay, int vs, int *l0,
                           int *l1) {
  mt_registry_stage_layers(lay->shape.n_layer, cfg->pp, lay->chunks,
                           lay->has_split ? lay->split : NULL, lay->sched == MT_SCHED_ZBV, vs,
                           l0, l1);
}

/* Context parallelism: the sequence must split into the mode's chunks, the
 * heads over the ranks under Ulysses, and each rank's tokens over tp under
 * sequence parallelism. */
static int check_cp(const mt_config *cfg, const mt_model_shape *s, mt_err *e) {
  const mt_cp_mode mode = cfg->cp_mode;
  const int cp = cfg->cp, T = s->seq_len;
  if (cp == 1) return 0;
  if (mode == MT_CP_RING && T % (2 * cp) != 0)
    mt_err_set(e, "parallel.cp = %d with parallel.cp_mode = ring cuts each sequence into 2 x cp "
                  "= %d chunks, which does not divide model.seq_len = %d", cp, 2 * cp, T);
  else if (mode == MT_CP_ULYSSES && T % cp != 0)
    mt_err_set(e, "parallel.cp = %d does not divide model.seq_len = %d", cp, T);
  else if (mode == MT_CP_ULYSSES && (s->n_head / cfg->tp) % cp != 0)
    mt_err_set(e, "parallel.cp_mode = ulysses splits the attention heads over parallel.cp = %d "
                  "ranks: the %d heads of each tp rank (model.n_head = %d / parallel.tp = %d) "
                  "do not divide by it", cp, s->n_head / cfg->tp, s->n_head, cfg->tp);
  else if (cfg->sp && (T / cp) % cfg->tp != 0)
    mt_err_set(e, "parallel.sp = true: parallel.tp = %d does not divide the %d tokens of a "
                  "sequence on each cp rank (model.seq_len = %d / parallel.cp = %d)",
               cfg->tp, T / cp, T, cp);
  return e->failed ? -1 : 0;
}

/* The schedule shapes this process has validated (kind, pp, micro-batches,
 * v, token slices): a schedule is a function of them alone, and a search
 * validates the same few shapes for thousands of layouts (each a build
 * and a simulation over every micro-batch). The last 64 kept. */
enum { SEEN_SHAPES = 64 };
typedef struct {
  int kind, pp, m, v, k;
} sched_shape;
static _Thread_local sched_shape g_seen[SEEN_SHAPES];
static _Thread_local int g_n_seen, g_next_seen;

static int schedule_seen_valid(mt_pp_sched kind, int pp, int m, int v, int k) {
  for (int i = 0; i < g_n_seen; i++)
    if (g_seen[i].kind == (int)kind && g_seen[i].pp == pp && g_seen[i].m == m &&
        g_seen[i].v == v && g_seen[i].k == k)
      return 1;
  return 0;
}

static void schedule_valid(mt_pp_sched kind, int pp, int m, int v, int k) {
  g_seen[g_next_seen] = (sched_shape){(int)kind, pp, m, v, k};
  g_next_seen = (g_next_seen + 1) % SEEN_SHAPES;
  if (g_n_seen < SEEN_SHAPES) g_n_seen++;
}

/* Token slices (TeraPipe): slices of whole sequences of one rank, each a
 * pass of its own; what would see more than a slice is refused. */
static int check_slices(const mt_config *cfg, const mt_model_shape *s, mt_pp_sched kind,
                        mt_err *e) {
  const int k = cfg->pp_token_slices;
  if (k <= 1) return 0;
  const char *why = cfg->cp > 1 && cfg->cp_mode != MT_CP_ULYSSES
                        ? "ring context parallelism (parallel.cp > 1, cp_mode = ring)"
                    : cfg->cp > 1 && cfg->documents
                        ? "documents (data.documents = true) under context parallelism"
                    : cfg->seq_policy == MT_SEQ_VARLEN
                        ? "data.seq_policy = varlen (its micro-batches vary from step to step)"
                    : s->moe_experts > 0 ? "MoE blocks (model.moe_experts > 0: the routing "
                                           "losses would be a slice's)"
                                         : NULL;
  if (why) {
    mt_err_set(e, "parallel.pp_token_slices = %d does not take %s yet", k, why);
    return -1;
  }
  MT_TRY(e, mt_pp_slices_check(kind, k, s->seq_len / cfg->cp, e));
  if (cfg->sp && (s->seq_len / cfg->cp / k) % cfg->tp != 0) {
    mt_err_set(e, "parallel.sp = true: parallel.tp = %d does not divide the %d tokens of a "
                  "slice on a rank (model.seq_len = %d / parallel.cp = %d / "
                  "parallel.pp_token_slices = %d)",
               cfg->tp, s->seq_len / cfg->cp / k, s->seq_len, cfg->cp, k);
    return -1;
  }
  return 0;
}

int mt_layout_validate(const mt_config *cfg, int world_size, mt_layout *lay, mt_err *e) {
  memset(lay, 0, sizeof *lay);
  lay->sched = MT_SCHED_1F1B;
  MT_TRY(e, mt_model_shape_from_config(cfg, &lay->shape, e));
  /* every check across keys that the configuration alone decides */
  MT_TRY(e, mt_config_check(cfg, world_size, e));
  MT_TRY(e, check_cp(cfg, &lay->shape, e));
  const mt_model_shape *s = &lay->shape;
  if (cfg->balance == MT_BALANCE_FLOPS && !cfg->documents) {
    mt_err_set(e, "data.balance = flops needs data.documents = true: without documents every "
                  "window costs the same");
    return -1;
  }
  if (cfg->seq_policy == MT_SEQ_VARLEN) {
    const char *why = !cfg->documents ? "needs data.documents = true (its sequences are the "
                                        "documents)"
                      : cfg->balance == MT_BALANCE_FLOPS
                          ? "balances the work itself: leave data.balance = none"
                      : cfg->pp > 1 ? "runs a varying number of micro-batches per step, which "
                                      "a pipeline (parallel.pp > 1) does not take yet"
                      : s->moe_experts > 0 ? "pads its rows, and the MoE routing losses would "
                                             "count the padding (model.moe_experts > 0): not yet"
                                           : NULL;
    if (why) {
      mt_err_set(e, "data.seq_policy = varlen %s", why);
      return -1;
    }
  }
  if (cfg->documents && cfg->eot >= s->vocab) {
    mt_err_set(e, "data.documents = true: data.eot = %d is not a token of the model's "
                  "vocabulary (model.vocab_size = %d): no document would ever begin",
               cfg->eot, s->vocab);
    return -1;
  }
  lay->world = cfg->pp * cfg->dp * cfg->cp * cfg->tp;
  lay->per_rank = cfg->global_batch / cfg->dp;
  lay->accum = lay->per_rank / cfg->micro_batch;
  /* pipeline: micro-batches, stage split, schedule */
  const int m = lay->accum;
  /* one stage (pp = 1) runs its micro-batches one after the other in one
   * chunk (1F1B of one stage): parallel.schedule and virtual_stages do not
   * apply, so a configuration written for a pipeline (or a pipeline's
   * checkpoint resumed with its configuration) runs on one stage unchanged */
  const int piped = cfg->pp > 1, v = piped ? cfg->virtual_stages : 1;
  const mt_pp_sched kind = piped ? cfg->pp_schedule : MT_SCHED_1F1B;
  lay->chunks = v;
  if (cfg->pp > MT_PP_MAX_CHUNKS || v > MT_PP_MAX_CHUNKS)
    mt_err_set(e, "parallel.pp = %d, parallel.virtual_stages = %d: at most %d each", cfg->pp,
               v, MT_PP_MAX_CHUNKS);
  else if (cfg->pp_split[0]) {
    MT_TRY(e, parse_pp_split(cfg->pp_split, cfg->pp, s->n_layer, lay->split, e) != 0 ||
                  check_split_chunks(cfg, v, lay->split, e) != 0);
    lay->has_split = 1;
  } else if (cfg->pp_first_layers || cfg->pp_last_layers) {
    MT_TRY(e, first_last_split(cfg, s->n_layer, lay->split, e) != 0 ||
                  check_split_chunks(cfg, v, lay->split, e) != 0);
    lay->has_split = 1;
  } else if (s->n_layer % cfg->pp != 0)
    mt_err_set(e, "parallel.pp = %d does not divide model.n_layer = %d (or give "
                  "parallel.pp_split, or parallel.pp_first_layers / pp_last_layers)", cfg->pp,
               s->n_layer);
  else if ((s->n_layer / cfg->pp) % v != 0)
    mt_err_set(e, "parallel.virtual_stages = %d does not divide the %d layers per stage "
                  "(model.n_layer = %d over parallel.pp = %d)",
               v, s->n_layer / cfg->pp, s->n_layer, cfg->pp);
  if (e->failed) return -1;
  /* token slices: the schedule's units are micro-batches x slices */
  const int k = cfg->pp_token_slices > 1 ? cfg->pp_token_slices : 1;
  MT_TRY(e, check_slices(cfg, s, kind, e));
  MT_TRY(e, mt_pp_sched_check(kind, cfg->pp, m * k, v, s->n_layer, e));
  int bad = 0;
  mt_err why = {0};
  if (!schedule_seen_valid(kind, cfg->pp, m, v, k)) {
    mt_pp_schedule sched;
    mt_pp_schedule_build_sliced(&sched, kind, cfg->pp, m, v, kind == MT_SCHED_ZBV, k);
    mt_pp_sim sim;
    bad = mt_pp_schedule_validate(&sched, 1, 2, 1, 1, &sim, &why);
    mt_pp_schedule_free(&sched);
    if (!bad) schedule_valid(kind, cfg->pp, m, v, k);
  }
  if (bad) {
    mt_err_set(e, "parallel.schedule = %s: invalid schedule: %s", mt_pp_sched_name(kind),
               why.msg);
    return -1;
  }
  lay->sched = kind;
  /* train.device as far as it can be judged without asking the GPU (setup
   * asks it: mt_train_device_setup) */
  char dmsg[512];
  if (mt_device_resolve(cfg->device, mt_cuda_built(), 1, "", dmsg, sizeof dmsg) < 0) {
    mt_err_set(e, "%s", dmsg);
    return -1;
  }
  /* the dtype of every role, decided here once (the plan and the run read
   * lay->dtypes), the same on every device */
  mt_dtypes_resolve(cfg->precision, cfg->grad_dtype, cfg->grad_reduce_dtype, &lay->dtypes);
  /* the virtual device's profile must price (mt_config_check asked for one) */
  if (cfg->device == MT_DEVICE_VIRTUAL) {
    mt_cost_profile vp;
    mt_err vwhy = {0};
    if (mt_cost_profile_load(&vp, cfg->virtual_hw, &vwhy) != 0) {
      mt_err_set(e, "train.virtual_hw = %s: %s", cfg->virtual_hw, vwhy.msg);
      return -1;
    }
  }
  mt_hw_profile hw;
  MT_TRY(e, mt_hw_profile_load(&hw, cfg->hw_profile, e));
  if (cfg->pp > 1) {
    lay->stage_of_layer = mt_calloc((size_t)s->n_layer, sizeof(int));
    mt_registry_stage_map(s->n_layer, cfg->pp, lay->chunks,
                          lay->has_split ? lay->split : NULL, lay->sched == MT_SCHED_ZBV,
                          lay->stage_of_layer);
  }
  return 0;
}

void mt_layout_free(mt_layout *lay) {
  free(lay->stage_of_layer);
  lay->stage_of_layer = NULL;
}


void mt_layout_step_opts(const mt_config *cfg, const mt_layout *lay, mt_mesh *mesh, int *l0l1,
                         mt_step_opts *o, mt_step_groups *g) {
  const int n_vs = cfg->pp * lay->chunks;
  for (int vs = 0; vs < n_vs; vs++)
    mt_layout_stage_layers(cfg, lay, vs, &l0l1[vs], &l0l1[n_vs + vs]);
  /* zb-h1 and zb-v split each backward into input and weight passes (the sets keep
   * the linears' output gradients in between) */
  *o = (mt_step_opts){
      .shape = &lay->shape, .micro_batch = cfg->micro_batch,
      .par = {.tp = &mesh->tp_g, .sp = cfg->sp, .recompute = cfg->recompute,
              .split_backward =
                  cfg->pp > 1 && (lay->sched == MT_SCHED_ZBH1 || lay->sched == MT_SCHED_ZBV),
              .stage_of_layer = NULL, .pp_rank = 0, .pp_last = 0, .external_state = 1,
              .cp = &mesh->cp_g, .cp_mode = cfg->cp_mode, .ep = &mesh->ep_g,
              .etp = &mesh->etp_g, .seq = &mesh->tpcp_g,
              .ep_balance_alpha = cfg->ep_balance == MT_EP_BALANCE_LEAST_LOADED
                                      ? cfg->ep_balance_alpha
                                      : 0.0,
              .ep_balance_min_rows = cfg->ep_balance_min_rows,
              .moe_buffer_factor = cfg->moe_buffer_factor,
              .documents = cfg->documents, .slices = cfg->pp_token_slices},
      .zero = cfg->zero, .bucket_bytes = (size_t)(cfg->bucket_mb * 1048576.0),
      .beta1 = (float)cfg->beta1, .beta2 = (float)cfg->beta2, .eps = (float)cfg->eps,
      .weight_decay = (float)cfg->weight_decay, .sched = lay->sched, .accum = lay->accum,
      .virtual_stages = lay->chunks, .stage_l0 = l0l1, .stage_l1 = l0l1 + n_vs,
      .dtypes = lay->dtypes,
      .overlap_dp = cfg->overlap_dp,
      .muon = {.on = cfg->optim == MT_OPTIM_MUON, .momentum = (float)cfg->muon_momentum,
               .nesterov = cfg->muon_nesterov, .ns_steps = cfg->muon_ns_steps,
               .scale = cfg->muon_scale,
               .ns_dtype = cfg->muon_ns_dtype == MT_MUON_NS_BF16 ||
                                   (cfg->muon_ns_dtype == MT_MUON_NS_AUTO &&
                                    lay->dtypes.weights == MT_DT_BF16)
                               ? MT_DT_BF16
                               : MT_DT_F32,
               .exclude = cfg->muon_exclude,
               .replicated = cfg->muon_distribution == MT_MUON_DIST_REPLICATED}};
  if (cfg->pp > 1) { /* this rank's stage holds only its tensors */
    o->par.stage_of_layer = lay->stage_of_layer;
    o->par.pp_rank = mesh->pp_rank;
    /* the stage holding the last virtual stage (the head): 0 in a V */
    o->par.pp_last = mt_registry_vs_rank(cfg->pp, lay->sched == MT_SCHED_ZBV,
                                         cfg->pp * lay->chunks - 1);
  }
  *g = (mt_step_groups){.tp = &mesh->tp_g, .cp = &mesh->cp_g, .dp = &mesh->dp_g,
                        .pp = &mesh->pp_g, .dpcp = &mesh->dpcp_g, .ep = &mesh->ep_g,
                        .etp = &mesh->etp_g, .edp = &mesh->edp_g};
}
