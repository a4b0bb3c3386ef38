/* The run's first phase: validation (pure), then mesh, memory check, data,
 * registry, model, dp/ZeRO state and the pipeline stage. */
#include "train/train.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *PROG = "meshtrain";

/* ------------------------------------------------------------------ */
/* preemption: a signal only sets a flag                               */

static volatile sig_atomic_t g_stop_signal = 0;
static void on_stop_signal(int sig) { g_stop_signal = sig; }

void mt_train_install_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

int mt_train_signalled(void) { return g_stop_signal != 0; }

/* ------------------------------------------------------------------ */
/* validation                                                          */

/* parallel.pp_split "a,b,c" -> layers per stage; 0, or -1 with e set */
static int parse_pp_split(const char *text, int pp, int n_layer, int *split, mt_err *e) {
  int n = 0, sum = 0;
  const char *p = text;
  while (*p) {
    char *end;
    long x = strtol(p, &end, 10);
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

void mt_train_stage_layers(const mt_config *cfg, const mt_train_layout *lay, int vs, int *l0,
                           int *l1) {
  mt_pp_stage_layers(lay->shape.n_layer, cfg->pp, cfg->virtual_stages,
                     lay->has_split ? lay->split : NULL, vs, l0, l1);
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
  else if (cfg->zero >= 2 && cfg->pp > 1)
    mt_err_set(e, "parallel.zero = %d needs parallel.pp = 1: ZeRO-%d reduces each "
                  "micro-batch's gradients as its backward ends, and pipeline stages interleave "
                  "micro-batches (use parallel.zero = 1 with pipeline parallelism)",
               cfg->zero, cfg->zero);
  else if (cfg->moe_experts > 0 && (cfg->tp * cfg->cp * cfg->dp) % (cfg->etp * cfg->ep) != 0)
    mt_err_set(e, "parallel.etp x parallel.ep = %d x %d does not divide the %d ranks of a "
                  "pipeline stage (tp x cp x dp = %d x %d x %d)",
               cfg->etp, cfg->ep, cfg->tp * cfg->cp * cfg->dp, cfg->tp, cfg->cp, cfg->dp);
  else if (cfg->moe_experts > 0 && cfg->cp > 1)
    mt_err_set(e, "parallel.cp = %d is not supported with MoE blocks (model.moe_experts > 0) "
                  "yet: the router's per-sequence counts would span the cp ranks", cfg->cp);
  else if (cfg->moe_experts > 0 && cfg->recompute)
    mt_err_set(e, "train.recompute = true is not supported with MoE blocks "
                  "(model.moe_experts > 0) yet");
  else if (cfg->moe_experts > 0 && cfg->pp > 1 && !strcmp(cfg->pp_schedule, "zb-h1"))
    mt_err_set(e, "parallel.schedule = zb-h1 (a split backward) is not supported with MoE "
                  "blocks (model.moe_experts > 0) yet");
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

int mt_train_validate(const mt_config *cfg, int world_size, mt_train_layout *lay, mt_err *e) {
  memset(lay, 0, sizeof *lay);
  lay->sched = MT_SCHED_1F1B;
  if (mt_model_shape_from_config(cfg, &lay->shape, e) != 0) return -1;
  if (check_mesh_and_batch(cfg, world_size, e) != 0) return -1;
  if (check_cp(cfg, &lay->shape, e) != 0) return -1;
  const mt_model_shape *s = &lay->shape;
  lay->world = cfg->pp * cfg->dp * cfg->cp * cfg->tp;
  lay->per_rank = cfg->global_batch / cfg->dp;
  lay->accum = lay->per_rank / cfg->micro_batch;
  /* pipeline: micro-batches, stage split, schedule */
  int m = lay->accum, kind = mt_pp_sched_parse(cfg->pp_schedule);
  if (kind < 0) {
    mt_err_set(e, "parallel.schedule = '%s': unknown (gpipe|1f1b|interleaved|zb-h1)",
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
  else if (cfg->pp_split[0] && cfg->virtual_stages > 1)
    mt_err_set(e, "parallel.pp_split needs parallel.virtual_stages = 1");
  else if (cfg->pp_split[0]) {
    if (parse_pp_split(cfg->pp_split, cfg->pp, s->n_layer, lay->split, e) == 0)
      lay->has_split = 1;
  } else if (s->n_layer % cfg->pp != 0)
    mt_err_set(e, "parallel.pp = %d does not divide model.n_layer = %d (or give "
                  "parallel.pp_split)", cfg->pp, s->n_layer);
  else if ((s->n_layer / cfg->pp) % cfg->virtual_stages != 0)
    mt_err_set(e, "parallel.virtual_stages = %d does not divide the %d layers per stage "
                  "(model.n_layer = %d over parallel.pp = %d)",
               cfg->virtual_stages, s->n_layer / cfg->pp, s->n_layer, cfg->pp);
  if (e->failed) return -1;
  if (mt_pp_sched_check((mt_pp_sched)kind, cfg->pp, m, cfg->virtual_stages, s->n_layer, e) != 0)
    return -1;
  mt_pp_schedule sched;
  mt_pp_schedule_build(&sched, (mt_pp_sched)kind, cfg->pp, m, cfg->virtual_stages);
  char msg[256];
  mt_pp_sim sim;
  int bad = mt_pp_schedule_validate(&sched, 1, 2, 1, 1, &sim, msg, sizeof msg);
  mt_pp_schedule_free(&sched);
  if (bad) {
    mt_err_set(e, "parallel.schedule = %s: invalid schedule: %s", cfg->pp_schedule, msg);
    return -1;
  }
  /* one stage runs its micro-batches one after the other (1F1B of one stage) */
  lay->sched = cfg->pp > 1 ? (mt_pp_sched)kind : MT_SCHED_1F1B;
  /* train.device / precision as far as they can be judged without asking
   * the GPU (setup asks it: mt_train_device_setup) */
  char dmsg[512];
  mt_precision prec;
  if (mt_device_resolve(cfg->device, cfg->precision, mt_cuda_built(), 1, "", &prec, dmsg,
                        sizeof dmsg) < 0) {
    mt_err_set(e, "%s", dmsg);
    return -1;
  }
  mt_hw_profile hw;
  if (mt_hw_profile_load(&hw, cfg->hw_profile, e) != 0) return -1;
  if (world_size > 0 && lay->world != world_size) {
    mt_err_set(e, "the mesh pp x dp x cp x tp = %d x %d x %d x %d = %d ranks does not match "
                  "the %d MPI ranks launched (set parallel.dp/tp/pp/cp or the rank count)",
               cfg->pp, cfg->dp, cfg->cp, cfg->tp, lay->world, world_size);
    return -1;
  }
  if (cfg->pp > 1) {
    lay->stage_of_layer = mt_calloc((size_t)s->n_layer, sizeof(int));
    for (int vs = 0; vs < cfg->pp * cfg->virtual_stages; vs++) {
      int a, b;
      mt_train_stage_layers(cfg, lay, vs, &a, &b);
      for (int l = a; l < b; l++) lay->stage_of_layer[l] = vs % cfg->pp;
    }
  }
  return 0;
}

void mt_train_layout_free(mt_train_layout *lay) {
  free(lay->stage_of_layer);
  lay->stage_of_layer = NULL;
}

/* ------------------------------------------------------------------ */
/* setup                                                               */

/* Refuse what cannot fit before allocating it: this rank's plan (every
 * category, exactly what it will allocate) summed over the node's ranks. */
static void check_memory(mt_trainer *t, mt_err *e) {
  mt_plan_rank pr;
  double need = 0.0;
  if (mt_plan_rank_build(&t->cfg, &t->lay, t->mesh.pp_rank, t->mesh.dp_rank, t->mesh.cp_rank,
                         t->mesh.tp_rank, &pr, e) == 0)
    need = mt_plan_rank_total(&pr);
  if (t->device == MT_DEVICE_CUDA) { /* the tensors live on the GPU */
    mt_train_device_check_memory(t, need, e);
    return;
  }
  double node_need = need;
  mt_allreduce_sum_f64(&t->mesh.node, &node_need, 1, MT_LOC_HOST);
  mt_mem_limit avail; /* the smallest of MemAvailable, the cgroup and Slurm limits */
  int local_ranks = t->mesh.node.size;
  if (!e->failed && mt_mem_limit_node("", &avail) == 0 && node_need > avail.bytes)
    mt_err_set(e,
               "model %s with train.micro_batch = %d needs about %.2f GiB per rank; %d ranks "
               "on this node need %.2f GiB but only %.2f GiB is usable (%s): lower "
               "train.micro_batch or model size, raise parallel.zero, or use more nodes",
               t->cfg.model_preset, t->cfg.micro_batch, need / 1073741824.0, local_ranks,
               node_need / 1073741824.0, avail.bytes / 1073741824.0, avail.source);
}

static void setup_data(mt_trainer *t, mt_err *e) {
  const mt_config *cfg = &t->cfg;
  t->have_val_file = cfg->data_val[0] != '\0';
  if (mt_dataset_open(&t->train_file, cfg->data_train, cfg->data_format, e) == 0) {
    if (t->have_val_file) {
      t->train_ds = t->train_file;
      t->train_ds.owns_map = 0;
      if (mt_dataset_open(&t->val_file, cfg->data_val, cfg->data_format, e) == 0) {
        t->val_ds = t->val_file;
        t->val_ds.owns_map = 0;
      }
    } else {
      mt_dataset_split(&t->train_file, cfg->val_fraction, &t->train_ds, &t->val_ds);
    }
  }
  mt_err_check_all(e, MPI_COMM_WORLD, PROG);
  mt_dataset_validate(&t->train_ds, t->lay.shape.vocab, MPI_COMM_WORLD, e);
  mt_err_check_all(e, MPI_COMM_WORLD, PROG);
  /* the validation tokens too, whether a file or the held-out tail of data.train */
  mt_dataset_validate(&t->val_ds, t->lay.shape.vocab, MPI_COMM_WORLD, e);
  mt_err_check_all(e, MPI_COMM_WORLD, PROG);
  const int T = t->lay.shape.seq_len;
  if (mt_sampler_init(&t->sampler, &t->train_ds, T, (uint64_t)cfg->seed, e) == 0 &&
      t->sampler.n_windows < (uint64_t)cfg->global_batch)
    mt_err_set(e,
               "%s: the training split holds %llu sequences of %d+1 tokens, fewer than one "
               "global batch of train.global_batch = %d",
               cfg->data_train, (unsigned long long)t->sampler.n_windows, T, cfg->global_batch);
  if (!e->failed && cfg->eval_every > 0 &&
      mt_sampler_init(&t->val_sampler, &t->val_ds, T, (uint64_t)cfg->seed, e) == 0) {
    uint64_t want = (uint64_t)cfg->eval_batches * (uint64_t)cfg->global_batch;
    t->n_val_seq = (int)(t->val_sampler.n_windows < want ? t->val_sampler.n_windows : want);
  }
  mt_err_check_all(e, MPI_COMM_WORLD, PROG);
}

/* registry, model, dp/ZeRO state (initialised), stage */
static void setup_compute(mt_trainer *t, mt_err *e) {
  const mt_config *cfg = &t->cfg;
  if (cfg->threads > 0) mt_kernels_set_threads(cfg->threads);
  t->ops = t->device == MT_DEVICE_CUDA ? mt_ops_cuda() : mt_ops_cpu();
  /* zb-h1 splits each backward into input and weight passes (the sets keep
   * the linears' output gradients in between) */
  mt_gpt_parallel par = {&t->mesh.tp_g, cfg->sp, cfg->recompute,
                         cfg->pp > 1 && t->lay.sched == MT_SCHED_ZBH1, NULL, 0, 0, 1,
                         &t->mesh.cp_g, mt_cp_mode_parse(cfg->cp_mode), &t->mesh.ep_g,
                         &t->mesh.etp_g};
  if (cfg->pp > 1) { /* this rank's stage holds only its tensors */
    par.stage_of_layer = t->lay.stage_of_layer;
    par.pp_rank = t->mesh.pp_rank;
    par.pp_last = cfg->pp - 1;
  }
  mt_gpt_create_stage(&t->model, &t->lay.shape, t->ops, cfg->micro_batch, &par, e);
  mt_err_check_all(e, MPI_COMM_WORLD, PROG);
  mt_gpt_set_moe_loss(&t->model, (float)cfg->moe_aux_coef, (float)cfg->moe_z_coef);
  /* cp ranks hold the same parameters (each sees other tokens): gradients
   * and ZeRO shards go over dp x cp (at cp = 1, the dp group, rank for rank);
   * experts' over edp of the folded mesh */
  mt_registry *reg = &t->model.reg;
  mt_registry_set_edp(reg, t->mesh.edp, t->mesh.edp_rank);
  mt_registry_shard_dp(reg, cfg->dp * cfg->cp, t->mesh.dpcp_g.rank, cfg->zero,
                       (size_t)(cfg->bucket_mb * 1048576.0));
  mt_dp_create(&t->dp, &t->mesh.dpcp_g, reg, t->ops, &t->model.tp, (float)cfg->beta1,
               (float)cfg->beta2, (float)cfg->eps, (float)cfg->weight_decay);
  mt_dp_set_expert_groups(&t->dp, &t->mesh.edp_g, &t->mesh.ep_g, &t->mesh.etp_g);
  mt_dp_set_tp(&t->dp, &t->mesh.tp_g);
  mt_state_source src = mt_dp_state_source(&t->dp);
  mt_gpt_set_state_source(&t->model, &src);
  mt_dp_init_params(&t->dp, (uint64_t)cfg->seed);
  if (cfg->pp > 1) {
    /* a copy of a tensor another stage owns (the tied LM head) leaves the
     * norm here: the owner counts it */
    size_t skip_begin = 0, skip_end = 0;
    for (int i = 0; i < reg->n; i++) {
      const mt_tensor *tn = &reg->t[i];
      if (tn->pp_copy == t->mesh.pp_rank && tn->pp_stage != t->mesh.pp_rank && tn->numel_local) {
        skip_begin = tn->offset;
        skip_end = tn->offset + tn->numel_local;
      }
    }
    mt_dp_set_pp(&t->dp, &t->mesh.pp_g, skip_begin, skip_end);
    t->tied_numel = mt_pp_tied_numel(reg);
    if (t->tied_numel) t->tied_scratch = t->ops->alloc(MT_MEM_COMM, t->tied_numel * sizeof(float));
  }
  mt_pp_schedule_build(&t->sched, t->lay.sched, cfg->pp, t->lay.accum, cfg->virtual_stages);
  mt_train_stage_create(t);
}

static void setup_peak(mt_trainer *t) {
  const mt_config *cfg = &t->cfg;
  const mt_model_shape *s = &t->lay.shape;
  double profile_peak = t->precision == MT_PRECISION_BF16 ? t->hw.peak_gflops_bf16
                                                          : t->hw.peak_gflops_fp32;
  t->peak_per_rank = cfg->peak_gflops > 0 ? cfg->peak_gflops : profile_peak;
  t->peak_source = cfg->peak_gflops > 0 ? "metrics.peak_gflops" : "profile";
  if (t->peak_per_rank <= 0 && t->device == MT_DEVICE_CUDA) {
    t->peak_source = "none"; /* a GPU no profile knows: MFU reads 0 */
  } else if (t->peak_per_rank <= 0) {
    /* measured on every rank at once, so shared cores show up as they will in training */
    double pk = mt_cpu_sgemm_gflops(1024, 0.5);
    mt_allreduce_sum_f64(&t->mesh.world, &pk, 1, MT_LOC_HOST);
    t->peak_per_rank = pk / t->world_size;
    t->peak_source = "measured-sgemm";
  }
  t->peak_flops = t->peak_per_rank * 1e9 * t->world_size;
  t->flops_per_token = mt_train_flops_per_token(s->n_layer, s->n_embd, s->seq_len, s->vocab);
  if (s->moe_experts > 0) /* MoE: the matmul weights a token uses (router, its k experts) */
    t->flops_per_token =
        mt_train_flops_per_token_mm(mt_model_active_matmul_weights(s), s->n_layer, s->n_embd,
                                    s->seq_len);
  t->tokens_per_step = (long long)cfg->global_batch * s->seq_len;
}

/* MT_TEST_SETUP_SLEEP_S (tests only): a slow start-up, so a test can stop a
 * run before its first step; a stop signal ends the wait */
static void test_setup_sleep(void) {
  const char *v = getenv("MT_TEST_SETUP_SLEEP_S");
  double until = v ? mt_now() + atof(v) : 0.0;
  struct timespec ts = {0, 10 * 1000 * 1000};
  while (v && mt_now() < until && !mt_train_signalled()) nanosleep(&ts, NULL);
}

void mt_train_setup(mt_trainer *t, const mt_config *cfg) {
  memset(t, 0, sizeof *t);
  t->t_start = mt_now();
  mt_train_install_signals(); /* again: main installs them before MPI_Init */
  test_setup_sleep();
  t->cfg = *cfg;
  t->last_val = -1.0;
  MPI_Comm_rank(MPI_COMM_WORLD, &t->world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &t->world_size);
  mt_err err = {0};
  mt_train_validate(&t->cfg, t->world_size, &t->lay, &err);
  if (!err.failed) mt_hw_profile_load(&t->hw, t->cfg.hw_profile, &err);
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  mt_mesh_create(&t->mesh, t->cfg.tp, t->cfg.cp, t->cfg.dp, t->cfg.pp, &err);
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  mt_mesh_fold(&t->mesh, t->cfg.moe_experts > 0 ? t->cfg.etp : 1,
               t->cfg.moe_experts > 0 ? t->cfg.ep : 1, &err);
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  mt_train_device_setup(t); /* exits 2 on every rank when no device can be had */
  /* thread placement: rank 0 warns once per node whose ranks have more
   * compute threads than CPUs in their affinity masks */
  {
    char placement[4096];
    if (t->cfg.threads > 0) mt_kernels_set_threads(t->cfg.threads);
    mt_affinity_check(MPI_COMM_WORLD, mt_kernels_threads(), NULL, PROG, placement,
                      sizeof placement);
    if (t->world_rank == 0) fputs(placement, stderr);
  }
  check_memory(t, &err);
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  setup_data(t, &err);
  setup_compute(t, &err);
  setup_peak(t);
}

void mt_train_destroy(mt_trainer *t) {
  mt_train_stage_destroy(t);
  if (t->tied_scratch) t->ops->free(MT_MEM_COMM, t->tied_scratch, t->tied_numel * sizeof(float));
  mt_pp_schedule_free(&t->sched);
  mt_dp_destroy(&t->dp);
  mt_gpt_destroy(&t->model);
  mt_dataset_close(&t->train_file);
  if (t->have_val_file) mt_dataset_close(&t->val_file);
  mt_train_device_destroy(t);
  mt_mesh_destroy(&t->mesh);
  mt_train_layout_free(&t->lay);
}
