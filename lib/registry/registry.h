/* registry: every piece of training state, registered once by logical name
 * with its global shape and its placement on each mesh axis. From it alone
 * come each rank's local shard, the flat-buffer offsets, the bytes the
 * collectives move and the memory each rank needs. Knows no MPI. */
#ifndef MT_REGISTRY_H
#define MT_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#define MT_NAME_MAX 96
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

typedef struct {
  char name[MT_NAME_MAX];  /* e.g. "blocks.3.attn.qkv.weight" (global layer numbers) */
  int ndim;
  int64_t shape[MT_MAX_DIMS];   /* global logical shape, unpadded */
  int64_t padded[MT_MAX_DIMS];  /* global shape as stored (padding, e.g. vocab) */
  mt_placement tp;              /* placement on the tensor-parallel axis */
  int pp_stage;                 /* owning pipeline stage (writes it in checkpoints), -1: every
                                   stage */
  int pp_copy;                  /* -1, or a second stage that holds a copy kept equal to the
                                   owner's (the tied LM head on the last stage) */
  int weight_decay;             /* AdamW decays this tensor */
  char tied_to[MT_NAME_MAX];    /* "" or the name of the tensor this one shares storage with */
  int tp_partial_grad;          /* replicated over tp, yet each tp rank computes only a partial
                                   gradient (sequence parallelism: from its slice of the
                                   sequence): the tp ranks' gradients are summed before use */
  /* derived by mt_registry_finalize; local_shape and local_start are the tp
   * shard even where this pipeline stage does not hold the tensor (then
   * numel_local = 0 and offset is where it would start) */
  int64_t local_shape[MT_MAX_DIMS];
  int64_t local_start[MT_MAX_DIMS]; /* global index of local element 0 (per block for fused) */
  size_t numel_local;
  size_t offset;                    /* elements from the start of the flat buffer */
} mt_tensor;

typedef struct {
  mt_tensor *t;
  int n, cap;
  int tp_size, tp_rank;
  int pp_rank;        /* this rank's pipeline stage: the flat buffer holds only the tensors
                         mt_registry_holds says (0 without pipeline parallelism) */
  size_t numel_local; /* total local elements (flat buffer length) */
  int finalized;
} mt_registry;

void mt_registry_init(mt_registry *r, int tp_size, int tp_rank);
void mt_registry_free(mt_registry *r);
/* Register a tensor; returns its index. padded may be NULL (no padding). */
int mt_registry_add(mt_registry *r, const char *name, int ndim, const int64_t *shape,
                    const int64_t *padded, mt_placement tp, int weight_decay);
int mt_registry_find(const mt_registry *r, const char *name);
/* Does this rank's stage (r->pp_rank) hold t: its owner, its copy, or every stage. */
int mt_registry_holds(const mt_registry *r, const mt_tensor *t);
/* Compute local shapes and flat offsets, in registration order, of the
 * tensors this stage holds (the others get numel_local = 0). Returns 0, or
 * -1 when a sharded dim is not divisible by the axis size (msg filled). */
int mt_registry_finalize(mt_registry *r, char *msg, size_t msg_len);
size_t mt_tensor_numel(const mt_tensor *t);        /* global logical */
size_t mt_tensor_numel_padded(const mt_tensor *t); /* global as stored */

/* A range [begin, begin+len) of the registry's flat local index space and the
 * memory holding it (len floats). Checkpoints read and write state as such
 * ranges; whoever owns the buffers (model, ZeRO) says which ones a rank has. */
typedef struct {
  size_t begin, len;
  float *mem;
} mt_flat_range;

/* Global flat index (row-major over the padded global shape) of local element
 * i of t, for any placement. */
size_t mt_tensor_global_index(const mt_tensor *t, size_t local_index, int tp_size);

static inline mt_placement mt_replicated(void) {
  mt_placement p = {MT_PLACE_REPLICATED, 0, 1};
  return p;
}

static inline mt_placement mt_sharded(int dim, int fused_blocks) {
  mt_placement p = {MT_PLACE_SHARDED, dim, fused_blocks};
  return p;
}

#endif
