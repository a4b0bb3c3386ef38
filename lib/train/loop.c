/* The step loop, one for every layout: data -> the schedule's forward and
 * backward -> dp gradient sync -> clip -> AdamW -> metrics -> checkpoint
 * and signal policy. */
#include "train/train_internal.h"
#include "core/flight.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* A checkpoint that could not be written: the message is the same on every
 * rank (the ckpt module agreed on it); rank 0 prints it, every rank exits 3
 * and the previous checkpoint stays the newest complete one. */
static void exit_checkpoint_failed(const mt_err *e) {
  mt_err_report(e, "meshtrain");
  MT_MPI_CHECK(MPI_Finalize());
  exit(MT_EXIT_RUNTIME);
}

/* Checkpoint the state at `done` steps into <output.dir>/checkpoints. With
 * async non-NULL the save is started in the background (*async holds it
 * until mt_ckpt_async_poll commits it). Returns the blocking time, seconds. */
double mt_train_save(mt_trainer *t, long long done, long long samples, int is_final,
                     mt_ckpt_async **async) {
  const mt_config *cfg = &t->cfg;
  const mt_model_shape *s = &t->lay.shape;
  double t0 = mt_now();
  mt_flat_range *r[MT_CKPT_NGROUPS];
  mt_ckpt_state st;
  for (int g = 0; g < MT_CKPT_NGROUPS; g++) {
    st.n_ranges[g] = mt_dp_state_ranges(&t->step.dp, g, 1, &r[g]);
    st.ranges[g] = r[g];
  }
  mt_train_state_to_host(t, r, st.n_ranges); /* state on a GPU: written from a host snapshot */
  mt_ckpt_meta meta = {.step = done, .samples = samples, .tokens = samples * s->seq_len,
                       .optimizer_step = t->step.dp.opt.t, .seed = cfg->seed,
                       .n_layer = s->n_layer, .n_embd = s->n_embd, .n_head = s->n_head,
                       .seq_len = s->seq_len, .vocab = s->vocab, .dp = cfg->dp, .tp = cfg->tp,
                       .pp = cfg->pp, .cp = cfg->cp, .zero = cfg->zero, .world = t->world_size,
                       .moe_experts = s->moe_experts, .moe_topk = s->moe_topk,
                       .moe_every = s->moe_every, .moe_ffn = s->moe_ffn,
                       .moe_shared = s->moe_shared, .ep = t->mesh.ep, .etp = t->mesh.etp,
                       .moe_router = s->moe_router, .optimizer = cfg->optim,
                       .data_hash = (int64_t)mt_sources_hash(&t->sources)};
  mt_train_meta_arch(&meta, s);
  /* aux-loss-free balancing: the bias the next step routes with */
  if (t->step.model.moe.balance == MT_MOE_BALANCE_BIAS) {
    meta.moe_bias = mt_gpt_moe_bias(&t->step.model);
    meta.moe_bias_rows = meta.moe_bias ? t->step.model.moe.n_blocks : 0;
  }
  char *ini = NULL;
  size_t ini_len = 0;
  FILE *mf = open_memstream(&ini, &ini_len);
  mt_config_write_ini(cfg, mf);
  fclose(mf);
  mt_ckpt_save_opts opts = {.mode = cfg->ckpt_mode, .keep = cfg->ckpt_keep,
                            .test_crash = is_final ? cfg->ckpt_test_crash : MT_CKPT_CRASH_NONE,
                            .config_ini = ini};
  char root[2 * MT_CFG_STR_MAX];
  snprintf(root, sizeof root, "%s/checkpoints", cfg->output_dir);
  mt_err e = {0};
  if (async) {
    *async = mt_ckpt_async_begin(root, &meta, &t->step.model.reg, &t->mesh, &st, &opts, &e);
    if (!*async) exit_checkpoint_failed(&e);
  } else if (mt_ckpt_save(root, &meta, &t->step.model.reg, &t->mesh, &st, &opts, NULL, &e) != 0) {
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

/* The token files must be what was mapped (size, time, no fault while
 * reading): else every rank stops here, before a step trains on what the
 * files hold now, with one line naming the file and exit 3. A save in
 * flight is committed first: the newest checkpoint is the last one made. */
static void check_data(mt_trainer *t, mt_ckpt_async **inflight) {
  mt_err e = {0};
  mt_sources_check(&t->sources, &e);
  if (!mt_err_agree(&e, MPI_COMM_WORLD)) return;
  double ignored = 0.0;
  poll_async(inflight, 1, &ignored);
  mt_err_report(&e, "meshtrain");
  MT_MPI_CHECK(MPI_Finalize());
  exit(mt_err_exit_code(&e));
}

/* one window as load_batch reads it: its sample index and tokens */
uint64_t mt_window_hash(uint64_t g, const int *tok, int n) {
  uint64_t h = mt_splitmix64(g);
  for (int i = 0; i < n; i++) h = mt_splitmix64(h ^ (uint32_t)tok[i]);
  return h;
}

/* the micro-batches of step `step` that this dp rank trains on, from the
 * global sample sequence (the same global batch for any layout); under
 * context parallelism this rank's tokens of each sequence; with documents
 * where each position's document begins (the whole sequence's) */
static void load_batch(mt_trainer *t, int step) {
  const mt_config *cfg = &t->cfg;
  const mt_cp_layout *cpl = &t->step.model.attn.lay;
  const int T = t->lay.shape.seq_len, Tl = cpl->T_local;
  int *seq = mt_calloc(2 * (size_t)T, sizeof(int));
  const uint64_t s0 = (uint64_t)t->samples_done +
                      (uint64_t)(step - t->start_step) * cfg->global_batch;
  if (cfg->seq_policy == MT_SEQ_VARLEN) {
    mt_varlen_load(t, s0);
    free(seq);
    return;
  }
  if (t->order) mt_balance_step(t, s0, t->order, &t->flop_imbalance);
  for (int mb = 0; mb < t->lay.accum; mb++) {
    const size_t k0 = (size_t)t->mesh.dp_rank * t->lay.per_rank + (size_t)mb * cfg->micro_batch;
    for (int b = 0; b < cfg->micro_batch; b++) {
      size_t off = ((size_t)mb * cfg->micro_batch + b) * Tl;
      const uint64_t g = t->order ? t->order[k0 + b] : s0 + k0 + b;
      mt_blend_get(&t->blend, g, seq, seq + T);
      if (g == t->poison_sample) t->poison = t->poison_factor; /* the test hook */
      if (cfg->data_hash) t->data_hash_local += mt_window_hash(g, seq, 2 * T);
      mt_cp_take_tokens(cpl, seq, t->inp + off);
      mt_cp_take_tokens(cpl, seq + T, t->tgt + off);
      if (t->doc)
        mt_doc_starts(seq, T, cfg->eot, t->doc + ((size_t)mb * cfg->micro_batch + b) * T);
    }
    t->rows[mb] = cfg->micro_batch;
  }
  free(seq);
}

/* data.hash_batches: what the dp ranks loaded, summed over them: each
 * (sample index, its input and target tokens) hashed as load_batch reads it,
 * once per dp rank (tp, cp and pp rank 0; the others read the same
 * windows). A sum: the same global batch however it is split over dp,
 * micro-batches and resumes, and another if a window is read twice, left
 * out, or read with other tokens. Collective. */
static uint64_t batch_hash(mt_trainer *t) {
  const mt_mesh *m = &t->mesh;
  uint64_t h = m->tp_rank == 0 && m->cp_rank == 0 && m->pp_rank == 0 ? t->data_hash_local : 0;
  const int fl = mt_flight_begin("batch_hash", "world", 0, 1, t->world_size, -1, MT_FLIGHT_NEW, 8);
  MT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &h, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD));
  mt_flight_end(fl);
  t->data_hash_local = 0;
  return h;
}

/* what a stop signal (agreed over the ranks) ends the run with */
static int stop_exit_code(int stop) {
  return stop == MT_STOP_INTERRUPT ? MT_EXIT_INTERRUPTED
         : stop == MT_STOP_CANCEL  ? MT_EXIT_CANCELLED
                                   : MT_EXIT_PREEMPTED;
}
static const char *stop_reason(int stop) {
  return stop == MT_STOP_INTERRUPT ? "interrupted by SIGINT"
         : stop == MT_STOP_CANCEL  ? "cancelled by SIGTERM"
                                   : "stop requested by SIGUSR1";
}

/* ------------------------------------------------------------------ */
/* the communication groups a step accounts for                        */

/* until when a group's seconds count in the step record: the forward and
 * backward (the schedule and the gradient sync), the update (clip and the
 * optimizer) too, or the evaluation too */
typedef enum { UNTIL_BACKWARD, UNTIL_UPDATE, UNTIL_EVAL } comm_until;

/* A group: where comm counts its bytes and seconds (the mesh's group),
 * where the step's bytes are kept (the trainer's, for summary.json), the
 * step record's fields for its bytes and seconds, and until when its
 * seconds count. A group's seconds in the forward and backward come out
 * of the compute time, those after it out of the optimizer's. */
typedef struct {
  size_t group;            /* offsetof(mt_mesh, ...): an mt_group */
  size_t last_bytes;       /* offsetof(mt_trainer, ...) */
  size_t rec_bytes, rec_s; /* offsetof(mt_step_record, ...) */
  comm_until until;
} comm_row;

#define COMM_ROW(mesh_group, name, until)                                        \
  {offsetof(mt_mesh, mesh_group), offsetof(mt_trainer, last_##name##_bytes),    \
   offsetof(mt_step_record, name##_bytes), offsetof(mt_step_record, name##_comm_s), until}

enum { COMM_DP, COMM_TP, COMM_PP, COMM_CP, COMM_EP, COMM_ETP, COMM_EDP, N_COMM };
static const comm_row g_comm[N_COMM] = {
    /* dp: the dp x cp group of the gradients (the dp group at cp = 1); its
     * seconds are read after the evaluation, which sums the validation
     * loss over it */
    [COMM_DP] = COMM_ROW(dpcp_g, dp, UNTIL_EVAL),
    [COMM_TP] = COMM_ROW(tp_g, tp, UNTIL_UPDATE),
    /* pp and cp: the schedule's messages and attention's exchanges; what
     * the update sends on them (the gradient norm summed over pp) stays
     * in the optimizer's time */
    [COMM_PP] = COMM_ROW(pp_g, pp, UNTIL_BACKWARD),
    [COMM_CP] = COMM_ROW(cp_g, cp, UNTIL_BACKWARD),
    /* MoE: the folded mesh's groups */
    [COMM_EP] = COMM_ROW(ep_g, ep, UNTIL_UPDATE),
    [COMM_ETP] = COMM_ROW(etp_g, etp, UNTIL_UPDATE),
    [COMM_EDP] = COMM_ROW(edp_g, edp, UNTIL_UPDATE),
};

/* a step's readings of every group's counters (seconds, bytes) */
typedef struct {
  double s0[N_COMM], bytes0[N_COMM]; /* at the step's start */
  double fb_s[N_COMM];               /* in the forward and backward */
  double s[N_COMM];                  /* until the row's `until` */
  double bytes[N_COMM];              /* sent in the step (evaluation's not counted) */
} comm_marks;

static const mt_group *comm_group(const mt_mesh *mesh, int k) {
  return (const mt_group *)((const char *)mesh + g_comm[k].group);
}
static double *field_at(void *base, size_t offset) { return (double *)((char *)base + offset); }

static void comm_start(comm_marks *c, const mt_mesh *mesh) {
  for (int k = 0; k < N_COMM; k++) {
    c->s0[k] = comm_group(mesh, k)->seconds;
    c->bytes0[k] = comm_group(mesh, k)->bytes;
  }
}

/* at the end of a phase: each group's seconds of the forward and backward
 * (UNTIL_BACKWARD), its bytes of the step (UNTIL_UPDATE), and the seconds
 * of the groups whose time counts until this phase */
static void comm_read(comm_marks *c, const mt_mesh *mesh, comm_until phase) {
  for (int k = 0; k < N_COMM; k++) {
    const mt_group *g = comm_group(mesh, k);
    double s = g->seconds - c->s0[k];
    if (phase == UNTIL_BACKWARD) c->fb_s[k] = s;
    if (phase == UNTIL_UPDATE) c->bytes[k] = g->bytes - c->bytes0[k];
    if (g_comm[k].until == phase) c->s[k] = s;
  }
}

/* ------------------------------------------------------------------ */
/* a step                                                              */

/* what a checkpoint carries into the next step */
typedef struct {
  mt_ckpt_async *inflight; /* a background save not committed yet */
  double pending_ckpt_s;   /* blocking seconds, shown in the next step's record */
  double pending_write_s;  /* write seconds, likewise */
} ckpt_carry;

/* what a step measured (seconds: mt_now) */
typedef struct {
  double t0, t_fb, t_opt; /* the start, forward and backward done, the update done */
  double wall0;           /* the start on the wall clock (the watchdog's) */
  double data_s, fence_s, eval_s;
  double loss, norm, val; /* val: the validation loss, -1 where none */
  float lr;
  /* this stage: wait s, bubble fraction, act bytes, dp exposed s, dp overlapped fraction */
  double pp_stats[MT_PP_STAT_N];
  comm_marks comm;
  char spike[192]; /* why the step is a loss spike, "" when it is not */
} step_result;

/* data -> the schedule's forward and backward (and the gradient sync) ->
 * the update -> maybe the evaluation, each group's counters read between */
static void run_step(mt_trainer *t, int step, ckpt_carry *ck, step_result *r) {
  const mt_config *cfg = &t->cfg;
  const mt_mesh *mesh = &t->mesh;
  mt_gpt *model = &t->step.model;
  const mt_pp_exec *exec = &t->step.exec;
  memset(r, 0, sizeof *r);
  mt_flight_step_begin(step + 1);
  mt_train_test_die(t, step + 1);
  r->wall0 = mt_wall_now();
  r->t0 = mt_now();
  comm_start(&r->comm, mesh);
  double td = mt_now();
  load_batch(t, step);
  if (cfg->data_hash) t->data_hash = batch_hash(t);
  check_data(t, &ck->inflight);
  r->data_s = mt_now() - td;
  mt_gpt_moe_stats_reset(model);
  mt_gpt_moe_stats(model, 1); /* the step's routing; evaluation's is not counted */
  mt_pp_batch batch = {.n_mb = t->n_mb, .B = cfg->micro_batch, .T = model->attn.lay.T_local,
                       .inputs = t->inp, .targets = t->tgt, .rows = t->rows, .doc = t->doc,
                       .dloss = 1.0f / (float)t->tokens_per_step, .eval = 0,
                       .same_tokens = 0};
  double loss_sum = mt_step_gradients(&t->step, &batch) * t->poison;
  t->poison = 1.0;
  mt_gpt_moe_stats(model, 0);
  if (cfg->pp > 1) {
    r->pp_stats[0] = exec->wait_s;
    r->pp_stats[1] = exec->wall_s > 0 ? 1.0 - exec->compute_s / exec->wall_s : 0.0;
    /* the sets and head entries held at once, and recompute's one-layer workspace */
    r->pp_stats[2] = (double)exec->peak_slots * (double)exec->set_numel * sizeof(float) +
                     (double)exec->peak_heads * (double)exec->head_numel * sizeof(float) +
                     (double)model->ws_bytes;
  }
  /* a background checkpoint copies the state while forward and backward
   * run: it must be complete before the optimizer changes the state */
  r->fence_s = mt_ckpt_async_fence(ck->inflight);
  ck->pending_ckpt_s += r->fence_s;
  r->t_fb = mt_now();
  comm_read(&r->comm, mesh, UNTIL_BACKWARD);
  if (cfg->pp > 1) {
    /* dp on this stage's critical path: the time blocked in the dp x cp
     * group's calls while the schedule ran and the gradients were synced
     * (the rest of the reductions ran behind backward), and the part of
     * the gradient bytes launched during the schedule */
    const mt_dp *dpe = &t->step.dp;
    r->pp_stats[3] = r->comm.fb_s[COMM_DP];
    r->pp_stats[4] = dpe->grad_bytes > 0 ? dpe->grad_bytes_early / dpe->grad_bytes : 0.0;
  }
  r->lr = mt_lr_at(step, cfg->steps, cfg->warmup_steps, (float)cfg->lr, (float)cfg->min_lr_ratio);
  r->norm = mt_step_update(&t->step, r->lr, (float)cfg->grad_clip, &loss_sum);
  r->t_opt = mt_now();
  comm_read(&r->comm, mesh, UNTIL_UPDATE);
  r->loss = loss_sum / (double)t->tokens_per_step;
  r->val = -1.0;
  /* a spike: agreed over the world (a factor rule at its threshold must
   * not split the ranks) */
  double spike = mt_spike_test(t, r->loss, r->norm, r->spike, sizeof r->spike);
  mt_allreduce(&t->mesh.world, &spike, 1, MT_DT_F64, MT_RED_MAX, MT_LOC_HOST);
  if (spike > 0) {
    if (!r->spike[0]) snprintf(r->spike, sizeof r->spike, "a spike on another rank");
    return;
  }
  if (cfg->eval_every > 0 && t->n_val_seq > 0 &&
      ((step + 1) % cfg->eval_every == 0 || step + 1 == cfg->steps)) {
    double te = mt_now();
    r->val = mt_train_evaluate(t);
    r->eval_s = mt_now() - te;
    t->last_val = r->val;
  }
  comm_read(&r->comm, mesh, UNTIL_EVAL);
}

/* Muon: the step's bytes of its exchange (its counters run over the run) */
static void muon_bytes(mt_trainer *t) {
  if (t->cfg.optim != MT_OPTIM_MUON) return;
  const mt_dp_muon_stats st = mt_dp_muon_get_stats(&t->step.dp);
  const double now[4] = {st.bytes_red[MT_GROUP_DP], st.bytes_shard[MT_GROUP_DP],
                         st.bytes_red[MT_GROUP_EDP], st.bytes_shard[MT_GROUP_EDP]};
  for (int k = 0; k < 4; k++) {
    t->last_muon_bytes[k] = now[k] - t->muon_bytes_seen[k];
    t->muon_bytes_seen[k] = now[k];
  }
}

/* The step's record (but its pipeline and MoE figures): its times split
 * into compute, communication per group, optimizer, data and evaluation;
 * the checkpoint time carried in; memory peaks. Also the run's totals. */
static void fill_record(mt_trainer *t, int step, const step_result *r, ckpt_carry *ck,
                        mt_step_record *rec) {
  const mt_config *cfg = &t->cfg;
  double step_s = r->t_opt - r->t0;
  mt_trace_span("step", "step", MT_TRACK_STEP, r->t0, r->t_opt, step + 1, -1);
  memset(rec, 0, sizeof *rec);
  rec->step = step + 1;
  rec->steps = cfg->steps;
  rec->loss = r->loss;
  rec->val_loss = r->val;
  rec->val_sources = t->sources.n;
  rec->val_names = t->source_names;
  rec->val_by_source = t->val_by_source;
  if (cfg->data_hash) {
    rec->has_data_hash = 1;
    rec->data_hash = t->data_hash;
  }
  rec->flop_imbalance = t->order || t->vl_win ? t->flop_imbalance : 0.0;
  if (t->vl_win) {
    const mt_varlen_plan *p = &t->vl_plan;
    rec->varlen = 1;
    rec->varlen_rows = p->rows_per_rank;
    rec->varlen_exchange_mb = t->vl_exchange_mb;
    rec->varlen_fallback = p->fallback;
    rec->pad_share = p->n_rows > 0 ? (double)p->pad / ((double)p->n_rows * t->lay.shape.seq_len) : 0;
    rec->varlen_hash = t->vl_hash;
  }
  rec->rollback_from = t->rolled_back_from; /* the first step after a rollback says so */
  rec->rollback_skipped = t->rolled_back_skipped;
  t->rolled_back_from = t->rolled_back_skipped = 0;
  rec->lr = r->lr;
  rec->grad_norm = r->norm;
  rec->tokens = t->tokens_per_step;
  rec->step_s = step_s;
  rec->data_s = r->data_s;
  double compute_s = (r->t_fb - r->t0) - r->data_s - r->fence_s, optim_s = r->t_opt - r->t_fb;
  for (int k = 0; k < N_COMM; k++) {
    const comm_row *row = &g_comm[k];
    compute_s -= r->comm.fb_s[k];
    if (row->until != UNTIL_BACKWARD) optim_s -= r->comm.s[k] - r->comm.fb_s[k];
    *field_at(t, row->last_bytes) = r->comm.bytes[k];
    *field_at(rec, row->rec_bytes) = r->comm.bytes[k];
    *field_at(rec, row->rec_s) = r->comm.s[k];
  }
  rec->compute_s = compute_s;
  rec->optim_s = optim_s;
  rec->eval_s = r->eval_s;
  rec->ckpt_s = ck->pending_ckpt_s;
  rec->ckpt_write_s = ck->pending_write_s;
  ck->pending_ckpt_s = ck->pending_write_s = 0.0;
  rec->model_flops = t->flops_per_token * (double)t->tokens_per_step;
  rec->flops_per_s = step_s > 0 ? rec->model_flops / step_s : 0.0;
  rec->optimizer_flops = t->optimizer_flops_job;
  muon_bytes(t);
  rec->peak_flops = t->peak_flops;
  for (int c = 0; c < MT_MEM_NCAT; c++) rec->mem_peak[c] = mt_mem_peak((mt_mem_cat)c);
  rec->rss_peak = mt_mem_peak_rss();
  rec->pp = cfg->pp;
  if (step == (int)t->start_step) t->first_loss = r->loss;
  t->last_loss = r->loss;
  /* the first step carries warm-up */
  if (step > (int)t->start_step || cfg->steps - t->start_step == 1) {
    t->total_step_s += step_s;
    t->sum_tok_s += t->tokens_per_step / step_s;
    t->timed_steps++;
  }
}

/* MoE: every rank's routing statistics summed on rank 0 (the blocks of
 * other stages are zeros here) into rec; returns the buffer rec points
 * into (rank 0; free it after writing), else NULL */
static double *moe_record(mt_trainer *t, mt_step_record *rec) {
  const mt_moe *moe = &t->step.model.moe;
  if (moe->n_blocks <= 0) return NULL;
  size_t E = (size_t)moe->E, nb = (size_t)moe->n_blocks;
  size_t n = nb * E + 5 * nb;
  double *mine = mt_calloc(n + nb, sizeof(double));
  memcpy(mine, moe->tokens, nb * E * sizeof(double));
  memcpy(mine + nb * E, moe->dropped, nb * sizeof(double));
  memcpy(mine + nb * E + nb, moe->aux, nb * sizeof(double));
  memcpy(mine + nb * E + 2 * nb, moe->z, nb * sizeof(double));
  memcpy(mine + nb * E + 3 * nb, moe->rows_done, 2 * nb * sizeof(double)); /* rows, moved */
  memcpy(mine + n, moe->rows_done, nb * sizeof(double));
  mt_allreduce(&t->mesh.world, mine, n, MT_DT_F64, MT_RED_SUM, MT_LOC_HOST);
  mt_allreduce(&t->mesh.world, mine + n, nb, MT_DT_F64, MT_RED_MAX, MT_LOC_HOST);
  /* aux-loss-free balancing: the step's loads over the global batch */
  mt_gpt_moe_bias_update(&t->step.model, mine);
  if (t->world_rank != 0) {
    free(mine);
    return NULL;
  }
  double *moe_all = mine;
  rec->moe_blocks = (int)nb;
  rec->moe_experts = (int)E;
  rec->moe_tokens = moe_all;
  rec->moe_dropped = moe_all + nb * E;
  for (size_t b = 0; b < nb; b++) { /* in the units of the loss: per token */
    moe_all[nb * E + nb + b] /= (double)t->tokens_per_step;
    moe_all[nb * E + 2 * nb + b] /= (double)t->tokens_per_step;
    rec->moe_aux_loss += moe_all[nb * E + nb + b];
    rec->moe_z_loss += moe_all[nb * E + 2 * nb + b];
  }
  rec->moe_aux_block = moe_all + nb * E + nb;
  rec->moe_rows_sum = moe_all + nb * E + 3 * nb;
  rec->moe_moved = moe_all + nb * E + 4 * nb;
  rec->moe_rows_max = moe_all + n;
  rec->moe_stage_ranks = t->mesh.world.size / t->cfg.pp;
  return moe_all;
}

/* one training step; rank 0 writes its record to metrics.jsonl and, every
 * log_every steps, a progress line. A loss spike writes nothing: the run
 * stops, or rolls back (the step index to go on from: the return value,
 * else -1). */
static long long train_step(mt_trainer *t, int step, ckpt_carry *ck) {
  const mt_config *cfg = &t->cfg;
  step_result r;
  run_step(t, step, ck, &r);
  mt_flight_step_end(mt_wall_now() - r.wall0);
  if (r.spike[0]) {
    poll_async(&ck->inflight, 1, &ck->pending_write_s); /* the newest checkpoint, complete */
    return mt_spike_handle(t, step, r.spike);
  }
  mt_spike_note(t, r.loss);
  mt_step_record rec;
  fill_record(t, step, &r, ck, &rec);
  /* per stage pipeline figures, gathered to pp rank 0 of this (dp, tp) position */
  double pp_all[MT_PP_STAT_N * MT_PP_MAX_CHUNKS] = {0};
  if (cfg->pp > 1) mt_train_gather_f64(&t->mesh.pp_g, r.pp_stats, MT_PP_STAT_N, pp_all);
  rec.pp_stage = pp_all;
  double *moe_all = moe_record(t, &rec);
  if (t->world_rank == 0) {
    char *line = mt_step_record_json(&rec);
    fprintf(t->metrics_f, "%s\n", line);
    fflush(t->metrics_f);
    free(line);
    const double mfu = rec.peak_flops > 0 ? rec.flops_per_s / rec.peak_flops : 0.0;
    if (mfu > 1.0 && !t->mfu_warned) { /* not a real utilisation: the peak is wrong */
      t->mfu_warned = 1;
      mt_info0("meshtrain: warning: MFU %.1f%% at step %d is above 100%%: the peak of %.1f "
               "GFLOP/s per rank (%s) is below what this run reaches; give the peak of "
               "train.precision = %s (metrics.peak_gflops, or the profile of metrics.hw)",
               100.0 * mfu, step + 1, t->peak_per_rank, t->peak_source,
               mt_precision_name(cfg->precision));
    }
    if ((step + 1) % cfg->log_every == 0 || step == 0 || step + 1 == cfg->steps) {
      double avg = t->timed_steps ? t->total_step_s / t->timed_steps : rec.step_s;
      mt_step_record_progress(&rec, avg * (cfg->steps - step - 1), stdout);
    }
  }
  free(moe_all);
  mt_train_test_sleep("MT_TEST_STEP_SLEEP_S");
  return -1;
}

/* The checkpoint at the step boundary: periodic, final, asked for (a stop
 * signal on any rank, train.stop_after). Returns 1 when the run stops
 * here, its exit code in *exit_code. */
static int step_boundary(mt_trainer *t, int step, ckpt_carry *ck, int *exit_code) {
  const mt_config *cfg = &t->cfg;
  double any_signal = mt_train_signalled();
  mt_allreduce(&t->mesh.world, &any_signal, 1, MT_DT_F64, MT_RED_MAX, MT_LOC_HOST);
  const int signalled = (int)any_signal; /* MT_STOP_*: the largest asked for on any rank */
  long long done = step + 1;
  t->last_step_done = done;
  int stop_after = cfg->stop_after > 0 && done - t->start_step >= cfg->stop_after;
  int is_final = done == cfg->steps;
  int want_save = (cfg->ckpt_every > 0 && done % cfg->ckpt_every == 0) || is_final ||
                  signalled || stop_after;
  /* at most one background save in flight; the last one and a stop are blocking */
  int must_block = is_final || signalled || stop_after || !cfg->ckpt_async;
  double t_poll = mt_now();
  poll_async(&ck->inflight, want_save, &ck->pending_write_s);
  ck->pending_ckpt_s += mt_now() - t_poll;
  if (want_save && cfg->ckpt_mode != MT_CKPT_MODE_NONE) {
    long long samples = t->samples_done + (done - t->start_step) * cfg->global_batch;
    double blocking = mt_train_save(t, done, samples, is_final, must_block ? NULL : &ck->inflight);
    ck->pending_ckpt_s += blocking;
    t->last_saved = done;
    if (must_block) {
      ck->pending_write_s += blocking;
      mt_info0("meshtrain: checkpoint step_%lld written in %.2f s", done, blocking);
    } else {
      mt_info0("meshtrain: checkpoint step_%lld snapshot in %.3f s, writing in the background",
               done, blocking);
    }
  }
  t->total_ckpt_s += ck->pending_ckpt_s;
  if (signalled) {
    *exit_code = stop_exit_code(signalled);
    mt_info0("meshtrain: %s after step %lld%s; exiting with code %d (%s)", stop_reason(signalled),
             done, cfg->ckpt_mode != MT_CKPT_MODE_NONE ? " (checkpointed)" : "", *exit_code,
             *exit_code == MT_EXIT_PREEMPTED ? "requeue and resume with train.resume=auto"
                                             : "stopped for good: the job scripts do not requeue");
    return 1;
  }
  if (stop_after && !is_final) {
    mt_info0("meshtrain: train.stop_after = %d reached at step %lld", cfg->stop_after, done);
    return 1;
  }
  return 0;
}

int mt_train_loop(mt_trainer *t) {
  const mt_config *cfg = &t->cfg;
  double t_train0 = mt_now(), wall0 = mt_wall_now();
  int exit_code = MT_EXIT_OK, stop = 0;
  ckpt_carry ck = {0};
  t->last_step_done = t->start_step;
  t->last_saved = t->start_step;
  /* a stop asked for during start-up or a long resume: nothing new was
   * trained, so nothing to save; exit as a preempted or cancelled run does */
  double early = mt_train_signalled();
  mt_allreduce(&t->mesh.world, &early, 1, MT_DT_F64, MT_RED_MAX, MT_LOC_HOST);
  if (early > 0 && t->start_step < cfg->steps) {
    int code = stop_exit_code((int)early);
    mt_info0("meshtrain: %s before the first step; nothing new to checkpoint, exiting with "
             "code %d", stop_reason((int)early), code);
    t->wall_s = mt_now() - t_train0;
    t->exit_code = code;
    return code;
  }
  for (int step = (int)t->start_step; step < cfg->steps && !stop; step++) {
    const long long back = train_step(t, step, &ck);
    if (back >= 0) { /* rolled back: on from the checkpoint's step */
      step = (int)back - 1;
      continue;
    }
    stop = step_boundary(t, step, &ck, &exit_code);
  }
  if (t->start_step == cfg->steps && t->resumed_from[0] && cfg->ckpt_mode != MT_CKPT_MODE_NONE) {
    /* nothing left to train: write the loaded state again under this layout */
    t->total_ckpt_s += mt_train_save(t, t->start_step, t->samples_done, 0, NULL);
    mt_info0("meshtrain: step %lld re-saved under this layout", t->start_step);
  }
  poll_async(&ck.inflight, 1, &ck.pending_write_s);
  t->wall_s = mt_now() - t_train0;
  t->emul_wall_s = mt_wall_now() - wall0;
  t->exit_code = exit_code;
  return exit_code;
}
