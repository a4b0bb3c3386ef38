/* meshckpt: offline tools for meshtrain checkpoints, on the public API of
 * lib/ckpt (the work itself is lib/ckpt/tools and lib/ckpt/interop) and of
 * lib/model (the GPT a checkpoint's root attributes describe).
 *
 *   meshckpt inspect|verify|diff|convert|export|import ...   (see usage)
 *
 * Runs on any number of MPI ranks (or none): the work is shared out over
 * the ranks and read in chunks of --chunk-mb. Exit codes: 0 ok / equal,
 * 1 problems found / different, 2 bad input, 3 runtime failure (an I/O
 * error, a full disk). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "core/core.h"
#include "model/model.h"
#include "parallel/parallel.h"
#include "registry/registry.h"

static const char *PROG = "meshckpt";
static int g_rank = 0;

static void usage(FILE *f) {
  fprintf(f,
          "usage: meshckpt inspect DIR [--tensors]     schema, layout, sizes, stored types, step\n"
          "       meshckpt verify DIR [--deep]         every check the loader makes: manifest,\n"
          "                                            root attributes and their checksum,\n"
          "                                            model, coverage, shard files, checksums,\n"
          "                                            no NaN/Inf (--deep: also every tensor\n"
          "                                            read whole through its dataset)\n"
          "       meshckpt diff DIR_A DIR_B            per-tensor max abs/rel difference\n"
          "       meshckpt diff DIR_A DIR_B --rtol X   values within X (relative) count as equal\n"
          "       meshckpt convert DIR OUTROOT [--mode shared|per-writer] [--dtype fp32|bf16]\n"
          "                [--optim-dtype fp32|bf16] [--params-only]\n"
          "                [--target tp=N[,pp=M][,ep=E][,etp=F]]\n"
          "                [--buffer-mb B]             rewrite into OUTROOT/step_<N> (committed\n"
          "                                            atomically), streaming: at most B MiB of\n"
          "                                            tensor data per rank (default 64); under\n"
          "                                            mpirun each rank converts its share.\n"
          "                                            --dtype: the parameters (the optimizer\n"
          "                                            state stays as stored unless\n"
          "                                            --optim-dtype); --target: one box per\n"
          "                                            tp shard (a MoE model's experts: per ep x\n"
          "                                            etp shard), written for that layout (tp=N\n"
          "                                            or pp=M alone: the other as the\n"
          "                                            checkpoint was laid out; ep, etp: 1 when\n"
          "                                            not given)\n"
          "       meshckpt export DIR OUT.h5 [--dtype fp32|bf16]\n"
          "                                            the model alone, one plain HDF5 file\n"
          "       meshckpt export DIR OUTDIR --format hf [--dtype fp32|bf16]\n"
          "                [--max-shard-size SIZE]     Hugging Face: OUTDIR/config.json and\n"
          "                                            model.safetensors (GPT2LMHeadModel,\n"
          "                                            LlamaForCausalLM, MixtralForCausalLM);\n"
          "                                            --max-shard-size (bytes, or 500MB, 5GB,\n"
          "                                            2GiB): shards model-0000N-of-0000M.safetensors\n"
          "                                            and model.safetensors.index.json\n"
          "       meshckpt import HFDIR OUTROOT --format hf [--mode shared|per-writer]\n"
          "                                            a step-0 checkpoint, parameters only, from\n"
          "                                            a Hugging Face GPT-2, Llama or Mixtral\n"
          "                                            (model.safetensors, or shards listed in\n"
          "                                            model.safetensors.index.json; start training\n"
          "                                            from it with train.init_from=OUTROOT/latest)\n"
          "options: --chunk-mb N (read size per rank, default 64), --hints K=V,K=V (MPI-IO\n"
          "         hints for ckpt.h5, e.g. striping_factor=16,cb_nodes=8), --check (parse\n"
          "         the arguments and read the checkpoint's metadata as the command would,\n"
          "         check --target against its model, write nothing: one OK line, exit 0;\n"
          "         what slurm/meshslurm.py runs before it writes a ckpt-convert job)\n"
          "DIR is a step directory (checkpoints/step_<N>), the file checkpoints/latest, or a\n"
          "checkpoints directory (its newest complete step is used).\n"
          "Exit codes: 0 ok / equal; 1 verify found problems / diff found differences;\n"
          "2 bad input (no such checkpoint, bad options, a file that is not what it should\n"
          "be); 3 runtime failure (an I/O error, a full disk, a file-size limit).\n");
}

/* ------------------------------------------------------------------ */
/* the models a checkpoint describes (lib/model's public API)           */

static int shape_of(const mt_ckpt_meta *m, mt_model_shape *s, int tp) {
  if (m->n_embd > INT32_MAX || m->n_layer > INT32_MAX || m->seq_len > INT32_MAX ||
      m->vocab > INT32_MAX || m->n_head > INT32_MAX || m->moe_experts > INT32_MAX ||
      m->moe_ffn > INT32_MAX || m->moe_shared > INT32_MAX || m->moe_topk > INT32_MAX ||
      m->moe_every > INT32_MAX || m->ffn > INT32_MAX || m->n_kv_head > INT32_MAX)
    return -1;
  *s = (mt_model_shape){.n_layer = (int)m->n_layer, .n_embd = (int)m->n_embd,
                        .n_head = (int)m->n_head, .seq_len = (int)m->seq_len,
                        .vocab = (int)m->vocab, .moe_experts = (int)m->moe_experts,
                        .moe_topk = (int)m->moe_topk, .moe_every = (int)m->moe_every,
                        .moe_ffn = (int)m->moe_ffn, .moe_shared = (int)m->moe_shared,
                        .arch = m->arch == 2 ? MT_ARCH_LLAMA : MT_ARCH_GPT2,
                        .n_kv_head = (int)m->n_kv_head, .ffn = (int)m->ffn, .tied = m->tied != 0,
                        .bias = m->bias != 0,
                        .residual = m->residual == 1 ? MT_RESIDUAL_LADDER : MT_RESIDUAL_STANDARD};
  s->vocab_padded = mt_model_pad_vocab(s->vocab, tp);
  return 0;
}

/* verify's model: the GPT the root attributes describe, at tp = 1 */
static int model_of_meta(const mt_ckpt_meta *m, mt_registry *reg, char *msg, size_t len) {
  mt_model_shape shape;
  if (shape_of(m, &shape, 1) != 0) {
    snprintf(msg, len, "sizes beyond 2^31");
    return -1;
  }
  mt_registry_init(reg, 1, 0);
  mt_err e = {0};
  if (mt_gpt_register(reg, &shape, 1, 0, 0, &e) == 0) return 0;
  snprintf(msg, len, "%s", e.msg);
  return -1;
}

/* The registries of a target layout (mt_ckpt_target_ranks of them: each
 * stage's tp x dp ranks with dp the fewest that hold ep x etp, tp fastest)
 * for the GPT the checkpoint's root attributes describe. */
static int target_registries(const mt_ckpt_meta *m, int tp, int pp, int ep, int etp,
                             mt_registry **out, mt_err *e) {
  *out = NULL;
  mt_model_shape shape;
  if (shape_of(m, &shape, tp) != 0) {
    mt_err_set(e, "--target: the checkpoint's model has sizes beyond 2^31");
    return -1;
  }
  if (shape.moe_experts == 0 && (ep > 1 || etp > 1)) {
    mt_err_set(e, "--target ep=%d,etp=%d: the checkpoint has no experts (a dense model)", ep, etp);
    return -1;
  }
  if (shape.moe_experts > 0 && shape.moe_experts % ep != 0) {
    mt_err_set(e, "--target ep=%d does not divide the checkpoint's %d experts", ep,
               shape.moe_experts);
    return -1;
  }
  if (shape.moe_experts > 0 && shape.moe_ffn % etp != 0) {
    mt_err_set(e, "--target etp=%d does not divide the experts' hidden size %d (moe_ffn)", etp,
               shape.moe_ffn);
    return -1;
  }
  if (pp > shape.n_layer) {
    mt_err_set(e, "--target: pp = %d is more than the model's %d layers", pp, shape.n_layer);
    return -1;
  }
  int *stage_of_layer = mt_calloc((size_t)shape.n_layer + 1, sizeof(int));
  for (int s = 0; s < pp; s++) {
    int l0, l1;
    mt_registry_stage_layers(shape.n_layer, pp, 1, NULL, 0, s, &l0, &l1);
    for (int l = l0; l < l1; l++) stage_of_layer[l] = s;
  }
  const int n = mt_ckpt_target_stage_ranks(tp, ep, etp), world = n * pp;
  mt_registry *regs = mt_calloc((size_t)world, sizeof *regs);
  int rc = 0;
  for (int w = 0; w < world && rc == 0; w++) {
    mt_err why = {0};
    int q = w % n, etp_rank, ep_rank, edp_rank;
    mt_mesh_fold_coords(q, etp, ep, &etp_rank, &ep_rank, &edp_rank);
    mt_gpt_layout lay = {.tp_size = tp, .tp_rank = q % tp, .sp = 0, .n_layer = shape.n_layer,
                         .stage_of_layer = pp > 1 ? stage_of_layer : NULL, .pp_last = pp - 1,
                         .pp_rank = w / n, .ep_size = ep, .ep_rank = ep_rank, .etp_size = etp,
                         .etp_rank = etp_rank};
    char moe[64] = "";
    if (shape.moe_experts > 0) snprintf(moe, sizeof moe, ",ep=%d,etp=%d", ep, etp);
    if (mt_gpt_register_layout(&regs[w], &shape, &lay, &why) != 0) {
      mt_err_set(e, "--target tp=%d,pp=%d%s does not fit the model (%s)", tp, pp, moe, why.msg);
      rc = -1;
    }
  }
  free(stage_of_layer);
  *out = regs;
  return rc;
}

static void free_targets(mt_registry *targets, int tp, int pp, int ep, int etp) {
  for (int w = 0; targets && w < mt_ckpt_target_ranks(tp, pp, ep, etp); w++)
    mt_registry_free(&targets[w]);
  free(targets);
}

/* ------------------------------------------------------------------ */
/* commands                                                            */

typedef struct {
  const char *cmd, *pos[2];
  int npos, deep, list, check;
  const char *dtype, *format, *hints, *target;
  int64_t max_shard_bytes; /* export --format hf: 0, one file */
  double rtol, chunk_mb;
  mt_ckpt_convert_opts convert;
  double buffer_mb;
} args;

/* a failure: rank 0's line; the exit code the error says (2 or 3) */
static int failed(const mt_err *e) {
  mt_err_report(e, PROG);
  return mt_err_exit_code(e);
}

static int ranks(void) {
  int n = 1;
  MT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &n));
  return n;
}

/* "tp=N", "pp=M", "ep=E", "etp=F", comma-separated in any order, at
 * least one of them, into tp, pp, ep, etp (0: not given) */
static int parse_target(const char *v, int *tp, int *pp, int *ep, int *etp) {
  *tp = *pp = *ep = *etp = 0;
  char buf[64];
  if (strlen(v) >= sizeof buf) return -1;
  snprintf(buf, sizeof buf, "%s", v);
  for (char *save = NULL, *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
    int n = 0;
    char extra;
    int *slot = !strncmp(kv, "tp=", 3)    ? tp
                : !strncmp(kv, "pp=", 3)  ? pp
                : !strncmp(kv, "ep=", 3)  ? ep
                : !strncmp(kv, "etp=", 4) ? etp
                                          : NULL;
    const char *num = strchr(kv, '=') + 1;
    if (!slot || *slot || sscanf(num, "%d%c", &n, &extra) != 1 || n < 1 || n > 4096) return -1;
    *slot = n;
  }
  return *tp || *pp || *ep || *etp ? 0 : -1;
}

static int cmd_convert(const args *a) {
  mt_err err = {0};
  mt_ckpt_convert_opts o = a->convert;
  mt_registry *targets = NULL;
  char dir[1024];
  if (mt_ckpt_find(a->pos[0], dir, sizeof dir, &err) != 0) return failed(&err);
  if (a->target) {
    int tp = 0, pp = 0, ep = 0, etp = 0;
    parse_target(a->target, &tp, &pp, &ep, &etp); /* checked with the options */
    mt_ckpt_meta m;
    char again[1024];
    if (mt_ckpt_read_meta_of(dir, again, sizeof again, &m, &err) == 0) {
      /* what is not given stays as the checkpoint is laid out (the experts:
       * ep = etp = 1) */
      o.target_tp = tp ? tp : (int)(m.target_tp > 0 ? m.target_tp : m.tp);
      o.target_pp = pp ? pp : (int)(m.target_tp > 0 ? m.target_pp : m.pp);
      o.target_ep = ep ? ep : 1;
      o.target_etp = etp ? etp : 1;
      target_registries(&m, o.target_tp, o.target_pp, o.target_ep, o.target_etp, &targets, &err);
      o.targets = targets;
    }
    mt_err_agree(&err, MPI_COMM_WORLD);
  }
  mt_ckpt_convert_stats st;
  int rc = err.failed ? -1 : mt_ckpt_convert(dir, a->pos[1], &o, &st, &err);
  free_targets(targets, o.target_tp, o.target_pp, o.target_ep, o.target_etp);
  if (rc != 0) return failed(&err);
  if (g_rank == 0) {
    char layout[64] = "";
    if (o.target_tp > 0 && (o.target_ep > 1 || o.target_etp > 1))
      snprintf(layout, sizeof layout, ", laid out for tp=%d pp=%d ep=%d etp=%d", o.target_tp,
               o.target_pp, o.target_ep, o.target_etp);
    else if (o.target_tp > 0)
      snprintf(layout, sizeof layout, ", laid out for tp=%d pp=%d", o.target_tp, o.target_pp);
    printf("convert: %s -> %s/step_%lld (%s, parameters %s, %s%s, %lld boxes%s)\n", dir,
           a->pos[1], (long long)st.step, mt_ckpt_mode_name(o.mode), mt_dtype_name(st.param_dtype),
           st.groups == 1 ? "no optimizer state" : "optimizer state ",
           st.groups == 1 ? "" : mt_dtype_name(st.optim_dtype), (long long)st.boxes, layout);
    printf("convert: read %.3f GB, wrote %.3f GB in %.2f s on %d rank(s): %.3f GB/s read; "
           "peak RSS %.1f MiB (largest rank), buffer %.1f MiB per rank\n",
           st.bytes_read / 1e9, st.bytes_written / 1e9, st.seconds, ranks(),
           st.bytes_read / 1e9 / st.seconds, st.peak_rss_max / 1048576.0,
           st.buffer_bytes / 1048576.0);
  }
  return 0;
}

/* ------------------------------------------------------------------ */
/* Hugging Face                                                        */

/* the model keys of an imported model: what a run started from it reads
 * back (train.init_from) and stores in its own checkpoints */
static void config_of_hf(const mt_ckpt_hf_config *c, mt_config *cfg) {
  mt_config_defaults(cfg);
  cfg->model_preset = MT_PRESET_CUSTOM;
  cfg->n_layer = c->n_layer;
  cfg->n_embd = c->n_embd;
  cfg->n_head = c->n_head;
  cfg->seq_len = c->seq_len;
  cfg->vocab_size = c->vocab;
  snprintf(cfg->bos_token_id, sizeof cfg->bos_token_id, "%s", c->bos_token_id);
  snprintf(cfg->eos_token_id, sizeof cfg->eos_token_id, "%s", c->eos_token_id);
  cfg->arch = c->arch == 2 ? MT_ARCH_LLAMA : MT_ARCH_GPT2;
  if (c->arch != 2) return; /* GPT-2: tied, biased, 4 x the width */
  cfg->n_kv_head = c->n_kv_head;
  cfg->ffn_size = c->ffn;
  cfg->norm_eps = c->norm_eps;
  cfg->rope_theta = c->rope_theta;
  cfg->rope_scaling = c->rope_scaling;
  if (c->rope_scaling == MT_ROPE_SCALING_LLAMA3) {
    cfg->rope_factor = c->rope_factor;
    cfg->rope_low_freq_factor = c->rope_low_freq_factor;
    cfg->rope_high_freq_factor = c->rope_high_freq_factor;
    cfg->rope_original_len = c->rope_original_len;
  }
  cfg->tie_embeddings = c->tied ? MT_TRI_TRUE : MT_TRI_FALSE;
  cfg->bias = c->bias ? MT_TRI_TRUE : MT_TRI_FALSE;
  cfg->moe_experts = c->moe_experts;
  if (c->moe_experts > 0) {
    cfg->moe_topk = c->moe_topk;
    cfg->moe_every = 1;
    cfg->moe_ffn = c->moe_ffn;
    cfg->moe_shared = 0;
  }
}

/* a step-0 checkpoint (parameters only) from a Hugging Face directory */
static int cmd_import_hf(const args *a) {
  mt_err err = {0};
  mt_ckpt_hf_config hc;
  mt_ckpt_hf_read_config(a->pos[0], &hc, &err);
  if (mt_err_agree(&err, MPI_COMM_WORLD)) return failed(&err);
  mt_config cfg;
  config_of_hf(&hc, &cfg);
  mt_model_shape shape;
  mt_registry reg;
  mt_registry_init(&reg, 1, 0);
  mt_err why = {0};
  if (mt_model_shape_from_config(&cfg, &shape, &why) != 0 ||
      mt_gpt_register(&reg, &shape, 1, 0, 0, &why) != 0)
    mt_err_set(&err, "%s/config.json describes no model meshtrain can build (%s)", a->pos[0],
               why.msg);
  if (mt_err_agree(&err, MPI_COMM_WORLD)) {
    mt_registry_free(&reg);
    return failed(&err);
  }
  char *ini = NULL;
  size_t ini_len = 0;
  FILE *mf = open_memstream(&ini, &ini_len);
  fprintf(mf, "# imported from a Hugging Face %s (%s)\n", mt_ckpt_hf_class(&hc), a->pos[0]);
  mt_config_write_ini_section(&cfg, "model", mf);
  fclose(mf);
  double t0 = mt_now();
  int rc = mt_ckpt_import_hf(a->pos[0], &hc, &reg, a->pos[1], a->convert.mode, ini, &err);
  mt_registry_free(&reg);
  free(ini);
  if (rc != 0) return failed(&err);
  if (g_rank == 0)
    printf("import: %s -> %s/step_0 (%s, %s, parameters only: L=%d C=%d H=%d T=%d V=%d) in "
           "%.2f s\n", a->pos[0], a->pos[1], mt_ckpt_hf_class(&hc),
           mt_ckpt_mode_name(a->convert.mode), hc.n_layer, hc.n_embd, hc.n_head, hc.seq_len,
           hc.vocab, mt_now() - t0);
  return 0;
}

/* The Hugging Face model of checkpoint dir: the sizes of its root
 * attributes, and from its stored configuration (as the run resolved it)
 * the norm epsilon, the rotary base and scaling, the token ids. A Mixtral
 * has experts in every block, no shared ones, and routes by the softmax of
 * the router's scores alone. Collective. */
static int hf_model_of(const char *dir, mt_ckpt_hf_config *c, mt_err *e) {
  mt_ckpt_meta m;
  char again[1024];
  MT_TRY(e, mt_ckpt_read_meta_of(dir, again, sizeof again, &m, e));
  mt_ckpt_hf_config_of_meta(&m, c);
  if (m.residual != MT_RESIDUAL_STANDARD) {
    mt_err_set(e, "%s: a model with the ladder residual (model.residual = ladder) has no Hugging "
                  "Face class (each of them adds every module's output at once): not exported",
               dir);
    return -1;
  }
  /* what no class holds first: a GPT-2 with experts is not a Mixtral */
  MT_TRY(e, mt_ckpt_hf_check_exportable(c, dir, e));
  if (m.arch == 2 && m.moe_experts > 0 && (m.moe_every != 1 || m.moe_shared != 0)) {
    mt_err_set(e, "%s: MixtralForCausalLM has experts in every block and no shared experts; this "
                  "model has moe_every = %lld, moe_shared = %lld: not exported", dir,
               (long long)m.moe_every, (long long)m.moe_shared);
    return -1;
  }
  if (m.moe_experts > 0 && m.moe_router != MT_ROUTER_SOFTMAX) {
    mt_err_set(e, "%s: MixtralForCausalLM's router is a softmax over the experts; this model's "
                  "is %s (model.moe_router): not exported", dir,
               mt_moe_router_name((mt_moe_router)m.moe_router));
    return -1;
  }
  char *text = NULL;
  MT_TRY(e, mt_ckpt_read_config_of(dir, again, sizeof again, &text, e));
  mt_model_stored ms;
  mt_err why = {0};
  if (mt_model_stored_of(text, "its stored configuration", &ms, &why) != 0) {
    if (m.arch == 2)
      mt_err_set(e, "%s: %s: the rotary base and norm epsilon of the model are unknown: not "
                    "exported", dir, why.msg);
  } else {
    const mt_model_shape s = ms.shape;
    snprintf(c->bos_token_id, sizeof c->bos_token_id, "%s", ms.bos_token_id);
    snprintf(c->eos_token_id, sizeof c->eos_token_id, "%s", ms.eos_token_id);
    c->norm_eps = ms.norm_eps;
    c->rope_theta = s.rope_theta;
    c->rope_scaling = s.rope_scaling;
    c->rope_factor = s.rope_factor;
    c->rope_low_freq_factor = s.rope_low_freq_factor;
    c->rope_high_freq_factor = s.rope_high_freq_factor;
    c->rope_original_len = s.rope_original_len;
  }
  free(text);
  if (e->failed || m.moe_experts == 0) return e->failed ? -1 : 0;
  /* aux-loss-free balancing's bias chooses the experts too */
  int found = 0;
  float *bias = mt_calloc((size_t)(m.n_layer * m.moe_experts) + 1, sizeof(float));
  if (mt_ckpt_load_moe_bias(dir, bias, m.n_layer, m.moe_experts, &found, e) == 0 && found)
    for (int64_t i = 0; i < m.n_layer * m.moe_experts && !e->failed; i++)
      if (bias[i] != 0.0f)
        mt_err_set(e, "%s: its experts are chosen with a balancing bias (train.moe_balance = "
                      "bias), which MixtralForCausalLM has no place for: not exported", dir);
  free(bias);
  return e->failed ? -1 : 0;
}

static int cmd_export_hf(const args *a) {
  mt_err err = {0};
  double t0 = mt_now();
  char dir[1024];
  mt_ckpt_hf_config hc;
  if (mt_ckpt_find(a->pos[0], dir, sizeof dir, &err) == 0) hf_model_of(dir, &hc, &err);
  if (mt_err_agree(&err, MPI_COMM_WORLD)) return failed(&err);
  mt_ckpt_hf_export_opts o = {.dtype = !strcmp(a->dtype, "bf16") ? MT_DT_BF16 : MT_DT_F32,
                              .max_shard_bytes = a->max_shard_bytes, .model = &hc};
  if (mt_ckpt_export_hf(dir, a->pos[1], &o, &err) != 0) return failed(&err);
  if (g_rank == 0)
    printf("export: %s -> %s/%s + config.json (%s, %s) in %.2f s\n", dir, a->pos[1],
           a->max_shard_bytes ? "model safetensors shards" : "model.safetensors",
           mt_ckpt_hf_class(&hc), a->dtype, mt_now() - t0);
  return 0;
}

/* "123", "500MB", "5GB", "2GiB", ... in bytes (KB, MB, GB: powers of 1000;
 * KiB, MiB, GiB: of 1024), as transformers' max_shard_size reads it */
static int parse_size(const char *v, int64_t *bytes) {
  static const struct {
    const char *unit;
    double scale;
  } units[] = {{"", 1},        {"B", 1},          {"KB", 1e3},       {"MB", 1e6},
               {"GB", 1e9},    {"KiB", 1024.0},   {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
  char *end = NULL;
  double x = strtod(v, &end);
  for (size_t i = 0; end != v && i < sizeof units / sizeof units[0]; i++)
    if (!strcmp(end, units[i].unit) && x * units[i].scale >= 1 && x * units[i].scale < 1e18) {
      *bytes = (int64_t)(x * units[i].scale);
      return 0;
    }
  return -1;
}

/* --check: everything the command reads before it works, read now (the
 * checkpoint's manifest and metadata; both of diff's; for import the
 * Hugging Face config), --target checked against the model; nothing
 * written. What slurm/meshslurm.py runs before it writes a ckpt-convert job.
 * Collective; returns the exit code. */
static int check_only(const args *a) {
  mt_err err = {0};
  if (!strcmp(a->cmd, "import")) {
    mt_ckpt_hf_config hc;
    mt_ckpt_hf_read_config(a->pos[0], &hc, &err);
    if (mt_err_agree(&err, MPI_COMM_WORLD)) return failed(&err);
    if (g_rank == 0)
      printf("meshckpt: check: OK: import of %s (%s, %d layers)\n", a->pos[0],
             mt_ckpt_hf_class(&hc), hc.n_layer);
    return 0;
  }
  char dir[1024], other[1024];
  mt_ckpt_meta m, mb;
  mt_ckpt_read_meta_of(a->pos[0], dir, sizeof dir, &m, &err);
  if (!err.failed && !strcmp(a->cmd, "diff"))
    mt_ckpt_read_meta_of(a->pos[1], other, sizeof other, &mb, &err);
  if (!err.failed && a->target) {
    int tp = 0, pp = 0, ep = 0, etp = 0;
    parse_target(a->target, &tp, &pp, &ep, &etp); /* checked with the options */
    tp = tp ? tp : (int)(m.target_tp > 0 ? m.target_tp : m.tp);
    pp = pp ? pp : (int)(m.target_tp > 0 ? m.target_pp : m.pp);
    ep = ep ? ep : 1;
    etp = etp ? etp : 1;
    mt_registry *targets = NULL;
    target_registries(&m, tp, pp, ep, etp, &targets, &err);
    free_targets(targets, tp, pp, ep, etp);
  }
  if (mt_err_agree(&err, MPI_COMM_WORLD)) return failed(&err);
  if (g_rank == 0)
    printf("meshckpt: check: OK: %s of %s (step %lld, written by dp=%lld tp=%lld pp=%lld)\n",
           a->cmd, dir, (long long)m.step, (long long)m.dp, (long long)m.tp, (long long)m.pp);
  return 0;
}

static int run(const args *a) {
  mt_err err = {0};
  size_t chunk = (size_t)(a->chunk_mb * 1048576.0);
  int bf16 = !strcmp(a->dtype, "bf16");
  if (!strcmp(a->cmd, "inspect")) {
    if (mt_ckpt_inspect(a->pos[0], a->list, stdout, &err) != 0) return failed(&err);
    return 0;
  }
  if (!strcmp(a->cmd, "verify")) {
    mt_ckpt_verify_opts o = {.deep = a->deep, .chunk_bytes = chunk, .model = model_of_meta};
    long problems = 0;
    if (mt_ckpt_verify(a->pos[0], &o, stdout, &problems, &err) != 0) return failed(&err);
    return problems ? 1 : 0;
  }
  if (!strcmp(a->cmd, "diff")) {
    int differ = 0;
    if (mt_ckpt_diff(a->pos[0], a->pos[1], a->rtol, chunk, stdout, &differ, &err) != 0)
      return failed(&err);
    return differ ? 1 : 0;
  }
  if (!strcmp(a->cmd, "convert")) return cmd_convert(a);
  if (!strcmp(a->cmd, "import")) return cmd_import_hf(a);
  /* export */
  if (a->format && !strcmp(a->format, "hf")) return cmd_export_hf(a);
  if (mt_ckpt_export_h5(a->pos[0], a->pos[1], bf16 ? MT_DT_BF16 : MT_DT_F32, chunk, &err) != 0)
    return failed(&err);
  if (g_rank == 0) printf("export: %s as %s -> %s\n", a->pos[0], a->dtype, a->pos[1]);
  return 0;
}

static void parse(int argc, char **argv, args *a, mt_err *e) {
  *a = (args){.cmd = argc > 1 ? argv[1] : NULL, .dtype = "fp32", .chunk_mb = 64,
              .convert = {.mode = MT_CKPT_MODE_SHARED, .param_dtype = -1, .optim_dtype = -1,
                          .buffer_bytes = (size_t)64 << 20, .test_crash = MT_CKPT_CRASH_NONE}};
  for (int i = 2; i < argc; i++) {
    const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(arg, "--deep")) a->deep = 1;
    else if (!strcmp(arg, "--check")) a->check = 1;
    else if (!strcmp(arg, "--tensors")) a->list = 1;
    else if (!strcmp(arg, "--params-only")) a->convert.params_only = 1;
    else if (!strcmp(arg, "--mode") && val) {
      /* ckpt.mode's choices but none: a conversion writes a checkpoint */
      int mode = mt_config_enum_parse("ckpt.mode", argv[++i]);
      if (mode != MT_CKPT_MODE_SHARED && mode != MT_CKPT_MODE_PER_WRITER)
        mt_err_set(e, "--mode: '%s' is not shared or per-writer", val);
      else a->convert.mode = (mt_ckpt_mode)mode;
    } else if ((!strcmp(arg, "--dtype") || !strcmp(arg, "--optim-dtype")) && val) {
      i++;
      if (strcmp(val, "fp32") && strcmp(val, "bf16"))
        mt_err_set(e, "%s: '%s' is not fp32 or bf16", arg, val);
      int code = !strcmp(val, "bf16") ? MT_DT_BF16 : MT_DT_F32;
      if (!strcmp(arg, "--dtype")) {
        a->dtype = val;
        a->convert.param_dtype = code;
      } else {
        a->convert.optim_dtype = code;
      }
    } else if (!strcmp(arg, "--format") && val) {
      a->format = argv[++i];
      if (strcmp(val, "hf") && strcmp(val, "h5"))
        mt_err_set(e, "--format: '%s' is not hf or h5", val);
    } else if (!strcmp(arg, "--target") && val) {
      int tp, pp, ep, etp;
      a->target = argv[++i];
      if (parse_target(val, &tp, &pp, &ep, &etp) != 0)
        mt_err_set(e,
                   "--target: '%s' is not tp=N, pp=M or tp=N,pp=M (positive; a MoE checkpoint "
                   "also ep=E, etp=F)",
                   val);
    } else if (!strcmp(arg, "--max-shard-size") && val) {
      if (parse_size(argv[++i], &a->max_shard_bytes) != 0)
        mt_err_set(e, "--max-shard-size: '%s' is not a size (bytes, or e.g. 500MB, 5GB, 2GiB)",
                   val);
    } else if (!strcmp(arg, "--buffer-mb") && val) {
      double mb = atof(argv[++i]);
      if (!(mb >= 1)) mt_err_set(e, "--buffer-mb: '%s' is not a number >= 1", val);
      else a->convert.buffer_bytes = (size_t)(mb * 1048576.0);
    } else if (!strcmp(arg, "--rtol") && val) {
      a->rtol = atof(argv[++i]);
      if (!(a->rtol >= 0)) mt_err_set(e, "--rtol: '%s' is not a number >= 0", val);
    } else if (!strcmp(arg, "--hints") && val) {
      a->hints = argv[++i];
    } else if (!strcmp(arg, "--test-crash") && val) {
      int phase = mt_config_enum_parse("ckpt.test_crash", argv[++i]);
      if (phase != MT_CKPT_CRASH_NONE && phase != MT_CKPT_CRASH_WRITE)
        mt_err_set(e, "--test-crash: '%s' is not none or write", val);
      else a->convert.test_crash = (mt_ckpt_crash)phase;
    } else if (!strcmp(arg, "--chunk-mb") && val) {
      a->chunk_mb = atof(argv[++i]);
      if (!(a->chunk_mb > 0)) mt_err_set(e, "--chunk-mb: '%s' is not a positive number", val);
    } else if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
      a->cmd = "help";
    } else if (arg[0] == '-') {
      mt_err_set(e, "unknown option '%s' (or its value is missing)", arg);
    } else if (a->npos < 2) {
      a->pos[a->npos++] = arg;
    } else {
      mt_err_set(e, "too many arguments ('%s')", arg);
    }
  }
  if (!a->cmd || !strcmp(a->cmd, "help") || !strcmp(a->cmd, "--help") || !strcmp(a->cmd, "-h"))
    return;
  if (a->hints && !e->failed) mt_ckpt_set_io_hints(a->hints, e);
  const char *cmd = a->cmd;
  int need = !strcmp(cmd, "diff") || !strcmp(cmd, "convert") || !strcmp(cmd, "export") ||
                     !strcmp(cmd, "import")
                 ? 2
                 : 1;
  if (strcmp(cmd, "inspect") && strcmp(cmd, "verify") && strcmp(cmd, "diff") &&
      strcmp(cmd, "convert") && strcmp(cmd, "export") && strcmp(cmd, "import"))
    mt_err_set(e, "unknown command '%s' (inspect|verify|diff|convert|export|import)", cmd);
  else if (a->npos != need)
    mt_err_set(e, "%s needs %d path%s (see --help)", cmd, need, need == 1 ? "" : "s");
  else if (!strcmp(cmd, "import") && (!a->format || strcmp(a->format, "hf") != 0))
    mt_err_set(e, "import needs --format hf (a Hugging Face model directory)");
  else if (a->target && strcmp(cmd, "convert") != 0)
    mt_err_set(e, "--target is an option of convert");
  else if (a->max_shard_bytes && (strcmp(cmd, "export") || !a->format || strcmp(a->format, "hf")))
    mt_err_set(e, "--max-shard-size is an option of export --format hf");
}

int main(int argc, char **argv) {
  mt_mpi_init(&argc, &argv, MPI_THREAD_SINGLE);
  g_rank = mt_log_rank();
  mt_err err = {0};
  args a;
  parse(argc, argv, &a, &err);
  int rc;
  if (!a.cmd || !strcmp(a.cmd, "help") || !strcmp(a.cmd, "--help") || !strcmp(a.cmd, "-h")) {
    if (g_rank == 0) usage(a.cmd ? stdout : stderr);
    rc = a.cmd ? MT_EXIT_OK : MT_EXIT_BADINPUT;
  } else if (mt_err_agree(&err, MPI_COMM_WORLD)) {
    rc = failed(&err);
  } else {
    rc = a.check ? check_only(&a) : run(&a);
  }
  MT_MPI_CHECK(MPI_Finalize());
  return rc;
}
