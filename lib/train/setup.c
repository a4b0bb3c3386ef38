/* The run's first phase: validation (pure), then mesh, memory check, data,
 * and this rank's step (model, dp/ZeRO state, schedule and executor). */
#include "train/train_internal.h"
#include "core/flight.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *PROG = "meshtrain";

/* ------------------------------------------------------------------ */
/* stop signals only set a flag: USR1 preempt (requeue), TERM cancel,   */
/* INT interrupt (a second INT ends the process at once)                */

static volatile sig_atomic_t g_stop = MT_STOP_NONE;
static void on_stop_signal(int sig) {
  if (sig == SIGINT && g_stop == MT_STOP_INTERRUPT) { /* Ctrl-C twice: now, as by default */
    signal(SIGINT, SIG_DFL);
    raise(SIGINT);
  } else if (sig == SIGINT) {
    g_stop = MT_STOP_INTERRUPT;
  } else if (sig == SIGTERM && g_stop < MT_STOP_CANCEL) {
    g_stop = MT_STOP_CANCEL;
  } else if (g_stop == MT_STOP_NONE) {
    g_stop = MT_STOP_PREEMPT;
  }
}

void mt_train_install_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
}

int mt_train_signalled(void) { return g_stop; }

/* ------------------------------------------------------------------ */
/* setup                                                               */

/* The virtual device's ranks share this machine: whether the node's ranks
 * fit its memory with what a rank takes at its peak here (measured:
 * mt_host_rank_cost_default, or the node's ranks' mean size now if more:
 * another MPI, a sanitizer). A rank count the launcher could start may
 * still run the machine out of memory during set-up; `meshtrain --check
 * --ranks N` asks before the launch. */
static void check_host(mt_trainer *t, mt_err *e) {
  mt_host_rank_cost c;
  mt_host_limits l;
  mt_host_rank_cost_default(&c);
  const int n = t->mesh.node.size;
  double mine = mt_host_self_bytes(), now = 0; /* the node's ranks now, in all */
  MT_MPI_CHECK(MPI_Allreduce(&mine, &now, 1, MPI_DOUBLE, MPI_SUM, t->mesh.node.comm));
  if (now / n > c.rank_bytes + c.peer_bytes * n) { /* (its peers' state already in it) */
    c.rank_bytes = now / n;
    c.peer_bytes = 0;
  }
  char why[512];
  if (e->failed || mt_host_limits_read("", &l) != 0) return;
  /* already started: only memory is left to run out of; MemAvailable no
   * longer counts what the ranks hold now, a cgroup's or Slurm's limit does */
  l.nproc = l.threads_max = l.nofile = l.shm_free = 0;
  if (strcmp(l.mem.source, "MemAvailable") == 0) l.mem.bytes += now;
  if (mt_host_fit(n, &c, &l, why, sizeof why) != 0)
    mt_err_set(e, "train.device = virtual: %s", why);
}

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
  if (t->device == MT_DEVICE_VIRTUAL) { /* nothing is backed: the emulated device's memory */
    check_host(t, e);
    if (!e->failed && need > t->vprof.mem_bytes)
      mt_err_set(e, "model %s with train.micro_batch = %d needs %.2f GiB per rank, more than "
                    "the %.2f GiB of a %s device (train.virtual_hw): lower train.micro_batch "
                    "or model size, raise parallel.zero or parallel.tp, or use more ranks",
                 mt_preset_name(t->cfg.model_preset), t->cfg.micro_batch, need / 1073741824.0,
                 t->vprof.mem_bytes / 1073741824.0, t->vprof.name);
    return;
  }
  double node_need = need;
  mt_allreduce(&t->mesh.node, &node_need, 1, MT_DT_F64, MT_RED_SUM, MT_LOC_HOST);
  mt_mem_limit avail; /* the smallest of MemAvailable, the cgroup and Slurm limits */
  int local_ranks = t->mesh.node.size;
  if (!e->failed && mt_mem_limit_node("", &avail) == 0 && node_need > avail.bytes)
    mt_err_set(e,
               "model %s with train.micro_batch = %d needs about %.2f GiB per rank; %d ranks "
               "on this node need %.2f GiB but only %.2f GiB is usable (%s): lower "
               "train.micro_batch or model size, raise parallel.zero, or use more nodes",
               mt_preset_name(t->cfg.model_preset), t->cfg.micro_batch, need / 1073741824.0,
               local_ranks,
               node_need / 1073741824.0, avail.bytes / 1073741824.0, avail.source);
}

/* shards shorter than one window, said once (rank 0) */
static void report_short(const mt_trainer *t, int T) {
  for (int i = 0; i < t->blend.n; i++) {
    const mt_sampler *s = &t->blend.src[i];
    if (s->n_short == 0) continue;
    const char *first = "";
    for (int f = 0; f < s->n_shards && !first[0]; f++)
      if (mt_dataset_ntokens(&s->shards[f]) < (size_t)T + 1) first = s->shards[f].path;
    mt_info0("meshtrain: data: %d of the %d token files of source '%s' hold fewer than T+1 = "
             "%d tokens and give no window (the first: %s)", s->n_short, s->n_shards,
             t->sources.src[i].name, T + 1, first);
  }
}

/* each source's validation windows, up to train.eval_batches global batches */
static void setup_val(mt_trainer *t, int T, mt_err *e) {
  const mt_config *cfg = &t->cfg;
  const int n = t->sources.n;
  t->val_sampler = mt_calloc((size_t)n, sizeof *t->val_sampler);
  t->val_seq = mt_calloc((size_t)n, sizeof *t->val_seq);
  t->val_by_source = mt_calloc((size_t)n, sizeof *t->val_by_source);
  t->source_names = mt_calloc((size_t)n, sizeof *t->source_names);
  for (int i = 0; i < n; i++) t->source_names[i] = t->sources.src[i].name;
  if (cfg->eval_every <= 0) return;
  uint64_t want = (uint64_t)cfg->eval_batches * (uint64_t)cfg->global_batch;
  for (int i = 0; i < n && !e->failed; i++) {
    const mt_source *src = &t->sources.src[i];
    mt_sampler *vs = &t->val_sampler[i];
    if (src->synthetic_vocab > 0) /* other windows than training's: another key */
      mt_sampler_init_synthetic(vs, src->synthetic_vocab, T,
                                mt_splitmix64((uint64_t)cfg->seed ^ 0x76616cull));
    else if (mt_sampler_init_shards(vs, src->val, src->n_val, T, (uint64_t)cfg->seed, e) != 0) {
      if (n > 1)
        mt_err_set(e, "data.blend source '%s': its validation tokens hold no sequence of T+1 "
                      "= %d tokens (%s)", src->name, T + 1,
                   src->own_val ? "its data.val files" : "raise data.val_fraction");
      break;
    }
    t->val_seq[i] = (int)(vs->n_windows < want ? vs->n_windows : want);
    t->n_val_seq += t->val_seq[i];
  }
}

/* data.train = synthetic, or on the virtual device data.train left at its
 * default (no blend): tokens drawn from the model's vocabulary, no file
 * (the virtual device computes no values; it needs no corpus) */
static int synthetic_data(const mt_trainer *t) {
  const mt_config *cfg = &t->cfg;
  if (!strcmp(cfg->data_train, "synthetic")) return 1;
  if (t->device != MT_DEVICE_VIRTUAL || cfg->data_blend[0]) return 0;
  mt_config *d = mt_malloc(sizeof *d);
  mt_config_defaults(d);
  int dflt = !strcmp(cfg->data_train, d->data_train);
  free(d);
  return dflt;
}

static void setup_data(mt_trainer *t, mt_err *e) {
  const mt_config *cfg = &t->cfg;
  char synth[64];
  snprintf(synth, sizeof synth, "synthetic:%d", t->lay.shape.vocab);
  t->synthetic = synthetic_data(t);
  mt_sources_open(&t->sources, t->synthetic ? synth : cfg->data_train, cfg->data_blend,
                  cfg->data_val, cfg->data_format, cfg->val_fraction, e);
  if (t->synthetic)
    mt_info0("meshtrain: data: synthetic tokens below the vocabulary of %d (%s)",
             t->lay.shape.vocab, strcmp(cfg->data_train, "synthetic")
                                     ? "the virtual device, data.train left at its default"
                                     : "data.train = synthetic");
  mt_err_check_all(e, MPI_COMM_WORLD, PROG);
  /* the validation tokens too, whether files or the held-out tails */
  mt_sources_validate(&t->sources, t->lay.shape.vocab, MPI_COMM_WORLD, e);
  mt_err_check_all(e, MPI_COMM_WORLD, PROG);
  mt_varlen_check(t, e);
  mt_err_check_all(e, MPI_COMM_WORLD, PROG);
  const int T = t->lay.shape.seq_len;
  if (mt_blend_init(&t->blend, &t->sources, T, (uint64_t)cfg->seed, e) == 0 &&
      mt_blend_windows(&t->blend) < (uint64_t)cfg->global_batch)
    mt_err_set(e,
               "%s: the training split holds %llu sequences of %d+1 tokens, fewer than one "
               "global batch of train.global_batch = %d",
               cfg->data_blend[0] ? cfg->data_blend : cfg->data_train,
               (unsigned long long)mt_blend_windows(&t->blend), T, cfg->global_batch);
  if (!e->failed) setup_val(t, T, e);
  mt_err_check_all(e, MPI_COMM_WORLD, PROG);
  report_short(t, T);
}

/* the model, the dp/ZeRO state (initialised), the schedule and executor */
static void setup_compute(mt_trainer *t, mt_err *e) {
  const mt_config *cfg = &t->cfg;
  mt_mesh *mesh = &t->mesh;
  if (cfg->threads > 0) mt_kernels_set_threads(cfg->threads);
  t->ops = t->device == MT_DEVICE_CUDA      ? mt_ops_cuda()
           : t->device == MT_DEVICE_VIRTUAL ? mt_ops_virtual()
           : cfg->trace                     ? mt_ops_cpu_traced()
                                            : mt_ops_cpu();
  int *l0l1 = mt_calloc(2 * (size_t)cfg->pp * t->lay.chunks, sizeof(int));
  mt_step_opts o;
  mt_step_groups g;
  mt_layout_step_opts(cfg, &t->lay, mesh, l0l1, &o, &g);
  mt_step_create(&t->step, &o, &g, t->ops, e);
  free(l0l1);
  mt_err_check_all(e, MPI_COMM_WORLD, PROG);
  /* one stage runs its micro-batches in order (mt_layout_validate) */
  if (cfg->pp == 1 && cfg->virtual_stages > 1)
    mt_info0("meshtrain: note: parallel.virtual_stages = %d and parallel.schedule = %s have no "
             "effect at parallel.pp = 1 (one stage runs its micro-batches in order)",
             cfg->virtual_stages, mt_pp_sched_name(cfg->pp_schedule));
  /* the load-balancing loss only where it balances (train.moe_balance = aux) */
  const mt_moe_balance balance = cfg->moe_balance;
  if (t->lay.shape.moe_experts == 0 && balance != MT_MOE_BALANCE_AUX)
    mt_info0("meshtrain: note: train.moe_balance = %s has no effect: the model is dense "
             "(model.moe_experts = 0)", mt_moe_balance_name(balance));
  mt_gpt_set_moe_loss(&t->step.model, balance == MT_MOE_BALANCE_AUX ? (float)cfg->moe_aux_coef : 0.0f,
                      (float)cfg->moe_z_coef);
  mt_gpt_set_moe_balance(&t->step.model, balance, (float)cfg->moe_bias_rate,
                         (float)cfg->moe_bias_init);
  /* the virtual device holds no values: nothing to initialise */
  if (t->device != MT_DEVICE_VIRTUAL) mt_dp_init_params(&t->step.dp, (uint64_t)cfg->seed);
  /* the step's micro-batches: lay.accum, or under varlen as many as the
   * rows a dp rank can hold take */
  const int varlen = cfg->seq_policy == MT_SEQ_VARLEN, T = t->lay.shape.seq_len;
  t->n_mb = t->lay.accum > 1 ? t->lay.accum : 1;
  int mb_max = t->n_mb;
  if (varlen) {
    mb_max = (mt_varlen_row_cap(t) + cfg->micro_batch - 1) / cfg->micro_batch;
    t->vl_win = mt_calloc((size_t)cfg->global_batch * 2 * T, sizeof(int));
    t->vl_seg_cap = cfg->global_batch * T;
    t->vl_seg = mt_calloc(3 * (size_t)t->vl_seg_cap, sizeof(int));
  }
  size_t n = (size_t)mb_max * cfg->micro_batch * t->step.model.attn.lay.T_local;
  t->inp = mt_calloc(n, sizeof(int));
  t->tgt = mt_calloc(n, sizeof(int));
  if (cfg->documents) {
    t->doc = mt_calloc(n / t->step.model.attn.lay.T_local * T, sizeof(int));
    if (!varlen) t->order = mt_calloc((size_t)cfg->global_batch, sizeof(uint64_t));
  }
  t->rows = mt_calloc((size_t)mb_max, sizeof(int));
}

static void setup_peak(mt_trainer *t) {
  const mt_config *cfg = &t->cfg;
  const mt_model_shape *s = &t->lay.shape;
  double profile_peak = t->precision == MT_PRECISION_BF16 ? t->hw.peak_gflops_bf16
                                                          : t->hw.peak_gflops_fp32;
  if (t->device == MT_DEVICE_VIRTUAL) profile_peak = t->vprof.peak_gflops; /* the emulated one */
  t->peak_per_rank = cfg->peak_gflops > 0 ? cfg->peak_gflops : profile_peak;
  t->peak_source = cfg->peak_gflops > 0 ? "metrics.peak_gflops" : "profile";
  if (t->peak_per_rank <= 0 && t->device == MT_DEVICE_CUDA) {
    t->peak_source = "none"; /* a GPU no profile knows: MFU reads 0 */
  } else if (t->peak_per_rank <= 0) {
    /* measured on every rank at once, so shared cores show up as they will
     * in training; a bf16 run's on its bf16 matmuls (with AMX they pass
     * sgemm: an MFU over sgemm's peak read 142%). The best of the products
     * that fit in 0.15 s (3 or more at n = 1024): within the noise of 0.5 s's
     * on a quiet machine, and 0.35 s less per start. */
    const int bf16 = t->precision == MT_PRECISION_BF16;
    double pk = bf16 ? mt_cpu_bf16_gemm_gflops(1024, 0.15) : mt_cpu_sgemm_gflops(1024, 0.15);
    mt_allreduce(&t->mesh.world, &pk, 1, MT_DT_F64, MT_RED_SUM, MT_LOC_HOST);
    t->peak_per_rank = pk / t->world_size;
    t->peak_source = !bf16 ? "measured-sgemm"
                     : strcmp(mt_bf16_gemm_path(), "onednn") == 0 ? "measured-bf16-onednn"
                                                                  : "measured-bf16-sgemm";
  }
  t->peak_flops = t->peak_per_rank * 1e9 * t->world_size;
  /* the matmul weights a token uses (grouped-query attention's k and v,
   * SwiGLU's three; MoE: the router, its k experts): GPT-2's 12 C^2 L + V C */
  t->flops_per_token = mt_train_flops_per_token_mm(mt_model_active_matmul_weights(s), s->n_layer,
                                                   s->n_embd, s->seq_len);
  t->tokens_per_step = (long long)cfg->global_batch * s->seq_len;
  /* Muon: the optimizer's FLOPs apart from the model's (MFU counts the
   * model's; the step line and summary also give model + optimizer) */
  if (cfg->optim == MT_OPTIM_MUON) {
    t->optimizer_flops = t->optimizer_flops_job = mt_dp_muon_get_stats(&t->step.dp).owned_flops;
    mt_allreduce(&t->mesh.world, &t->optimizer_flops_job, 1, MT_DT_F64, MT_RED_SUM, MT_LOC_HOST);
  }
}

/* a test's slow-down (tests only): MT_TEST_SETUP_SLEEP_S, a slow start-up so
 * a test can stop a run before its first step; MT_TEST_STEP_SLEEP_S, a pause
 * after each step so a test can signal a run at a step it chose, however fast
 * the machine. A stop signal ends the wait. */
void mt_train_test_sleep(const char *env) {
  const char *v = getenv(env);
  double until = v ? mt_now() + atof(v) : 0.0;
  struct timespec ts = {0, 10 * 1000 * 1000};
  while (v && mt_now() < until && !mt_train_signalled()) nanosleep(&ts, NULL);
}

void mt_train_test_die(const mt_trainer *t, long long step) {
  const char *v = getenv("MT_TEST_DIE");
  int rank = -1;
  long long at = -1;
  char marker[1024] = "";
  if (!v || sscanf(v, "%d:%lld:%1023s", &rank, &at, marker) != 3) return;
  if (rank != t->world_rank || at != step) return;
  FILE *f = fopen(marker, "wx"); /* (exists: died once already) */
  if (!f) return;
  fclose(f);
  fprintf(stderr, "meshtrain: test: rank %d kills itself at step %lld (MT_TEST_DIE)\n", rank, step);
  fflush(stderr);
  raise(SIGKILL);
}

void mt_train_watchdog_start(mt_trainer *t) {
  const mt_config *cfg = &t->cfg;
  char dir[2 * MT_CFG_STR_MAX], how[3 * MT_CFG_STR_MAX];
  snprintf(dir, sizeof dir, "%s/flight", cfg->output_dir);
  snprintf(how, sizeof how, " (meshreport flight %s)", cfg->output_dir);
  mt_err err = {0};
  if (t->world_rank == 0 && mt_flight_rotate(dir) != 0)
    mt_err_runtime(&err, "cannot move the earlier flight records '%s' aside: %s", dir,
                   strerror(errno));
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG); /* (also: none starts before it moved) */
  mt_flight_opts o = {.dir = dir, .rank = t->world_rank, .world = t->world_size,
                      .timeout_s = cfg->collective_timeout_s,
                      .step_multiple = cfg->collective_timeout_steps, .prog = PROG,
                      .how_to_read = how};
  if (mt_flight_start(&o) != 0)
    mt_info0("meshtrain: warning: the watchdog thread could not start; blocking calls have no "
             "deadline");
}

void mt_train_setup(mt_trainer *t, const mt_config *cfg) {
  memset(t, 0, sizeof *t);
  t->t_start = mt_wall_now(); /* (a virtual run's clock starts later, at 0) */
  mt_train_install_signals(); /* again: main installs them before MPI_Init */
  mt_train_test_sleep("MT_TEST_SETUP_SLEEP_S");
  t->cfg = *cfg;
  t->last_val = -1.0;
  /* the test hook MT_TEST_POISON=SAMPLE:FACTOR (tests only): the loss of
   * the step that trains on window SAMPLE, times FACTOR (nan: not finite) */
  t->poison = t->poison_factor = 1.0;
  t->poison_sample = UINT64_MAX;
  const char *poison = getenv("MT_TEST_POISON");
  unsigned long long ps = 0;
  char pf[32] = "";
  if (poison && sscanf(poison, "%llu:%31s", &ps, pf) == 2) {
    t->poison_sample = ps;
    t->poison_factor = strtod(pf, NULL); /* (strtod reads "nan") */
  }
  MT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &t->world_rank));
  MT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &t->world_size));
  mt_err err = {0};
  double w[6]; /* wall clock at each phase's end (the start-up's figures on the virtual device) */
  mt_layout_validate(&t->cfg, t->world_size, &t->lay, &err);
  if (!err.failed) mt_hw_profile_load(&t->hw, t->cfg.hw_profile, &err);
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  mt_mesh_create(&t->mesh, t->cfg.tp, t->cfg.cp, t->cfg.dp, t->cfg.pp, &err);
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  mt_mesh_fold(&t->mesh, t->cfg.moe_experts > 0 ? t->cfg.etp : 1,
               t->cfg.moe_experts > 0 ? t->cfg.ep : 1, &err);
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  w[0] = mt_wall_now();
  mt_train_device_setup(t); /* exits 2 on every rank when no device can be had */
  if (t->cfg.trace) { /* (after a virtual clock started) */
    const mt_mesh *ms = &t->mesh;
    char name[128];
    snprintf(name, sizeof name, "rank %d: pp %d tp %d dp %d cp %d", t->world_rank, ms->pp_rank,
             ms->tp_rank, ms->dp_rank, ms->cp_rank);
    mt_trace_start(t->world_rank, ms->pp_rank * t->world_size + t->world_rank, name);
  }
  /* thread placement: rank 0 warns once per node whose ranks have more
   * compute threads than CPUs in their affinity masks */
  if (t->device != MT_DEVICE_VIRTUAL) { /* (a virtual rank computes nothing) */
    char placement[4096];
    if (t->cfg.threads > 0) mt_kernels_set_threads(t->cfg.threads);
    mt_cpu_mask cpus;
    int known = mt_kernels_cpu_mask(&cpus) == 0;
    mt_affinity_check(MPI_COMM_WORLD, mt_kernels_threads(), known ? &cpus : NULL, PROG,
                      placement, sizeof placement);
    if (t->world_rank == 0) fputs(placement, stderr);
  }
  w[1] = mt_wall_now();
  check_memory(t, &err);
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  w[2] = mt_wall_now();
  setup_data(t, &err);
  w[3] = mt_wall_now();
  setup_compute(t, &err);
  w[4] = mt_wall_now();
  setup_peak(t);
  w[5] = mt_wall_now();
  if (t->device == MT_DEVICE_VIRTUAL)
    mt_info0("meshtrain: set-up of %d virtual ranks, wall seconds on rank 0: mesh %.2f, device "
             "%.2f, memory plan %.2f, data %.2f, model %.2f, peak %.2f",
             t->world_size, w[0] - t->t_start, w[1] - w[0], w[2] - w[1], w[3] - w[2],
             w[4] - w[3], w[5] - w[4]);
}

void mt_train_destroy(mt_trainer *t) {
  mt_flight_stop();
  mt_step_destroy(&t->step);
  free(t->inp);
  free(t->tgt);
  free(t->doc);
  free(t->order);
  free(t->vl_win);
  free(t->vl_seg);
  mt_varlen_plan_free(&t->vl_plan);
  free(t->rows);
  for (int i = 0; t->val_sampler && i < t->sources.n; i++) mt_sampler_free(&t->val_sampler[i]);
  free(t->val_sampler);
  free(t->val_seq);
  free(t->val_by_source);
  free(t->spike_hist);
  free(t->source_names);
  mt_blend_free(&t->blend);
  mt_sources_close(&t->sources);
  mt_train_device_destroy(t);
  mt_mesh_destroy(&t->mesh);
  mt_layout_free(&t->lay);
}
