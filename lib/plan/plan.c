/* The plan: a rank of a mesh built and run for one training step by the
 * real code (mt_step: the model, the dp engine, the schedule and its
 * executor) on the null backend over a count-only mesh, in this process,
 * without MPI and without memory: what it allocates per category and sends
 * per group is counted by the allocator and comm where a run counts them,
 * so the plan is what the run allocates and sends by construction. One rank
 * of each class of equal figures is counted (the same stage and the same
 * shard sizes); the others take its figures. */
#include "plan/plan.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

double mt_plan_rank_total(const mt_plan_rank *r) {
  double s = 0.0;
  for (int c = 0; c < MT_MEM_NCAT; c++) s += r->mem[c];
  return s;
}

static int world_rank_of(const mt_config *cfg, int pp_rank, int dp_rank, int cp_rank,
                         int tp_rank) {
  return tp_rank + cfg->tp * (cp_rank + cfg->cp * (dp_rank + cfg->dp * pp_rank));
}

static int count_mesh(mt_mesh *m, const mt_config *cfg, const mt_layout *lay, int world_rank,
                      mt_err *e) {
  const int moe = lay->shape.moe_experts > 0;
  MT_TRY(e, mt_mesh_count(m, cfg->tp, cfg->cp, cfg->dp, cfg->pp, world_rank, moe ? cfg->etp : 1,
                          moe ? cfg->ep : 1, e));
  return 0;
}

void mt_plan_world_destroy(mt_plan_world *w) {
  mt_mem_account *prev = mt_mem_account_use(&w->acct);
  mt_step_destroy(&w->step);
  mt_mem_account_use(prev);
  mt_mesh_destroy(&w->mesh);
  free(w->tokens);
  free(w->rows);
  mt_comm_rec_free(&w->rec);
  mt_comm_rec_free(&w->rec_prev);
  memset(w, 0, sizeof *w);
}

/* Builds world_rank's state and runs one training step (every micro-batch
 * of the schedule, the gradient sync, the optimizer), counted. */
static int world_run(mt_plan_world *w, const mt_config *cfg, const mt_layout *lay,
                     int world_rank, const mt_price *price, mt_err *e) {
  memset(w, 0, sizeof *w);
  mt_plan_docs docs; /* with documents, from plan.doc_lengths */
  MT_TRY(e, mt_plan_docs_price(cfg, &lay->shape, &docs, e));
  MT_TRY(e, count_mesh(&w->mesh, cfg, lay, world_rank, e));
  mt_mem_account *prev = mt_mem_account_use(&w->acct);
  int traced = mt_trace_set(0); /* (a run's timeline holds its own steps only) */
  mt_vclock_state clock;
  mt_vclock_save(&clock);
  if (price) mt_vclock_start(price);
  mt_ops_null_reset();
  int *l0l1 = mt_calloc(2 * (size_t)cfg->pp * lay->chunks, sizeof(int));
  mt_step_opts o;
  mt_step_groups g;
  mt_layout_step_opts(cfg, lay, &w->mesh, l0l1, &o, &g);
  /* the plan runs packed windows: with documents attention does no more
   * work (tiles across documents are skipped) and the documents' starts
   * take a few bytes per token */
  o.par.documents = 0;
  /* priced or not, the step runs in the layout's dtypes (the run's): the
   * cost model turns them into the dtypes it prices (mt_cost_dtypes) */
  int rc = mt_step_create(&w->step, &o, &g, price ? mt_ops_virtual() : mt_ops_null(), e);
  free(l0l1);
  if (rc == 0) {
    /* with a histogram of document lengths: attention at their share */
    w->step.model.attn.density = w->step.model.attn.density_seq = docs.density;
    const mt_moe_balance balance = cfg->moe_balance;
    mt_gpt_set_moe_loss(&w->step.model,
                        balance == MT_MOE_BALANCE_AUX ? (float)cfg->moe_aux_coef : 0.0f,
                        (float)cfg->moe_z_coef);
    mt_gpt_set_moe_balance(&w->step.model, balance, (float)cfg->moe_bias_rate,
                         (float)cfg->moe_bias_init);
    /* T: the rank's tokens of a sequence, as the run's batch has them (the
     * model's T is a slice's under token slices: the executor cuts them) */
    const int n_mb = lay->accum, B = cfg->micro_batch, T = w->step.model.attn.lay.T_local;
    w->tokens = mt_calloc((size_t)B * T + 1, sizeof(int));
    w->rows = mt_calloc((size_t)n_mb, sizeof(int));
    for (int mb = 0; mb < n_mb; mb++) w->rows[mb] = B;
    const double tokens = (double)cfg->global_batch * lay->shape.seq_len;
    w->batch = (mt_pp_batch){.n_mb = n_mb, .B = B, .T = T, .inputs = w->tokens,
                             .targets = w->tokens, .rows = w->rows,
                             .dloss = 1.0f / (float)tokens, .eval = 0, .same_tokens = 1};
    /* priced, the step's collectives are recorded in their order (the
     * cost model replays them) */
    mt_comm_rec *prev_rec = price ? mt_comm_rec_use(&w->rec) : NULL;
    double loss = mt_step_gradients(&w->step, &w->batch);
    const double state0 = w->step.dp.state_bytes[MT_GROUP_DP];
    mt_step_update(&w->step, (float)cfg->lr, (float)cfg->grad_clip, &loss);
    w->update_state_bytes = w->step.dp.state_bytes[MT_GROUP_DP] - state0;
    if (price) mt_comm_rec_use(prev_rec);
  }
  mt_mem_account_use(prev);
  mt_trace_set(traced);
  mt_vclock_restore(&clock);
  if (rc != 0) {
    mt_plan_world_destroy(w);
    return mt_err_pass(e);
  }
  return 0;
}

/* the counted rank's figures */
static void figures(const mt_plan_world *w, const mt_config *cfg, mt_plan_rank *out) {
  const mt_mesh *m = &w->mesh;
  const mt_step *s = &w->step;
  const mt_registry *r = &s->model.reg;
  memset(out, 0, sizeof *out);
  out->world_rank = m->world_rank;
  out->pp_rank = m->pp_rank;
  out->dp_rank = m->dp_rank;
  out->cp_rank = m->cp_rank;
  out->tp_rank = m->tp_rank;
  out->ep_rank = m->ep_rank;
  out->etp_rank = m->etp_rank;
  out->edp_rank = m->edp_rank;
  for (int c = 0; c < MT_MEM_NCAT; c++) out->mem[c] = (double)w->acct.peak[c];
  /* NCCL's buffers: the communicators a run on GPUs makes, one GPU per rank
   * (comm's estimate; a train.device = cuda run reserves the same) */
  if (cfg->device == MT_DEVICE_CUDA) {
    unsigned nccl_groups, nccl_p2p;
    mt_comm_nccl_needs(cfg, &nccl_groups, &nccl_p2p);
    mt_mesh_dims dims = mt_mesh_dims_of(m);
    out->mem[MT_MEM_COMM] += mt_comm_nccl_bytes(&dims, out->world_rank, nccl_groups, nccl_p2p);
  }
  out->comm_exact = cfg->pp == 1;
  out->dp_bytes = m->dpcp_g.bytes;
  out->tp_bytes = m->tp_g.bytes;
  out->pp_bytes = m->pp_g.bytes;
  out->cp_bytes = m->cp_g.bytes;
  out->ep_bytes = m->ep_g.bytes;
  out->etp_bytes = m->etp_g.bytes;
  out->edp_bytes = m->edp_g.bytes;
  out->dp_state_bytes = s->dp.state_bytes[MT_GROUP_DP];
  out->dp_update_bytes = w->update_state_bytes;
  const mt_dp_muon_stats mu = mt_dp_muon_get_stats(&s->dp); /* one step's: the plan runs one */
  out->muon_owned_flops = mu.owned_flops;
  out->muon_busiest_flops = mu.busiest_flops;
  out->muon_mean_flops = mu.mean_flops;
  out->muon_matrices = mu.matrices;
  out->muon_owned = mu.owned;
  out->muon_dp_bytes = mu.bytes_red[MT_GROUP_DP];
  out->muon_tp_bytes = mu.bytes_shard[MT_GROUP_DP];
  out->muon_edp_bytes = mu.bytes_red[MT_GROUP_EDP];
  out->muon_etp_bytes = mu.bytes_shard[MT_GROUP_EDP];
  out->params_numel = (double)(cfg->zero == 3 ? r->shard_numel : r->numel_local);
  out->moments_numel = (double)s->dp.opt.n;
  out->n_buckets = r->n_buckets;
  for (int c = 0; c < s->exec.v; c++) out->layers += s->exec.l1[c] - s->exec.l0[c];
  /* least-loaded: per MoE block of the stage and micro-batch, the weights
   * go out in the forward (again under recompute) and in the backward, at
   * most L experts' from a rank each time (in the weights' dtype), and the
   * gradients come back, at most H experts' (fp32) */
  const mt_moe *moe = &s->model.moe;
  if (moe->ep.H > 0) {
    int blocks = 0;
    for (int c = 0; c < s->exec.v; c++)
      for (int l = s->exec.l0[c]; l < s->exec.l1[c]; l++)
        blocks += mt_model_is_moe(&s->model.shape, l);
    const int H = moe->ep.H, L = moe->ep.L;
    const double expert = (double)mt_moe_expert_floats(moe);
    const double wbytes = (double)mt_dtype_bytes(s->model.dt);
    const double per_mb = (2.0 + (cfg->recompute ? 1.0 : 0.0)) * L * expert * wbytes +
                          H * expert * sizeof(float);
    out->ep_llep_bytes = per_mb * blocks * w->batch.n_mb;
  }
}

int mt_plan_rank_world(const mt_config *cfg, const mt_layout *lay, int pp_rank, int dp_rank,
                       int cp_rank, int tp_rank, const mt_price *price, mt_plan_rank *out,
                       mt_plan_world *keep, mt_err *e) {
  /* built where it is kept: the step points into its own mesh, so a copy
   * would leave those pointers in this frame */
  mt_plan_world local, *w = keep ? keep : &local;
  MT_TRY(e, world_run(w, cfg, lay, world_rank_of(cfg, pp_rank, dp_rank, cp_rank, tp_rank),
                      price, e));
  figures(w, cfg, out);
  if (!keep) mt_plan_world_destroy(w);
  return 0;
}

int mt_plan_rank_build(const mt_config *cfg, const mt_layout *lay, int pp_rank, int dp_rank,
                       int cp_rank, int tp_rank, mt_plan_rank *out, mt_err *e) {
  MT_TRY(e, mt_plan_rank_world(cfg, lay, pp_rank, dp_rank, cp_rank, tp_rank, NULL, out, NULL, e));
  return 0;
}

/* ------------------------------------------------------------------ */
/* classes of ranks with equal figures                                 */

/* What sets a rank's figures apart from another's: its pipeline stage and
 * its share of every bucket (the ZeRO shard over dp x cp or edp); the
 * ranks of tp, cp, ep and etp hold and send the same (the tests hold every
 * rank of a run to the plan). Under Muon a rank's place in its groups too:
 * the matrices it owns and the pieces it sends their owners follow from it.
 * From the rank's registry alone. */
static int signature(const mt_config *cfg, const mt_layout *lay, int world_rank, int **sig,
                     mt_err *e) {
  mt_mesh m;
  MT_TRY(e, count_mesh(&m, cfg, lay, world_rank, e));
  int *l0l1 = mt_calloc(2 * (size_t)cfg->pp * lay->chunks, sizeof(int));
  mt_step_opts o;
  mt_step_groups g;
  mt_layout_step_opts(cfg, lay, &m, l0l1, &o, &g);
  mt_gpt_layout gl = mt_gpt_layout_of(o.shape, &o.par);
  mt_registry r;
  int rc = mt_gpt_register_layout(&r, o.shape, &gl, e);
  free(l0l1);
  if (rc != 0) {
    mt_registry_free(&r);
    return mt_err_pass(e);
  }
  mt_registry_set_dp(&r, g.dp->size, g.dp->rank, g.cp->size, g.cp->rank);
  mt_registry_set_edp(&r, g.edp->size, g.edp->rank);
  mt_registry_shard(&r, o.zero, o.bucket_bytes);
  const int muon = cfg->optim == MT_OPTIM_MUON;
  int n = r.n_buckets + 2 + (muon ? 4 : 0);
  *sig = mt_calloc((size_t)n, sizeof(int));
  (*sig)[0] = n;
  (*sig)[1] = m.pp_rank;
  for (int k = 0; k < r.n_buckets; k++)
    (*sig)[2 + k] = r.buckets[k].counts[r.group_rank[r.buckets[k].group]];
  if (muon) {
    int *at = *sig + 2 + r.n_buckets;
    at[0] = r.group_rank[MT_GROUP_DP];
    at[1] = r.group_rank[MT_GROUP_EDP];
    at[2] = m.tp_rank;
    at[3] = m.etp_rank;
  }
  mt_registry_free(&r);
  return 0;
}

int mt_plan_build(const mt_config *cfg, int world_size, mt_plan *p, mt_err *e) {
  memset(p, 0, sizeof *p);
  MT_TRY(e, mt_layout_validate(cfg, world_size, &p->lay, e));
  p->n = p->lay.world;
  p->r = mt_calloc((size_t)p->n, sizeof *p->r);
  int **sigs = mt_calloc((size_t)p->n, sizeof(int *)); /* per class: its signature */
  int *rep = mt_calloc((size_t)p->n, sizeof(int));     /* per class: the rank counted */
  int n_classes = 0, rc = 0;
  for (int w = 0; w < p->n && rc == 0; w++) {
    int *sig = NULL;
    if (signature(cfg, &p->lay, w, &sig, e) != 0) {
      rc = mt_err_pass(e);
      break;
    }
    int c = 0;
    while (c < n_classes && !(sigs[c][0] == sig[0] &&
                              memcmp(sigs[c], sig, (size_t)sig[0] * sizeof(int)) == 0))
      c++;
    if (c == n_classes) { /* a new class: count this rank */
      mt_plan_world world;
      if (world_run(&world, cfg, &p->lay, w, NULL, e) != 0) {
        free(sig);
        rc = mt_err_pass(e);
        break;
      }
      figures(&world, cfg, &p->r[w]);
      mt_plan_world_destroy(&world);
      sigs[n_classes] = sig;
      rep[n_classes++] = w;
    } else { /* its class's figures, its own coordinates */
      free(sig);
      mt_mesh m;
      if (count_mesh(&m, cfg, &p->lay, w, e) != 0) {
        rc = mt_err_pass(e);
        break;
      }
      mt_plan_rank *r = &p->r[w];
      *r = p->r[rep[c]];
      r->world_rank = w;
      r->pp_rank = m.pp_rank;
      r->dp_rank = m.dp_rank;
      r->cp_rank = m.cp_rank;
      r->tp_rank = m.tp_rank;
      r->ep_rank = m.ep_rank;
      r->etp_rank = m.etp_rank;
      r->edp_rank = m.edp_rank;
    }
  }
  for (int c = 0; c < n_classes; c++) free(sigs[c]);
  free(sigs);
  free(rep);
  p->counted = n_classes;
  return rc;
}

void mt_plan_free(mt_plan *p) {
  free(p->r);
  mt_layout_free(&p->lay);
  memset(p, 0, sizeof *p);
}

/* ------------------------------------------------------------------ */
/* output                                                              */

static const mt_mem_cat g_cols[] = {MT_MEM_PARAMS, MT_MEM_GRADS, MT_MEM_OPTIM, MT_MEM_GATHER,
                                    MT_MEM_ACTIV, MT_MEM_COMM};

/* the largest of a figure (a double at offset in mt_plan_rank) over stage st's ranks */
static double muon_most(const mt_plan *p, int st, size_t offset) {
  double most = 0.0;
  for (int i = 0; i < p->n; i++) {
    double v = *(const double *)((const char *)&p->r[i] + offset);
    if (p->r[i].pp_rank == st && v > most) most = v;
  }
  return most;
}

/* Muon's assignment per stage: the Newton-Schulz FLOPs its ranks own
 * (least, most and the rank), the busiest over the mean (the balance the
 * owners' choice reached), and its exchange's bytes per group (the most
 * of any rank of the stage) */
static void print_muon(const mt_plan *p, const mt_config *cfg, FILE *f) {
  const int moe = p->lay.shape.moe_experts > 0;
  const double G = 1e9, MB = 1e6;
  fprintf(f, "# optimizer: Muon (%d Newton-Schulz steps) on the hidden matrices, each "
             "orthogonalised by one owner rank; per stage, GFLOP per step a rank owns (least, "
             "most), busiest over mean, and the exchange's MB per step (not in the table)\n",
          cfg->muon_ns_steps);
  fprintf(f, "%-5s %8s %10s %10s %6s %8s | %10s %10s", "stage", "matrices", "owned min",
          "owned max", "rank", "busy/mean", "muon dp", "muon tp");
  if (moe) fprintf(f, " %10s %10s", "muon edp", "muon etp");
  fputc('\n', f);
  for (int st = 0; st < cfg->pp; st++) {
    double lo = -1.0, hi = -1.0, busiest = 0.0, mean = 0.0;
    int at = -1, matrices = 0;
    for (int i = 0; i < p->n; i++) {
      const mt_plan_rank *r = &p->r[i];
      if (r->pp_rank != st) continue;
      if (lo < 0 || r->muon_owned_flops < lo) lo = r->muon_owned_flops;
      if (r->muon_owned_flops > hi) hi = r->muon_owned_flops, at = r->world_rank;
      busiest = r->muon_busiest_flops, mean = r->muon_mean_flops, matrices = r->muon_matrices;
    }
    fprintf(f, "%-5d %8d %10.4f %10.4f %6d %8.3f  | %10.2f %10.2f", st, matrices, lo / G, hi / G,
            at, mean > 0 ? busiest / mean : 1.0,
            muon_most(p, st, offsetof(mt_plan_rank, muon_dp_bytes)) / MB,
            muon_most(p, st, offsetof(mt_plan_rank, muon_tp_bytes)) / MB);
    if (moe)
      fprintf(f, " %10.2f %10.2f", muon_most(p, st, offsetof(mt_plan_rank, muon_edp_bytes)) / MB,
              muon_most(p, st, offsetof(mt_plan_rank, muon_etp_bytes)) / MB);
    fputc('\n', f);
  }
}

void mt_plan_print(const mt_plan *p, const mt_config *cfg, FILE *f) {
  const mt_model_shape *s = &p->lay.shape;
  const double MiB = 1048576.0, MB = 1e6;
  fprintf(f, "# meshtrain plan: %s (%zu parameters, L=%d C=%d T=%d V=%d), mesh pp=%d dp=%d cp=%d "
             "tp=%d (%d ranks), zero=%d%s, micro-batch %d x %d accumulation steps\n",
          mt_preset_name(cfg->model_preset), mt_model_num_params(s), s->n_layer, s->n_embd,
          s->seq_len, s->vocab, cfg->pp, cfg->dp, cfg->cp, cfg->tp, p->n, cfg->zero,
          cfg->sp ? ", sp" : "", cfg->micro_batch, p->lay.accum);
  const int moe = s->moe_experts > 0;
  if (moe)
    fprintf(f, "# MoE: %d experts (top-%d, hidden %d, %d shared, %s) in %d of %d blocks, %zu "
               "parameters active per token; folded mesh etp=%d ep=%d edp=%d\n",
            s->moe_experts, s->moe_topk, s->moe_ffn, s->moe_shared,
            s->moe_capacity > 0 ? "capacity" : "dropless", mt_model_moe_before(s, s->n_layer),
            s->n_layer, mt_model_active_params(s), cfg->etp, cfg->ep,
            cfg->tp * cfg->cp * cfg->dp / (cfg->etp * cfg->ep));
  const mt_dtypes *dt = &p->lay.dtypes;
  fprintf(f, "# dtypes: master %s, weights' copy %s, activations %s, messages %s, gradients %s, "
             "dp reduction %s\n",
          mt_dtype_name(dt->master), mt_dtype_name(dt->weights),
          mt_dtype_name(dt->acts), mt_dtype_name(dt->msgs),
          mt_dtype_name(dt->grads), mt_dtype_name(dt->grad_reduce));
  fprintf(f, "# per rank, the largest of each stage: memory in MiB by category (in those "
             "dtypes), bytes sent per training step in MB%s\n",
          moe ? " (ep: as a balanced routing implies)" : "");
  if (moe && s->moe_capacity <= 0 && cfg->moe_buffer_factor > 0)
    fprintf(f, "# MoE buffers (activations) sized at %g x a balanced routing's rows "
               "(parallel.moe_buffer_factor); a run grows them where a step's routing brings "
               "more\n",
            cfg->moe_buffer_factor);
  else if (moe && s->moe_capacity <= 0)
    fprintf(f, "# MoE buffers (activations) sized for the worst routing "
               "(parallel.moe_buffer_factor = 0)\n");
  fprintf(f, "%-5s %10s %10s %10s %10s %10s %10s %10s | %10s %10s %10s %10s", "stage", "params",
          "grads", "optimizer", "gathered", "activ", "comm", "total", "dp", "tp", "pp", "cp");
  if (moe) fprintf(f, " %10s %10s %10s", "ep", "etp", "edp");
  fputc('\n', f);
  for (int st = 0; st < cfg->pp; st++) {
    mt_plan_rank mx;
    memset(&mx, 0, sizeof mx);
    double total = 0.0;
    int exact = 1;
    for (int i = 0; i < p->n; i++) {
      const mt_plan_rank *r = &p->r[i];
      if (r->pp_rank != st) continue;
      for (int c = 0; c < MT_MEM_NCAT; c++)
        if (r->mem[c] > mx.mem[c]) mx.mem[c] = r->mem[c];
      if (mt_plan_rank_total(r) > total) total = mt_plan_rank_total(r);
      if (r->dp_bytes > mx.dp_bytes) mx.dp_bytes = r->dp_bytes;
      if (r->tp_bytes > mx.tp_bytes) mx.tp_bytes = r->tp_bytes;
      if (r->pp_bytes > mx.pp_bytes) mx.pp_bytes = r->pp_bytes;
      if (r->cp_bytes > mx.cp_bytes) mx.cp_bytes = r->cp_bytes;
      if (r->ep_bytes > mx.ep_bytes) mx.ep_bytes = r->ep_bytes;
      if (r->etp_bytes > mx.etp_bytes) mx.etp_bytes = r->etp_bytes;
      if (r->edp_bytes > mx.edp_bytes) mx.edp_bytes = r->edp_bytes;
      exact &= r->comm_exact;
    }
    if (cfg->optim == MT_OPTIM_MUON) { /* Muon's exchange on its own lines, below */
      mx.dp_bytes -= muon_most(p, st, offsetof(mt_plan_rank, muon_dp_bytes));
      mx.tp_bytes -= muon_most(p, st, offsetof(mt_plan_rank, muon_tp_bytes));
      mx.edp_bytes -= muon_most(p, st, offsetof(mt_plan_rank, muon_edp_bytes));
      mx.etp_bytes -= muon_most(p, st, offsetof(mt_plan_rank, muon_etp_bytes));
    }
    fprintf(f, "%-5d", st);
    for (size_t c = 0; c < sizeof g_cols / sizeof g_cols[0]; c++)
      fprintf(f, " %10.2f", mx.mem[g_cols[c]] / MiB);
    fprintf(f, " %9.2f%s | %10.2f %10.2f %10.2f %10.2f", total / MiB, exact ? " " : "+",
            mx.dp_bytes / MB, mx.tp_bytes / MB, mx.pp_bytes / MB, mx.cp_bytes / MB);
    if (moe) fprintf(f, " %10.2f %10.2f %10.2f", mx.ep_bytes / MB, mx.etp_bytes / MB,
                     mx.edp_bytes / MB);
    fputc('\n', f);
  }
  if (cfg->optim == MT_OPTIM_MUON) print_muon(p, cfg, f);
  double llep = 0.0;
  for (int i = 0; i < p->n; i++)
    if (p->r[i].ep_llep_bytes > llep) llep = p->r[i].ep_llep_bytes;
  if (llep > 0.0)
    fprintf(f, "# ep, least-loaded (alpha %g): at most %.3f GB more per step and rank (expert "
               "weights out to helpers in each forward and backward, their gradients back); "
               "the copies' buffers are in activ\n",
            cfg->ep_balance_alpha, llep / 1e9);
  if (cfg->pp > 1)
    fprintf(f, "# +: plus more of the pipeline's send buffers, one message each while several "
               "are in flight\n");
  if (cfg->cp > 1)
    fprintf(f, "# dp: the dp x cp group (gradients, ZeRO shards); cp: %s attention\n",
            mt_cp_mode_name(cfg->cp_mode));
}

void mt_plan_write_json(const mt_plan *p, const mt_config *cfg, FILE *f) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "model", mt_preset_name(cfg->model_preset));
  cJSON_AddNumberToObject(o, "params", (double)mt_model_num_params(&p->lay.shape));
  if (p->lay.shape.moe_experts > 0)
    cJSON_AddNumberToObject(o, "active_params", (double)mt_model_active_params(&p->lay.shape));
  cJSON *lay = mt_plan_json_layout(o, "layout", cfg, p->n);
  cJSON_AddNumberToObject(lay, "accum", p->lay.accum);
  cJSON *dt = cJSON_AddObjectToObject(o, "dtypes");
  cJSON_AddStringToObject(dt, "master", mt_dtype_name(p->lay.dtypes.master));
  cJSON_AddStringToObject(dt, "weights", mt_dtype_name(p->lay.dtypes.weights));
  cJSON_AddStringToObject(dt, "acts", mt_dtype_name(p->lay.dtypes.acts));
  cJSON_AddStringToObject(dt, "msgs", mt_dtype_name(p->lay.dtypes.msgs));
  cJSON_AddStringToObject(dt, "grads", mt_dtype_name(p->lay.dtypes.grads));
  cJSON_AddStringToObject(dt, "grad_reduce", mt_dtype_name(p->lay.dtypes.grad_reduce));
  cJSON *ranks = cJSON_AddArrayToObject(o, "ranks");
  for (int i = 0; i < p->n; i++) {
    const mt_plan_rank *r = &p->r[i];
    cJSON *x = cJSON_CreateObject();
    cJSON_AddNumberToObject(x, "rank", r->world_rank);
    cJSON_AddNumberToObject(x, "pp", r->pp_rank);
    cJSON_AddNumberToObject(x, "dp", r->dp_rank);
    cJSON_AddNumberToObject(x, "cp", r->cp_rank);
    cJSON_AddNumberToObject(x, "tp", r->tp_rank);
    cJSON_AddNumberToObject(x, "ep", r->ep_rank);
    cJSON_AddNumberToObject(x, "etp", r->etp_rank);
    cJSON_AddNumberToObject(x, "edp", r->edp_rank);
    mt_plan_json_mem(x, "mem_bytes", r->mem);
    cJSON_AddBoolToObject(x, "comm_exact", r->comm_exact);
    cJSON *b = cJSON_AddObjectToObject(x, "step_bytes");
    cJSON_AddNumberToObject(b, "dp", r->dp_bytes);
    cJSON_AddNumberToObject(b, "tp", r->tp_bytes);
    cJSON_AddNumberToObject(b, "pp", r->pp_bytes);
    cJSON_AddNumberToObject(b, "cp", r->cp_bytes);
    cJSON_AddNumberToObject(b, "ep", r->ep_bytes);
    cJSON_AddNumberToObject(b, "etp", r->etp_bytes);
    cJSON_AddNumberToObject(b, "edp", r->edp_bytes);
    if (r->ep_llep_bytes > 0.0) /* least-loaded: ep at its worst */
      cJSON_AddNumberToObject(b, "ep_worst", r->ep_bytes + r->ep_llep_bytes);
    cJSON_AddNumberToObject(x, "dp_state_bytes", r->dp_state_bytes);
    if (cfg->optim == MT_OPTIM_MUON) { /* its exchange's, of step_bytes */
      cJSON *mb = cJSON_AddObjectToObject(x, "muon_bytes");
      cJSON_AddNumberToObject(mb, "dp", r->muon_dp_bytes);
      cJSON_AddNumberToObject(mb, "tp", r->muon_tp_bytes);
      cJSON_AddNumberToObject(mb, "edp", r->muon_edp_bytes);
      cJSON_AddNumberToObject(mb, "etp", r->muon_etp_bytes);
      cJSON_AddNumberToObject(x, "optimizer_flops", r->muon_owned_flops);
      cJSON_AddNumberToObject(x, "optimizer_flops_busiest", r->muon_busiest_flops);
      cJSON_AddNumberToObject(x, "optimizer_flops_mean", r->muon_mean_flops);
    }
    cJSON_AddNumberToObject(x, "params_numel", r->params_numel);
    cJSON_AddItemToArray(ranks, x);
  }
  char *s = cJSON_Print(o);
  fprintf(f, "%s\n", s);
  free(s);
  cJSON_Delete(o);
}
