/* Muon: momentum orthogonalised by a Newton-Schulz iteration, one whole
 * matrix at a time (Jordan et al. 2024; Moonlight's RMS-matched scale, Liu
 * et al. 2025), and which matrices it updates. The distribution over ranks
 * (Canzona: whole matrices to owner ranks balanced by their iteration's
 * cost) is the dp engine's (parallel/dp_muon.c); this file holds what every
 * rank computes alike: the matrices, their cost, the owners, and the
 * iteration itself over the backend's ops. Knows no MPI. */
#ifndef MT_OPTIM_MUON_H
#define MT_OPTIM_MUON_H

#include <stddef.h>
#include "kernels/kernels.h"
#include "registry/registry.h"

/* the quintic's coefficients (Jordan et al.): 5 steps take every singular
 * value of a Frobenius-normalised matrix in [0.01, 1] into [0.682, 1.135]
 * (in [0.003, 1]: [0.682, 1.203]) rather than to exactly 1 */
#define MT_MUON_NS_A 3.4445f
#define MT_MUON_NS_B (-4.7750f)
#define MT_MUON_NS_C 2.0315f

/* optim.muon_scale (mt_muon_scale, core.h): the update's scale by shape:
 * rms = 0.2 sqrt(max(rows, cols)), an update of AdamW's RMS so the two
 * share train.lr and weight_decay (Moonlight); spectral = sqrt(max(1,
 * rows / cols)) (Jordan) */

/* optim.*: Muon's settings (on = 0: AdamW everywhere) */
typedef struct {
  int on;
  float momentum;     /* m = momentum m + g */
  int nesterov;       /* orthogonalise g + momentum m (else m) */
  int ns_steps;
  mt_muon_scale scale;
  mt_dtype ns_dtype;  /* the iteration's storage type */
  const char *exclude; /* optim.muon_exclude (mt_muon_takes) */
  int replicated;     /* optim.muon_distribution = replicated: every rank orthogonalises every
                         matrix (the naive baseline) */
} mt_muon_opts;

/* One matrix Muon updates: a 2-D tensor, or one expert of an (E, rows,
 * cols) expert tensor. Its rows x cols are the whole (unsharded) matrix; a
 * rank holds rows_l x cols_l of it (its tp shard, etp for experts), split
 * along split (0 rows, 1 columns, -1: every rank of the shard axis holds
 * the whole) in blocks fused blocks (q|k|v) each split separately. */
typedef struct {
  int tensor;         /* registry index */
  int expert;         /* index among this rank's experts (0 for a 2-D tensor) */
  size_t offset;      /* flat offset of its local elements */
  int rows, cols;
  int rows_l, cols_l;
  int split, blocks;
  mt_grad_group group;
  double flops;       /* its Newton-Schulz FLOPs per step */
  int owner_g, owner_s; /* the rank that orthogonalises it: its rank in the
                           reduction group and in the shard axis (tp, etp) */
} mt_muon_matrix;

/* Does Muon update t: a matrix (2-D, or an expert tensor's matrices) that
 * is neither a vocabulary nor a position table, whose name contains none of
 * the comma-separated substrings of exclude (optim.muon_exclude: the MoE
 * router, by default). Vectors (norms, biases), the embeddings and the LM
 * head stay on AdamW. */
int mt_muon_takes(const mt_tensor *t, const char *exclude);
/* The matrices of this rank's registry (the tensors its stage holds), in
 * flat order; *out is malloc'ed. Returns their number. */
int mt_muon_matrices(const mt_registry *r, const char *exclude, int ns_steps,
                     mt_muon_matrix **out);
/* Newton-Schulz FLOPs of a rows x cols matrix over steps steps: per step
 * the small Gram (2 m m n), its square (2 m^3) and the product back (2 m m n),
 * m = min(rows, cols), n = max */
double mt_muon_ns_flops(int rows, int cols, int steps);
/* Owners of the matrices of reduction group g (the others untouched),
 * balanced: longest first, each to the least-loaded of the group_size x
 * shard_size ranks (ties: the lowest), so every rank computes the same
 * assignment. shard_size = 1 without tp (etp). */
void mt_muon_assign(mt_muon_matrix *m, int n, mt_grad_group g, int group_size, int shard_size);
/* The FLOPs rank (rg, rs) of group g owns (the plan's per-rank figure) */
double mt_muon_owned_flops(const mt_muon_matrix *m, int n, mt_grad_group g, int rg, int rs);
/* The update's scale for a rows x cols matrix */
float mt_muon_lr_scale(mt_muon_scale s, int rows, int cols);

/* Scratch of the iteration for matrices up to rows x cols elements in t */
size_t mt_muon_ns_scratch_bytes(size_t most_elems, size_t most_small, mt_dtype t);
/* In place on w (rows x cols, fp32, backend memory): w / |w|_F, then steps
 * steps of X <- a X + (b A + c A^2) X with A = X X^T over the smaller side,
 * in the storage type t (bf16: the iteration in bf16 with fp32 sums, as
 * published); scratch holds mt_muon_ns_scratch_bytes. */
void mt_muon_orthogonalize(const mt_ops *ops, mt_dtype t, float *w, int rows, int cols,
                           int steps, void *scratch);

#endif
