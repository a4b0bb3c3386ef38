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

/* ------------------------------------------------------------------ */
/* fs.c: directories, durable writes, commit, retention                */

int mt_ckpt_fsync_path(const char *path);
/* text into path via path.tmp, fsync, rename: the old file or the new one */
int mt_ckpt_write_file_durable(const char *path, const char *text);
int mt_ckpt_remove_tree(const char *path);
long long mt_ckpt_file_size(const char *path); /* bytes, or -1 if absent */
int mt_ckpt_mkdir_p(const char *path);
/* parse "step_<N>" (and nothing else) */
int mt_ckpt_parse_step_dir(const char *name, int64_t *step);
/* ckpt.test_crash: rank 0 kills itself when opt names this phase */
void mt_ckpt_test_crash_point(const char *opt, const char *phase, int rank);
/* rank 0: manifest, fsync, rename tmpdir to final_dir, `latest`, retention */
int mt_ckpt_commit(const char *root, const char *tmpdir, const char *final_dir, int64_t step,
                   const char *mode, const char *crash, int keep, mt_err *e);

/* ------------------------------------------------------------------ */
/* h5util.c: HDF5 helpers                                              */

/* write attributes: 0 on success */
int mt_ckpt_put_attr_i64(hid_t obj, const char *name, int64_t v);
int mt_ckpt_put_attr_i64v(hid_t obj, const char *name, const int64_t *v, int n);
int mt_ckpt_put_attr_str(hid_t obj, const char *name, const char *v);
/* a dataspace with the boxes selected (or none) */
hid_t mt_ckpt_select_boxes(hid_t space, const mt_ckpt_boxes *bx);
/* a 1-D memory space of n elements (n = 0: one element, none selected) */
hid_t mt_ckpt_mem_space(size_t n);
/* "/<group path>/<name>" */
void mt_ckpt_dataset_path(char *out, size_t len, int group, const char *name);
/* parallel access over comm: aligned datasets, collective metadata writes */
hid_t mt_ckpt_fapl_mpio(MPI_Comm comm);
/* independent MPI-IO for tensor data unless MT_CKPT_IO=collective */
H5FD_mpio_xfer_t mt_ckpt_tensor_io_mode(void);
/* a dataset every rank creates, with rows [row0, row0+nrows) written by this rank */
int mt_ckpt_write_table_i64(hid_t file, const char *name, const int64_t *rows, int64_t total,
                            int64_t row0, int64_t nrows, int cols, hid_t dxpl);
/* n fixed-length strings of width bytes each, written by rank 0 (every rank
 * takes part in the collective create and write) */
int mt_ckpt_write_strings(hid_t file, const char *name, const char *buf, size_t width, size_t n,
                          int rank, hid_t dxpl);
/* a text (the resolved configuration) as one string */
int mt_ckpt_write_text(hid_t file, const char *name, const char *text, int rank, hid_t dxpl);
/* the tensor names, row i = tensor id i of the index */
int mt_ckpt_write_names(hid_t file, const mt_registry *reg, int rank, hid_t dxpl);
/* the root attributes (format, version, index columns, meta) */
int mt_ckpt_write_meta_attrs(hid_t file, const mt_ckpt_meta *m);

/* ------------------------------------------------------------------ */
/* select.c: what a rank writes or reads of each tensor                */

/* Does this rank write its shard of t at all? (replicated state once) */
int mt_ckpt_writes_tensor(const mt_tensor *t, const mt_mesh *mesh);

/* Ranges of a state intersected with one tensor: boxes, and the memory of
 * each piece. Several ranges may touch one tensor; boxes are appended per
 * range. */
typedef struct {
  mt_ckpt_boxes boxes; /* all boxes, canonical order within each range */
  float **piece_mem;   /* per box: memory of the box's first element */
  int piece_cap;
  size_t volume; /* elements */
} mt_ckpt_sel;

void mt_ckpt_sel_build(mt_ckpt_sel *s, const mt_tensor *t, const mt_ckpt_view_t *v,
                       const mt_flat_range *ranges, int n_ranges);
/* the selection's memory when its data lies end to end already, else NULL */
float *mt_ckpt_sel_contiguous(const mt_ckpt_sel *s, int64_t L1);
/* staging (canonical order) <-> the pieces' memory */
void mt_ckpt_sel_copy(mt_ckpt_sel *s, float *staging, int64_t L1, int to_mem);
void mt_ckpt_sel_free(mt_ckpt_sel *s);

/* ------------------------------------------------------------------ */
/* write.c, write_shared.c, write_perwriter.c, save.c: the writers     */

/* This rank's boxes of every tensor into file (shared: collective writes
 * into the canonical datasets; per-writer: 1-D datasets of its shard file),
 * and one index row per box with its checksum. */
int mt_ckpt_write_tensors(hid_t file, int per_writer, const mt_registry *reg, mt_mesh *mesh,
                          const mt_ckpt_state *st, const char *crash, int64_t **index_rows,
                          int *n_index);
/* The canonical datasets: contiguous (rows == NULL) or virtual over the
 * writers' shard files (per-writer mode's index file). */
int mt_ckpt_create_datasets(hid_t file, const mt_registry *reg, const int64_t *rows,
                            int64_t n_rows);
/* element offset of each index row's data in its writer's shard dataset */
int64_t *mt_ckpt_shard_offsets(const int64_t *rows, int64_t n);
/* a virtual dataset's creation list for tensor ti of group g */
hid_t mt_ckpt_virtual_dcpl(const mt_tensor *t, int g, const int64_t *rows, const int64_t *off,
                           int64_t n, int ti);
/* Writers: return 1 on success, else 0 with e set. */
int mt_ckpt_save_shared(const char *tmpdir, const mt_ckpt_meta *meta, const mt_registry *reg,
                        mt_mesh *mesh, const mt_ckpt_state *st, const mt_ckpt_save_opts *opts,
                        mt_err *e);
/* per-writer, part 1 (no MPI: may run in a background thread) */
int mt_ckpt_write_shard(const char *tmpdir, const mt_registry *reg, mt_mesh *mesh,
                        const mt_ckpt_state *st, const char *crash, int64_t **rows, int *n_rows,
                        mt_err *e);
/* per-writer, part 2 (collective): rank 0 writes index.h5 */
int mt_ckpt_finish_per_writer(const char *tmpdir, const mt_ckpt_meta *meta,
                              const mt_registry *reg, mt_mesh *mesh, const char *config_ini,
                              const int64_t *rows, int n_rows, mt_err *e);
int mt_ckpt_save_per_writer(const char *tmpdir, const mt_ckpt_meta *meta, const mt_registry *reg,
                            mt_mesh *mesh, const mt_ckpt_state *st,
                            const mt_ckpt_save_opts *opts, mt_err *e);
/* The two halves around the writers (collective): agree on the schema and
 * make the temporary directory; then agree and let rank 0 commit. */
int mt_ckpt_save_begin(const char *root, const mt_ckpt_meta *meta, const mt_registry *reg,
                       mt_mesh *mesh, const mt_ckpt_save_opts *opts, char *tmpdir, size_t len,
                       mt_err *e);
int mt_ckpt_save_end(const char *root, const char *tmpdir, int64_t step, const char *mode,
                     const char *crash, int keep, mt_mesh *mesh, mt_err *e);

/* ------------------------------------------------------------------ */
/* verify.c: checks that need the data                                 */

/* xxh64 of n float32 values (little-endian bytes) */
uint64_t mt_ckpt_box_hash(const float *data, size_t n);
/* Every rank checks the checksums of the index rows i with i % world == rank. */
int mt_ckpt_verify_checksums(const char *dir, hid_t file, const mt_registry *reg, mt_mesh *mesh,
                             mt_err *e);
/* Per-writer: every shard file the index maps exists and is HDF5. */
int mt_ckpt_check_shard_files(const char *dir, mt_err *e);

#endif
