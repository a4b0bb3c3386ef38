/* core: errors and rank-tagged logging, configuration (INI + --set overrides),
 * collective agreement on errors, memory accounting, this node's CPUs and
 * memory limit, timers.
 * Knows MPI to tag messages with the world rank, abort, agree on errors and
 * compare the ranks of one node. */
#ifndef MT_CORE_H
#define MT_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <mpi.h>

/* ------------------------------------------------------------------ */
/* logging and errors                                                  */

/* Call once after MPI_Init so every message carries the world rank
 * (mt_mpi_init does). */
void mt_log_init(int world_rank);
int mt_log_rank(void);
/* rank 0 only: a line on stdout */
void mt_info0(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* any rank: "[rank R] ..." on stdout (what one rank alone saw) */
void mt_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* any rank: "[rank R] warning: ..." on stderr */
void mt_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Unrecoverable failure inside a collective region: prints a rank-tagged
 * message with file and line, then MPI_Abort. */
void mt_die_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
#define mt_die(...) mt_die_at(__FILE__, __LINE__, __VA_ARGS__)

/* MPI_Init_thread (required: MPI_THREAD_SINGLE, ..._FUNNELED, ...), then
 * MPI_ERRORS_RETURN on MPI_COMM_WORLD, so that every checked MPI call sees
 * its failure (the communicators made from it inherit the handler), and
 * mt_log_init with the world rank. Returns the thread level MPI provides.
 * Each executable that uses MPI starts it this way. */
int mt_mpi_init(int *argc, char ***argv, int required);
/* MPI's text for the error code rc, in buf (MPI_MAX_ERROR_STRING bytes) */
const char *mt_mpi_strerror(int rc, char *buf);

/* An MPI call whose failure ends the job: a rank-tagged message naming the
 * call, then MPI_Abort (mt_die). For calls where no caller could go on. */
#define MT_MPI_CHECK(call)                                                   \
  do {                                                                       \
    int mt_rc_ = (call);                                                     \
    if (mt_rc_ != MPI_SUCCESS) {                                             \
      char mt_s_[MPI_MAX_ERROR_STRING];                                      \
      mt_die("%s failed: %s", #call, mt_mpi_strerror(mt_rc_, mt_s_));        \
    }                                                                        \
  } while (0)

void *mt_malloc_at(size_t bytes, const char *file, int line);
void *mt_calloc_at(size_t n, size_t size, const char *file, int line);
#define mt_malloc(bytes) mt_malloc_at((bytes), __FILE__, __LINE__)
#define mt_calloc(n, size) mt_calloc_at((n), (size), __FILE__, __LINE__)

/* The one error idiom of the code base (PETSc's PetscCall, in C11):
 *   - a function that can fail returns int, 0 = success, -1 = failure, and
 *     takes an `mt_err *e` that receives one message (first one wins);
 *   - the place that detects the failure calls mt_err_set (bad input, exit
 *     2) or mt_err_runtime (a runtime condition: I/O, a full disk, exit 3),
 *     then returns -1; both record file:line (so do the module setters
 *     built on them, e.g. mt_ckpt_err_sys);
 *   - a caller that passes a failure up adds its own file:line to e's chain:
 *       MT_TRY(e, f(..., e));              nothing to undo: returns -1
 *       if (f(..., e) != 0) {              something to undo first:
 *         free(buf);
 *         return mt_err_pass(e);           the frame, then -1
 *       }
 *     mt_err_pass(e) is the one form for a failure passed up after cleanup:
 *     `rc = mt_err_pass(e); goto done;` in a function that ends at a
 *     cleanup label, `return rc == 0 ? 0 : mt_err_pass(e);` for a result
 *     kept across the cleanup; a function that returns a pointer (or
 *     nothing) calls mt_err_pass_at(e, __FILE__, __LINE__) before it
 *     returns. A bare `return -1` after a failed call loses the frame;
 *   - where the error can be reported once (after mt_err_agree), rank 0
 *     prints the message as one line; with MT_ERR_TRACE=1 in the
 *     environment a second line gives the chain, innermost first ("at
 *     a.c:12 <- b.c:40": set at a.c:12, passed up at b.c:40). After an
 *     agreement only the lowest failing rank keeps its chain; the others
 *     start a new one at the agreement.
 * MPI calls go through MT_MPI_TRY (MPI_COMM_WORLD and every communicator
 * made from it return errors instead of aborting, see mt_mpi_init, so the
 * check can fire); MT_MPI_CHECK and mt_die stay for failures inside a
 * collective region that cannot be agreed on. */
enum { MT_ERR_TRACE_MAX = 16 };
typedef struct {
  int failed;
  int code; /* the exit code it maps to: MT_EXIT_BADINPUT or MT_EXIT_RUNTIME */
  char msg[512];
  int depth; /* frames in trace (where set, then each caller that passed it up) */
  struct {
    const char *file;
    int line;
  } trace[MT_ERR_TRACE_MAX];
} mt_err;
void mt_err_set_at(mt_err *e, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void mt_err_runtime_at(mt_err *e, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define mt_err_set(e, ...) mt_err_set_at((e), __FILE__, __LINE__, __VA_ARGS__)
#define mt_err_runtime(e, ...) mt_err_runtime_at((e), __FILE__, __LINE__, __VA_ARGS__)
/* add a caller's frame to e's chain (no-op when e has no error) */
void mt_err_pass_at(mt_err *e, const char *file, int line);
/* this caller's frame, then -1: `return mt_err_pass(e);` after a cleanup */
#define mt_err_pass(e) (mt_err_pass_at((e), __FILE__, __LINE__), -1)
/* e's chain as "a.c:12 <- b.c:40" into buf */
void mt_err_trace_format(const mt_err *e, char *buf, size_t size);
/* the exit code for e: 0 when it holds no error */
int mt_err_exit_code(const mt_err *e);

#define MT_TRY(e, call)                                                      \
  do {                                                                       \
    if ((call) != 0) {                                                       \
      mt_err_pass_at((e), __FILE__, __LINE__);                               \
      return -1;                                                             \
    }                                                                        \
  } while (0)

/* An MPI call whose failure becomes a runtime error in e (return -1). Needs
 * MPI_ERRORS_RETURN on the communicator (mt_mpi_init sets it on
 * MPI_COMM_WORLD, mt_mesh again on every group). */
#define MT_MPI_TRY(e, call)                                                  \
  do {                                                                       \
    int mt_rc_ = (call);                                                     \
    if (mt_rc_ != MPI_SUCCESS) {                                             \
      char mt_s_[MPI_MAX_ERROR_STRING];                                      \
      mt_err_runtime((e), "%s failed: %s", #call, mt_mpi_strerror(mt_rc_, mt_s_)); \
      return -1;                                                             \
    }                                                                        \
  } while (0)

/* Collective agreement on a local error (every rank of comm must call).
 * Returns 0 when no rank failed. Otherwise every rank receives the message
 * (and exit code) of the lowest failing rank in e and 1 is returned; the
 * caller then makes rank 0 print it (mt_err_report) and every rank exit
 * with mt_err_exit_code(e). */
int mt_err_agree(mt_err *e, MPI_Comm comm);
/* rank 0 prints "<prog>: error: <msg>" on stderr, one line (and the chain
 * with MT_ERR_TRACE=1). */
void mt_err_report(const mt_err *e, const char *prog);
/* mt_err_agree + report + MPI_Finalize + exit(mt_err_exit_code) on failure. */
void mt_err_check_all(mt_err *e, MPI_Comm comm, const char *prog);

enum { MT_EXIT_OK = 0, MT_EXIT_BADINPUT = 2, MT_EXIT_RUNTIME = 3 };

/* ------------------------------------------------------------------ */
/* element types                                                       */

/* The element type of a tensor or a message, one enum for the whole code
 * base: what an op of the op table computes on (kernels), what a
 * collective moves (comm), what a role of the training state is held in
 * (kernels.h's mt_dtypes). MT_DT_I32 (int) is a message's only: the
 * integers comm exchanges (MoE routing counts). */
typedef enum { MT_DT_F32 = 0, MT_DT_F64 = 1, MT_DT_BF16 = 2, MT_DT_I32 = 3 } mt_dtype;
/* bytes of one element of t */
size_t mt_dtype_bytes(mt_dtype t);
/* "fp32", "fp64", "bf16" or "i32" */
const char *mt_dtype_name(mt_dtype t);

/* ------------------------------------------------------------------ */
/* configuration: the enumerated keys                                  */
/*
 * A string key with a fixed set of choices (mt_cfg_key.choices) is parsed
 * once, when the configuration is loaded, into one of the enums below: its
 * field in mt_config holds the enum, and a value outside the choices is
 * refused there, naming the key. The consumers switch on the enum; the
 * mt_<enum>_name functions give the choice's text back for printing (what
 * an INI file or --set would say). Each enum is declared here, where the
 * configuration can produce it, and used by the module that owns the
 * concept. */

/* model.preset: the model's size (custom: every shape key given) */
typedef enum {
  MT_PRESET_TINY = 0, MT_PRESET_SMALL = 1, MT_PRESET_GPT2_124M = 2, MT_PRESET_CUSTOM = 3,
  MT_PRESET_TINY_LLAMA = 4, MT_PRESET_LLAMA_124M = 5, MT_PRESET_LLAMA3_8B = 6,
  MT_PRESET_LLAMA3_70B = 7, MT_PRESET_LLAMA3_405B = 8, MT_PRESET_MIXTRAL_8X7B = 9,
  MT_PRESET_DEEPSEEK_V3_LIKE = 10
} mt_preset;
/* model.arch: the block's family (model.h's mt_model_shape says what each
 * means); auto: the preset's */
typedef enum { MT_ARCH_AUTO = 0, MT_ARCH_GPT2 = 1, MT_ARCH_LLAMA = 2 } mt_arch;
/* a yes/no key whose default depends on the architecture (model.tie_embeddings,
 * model.bias) */
typedef enum { MT_TRI_AUTO = 0, MT_TRI_TRUE = 1, MT_TRI_FALSE = 2 } mt_tristate;
/* model.rope_scaling: none, or Llama 3.1's frequency scaling */
typedef enum { MT_ROPE_SCALING_NONE = 0, MT_ROPE_SCALING_LLAMA3 = 1 } mt_rope_scaling;
/* model.moe_router: a softmax over the experts (Switch, Mixtral), or each
 * expert's sigmoid score (DeepSeek-V3); top-k renormalised either way */
typedef enum { MT_ROUTER_SOFTMAX = 0, MT_ROUTER_SIGMOID = 1 } mt_moe_router;
/* model.residual: the standard residual stream, or Ladder Residual (each
 * attention or MLP reads the stream that still lacks the previous module's
 * output: another model, whose tp reductions can overlap the next module) */
typedef enum { MT_RESIDUAL_STANDARD = 0, MT_RESIDUAL_LADDER = 1 } mt_residual;
/* train.device: the backend a rank computes on. auto is a request only
 * (cuda where a GPU is usable, else cpu: mt_device_resolve decides); the
 * virtual device is the time-warp emulation (null/ops_virtual.c,
 * train/device.c). */
typedef enum {
  MT_DEVICE_CPU = 0, MT_DEVICE_CUDA = 1, MT_DEVICE_VIRTUAL = 2, MT_DEVICE_AUTO = 3
} mt_device_kind;
/* train.precision: fp32, or bf16 mixed precision (bf16 weights' copy,
 * activations and messages over fp32 master weights and moments). fp16 is
 * a choice only so that mt_config_check can say why it is refused. */
typedef enum { MT_PRECISION_FP32 = 0, MT_PRECISION_BF16 = 1, MT_PRECISION_FP16 = 2 } mt_precision;
/* train.grad_dtype and parallel.grad_reduce_dtype are mt_dtype (fp32 | bf16). */
/* parallel.cp_mode: how context parallelism splits a sequence (model.h's
 * mt_cp_layout_make): ring (2 x cp zigzag chunks, K and V passed round) or
 * ulysses (cp contiguous chunks, all-to-all to head shards) */
typedef enum { MT_CP_RING = 0, MT_CP_ULYSSES = 1 } mt_cp_mode;
/* parallel.schedule: the pipeline schedule (parallel.h's mt_pp_schedule) */
typedef enum {
  MT_SCHED_GPIPE, MT_SCHED_1F1B, MT_SCHED_INTERLEAVED, MT_SCHED_ZBH1, MT_SCHED_BFS, MT_SCHED_ZBV
} mt_pp_sched;
/* train.moe_balance: MoE load balancing by the Switch loss (its coefficient
 * train.moe_aux_coef), aux-loss-free (a per-expert bias added to the routing
 * scores for the top-k choice only, DeepSeek-V3), or none */
typedef enum {
  MT_MOE_BALANCE_AUX = 0, MT_MOE_BALANCE_BIAS = 1, MT_MOE_BALANCE_NONE = 2
} mt_moe_balance;
/* parallel.ep_balance: least-loaded expert parallelism moves rows over a
 * rank's bound, and their experts, to idle ep ranks */
typedef enum { MT_EP_BALANCE_NONE = 0, MT_EP_BALANCE_LEAST_LOADED = 1 } mt_ep_balance;
/* parallel.layout: the mesh as set, or planned at every start */
typedef enum { MT_LAYOUT_MANUAL = 0, MT_LAYOUT_AUTO = 1 } mt_layout_mode;
/* data.format: how token files are read (auto: the llm.c magic, else u16
 * for *.bin, else text) */
typedef enum {
  MT_DATA_AUTO = 0, MT_DATA_LLMC = 1, MT_DATA_U16 = 2, MT_DATA_U32 = 3, MT_DATA_TEXT = 4
} mt_data_format;
/* data.balance: which windows of a step each dp rank trains on (in sample
 * order, or by their FLOPs with documents: lib/train/balance.c) */
typedef enum { MT_BALANCE_NONE = 0, MT_BALANCE_FLOPS = 1 } mt_balance;
/* data.seq_policy: a step's sequences packed into windows of seq_len as
 * read (pack), or its documents kept whole, each no longer than seq_len,
 * split over cp only when longer than a cp chunk and balanced over dp x cp
 * (varlen; lib/data/varlen.c) */
typedef enum { MT_SEQ_PACK = 0, MT_SEQ_VARLEN = 1 } mt_seq_policy;
/* data.long_documents, under varlen: a document longer than seq_len is
 * refused at start, or cut where the windows cut it */
typedef enum { MT_LONG_DOCS_REFUSE = 0, MT_LONG_DOCS_SPLIT = 1 } mt_long_docs;
/* optim.name: the optimizer of the hidden matrices (AdamW keeps the rest) */
typedef enum { MT_OPTIM_ADAMW = 0, MT_OPTIM_MUON = 1 } mt_optim_kind;
/* optim.muon_scale: Muon's update scale by shape (optim/muon.h) */
typedef enum { MT_MUON_SCALE_RMS = 0, MT_MUON_SCALE_SPECTRAL = 1 } mt_muon_scale;
/* optim.muon_ns_dtype: the Newton-Schulz iteration's dtype (auto: the weights' copy's) */
typedef enum { MT_MUON_NS_AUTO = 0, MT_MUON_NS_FP32 = 1, MT_MUON_NS_BF16 = 2 } mt_muon_ns;
/* optim.muon_distribution: Canzona's owners, or every rank every matrix */
typedef enum { MT_MUON_DIST_BALANCED = 0, MT_MUON_DIST_REPLICATED = 1 } mt_muon_dist;
/* optim.on_switch: resuming a checkpoint of another optimizer */
typedef enum { MT_OPTIM_SWITCH_REFUSE = 0, MT_OPTIM_SWITCH_RESET = 1 } mt_optim_switch;
/* train.on_spike: what a loss spike (or a non-finite loss or norm) does */
typedef enum { MT_SPIKE_STOP = 0, MT_SPIKE_ROLLBACK = 1 } mt_spike_action;
/* ckpt.mode: one shared HDF5 file, one file per writer, or no checkpoints */
typedef enum {
  MT_CKPT_MODE_SHARED = 0, MT_CKPT_MODE_PER_WRITER = 1, MT_CKPT_MODE_NONE = 2
} mt_ckpt_mode;
/* ckpt.test_crash (tests only): the phase of the final save at which rank 0
 * kills itself */
typedef enum {
  MT_CKPT_CRASH_NONE = 0, MT_CKPT_CRASH_CREATE = 1, MT_CKPT_CRASH_WRITE = 2,
  MT_CKPT_CRASH_RENAME = 3, MT_CKPT_CRASH_LATEST = 4
} mt_ckpt_crash;

/* each value's text, as the key's choices spell it ("?" for a value that is
 * none of them) */
const char *mt_preset_name(mt_preset v);
const char *mt_arch_name(mt_arch v);
const char *mt_tristate_name(mt_tristate v);
const char *mt_rope_scaling_name(mt_rope_scaling v);
const char *mt_moe_router_name(mt_moe_router v);
const char *mt_residual_name(mt_residual v);
const char *mt_device_kind_name(mt_device_kind v);
const char *mt_precision_name(mt_precision v);
const char *mt_cp_mode_name(mt_cp_mode v);
const char *mt_pp_sched_name(mt_pp_sched v);
const char *mt_moe_balance_name(mt_moe_balance v);
const char *mt_ep_balance_name(mt_ep_balance v);
const char *mt_layout_mode_name(mt_layout_mode v);
const char *mt_data_format_name(mt_data_format v);
const char *mt_balance_name(mt_balance v);
const char *mt_seq_policy_name(mt_seq_policy v);
const char *mt_long_docs_name(mt_long_docs v);
const char *mt_optim_kind_name(mt_optim_kind v);
const char *mt_muon_scale_name(mt_muon_scale v);
const char *mt_muon_ns_name(mt_muon_ns v);
const char *mt_optim_switch_name(mt_optim_switch v);
const char *mt_muon_dist_name(mt_muon_dist v);
const char *mt_spike_action_name(mt_spike_action v);
const char *mt_ckpt_mode_name(mt_ckpt_mode v);
const char *mt_ckpt_crash_name(mt_ckpt_crash v);

/* ------------------------------------------------------------------ */
/* configuration                                                       */

typedef enum { MT_CFG_INT, MT_CFG_DOUBLE, MT_CFG_BOOL, MT_CFG_STRING } mt_cfg_type;

#define MT_CFG_STR_MAX 512

/* Every key meshtrain knows, as one struct; defaults come from the key table
 * (mt_config_keys). Model shape keys of 0 mean "take from model.preset".
 * The enumerated keys (a string key with choices) are held as their enums
 * (above). */
typedef struct {
  /* [model] */
  mt_preset model_preset;
  int n_layer, n_embd, n_head, seq_len, vocab_size;
  /* the architecture (0, auto: from the preset) */
  mt_arch arch;
  mt_residual residual; /* [model] residual (standard | ladder) */
  int n_kv_head, ffn_size, rope_original_len;
  double norm_eps, rope_theta, rope_factor, rope_low_freq_factor, rope_high_freq_factor;
  mt_rope_scaling rope_scaling;
  mt_tristate tie_embeddings, bias;
  /* Hugging Face's bos_token_id and eos_token_id as JSON text: an id, a
   * list of ids ("[1,2]") or "null"; "" when not known. meshtrain never
   * reads them: an import writes them, a run carries them from train.init_from
   * into its checkpoints, an export writes them back (mt_config_token_ids_ok) */
  char bos_token_id[MT_CFG_STR_MAX], eos_token_id[MT_CFG_STR_MAX];
  /* [train] */
  int steps, seed, global_batch, micro_batch, warmup_steps, eval_every, eval_batches;
  int threads, log_every;
  /* [train] device, precision; grad_dtype: the dtype gradients accumulate in;
   * [parallel] grad_reduce_dtype: the dtype of the dp x cp reduction (see
   * mt_dtypes_resolve) */
  mt_device_kind device;
  mt_precision precision;
  mt_dtype grad_dtype, grad_reduce_dtype;
  /* [train] virtual_hw: the profile the virtual device prices with (device = virtual) */
  char virtual_hw[MT_CFG_STR_MAX];
  /* [virtual] moe_skew: the synthetic routing's Zipf exponent (0 = balanced) */
  double virtual_moe_skew;
  double lr, min_lr_ratio, weight_decay, beta1, beta2, eps, grad_clip;
  /* [optim] */
  mt_optim_kind optim;
  double muon_momentum;
  int muon_nesterov, muon_ns_steps;
  mt_muon_scale muon_scale;
  mt_muon_ns muon_ns_dtype;
  mt_muon_dist muon_distribution;
  char muon_exclude[MT_CFG_STR_MAX];
  mt_optim_switch optim_on_switch;
  /* [parallel] */
  int dp, tp, pp, cp, zero;
  int sp; /* sequence parallelism over the tp group (bool) */
  double bucket_mb;
  mt_cp_mode cp_mode; /* context parallelism */
  /* [data] */
  char data_train[MT_CFG_STR_MAX], data_val[MT_CFG_STR_MAX];
  char data_blend[MT_CFG_STR_MAX]; /* "W files, W files": weighted sources (empty: data.train) */
  mt_data_format data_format;
  double val_fraction;
  int data_hash; /* bool: a hash of each step's global batch's windows in metrics.jsonl */
  /* documents (bool): attention stays inside each document of a window and
   * positions restart at each; a document begins at each data.eot token */
  int documents;
  int eot; /* the end-of-text token id */
  mt_balance balance;
  mt_seq_policy seq_policy;
  mt_long_docs long_documents;
  /* [output] */
  char output_dir[MT_CFG_STR_MAX];
  int save_params;
  /* [metrics] */
  char hw_profile[MT_CFG_STR_MAX];
  double peak_gflops;
  int trace; /* metrics.trace: each rank's timeline (bool) */
  /* [ckpt] */
  int ckpt_every, ckpt_keep, ckpt_async, ckpt_verify_on_load;
  mt_ckpt_mode ckpt_mode;
  mt_ckpt_crash ckpt_test_crash;
  char ckpt_io_hints[MT_CFG_STR_MAX]; /* MPI-IO hints for the shared file, "k=v,k=v" */
  /* [train] resume: "" (fresh), "auto" (<output.dir>/checkpoints, newest complete) or a path */
  char resume[MT_CFG_STR_MAX];
  char init_from[MT_CFG_STR_MAX]; /* a checkpoint whose parameters start a fresh run */
  int stop_after; /* [train] stop_after: steps this run does before it checkpoints and exits */
  /* [train] the watchdog's deadline for a blocking call, seconds (0: off),
   * and inside a step a multiple of the median step (0: off) */
  double collective_timeout_s, collective_timeout_steps;
  /* [train] loss spikes: the action, the factor over the running median
   * of the last spike_window losses (0: only non-finite values), the
   * rollbacks a run may make; skip_samples: windows skipped after the
   * checkpoint train.resume names (a rollback by hand) */
  mt_spike_action on_spike;
  double spike_factor;
  int spike_window, max_rollbacks, skip_samples;
  /* pipeline parallelism: [train] micro_batches (0 = global_batch / (micro_batch * dp)),
   * recompute (bool); [parallel] schedule, virtual_stages, pp_split ("" = balanced, else
   * comma-separated layers per stage), print_schedule (bool: print and exit) */
  int micro_batches, recompute;
  mt_pp_sched pp_schedule;
  char pp_split[MT_CFG_STR_MAX];
  int virtual_stages, print_schedule;
  /* [parallel] pp_token_slices: each sequence cut into this many token slices that
   * follow each other through the pipeline (TeraPipe; 1 = whole sequences) */
  int pp_token_slices;
  /* [parallel] pp_first_layers, pp_last_layers: layers of the first and last pipeline
   * stages, the middle ones sharing the rest equally (0 = an equal share; Megatron's
   * --decoder-first/last-pipeline-num-layers) */
  int pp_first_layers, pp_last_layers;
  /* [parallel] layout: the planner picks the layout at start (auto) or not */
  mt_layout_mode layout;
  /* [plan] hw: the cost profile of parallel.layout = auto ("" = metrics.hw); headroom: GiB
   * per device kept free (-1 = auto); cp_min_tokens: cp only beyond this many tokens a rank */
  char plan_hw[MT_CFG_STR_MAX];
  double plan_headroom;
  int plan_cp_min_tokens;
  /* with data.documents: a histogram of the corpus's document lengths
   * (meshdata lengths) the plan prices attention and dp balance from */
  char plan_doc_lengths[MT_CFG_STR_MAX];
  /* [plan] across_nodes (bool): tp and ep groups may span nodes (off: inside one node) */
  int plan_across_nodes;
  int overlap_dp; /* [parallel] overlap_dp (bool): dp reduction during the last backward */
  /* Mixture-of-Experts: [model] moe_experts (0 = dense), moe_topk, moe_every,
   * moe_ffn (0 = 4 x n_embd), moe_shared, moe_capacity (0 = dropless),
   * moe_router (softmax | sigmoid);
   * [train] moe_aux_coef, moe_z_coef, moe_balance (how the experts' load is
   * balanced), moe_bias_rate (the bias step of aux-loss-free balancing),
   * moe_bias_init (expert 0's starting bias: a forced skew); [parallel] ep,
   * etp (the folded mesh), ep_balance, ep_balance_alpha (least-loaded: the
   * load a rank keeps, x the mean), ep_balance_min_rows (least-loaded: the
   * fewest rows a moved expert carries) and moe_buffer_factor (the rows a
   * rank's MoE buffers start at, x a balanced routing's; 0: the worst case) */
  int moe_experts, moe_topk, moe_every, moe_ffn, moe_shared;
  double moe_capacity, moe_aux_coef, moe_z_coef, moe_bias_rate, moe_bias_init;
  mt_moe_balance moe_balance;
  mt_moe_router moe_router;
  int ep, etp;
  mt_ep_balance ep_balance;
  double ep_balance_alpha;
  int ep_balance_min_rows;
  double moe_buffer_factor;
} mt_config;

typedef struct {
  const char *name;    /* "section.key" */
  mt_cfg_type type;
  size_t offset;       /* offsetof(mt_config, field) */
  const char *def;     /* default, as text */
  const char *help;    /* one line */
  double min, max;     /* valid range for numbers (inclusive) */
  const char *choices; /* "a|b|c" for strings with a fixed set, else NULL; such a key
                          (MT_CFG_STRING) is held in mt_config as its enum, an int-sized
                          field: the value of the choice */
} mt_cfg_key;

const mt_cfg_key *mt_config_keys(int *n);
/* "int", "float", "bool" or "string", as --help and docs/config.md name it */
const char *mt_config_type_name(mt_cfg_type t);
/* The range a number key accepts, as the error messages, --help and
 * docs/config.md write it: "between 0 and 8", ">= 1", "> 0 and < 1"; ""
 * for a key without bounds. */
void mt_config_range_text(const mt_cfg_key *k, char *buf, size_t size);

/* An enumerated key (a string key with choices): the enum value text
 * stands for, as the configuration parses it, or -1 when text is not one of
 * the key's choices (or key is not an enumerated key). For tests and tools
 * that take a choice by name. */
int mt_config_enum_parse(const char *key, const char *text);
/* the text of value as key's value; NULL when it is none of its choices */
const char *mt_config_enum_name(const char *key, int value);

/* Fill cfg with defaults, then the INI file (path may be NULL), then each
 * "section.key=value" override in order. Unknown keys, malformed values, out
 * of range numbers, a value outside an enumerated key's choices: returns
 * non-zero and a one-line message in e naming the key (and file:line for INI
 * errors). Pure function of its inputs, so every rank computes the same
 * result. Checks that involve several keys are mt_config_check's. */
int mt_config_load(mt_config *cfg, const char *ini_path, int n_over,
                   char *const *overrides, mt_err *e);
void mt_config_defaults(mt_config *cfg);
/* The same from INI text held in memory (a checkpoint's stored
 * configuration): defaults, then text; name stands for the file in
 * messages. */
int mt_config_load_text(mt_config *cfg, const char *text, const char *name, mt_err *e);
/* "section.key = value" lines for every key, grouped in [sections]: a valid
 * INI that reproduces cfg. */
void mt_config_write_ini(const mt_config *cfg, FILE *f);
/* The keys of one section ("model") alone, under its [section] line. */
void mt_config_write_ini_section(const mt_config *cfg, const char *section, FILE *f);
/* Is text a value of model.bos_token_id / eos_token_id: "", "null", an
 * integer >= 0, or a JSON list of them ("[1, 2]")? */
int mt_config_token_ids_ok(const char *text);
/* every key with its default and meaning */
void mt_config_print_help(FILE *f);
/* The same as a Markdown reference (docs/config.md): a table per section of
 * every key, its type, default, allowed values and meaning (config_doc.c). */
void mt_config_write_markdown(FILE *f);

/* Every check that involves more than one key and can be judged from the
 * configuration alone (config_check.c), in one place, for world_size ranks
 * (0: not known; the checks that need it are skipped). 0, or -1 with one
 * line in e naming the keys. Every path reaches it through
 * mt_layout_validate (training, meshtrain --check, --plan,
 * --print-schedule, meshplan and parallel.layout = auto); config_check.c
 * lists the checks that need more than the configuration and where they
 * live. Pure: every rank decides alike. */
int mt_config_check(const mt_config *cfg, int world_size, mt_err *e);

/* ------------------------------------------------------------------ */
/* memory accounting (bytes per category, current and peak)            */

/* gathered: ZeRO-3's whole-unit parameter copies, alive between a layer's
 * all-gather and its release */
typedef enum {
  MT_MEM_PARAMS, MT_MEM_GRADS, MT_MEM_OPTIM, MT_MEM_ACTIV, MT_MEM_COMM, MT_MEM_OTHER,
  MT_MEM_GATHER, MT_MEM_NCAT
} mt_mem_cat;

/* Where a buffer lives: host memory, or the memory of a device backend.
 * Backends say where their tensors are (mt_ops.loc); comm takes the flag
 * with every buffer, so it can move device buffers (NCCL, or staged through
 * host MPI). */
typedef enum { MT_LOC_HOST = 0, MT_LOC_DEVICE = 1 } mt_loc;
void *mt_mem_alloc(mt_mem_cat cat, size_t bytes); /* zeroed, 64-byte aligned */
void mt_mem_free(mt_mem_cat cat, void *p, size_t bytes);
/* count bytes a device backend allocated in its own memory (and their
 * release), so the categories cover every tensor wherever it lives */
void mt_mem_count(mt_mem_cat cat, size_t bytes);
void mt_mem_uncount(mt_mem_cat cat, size_t bytes);
/* Where the counters go: the process's own account, or one a plan counts
 * a rank's state into while it builds it without touching the process's
 * figures. mt_mem_account_use(a) makes a (zeroed by its owner) the account
 * counted from now on (NULL: the process's own) and returns the previous
 * one (NULL: the process's own). */
typedef struct {
  size_t cur[MT_MEM_NCAT], peak[MT_MEM_NCAT];
} mt_mem_account;
mt_mem_account *mt_mem_account_use(mt_mem_account *a);
size_t mt_mem_current(mt_mem_cat cat);
size_t mt_mem_peak(mt_mem_cat cat);
const char *mt_mem_cat_name(mt_mem_cat cat);
/* peak resident set size of this process, bytes */
size_t mt_mem_peak_rss(void);

/* ------------------------------------------------------------------ */
/* this node: CPU placement and usable memory                          */

/* A CPU affinity mask (bit c: the process may run on CPU c). */
enum { MT_CPU_MASK_BITS = 4096 };
typedef struct {
  uint64_t bits[MT_CPU_MASK_BITS / 64];
} mt_cpu_mask;
/* This process's mask (sched_getaffinity). Returns non-zero when unreadable. */
int mt_cpu_mask_self(mt_cpu_mask *m);
/* "0-3,8" -> mask; non-zero on a malformed list or a CPU >= MT_CPU_MASK_BITS */
int mt_cpu_mask_parse(const char *list, mt_cpu_mask *m);
int mt_cpu_mask_count(const mt_cpu_mask *m);
/* mask -> "0-3,8" (cut with "..." when buf is too small) */
void mt_cpu_mask_format(const mt_cpu_mask *m, char *buf, size_t size);

/* One rank: 1 when its compute threads exceed the CPUs of its mask (they
 * share cores and run at cpus-thread speed), with a one-line text in msg
 * saying so and how to launch instead; 0 and "" otherwise (also when cpus
 * is 0, i.e. unknown). msg may be NULL. */
int mt_affinity_verdict(int threads, int cpus, char *msg, size_t size);

/* Collective over comm. Each rank compares threads with its mask (NULL: its
 * own, from sched_getaffinity; tests pass one); the ranks of each node
 * (MPI_Comm_split_type shared) agree on one verdict: short of CPUs when a
 * rank has more threads than CPUs in its mask, or when the node's ranks
 * together run more threads than the CPUs in the union of their masks.
 * On rank 0 of comm, lines receives one "<prog>: warning: node <host>: ..."
 * line per such node (at most 16, then one line counting the rest), "" when
 * every node is fine; on other ranks "". Returns the number of nodes short of
 * CPUs, the same on every rank. */
int mt_affinity_check(MPI_Comm comm, int threads, const mt_cpu_mask *mask, const char *prog,
                      char *lines, size_t size);

/* The memory this node lets the job use: the smallest of MemAvailable
 * (/proc/meminfo), the cgroup limit of this process (v2 memory.max, v1
 * memory.limit_in_bytes, the smallest along the path to the hierarchy's
 * root) and Slurm's SLURM_MEM_PER_NODE, or SLURM_MEM_PER_CPU x
 * SLURM_CPUS_ON_NODE (MB, from the environment). A cgroup or Slurm figure is
 * a limit for all of the job's processes on the node, not free memory. */
typedef struct {
  double bytes;    /* usable bytes; 0 when no source could be read */
  char source[96]; /* the source of that figure, e.g. "cgroup memory.max", "SLURM_MEM_PER_NODE" */
} mt_mem_limit;
/* root: "" for this machine, or a directory standing in for / that holds
 * proc/meminfo, proc/self/cgroup and sys/fs/cgroup/... (tests). Returns 0
 * when some source was read. */
int mt_mem_limit_node(const char *root, mt_mem_limit *out);

/* Whether this machine can start N ranks at once (lib/core/hostfit.c): what a
 * rank costs the host, measured here (the defaults), against the limits the
 * host sets. */
typedef struct {
  double rank_bytes;     /* host memory of one rank (proportional set size) */
  double peer_bytes;     /* and for each other rank it knows (MPI's per-peer state) */
  double launcher_bytes; /* mpirun's own */
  int threads;           /* threads a rank runs */
  int launcher_fds;      /* open files mpirun holds a rank */
  double shm_bytes;      /* /dev/shm a rank's shared-memory transport touches */
} mt_host_rank_cost;
void mt_host_rank_cost_default(mt_host_rank_cost *c);
typedef struct {
  mt_mem_limit mem;   /* mt_mem_limit_node */
  double threads_now; /* threads running on the machine (loadavg) */
  double threads_max; /* kernel.threads-max; 0: unknown */
  double nproc;       /* ulimit -u (soft); 0: unlimited, or root (not held to it) */
  double nofile;      /* ulimit -n (soft); 0: unlimited */
  double shm_free;    /* free bytes in /dev/shm; 0: none or unknown */
} mt_host_limits;
/* the host memory n ranks take together, with the launcher */
double mt_host_ranks_bytes(int n, const mt_host_rank_cost *c);
/* root as for mt_mem_limit_node (proc/loadavg, proc/sys/kernel/threads-max,
 * dev/shm under it); the rlimits are this process's. Returns 0 when the
 * memory limit could be read. */
int mt_host_limits_read(const char *root, mt_host_limits *out);
/* 0 when `ranks` ranks fit every limit; else -1 and one line in why that
 * names the limit, the figures and the most ranks that fit. */
int mt_host_fit(int ranks, const mt_host_rank_cost *c, const mt_host_limits *l, char *why,
                size_t size);
/* this process's host memory now: Pss from /proc/self/smaps_rollup, else
 * VmRSS; 0 when neither can be read */
double mt_host_self_bytes(void);

/* ------------------------------------------------------------------ */
/* counter-based randomness                                            */

/* splitmix64: a fast 64-bit bijection of x + the golden-ratio increment. The
 * same bits on every machine, so init, data order and the corpus are pure
 * functions of their seeds and counters. */
static inline uint64_t mt_splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/* ------------------------------------------------------------------ */
/* timers                                                              */

/* Seconds, monotonic: the wall clock, or on the virtual device (below) the
 * rank's virtual clock, so that every timer of a run (steps, executor,
 * comm groups) measures virtual time without knowing it. */
double mt_now(void);
double mt_wall_now(void); /* seconds, monotonic, always the wall clock */
/* the median of v[0..n) (sorts v in place; 0 for n = 0): core/stats.c */
double mt_median(double *v, int n);

/* ------------------------------------------------------------------ */
/* virtual time: the time-warp emulation's clock and the prices meshplan
 * shares with it (price.h) */
#include "core/price.h"

/* ------------------------------------------------------------------ */
/* the timeline (trace.c; metrics.trace = true)                        */

/* tracks (Chrome's threads) of a rank's timeline */
enum { MT_TRACK_COMPUTE = 0, MT_TRACK_PIPELINE = 1, MT_TRACK_COLL = 2, MT_TRACK_P2P = 3,
       MT_TRACK_STEP = 4, MT_TRACK_N = 5 };
/* start recording this rank's spans (off until called); the rank's name in
 * the timeline says its place on the mesh (e.g. "rank 5: pp 1 tp 1 dp 0
 * cp 0"), and viewers list the ranks by sort (the pipeline stage first) */
void mt_trace_start(int rank, int sort, const char *name);
int mt_trace_on(void);
/* recording on (1) or off (0) from now on, as long as started; returns the
 * previous state (the plan counts a step of the real code in the process:
 * not the run's timeline) */
int mt_trace_set(int on);
/* a span from t0 to t1 (mt_now() seconds) on a track; name and cat must
 * outlive the run (string literals); a0, a1: the micro-batch and chunk of
 * a pipeline span (-1 where none); of a step (MT_TRACK_STEP), a0 is its
 * number (from 1) */
void mt_trace_span(const char *name, const char *cat, int track, double t0, double t1, int a0,
                   int a1);
/* every span so far as Chrome trace-event JSON (Perfetto, chrome://tracing) */
int mt_trace_write(const char *path, mt_err *e);

/* bf16: the upper 16 bits of an IEEE fp32 (8 significant bits). The
 * scalar conversions live here so that every module may use them (comm sums
 * bf16 messages; kernels has the vectorised ones). */
typedef uint16_t mt_bf16;
/* fp32 -> bf16, round to nearest, ties to even; NaN stays NaN (quieted,
 * sign kept), +-inf stays, values beyond the largest bf16 round to +-inf,
 * subnormals are rounded like any other value (no flush to zero). */
static inline mt_bf16 mt_bf16_from_f32(float f) {
  union {
    float f;
    uint32_t u;
  } x;
  x.f = f;
  if ((x.u & 0x7fffffffu) > 0x7f800000u) return (mt_bf16)((x.u >> 16) | 0x0040u); /* NaN */
  x.u += 0x7fffu + ((x.u >> 16) & 1u);
  return (mt_bf16)(x.u >> 16);
}
/* bf16 -> fp32, exact */
static inline float mt_bf16_to_f32(mt_bf16 b) {
  union {
    uint32_t u;
    float f;
  } x;
  x.u = (uint32_t)b << 16;
  return x.f;
}

#endif
