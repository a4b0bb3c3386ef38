/* meshtrain: train (or benchmark) a GPT on the device mesh.
 *
 *   mpirun -n 4 build/bin/meshtrain inputs/default.ini [--set section.key=value ...]
 *
 * Every rank parses and validates the same configuration before the first
 * collective; any bad input ends every rank with one line from rank 0 and
 * exit code 2, before anything under output.dir is touched. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "comm/comm.h"
#include "core/core.h"
#include "data/data.h"
#include "kernels/kernels.h"
#include "metrics/metrics.h"
#include "model/model.h"
#include "parallel/parallel.h"

static const char *PROG = "meshtrain";

static void usage(FILE *f) {
  fprintf(f,
          "usage: meshtrain CONFIG.ini [--set section.key=value ...]\n"
          "       meshtrain --help\n\n"
          "Trains a GPT on pp x dp x cp x tp MPI ranks (launch with mpirun/srun).\n"
          "Writes <output.dir>/metrics.jsonl (one line per step), summary.json and\n"
          "config.ini (the resolved configuration). Exit codes: 0 done, 2 bad input,\n"
          "3 runtime failure.\n\n"
          "Keys (section.key, type, default):\n");
  mt_config_print_help(f);
}

/* ------------------------------------------------------------------ */

static int mkdir_p(const char *path) {
  char tmp[MT_CFG_STR_MAX];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
  return 0;
}

static FILE *open_out(const char *dir, const char *name, const char *mode) {
  char path[2 * MT_CFG_STR_MAX];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, mode);
  if (!f) mt_die("cannot write %s: %s", path, strerror(errno));
  return f;
}

/* Bytes one rank needs, from the shapes alone (before allocating): the
 * parameters this rank holds (from the registry, so tp sharding, vocab
 * padding and, with pipeline stages, the largest stage's tensors are exact),
 * gradients, AdamW moments (divided over dp under ZeRO) and the activations
 * of one micro-batch, whose per-layer part tp divides. With 1F1B a stage
 * holds up to pp micro-batches of L/pp layers: as much activation memory as
 * pp = 1. stage_of_layer: NULL without pipeline parallelism. */
static double bytes_needed(const mt_model_shape *s, const mt_config *cfg,
                           const int *stage_of_layer) {
  mt_registry reg;
  mt_registry_init(&reg, cfg->tp, 0);
  char msg[256];
  double n = (double)mt_model_num_params(s);
  if (mt_gpt_register(&reg, s, cfg->tp, 0, cfg->sp, msg, sizeof msg) == 0) {
    n = (double)reg.numel_local;
    for (int r = 0; stage_of_layer && r < cfg->pp; r++)
      if (mt_gpt_register_stages(&reg, stage_of_layer, cfg->pp - 1, r, msg, sizeof msg) == 0)
        n = r == 0 || (double)reg.numel_local > n ? (double)reg.numel_local : n;
  }
  mt_registry_free(&reg);
  double B = cfg->micro_batch, T = s->seq_len, C = s->n_embd, L = s->n_layer, NH = s->n_head;
  double tp = cfg->tp, dp = cfg->dp;
  double acts = (L * B * T * (C * 10 + 3 * C + 8 * C + 2) + L * B * NH * T * T) / tp +
                B * T * (2 * C + s->vocab_padded / tp + 3) + B * T * (C * 12) + B * NH * T * T / tp;
  double optim = 2.0 * n / (cfg->zero ? dp : 1);
  return 4.0 * (2.0 * n + optim + (cfg->zero ? n / dp : 0.0) + acts);
}

static double mem_available_bytes(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  double kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
  fclose(f);
  return kb * 1024.0;
}

/* ------------------------------------------------------------------ */
/* preemption: a signal only sets a flag; the ranks agree on it at the next
 * step boundary, checkpoint, and exit with MT_EXIT_PREEMPTED */

static volatile sig_atomic_t g_stop_signal = 0;
static void on_stop_signal(int sig) { g_stop_signal = sig; }

static void install_signal_handlers(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

/* Keep the metrics of steps <= last_step (a resumed run continues the file). */
static void truncate_metrics(const char *dir, long long last_step) {
  char path[2 * MT_CFG_STR_MAX], tmp[2 * MT_CFG_STR_MAX + 8];
  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *in = fopen(path, "r");
  if (!in) return;
  FILE *out = fopen(tmp, "w");
  if (!out) {
    fclose(in);
    return;
  }
  char line[1 << 14];
  while (fgets(line, sizeof line, in)) {
    long long step = -1;
    const char *p = strstr(line, "\"step\":");
    if (p && sscanf(p + 7, "%lld", &step) == 1 && step <= last_step) fputs(line, out);
  }
  fclose(in);
  fclose(out);
  rename(tmp, path);
}

typedef struct {
  mt_dp *dp;
  const mt_gpt *model;
} hook_ctx;

static void grads_ready(void *ctx, int layer) {
  hook_ctx *h = ctx;
  size_t begin = mt_gpt_layer_offset(h->model, layer);
  /* sequence parallelism: sum the layer's partial gradients over tp (once per
   * step, accumulation included) before dp reduces them */
  mt_tp_reduce_partial_grads(&h->model->tp, &h->model->reg, h->model->grads, begin,
                             mt_gpt_layer_offset(h->model, layer + 1));
  mt_dp_grads_ready(h->dp, begin);
}

/* Mean validation loss over the first n_seq windows of the validation set,
 * split over dp ranks; the same for any dp. */
static double evaluate(mt_gpt *m, const mt_sampler *val, int n_seq, int micro_batch,
                       mt_mesh *mesh, int *inp, int *tgt) {
  int T = m->T;
  double acc[2] = {0.0, 0.0}; /* sum of per-sequence mean losses, sequences */
  int per = (n_seq + mesh->dp - 1) / mesh->dp;
  int first = mesh->dp_rank * per, last = first + per < n_seq ? first + per : n_seq;
  for (int s = first; s < last; s += micro_batch) {
    int B = last - s < micro_batch ? last - s : micro_batch;
    for (int b = 0; b < B; b++)
      mt_sampler_get_window(val, (uint64_t)(s + b), inp + (size_t)b * T, tgt + (size_t)b * T);
    acc[0] += (double)mt_gpt_forward(m, inp, tgt, B) * B;
    acc[1] += B;
  }
  mt_allreduce_sum_f64(&mesh->dp_g, acc, 2);
  return acc[1] > 0 ? acc[0] / acc[1] : 0.0;
}

/* A checkpoint save failed (disk full, no permission, ...): every rank has the
 * same agreed message; rank 0 prints it once and every rank exits with 3. The
 * previous complete checkpoint is untouched. */
static void exit_checkpoint_failed(const mt_err *e) {
  mt_err_report(e, PROG);
  MPI_Finalize();
  exit(MT_EXIT_RUNTIME);
}

/* Checkpoint the state at `step` (steps completed) into <output.dir>/checkpoints.
 * With async non-NULL the save is started in the background (*async holds it
 * until mt_ckpt_async_poll commits it). Returns the blocking time, seconds. */
static double save_checkpoint(const mt_config *cfg, mt_mesh *mesh, mt_gpt *model, mt_dp *dp,
                              long long step, long long samples, int is_final,
                              mt_ckpt_async **async) {
  double t0 = mt_now();
  mt_flat_range *r[MT_CKPT_NGROUPS];
  mt_ckpt_state st;
  for (int g = 0; g < MT_CKPT_NGROUPS; g++) {
    st.n_ranges[g] = mt_dp_state_ranges(dp, g, 1, &r[g]);
    st.ranges[g] = r[g];
  }
  mt_ckpt_meta meta = {step, samples, samples * model->T, dp->opt.t, cfg->seed,
                       model->shape.n_layer, model->shape.n_embd, model->shape.n_head,
                       model->shape.seq_len, model->shape.vocab, cfg->dp, cfg->tp, cfg->pp,
                       cfg->cp, cfg->zero, mesh->world_size};
  char *ini = NULL;
  size_t ini_len = 0;
  FILE *mf = open_memstream(&ini, &ini_len);
  mt_config_write_ini(cfg, mf);
  fclose(mf);
  mt_ckpt_save_opts opts = {cfg->ckpt_mode, cfg->ckpt_keep,
                            is_final ? cfg->ckpt_test_crash : "none", ini};
  char root[2 * MT_CFG_STR_MAX];
  snprintf(root, sizeof root, "%s/checkpoints", cfg->output_dir);
  mt_err e = {0};
  if (async) {
    *async = mt_ckpt_async_begin(root, &meta, &model->reg, mesh, &st, &opts, &e);
    if (!*async) exit_checkpoint_failed(&e);
  } else if (mt_ckpt_save(root, &meta, &model->reg, mesh, &st, &opts, NULL, &e) != 0) {
    exit_checkpoint_failed(&e);
  }
  free(ini);
  for (int g = 0; g < MT_CKPT_NGROUPS; g++) free(r[g]);
  return mt_now() - t0;
}

/* Commit the background save if it is done (wait: make it be done). */
static void poll_async(mt_ckpt_async **a, int wait, double *write_s) {
  if (!*a) return;
  mt_err e = {0};
  int64_t step = 0;
  double w = 0.0;
  int rc = mt_ckpt_async_poll(a, wait, &w, &step, &e);
  if (rc < 0) exit_checkpoint_failed(&e);
  if (rc == 1) {
    *write_s += w;
    mt_info0("meshtrain: checkpoint step_%lld committed (written in the background in %.2f s)",
             (long long)step, w);
  }
}

/* ------------------------------------------------------------------ */
/* pipeline parallelism: this rank's stage, as the executor sees it     */

#define MT_PP_MAX_CHUNKS 64

typedef struct {
  mt_gpt *model;
  int pp, v, rank, last_vs;
  int l0[MT_PP_MAX_CHUNKS], l1[MT_PP_MAX_CHUNKS]; /* layers of each chunk */
  int B, T;          /* micro-batch sequences (slots are laid out for B), tokens */
  int n_mb;          /* micro-batches of this run */
  int *inp, *tgt;    /* (n_mb, B, T) */
  int *rows;         /* sequences in each micro-batch (<= B) */
  int n_slots;
  size_t set_numel;  /* floats of one activation set (the largest chunk) */
  float **slot_mem;  /* allocated at first use, kept */
  mt_gpt_acts *acts;
  double loss_sum;   /* last virtual stage: sum of position losses of this run */
  float dloss;
} pp_stage;

static size_t pp_msg_numel(void *ctx, int mb) {
  pp_stage *st = ctx;
  return (size_t)st->rows[mb] * st->model->T_sp * st->model->shape.n_embd;
}

static mt_gpt_acts *pp_bind(pp_stage *st, int slot, int chunk) {
  if (!st->slot_mem[slot])
    st->slot_mem[slot] = mt_mem_alloc(MT_MEM_ACTIV, st->set_numel * sizeof(float));
  int vs = chunk * st->pp + st->rank;
  mt_gpt_acts_bind(st->model, &st->acts[slot], st->slot_mem[slot],
                   st->l1[chunk] - st->l0[chunk], st->B, vs == st->last_vs);
  return &st->acts[slot];
}

static float *pp_input(void *ctx, int slot, int chunk) {
  return pp_bind(ctx, slot, chunk)->encoded;
}

static float *pp_forward(void *ctx, int slot, int mb, int chunk) {
  pp_stage *st = ctx;
  int vs = chunk * st->pp + st->rank, first = vs == 0, last = vs == st->last_vs;
  mt_gpt_acts *a = first ? pp_bind(st, slot, chunk) : &st->acts[slot];
  size_t off = (size_t)mb * st->B * st->T;
  st->loss_sum += mt_gpt_forward_range(st->model, a, st->l0[chunk], st->l1[chunk], first, last,
                                       st->inp + off, st->tgt + off, st->rows[mb]);
  return last ? NULL : mt_gpt_range_output(st->model, a, st->l1[chunk] - st->l0[chunk],
                                           st->rows[mb]);
}

static const float *pp_backward(void *ctx, int slot, int mb, int chunk, const float *dout,
                                int input_only) {
  pp_stage *st = ctx;
  int vs = chunk * st->pp + st->rank, first = vs == 0, last = vs == st->last_vs;
  size_t off = (size_t)mb * st->B * st->T;
  const float *din =
      (input_only ? mt_gpt_backward_range_input : mt_gpt_backward_range)(
          st->model, &st->acts[slot], st->l0[chunk], st->l1[chunk], first, last, st->inp + off,
          st->tgt + off, dout, st->dloss, st->rows[mb]);
  return first ? NULL : din;
}

static void pp_backward_weight(void *ctx, int slot, int mb, int chunk) {
  pp_stage *st = ctx;
  int last = chunk * st->pp + st->rank == st->last_vs;
  mt_gpt_backward_range_weight(st->model, &st->acts[slot], st->l0[chunk], st->l1[chunk], last,
                               st->rows[mb]);
}

/* Validation loss through the pipeline: as evaluate(), with the micro-batches
 * of this dp rank's sequences forwarded by a GPipe schedule (forward only);
 * the last stage's loss is summed over pp. */
static double pp_evaluate(pp_stage *st, mt_group *pp_g, const mt_sampler *val, int n_seq,
                          int micro_batch, mt_mesh *mesh) {
  int T = st->T;
  double acc[2] = {0.0, 0.0};
  int per = (n_seq + mesh->dp - 1) / mesh->dp;
  int first = mesh->dp_rank * per, last = first + per < n_seq ? first + per : n_seq;
  int n_mb = last > first ? (last - first + micro_batch - 1) / micro_batch : 0;
  int *inp = st->inp, *tgt = st->tgt, *rows = st->rows;
  st->inp = mt_calloc((size_t)(n_mb + 1) * micro_batch * T, sizeof(int));
  st->tgt = mt_calloc((size_t)(n_mb + 1) * micro_batch * T, sizeof(int));
  st->rows = mt_calloc((size_t)n_mb + 1, sizeof(int));
  for (int k = 0; k < n_mb; k++) {
    int s0 = first + k * micro_batch;
    st->rows[k] = last - s0 < micro_batch ? last - s0 : micro_batch;
    for (int b = 0; b < st->rows[k]; b++) {
      size_t off = ((size_t)k * micro_batch + b) * T;
      mt_sampler_get_window(val, (uint64_t)(s0 + b), st->inp + off, st->tgt + off);
    }
    acc[1] += st->rows[k];
  }
  st->loss_sum = 0.0;
  if (n_mb > 0) {
    mt_pp_schedule s;
    /* forward only: one activation set suffices (released after each forward) */
    mt_pp_schedule_build(&s, MT_SCHED_GPIPE, st->pp, n_mb, st->v);
    mt_pp_exec x;
    mt_pp_stage_fns fns = {st, pp_msg_numel, pp_input, pp_forward, pp_backward, NULL};
    mt_pp_exec_create(&x, pp_g, &s, &fns, st->n_slots, (size_t)micro_batch * st->model->T_sp *
                                                           st->model->shape.n_embd);
    mt_pp_exec_run(&x, 1);
    mt_pp_exec_destroy(&x);
    mt_pp_schedule_free(&s);
  }
  acc[0] = st->loss_sum / T;
  mt_allreduce_sum_f64(pp_g, acc, 1);
  free(st->inp); free(st->tgt); free(st->rows);
  st->inp = inp; st->tgt = tgt; st->rows = rows;
  mt_allreduce_sum_f64(&mesh->dp_g, acc, 2);
  return acc[1] > 0 ? acc[0] / acc[1] : 0.0;
}

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

int main(int argc, char **argv) {
  /* FUNNELED: the asynchronous checkpoint writer is a second thread (it makes
   * no MPI call); OpenMP compute threads make none either */
  int thread_level = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &thread_level);
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  mt_log_init(world_rank);
  mt_err err = {0};

  /* ---- arguments and configuration (no collective before validation) ---- */
  const char *ini = NULL;
  char **over = mt_calloc((size_t)argc + 1, sizeof(char *));
  int n_over = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      if (world_rank == 0) usage(stdout);
      free(over);
      MPI_Finalize();
      return 0;
    } else if (strcmp(argv[i], "--set") == 0) {
      if (i + 1 >= argc) mt_err_set(&err, "--set needs section.key=value");
      else over[n_over++] = argv[++i];
    } else if (strcmp(argv[i], "--print-schedule") == 0) {
      over[n_over++] = "parallel.print_schedule=true";
    } else if (strncmp(argv[i], "--set=", 6) == 0) {
      over[n_over++] = argv[i] + 6;
    } else if (argv[i][0] == '-') {
      mt_err_set(&err, "unknown option '%s' (see --help)", argv[i]);
    } else if (!ini) {
      ini = argv[i];
    } else {
      mt_err_set(&err, "more than one config file given ('%s' and '%s')", ini, argv[i]);
    }
  }
  mt_config cfg;
  if (!err.failed) mt_config_load(&cfg, ini, n_over, over, &err);
  free(over);
  mt_model_shape shape;
  if (!err.failed) mt_model_shape_from_config(&cfg, &shape, &err);
  if (!err.failed) {
    int accum_div = cfg.micro_batch * cfg.dp;
    if (cfg.cp != 1)
      mt_err_set(&err,
                 "parallel.cp = %d: this build trains with data, tensor and pipeline "
                 "parallelism only (cp = 1)",
                 cfg.cp);
    else if (world_size % cfg.tp != 0)
      mt_err_set(&err, "parallel.tp = %d does not divide the %d MPI ranks launched", cfg.tp,
                 world_size);
    else if (cfg.sp && cfg.tp == 1)
      mt_err_set(&err, "parallel.sp = true needs parallel.tp > 1 (sequence parallelism splits "
                       "the sequence over the tensor-parallel ranks)");
    else if (cfg.global_batch % accum_div != 0)
      mt_err_set(&err,
                 "train.global_batch = %d is not divisible by train.micro_batch x parallel.dp "
                 "= %d x %d = %d",
                 cfg.global_batch, cfg.micro_batch, cfg.dp, accum_div);
    else if (!cfg.data_val[0] && cfg.val_fraction <= 0.0 && cfg.eval_every > 0)
      mt_err_set(&err, "data.val is empty and data.val_fraction = 0: no validation data "
                       "(set one, or train.eval_every = 0)");
    else if (!cfg.output_dir[0])
      mt_err_set(&err, "output.dir is empty");
    else if (cfg.ckpt_async && strcmp(cfg.ckpt_mode, "per-writer") != 0)
      mt_err_set(&err, "ckpt.async = true needs ckpt.mode = per-writer (each rank writes its own "
                       "file in the background; ckpt.mode is %s)", cfg.ckpt_mode);
    else if (cfg.ckpt_async && thread_level < MPI_THREAD_FUNNELED)
      mt_err_set(&err, "ckpt.async = true needs MPI_THREAD_FUNNELED (a writer thread); this MPI "
                       "library gives level %d", thread_level);
  }
  /* pipeline: micro-batches, stage split, schedule */
  int pp_m = 0, pp_sched = MT_SCHED_1F1B, pp_split[MT_PP_MAX_CHUNKS];
  if (!err.failed) {
    pp_m = cfg.global_batch / (cfg.micro_batch * cfg.dp);
    pp_sched = mt_pp_sched_parse(cfg.pp_schedule);
    if (cfg.micro_batches > 0 && cfg.micro_batches != pp_m)
      mt_err_set(&err,
                 "train.micro_batches = %d does not match train.global_batch / (train.micro_batch "
                 "x parallel.dp) = %d / (%d x %d) = %d (set it to 0 or change the batch)",
                 cfg.micro_batches, cfg.global_batch, cfg.micro_batch, cfg.dp, pp_m);
    else if (cfg.pp > 1 && cfg.save_params)
      mt_err_set(&err, "output.save_params = true needs parallel.pp = 1 (each pipeline stage "
                       "holds only its own parameters)");
    else if (cfg.pp > MT_PP_MAX_CHUNKS || cfg.virtual_stages > MT_PP_MAX_CHUNKS)
      mt_err_set(&err, "parallel.pp = %d, parallel.virtual_stages = %d: at most %d each", cfg.pp,
                 cfg.virtual_stages, MT_PP_MAX_CHUNKS);
    else if (cfg.pp_split[0] && cfg.virtual_stages > 1)
      mt_err_set(&err, "parallel.pp_split needs parallel.virtual_stages = 1");
    else if (cfg.pp_split[0])
      parse_pp_split(cfg.pp_split, cfg.pp, shape.n_layer, pp_split, &err);
    else if (shape.n_layer % cfg.pp != 0)
      mt_err_set(&err,
                 "parallel.pp = %d does not divide model.n_layer = %d (or give "
                 "parallel.pp_split)", cfg.pp, shape.n_layer);
    else if ((shape.n_layer / cfg.pp) % cfg.virtual_stages != 0)
      mt_err_set(&err,
                 "parallel.virtual_stages = %d does not divide the %d layers per stage "
                 "(model.n_layer = %d over parallel.pp = %d)",
                 cfg.virtual_stages, shape.n_layer / cfg.pp, shape.n_layer, cfg.pp);
    if (!err.failed)
      mt_pp_sched_check((mt_pp_sched)pp_sched, cfg.pp, pp_m, cfg.virtual_stages, shape.n_layer,
                        &err);
  }
  mt_pp_schedule pp_s;
  memset(&pp_s, 0, sizeof pp_s);
  if (!err.failed) {
    mt_pp_schedule_build(&pp_s, (mt_pp_sched)pp_sched, cfg.pp, pp_m, cfg.virtual_stages);
    char msg[256];
    mt_pp_sim sim;
    if (mt_pp_schedule_validate(&pp_s, 1, 2, 1, 1, &sim, msg, sizeof msg) != 0)
      mt_err_set(&err, "parallel.schedule = %s: invalid schedule: %s", cfg.pp_schedule, msg);
    else if (cfg.print_schedule) {
      if (world_rank == 0) {
        for (int r = 0; r < cfg.pp; r++) mt_pp_schedule_print(&pp_s, r, stdout);
        printf("# simulated bubble (F = 1, B = 2 per stage) %.4f\n", sim.bubble);
      }
      mt_pp_schedule_free(&pp_s);
      MPI_Finalize();
      return 0;
    }
  }
  mt_hw_profile hw;
  if (!err.failed) mt_hw_profile_load(&hw, cfg.hw_profile, &err);
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);

  mt_mesh mesh;
  mt_mesh_create(&mesh, cfg.tp, cfg.cp, cfg.dp, cfg.pp, &err);
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);

  /* pipeline: the stage of each layer (virtual stage vs runs on pp rank vs % pp) */
  int *stage_of_layer = NULL;
  if (cfg.pp > 1) {
    stage_of_layer = mt_calloc((size_t)shape.n_layer, sizeof(int));
    for (int vs = 0; vs < cfg.pp * cfg.virtual_stages; vs++) {
      int a, b;
      mt_pp_stage_layers(shape.n_layer, cfg.pp, cfg.virtual_stages,
                         cfg.pp_split[0] ? pp_split : NULL, vs, &a, &b);
      for (int l = a; l < b; l++) stage_of_layer[l] = vs % cfg.pp;
    }
  }

  /* ---- memory: refuse what cannot fit before allocating it ---- */
  {
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int local_ranks = 1;
    MPI_Comm_size(node, &local_ranks);
    MPI_Comm_free(&node);
    double need = bytes_needed(&shape, &cfg, stage_of_layer);
    double avail = mem_available_bytes();
    if (avail > 0 && need * local_ranks > avail)
      mt_err_set(&err,
                 "model %s with train.micro_batch = %d needs about %.2f GiB per rank; %d ranks "
                 "on this node need %.2f GiB but only %.2f GiB is available (lower "
                 "train.micro_batch or model size, or use more nodes)",
                 cfg.model_preset, cfg.micro_batch, need / 1073741824.0, local_ranks,
                 need * local_ranks / 1073741824.0, avail / 1073741824.0);
  }
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);

  /* ---- data ---- */
  mt_dataset train_file, val_file, train_ds, val_ds;
  memset(&train_file, 0, sizeof train_file);
  memset(&val_file, 0, sizeof val_file);
  int have_val_file = cfg.data_val[0] != '\0';
  if (mt_dataset_open(&train_file, cfg.data_train, cfg.data_format, &err) == 0) {
    if (have_val_file) {
      train_ds = train_file;
      train_ds.owns_map = 0;
      if (mt_dataset_open(&val_file, cfg.data_val, cfg.data_format, &err) == 0) {
        val_ds = val_file;
        val_ds.owns_map = 0;
      }
    } else {
      mt_dataset_split(&train_file, cfg.val_fraction, &train_ds, &val_ds);
    }
  }
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  mt_dataset_validate(&train_ds, shape.vocab, MPI_COMM_WORLD, &err);
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  if (have_val_file) mt_dataset_validate(&val_ds, shape.vocab, MPI_COMM_WORLD, &err);
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  mt_sampler sampler, val_sampler;
  const int T = shape.seq_len;
  if (mt_sampler_init(&sampler, &train_ds, T, (uint64_t)cfg.seed, &err) == 0 &&
      sampler.n_windows < (uint64_t)cfg.global_batch)
    mt_err_set(&err,
               "%s: the training split holds %llu sequences of %d+1 tokens, fewer than one "
               "global batch of train.global_batch = %d",
               cfg.data_train, (unsigned long long)sampler.n_windows, T, cfg.global_batch);
  int n_val_seq = 0;
  if (!err.failed && cfg.eval_every > 0 &&
      mt_sampler_init(&val_sampler, &val_ds, T, (uint64_t)cfg.seed, &err) == 0) {
    uint64_t want = (uint64_t)cfg.eval_batches * (uint64_t)cfg.global_batch;
    n_val_seq = (int)(val_sampler.n_windows < want ? val_sampler.n_windows : want);
  }
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);

  /* ---- compute set-up ---- */
  if (cfg.threads > 0) mt_kernels_set_threads(cfg.threads);
  const mt_ops *ops = mt_ops_cpu();
  mt_gpt model;
  /* zb-h1 splits each backward into input and weight passes (the sets keep
   * the linears' output gradients in between) */
  mt_gpt_parallel split = {&mesh.tp_g, cfg.sp, cfg.recompute,
                           cfg.pp > 1 && pp_sched == MT_SCHED_ZBH1, NULL, 0, 0};
  if (cfg.pp > 1) { /* this rank's stage holds only its tensors */
    split.stage_of_layer = stage_of_layer;
    split.pp_rank = mesh.pp_rank;
    split.pp_last = cfg.pp - 1;
  }
  if (cfg.pp > 1)
    mt_gpt_create_stage(&model, &shape, ops, cfg.micro_batch, &split, &err);
  else
    mt_gpt_create_parallel(&model, &shape, ops, cfg.micro_batch, &split, &err);
  free(stage_of_layer);
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  mt_gpt_init_params(&model, (uint64_t)cfg.seed);
  mt_dp dp;
  mt_dp_create(&dp, &mesh.dp_g, cfg.zero, &model.reg, ops, model.params, model.grads,
               (size_t)(cfg.bucket_mb * 1048576.0), (float)cfg.beta1, (float)cfg.beta2,
               (float)cfg.eps, (float)cfg.weight_decay);
  mt_dp_set_tp(&dp, &mesh.tp_g);

  /* ---- pipeline stage: layers, owned tensors, executor ---- */
  pp_stage stage;
  mt_pp_exec pp_x;
  memset(&stage, 0, sizeof stage);
  memset(&pp_x, 0, sizeof pp_x);
  const mt_tensor *wte_t = &model.reg.t[mt_registry_find(&model.reg, "wte.weight")];
  float *wte_peer = NULL; /* the other end's wte gradient (first and last stage) */
  if (cfg.pp > 1) {
    stage.model = &model;
    stage.pp = cfg.pp;
    stage.v = cfg.virtual_stages;
    stage.rank = mesh.pp_rank;
    stage.last_vs = cfg.pp * cfg.virtual_stages - 1;
    stage.B = cfg.micro_batch;
    stage.T = T;
    for (int vs = 0; vs <= stage.last_vs; vs++) {
      int a, b;
      mt_pp_stage_layers(shape.n_layer, cfg.pp, cfg.virtual_stages,
                         cfg.pp_split[0] ? pp_split : NULL, vs, &a, &b);
      if (vs % cfg.pp == mesh.pp_rank) {
        stage.l0[vs / cfg.pp] = a;
        stage.l1[vs / cfg.pp] = b;
        size_t n = mt_gpt_acts_numel(&model, b - a, cfg.micro_batch, vs == stage.last_vs);
        if (n > stage.set_numel) stage.set_numel = n;
      }
    }
    stage.n_slots = pp_s.max_inflight[mesh.pp_rank];
    stage.slot_mem = mt_calloc((size_t)stage.n_slots, sizeof(float *));
    stage.acts = mt_calloc((size_t)stage.n_slots, sizeof(mt_gpt_acts));
    size_t max_mb = (size_t)(pp_m > 1 ? pp_m : 1);
    stage.inp = mt_calloc(max_mb * cfg.micro_batch * T, sizeof(int));
    stage.tgt = mt_calloc(max_mb * cfg.micro_batch * T, sizeof(int));
    stage.rows = mt_calloc(max_mb, sizeof(int));
    mt_pp_stage_fns fns = {&stage, pp_msg_numel, pp_input, pp_forward, pp_backward,
                           model.split_backward ? pp_backward_weight : NULL};
    mt_pp_exec_create(&pp_x, &mesh.pp_g, &pp_s, &fns, stage.n_slots,
                      (size_t)cfg.micro_batch * model.T_sp * shape.n_embd);
    /* the tied embedding: the last stage's copy leaves the norm (the first counts it) */
    if (mesh.pp_rank == cfg.pp - 1)
      mt_dp_set_pp(&dp, &mesh.pp_g, wte_t->offset, wte_t->offset + wte_t->numel_local);
    else
      mt_dp_set_pp(&dp, &mesh.pp_g, 0, 0);
    if (mesh.pp_rank == 0 || mesh.pp_rank == cfg.pp - 1)
      wte_peer = mt_calloc(wte_t->numel_local, sizeof(float));
  }

  /* ---- resume: load whatever layout wrote it into this one ---- */
  long long start_step = 0, samples_done = 0;
  char resumed_from[2 * MT_CFG_STR_MAX] = "";
  if (cfg.resume[0]) {
    char root[2 * MT_CFG_STR_MAX];
    snprintf(root, sizeof root, "%s/checkpoints", cfg.output_dir);
    int found = 0;
    if (mt_ckpt_resolve(cfg.resume, root, resumed_from, sizeof resumed_from, &found, &err) == 0 &&
        found) {
      mt_flat_range *r[MT_CKPT_NGROUPS];
      mt_ckpt_state st;
      for (int g = 0; g < MT_CKPT_NGROUPS; g++) {
        st.n_ranges[g] = mt_dp_state_ranges(&dp, g, 0, &r[g]);
        st.ranges[g] = r[g];
      }
      mt_ckpt_meta want = {0}, got;
      want.n_layer = shape.n_layer;
      want.n_embd = shape.n_embd;
      want.n_head = shape.n_head;
      want.seq_len = shape.seq_len;
      want.vocab = shape.vocab;
      double tl = mt_now();
      if (mt_ckpt_load(resumed_from, &model.reg, &mesh, &st, &want, cfg.ckpt_verify_on_load, &got,
                       &err) == 0) {
        start_step = got.step;
        samples_done = got.samples;
        dp.opt.t = (int)got.optimizer_step;
        if (got.seed != cfg.seed) {
          /* the data order is (seed, sample index): keep the checkpoint's stream */
          mt_info0("meshtrain: train.seed %d differs from the checkpoint's %lld; continuing the "
                   "checkpoint's data order", cfg.seed, (long long)got.seed);
          cfg.seed = (int)got.seed;
          mt_sampler_init(&sampler, &train_ds, T, (uint64_t)cfg.seed, &err);
        }
        if (start_step > cfg.steps)
          mt_err_set(&err, "train.resume: checkpoint %s is at step %lld, beyond train.steps = %d",
                     resumed_from, start_step, cfg.steps);
        mt_info0("meshtrain: resumed from %s (step %lld, written by dp=%lld tp=%lld pp=%lld "
                 "zero=%lld on %lld ranks) in %.2f s",
                 resumed_from, start_step, (long long)got.dp, (long long)got.tp, (long long)got.pp,
                 (long long)got.zero, (long long)got.world, mt_now() - tl);
      }
      for (int g = 0; g < MT_CKPT_NGROUPS; g++) free(r[g]);
    } else if (!err.failed) {
      mt_info0("meshtrain: train.resume = auto: no checkpoint in %s, starting fresh", root);
      resumed_from[0] = '\0';
    }
    mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  }
  install_signal_handlers();

  double peak_per_rank = cfg.peak_gflops > 0 ? cfg.peak_gflops : hw.peak_gflops_fp32;
  const char *peak_source = cfg.peak_gflops > 0 ? "metrics.peak_gflops" : "profile";
  if (peak_per_rank <= 0) {
    /* measured on every rank at once, so shared cores show up as they will in training */
    peak_per_rank = mt_cpu_sgemm_gflops(1024, 0.5);
    double pk = peak_per_rank;
    mt_allreduce_sum_f64(&mesh.world, &pk, 1);
    peak_per_rank = pk / world_size;
    peak_source = "measured-sgemm";
  }
  const double peak_flops = peak_per_rank * 1e9 * world_size;
  const double flops_per_token =
      mt_train_flops_per_token(shape.n_layer, shape.n_embd, shape.seq_len, shape.vocab);
  const long long tokens_per_step = (long long)cfg.global_batch * T;
  const int per_rank = cfg.global_batch / cfg.dp;
  const int accum = per_rank / cfg.micro_batch;

  /* ---- outputs (only now: a run refused above leaves earlier results alone) ---- */
  FILE *metrics_f = NULL;
  if (world_rank == 0) {
    if (mkdir_p(cfg.output_dir) != 0) mt_err_set(&err, "output.dir: cannot create '%s': %s",
                                                 cfg.output_dir, strerror(errno));
  }
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  if (world_rank == 0) {
    FILE *f = open_out(cfg.output_dir, "config.ini", "w");
    mt_config_write_ini(&cfg, f);
    fclose(f);
    if (resumed_from[0]) truncate_metrics(cfg.output_dir, start_step);
    metrics_f = open_out(cfg.output_dir, "metrics.jsonl", resumed_from[0] ? "a" : "w");
    mt_info0("meshtrain: %s, %zu parameters (L=%d C=%d H=%d T=%d V=%d), mesh dp=%d tp=%d "
             "pp=%d cp=%d, zero=%d, %d ranks x %d threads",
             cfg.model_preset, mt_model_num_params(&shape), shape.n_layer, shape.n_embd,
             shape.n_head, T, shape.vocab, cfg.dp, cfg.tp, cfg.pp, cfg.cp, cfg.zero,
             world_size, mt_kernels_threads());
    mt_info0("meshtrain: global batch %d x %d tokens, micro-batch %d, %d accumulation steps, "
             "%d dp buckets, peak %.1f GFLOP/s per rank (%s), BLAS kernels %s",
             cfg.global_batch, T, cfg.micro_batch, accum, dp.n_buckets, peak_per_rank,
             peak_source, mt_kernels_blas_core());
  }

  /* ---- training loop ---- */
  int *inp = mt_calloc((size_t)cfg.micro_batch * T, sizeof(int));
  int *tgt = mt_calloc((size_t)cfg.micro_batch * T, sizeof(int));
  hook_ctx hctx = {&dp, &model};
  const float dloss = 1.0f / (float)tokens_per_step;
  double t_train0 = mt_now(), total_step_s = 0.0, first_loss = 0.0, last_loss = 0.0;
  double last_val = -1.0, sum_tok_s = 0.0;
  int timed_steps = 0;
  int exit_code = MT_EXIT_OK, stop = 0;
  /* a checkpoint's blocking and write times show in the next step's record */
  double pending_ckpt_s = 0.0, pending_write_s = 0.0, total_ckpt_s = 0.0;
  mt_ckpt_async *inflight = NULL;
  long long last_step_done = start_step;
  long long last_saved = start_step;
  for (int step = (int)start_step; step < cfg.steps && !stop; step++) {
    double t0 = mt_now(), comm0 = mesh.dp_g.seconds, bytes0 = mesh.dp_g.bytes;
    double tp_s0 = mesh.tp_g.seconds, tp_bytes0 = mesh.tp_g.bytes;
    double data_s = 0.0, loss_sum = 0.0;
    mt_gpt_zero_grad(&model);
    double pp_s0 = mesh.pp_g.seconds, pp_bytes0 = mesh.pp_g.bytes;
    double pp_stats[3] = {0.0, 0.0, 0.0}; /* this stage: wait s, bubble fraction, act bytes */
    if (cfg.pp > 1) {
      double td = mt_now();
      for (int mb = 0; mb < accum; mb++) {
        uint64_t g0 = (uint64_t)samples_done + (uint64_t)(step - start_step) * cfg.global_batch +
                      (uint64_t)mesh.dp_rank * per_rank + (uint64_t)mb * cfg.micro_batch;
        for (int b = 0; b < cfg.micro_batch; b++) {
          size_t off = ((size_t)mb * cfg.micro_batch + b) * T;
          mt_sampler_get(&sampler, g0 + b, stage.inp + off, stage.tgt + off);
        }
        stage.rows[mb] = cfg.micro_batch;
      }
      data_s += mt_now() - td;
      stage.n_mb = accum;
      stage.loss_sum = 0.0;
      stage.dloss = dloss;
      mt_pp_exec_run(&pp_x, 0);
      pp_stats[0] = pp_x.wait_s;
      pp_stats[1] = pp_x.wall_s > 0 ? 1.0 - pp_x.compute_s / pp_x.wall_s : 0.0;
      /* the sets held at once, and recompute's one-layer workspace */
      pp_stats[2] = (double)pp_x.peak_slots * (double)stage.set_numel * sizeof(float) +
                    (double)model.ws_bytes;
      /* tied embedding: both ends add the other's wte gradient (a + b == b + a: they stay
       * bitwise equal, and so do their updates) */
      if (wte_peer) {
        float *gw = model.grads + wte_t->offset;
        int peer = mesh.pp_rank == 0 ? cfg.pp - 1 : 0;
        mt_sendrecv_f32(&mesh.pp_g, gw, wte_peer, wte_t->numel_local, peer, 13);
        for (size_t i = 0; i < wte_t->numel_local; i++) gw[i] += wte_peer[i];
      }
      if (model.tp.sp)
        mt_tp_reduce_partial_grads(&model.tp, &model.reg, model.grads, 0, model.reg.numel_local);
      mt_allreduce_sum_f64(&mesh.pp_g, &stage.loss_sum, 1); /* the last stage's */
      loss_sum = stage.loss_sum;
      mt_dp_begin_sync(&dp);
    }
    for (int mb = 0; mb < (cfg.pp > 1 ? 0 : accum); mb++) {
      double td = mt_now();
      uint64_t g0 = (uint64_t)samples_done + (uint64_t)(step - start_step) * cfg.global_batch +
                    (uint64_t)mesh.dp_rank * per_rank +
                    (uint64_t)mb * cfg.micro_batch;
      for (int b = 0; b < cfg.micro_batch; b++)
        mt_sampler_get(&sampler, g0 + b, inp + (size_t)b * T, tgt + (size_t)b * T);
      data_s += mt_now() - td;
      int last_mb = mb == accum - 1;
      loss_sum += (double)mt_gpt_forward(&model, inp, tgt, cfg.micro_batch) * cfg.micro_batch * T;
      if (last_mb) mt_dp_begin_sync(&dp);
      mt_gpt_backward(&model, dloss, last_mb ? grads_ready : NULL, &hctx);
    }
    mt_dp_finish_sync(&dp);
    double t_fb = mt_now();
    double comm_fb = mesh.dp_g.seconds - comm0, tp_fb = mesh.tp_g.seconds - tp_s0;
    double pp_fb = mesh.pp_g.seconds - pp_s0;
    float lr = mt_lr_at(step, cfg.steps, cfg.warmup_steps, (float)cfg.lr, (float)cfg.min_lr_ratio);
    double norm = mt_dp_optimizer_step(&dp, lr, (float)cfg.grad_clip);
    /* the global loss: sum over dp of each rank's token losses */
    mt_allreduce_sum_f64(&mesh.dp_g, &loss_sum, 1);
    double t_opt = mt_now();
    /* tp figures of the training step; evaluation's stay in eval_s */
    double tp_comm_s = mesh.tp_g.seconds - tp_s0, tp_bytes = mesh.tp_g.bytes - tp_bytes0;
    double loss = loss_sum / (double)tokens_per_step;
    if (!isfinite(loss)) mt_die("loss is %f at step %d", loss, step + 1);

    double val = -1.0, t_eval = 0.0;
    if (cfg.eval_every > 0 && n_val_seq > 0 &&
        ((step + 1) % cfg.eval_every == 0 || step + 1 == cfg.steps)) {
      double te = mt_now();
      val = cfg.pp > 1 ? pp_evaluate(&stage, &mesh.pp_g, &val_sampler, n_val_seq, cfg.micro_batch,
                                     &mesh)
                       : evaluate(&model, &val_sampler, n_val_seq, cfg.micro_batch, &mesh, inp,
                                  tgt);
      t_eval = mt_now() - te;
      last_val = val;
    }
    double step_s = t_opt - t0;
    mt_step_record rec;
    memset(&rec, 0, sizeof rec);
    rec.step = step + 1;
    rec.steps = cfg.steps;
    rec.loss = loss;
    rec.val_loss = val;
    rec.lr = lr;
    rec.grad_norm = norm;
    rec.tokens = tokens_per_step;
    rec.step_s = step_s;
    rec.dp_comm_s = mesh.dp_g.seconds - comm0;
    rec.data_s = data_s;
    rec.compute_s = (t_fb - t0) - comm_fb - data_s - tp_fb - pp_fb;
    rec.optim_s = (t_opt - t_fb) - (rec.dp_comm_s - comm_fb) - (tp_comm_s - tp_fb);
    rec.eval_s = t_eval;
    rec.ckpt_s = pending_ckpt_s;
    rec.ckpt_write_s = pending_write_s;
    pending_ckpt_s = pending_write_s = 0.0;
    rec.dp_bytes = mesh.dp_g.bytes - bytes0;
    rec.model_flops = flops_per_token * (double)tokens_per_step;
    rec.flops_per_s = step_s > 0 ? rec.model_flops / step_s : 0.0;
    rec.peak_flops = peak_flops;
    for (int c = 0; c < MT_MEM_NCAT; c++) rec.mem_peak[c] = mt_mem_peak((mt_mem_cat)c);
    rec.rss_peak = mt_mem_peak_rss();
    if (step == (int)start_step) first_loss = loss;
    last_loss = loss;
    if (step > (int)start_step || cfg.steps - start_step == 1) { /* the first step carries warm-up */
      total_step_s += step_s;
      sum_tok_s += tokens_per_step / step_s;
      timed_steps++;
    }
    /* per stage pipeline figures, gathered to pp rank 0 of this (dp, tp) position */
    double pp_all[3 * MT_PP_MAX_CHUNKS] = {0};
    if (cfg.pp > 1)
      MPI_Gather(pp_stats, 3, MPI_DOUBLE, pp_all, 3, MPI_DOUBLE, 0, mesh.pp_g.comm);
    rec.tp_comm_s = tp_comm_s;
    rec.tp_bytes = tp_bytes;
    rec.pp = cfg.pp;
    rec.pp_stage = pp_all;
    rec.pp_comm_s = pp_fb;
    rec.pp_bytes = mesh.pp_g.bytes - pp_bytes0;
    if (world_rank == 0) {
      char *line = mt_step_record_json(&rec);
      fprintf(metrics_f, "%s\n", line);
      fflush(metrics_f);
      free(line);
      if ((step + 1) % cfg.log_every == 0 || step == 0 || step + 1 == cfg.steps) {
        double avg = timed_steps ? total_step_s / timed_steps : step_s;
        mt_step_record_progress(&rec, avg * (cfg.steps - step - 1), stdout);
      }
    }

    /* ---- checkpoint at the step boundary: periodic, final, asked for ---- */
    int signalled = g_stop_signal != 0;
    MPI_Allreduce(MPI_IN_PLACE, &signalled, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    long long done = step + 1;
    last_step_done = done;
    int stop_after = cfg.stop_after > 0 && done - start_step >= cfg.stop_after;
    int is_final = done == cfg.steps;
    int want_save = (cfg.ckpt_every > 0 && done % cfg.ckpt_every == 0) || is_final || signalled ||
                    stop_after;
    /* at most one background save in flight; the last one and a stop are blocking */
    int must_block = is_final || signalled || stop_after || !cfg.ckpt_async;
    double t_poll = mt_now();
    poll_async(&inflight, want_save, &pending_write_s);
    pending_ckpt_s += mt_now() - t_poll;
    if (want_save && strcmp(cfg.ckpt_mode, "none") != 0) {
      long long samples = samples_done + (done - start_step) * cfg.global_batch;
      double blocking = save_checkpoint(&cfg, &mesh, &model, &dp, done, samples, is_final,
                                        must_block ? NULL : &inflight);
      pending_ckpt_s += blocking;
      last_saved = done;
      if (must_block) {
        pending_write_s += blocking;
        mt_info0("meshtrain: checkpoint step_%lld written in %.2f s", done, blocking);
      } else {
        mt_info0("meshtrain: checkpoint step_%lld snapshot in %.3f s, writing in the background",
                 done, blocking);
      }
    }
    total_ckpt_s += pending_ckpt_s;
    if (signalled) {
      mt_info0("meshtrain: stop requested by signal after step %lld%s; exiting with code %d",
               done, strcmp(cfg.ckpt_mode, "none") ? " (checkpointed)" : "", MT_EXIT_PREEMPTED);
      exit_code = MT_EXIT_PREEMPTED;
      stop = 1;
    } else if (stop_after && !is_final) {
      mt_info0("meshtrain: train.stop_after = %d reached at step %lld", cfg.stop_after, done);
      stop = 1;
    }
  }
  if (start_step == cfg.steps && resumed_from[0] && strcmp(cfg.ckpt_mode, "none") != 0) {
    /* nothing left to train: write the loaded state again under this layout */
    total_ckpt_s += save_checkpoint(&cfg, &mesh, &model, &dp, start_step, samples_done, 0, NULL);
    mt_info0("meshtrain: step %lld re-saved under this layout", start_step);
  }
  poll_async(&inflight, 1, &pending_write_s);
  double wall = mt_now() - t_train0;

  /* ---- results ---- */
  /* per pipeline stage: parameter bytes a rank holds, dp bytes it sends per step */
  double stage_bytes[2 * MT_PP_MAX_CHUNKS] = {0};
  double my_bytes[2] = {(double)(model.reg.numel_local * sizeof(float)),
                        mt_dp_bytes_per_step(&dp)};
  if (cfg.pp > 1)
    MPI_Gather(my_bytes, 2, MPI_DOUBLE, stage_bytes, 2, MPI_DOUBLE, 0, mesh.pp_g.comm);
  if (world_rank == 0) {
    fclose(metrics_f);
    double avg_step = timed_steps ? total_step_s / timed_steps : 0.0;
    double tok_s = avg_step > 0 ? tokens_per_step / avg_step : 0.0;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", cfg.model_preset);
    cJSON_AddNumberToObject(o, "params", (double)mt_model_num_params(&shape));
    cJSON *lay = cJSON_AddObjectToObject(o, "layout");
    cJSON_AddNumberToObject(lay, "world", world_size);
    cJSON_AddNumberToObject(lay, "dp", cfg.dp);
    cJSON_AddNumberToObject(lay, "tp", cfg.tp);
    cJSON_AddNumberToObject(lay, "pp", cfg.pp);
    cJSON_AddNumberToObject(lay, "cp", cfg.cp);
    cJSON_AddNumberToObject(lay, "zero", cfg.zero);
    cJSON_AddBoolToObject(lay, "sp", cfg.sp);
    cJSON_AddNumberToObject(lay, "threads_per_rank", mt_kernels_threads());
    cJSON_AddNumberToObject(o, "steps", cfg.steps);
    cJSON_AddNumberToObject(o, "tokens_per_step", (double)tokens_per_step);
    cJSON_AddNumberToObject(o, "first_loss", first_loss);
    cJSON_AddNumberToObject(o, "final_loss", last_loss);
    if (last_val >= 0) cJSON_AddNumberToObject(o, "final_val_loss", last_val);
    cJSON_AddNumberToObject(o, "mean_step_s", avg_step);
    cJSON_AddNumberToObject(o, "tokens_per_s", tok_s);
    cJSON_AddNumberToObject(o, "tokens_per_s_per_rank", tok_s / world_size);
    cJSON_AddNumberToObject(o, "flops_per_token", flops_per_token);
    cJSON_AddNumberToObject(o, "flops_per_s", tok_s * flops_per_token);
    cJSON_AddNumberToObject(o, "peak_flops", peak_flops);
    cJSON_AddStringToObject(o, "peak_source", peak_source);
    cJSON_AddStringToObject(o, "hw_profile", hw.name);
    cJSON_AddStringToObject(o, "blas_core", mt_kernels_blas_core());
    cJSON_AddNumberToObject(o, "mfu", peak_flops > 0 ? tok_s * flops_per_token / peak_flops : 0);
    cJSON_AddNumberToObject(o, "dp_bytes_per_step", mt_dp_bytes_per_step(&dp));
    /* tp: every micro-batch, the sp partial-gradient sums, the grad-norm sum */
    cJSON_AddNumberToObject(o, "tp_bytes_per_step",
                            accum * mt_gpt_tp_bytes(&model, cfg.micro_batch, 0) +
                                mt_gpt_tp_bytes(&model, cfg.micro_batch, 1) +
                                mt_bytes_allreduce(sizeof(double), cfg.tp));
    cJSON_AddNumberToObject(o, "params_bytes_per_rank",
                            (double)(model.reg.numel_local * sizeof(float)));
    if (cfg.pp > 1) { /* rank 0 is on the first stage: every stage's own figures */
      cJSON *ps = cJSON_AddObjectToObject(o, "pp_stages");
      cJSON *pb = cJSON_AddArrayToObject(ps, "params_bytes_per_rank");
      cJSON *db = cJSON_AddArrayToObject(ps, "dp_bytes_per_step");
      for (int r = 0; r < cfg.pp; r++) {
        cJSON_AddItemToArray(pb, cJSON_CreateNumber(stage_bytes[2 * r]));
        cJSON_AddItemToArray(db, cJSON_CreateNumber(stage_bytes[2 * r + 1]));
      }
    }
    cJSON_AddNumberToObject(o, "wall_s", wall);
    cJSON_AddNumberToObject(o, "start_step", (double)start_step);
    cJSON_AddNumberToObject(o, "last_checkpoint_step", (double)last_saved);
    cJSON_AddNumberToObject(o, "checkpoint_s", total_ckpt_s);
    if (resumed_from[0]) cJSON_AddStringToObject(o, "resumed_from", resumed_from);
    cJSON_AddNumberToObject(o, "exit_code", exit_code);
    cJSON *mem = cJSON_AddObjectToObject(o, "mem_peak_bytes_rank0");
    for (int c = 0; c < MT_MEM_NCAT; c++)
      cJSON_AddNumberToObject(mem, mt_mem_cat_name((mt_mem_cat)c), (double)mt_mem_peak((mt_mem_cat)c));
    cJSON_AddNumberToObject(mem, "rss", (double)mt_mem_peak_rss());
    char *s = cJSON_Print(o);
    FILE *f = open_out(cfg.output_dir, "summary.json", "w");
    fprintf(f, "%s\n", s);
    fclose(f);
    free(s);
    cJSON_Delete(o);
    f = open_out(cfg.output_dir, "config.ini", "w");
    mt_config_write_ini(&cfg, f);
    fclose(f);
    if (cfg.save_params) {
      /* every rank holds the full parameters after the step (all-gathered under ZeRO;
       * pp = 1: with pipeline stages it would hold only the first stage's) */
      f = open_out(cfg.output_dir, "params.f32", "wb");
      if (fwrite(model.params, sizeof(float), model.reg.numel_local, f) != model.reg.numel_local)
        mt_die("short write of params.f32");
      fclose(f);
    }
    long long steps_run = last_step_done - start_step;
    mt_info0("meshtrain: %s, %lld steps (%lld..%lld of %d) in %.1f s, loss %.4f -> %.4f%s, "
             "%.0f tok/s, results in %s/",
             last_step_done < cfg.steps ? "stopped" : "done", steps_run,
             steps_run ? start_step + 1 : start_step, last_step_done, cfg.steps, wall, first_loss,
             last_loss, last_val >= 0 ? " (val below)" : "", tok_s, cfg.output_dir);
    if (last_val >= 0) mt_info0("meshtrain: final validation loss %.4f", last_val);
  }

  free(inp);
  free(tgt);
  if (cfg.pp > 1) {
    mt_pp_exec_destroy(&pp_x);
    for (int k = 0; k < stage.n_slots; k++)
      if (stage.slot_mem[k]) mt_mem_free(MT_MEM_ACTIV, stage.slot_mem[k], stage.set_numel * sizeof(float));
    free(stage.slot_mem); free(stage.acts); free(stage.inp); free(stage.tgt); free(stage.rows);
    free(wte_peer);
  }
  mt_pp_schedule_free(&pp_s);
  mt_dp_destroy(&dp);
  mt_gpt_destroy(&model);
  mt_dataset_close(&train_file);
  if (have_val_file) mt_dataset_close(&val_file);
  mt_mesh_destroy(&mesh);
  MPI_Finalize();
  return exit_code;
}
