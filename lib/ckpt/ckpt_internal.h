/* Shared by the ckpt module's files and meshckpt (not part of the API). */
#ifndef MT_CKPT_INTERNAL_H
#define MT_CKPT_INTERNAL_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt/ckpt.h"

/* A tensor seen as 2-D (a vector is one row): extents and the tp split. */
typedef struct {
  int64_t true_ext[2];  /* canonical (checkpoint) shape */
  int64_t pad_ext[2];   /* global shape as stored in memory (padding) */
  int64_t local_ext[2]; /* this rank's shard */
  int shard_dim;        /* view dim split over tp, or -1 */
  int blocks;           /* fused blocks along shard_dim */
  int64_t local_start;  /* first global index of this rank's part of each block */
} mt_ckpt_view_t;

/* A box of the canonical tensor and where its first element sits in the
 * rank's local shard (flat, elements). Boxes of one range come in the
 * canonical tensor's linear order, so their data laid end to end is what a
 * union-of-hyperslabs read or write moves. */
typedef struct {
  int64_t start[2], count[2];
  size_t local_off;
  int full_rows; /* rows are whole local rows: contiguous in memory */
} mt_ckpt_box;

typedef struct {
  mt_ckpt_box *b;
  int n, cap;
} mt_ckpt_boxes;

void mt_ckpt_view(const mt_tensor *t, int tp_size, mt_ckpt_view_t *v);
/* boxes covering local flat elements [lo, hi) of the tensor (relative to its
 * first element); padding is left out */
void mt_ckpt_boxes_for_range(const mt_ckpt_view_t *v, size_t lo, size_t hi, mt_ckpt_boxes *bx);
size_t mt_ckpt_boxes_volume(const mt_ckpt_boxes *bx);

/* index rows: int64 [n][MT_CKPT_INDEX_COLS] */
enum {
  MT_IX_GROUP, MT_IX_TENSOR, MT_IX_WRITER, MT_IX_START0, MT_IX_START1, MT_IX_COUNT0,
  MT_IX_COUNT1, MT_IX_XXH64, MT_CKPT_INDEX_COLS
};
#define MT_CKPT_INDEX_COLUMNS "group,tensor,writer,start0,start1,count0,count1,xxh64"

/* file names inside a step directory */
#define MT_CKPT_SHARED_FILE "ckpt.h5"
#define MT_CKPT_INDEX_FILE "index.h5"
#define MT_CKPT_MANIFEST "MANIFEST.json"

/* Attributes: 0 on success; a string is cut to len. */
int mt_ckpt_attr_i64(hid_t obj, const char *name, int64_t *v);
int mt_ckpt_attr_str(hid_t obj, const char *name, char *buf, size_t len);
/* The root attributes of ckpt.h5 / index.h5 into m (0 on success). */
int mt_ckpt_read_meta(hid_t file, mt_ckpt_meta *m);
/* Select rows [r0, r0+nr) of a tensor's dataspace seen as 2-D. */
void mt_ckpt_select_rows(hid_t space, hsize_t r0, hsize_t nr, hsize_t cols);

/* Read a checkpoint's manifest and check that every file it lists exists
 * with its recorded size. Fills mode ("shared"/"per-writer") and step. */
int mt_ckpt_check_manifest(const char *dir, char *mode, size_t mode_len, int64_t *step,
                           mt_err *e);

#endif
