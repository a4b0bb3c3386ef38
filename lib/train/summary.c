/* The run's closing phase: summary.json (rank 0) with every rank's memory
 * by category and bytes per group, and the closing lines. */
#include "train/train_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Records this attempt in summary.json (o: rank 0's summary, not yet written)
 * and totals the run over all its attempts: a requeued run is one run made by
 * several processes. On resume (a checkpoint was loaded), the previous
 * summary.json in dir holds the earlier attempts; a gap between its last
 * attempt's end and this one's start step (an attempt killed before it wrote a
 * summary) becomes an attempt with "recorded": false and unknown times. Adds
 *   attempts: [{attempt, recorded, start_step, end_step, last_checkpoint_step,
 *     steps, tokens, wall_s, setup_s (process start to first step), train_s
 *     (its steps' step_s), tokens_per_s (its steady state, first step skipped),
 *     recomputed_steps, recomputed_s, exit_code, layout, world, node_ranks,
 *     node_cpus, threads_per_rank, started_at, ended_at (Unix seconds),
 *     resumed_from}]
 *   run: {attempts, restarts, steps, tokens, train_s, tokens_per_s, mfu,
 *     computed_steps, lost_s, requeue_wait_s, wall_s}
 * run.steps is the run's progress (end step - first start step); tokens and
 * train_s sum metrics.jsonl, which a resumed run continues with one line per
 * step (its latest computation): tokens_per_s = tokens / train_s over every
 * step of every attempt. lost_s = set-up time of each restart + time of the
 * steps it recomputed (those after the checkpoint it resumed from that an
 * earlier attempt had already run); requeue_wait_s = time between one
 * attempt's end and the next one's start. Seconds throughout.
 * A run resumed from another run's checkpoint (train.resume = a path outside
 * dir/checkpoints: a resharded checkpoint in a new directory) starts at that
 * step: its first attempt is recorded with resumed_from, no attempt before it
 * is assumed, and run.steps and run.tokens both count from there (run:
 * start_step, resumed_from). */
/* 1 when the checkpoint step directory ckpt lies in dir/checkpoints (this
 * run's own), compared as files (device and inode: any spelling of the path) */
static int checkpoint_of_dir(const char *ckpt, const char *dir) {
  char parent[2 * MT_CFG_STR_MAX], own[2 * MT_CFG_STR_MAX + 16];
  snprintf(parent, sizeof parent, "%s", ckpt);
  char *slash = strrchr(parent, '/');
  if (slash) *slash = '\0';
  else snprintf(parent, sizeof parent, ".");
  snprintf(own, sizeof own, "%s/checkpoints", dir);
  struct stat a, b;
  if (stat(parent, &a) != 0 || stat(own, &b) != 0) return strcmp(parent, own) == 0;
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

static void summary_add_attempts(cJSON *o, const char *dir, int resumed, long long end_step,
                                 double setup_s, int node_ranks) {
  char path[2 * MT_CFG_STR_MAX];
  cJSON *prev = NULL;
  const cJSON *from = cJSON_GetObjectItemCaseSensitive(o, "resumed_from");
  int elsewhere = resumed && cJSON_IsString(from) && !checkpoint_of_dir(from->valuestring, dir);
  if (resumed && !elsewhere) { /* the previous attempts, from the summary this one replaces */
    snprintf(path, sizeof path, "%s/summary.json", dir);
    FILE *f = fopen(path, "rb");
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && n < (1L << 28) &&
        fseek(f, 0, SEEK_SET) == 0) {
      char *text = mt_calloc((size_t)n + 1, 1);
      if (fread(text, 1, (size_t)n, f) == (size_t)n) prev = cJSON_Parse(text);
      free(text);
    }
    if (f) fclose(f);
  }
  const cJSON *lay = cJSON_GetObjectItemCaseSensitive(o, "layout");
#define NUM(obj, key) cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive((obj), (key)))
  long long start_step = (long long)NUM(o, "start_step");
  cJSON *attempts = cJSON_CreateArray();
  long long prev_end = -1, prev_max_end = 0;
  const cJSON *a;
  cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(prev, "attempts")) {
    if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(a, "end_step"))) continue;
    prev_end = (long long)NUM(a, "end_step");
    if (prev_end > prev_max_end) prev_max_end = prev_end;
    cJSON_AddItemToArray(attempts, cJSON_Duplicate(a, 1));
  }
  if (resumed && !elsewhere && prev_end < start_step) { /* an attempt that left no summary */
    cJSON *gap = cJSON_CreateObject();
    cJSON_AddNumberToObject(gap, "attempt", cJSON_GetArraySize(attempts) + 1);
    cJSON_AddBoolToObject(gap, "recorded", 0);
    cJSON_AddNumberToObject(gap, "start_step", prev_end < 0 ? 0 : (double)prev_end);
    cJSON_AddNumberToObject(gap, "end_step", (double)start_step);
    cJSON_AddNumberToObject(gap, "steps", (double)(start_step - (prev_end < 0 ? 0 : prev_end)));
    cJSON_AddItemToArray(attempts, gap);
  }
  cJSON_Delete(prev);
  long long recomputed = (prev_max_end < end_step ? prev_max_end : end_step) - start_step;
  if (recomputed < 0) recomputed = 0;

  /* metrics.jsonl: every step once (earlier attempts' lines up to start_step) */
  double run_tokens = 0, run_train_s = 0, my_train_s = 0, recomputed_s = 0;
  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
  FILE *mf = fopen(path, "r");
  char *line = NULL;
  size_t cap = 0;
  while (mf && getline(&line, &cap, mf) > 0) {
    static const char *keys[3] = {"\"step\":", "\"step_s\":", "\"tokens\":"};
    double v[3];
    for (int k = 0; k < 3; k++) {
      const char *at = strstr(line, keys[k]);
      v[k] = at ? strtod(at + strlen(keys[k]), NULL) : NAN;
    }
    if (isnan(v[0]) || isnan(v[1]) || isnan(v[2])) continue;
    run_train_s += v[1];
    run_tokens += v[2];
    if (v[0] > (double)start_step) my_train_s += v[1];
    if (v[0] > (double)start_step && v[0] <= (double)(start_step + recomputed))
      recomputed_s += v[1];
  }
  free(line);
  if (mf) fclose(mf);

  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  double wall_s = setup_s + NUM(o, "wall_s"), ended_at = (double)now.tv_sec + 1e-9 * now.tv_nsec;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  char layout[96];
  snprintf(layout, sizeof layout, "dp%d-tp%d-pp%d-cp%d", (int)NUM(lay, "dp"), (int)NUM(lay, "tp"),
           (int)NUM(lay, "pp"), (int)NUM(lay, "cp"));
  cJSON *me = cJSON_CreateObject();
  cJSON_AddNumberToObject(me, "attempt", cJSON_GetArraySize(attempts) + 1);
  cJSON_AddBoolToObject(me, "recorded", 1);
  cJSON_AddNumberToObject(me, "start_step", (double)start_step);
  cJSON_AddNumberToObject(me, "end_step", (double)end_step);
  cJSON_AddNumberToObject(me, "last_checkpoint_step", NUM(o, "last_checkpoint_step"));
  cJSON_AddNumberToObject(me, "steps", (double)(end_step - start_step));
  cJSON_AddNumberToObject(me, "tokens", (double)(end_step - start_step) * NUM(o, "tokens_per_step"));
  cJSON_AddNumberToObject(me, "wall_s", wall_s);
  cJSON_AddNumberToObject(me, "setup_s", setup_s);
  cJSON_AddNumberToObject(me, "train_s", my_train_s);
  cJSON_AddNumberToObject(me, "tokens_per_s", NUM(o, "tokens_per_s"));
  cJSON_AddNumberToObject(me, "recomputed_steps", (double)recomputed);
  cJSON_AddNumberToObject(me, "recomputed_s", recomputed_s);
  cJSON_AddNumberToObject(me, "exit_code", NUM(o, "exit_code"));
  cJSON_AddStringToObject(me, "layout", layout);
  cJSON_AddNumberToObject(me, "world", NUM(lay, "world"));
  cJSON_AddNumberToObject(me, "node_ranks", node_ranks);
  cJSON_AddNumberToObject(me, "node_cpus", (double)cpus);
  cJSON_AddNumberToObject(me, "threads_per_rank", NUM(lay, "threads_per_rank"));
  cJSON_AddNumberToObject(me, "started_at", ended_at - wall_s);
  cJSON_AddNumberToObject(me, "ended_at", ended_at);
  if (cJSON_IsString(from)) cJSON_AddStringToObject(me, "resumed_from", from->valuestring);
  cJSON_AddItemToArray(attempts, me);

  /* totals */
  int n = cJSON_GetArraySize(attempts), i = 0;
  double computed = 0, lost = 0, wait = 0, wall = 0, prev_ended = NAN;
  long long first_start = 0;
  cJSON_ArrayForEach(a, attempts) {
    int recorded = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "recorded"));
    if (i == 0) first_start = (long long)NUM(a, "start_step");
    computed += NUM(a, "steps");
    if (recorded) {
      wall += NUM(a, "wall_s");
      if (i > 0) lost += NUM(a, "setup_s") + NUM(a, "recomputed_s");
      if (!isnan(prev_ended) && NUM(a, "started_at") > prev_ended)
        wait += NUM(a, "started_at") - prev_ended;
    }
    prev_ended = recorded ? NUM(a, "ended_at") : NAN;
    i++;
  }
  double tok_s = run_train_s > 0 ? run_tokens / run_train_s : 0.0, peak = NUM(o, "peak_flops");
  cJSON *run = cJSON_CreateObject();
  cJSON_AddNumberToObject(run, "attempts", n);
  cJSON_AddNumberToObject(run, "restarts", n - 1);
  cJSON_AddNumberToObject(run, "steps", (double)(end_step - first_start));
  cJSON_AddNumberToObject(run, "tokens", run_tokens);
  cJSON_AddNumberToObject(run, "train_s", run_train_s);
  cJSON_AddNumberToObject(run, "tokens_per_s", tok_s);
  cJSON_AddNumberToObject(run, "mfu", peak > 0 ? tok_s * NUM(o, "flops_per_token") / peak : 0.0);
  cJSON_AddNumberToObject(run, "computed_steps", computed);
  cJSON_AddNumberToObject(run, "lost_s", lost);
  cJSON_AddNumberToObject(run, "requeue_wait_s", wait);
  cJSON_AddNumberToObject(run, "wall_s", wall);
  cJSON_AddNumberToObject(run, "start_step", (double)first_start);
  const cJSON *first = cJSON_GetArrayItem(attempts, 0);
  const cJSON *first_from = cJSON_GetObjectItemCaseSensitive(first, "resumed_from");
  if (first_start > 0 && cJSON_IsString(first_from)) /* it began from another run's checkpoint */
    cJSON_AddStringToObject(run, "resumed_from", first_from->valuestring);
#undef NUM
  cJSON_AddItemToObject(o, "attempts", attempts);
  cJSON_AddItemToObject(o, "run", run);
}

/* per rank: coordinates, peak bytes by category, the last step's bytes per
 * group; Muon's FLOPs owned and its exchange's last step's bytes (dp x cp,
 * tp, edp, etp: of the groups') */
enum {
  RANK_COORDS = 4,
  RANK_GROUPS = 7,
  RANK_MUON = 5,
  RANK_FIELDS = RANK_COORDS + MT_MEM_NCAT + RANK_GROUPS + RANK_MUON
};

static cJSON *ranks_json(const mt_trainer *t, const double *all) {
  const int muon = t->cfg.optim == MT_OPTIM_MUON;
  cJSON *arr = cJSON_CreateArray();
  for (int r = 0; r < t->world_size; r++) {
    const double *v = all + (size_t)r * RANK_FIELDS;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "rank", r);
    cJSON_AddNumberToObject(o, "pp", v[0]);
    cJSON_AddNumberToObject(o, "dp", v[1]);
    cJSON_AddNumberToObject(o, "tp", v[2]);
    cJSON_AddNumberToObject(o, "cp", v[3]);
    mt_plan_json_mem(o, "mem_peak_bytes", v + RANK_COORDS);
    const double *b = v + RANK_COORDS + MT_MEM_NCAT;
    cJSON *bytes = cJSON_AddObjectToObject(o, "last_step_bytes");
    cJSON_AddNumberToObject(bytes, "dp", b[0]);
    cJSON_AddNumberToObject(bytes, "tp", b[1]);
    cJSON_AddNumberToObject(bytes, "pp", b[2]);
    cJSON_AddNumberToObject(bytes, "cp", b[3]);
    cJSON_AddNumberToObject(bytes, "ep", b[4]);
    cJSON_AddNumberToObject(bytes, "etp", b[5]);
    cJSON_AddNumberToObject(bytes, "edp", b[6]);
    if (muon) {
      const double *u = b + RANK_GROUPS;
      cJSON_AddNumberToObject(o, "optimizer_flops", u[0]);
      cJSON *mb = cJSON_AddObjectToObject(o, "last_step_muon_bytes");
      cJSON_AddNumberToObject(mb, "dp", u[1]);
      cJSON_AddNumberToObject(mb, "tp", u[2]);
      cJSON_AddNumberToObject(mb, "edp", u[3]);
      cJSON_AddNumberToObject(mb, "etp", u[4]);
    }
    cJSON_AddItemToArray(arr, o);
  }
  return arr;
}

void mt_train_summary(mt_trainer *t) {
  const mt_config *cfg = &t->cfg;
  const mt_model_shape *shape = &t->lay.shape;
  /* every rank's figures, to rank 0 */
  double mine[RANK_FIELDS], *all = NULL;
  mine[0] = t->mesh.pp_rank;
  mine[1] = t->mesh.dp_rank;
  mine[2] = t->mesh.tp_rank;
  mine[3] = t->mesh.cp_rank;
  for (int c = 0; c < MT_MEM_NCAT; c++) mine[RANK_COORDS + c] = (double)mt_mem_peak((mt_mem_cat)c);
  mine[RANK_COORDS + MT_MEM_NCAT + 0] = t->last_dp_bytes;
  mine[RANK_COORDS + MT_MEM_NCAT + 1] = t->last_tp_bytes;
  mine[RANK_COORDS + MT_MEM_NCAT + 2] = t->last_pp_bytes;
  mine[RANK_COORDS + MT_MEM_NCAT + 3] = t->last_cp_bytes;
  mine[RANK_COORDS + MT_MEM_NCAT + 4] = t->last_ep_bytes;
  mine[RANK_COORDS + MT_MEM_NCAT + 5] = t->last_etp_bytes;
  mine[RANK_COORDS + MT_MEM_NCAT + 6] = t->last_edp_bytes;
  double *muon = mine + RANK_COORDS + MT_MEM_NCAT + RANK_GROUPS;
  muon[0] = t->optimizer_flops;
  for (int k = 0; k < 4; k++) muon[1 + k] = t->last_muon_bytes[k];
  /* to rank 0 only: a sum of vectors over the world was O(ranks) memory and
   * traffic on every rank (O(ranks^2) for the job) */
  if (t->world_rank == 0) all = mt_calloc((size_t)t->world_size * RANK_FIELDS, sizeof(double));
  mt_gather(&t->mesh.world, mine, all, RANK_FIELDS, MT_DT_F64, 0, MT_LOC_HOST);
  /* the plan of this rank: what summary.json states per step */
  mt_plan_rank plan;
  mt_err e = {0};
  mt_plan_rank_build(cfg, &t->lay, t->mesh.pp_rank, t->mesh.dp_rank, t->mesh.cp_rank,
                     t->mesh.tp_rank, &plan, &e);
  /* per pipeline stage: parameter bytes a rank holds, dp bytes it sends per step */
  double stage_bytes[2 * MT_PP_MAX_CHUNKS] = {0};
  double my_bytes[2] = {plan.params_numel * sizeof(float), plan.dp_state_bytes};
  if (cfg->pp > 1) mt_train_gather_f64(&t->mesh.pp_g, my_bytes, 2, stage_bytes);
  /* the virtual device: causality checks and violations summed over the
   * ranks; the most memory (resident) any rank of the emulation held */
  double virt[3] = {(double)mt_vclock_checks(), (double)mt_vclock_violations(), 0.0};
  double rss_most = (double)mt_mem_peak_rss();
  if (t->device == MT_DEVICE_VIRTUAL) {
    mt_allreduce(&t->mesh.world, virt, 2, MT_DT_F64, MT_RED_SUM, MT_LOC_HOST);
    mt_allreduce(&t->mesh.world, &rss_most, 1, MT_DT_F64, MT_RED_MAX, MT_LOC_HOST);
  }
  if (cfg->trace) { /* every rank its own timeline */
    char dir[2 * MT_CFG_STR_MAX], path[2 * MT_CFG_STR_MAX + 32];
    snprintf(dir, sizeof dir, "%s/trace", cfg->output_dir);
    mkdir(dir, 0755); /* (every rank: one of them makes it) */
    snprintf(path, sizeof path, "%s/rank%d.json", dir, t->world_rank);
    mt_err te = {0};
    mt_trace_write(path, &te);
    mt_err_check_all(&te, MPI_COMM_WORLD, "meshtrain");
  }
  if (t->world_rank != 0) {
    free(all);
    return;
  }
  fclose(t->metrics_f);
  t->metrics_f = NULL;
  double avg_step = t->timed_steps ? t->total_step_s / t->timed_steps : 0.0;
  double tok_s = avg_step > 0 ? t->tokens_per_step / avg_step : 0.0;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "model", mt_preset_name(cfg->model_preset));
  cJSON_AddNumberToObject(o, "params", (double)mt_model_num_params(shape));
  cJSON *lay = mt_plan_json_layout(o, "layout", cfg, t->world_size);
  cJSON_AddNumberToObject(lay, "threads_per_rank", mt_kernels_threads());
  cJSON_AddNumberToObject(o, "steps", cfg->steps);
  cJSON_AddNumberToObject(o, "tokens_per_step", (double)t->tokens_per_step);
  cJSON_AddNumberToObject(o, "first_loss", t->first_loss);
  cJSON_AddNumberToObject(o, "final_loss", t->last_loss);
  if (t->last_val >= 0) cJSON_AddNumberToObject(o, "final_val_loss", t->last_val);
  cJSON_AddNumberToObject(o, "mean_step_s", avg_step);
  cJSON_AddNumberToObject(o, "tokens_per_s", tok_s);
  cJSON_AddNumberToObject(o, "tokens_per_s_per_rank", tok_s / t->world_size);
  cJSON_AddNumberToObject(o, "flops_per_token", t->flops_per_token);
  cJSON_AddNumberToObject(o, "flops_per_s", tok_s * t->flops_per_token);
  cJSON_AddNumberToObject(o, "peak_flops", t->peak_flops);
  cJSON_AddStringToObject(o, "peak_source", t->peak_source);
  cJSON_AddStringToObject(o, "hw_profile", t->hw.name);
  cJSON_AddStringToObject(o, "blas_core", mt_kernels_blas_core());
  mt_train_device_json(t, o);
  if (t->device == MT_DEVICE_VIRTUAL) { /* the emulation itself, in wall time */
    cJSON *v = cJSON_AddObjectToObject(o, "virtual");
    cJSON_AddStringToObject(v, "hw", t->vprof.name);
    cJSON_AddNumberToObject(v, "causality_checks", virt[0]);
    cJSON_AddNumberToObject(v, "causality_violations", virt[1]);
    cJSON_AddNumberToObject(v, "setup_wall_s", t->setup_s);
    cJSON_AddNumberToObject(v, "loop_wall_s", t->emul_wall_s);
    cJSON_AddNumberToObject(v, "rss_peak_bytes_most", rss_most);
  }
  cJSON_AddNumberToObject(o, "mfu",
                          t->peak_flops > 0 ? tok_s * t->flops_per_token / t->peak_flops : 0);
  if (cfg->optim == MT_OPTIM_MUON) {
    /* Muon's Newton-Schulz FLOPs per step: rank 0's own, the job's; MFU
     * with them beside the model's (the model's FLOPs stay in "mfu") */
    cJSON_AddNumberToObject(o, "optimizer_flops", t->optimizer_flops);
    cJSON_AddNumberToObject(o, "optimizer_flops_job", t->optimizer_flops_job);
    cJSON_AddNumberToObject(o, "mfu_model_plus_optimizer",
                            t->peak_flops > 0 && avg_step > 0
                                ? (tok_s * t->flops_per_token + t->optimizer_flops_job / avg_step) /
                                      t->peak_flops
                                : 0);
  }
  /* rank 0's plan: dp bytes of gradients and parameters, tp and pp bytes
   * of everything (what comm counts on a step without evaluation) */
  cJSON_AddNumberToObject(o, "dp_bytes_per_step", plan.dp_state_bytes);
  cJSON_AddNumberToObject(o, "tp_bytes_per_step", plan.tp_bytes);
  cJSON_AddNumberToObject(o, "pp_bytes_per_step", plan.pp_bytes);
  cJSON_AddNumberToObject(o, "cp_bytes_per_step", plan.cp_bytes);
  if (shape->moe_experts > 0) {
    cJSON_AddNumberToObject(o, "active_params", (double)mt_model_active_params(shape));
    cJSON_AddNumberToObject(o, "ep_bytes_per_step", plan.ep_bytes);
    cJSON_AddNumberToObject(o, "etp_bytes_per_step", plan.etp_bytes);
    cJSON_AddNumberToObject(o, "edp_bytes_per_step", plan.edp_bytes);
  }
  cJSON_AddNumberToObject(o, "params_bytes_per_rank", plan.params_numel * sizeof(float));
  if (cfg->pp > 1) { /* rank 0 is on the first stage: every stage's own figures */
    cJSON *ps = cJSON_AddObjectToObject(o, "pp_stages");
    cJSON *pb = cJSON_AddArrayToObject(ps, "params_bytes_per_rank");
    cJSON *db = cJSON_AddArrayToObject(ps, "dp_bytes_per_step");
    for (int r = 0; r < cfg->pp; r++) {
      cJSON_AddItemToArray(pb, cJSON_CreateNumber(stage_bytes[2 * r]));
      cJSON_AddItemToArray(db, cJSON_CreateNumber(stage_bytes[2 * r + 1]));
    }
  }
  cJSON_AddNumberToObject(o, "wall_s", t->wall_s);
  cJSON_AddNumberToObject(o, "setup_s", t->setup_s);
  cJSON_AddNumberToObject(o, "start_step", (double)t->start_step);
  cJSON_AddNumberToObject(o, "last_checkpoint_step", (double)t->last_saved);
  cJSON_AddNumberToObject(o, "checkpoint_s", t->total_ckpt_s);
  if (t->resumed_from[0]) cJSON_AddStringToObject(o, "resumed_from", t->resumed_from);
  cJSON_AddNumberToObject(o, "exit_code", t->exit_code);
  cJSON_AddItemToObject(o, "rollbacks", mt_spike_json(t)); /* loss spikes rolled back */
  cJSON *mem = cJSON_AddObjectToObject(o, "mem_peak_bytes_rank0");
  for (int c = 0; c < MT_MEM_NCAT; c++)
    cJSON_AddNumberToObject(mem, mt_mem_cat_name((mt_mem_cat)c),
                            (double)mt_mem_peak((mt_mem_cat)c));
  cJSON_AddNumberToObject(mem, "rss", (double)mt_mem_peak_rss());
  cJSON_AddItemToObject(o, "ranks", ranks_json(t, all));
  summary_add_attempts(o, cfg->output_dir, t->resumed_from[0] != '\0', t->last_step_done,
                       t->setup_s, t->mesh.node.size);
  free(all);
  char *s = cJSON_Print(o);
  FILE *f = mt_train_open_out(cfg->output_dir, "summary.json", "w");
  fprintf(f, "%s\n", s);
  fclose(f);
  free(s);
  cJSON_Delete(o);
  f = mt_train_open_out(cfg->output_dir, "config.ini", "w");
  mt_config_write_ini(cfg, f);
  fclose(f);
  if (cfg->save_params) {
    /* every rank holds the full parameters after the step (all-gathered under
     * ZeRO 1-2; pp = 1 and zero <= 2 only, as validation requires) */
    const size_t n = t->step.model.reg.numel_local;
    float *host = mt_malloc((n ? n : 1) * sizeof(float));
    t->ops->download(host, t->step.dp.params, n * sizeof(float));
    f = mt_train_open_out(cfg->output_dir, "params.f32", "wb");
    if (fwrite(host, sizeof(float), n, f) != n) mt_die("short write of params.f32");
    fclose(f);
    free(host);
  }
  long long steps_run = t->last_step_done - t->start_step;
  mt_info0("meshtrain: %s, %lld steps (%lld..%lld of %d) in %.1f s, loss %.4f -> %.4f%s, "
           "%.0f tok/s, results in %s/",
           t->last_step_done < cfg->steps ? "stopped" : "done", steps_run,
           steps_run ? t->start_step + 1 : t->start_step, t->last_step_done, cfg->steps,
           t->wall_s, t->first_loss, t->last_loss, t->last_val >= 0 ? " (val below)" : "", tok_s,
           cfg->output_dir);
  if (t->last_val >= 0) mt_info0("meshtrain: final validation loss %.4f", t->last_val);
}
