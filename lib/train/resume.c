/* Resume (a checkpoint written under any layout loads into this one), then
 * the run's outputs: config.ini and metrics.jsonl continued. */
#include "train/train_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *PROG = "meshtrain";

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

/* Keep the metrics of steps <= last_step (a resumed run continues the
 * file). The kept lines go to a temporary file that replaces the old one
 * only once it is complete and on disk: a full disk leaves the history as it
 * was and fails the run with the cause. Returns 0, or -1 with e set. */
int mt_train_truncate_metrics(const char *dir, long long last_step, mt_err *e) {
  char path[2 * MT_CFG_STR_MAX], tmp[2 * MT_CFG_STR_MAX + 8];
  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *in = fopen(path, "r");
  if (!in) return 0;
  FILE *out = fopen(tmp, "w");
  if (!out) {
    mt_err_runtime(e, "cannot rewrite %s: %s: %s", path, tmp, strerror(errno));
    fclose(in);
    return -1;
  }
  char *line = NULL;
  size_t cap = 0;
  int bad = 0;
  while (getline(&line, &cap, in) > 0) {
    long long step = -1;
    const char *p = strstr(line, "\"step\":");
    if (p && sscanf(p + 7, "%lld", &step) == 1 && step <= last_step && fputs(line, out) == EOF)
      bad = errno ? errno : EIO;
  }
  free(line);
  fclose(in);
  if (fflush(out) != 0 && !bad) bad = errno ? errno : EIO;
  if (fsync(fileno(out)) != 0 && !bad) bad = errno ? errno : EIO;
  if (fclose(out) != 0 && !bad) bad = errno ? errno : EIO;
  if (!bad && rename(tmp, path) != 0) bad = errno ? errno : EIO;
  if (bad) {
    unlink(tmp);
    mt_err_runtime(e, "cannot rewrite %s for the resumed run (left as it was): %s", path,
               strerror(bad));
    return -1;
  }
  return 0;
}

/* what a checkpoint must say about the model to load into this one */
static mt_ckpt_meta model_meta(const mt_model_shape *shape) {
  mt_ckpt_meta m;
  memset(&m, 0, sizeof m);
  m.n_layer = shape->n_layer;
  m.n_embd = shape->n_embd;
  m.n_head = shape->n_head;
  m.seq_len = shape->seq_len;
  m.vocab = shape->vocab;
  m.moe_experts = shape->moe_experts;
  m.moe_every = shape->moe_every;
  m.moe_ffn = shape->moe_ffn;
  m.moe_shared = shape->moe_shared;
  m.moe_router = shape->moe_router;
  mt_train_meta_arch(&m, shape);
  return m;
}

void mt_train_meta_arch(mt_ckpt_meta *m, const mt_model_shape *s) {
  m->arch = s->arch;
  m->n_kv_head = s->n_kv_head;
  m->ffn = s->ffn;
  m->tied = s->tied;
  m->bias = s->bias;
  m->residual = s->residual;
}

/* aux-loss-free MoE balancing: the bias the checkpoint's run routed with
 * (a checkpoint without one, e.g. of a run balanced by the aux loss, leaves
 * it at zero). A run resumed under another train.moe_balance routes
 * without the bias (switching the method is allowed): rank 0 says once
 * that the checkpoint's bias is left out, so routing does not change
 * unannounced. Collective. Returns 0, or -1 with err set. */
static int load_moe_bias(mt_trainer *t, mt_err *err) {
  mt_gpt *m = &t->step.model;
  if (m->moe.n_blocks == 0) return 0;
  const int use = m->moe.balance == MT_MOE_BALANCE_BIAS;
  size_t n = (size_t)m->moe.n_blocks * (size_t)m->moe.E;
  float *bias = mt_calloc(n + 1, sizeof(float));
  int found = 0, nonzero = 0;
  if (mt_ckpt_load_moe_bias(t->resumed_from, bias, m->moe.n_blocks, m->moe.E, &found, err) != 0) {
    free(bias);
    return mt_err_pass(err);
  }
  for (size_t i = 0; i < n && !nonzero; i++) nonzero = bias[i] != 0.0f;
  if (use) mt_gpt_moe_set_bias(m, bias);
  if (use && !found)
    mt_info0("meshtrain: %s holds no MoE routing bias: train.moe_balance = bias starts from "
             "zeros", t->resumed_from);
  if (!use && found && nonzero)
    mt_info0("meshtrain: warning: %s holds the MoE routing bias of aux-loss-free balancing; "
             "train.moe_balance = %s routes without it from here (train.moe_balance = bias "
             "keeps it)", t->resumed_from, mt_moe_balance_name(m->moe.balance));
  free(bias);
  return 0;
}

/* A checkpoint of another optimizer (optim.name): its moments mean other
 * things (under Muon exp_avg is Muon's momentum on its matrices), so the
 * resume is refused, or with optim.on_switch = reset the optimizer starts
 * afresh (moments zero, its step count 0) from the checkpoint's parameters
 * and data position. Every rank reads the same attribute and decides
 * alike. Returns 0, or -1 with err set. */
static int optimizer_switch(mt_trainer *t, const mt_ckpt_meta *got, mt_err *err) {
  const mt_config *cfg = &t->cfg;
  if (got->optimizer == (int64_t)cfg->optim) return 0;
  const char *was = mt_optim_kind_name((mt_optim_kind)got->optimizer);
  if (cfg->optim_on_switch == MT_OPTIM_SWITCH_REFUSE) {
    mt_err_set(err, "train.resume: %s was written by optim.name = %s, this run has %s "
                    "(optim.on_switch = reset starts a fresh optimizer state from its parameters)",
               t->resumed_from, was, mt_optim_kind_name(cfg->optim));
    return -1;
  }
  mt_adamw *o = &t->step.dp.opt;
  t->ops->zero(MT_DT_F32, o->m, o->n);
  t->ops->zero(MT_DT_F32, o->v, o->n);
  o->t = 0;
  mt_info0("meshtrain: %s was written by optim.name = %s: optim.on_switch = reset starts %s's "
           "state afresh (moments zero) from its parameters", t->resumed_from, was,
           mt_optim_kind_name(cfg->optim));
  return 0;
}

/* the resume itself: collective. Returns 0, or -1 with err set. */
static int load_checkpoint(mt_trainer *t, mt_err *err) {
  mt_config *cfg = &t->cfg;
  const mt_model_shape *shape = &t->lay.shape;
  char root[2 * MT_CFG_STR_MAX];
  snprintf(root, sizeof root, "%s/checkpoints", cfg->output_dir);
  int found = 0;
  if (mt_ckpt_resolve(cfg->resume, root, t->resumed_from, sizeof t->resumed_from, &found, err) !=
      0) {
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    snprintf(err->msg, sizeof err->msg, "train.resume: %.*s", (int)sizeof msg - 16, msg);
    return mt_err_pass(err);
  }
  if (!found) {
    mt_info0("meshtrain: train.resume = auto: no checkpoint in %s, starting fresh", root);
    t->resumed_from[0] = '\0';
    return 0;
  }
  mt_flat_range *r[MT_CKPT_NGROUPS], *hr[MT_CKPT_NGROUPS] = {NULL};
  mt_ckpt_state st;
  for (int g = 0; g < MT_CKPT_NGROUPS; g++) {
    st.n_ranges[g] = mt_dp_state_ranges(&t->step.dp, g, 0, &r[g]);
    st.ranges[g] = r[g];
  }
  /* state on a GPU: loaded into host buffers, then copied up */
  float *host_state = NULL;
  if (t->ops->loc == MT_LOC_DEVICE) {
    host_state = mt_train_state_host_buffers(t, hr, r, st.n_ranges);
    for (int g = 0; g < MT_CKPT_NGROUPS; g++) st.ranges[g] = hr[g];
  }
  mt_ckpt_meta want = model_meta(shape), got;
  double tl = mt_now();
  int rc = 0;
  if (mt_ckpt_load(t->resumed_from, &t->step.model.reg, &t->mesh, &st, &want,
                   cfg->ckpt_verify_on_load, &got, err) != 0) {
    rc = mt_err_pass(err);
  } else {
    if (host_state) mt_train_state_upload(t, hr, r, st.n_ranges);
    if (load_moe_bias(t, err) != 0) rc = mt_err_pass(err);
    mt_dp_master_changed(&t->step.dp); /* a bf16 compute copy follows the loaded master */
    t->start_step = got.step;
    t->samples_done = got.samples;
    t->step.dp.opt.t = (int)got.optimizer_step;
    if (rc == 0 && optimizer_switch(t, &got, err) != 0) rc = mt_err_pass(err);
    if (got.seed != cfg->seed) {
      /* the data order is (seed, sample index): keep the checkpoint's stream */
      mt_info0("meshtrain: train.seed %d differs from the checkpoint's %lld; continuing the "
               "checkpoint's data order", cfg->seed, (long long)got.seed);
      cfg->seed = (int)got.seed;
      mt_blend_free(&t->blend);
      if (mt_blend_init(&t->blend, &t->sources, shape->seq_len, (uint64_t)cfg->seed, err) != 0)
        rc = mt_err_pass(err);
    }
    const int64_t data_now = (int64_t)mt_sources_hash(&t->sources);
    if (got.data_hash != 0 && got.data_hash != data_now)
      mt_info0("meshtrain: warning: train.resume: the training data differ from those %s was "
               "written with (sources, weights, shard names or sizes, held-out part): from "
               "step %lld on the windows are not those of an uninterrupted run",
               t->resumed_from, (long long)got.step + 1);
    if (t->start_step > cfg->steps) {
      mt_err_set(err, "train.resume: checkpoint %s is at step %lld, beyond train.steps = %d",
                 t->resumed_from, t->start_step, cfg->steps);
      rc = -1;
    }
    char folded[64] = "";
    if (got.moe_experts > 0)
      snprintf(folded, sizeof folded, " ep=%lld etp=%lld", (long long)got.ep, (long long)got.etp);
    mt_info0("meshtrain: resumed from %s (step %lld, written by dp=%lld tp=%lld pp=%lld "
             "cp=%lld%s zero=%lld on %lld ranks) in %.2f s",
             t->resumed_from, t->start_step, (long long)got.dp, (long long)got.tp,
             (long long)got.pp, (long long)got.cp, folded, (long long)got.zero,
             (long long)got.world, mt_now() - tl);
  }
  for (int g = 0; g < MT_CKPT_NGROUPS; g++) free(r[g]), free(hr[g]);
  if (host_state) mt_cuda_host_free(host_state);
  return rc;
}

int mt_train_load_checkpoint(mt_trainer *t, const char *which, mt_err *err) {
  char keep[MT_CFG_STR_MAX];
  snprintf(keep, sizeof keep, "%s", t->cfg.resume);
  snprintf(t->cfg.resume, sizeof t->cfg.resume, "%s", which);
  if (load_checkpoint(t, err) != 0) mt_err_pass_at(err, __FILE__, __LINE__);
  snprintf(t->cfg.resume, sizeof t->cfg.resume, "%s", keep);
  return mt_err_agree(err, MPI_COMM_WORLD) ? -1 : 0; /* (every rank, failed or not) */
}

/* train.init_from: another run's parameters (any layout, e.g. an imported
 * Hugging Face GPT-2), then step 0 with fresh optimizer state. Collective.
 * Returns 0, or -1 with err set. */
static int init_from_checkpoint(mt_trainer *t, mt_err *err) {
  mt_config *cfg = &t->cfg;
  const mt_model_shape *shape = &t->lay.shape;
  char dir[2 * MT_CFG_STR_MAX];
  int found = 0;
  if (mt_ckpt_resolve(cfg->init_from, cfg->init_from, dir, sizeof dir, &found, err) != 0) {
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    snprintf(err->msg, sizeof err->msg, "train.init_from: %.*s", (int)sizeof msg - 20, msg);
    return mt_err_pass(err);
  }
  if (!found) {
    mt_err_set(err, "train.init_from: no complete checkpoint");
    return -1;
  }
  mt_flat_range *r[MT_CKPT_NGROUPS] = {NULL}, *hr[MT_CKPT_NGROUPS] = {NULL};
  mt_ckpt_state st;
  memset(&st, 0, sizeof st);
  st.n_ranges[MT_CKPT_MODEL] = mt_dp_state_ranges(&t->step.dp, MT_CKPT_MODEL, 0, &r[MT_CKPT_MODEL]);
  st.ranges[MT_CKPT_MODEL] = r[MT_CKPT_MODEL];
  /* parameters on a GPU: loaded into host buffers, then copied up */
  float *host_state = NULL;
  if (t->ops->loc == MT_LOC_DEVICE) {
    host_state = mt_train_state_host_buffers(t, hr, r, st.n_ranges);
    st.ranges[MT_CKPT_MODEL] = hr[MT_CKPT_MODEL];
  }
  mt_ckpt_meta want = model_meta(shape), got;
  double tl = mt_now();
  /* a run at a shorter context takes the first rows of the position table */
  mt_ckpt_load_opts lo = {.verify = cfg->ckpt_verify_on_load, .params_only = 1,
                          .shorter_positions = 1};
  int rc = 0;
  if (mt_ckpt_load_with(dir, &t->step.model.reg, &t->mesh, &st, &want, &lo, &got, err) != 0) {
    rc = mt_err_pass(err);
  } else {
    if (host_state) mt_train_state_upload(t, hr, r, st.n_ranges);
    mt_dp_master_changed(&t->step.dp);
    mt_info0("meshtrain: parameters from %s (step %lld of the run that wrote it) in %.2f s; "
             "training from step 0 with fresh optimizer state", dir, (long long)got.step,
             mt_now() - tl);
    if (got.seq_len > shape->seq_len)
      mt_info0("meshtrain: train.init_from: model.seq_len = %d, the checkpoint's position table "
               "has %lld rows: fine-tuning at the shorter context with its first %d",
               shape->seq_len, (long long)got.seq_len, shape->seq_len);
  }
  for (int g = 0; g < MT_CKPT_NGROUPS; g++) free(r[g]), free(hr[g]);
  if (host_state) mt_cuda_host_free(host_state);
  return rc;
}

void mt_train_resume(mt_trainer *t) {
  mt_config *cfg = &t->cfg;
  mt_err err = {0};
  double t0 = mt_now();
  mt_ckpt_set_io_hints(cfg->ckpt_io_hints, &err); /* checked when the configuration was read */
  if (cfg->resume[0]) {
    if (load_checkpoint(t, &err) != 0) mt_err_pass_at(&err, __FILE__, __LINE__);
    mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
    if (cfg->skip_samples > 0 && t->resumed_from[0]) { /* a rollback by hand */
      t->samples_done += cfg->skip_samples;
      mt_info0("meshtrain: train.skip_samples: skipping %d windows after step %lld (the data "
               "go on from sample %lld)", cfg->skip_samples, t->start_step, t->samples_done);
    }
  }
  /* a checkpoint of this run (train.resume) wins: a requeued job goes on */
  if (cfg->init_from[0] && !t->resumed_from[0]) {
    if (init_from_checkpoint(t, &err) != 0) mt_err_pass_at(&err, __FILE__, __LINE__);
    mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  }
  t->resume_s = mt_now() - t0;
  /* ---- outputs (only now: a run refused above leaves earlier results alone) ---- */
  if (t->world_rank == 0 && mkdir_p(cfg->output_dir) != 0) {
    /* a path that cannot be (permissions, a file in the way) is bad input;
     * a full disk or an I/O error a runtime condition */
    int err_no = errno;
    if (err_no == EACCES || err_no == EPERM || err_no == ENOTDIR || err_no == EROFS ||
        err_no == ENAMETOOLONG || err_no == EEXIST)
      mt_err_set(&err, "output.dir: cannot create '%s': %s", cfg->output_dir, strerror(err_no));
    else
      mt_err_runtime(&err, "output.dir: cannot create '%s': %s", cfg->output_dir,
                     strerror(err_no));
  }
  if (t->world_rank == 0 && !err.failed && t->resumed_from[0])
    mt_train_truncate_metrics(cfg->output_dir, t->start_step, &err);
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  if (t->world_rank == 0) {
    const mt_model_shape *s = &t->lay.shape;
    FILE *f = mt_train_open_out(cfg->output_dir, "config.ini", "w");
    mt_config_write_ini(cfg, f);
    fclose(f);
    t->metrics_f = mt_train_open_out(cfg->output_dir, "metrics.jsonl", t->resumed_from[0] ? "a" : "w");
    mt_info0("meshtrain: %s (%s: %d key/value heads, MLP %d%s), %zu parameters (L=%d C=%d H=%d "
             "T=%d V=%d), mesh dp=%d tp=%d pp=%d cp=%d, zero=%d, %d ranks x %d threads",
             mt_preset_name(cfg->model_preset), mt_arch_name(s->arch), s->n_kv_head, s->ffn,
             s->tied ? ", tied head" : "", mt_model_num_params(s), s->n_layer, s->n_embd,
             s->n_head, s->seq_len, s->vocab, cfg->dp, cfg->tp, cfg->pp, cfg->cp, cfg->zero,
             t->world_size, mt_kernels_threads());
    if (mt_model_ladder(s))
      mt_info0("meshtrain: ladder residual: each attention and MLP reads the stream without the "
               "previous module's output");
    if (s->moe_experts > 0)
      mt_info0("meshtrain: MoE: %d experts (top-%d, hidden %d, %d shared, %s) in %d of %d blocks, "
               "%zu parameters active per token; folded mesh etp=%d ep=%d edp=%d",
               s->moe_experts, s->moe_topk, s->moe_ffn, s->moe_shared,
               s->moe_capacity > 0 ? "capacity" : "dropless", t->step.model.moe.n_blocks,
               s->n_layer,
               mt_model_active_params(s), t->mesh.etp, t->mesh.ep, t->mesh.edp);
    mt_info0("meshtrain: global batch %d x %d tokens, micro-batch %d, %d accumulation steps, "
             "%d dp buckets, peak %.1f GFLOP/s per rank (%s), BLAS kernels %s",
             cfg->global_batch, s->seq_len, cfg->micro_batch, t->lay.accum,
             t->step.model.reg.n_buckets, t->peak_per_rank, t->peak_source, mt_kernels_blas_core());
  }
  mt_train_watchdog_start(t);
  t->setup_s = mt_wall_now() - t->t_start;
}

/* What a checkpoint's stored configuration says of the model beyond its
 * root attributes, taken by a run started from it where the run leaves the
 * key open (its default): a Llama's norm epsilon and rotary positions
 * (rope_theta as the writing run resolved it, its preset's included;
 * rope_scaling and its factors) and Hugging Face's token ids, so that a run
 * from an import computes the imported model and its checkpoints export
 * with the source's ids. A configuration that cannot be read (a checkpoint
 * of an older meshtrain) carries nothing, said in one line. */
static void carry_model_keys(mt_config *cfg, const mt_ckpt_meta *m, const char *dir,
                             const char *text) {
  mt_model_stored ck;
  mt_err why = {0};
  if (mt_model_stored_of(text, "its configuration", &ck, &why) != 0) {
    mt_info0("meshtrain: train.init_from: %s: %s; the model keys beyond its shape (rope_theta, "
             "norm_eps, token ids) are this run's own", dir, why.msg);
    return;
  }
  const mt_model_shape s = ck.shape;
  if (!cfg->bos_token_id[0]) memcpy(cfg->bos_token_id, ck.bos_token_id, MT_CFG_STR_MAX);
  if (!cfg->eos_token_id[0]) memcpy(cfg->eos_token_id, ck.eos_token_id, MT_CFG_STR_MAX);
  if (m->arch != MT_ARCH_LLAMA || !mt_model_llama(&s)) return;
  /* as the writing run resolved it, its preset's included (the run from
   * here is a custom model: its own default would be the architecture's) */
  if (cfg->norm_eps <= 0.0) cfg->norm_eps = ck.norm_eps;
  if (cfg->rope_theta <= 0.0) cfg->rope_theta = s.rope_theta;
  if (cfg->rope_scaling == MT_ROPE_SCALING_NONE && s.rope_scaling != MT_ROPE_SCALING_NONE) {
    cfg->rope_scaling = s.rope_scaling;
    cfg->rope_factor = s.rope_factor;
    cfg->rope_low_freq_factor = s.rope_low_freq_factor;
    cfg->rope_high_freq_factor = s.rope_high_freq_factor;
    cfg->rope_original_len = s.rope_original_len;
  }
}

/* train.init_from: the model's shape comes from the checkpoint. A shape
 * key given (a non-zero value, a preset other than the default, a MoE key
 * off its default) must agree with it, but model.seq_len may be shorter
 * (fine-tuning at a shorter context reads the first rows of the position
 * table); the others are set from the checkpoint, so config.ini says what
 * ran; then the keys carry_model_keys takes. Collective (rank 0 reads the checkpoint's root attributes). */
int mt_train_init_from_shape(mt_config *cfg, mt_err *e) {
  char dir[2 * MT_CFG_STR_MAX];
  mt_ckpt_meta m;
  mt_err local = {0};
  if (mt_ckpt_read_meta_of(cfg->init_from, dir, sizeof dir, &m, &local) != 0) {
    *e = local;
    char msg[sizeof e->msg];
    snprintf(msg, sizeof msg, "%s", local.msg);
    snprintf(e->msg, sizeof e->msg, "train.init_from: %.*s", (int)sizeof msg - 20, msg);
    return mt_err_pass(e);
  }
  mt_config defaults;
  mt_config_defaults(&defaults);
  mt_model_shape preset;
  int from_preset = cfg->model_preset != defaults.model_preset &&
                    cfg->model_preset != MT_PRESET_CUSTOM &&
                    mt_model_preset(cfg->model_preset, &preset) == 0;
  /* the architecture's yes/no keys as the checkpoint's 0/1 */
  int tied = cfg->tie_embeddings == MT_TRI_TRUE, bias = cfg->bias == MT_TRI_TRUE;
  int arch = (int)cfg->arch, router = (int)cfg->moe_router, residual = (int)cfg->residual;
  struct {
    const char *key;
    int *v, given, from_preset;
    int64_t ckpt;
    int moe; /* a MoE key: counts only for a MoE checkpoint */
  } k[] = {
      {"model.n_layer", &cfg->n_layer, cfg->n_layer > 0, from_preset ? preset.n_layer : 0,
       m.n_layer, 0},
      {"model.n_embd", &cfg->n_embd, cfg->n_embd > 0, from_preset ? preset.n_embd : 0, m.n_embd,
       0},
      {"model.n_head", &cfg->n_head, cfg->n_head > 0, from_preset ? preset.n_head : 0, m.n_head,
       0},
      {"model.vocab_size", &cfg->vocab_size, cfg->vocab_size > 0, from_preset ? preset.vocab : 0,
       m.vocab, 0},
      {"model.arch", &arch, cfg->arch != MT_ARCH_AUTO, from_preset ? (int)preset.arch : 0, m.arch,
       0},
      {"model.n_kv_head", &cfg->n_kv_head, cfg->n_kv_head > 0,
       from_preset ? preset.n_kv_head : 0, m.n_kv_head, 0},
      {"model.ffn_size", &cfg->ffn_size, cfg->ffn_size > 0, from_preset ? preset.ffn : 0, m.ffn,
       0},
      /* (a preset's tying and biases follow its arch, compared above) */
      {"model.tie_embeddings", &tied, cfg->tie_embeddings != MT_TRI_AUTO, 0, m.tied, 0},
      {"model.bias", &bias, cfg->bias != MT_TRI_AUTO, 0, m.bias, 0},
      {"model.residual", &residual, cfg->residual != defaults.residual, 0, m.residual, 0},
      {"model.moe_experts", &cfg->moe_experts, cfg->moe_experts != defaults.moe_experts, 0,
       m.moe_experts, 1},
      {"model.moe_topk", &cfg->moe_topk, cfg->moe_topk != defaults.moe_topk, 0, m.moe_topk, 1},
      {"model.moe_every", &cfg->moe_every, cfg->moe_every != defaults.moe_every, 0, m.moe_every,
       1},
      {"model.moe_ffn", &cfg->moe_ffn, cfg->moe_ffn != defaults.moe_ffn, 0, m.moe_ffn, 1},
      {"model.moe_shared", &cfg->moe_shared, cfg->moe_shared != defaults.moe_shared, 0,
       m.moe_shared, 1},
      {"model.moe_router", &router, cfg->moe_router != defaults.moe_router, 0, m.moe_router, 1}};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    if (m.moe_experts == 0 && k[i].moe) continue; /* a dense checkpoint: MoE keys do not count */
    int64_t have = k[i].given ? *k[i].v : k[i].from_preset;
    if ((k[i].given || k[i].from_preset) && have != k[i].ckpt) {
      mt_err_set(e, "train.init_from: %s = %lld (%s), but %s holds a model with %lld: leave it "
                    "out (the checkpoint says the shape)", k[i].key, (long long)have,
                 k[i].given ? "given" : mt_preset_name(cfg->model_preset), dir,
                 (long long)k[i].ckpt);
      return -1;
    }
  }
  int seq = cfg->seq_len > 0 ? cfg->seq_len : from_preset ? preset.seq_len : 0;
  if (seq > m.seq_len && m.arch != 2) { /* rotary positions (llama) have no table */
    mt_err_set(e, "train.init_from: model.seq_len = %d is longer than the %lld positions %s was "
                  "trained with (its position table has no rows beyond)", seq,
               (long long)m.seq_len, dir);
    return -1;
  }
  if (m.n_layer > INT32_MAX || m.n_embd > INT32_MAX || m.n_head > INT32_MAX ||
      m.vocab > INT32_MAX || m.seq_len > INT32_MAX) {
    mt_err_set(e, "train.init_from: %s holds a model larger than meshtrain builds", dir);
    return -1;
  }
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
    if (m.moe_experts > 0 || !k[i].moe) *k[i].v = (int)k[i].ckpt;
  cfg->arch = (mt_arch)arch;
  cfg->moe_router = (mt_moe_router)router;
  cfg->residual = (mt_residual)residual;
  cfg->tie_embeddings = tied ? MT_TRI_TRUE : MT_TRI_FALSE;
  cfg->bias = bias ? MT_TRI_TRUE : MT_TRI_FALSE;
  cfg->seq_len = seq > 0 ? seq : (int)m.seq_len;
  cfg->model_preset = MT_PRESET_CUSTOM;
  char *text = NULL, again[sizeof dir];
  if (mt_ckpt_read_config_of(dir, again, sizeof again, &text, e) != 0) return mt_err_pass(e);
  carry_model_keys(cfg, &m, dir, text);
  free(text);
  return 0;
}
