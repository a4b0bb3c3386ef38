/* The layout of a run: every check of a configuration for a world size
 * that needs no data and no MPI, and what it derives (model shape, batch
 * split, pipeline schedule and stage split). meshtrain --check, --plan and
 * setup all call it, so every rank fails the same way before any collective. */
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
static int check_split_chunks(const mt_config *cfg, const int *split, mt_err *e) {
  const int v = cfg->virtual_stages;
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
  mt_registry_stage_layers(lay->shape.n_layer, cfg->pp, cfg->virtual_stages,
                           lay->has_split ? lay->split : NULL, lay->sched == MT_SCHED_ZBV, vs,
                           l0, l1);
}

static int check_mesh_and_batch(const mt_config *cfg, int world_size, mt_err *e) {
  int accum_div = cfg->micro_batch * cfg->dp;
  if (world_size > 0 && world_size % cfg->tp != 0)
    mt_err_set(e, "parallel.tp = %d does not divide the %d MPI ranks launched", cfg->tp,
               world_size);
  else if (cfg->sp && cfg->tp == 1)
    mt_err_set(e, "parallel.sp = true needs parallel.tp > 1 (sequence parallelism splits "
                  "the sequence over the tensor-parallel ranks)");
  else if (cfg->global_batch % accum_div != 0)
    mt_err_set(e, "train.global_batch = %d is not divisible by train.micro_batch x parallel.dp "
                  "= %d x %d = %d", cfg->global_batch, cfg->micro_batch, cfg->dp, accum_div);
  else if (!cfg->data_val[0] && cfg->val_fraction <= 0.0 && cfg->eval_every > 0)
    mt_err_set(e, "data.val is empty and data.val_fraction = 0: no validation data "
                  "(set one, or train.eval_every = 0)");
  else if (!cfg->output_dir[0])
    mt_err_set(e, "output.dir is empty");
  else if (cfg->ckpt_async && strcmp(cfg->ckpt_mode, "per-writer") != 0)
    mt_err_set(e, "ckpt.async = true needs ckpt.mode = per-writer (each rank writes its own "
                  "file in the background; ckpt.mode is %s)", cfg->ckpt_mode);
  else if (cfg->moe_experts > 0 && (cfg->tp * cfg->cp * cfg->dp) % (cfg->etp * cfg->ep) != 0)
    mt_err_set(e, "parallel.etp x parallel.ep = %d x %d does not divide the %d ranks of a "
                  "pipeline stage (tp x cp x dp = %d x %d x %d)",
               cfg->etp, cfg->ep, cfg->tp * cfg->cp * cfg->dp, cfg->tp, cfg->cp, cfg->dp);
  else if (cfg->moe_experts > 0 && cfg->cp > 1 && cfg->moe_capacity > 0 &&
           strcmp(cfg->cp_mode, "ulysses") != 0)
    mt_err_set(e, "model.moe_capacity = %g with parallel.cp = %d needs parallel.cp_mode = "
                  "ulysses: the capacity keeps a sequence's slots in position order, and ring's "
                  "zigzag chunks are not in rank order (use model.moe_capacity = 0, dropless)",
               cfg->moe_capacity, cfg->cp);
  else if (!strcmp(cfg->ep_balance, "least-loaded") && cfg->etp > 1)
    mt_err_set(e, "parallel.ep_balance = least-loaded needs parallel.etp = 1 (an expert's "
                  "rows move with its whole weights; parallel.etp is %d)", cfg->etp);
  else if (!strcmp(cfg->ep_balance, "least-loaded") && cfg->ep < 2)
    mt_err_set(e, "parallel.ep_balance = least-loaded needs parallel.ep > 1 (it moves rows "
                  "between expert-parallel ranks; parallel.ep is %d)", cfg->ep);
  else if (cfg->moe_bias_init != 0.0 && strcmp(cfg->moe_balance, "bias") != 0)
    mt_err_set(e, "train.moe_bias_init = %g needs train.moe_balance = bias (it is the routing "
                  "bias's start; train.moe_balance is %s)", cfg->moe_bias_init, cfg->moe_balance);
  else if (cfg->zero == 3 && cfg->save_params)
    mt_err_set(e, "output.save_params = true needs parallel.zero <= 2 (under ZeRO-3 a rank "
                  "holds only its shard of the parameters; checkpoints hold them whole)");
  return e->failed ? -1 : 0;
}

/* Context parallelism: the sequence must split into the mode's chunks, the
 * heads over the ranks under Ulysses, and each rank's tokens over tp under
 * sequence parallelism. */
static int check_cp(const mt_config *cfg, const mt_model_shape *s, mt_err *e) {
  int mode = mt_cp_mode_parse(cfg->cp_mode), cp = cfg->cp, T = s->seq_len;
  if (mode < 0)
    mt_err_set(e, "parallel.cp_mode = '%s': unknown (ring|ulysses)", cfg->cp_mode);
  else if (cp == 1)
    return 0;
  else if (mode == MT_CP_RING && T % (2 * cp) != 0)
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

int mt_layout_validate(const mt_config *cfg, int world_size, mt_layout *lay, mt_err *e) {
  memset(lay, 0, sizeof *lay);
  lay->sched = MT_SCHED_1F1B;
  MT_TRY(e, mt_model_shape_from_config(cfg, &lay->shape, e));
  MT_TRY(e, check_mesh_and_batch(cfg, world_size, e));
  MT_TRY(e, check_cp(cfg, &lay->shape, e));
  const mt_model_shape *s = &lay->shape;
  lay->world = cfg->pp * cfg->dp * cfg->cp * cfg->tp;
  lay->per_rank = cfg->global_batch / cfg->dp;
  lay->accum = lay->per_rank / cfg->micro_batch;
  /* pipeline: micro-batches, stage split, schedule */
  int m = lay->accum, kind = mt_pp_sched_parse(cfg->pp_schedule);
  if (kind < 0) {
    mt_err_set(e,
               "parallel.schedule = '%s': unknown (gpipe|1f1b|interleaved|zb-h1|breadth-first|zb-v)",
               cfg->pp_schedule);
    return -1;
  }
  if (cfg->micro_batches > 0 && cfg->micro_batches != m)
    mt_err_set(e, "train.micro_batches = %d does not match train.global_batch / (train.micro_batch "
                  "x parallel.dp) = %d / (%d x %d) = %d (set it to 0 or change the batch)",
               cfg->micro_batches, cfg->global_batch, cfg->micro_batch, cfg->dp, m);
  else if (cfg->pp > 1 && cfg->save_params)
    mt_err_set(e, "output.save_params = true needs parallel.pp = 1 (each pipeline stage "
                  "holds only its own parameters)");
  else if (cfg->pp > MT_PP_MAX_CHUNKS || cfg->virtual_stages > MT_PP_MAX_CHUNKS)
    mt_err_set(e, "parallel.pp = %d, parallel.virtual_stages = %d: at most %d each", cfg->pp,
               cfg->virtual_stages, MT_PP_MAX_CHUNKS);
  else if (cfg->pp_split[0] && (cfg->pp_first_layers || cfg->pp_last_layers))
    mt_err_set(e, "parallel.pp_split and parallel.pp_first_layers / pp_last_layers both set: "
                  "give one of them");
  else if (cfg->pp_split[0]) {
    MT_TRY(e, parse_pp_split(cfg->pp_split, cfg->pp, s->n_layer, lay->split, e) != 0 ||
                  check_split_chunks(cfg, lay->split, e) != 0);
    lay->has_split = 1;
  } else if (cfg->pp_first_layers || cfg->pp_last_layers) {
    MT_TRY(e, first_last_split(cfg, s->n_layer, lay->split, e) != 0 ||
                  check_split_chunks(cfg, lay->split, e) != 0);
    lay->has_split = 1;
  } else if (s->n_layer % cfg->pp != 0)
    mt_err_set(e, "parallel.pp = %d does not divide model.n_layer = %d (or give "
                  "parallel.pp_split, or parallel.pp_first_layers / pp_last_layers)", cfg->pp,
               s->n_layer);
  else if ((s->n_layer / cfg->pp) % cfg->virtual_stages != 0)
    mt_err_set(e, "parallel.virtual_stages = %d does not divide the %d layers per stage "
                  "(model.n_layer = %d over parallel.pp = %d)",
               cfg->virtual_stages, s->n_layer / cfg->pp, s->n_layer, cfg->pp);
  if (e->failed) return -1;
  MT_TRY(e, mt_pp_sched_check((mt_pp_sched)kind, cfg->pp, m, cfg->virtual_stages, s->n_layer, e));
  mt_pp_schedule sched;
  mt_pp_schedule_build(&sched, (mt_pp_sched)kind, cfg->pp, m, cfg->virtual_stages);
  mt_err why = {0};
  mt_pp_sim sim;
  int bad = mt_pp_schedule_validate(&sched, 1, 2, 1, 1, &sim, &why);
  mt_pp_schedule_free(&sched);
  if (bad) {
    mt_err_set(e, "parallel.schedule = %s: invalid schedule: %s", cfg->pp_schedule, why.msg);
    return -1;
  }
  /* one stage runs its micro-batches one after the other (1F1B of one stage) */
  lay->sched = cfg->pp > 1 ? (mt_pp_sched)kind : MT_SCHED_1F1B;
  /* train.device / precision as far as they can be judged without asking
   * the GPU (setup asks it: mt_train_device_setup) */
  char dmsg[512];
  mt_precision prec;
  int dev = mt_device_resolve(cfg->device, cfg->precision, mt_cuda_built(), 1, "", &prec, dmsg,
                               sizeof dmsg);
  if (dev < 0) {
    mt_err_set(e, "%s", dmsg);
    return -1;
  }
  /* the dtype of every role, decided here once (the plan and the run read
   * lay->dtypes), the same on every device */
  if (mt_dtypes_resolve(prec, cfg->grad_dtype, cfg->grad_reduce_dtype, &lay->dtypes, dmsg,
                        sizeof dmsg) != 0) {
    mt_err_set(e, "%s", dmsg);
    return -1;
  }
  if (lay->dtypes.weights == MT_DT_BF16 && cfg->zero >= 1 && cfg->save_params) {
    mt_err_set(e, "output.save_params = true needs parallel.zero = 0 under train.precision = "
                  "bf16 (from ZeRO-1 on a rank holds only its shard of the fp32 master)");
    return -1;
  }
  if (cfg->virtual_moe_skew > 0.0 && strcmp(cfg->device, "virtual") != 0) {
    mt_err_set(e, "virtual.moe_skew = %g needs train.device = virtual (a real run's router "
                  "decides its load)", cfg->virtual_moe_skew);
    return -1;
  }
  if (cfg->virtual_moe_skew > 0.0 && cfg->moe_experts == 0) {
    mt_err_set(e, "virtual.moe_skew = %g: the model has no experts (model.moe_experts = 0)",
               cfg->virtual_moe_skew);
    return -1;
  }
  /* the virtual device: a profile that prices (its [cost] section), and
   * no checkpoint (a virtual run holds no values) */
  if (strcmp(cfg->device, "virtual") == 0) {
    mt_cost_profile vp;
    mt_err vwhy = {0};
    if (!cfg->virtual_hw[0]) {
      mt_err_set(e, "train.device = virtual needs train.virtual_hw = PROFILE (a hardware "
                    "profile with a [cost] section, e.g. h200)");
      return -1;
    }
    if (mt_cost_profile_load(&vp, cfg->virtual_hw, &vwhy) != 0) {
      mt_err_set(e, "train.virtual_hw = %s: %s", cfg->virtual_hw, vwhy.msg);
      return -1;
    }
    if (strcmp(cfg->ckpt_mode, "none") != 0) {
      mt_err_set(e, "train.device = virtual computes no values to checkpoint: set ckpt.mode = "
                    "none (it is %s)", cfg->ckpt_mode);
      return -1;
    }
    if (cfg->resume[0] || cfg->init_from[0]) {
      mt_err_set(e, "train.device = virtual cannot load a checkpoint (train.resume and "
                    "train.init_from must be empty)");
      return -1;
    }
  }
  mt_hw_profile hw;
  MT_TRY(e, mt_hw_profile_load(&hw, cfg->hw_profile, e));
  if (world_size > 0 && lay->world != world_size) {
    mt_err_set(e, "the mesh pp x dp x cp x tp = %d x %d x %d x %d = %d ranks does not match "
                  "the %d MPI ranks launched (set parallel.dp/tp/pp/cp or the rank count)",
               cfg->pp, cfg->dp, cfg->cp, cfg->tp, lay->world, world_size);
    return -1;
  }
  if (cfg->pp > 1) {
    lay->stage_of_layer = mt_calloc((size_t)s->n_layer, sizeof(int));
    mt_registry_stage_map(s->n_layer, cfg->pp, cfg->virtual_stages,
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
  const int n_vs = cfg->pp * cfg->virtual_stages;
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
              .cp = &mesh->cp_g, .cp_mode = mt_cp_mode_parse(cfg->cp_mode), .ep = &mesh->ep_g,
              .etp = &mesh->etp_g, .seq = &mesh->tpcp_g,
              .ep_balance_alpha = strcmp(cfg->ep_balance, "least-loaded") ? 0.0
                                                                           : cfg->ep_balance_alpha,
              .ep_balance_min_rows = cfg->ep_balance_min_rows},
      .zero = cfg->zero, .bucket_bytes = (size_t)(cfg->bucket_mb * 1048576.0),
      .beta1 = (float)cfg->beta1, .beta2 = (float)cfg->beta2, .eps = (float)cfg->eps,
      .weight_decay = (float)cfg->weight_decay, .sched = lay->sched, .accum = lay->accum,
      .virtual_stages = cfg->virtual_stages, .stage_l0 = l0l1, .stage_l1 = l0l1 + n_vs,
      .dtypes = lay->dtypes,
      .overlap_dp = cfg->overlap_dp};
  if (cfg->pp > 1) { /* this rank's stage holds only its tensors */
    o->par.stage_of_layer = lay->stage_of_layer;
    o->par.pp_rank = mesh->pp_rank;
    /* the stage holding the last virtual stage (the head): 0 in a V */
    o->par.pp_last = mt_registry_vs_rank(cfg->pp, lay->sched == MT_SCHED_ZBV,
                                         cfg->pp * cfg->virtual_stages - 1);
  }
  *g = (mt_step_groups){.tp = &mesh->tp_g, .cp = &mesh->cp_g, .dp = &mesh->dp_g,
                        .pp = &mesh->pp_g, .dpcp = &mesh->dpcp_g, .ep = &mesh->ep_g,
                        .etp = &mesh->etp_g, .edp = &mesh->edp_g};
}
