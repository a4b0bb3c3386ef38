/* The Mixture-of-Experts pieces of the model: the dispatcher of expert
 * parallelism (mt_ep, moe_dispatch.c) and the MoE block's state (mt_moe,
 * moe.c, moe_llep.c). Included by model.h; their functions are declared in
 * model_internal.h. */
#ifndef MT_MODEL_MOE_H
#define MT_MODEL_MOE_H

#include <stddef.h>
#include "comm/comm.h"
#include "kernels/kernels.h"

/* an activation buffer (model.h): elements of the activations' dtype */
typedef void mt_act;

/* ------------------------------------------------------------------ */
/* expert parallelism: MoE token dispatch on the folded mesh (moe_dispatch.c) */

/* The tokens of a MoE layer go to their experts' ranks and back. Each rank
 * routes its own local tokens (N = S sequence slices of Ts tokens: whole
 * sequences, or under tensor parallelism its 1/tp slice of each, the slices
 * of one sequence held by the ranks of seq_g). A token's k choices become
 * slots; a slot is dispatched by all-to-all-v over ep (the counts exchanged
 * first) to the rank holding its expert, the etp ranks of that rank gather
 * each other's received rows (each computes its share of every expert's
 * hidden units for all of them), and the results come back by
 * reduce-scatter over etp (summing the shares) and all-to-all-v over ep.
 *
 * Layouts, all deterministic: slots are sent expert-major (expert, then
 * token, in order); a rank's received rows come by source rank, experts
 * in order within each; after the etp gather the rows of etp rank t come
 * before those of t+1 ("gathered order"); the experts compute on
 * expert-major rows (expert, then etp rank, then ep source rank).
 *
 * Capacity (capacity factor c > 0): expert e takes at most ceil(c T k / E)
 * slots of each sequence of T tokens, first choices before second choices,
 * each in position order; the rest are dropped (their weight stays in the
 * renormalisation, their output is 0). Counted per sequence, so the same
 * tokens are dropped under any layout and micro-batch size. Dropless
 * (c = 0) keeps every slot. */
typedef struct {
  mt_group *ep_g, *etp_g, *seq_g; /* NULL or size 1: that axis is absent */
  const mt_ops *ops;
  mt_dtype dt;                    /* the rows' storage type (bf16: moved as 16-bit bits) */
  int E, k, E_l;                  /* experts, choices per token, experts per ep rank */
  int ep, ep_rank, etp, etp_rank, seq_size, seq_rank;
  int T;                          /* tokens of a whole sequence */
  int cap;                        /* slots an expert takes per sequence; 0: dropless */
  int max_seqs, max_tokens;       /* S and N of the largest micro-batch */
  size_t max_send, max_recv, max_rows; /* bounds of n_send, n_recv, n_rows (they grow) */
  size_t worst_recv, worst_rows;        /* the bounds of the worst routing */
  int *owner, *order;             /* per expert its ep rank; the experts by owner, then index */
  int *local;                     /* per expert its index among its owner's E_l */
  int *h;                         /* host scratch (routing decisions) */
  int *perm_h;                    /* host permutations, 2 x max_rows (perm, then inv) */
  int perm_rows;                  /* rows of them the last routing left to upload (0: none) */
  size_t h_n;
  /* least-loaded expert parallelism (parallel.ep_balance): alpha the load a
   * rank may keep, x the ep group's mean (0: off); H the most experts a rank
   * helps with, and lends, per block (E_l under LLEP, else 0) */
  double alpha;
  int min_rows; /* the fewest rows a piece carries (0: any) */
  int H, L; /* the most experts a rank helps with, and (expert, helper) pairs it lends */
  /* The last routing's figures, reused (mt_ep_route) while the backend
   * makes the same choices up (ops->moe_routing_id: the plan routes every
   * micro-batch of every block alike) and every group is count-only (what
   * comes back is this rank's own): the scratch h still holds its slots,
   * send order and permutations; these hold the rest. id 0: none. */
  struct {
    unsigned id;
    int S, Ts;
    int *meta;   /* the routing record (the ints mt_ep_route writes) */
    int *local;  /* (S,k,E) this slice's counts, as they went over seq_g */
    float *frac; /* (S,E) the sequences' fractions */
  } reuse;
  int reuse_off; /* tests only: MT_TEST_NO_ROUTING_REUSE set at creation */
} mt_ep;
/* (routing, dispatch and combine: model_internal.h) */

/* ------------------------------------------------------------------ */
/* the MoE block (moe.c)                                               */

/* The rows of one MoE slot of an activation set (one micro-batch of one
 * MoE block) that grow with the routing: the forward's (the permutations,
 * the experts' inputs, hidden pre-activations and activations) or the split
 * backward's (the experts' output and hidden gradients), in one backend
 * allocation of rows rows, made at the slot's first routing (acts.c). */
typedef struct {
  const void *set;  /* the set (mt_gpt_acts) and its MoE slot: the key */
  int slot, grads;  /* grads: the split backward's piece */
  size_t rows;      /* rows it holds (0: not allocated yet) */
  size_t bytes;
  void *mem;
} mt_moe_rows;
typedef struct {
  int n, cap;
  mt_moe_rows **b;
} mt_moe_rows_store;

/* One MoE block's routed half, for every MoE block of the model in turn:
 * this rank's share of the experts, the dispatcher, one block's scratch
 * (reused block after block) and the routing statistics. Tokens: under
 * tensor parallelism each tp rank routes its 1/tp slice of every sequence
 * (Ts = T/tp local tokens per sequence; without sp the block slices its
 * (BT,C) input and gathers its output). */
typedef struct {
  int n_blocks;          /* MoE blocks of the model (0: dense) */
  int E, k, C;           /* experts, choices per token, width */
  int ep_size, ep_rank, etp_size, etp_rank;
  int E_local, Fe_local; /* experts here, hidden units of each here */
  int fin;               /* fc outputs per hidden unit: 1 (GELU), 2 (SwiGLU's gate|up) */
  int has_bias;          /* the experts have fc and proj biases */
  int Ts;                /* local tokens per sequence */
  int slice;             /* tokens split over tp without sp: the block slices its input */
  size_t send, recv, rows; /* row bounds of the dispatch (micro-batch max_B; they grow) */
  double buffer_factor;  /* parallel.moe_buffer_factor: rows at the start, x balanced (0: worst) */
  const mt_ops *ops;
  void *scratch;         /* one block's row scratch (recv_buf ... hid2_buf), of scratch_bytes */
  size_t scratch_bytes;
  mt_moe_rows_store *store; /* the sets' growable rows (acts.c) */
  int meta_n;            /* ints of a routing record */
  mt_ep ep;              /* the dispatcher */
  float aux_coef, z_coef;
  /* load balancing (mt_moe_balance); aux-loss-free: each MoE block's bias
   * on its experts' routing scores, (n_blocks, E) on the host (the same on
   * every rank, every stage holds every block's) and in backend memory */
  int balance;
  float bias_rate;
  float *bias_host, *bias;
  /* one block's scratch (activation memory): the router's fp32 logits and
   * combine-weight gradients; the rows in the activations' dtype */
  float *logits, *dtw;
  mt_act *xloc, *out, *send_buf, *recv_buf;
  mt_act *rows_buf, *rows2_buf, *hid_buf, *hid2_buf, *full, *dxl;
  /* bf16: the router's input and weight widened to fp32 (the router's
   * matmul, softmax and top-k in fp32), its input gradient before it is
   * narrowed into the block's; NULL under fp32 */
  float *router_x, *router_w, *router_dx;
  float *seq_buf;        /* (B,E): per-sequence probability sums, or the load-balancing gradient */
  int *send_tok, *meta_host;
  /* routing statistics of training forwards since mt_gpt_moe_stats_reset
   * (per MoE block m: tokens[m*E + e] slots routed to expert e, dropped[m],
   * aux[m] this rank's share of the load-balancing loss x tokens, z[m] of
   * the z-loss x tokens) */
  int stats_on;
  double *tokens, *dropped, *aux, *z;
  double *rows_done, *moved; /* per MoE block: mt_ep_stats rows and moved */
  /* least-loaded expert parallelism (mt_gpt_parallel ep_balance_alpha; 0:
   * off): one block's weights of the experts this rank helps with, their
   * gradients, and the pairs it lends (moe_llep.c; activation memory) */
  double llep_alpha;
  int llep_min_rows;
  float *llep;
} mt_moe;
/* floats of one expert's four tensors on this rank (fc and proj weights
 * and biases), and of x->llep: 2 regions of H experts and one of L */
size_t mt_moe_expert_floats(const mt_moe *x);
size_t mt_moe_llep_floats(const mt_moe *x);

#endif
