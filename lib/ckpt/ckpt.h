/* ckpt: universal HDF5 checkpoints.
 *
 * Every registry tensor is stored as its canonical logical array (global,
 * unpadded, unfused shape, global layer names); each rank writes the part it
 * owns as a union of hyperslabs, so a checkpoint written under one layout
 * loads under any other by reading the hyperslabs that layout needs. A save
 * is committed atomically: written under step_<N>.tmp-<id>/, then a manifest,
 * fsync, rename, and `latest` replaced by rename. A loader ignores anything
 * without a complete manifest. docs: ckpt/SCHEMA.md beside this file.
 *
 * Knows tensors only through the registry and state only as flat ranges; no
 * model, no optimizer internals.
 *
 * The module in three layers, one public header (this one):
 *   core/     the format, the writers, the reader, the checks (private
 *             header core/ckpt_core.h; includes nothing of the other two);
 *   tools/    conversion and inspection (meshckpt's commands), on core;
 *   interop/  Hugging Face safetensors and GPT-2 names, on core.
 * Nothing outside lib/ckpt includes more than this header (tests/ckpt/
 * layers.sh holds it). */
#ifndef MT_CKPT_H
#define MT_CKPT_H

#include <stdint.h>
#include <stdio.h>
#include "comm/comm.h"
#include "core/core.h"
#include "registry/registry.h"

#define MT_CKPT_FORMAT "meshtrain-checkpoint"
#define MT_CKPT_VERSION_MAJOR 1
#define MT_CKPT_VERSION_MINOR 4
#define MT_CKPT_VERSION_PATCH 0

/* exit code of a run that checkpointed because it was asked to stop
 * (SIGUSR1/SIGTERM): EX_TEMPFAIL, "try again" — the Slurm scripts requeue on it */
#define MT_EXIT_PREEMPTED 75

/* The state groups of a checkpoint, in this order. */
enum { MT_CKPT_MODEL = 0, MT_CKPT_EXP_AVG = 1, MT_CKPT_EXP_AVG_SQ = 2, MT_CKPT_NGROUPS = 3 };
const char *mt_ckpt_group_path(int group); /* "model", "optim/exp_avg", ... */

/* Scalars that travel with the tensors. */
typedef struct {
  int64_t step;           /* optimizer steps completed */
  int64_t samples;        /* global samples consumed (the sampler's position) */
  int64_t tokens;         /* tokens consumed */
  int64_t optimizer_step; /* AdamW's t */
  int64_t seed;
  int64_t n_layer, n_embd, n_head, seq_len, vocab; /* the model */
  int64_t dp, tp, pp, cp, zero, world;             /* the writing layout */
  /* format 1.2: the MoE shape (moe_experts = 0: dense) and the folded mesh
   * that wrote it */
  int64_t moe_experts, moe_topk, moe_every, moe_ffn, moe_shared;
  int64_t ep, etp;
  /* the router's scores (core.h's mt_moe_router: 0 softmax, 1 sigmoid); an
   * optional root attribute of 1.4, absent = softmax */
  int64_t moe_router;
  /* the optimizer (core.h's mt_optim_kind: 0 AdamW, 1 Muon); an optional
   * root attribute of 1.4, absent = AdamW. Under Muon, exp_avg holds Muon's
   * momentum for the matrices it updates and exp_avg_sq is zero there */
  int64_t optimizer;
  /* the residual stream (core.h's mt_residual: 0 standard, 1 ladder); an
   * optional root attribute of 1.4, absent = standard */
  int64_t residual;
  /* for a save only (a load leaves it NULL; read it with
   * mt_ckpt_load_moe_bias): the routing bias of aux-loss-free MoE balancing,
   * moe_bias_rows (the MoE blocks) x moe_experts floats, the same on every
   * rank and layout; NULL: none (the dataset is left out) */
  const float *moe_bias;
  int64_t moe_bias_rows;
  /* format 1.3, informative (not in meta_xxh64): the layout a conversion
   * laid the boxes out for (meshckpt convert --target), 0 when none; of a
   * MoE checkpoint also its folded mesh (0 when not recorded) */
  int64_t target_tp, target_pp, target_ep, target_etp;
  /* format 1.4: the architecture (model.h's mt_model_shape): arch (1 gpt2,
   * 2 llama), key/value heads, the dense MLP's hidden size, tied LM head,
   * biases on the linears; arch 0 (or a checkpoint before 1.4): a GPT-2 of
   * the sizes above (n_kv_head = n_head, ffn = 4 n_embd, tied, biases) */
  int64_t arch, n_kv_head, ffn, tied, bias;
  /* informative, optional (not in meta_xxh64): the hash of what decides
   * the training windows (mt_sources_hash), 0 when not recorded; a resume
   * says when its data differ */
  int64_t data_hash;
} mt_ckpt_meta;

/* arch 0 (a meta that leaves the architecture open): the GPT-2 values */
void mt_ckpt_meta_arch_defaults(mt_ckpt_meta *m);

/* What to write or read, per group: flat ranges of the registry's local index
 * space with their memory (see mt_flat_range). */
typedef struct {
  const mt_flat_range *ranges[MT_CKPT_NGROUPS];
  int n_ranges[MT_CKPT_NGROUPS];
} mt_ckpt_state;

typedef struct {
  mt_ckpt_mode mode;      /* shared or per-writer (core.h, ckpt.mode's enum) */
  int keep;               /* complete checkpoints to keep (0 = all) */
  mt_ckpt_crash test_crash; /* tests: the phase rank 0 kills itself at (ckpt.test_crash) */
  const char *config_ini; /* the resolved configuration, stored as text */
} mt_ckpt_save_opts;

/* Collective over mesh->world. Saves into <root>/step_<meta->step>/ and
 * points <root>/latest at it. Returns 0, or non-zero with e set (same on
 * every rank). Timing of the phases (seconds) goes to *write_s if not NULL. */
int mt_ckpt_save(const char *root, const mt_ckpt_meta *meta, const mt_registry *reg,
                 mt_mesh *mesh, const mt_ckpt_state *st, const mt_ckpt_save_opts *opts,
                 double *write_s, mt_err *e);

/* Seconds this rank spent in the checks that make a commit a promise during
 * its last save (mt_ckpt_save or an asynchronous one, committed): the scan
 * of every value written for NaN and Inf, the shard file opened again and
 * checked, and on rank 0 the checkpoint read back and checked before the
 * rename. For benchmarks (meshbench ckpt reports it against the save). */
double mt_ckpt_last_check_seconds(void);

/* Asynchronous save (per-writer layout): collective begin starts a thread
 * that copies this rank's ranges to a host snapshot (see
 * mt_ckpt_async_fence) and then writes its shard file; training goes on. mt_ckpt_async_poll (collective, at a step boundary):
 * when every rank's writer is done (or wait != 0: after waiting for it), the
 * index is written and the checkpoint committed; returns 1 then (and frees
 * *a), 0 while still writing, -1 on failure (e set). write_s: seconds from
 * begin to the shard written. */
typedef struct mt_ckpt_async mt_ckpt_async;
mt_ckpt_async *mt_ckpt_async_begin(const char *root, const mt_ckpt_meta *meta,
                                   const mt_registry *reg, mt_mesh *mesh,
                                   const mt_ckpt_state *st, const mt_ckpt_save_opts *opts,
                                   mt_err *e);
int mt_ckpt_async_poll(mt_ckpt_async **a, int wait, double *write_s, int64_t *step, mt_err *e);
/* The snapshot of a save begun by mt_ckpt_async_begin is taken in the
 * background: the caller must not change the saved state (the memory of
 * st's ranges) before this returns. Call it before the optimizer step after
 * a begin (NULL: nothing in flight). Not collective. Returns the seconds it
 * waited. */
double mt_ckpt_async_fence(mt_ckpt_async *a);

/* Resolve what to load (rank 0 looks, then broadcasts): spec "auto" means the
 * newest complete step directory under root (found = 0 and no error if there
 * is none); any other spec is a step directory, or a directory holding step
 * directories. dir receives the step directory. Collective. Errors name the
 * path; the caller names its key. */
int mt_ckpt_resolve(const char *spec, const char *root, char *dir, size_t dir_len, int *found,
                    mt_err *e);

/* Collective: read dir's metadata, check it matches the model in reg/expect
 * (format, version, shapes: errors name the tensor and both shapes), then
 * read into every range of st. verify: check every written box's checksum
 * (the boxes are spread over the ranks). */
int mt_ckpt_load(const char *dir, const mt_registry *reg, mt_mesh *mesh, const mt_ckpt_state *st,
                 const mt_ckpt_meta *expect, int verify, mt_ckpt_meta *meta_out, mt_err *e);
/* The same for the parameters alone (group MT_CKPT_MODEL of st; the other
 * groups are neither read nor required): a run that starts from another
 * run's weights (train.init_from), e.g. a parameters-only checkpoint. */
int mt_ckpt_load_params(const char *dir, const mt_registry *reg, mt_mesh *mesh,
                        const mt_ckpt_state *st, const mt_ckpt_meta *expect, int verify,
                        mt_ckpt_meta *meta_out, mt_err *e);

/* Collective over MPI_COMM_WORLD: the routing bias of aux-loss-free MoE
 * balancing stored in checkpoint dir (rank 0 reads, every rank receives)
 * into bias (rows x E). *found = 0 (bias untouched) when the checkpoint has
 * none (a run balanced otherwise, or written before the bias existed); a
 * stored bias of another shape is an error naming both shapes. */
int mt_ckpt_load_moe_bias(const char *dir, float *bias, int64_t rows, int64_t E, int *found,
                          mt_err *e);
/* How to load (mt_ckpt_load_with): verify: check every stored box's
 * checksum before any value is used; params_only: group MT_CKPT_MODEL alone
 * (the others neither read nor required: train.init_from);
 * shorter_positions: the run may have fewer positions than the checkpoint
 * (model.seq_len): of a position table (a tensor whose registry axes begin
 * with "position") it reads the first rows. */
typedef struct {
  int verify, params_only, shorter_positions;
} mt_ckpt_load_opts;
int mt_ckpt_load_with(const char *dir, const mt_registry *reg, mt_mesh *mesh,
                      const mt_ckpt_state *st, const mt_ckpt_meta *expect,
                      const mt_ckpt_load_opts *o, mt_ckpt_meta *meta_out, mt_err *e);

/* MPI-IO hints for the shared file ("key=value,key=value", e.g.
 * "striping_factor=16,striping_unit=16777216,cb_nodes=8"): given to
 * MPI_File_open when rank 0 creates ckpt.h5 (striping takes effect at
 * creation) and when a load opens it. "" clears them. Returns 0, or -1 with
 * e naming the bad entry (no MPI call: usable before the first collective). */
int mt_ckpt_set_io_hints(const char *spec, mt_err *e);

/* Stored element types (SCHEMA.md) are core's mt_dtype: training writes
 * MT_DT_F32; a conversion may store parameters (or, when asked, everything)
 * as MT_DT_BF16. */

/* The ranks of a pipeline stage of a target layout: tp x dp with the
 * fewest dp ranks that hold etp x ep (the least common multiple of tp and
 * etp x ep; 0 counts as 1); and the writers of a target, stages x that. */
int mt_ckpt_target_stage_ranks(int tp, int ep, int etp);
int mt_ckpt_target_ranks(int tp, int pp, int ep, int etp);

/* Offline conversion (meshckpt convert), collective over MPI_COMM_WORLD on
 * any number of ranks: each converts its share of the boxes, streaming, with
 * at most buffer_bytes of tensor data in memory per rank. */
typedef struct {
  mt_ckpt_mode mode;  /* shared or per-writer */
  int param_dtype;    /* MT_DT_F32 or MT_DT_BF16; -1: as stored */
  int optim_dtype;    /* the same for the AdamW moments (-1: as stored, float32 from training) */
  int params_only;    /* drop the optimizer state (for inference) */
  /* a layout hint: the boxes become the tp shards of tp = target_tp, each
   * written by its target rank (per-writer: one shard file per target rank),
   * the datasets of a pipeline stage together (shared); 0 = keep the
   * source's boxes. A MoE model's experts become the shards of target_ep x
   * target_etp (0: 1), each written once (by the expert-data-parallel rank
   * 0 of its shard). Writer
   * w at stage w / n, place q = w % n (n = mt_ckpt_target_stage_ranks;
   * targets: mt_ckpt_target_ranks of them):
   * tp rank q % target_tp, dp rank q / target_tp, folded etp, ep, edp
   * ranks of q (mt_mesh_fold_coords); with their pp stages set, made by
   * the caller from the model. */
  int target_tp, target_pp, target_ep, target_etp;
  const mt_registry *targets;
  size_t buffer_bytes;    /* per rank; at least 1 MiB */
  mt_ckpt_crash test_crash; /* none or write: rank 0 kills itself halfway (tests) */
} mt_ckpt_convert_opts;

typedef struct {
  int64_t step, boxes;
  int groups, param_dtype, optim_dtype;
  double bytes_read, bytes_written, seconds; /* all ranks together */
  double peak_rss_max;                       /* bytes, the largest rank's peak RSS */
  double buffer_bytes;
} mt_ckpt_convert_stats;

/* Reads src_dir, writes <dst_root>/step_<N> (committed atomically, `latest`
 * updated). 0, or -1 with e set (the same on every rank). */
int mt_ckpt_convert(const char *src_dir, const char *dst_root, const mt_ckpt_convert_opts *o,
                    mt_ckpt_convert_stats *stats, mt_err *e);

/* ------------------------------------------------------------------ */
/* Offline tools (lib/ckpt/tools; meshckpt runs them). A spec names a step
 * directory, the `latest` file beside step directories (followed), or a
 * directory of step directories (its newest complete one). Each is
 * collective over MPI_COMM_WORLD on any number of ranks (the work is shared
 * out), prints on rank 0, and returns 0, or -1 with e set: bad input (exit
 * code 2: no such checkpoint) or a runtime condition (3: an I/O error). */

/* the step directory spec names, and the root attributes there */
int mt_ckpt_find(const char *spec, char *dir, size_t len, mt_err *e);
int mt_ckpt_read_meta_of(const char *spec, char *dir, size_t len, mt_ckpt_meta *m, mt_err *e);
/* the configuration the checkpoint stores (the INI text of the run that
 * wrote it, or of the import that made it): *text malloc'd on every rank,
 * "" when it stores none */
int mt_ckpt_read_config_of(const char *spec, char *dir, size_t len, char **text, mt_err *e);
/* schema, layout (the one that wrote it, and the one a conversion laid it
 * out for), sizes, stored types; list_tensors: one line per tensor */
int mt_ckpt_inspect(const char *spec, int list_tensors, FILE *out, mt_err *e);

/* The model the root attributes describe, as a registry (tp = 1): the
 * caller's builder (lib/ckpt knows tensors only through registries). */
typedef int (*mt_ckpt_model_fn)(const mt_ckpt_meta *m, mt_registry *reg, char *msg, size_t len);
typedef struct {
  int deep;            /* also read every tensor whole through its dataset */
  size_t chunk_bytes;  /* read size per rank (0: 64 MiB) */
  mt_ckpt_model_fn model; /* NULL: no check of the tensors against the model */
} mt_ckpt_verify_opts;
/* Every check a load makes: one line per problem, then a summary line;
 * *problems: their number (a checkpoint refused before any data is read
 * counts 1, with its reason). */
int mt_ckpt_verify(const char *spec, const mt_ckpt_verify_opts *o, FILE *out, long *problems,
                   mt_err *e);
/* Per tensor, the values that differ (rtol > 0: relative differences up to
 * rtol count as equal); a summary line; *differ: 1 when they differ. */
int mt_ckpt_diff(const char *a, const char *b, double rtol, size_t chunk_bytes, FILE *out,
                 int *differ, mt_err *e);
/* The model's tensors whole in one plain HDF5 file (MT_DT_F32 or
 * MT_DT_BF16), written by rank 0, chunk_bytes at a time. */
int mt_ckpt_export_h5(const char *spec, const char *path, int dtype, size_t chunk_bytes,
                      mt_err *e);

/* Hugging Face transformers' GPT2LMHeadModel, LlamaForCausalLM and
 * MixtralForCausalLM: config.json and model.safetensors (or shards listed
 * in model.safetensors.index.json). The tensors' names map to ours by a
 * table built from the model's sizes (interop/hf.c); GPT-2's Conv1D weights
 * are stored in x out (ours out x in), a tied lm_head is left out, the
 * vocabulary unpadded. */
typedef struct {
  int arch; /* as mt_ckpt_meta's: 1 gpt2, 2 llama (with experts: Mixtral) */
  int n_layer, n_embd, n_head, n_kv_head, ffn, seq_len, vocab;
  int tied, bias;
  /* Mixtral: experts in every block (moe_ffn hidden units each, top-k
   * routing renormalised over the k); moe_experts 0: dense */
  int moe_experts, moe_topk, moe_ffn;
  /* llama: RMSNorm's epsilon, the rotary base and its scaling (none or
   * Llama 3.1's with its four fields) */
  double norm_eps, rope_theta;
  mt_rope_scaling rope_scaling;
  double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
  int rope_original_len;
  /* bos_token_id, eos_token_id as config.json's JSON text (an id, a list
   * of ids, null); "": not known (an export writes vocab - 1) */
  char bos_token_id[MT_CFG_STR_MAX], eos_token_id[MT_CFG_STR_MAX];
} mt_ckpt_hf_config;
/* the class config.json's architectures names: "GPT2LMHeadModel", ... */
const char *mt_ckpt_hf_class(const mt_ckpt_hf_config *c);
/* config.json of dir (model_type gpt2, llama or mixtral), checked to
 * describe a model meshtrain computes (no MPI). 0, or -1 with e naming the
 * key and its value that do not fit (nothing else is read). */
int mt_ckpt_hf_read_config(const char *dir, mt_ckpt_hf_config *c, mt_err *e);
/* the sizes of a checkpoint's root attributes into c (the rest: 0, "") */
void mt_ckpt_hf_config_of_meta(const mt_ckpt_meta *m, mt_ckpt_hf_config *c);
/* Whether a Hugging Face class holds the model c describes (a GPT-2 with
 * experts, or not tied, or without biases, or a Mixtral with biases: not);
 * 0, or -1 with one line in e naming dir and the reason. */
int mt_ckpt_hf_check_exportable(const mt_ckpt_hf_config *c, const char *dir, mt_err *e);

typedef struct {
  int dtype;               /* MT_DT_F32 or MT_DT_BF16 */
  int64_t max_shard_bytes; /* 0: one model.safetensors; else shards of at most this many
                              bytes of tensor data (a larger tensor alone in its shard) */
  /* the model: the checkpoint's sizes (mt_ckpt_hf_config_of_meta) and
   * what its stored configuration resolves to (norm, rotary, token ids) */
  const mt_ckpt_hf_config *model;
} mt_ckpt_hf_export_opts;
/* Collective: out_dir/config.json and model.safetensors (or the shards and
 * their index) from the parameters of checkpoint dir (rank 0 writes). */
int mt_ckpt_export_hf(const char *ckpt_dir, const char *out_dir, const mt_ckpt_hf_export_opts *o,
                      mt_err *e);
/* Collective: a step-0 checkpoint of the parameters alone (no optimizer
 * state) in <out_root>/step_0 from dir's safetensors; reg: the model of
 * config c at tp = 1 (the caller registers it); config_ini: the
 * configuration stored with it (the model's keys, token ids included). */
int mt_ckpt_import_hf(const char *dir, const mt_ckpt_hf_config *c, const mt_registry *reg,
                      const char *out_root, mt_ckpt_mode mode, const char *config_ini,
                      mt_err *e);

#endif
