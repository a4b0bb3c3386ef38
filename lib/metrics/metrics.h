/* metrics: the FLOP model, hardware profiles and MFU, per-step records as
 * JSON lines. Knows neither MPI nor the model: callers pass numbers. */
#ifndef MT_METRICS_H
#define MT_METRICS_H

#include <stddef.h>
#include <stdio.h>
#include "core/core.h"

/* Training FLOPs per token: 6 * N_mm + 6 * L * T * C, where N_mm counts
 * the weights of every matmul a token uses (model.h's
 * mt_model_active_matmul_weights: a GPT-2's L * 12 C^2 plus V * C for the
 * LM head, true vocab; grouped-query attention's smaller k and v, SwiGLU's
 * three matrices; a MoE model's router and the k experts a token is routed
 * to, not the others) and 6 L T C is attention's QK^T and PV with the
 * causal mask halving the 12 L T C of full attention (forward 1x, backward
 * 2x). Embedding look-ups, norms and elementwise ops are not counted, as in
 * Megatron's and llm.c's MFU. */
double mt_train_flops_per_token_mm(double n_mm, int n_layer, int n_embd, int seq_len);

typedef struct {
  char name[128];
  char description[256];
  double peak_gflops_fp32; /* per rank; 0 = measure an sgemm at start-up */
  double peak_gflops_bf16; /* per rank, dense */
  int ranks_per_node;
} mt_hw_profile;

/* name: a profile in <root>/inputs/hw/<name>.ini, or a path to an INI file.
 * Reads the [hw] section (a [cost] section is the cost model's). */
int mt_hw_profile_load(mt_hw_profile *hw, const char *name_or_path, mt_err *e);
/* The profile's file opened for reading (NULL if none), its path in path:
 * inputs/hw/<name>.ini under the working directory, beside the executable,
 * or in the source tree; a name with '/' or ".ini" is a path. */
FILE *mt_hw_profile_open(const char *name_or_path, char *path, size_t len);

/* the pipeline figures of a stage in a step record (see mt_step_record.pp_stage) */
#define MT_PP_STAT_N 5

typedef struct {
  int step, steps;
  double loss, val_loss; /* val_loss < 0: not computed this step */
  double lr, grad_norm;
  long long tokens;      /* tokens in this step's global batch */
  double step_s, compute_s, dp_comm_s, optim_s, data_s, eval_s;
  double ckpt_s;         /* blocking time of the checkpoint taken after the previous step */
  double ckpt_write_s;   /* write time of checkpoints committed at that boundary */
  double dp_bytes;       /* bytes this rank sent over dp this step */
  double tp_comm_s, tp_bytes; /* seconds in and bytes sent by tp collectives this step */
  double cp_comm_s, cp_bytes; /* ... by context parallelism's attention (ring, all-to-all) */
  /* pipeline (pp > 1): per stage, wait seconds, bubble fraction (1 - compute /
   * executor time) and peak activation bytes; seconds in and bytes of p2p */
  int pp;
  const double *pp_stage; /* MT_PP_STAT_N values per stage: wait_s, bubble, act_peak_bytes,
                             dp_exposed_s, dp_overlapped */
  double pp_comm_s, pp_bytes;
  /* MoE (moe_blocks > 0): per MoE block, the slots routed to each expert
   * (moe_blocks x moe_experts, this step's global batch) and the slots
   * dropped; the load-balancing and z-losses (summed over the blocks, in
   * the units of the loss); this rank's seconds in and bytes sent by the
   * all-to-alls (ep), the expert-tensor collectives (etp) and the experts'
   * gradient reductions (edp) */
  int moe_blocks, moe_experts;
  const double *moe_tokens, *moe_dropped;
  const double *moe_aux_block; /* per block: its load-balancing loss */
  /* per block: expert rows computed, summed over ranks and the most on one
   * rank; rows moved by least-loaded expert parallelism; ranks of a stage */
  const double *moe_rows_sum, *moe_rows_max, *moe_moved;
  int moe_stage_ranks;
  double moe_aux_loss, moe_z_loss;
  double ep_comm_s, ep_bytes, etp_comm_s, etp_bytes, edp_comm_s, edp_bytes;
  double model_flops;    /* whole job, this step */
  double optimizer_flops; /* whole job, this step: Muon's Newton-Schulz (0: AdamW) */
  double flops_per_s;    /* whole job */
  double peak_flops;     /* whole job */
  size_t mem_peak[MT_MEM_NCAT];
  size_t rss_peak;
  /* a blend of several sources: each one's name and validation loss (written
   * when val_loss is) */
  int val_sources;
  const char *const *val_names;
  const double *val_by_source;
  /* data.hash_batches: a hash of this step's global batch's windows */
  int has_data_hash;
  uint64_t data_hash;
  /* data.documents: max over the dp x cp ranks of the step's FLOPs over the
   * mean (lib/train/balance.c); 0: not measured */
  double flop_imbalance;
  /* data.seq_policy = varlen (lib/train/varlen.c): the share of the step's
   * row positions that are padding, the dp ranks' rows, the micro-batches of
   * this rank that need the cp exchange (a sequence crosses a chunk), and
   * with data.hash_batches the plan's hash (identical across reruns);
   * varlen 0: not that policy */
  int varlen, varlen_rows, varlen_exchange_mb, varlen_fallback;
  double pad_share;
  uint64_t varlen_hash;
  /* the first step after a loss spike's rollback: the spike's step and the
   * windows skipped (0: none) */
  long long rollback_from, rollback_skipped;
} mt_step_record;

/* One JSON object (no newline); caller frees with free(). */
char *mt_step_record_json(const mt_step_record *r);
/* formatted progress line for rank 0 */
void mt_step_record_progress(const mt_step_record *r, double eta_s, FILE *f);

#endif
