/* registry: every piece of training state, registered once by logical name
 * with its global shape and its placement on every mesh axis:
 *
 *   tp    replicated, or sharded along one dim (optionally as k fused
 *         blocks, each split separately: q|k|v), padded extents kept apart
 *         from the true ones (a vocabulary padded to a multiple of 64*tp);
 *   ep    the expert axis: replicated, or sharded along one dim (the
 *         experts of an E x out x in tensor);
 *   etp   tensor parallelism inside an expert (Megatron's parallel folding:
 *         expert tensors live on the folded mesh etp, ep, edp over the same
 *         ranks as tp, cp, dp, and their tp placement stays replicated);
 *   pp    the pipeline stage that owns the tensor, and a stage that holds a
 *         copy kept equal to the owner's (the tied LM head);
 *   dp    the data-parallel axes: dp and cp (the cp ranks of a sequence
 *   cp    hold the same parameters and see other tokens), and edp for the
 *   edp   experts; a tensor's reduction group names the ranks its gradients
 *         are summed and its ZeRO state sharded over: dp x cp (dense
 *         tensors) or edp (experts); the ZeRO shard says which of those
 *         ranks owns which part of the parameters, gradients and optimizer
 *         state (mt_registry_shard);
 *
 * plus attributes the model sets when it registers a tensor: its layer (the
 * unit ZeRO-3 gathers and the pipeline places), its init rule, weight decay,
 * the tensor it is tied to, and whether sequence parallelism leaves each tp
 * rank with a partial gradient. From the registry alone come each rank's
 * local shard, flat-buffer offsets, the dp buckets and shards, the
 * checkpoint's write partition, the pipeline's stage map and which ep rank
 * owns an expert. Knows no MPI. */
#ifndef MT_REGISTRY_H
#define MT_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

#define MT_NAME_MAX 96
#define MT_AXES_MAX 48
#define MT_MAX_DIMS 4

typedef enum {
  MT_PLACE_REPLICATED = 0, /* every rank of the axis holds the whole tensor */
  MT_PLACE_SHARDED = 1     /* split along dim, optionally in k fused blocks */
} mt_place_kind;

typedef struct {
  mt_place_kind kind;
  int dim;          /* sharded dim */
  int fused_blocks; /* k >= 1: the dim holds k blocks (e.g. q|k|v), each split separately */
} mt_placement;

/* How a tensor's elements start: a pure function of (seed, name, global
 * index) for MT_INIT_NORMAL, so any layout initialises the same logical
 * values. Padding (rows beyond the true extent) always starts at 0. */
typedef enum { MT_INIT_ZEROS = 0, MT_INIT_ONES = 1, MT_INIT_NORMAL = 2 } mt_init_rule;

/* Layers as placement units: the tensors of one layer are registered
 * together, so they form one contiguous flat range (a unit). */
#define MT_LAYER_EMBED (-1) /* the embeddings, before block 0 */

/* The ranks over which a tensor's gradient is summed (and its ZeRO state
 * sharded), named: dense tensors over dp x cp ("dp_cp", MT_GROUP_DP), experts
 * over the expert-data-parallel ranks of the folded mesh ("edp"). */
typedef enum { MT_GROUP_DP = 0, MT_GROUP_EDP = 1, MT_NGROUPS = 2 } mt_grad_group;
/* "dp_cp" | "edp": the mesh group a reduction group is */
const char *mt_grad_group_name(mt_grad_group g);

/* What a model says about one tensor when it registers it. */
typedef struct {
  const char *name;       /* e.g. "blocks.3.attn.qkv.weight" (global layer numbers) */
  int ndim;
  const int64_t *shape;   /* global logical shape, unpadded */
  const int64_t *padded;  /* global shape as stored, or NULL (no padding) */
  mt_placement tp, ep;
  int layer;              /* MT_LAYER_EMBED, 0..n_layer-1 for blocks, n_layer after them */
  int pp_stage;           /* owning pipeline stage, -1: every stage */
  int pp_copy;            /* -1, or a stage that holds a copy kept equal to the owner's */
  mt_init_rule init;
  float init_std;         /* MT_INIT_NORMAL: standard deviation */
  int weight_decay;       /* AdamW decays this tensor */
  const char *tied_to;    /* NULL/"" or the name of a tensor sharing this one's storage */
  int tp_partial_grad;    /* see mt_tensor */
  mt_placement etp;       /* expert tensors: the split inside an expert (zero: replicated) */
  mt_grad_group group;    /* where its gradient is reduced (zero: dp) */
} mt_tensor_spec;

typedef struct {
  char name[MT_NAME_MAX];  /* e.g. "blocks.3.attn.qkv.weight" (global layer numbers) */
  int ndim;
  int64_t shape[MT_MAX_DIMS];   /* global logical shape, unpadded */
  int64_t padded[MT_MAX_DIMS];  /* global shape as stored (padding, e.g. vocab) */
  mt_placement tp;              /* placement on the tensor-parallel axis */
  mt_placement ep;              /* placement on the expert axis */
  mt_placement etp;             /* placement on the expert-tensor axis (group edp) */
  mt_grad_group group;          /* the ranks its gradient is reduced and sharded over */
  int layer;                    /* the layer (unit) it belongs to, see MT_LAYER_EMBED */
  int pp_stage;                 /* owning pipeline stage (writes it in checkpoints), -1: every
                                   stage */
  int pp_copy;                  /* -1, or a second stage that holds a copy kept equal to the
                                   owner's (the tied LM head on the last stage) */
  mt_init_rule init;
  float init_std;
  int weight_decay;             /* AdamW decays this tensor */
  char tied_to[MT_NAME_MAX];    /* "" or the name of the tensor this one shares storage with */
  int tp_partial_grad;          /* replicated over tp, yet each tp rank computes only a partial
                                   gradient (sequence parallelism: from its slice of the
                                   sequence): the tp ranks' gradients are summed before use */
  char axes[MT_AXES_MAX];       /* "" or comma-separated labels of its axes ("vocab,embd";
                                   "position,embd": dim 0 indexes sequence positions, so a run
                                   at a shorter context takes the first rows) */
  /* derived by mt_registry_finalize; local_shape and local_start are the
   * tp/ep shard even where this pipeline stage does not hold the tensor
   * (then numel_local = 0 and offset is where it would start) */
  int64_t local_shape[MT_MAX_DIMS];
  int64_t local_start[MT_MAX_DIMS]; /* global index of local element 0 (per block for fused) */
  size_t numel_local;
  size_t offset;                    /* elements from the start of the flat buffer */
  int unit;                         /* index into mt_registry.units */
} mt_tensor;

/* A unit: the tensors of one layer with one reduction group, a contiguous
 * flat range (a MoE block is two units: its dense tensors, then its
 * experts). The pipeline places units on stages, ZeRO-3 gathers one unit at
 * a time, the model binds its views one unit at a time. */
typedef struct {
  int layer;
  mt_grad_group group;
  int t0, t1;        /* tensors [t0, t1) */
  size_t begin, end; /* flat range [begin, end) on this rank (empty: another stage's) */
} mt_unit;

/* A dp bucket: a flat range whose gradients are reduced by one collective,
 * and each dp rank's part of it (its ZeRO shard of the range). */
typedef struct {
  size_t begin, end; /* flat range [begin, end) */
  int u0, u1;        /* the units it covers, [u0, u1) (a unit may straddle two buckets at
                        zero <= 1; never at zero >= 2) */
  mt_grad_group group; /* the reduction group of every tensor in it (buckets never mix) */
  int *counts;       /* per rank of the group, elements of the bucket it owns */
  int *displs;       /* per rank of the group, where its part starts, relative to begin */
  size_t shard_off;  /* where this rank's part sits in its shard buffers */
} mt_bucket_plan;

#define MT_REG_MAX_CHUNKS 64

typedef struct {
  mt_tensor *t;
  int n, cap;
  int tp_size, tp_rank;
  int ep_size, ep_rank;
  int etp_size, etp_rank;
  int pp_rank;        /* this rank's pipeline stage: the flat buffer holds only the tensors
                         mt_registry_holds says (0 without pipeline parallelism) */
  size_t numel_local; /* total local elements (flat buffer length) */
  int finalized;
  mt_unit *units;     /* in flat order (derived) */
  int n_units;
  /* the data-parallel axes (mt_registry_set_dp, mt_registry_set_edp) and
   * what they make of the reduction groups: group_size/rank [MT_GROUP_DP] =
   * dp x cp (rank cp_rank + cp * dp_rank), [MT_GROUP_EDP] = edp */
  int dp_size, dp_rank, cp_size, cp_rank;
  int group_size[MT_NGROUPS], group_rank[MT_NGROUPS];
  int zero; /* the ZeRO level of the shard (mt_registry_shard) */
  int n_group_tensors[MT_NGROUPS]; /* tensors registered per group (derived) */
  mt_bucket_plan *buckets; /* ordered from the end of the flat buffer to the start: the
                              order backward produces gradients in */
  int n_buckets;
  size_t shard_numel;      /* elements of this rank's shard (all it holds without ZeRO) */
  int *by_name;            /* finalized: open-addressed table of tensor index + 1 by name */
  int by_name_cap;
  /* pipeline chunks of this stage (mt_registry_set_chunks): blocks [l0, l1)
   * of each; a ZeRO-2/3 bucket never spans two (0: none given) */
  int n_chunks;
  int chunk_l0[MT_REG_MAX_CHUNKS], chunk_l1[MT_REG_MAX_CHUNKS];
  /* the tied embeddings are used by two chunks of this stage (zb-v's V puts
   * the embedding and the head on stage 0): their unit is held for the
   * whole step, as a tied unit (mt_registry_unit_tied) */
  int tied_here;
} mt_registry;
/* this stage's chunks, before mt_registry_shard (n <= MT_REG_MAX_CHUNKS) */
void mt_registry_set_chunks(mt_registry *r, int n, const int *l0, const int *l1);

void mt_registry_init(mt_registry *r, int tp_size, int tp_rank);
/* the expert axis (call before adding tensors sharded over it) */
void mt_registry_set_ep(mt_registry *r, int ep_size, int ep_rank);
/* the expert-tensor axis (call before finalize) */
void mt_registry_set_etp(mt_registry *r, int etp_size, int etp_rank);
/* the data-parallel axes dp and cp (dense tensors are reduced and sharded
 * over dp x cp) and the expert-data-parallel ranks edp (experts); call
 * before mt_registry_shard (default: 1 rank each) */
void mt_registry_set_dp(mt_registry *r, int dp_size, int dp_rank, int cp_size, int cp_rank);
void mt_registry_set_edp(mt_registry *r, int edp_size, int edp_rank);
/* The ep rank that holds index `index` of a dim of `extent` split over ep
 * (an expert tensor's dim 0: the owner of expert `index` of `extent`). */
int mt_registry_ep_owner(const mt_registry *r, int64_t extent, int64_t index);
void mt_registry_free(mt_registry *r);
/* Register a tensor; returns its index. */
int mt_registry_add_spec(mt_registry *r, const mt_tensor_spec *spec);
/* The short form (replicated over ep, every stage, layer 0, normal init
 * with std 0.02 when weight_decay else zeros): for tools that rebuild a
 * registry from a checkpoint's attributes. padded may be NULL. */
int mt_registry_add(mt_registry *r, const char *name, int ndim, const int64_t *shape,
                    const int64_t *padded, mt_placement tp, int weight_decay);
/* Label tensor i's axes (see mt_tensor.axes; the model labels those whose
 * meaning its shape does not tell: vocabulary, positions). */
void mt_registry_set_axes(mt_registry *r, int i, const char *axes);
/* Does t's dim 0 index sequence positions (its first axis label is
 * "position")? */
int mt_tensor_is_positional(const mt_tensor *t);
/* Index of the tensor named name, or -1. */
int mt_registry_find(const mt_registry *r, const char *name);
/* Index of the tensor whose name is printf(fmt, ...), or -1. */
int mt_registry_findf(const mt_registry *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Does this rank's stage (r->pp_rank) hold t: its owner, its copy, or every stage. */
int mt_registry_holds(const mt_registry *r, const mt_tensor *t);
/* Compute local shapes, flat offsets and units, in registration order, of
 * the tensors this stage holds (the others get numel_local = 0). Returns 0,
 * or -1 with e set when a sharded dim is not divisible by its axis, or a
 * layer's tensors are not registered together. */
int mt_registry_finalize(mt_registry *r, mt_err *e);
/* Unit of layer (MT_LAYER_EMBED, 0..), or -1: its first (dense) unit. */
int mt_registry_unit_of_layer(const mt_registry *r, int layer);
/* The unit of layer's tensors of reduction group g, or -1. */
int mt_registry_unit_of(const mt_registry *r, int layer, mt_grad_group g);
size_t mt_tensor_numel(const mt_tensor *t);        /* global logical */
size_t mt_tensor_numel_padded(const mt_tensor *t); /* global as stored */

/* The pipeline placement (the stage map), the same for every registry of
 * a layout: layers [*l0, *l1) of virtual stage vs (0..pp*v-1), balanced:
 * the first n_layer % (pp*v) virtual stages get one more; split (NULL or pp
 * entries summing to n_layer, each a multiple of v) gives the layers of each
 * stage explicitly: stage s's v chunks get split[s] / v layers each, the
 * virtual stages in order vs = chunk * pp + stage along the model (as
 * Megatron's uneven first/last stages with interleaving). Virtual stage vs
 * lives on pp rank vs % pp (vshape 0: looping), or with vshape (v = 2, the
 * V of zb-v) on rank vs for vs < pp and 2pp - 1 - vs after. */
void mt_registry_stage_layers(int n_layer, int pp, int v, const int *split, int vshape, int vs,
                              int *l0, int *l1);
/* the pp rank of virtual stage vs under that placement */
int mt_registry_vs_rank(int pp, int vshape, int vs);
/* every block's pp rank, stage_of_layer[n_layer] */
void mt_registry_stage_map(int n_layer, int pp, int v, const int *split, int vshape,
                           int *stage_of_layer);

/* The ZeRO shard, after finalize and the dp axes: buckets of about
 * bucket_bytes built from the end of the flat buffer, and this rank's part
 * of each over the bucket's reduction group (dense: its dp x cp rank's;
 * experts: its edp rank's). A bucket never holds two reduction groups (a
 * dense-only registry is cut exactly as without groups).
 *   zero 0, 1: buckets cut at tensor boundaries (a bucket may hold parts of
 *              two layers); each rank's part is an even split of the bucket
 *              (the ZeRO-1 moments; every rank holds the whole bucket of
 *              parameters and gradients);
 *   zero 2:    buckets of whole units, so the gradients of a bucket are
 *              complete when its last unit's backward is done; never two
 *              virtual stages' units in one, and a tied unit
 *              (mt_registry_unit_tied) alone;
 *   zero 3:    one bucket per unit: a unit's parameters are gathered whole.
 * Returns 0 (no failure mode besides allocation). */
int mt_registry_shard(mt_registry *r, int zero, size_t bucket_bytes);
/* Does unit u hold (on this stage) a tensor that another stage keeps a
 * copy of (pp_copy: the tied embeddings under pipeline parallelism)? Its
 * gradients are summed across the two stages before dp reduces them. */
int mt_registry_unit_tied(const mt_registry *r, int u);
/* The bucket holding flat offset off (-1 if none). */
int mt_registry_bucket_of(const mt_registry *r, size_t off);

/* The initial values of local elements [lo, hi) of tensor i (its tp/ep
 * shard) into out (hi - lo floats), by its init rule: for MT_INIT_NORMAL a
 * pure function of (seed, name, global index), so every layout starts from
 * the same logical tensor; padding elements (beyond the true extent of a
 * dim) are 0. */
void mt_registry_init_values(const mt_registry *r, int i, uint64_t seed, size_t lo, size_t hi,
                             float *out);

/* A range [begin, begin+len) of the registry's flat local index space and the
 * memory holding it (len floats). Checkpoints read and write state as such
 * ranges; whoever owns the buffers (model, ZeRO) says which ones a rank has. */
typedef struct {
  size_t begin, len;
  float *mem;
} mt_flat_range;

/* Global flat index (row-major over the padded global shape) of local element
 * i of t, for any placement (tp and ep shards). */
size_t mt_tensor_global_index(const mt_tensor *t, size_t local_index, int tp_size);

static inline mt_placement mt_replicated(void) {
  mt_placement p = {.kind = MT_PLACE_REPLICATED, .dim = 0, .fused_blocks = 1};
  return p;
}

static inline mt_placement mt_sharded(int dim, int fused_blocks) {
  mt_placement p = {.kind = MT_PLACE_SHARDED, .dim = dim, .fused_blocks = fused_blocks};
  return p;
}

#endif
