/* The private interface of lib/ckpt/core: the format, its checks, the
 * writers and the reader. Used by core itself and by the two layers above
 * it, lib/ckpt/tools (conversion, inspection) and lib/ckpt/interop (Hugging
 * Face); never by anything outside lib/ckpt, and core includes nothing of
 * tools or interop. */
#ifndef MT_CKPT_CORE_H
#define MT_CKPT_CORE_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt/ckpt.h"

/* Checkpoints hold floats (and bf16) in little-endian byte order, written
 * and read as they lie in memory, checksums over those bytes */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "meshtrain checkpoints are written from little-endian memory: a big-endian "
               "build is not supported");

/* A tensor seen as 2-D: rows = every dim but the last flattened (a vector
 * is one row; an E x out x in expert tensor E*out rows of in), columns =
 * the last dim. Any dim may be split (tp, ep, etp); the view maps this
 * rank's local rows and columns to the canonical tensor's. */
typedef struct {
  int64_t true_ext[2];  /* canonical (checkpoint) shape */
  int64_t pad_ext[2];   /* global shape as stored in memory (padding) */
  int64_t local_ext[2]; /* this rank's shard */
  /* per dim of the N-d tensor: its canonical, padded and local extents, the
   * fused blocks of the axis that splits it, and this rank's first index in
   * each block */
  int nd;
  int64_t shape[MT_MAX_DIMS], padded[MT_MAX_DIMS], local[MT_MAX_DIMS], start[MT_MAX_DIMS];
  int blocks[MT_MAX_DIMS];
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
/* A box of the 2-D view as up to 3 hyperslabs of the N-d dataset (start,
 * count over nd dims), in canonical order: a box's rows may begin and end
 * inside an expert (a partial first and last expert around whole ones).
 * dims: the dataset's extents. Returns the number of pieces. */
int mt_ckpt_box_pieces(const mt_ckpt_box *b, int nd, const int64_t *dims,
                       int64_t start[3][MT_MAX_DIMS], int64_t count[3][MT_MAX_DIMS]);
/* boxes covering local flat elements [lo, hi) of the tensor (relative to its
 * first element); padding is left out. 0, or -1 when out of memory. */
int mt_ckpt_boxes_for_range(const mt_ckpt_view_t *v, size_t lo, size_t hi, mt_ckpt_boxes *bx);
size_t mt_ckpt_boxes_volume(const mt_ckpt_boxes *bx);

/* index rows: int64 [n][MT_CKPT_INDEX_COLS] */
enum {
  MT_IX_GROUP, MT_IX_TENSOR, MT_IX_WRITER, MT_IX_START0, MT_IX_START1, MT_IX_COUNT0,
  MT_IX_COUNT1, MT_IX_XXH64, MT_CKPT_INDEX_COLS
};
#define MT_CKPT_INDEX_COLUMNS "group,tensor,writer,start0,start1,count0,count1,xxh64"

/* file names inside a step directory (and shard-<rank, 5 digits>.h5) */
#define MT_CKPT_SHARED_FILE "ckpt.h5"
#define MT_CKPT_INDEX_FILE "index.h5"
#define MT_CKPT_MANIFEST "MANIFEST.json"

/* the longest string attribute read (bytes): sizes read from a file are
 * bounded before anything is allocated */
#define MT_CKPT_ATTR_STR_MAX 4096

/* ------------------------------------------------------------------ */
/* h5scope.c: HDF5's error printing off inside a scope; one HDF5 thread  */

/* Every entry point of the module that calls HDF5 runs inside a scope:
 * begin waits for a background writer (HDF5 is not thread-safe), saves the
 * caller's automatic error printing and turns it off (errors go to mt_err);
 * end gives the caller's setting back. Scopes nest. */
typedef struct {
  H5E_auto2_t func;
  void *data;
  int active;
  ssize_t open_objects; /* HDF5 objects open when the scope began (end warns of more) */
} mt_ckpt_h5_scope;
void mt_ckpt_h5_scope_begin(mt_ckpt_h5_scope *s);
void mt_ckpt_h5_scope_end(const mt_ckpt_h5_scope *s);
/* begin without the wait: the background writer's own scope */
void mt_ckpt_h5_quiet(mt_ckpt_h5_scope *s);
/* An entry point's whole body: return call (its *_scoped half) run inside
 * a scope, a failure passed up with the entry point's frame. */
#define MT_CKPT_RETURN_SCOPED(e, call)                                       \
  do {                                                                       \
    mt_ckpt_h5_scope scope_;                                                 \
    mt_ckpt_h5_scope_begin(&scope_);                                         \
    int rc_ = (call);                                                        \
    mt_ckpt_h5_scope_end(&scope_);                                           \
    return rc_ == 0 ? 0 : mt_err_pass(e);                                    \
  } while (0)
/* The background writer (async.c) registers how to wait for it (NULL:
 * none runs); wait: until no background writer runs. */
void mt_ckpt_writer_register(void (*join)(void *), void *arg);
void mt_ckpt_writer_wait(void);

/* ------------------------------------------------------------------ */
/* mpi.c: the module's communicator (a duplicate of MPI_COMM_WORLD that
 * returns errors) and its collectives, each checked: 0, or -1 with e set */

MPI_Comm mt_ckpt_comm(void);
int mt_ckpt_rank(void);
int mt_ckpt_size(void);
/* from rank 0 */
int mt_ckpt_bcast(void *buf, int64_t bytes, mt_err *e);
int mt_ckpt_allreduce_i64(int64_t *v, int64_t n, MPI_Op op, mt_err *e);
int mt_ckpt_allreduce_f64(double *v, int n, MPI_Op op, mt_err *e);
/* every rank's n values to rank 0 (*all, *n_all there), in rank order */
int mt_ckpt_gather_i64(const int64_t *mine, int64_t n, int64_t **all, int64_t *n_all, mt_err *e);
/* mt_err_agree on the module's communicator */
int mt_ckpt_agree(mt_err *e);

/* ------------------------------------------------------------------ */
/* errors.c: error text and the fault switch                          */

/* e = "<fmt...>: strerror(err)" (first error wins), with the caller's
 * file:line. _sys: a failing system call of a save or a conversion: a
 * runtime condition (exit 3). _read_sys: of reading a checkpoint: input
 * that will never work when the path is missing or may not be read
 * (ENOENT, EACCES, ...; exit 2), else a runtime condition (EIO, ...). */
void mt_ckpt_err_sys_at(mt_err *e, const char *file, int line, int err, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void mt_ckpt_err_read_sys_at(mt_err *e, const char *file, int line, int err, const char *fmt,
                             ...) __attribute__((format(printf, 5, 6)));
#define mt_ckpt_err_sys(e, err, ...) mt_ckpt_err_sys_at((e), __FILE__, __LINE__, (err), __VA_ARGS__)
#define mt_ckpt_err_read_sys(e, err, ...)                                                   \
  mt_ckpt_err_read_sys_at((e), __FILE__, __LINE__, (err), __VA_ARGS__)
/* e = "<fmt...>: <cause> (HDF5 <API function>(): <description>)" from the
 * HDF5 error stack, which it clears; cause: the innermost entry's system
 * error message, or its description. _h5: writing (runtime); _h5_read: a
 * runtime condition when HDF5 saw a system error, else a damaged file
 * (bad input). */
void mt_ckpt_err_h5_at(mt_err *e, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void mt_ckpt_err_h5_read_at(mt_err *e, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define mt_ckpt_err_h5(e, ...) mt_ckpt_err_h5_at((e), __FILE__, __LINE__, __VA_ARGS__)
#define mt_ckpt_err_h5_read(e, ...) mt_ckpt_err_h5_read_at((e), __FILE__, __LINE__, __VA_ARGS__)
/* MT_CKPT_FAULT, read once (0, or -1 with e set when malformed); rank and
 * step (-1 for a load) say where this process is */
int mt_ckpt_fault_init(int world_rank, int64_t step, mt_err *e);
/* The errno to fail this call with, or 0. op: create (a file or directory),
 * write (tensor data), index (the main file's tables: index, layout, names,
 * configuration, written after the tensor data), sync, close, rename
 * (commit), open or read (loads). Thread-safe (the background writer calls
 * it). */
int mt_ckpt_fault(const char *op);
/* A write of *bytes (op write or index): the errno to fail it with, or 0;
 * with short=1 in MT_CKPT_FAULT the failing call first becomes a short
 * write (*bytes halved, 0 returned), as a file system that fills up
 * mid-call does, and the next call fails. */
int mt_ckpt_fault_write(const char *op, size_t *bytes);

/* ------------------------------------------------------------------ */
/* fs.c: directories, durable writes, commit, retention, manifest      */

/* 0, or -1 with errno set */
int mt_ckpt_fsync_path(const char *path);
/* bytes of buf at off of fd, all of them (short writes continued); op
 * "write" or "index" for the fault switch. 0, or -1 with errno set. */
int mt_ckpt_pwrite_full(int fd, const void *buf, size_t bytes, int64_t off, const char *op);
/* close(fd), checked (and the fault switch's op close) */
int mt_ckpt_close_fd(int fd);
/* Can this process write a file of bytes? -1 with errno EFBIG when the
 * file-size limit (RLIMIT_FSIZE, ulimit -f) is lower: checked before HDF5
 * makes a file, since HDF5 1.10 cannot close a file it could not extend
 * (the process then crashes at exit). The limit in bytes, or -1: none. */
int mt_ckpt_check_file_size(long long bytes);
long long mt_ckpt_file_size_limit(void);
/* SIGXFSZ ignored unless the program chose otherwise: a write beyond the
 * file-size limit then fails with EFBIG, which a save reports, instead of
 * killing the rank */
void mt_ckpt_ignore_sigxfsz(void);
/* text into path via path.tmp, fsync, rename: the old file or the new one */
int mt_ckpt_write_file_durable(const char *path, const char *text);
int mt_ckpt_remove_tree(const char *path);
long long mt_ckpt_file_size(const char *path); /* bytes, or -1 if absent */
int mt_ckpt_mkdir_p(const char *path);
/* reserve the blocks of bytes [0, bytes) of fd where the file system can
 * (keep_size: without changing the file's size; ftruncate to the same size
 * gives back what was not used) */
int mt_ckpt_reserve(int fd, long long bytes, int keep_size);
/* Space for the metadata HDF5 writes when it closes a file, held in a
 * ballast file (dir/.ballast-<tag>) from before the file is made until just
 * before H5Fclose: a full disk then never fails inside H5Fclose. take: 0, or
 * -1 with errno set (ENOSPC, EDQUOT). */
typedef struct {
  char path[1200];
  int fd;
} mt_ckpt_ballast;
int mt_ckpt_ballast_take(mt_ckpt_ballast *b, const char *dir, const char *tag, long long bytes);
void mt_ckpt_ballast_release(mt_ckpt_ballast *b);
/* metadata bytes an HDF5 file of ours can need at close: datasets, index
 * boxes (virtual mappings), and small tables written through the sieve buffer */
long long mt_ckpt_metadata_bytes(long long datasets, long long boxes, long long small_bytes);
/* parse "step_<N>" (and nothing else) */
int mt_ckpt_parse_step_dir(const char *name, int64_t *step);
/* ckpt.test_crash: rank 0 kills itself when opt names this phase */
void mt_ckpt_test_crash_point(mt_ckpt_crash opt, mt_ckpt_crash phase, int rank);
/* The steps of a commit (rank 0; save.c runs them in order): the manifest
 * of every file in tmpdir (written durably); tmpdir renamed to final_dir,
 * replacing an older one of that step; older checkpoints beyond keep and
 * leftovers of crashed saves removed. 0, or -1 with errno set. */
int mt_ckpt_write_manifest(const char *tmpdir, int64_t step, mt_ckpt_mode mode);
int mt_ckpt_install(const char *root, const char *tmpdir, const char *final_dir);
void mt_ckpt_retention(const char *root, int keep);

/* ------------------------------------------------------------------ */
/* h5file.c: an HDF5 file that HDF5 lays out and we fill (see there)   */

typedef struct {
  char path[1100];
  hid_t file;
  int fd; /* from close on: the file, for the data's pwrites */
  long long bound;
  mt_ckpt_ballast ballast;
} mt_ckpt_h5out;
/* Try the file's whole size (bound bytes: EFBIG beyond the file-size
 * limit), hold metadata_bytes in a ballast, create the file (exists: it was
 * made already, by MPI-IO with striping hints). 0, or -1 with e set and
 * nothing left open. */
int mt_ckpt_h5out_create(mt_ckpt_h5out *o, const char *path, long long bound,
                         long long metadata_bytes, hid_t fapl, int exists, const char *where,
                         mt_err *e);
/* a contiguous dataset, its space allocated, never filled; *offset: where
 * its data starts (bytes). The caller adds attributes and closes it. */
hid_t mt_ckpt_h5out_dataset(mt_ckpt_h5out *o, hid_t loc, const char *name, hid_t type, int ndim,
                            const int64_t *dims, hid_t lcpl, int64_t *offset, const char *where,
                            mt_err *e);
/* Reserve the file's blocks, then H5Fclose (the metadata). Always closes
 * the file, also after an earlier error in e; o->fd is then open for the
 * data (unless e is set). */
int mt_ckpt_h5out_close(mt_ckpt_h5out *o, const char *where, mt_err *e);
/* After the data: fsync (sync), the unused reservation given back, close;
 * every return checked. Closes o->fd in any case. */
int mt_ckpt_h5out_finish(mt_ckpt_h5out *o, int sync, const char *where, mt_err *e);

/* What a checked manifest says. */
typedef struct {
  mt_ckpt_mode mode; /* shared or per-writer */
  char version[32]; /* MAJOR.MINOR.PATCH */
  int64_t step;
  int64_t total_bytes; /* of every listed file: the bound for sizes read from them */
  int n_files;
} mt_ckpt_manifest;

/* Read a checkpoint's manifest and check it: format, a version this build
 * reads, a known mode, a non-empty file list naming the mode's main file,
 * every file there with its recorded size. */
int mt_ckpt_check_manifest(const char *dir, mt_ckpt_manifest *m, mt_err *e);
/* "MAJOR.MINOR.PATCH" (0 / -1) */
int mt_ckpt_parse_version(const char *text, int *major, int *minor, int *patch);
/* a format version this build reads (only MAJOR 1 exists); where names it in e */
int mt_ckpt_check_version(const char *where, const char *version, mt_err *e);

/* ------------------------------------------------------------------ */
/* h5util.c: HDF5 helpers                                              */

/* Attributes: 0 on success; a string is cut to len. */
int mt_ckpt_attr_i64(hid_t obj, const char *name, int64_t *v);
int mt_ckpt_attr_str(hid_t obj, const char *name, char *buf, size_t len);
/* The root attributes of ckpt.h5 / index.h5 into m: 0 when those of 1.0 and
 * 1.1 are there (the 1.2 ones absent: a dense model, ep = etp = 1), 1 when
 * the 1.2 ones are there too, -1 when some of 1.0 are missing, -2 when only
 * some of 1.2, or of 1.4's architecture (absent: GPT-2's, mt_ckpt_meta_arch_defaults). */
int mt_ckpt_read_meta(hid_t file, mt_ckpt_meta *m);
/* the MoE routing bias (dataset MT_CKPT_MOE_BIAS, rows x E float32) of an
 * open main file: 0 and *bias NULL when there is none; 1 with *bias (the
 * caller frees it) and its shape; -1 with e set (where: what was read) */
#define MT_CKPT_MOE_BIAS "moe_router_bias"
int mt_ckpt_read_moe_bias(hid_t file, float **bias, int64_t *rows, int64_t *E, const char *where,
                          mt_err *e);
/* the stored configuration (dataset "config", a fixed-length string of at
 * most limit bytes) of an open main file: malloc'd text, or NULL when there
 * is none (or it is not such a string) */
char *mt_ckpt_read_config_text(hid_t file, int64_t limit);
/* does a checkpoint of this format version carry the 1.2 (MoE) attributes */
int mt_ckpt_meta_has_moe(const char *version);
/* Select rows [r0, r0+nr) of a tensor's dataspace seen as 2-D. */
void mt_ckpt_select_rows(hid_t space, hsize_t r0, hsize_t nr, hsize_t cols);

/* Writers below: 0, or -1 with e set from the HDF5 error stack, prefixed by
 * where (e.g. "checkpoint step 8: rank 0 cannot write F"). */
int mt_ckpt_put_attr_i64(hid_t obj, const char *name, int64_t v, const char *where, mt_err *e);
int mt_ckpt_put_attr_i64v(hid_t obj, const char *name, const int64_t *v, int n, const char *where,
                          mt_err *e);
int mt_ckpt_put_attr_str(hid_t obj, const char *name, const char *v, const char *where,
                         mt_err *e);
/* the boxes selected in space (or none): 0 / -1 */
int mt_ckpt_select_boxes(hid_t space, const mt_ckpt_boxes *bx);
/* a 1-D memory space of n elements (n = 0: one element, none selected) */
hid_t mt_ckpt_mem_space(size_t n);
/* "/<group path>/<name>" */
void mt_ckpt_dataset_path(char *out, size_t len, int group, const char *name);
/* parallel read access over comm (the loader, shared mode) */
hid_t mt_ckpt_fapl_mpio(MPI_Comm comm);
/* serial access without file locks (shards, reading index.h5) */
hid_t mt_ckpt_fapl_serial(void);
/* serial access for the files rank 0 creates: datasets of from bytes and
 * more aligned on align, the 1.8+ format, no file locks */
hid_t mt_ckpt_fapl_create(long long from, long long align);
/* independent MPI-IO for loads unless MT_CKPT_IO=collective */
H5FD_mpio_xfer_t mt_ckpt_tensor_io_mode(void);
/* an int64 [nrows, cols] dataset */
int mt_ckpt_write_table_i64(hid_t file, const char *name, const int64_t *rows, int64_t nrows,
                            int cols, const char *where, mt_err *e);
/* n fixed-length strings of width bytes each */
int mt_ckpt_write_strings(hid_t file, const char *name, const char *buf, size_t width, size_t n,
                          const char *where, mt_err *e);
/* a text (the resolved configuration) as one string */
int mt_ckpt_write_text(hid_t file, const char *name, const char *text, const char *where,
                       mt_err *e);
/* the tensor names, row i = tensor id i of the index */
int mt_ckpt_write_names(hid_t file, const mt_registry *reg, const char *where, mt_err *e);
/* xxh64 of the root attributes that resume uses (format, version and every
 * integer of m, as "key=value\n" lines in SCHEMA.md's order; from 1.2 also
 * groups) */
uint64_t mt_ckpt_meta_hash(const mt_ckpt_meta *m, const char *version, int64_t groups);
/* the root attributes (format, version, index columns, meta, groups, meta_xxh64) */
int mt_ckpt_write_meta_attrs(hid_t file, const mt_ckpt_meta *m, int groups, const char *where,
                             mt_err *e);

/* Stored element types (mt_dtype): MT_DT_F32 (what training writes) and
 * MT_DT_BF16 (a conversion's choice for parameters), both little-endian.
 * Checksums are of the stored bytes. The HDF5 file type of one (close it),
 * or -1: */
hid_t mt_ckpt_h5_type(int dtype);
/* MT_DT_F32 or MT_DT_BF16 for an HDF5 type, or -1 for any other */
int mt_ckpt_dtype_of(hid_t type);

/* ------------------------------------------------------------------ */
/* select.c: what a rank writes or reads of each tensor                */

/* Does this rank write its shard of t at all? (replicated state once) */
int mt_ckpt_writes_tensor(const mt_tensor *t, const mt_mesh *mesh);

/* Ranges of a state intersected with one tensor: boxes, and the memory of
 * each piece (a box's row r starts at piece_mem + r * local_ext[1]).
 * Several ranges may touch one tensor; boxes are appended per range. */
typedef struct {
  mt_ckpt_boxes boxes; /* all boxes, canonical order within each range */
  float **piece_mem;   /* per box: memory of the box's first element */
  int piece_cap;
  size_t volume; /* elements */
} mt_ckpt_sel;

/* 0, or -1 when out of memory (no abort: the background writer uses it) */
int mt_ckpt_sel_build(mt_ckpt_sel *s, const mt_tensor *t, const mt_ckpt_view_t *v,
                      const mt_flat_range *ranges, int n_ranges);
/* the selection's memory when its data lies end to end already, else NULL */
float *mt_ckpt_sel_contiguous(const mt_ckpt_sel *s, int64_t L1);
/* staging (canonical order) <-> the pieces' memory */
void mt_ckpt_sel_copy(mt_ckpt_sel *s, float *staging, int64_t L1, int to_mem);
void mt_ckpt_sel_free(mt_ckpt_sel *s);

/* Every (group, tensor) in writing order with this rank's selection of it:
 *   mt_ckpt_walk w; mt_ckpt_walk_begin(&w, ...);
 *   while ((more = mt_ckpt_walk_next(&w)) == 1) { w.g, w.i, w.t, w.v, w.sel }
 *   mt_ckpt_walk_end(&w);     more = -1: out of memory
 * writing: only what this rank writes (replicated state once). */
typedef struct {
  const mt_registry *reg;
  const mt_mesh *mesh;
  const mt_ckpt_state *st;
  int writing;
  int g, i;
  const mt_tensor *t;
  mt_ckpt_view_t v;
  mt_ckpt_sel sel;
} mt_ckpt_walk;
void mt_ckpt_walk_begin(mt_ckpt_walk *w, const mt_registry *reg, const mt_mesh *mesh,
                        const mt_ckpt_state *st, int writing);
int mt_ckpt_walk_next(mt_ckpt_walk *w);
void mt_ckpt_walk_end(mt_ckpt_walk *w);
/* xxh64 of a box whose row r is at first + r * L1 in memory */
uint64_t mt_ckpt_box_hash_mem(const float *first, const mt_ckpt_box *b, int64_t L1);

/* ------------------------------------------------------------------ */
/* write.c, write_shared.c, write_perwriter.c, save.c: the writers     */

/* index rows, int64 [n][MT_CKPT_INDEX_COLS], growing */
typedef struct {
  int64_t *rows;
  int n, cap;
} mt_ckpt_rows;
/* 0, or -1 when out of memory */
int mt_ckpt_append_row(mt_ckpt_rows *r, int g, int ti, int writer, const mt_ckpt_box *b,
                       uint64_t h);
/* this rank's boxes (with_hash: and the checksums of their data), in
 * writing order */
int mt_ckpt_plan_rows(const mt_registry *reg, mt_mesh *mesh, const mt_ckpt_state *st,
                      int with_hash, mt_ckpt_rows *out, mt_err *e);
/* Collective: every rank's rows to rank 0 (*all, *n_all there), in rank order. */
int mt_ckpt_gather_rows(const mt_ckpt_rows *mine, int64_t **all, int64_t *n_all, mt_err *e);
/* Collective: (rank, tp, cp, dp, pp) of every rank, on rank 0 (NULL elsewhere). */
int mt_ckpt_gather_layout(const mt_mesh *mesh, int64_t **all, mt_err *e);
/* The file rank 0 writes alone: ckpt.h5 (shared: every canonical dataset
 * contiguous, its file offset in offsets[g * n + i]) or index.h5 (virtual
 * datasets over the shard files, rows: the whole index), plus the tables
 * index [n_rows, 8], layout [world, 5], tensors [n] and config [1]. */
typedef struct {
  int groups;                 /* 3, or 1: parameters only */
  int dtype[MT_CKPT_NGROUPS]; /* stored type per group (MT_DT_F32, MT_DT_BF16) */
  const int *order;           /* datasets (g * n + i) in the order their data lies in the file
                                 (NULL: group by group, registry order) */
  int target_tp, target_pp;   /* > 0: the layout a conversion laid the boxes out for (root
                                 attributes target_tp, target_pp; informative) */
  int target_ep, target_etp;  /* > 0 (MoE, with target_tp): its folded mesh (target_ep,
                                 target_etp) */
} mt_ckpt_file_opts;
typedef struct {
  mt_ckpt_h5out out;
  int64_t *offsets;     /* shared: bytes, per g * n + i */
  int64_t table_off[5]; /* index, layout, tensors, config, MoE bias: where their bytes go */
  int64_t n_rows, world, config_bytes;
  /* the MoE routing bias (MT_CKPT_MOE_BIAS), a copy of meta's: moe_bias_n
   * floats (MoE blocks x experts); NULL: the run has none (no dataset) */
  float *moe_bias;
  int64_t moe_bias_n;
  int n_tensors;
  char where[1300];
} mt_ckpt_main;
/* Rank 0 alone: lay the file out (HDF5 writes its metadata and closes it;
 * fo NULL: what training writes, every group, float32, registry order).
 * Then put_tables (layout, names, configuration), put_index (rows with
 * their checksums, at any time after), finish (fsync, close): the bytes
 * with pwrite, every return checked. 0, or -1 with e set; create leaves
 * nothing open on failure, finish closes in any case. */
int mt_ckpt_main_create(mt_ckpt_main *m, const char *path, const mt_ckpt_meta *meta,
                        const mt_registry *reg, const int64_t *rows, int64_t n_rows, int world,
                        const char *config_ini, int shared, const mt_ckpt_file_opts *fo,
                        mt_err *e);
int mt_ckpt_main_put_tables(mt_ckpt_main *m, const int64_t *layout, const mt_registry *reg,
                            const char *config_ini, mt_err *e);
int mt_ckpt_main_put_index(mt_ckpt_main *m, const int64_t *rows, mt_err *e);
int mt_ckpt_main_finish(mt_ckpt_main *m, int sync, mt_err *e);
/* element offset of each index row's data in its writer's shard dataset */
int64_t *mt_ckpt_shard_offsets(const int64_t *rows, int64_t n);
/* a virtual dataset's creation list for tensor ti of group g, or -1 (e set) */
hid_t mt_ckpt_virtual_dcpl(const mt_tensor *t, int g, const int64_t *rows, const int64_t *off,
                           int64_t n, int ti, const char *where, mt_err *e);
/* What rank 0 keeps of a save for the check before the commit: the index
 * as written (with every checksum) and the tensors it names. */
typedef struct {
  int64_t *rows; /* rank 0: the whole index, owned */
  int64_t n_rows;
  const mt_registry *reg;
  int groups;
} mt_ckpt_written;
void mt_ckpt_written_free(mt_ckpt_written *w);
/* a written save's index (*rows, owned: taken, *rows left NULL) kept in w */
void mt_ckpt_written_keep(mt_ckpt_written *w, int64_t **rows, int64_t n_rows,
                          const mt_registry *reg, const mt_ckpt_file_opts *fo);

/* Data in pieces of at most this many bytes: each hashed (and scanned for
 * values that are not finite) while in cache, then written, its writeback
 * started at once (sync_file_range), so the final fsync has little left to
 * wait for. */
#define MT_CKPT_PIECE_BYTES ((size_t)8 << 20)
/* n floats hashed into hs (may be NULL) and scanned: the values that are
 * NaN or Inf, counted (the scan's time to mt_ckpt_check_time_add) */
size_t mt_ckpt_hash_scan(void *hs, const float *p, size_t n);
/* n floats at off of fd, in pieces as above: hashed into hs (may be NULL),
 * *nonfinite += the values that are NaN or Inf. 0, or -1 with errno set. */
int mt_ckpt_write_floats(int fd, const float *p, size_t n, int64_t off, void *hs,
                         size_t *nonfinite);
/* the time of the checks before a commit (see mt_ckpt_last_check_seconds):
 * reset at the start of a save, added to by each check (thread-safe: the
 * background writer adds its share) */
void mt_ckpt_check_time_reset(void);
void mt_ckpt_check_time_add(double seconds);
/* "checkpoint step N: rank R: K NaN or Inf values in <path>" (runtime) */
void mt_ckpt_err_nonfinite(mt_err *e, int64_t step, int rank, size_t count, const char *path);

/* The writers: 0, or -1 with this rank's error in e (the caller agrees on
 * it); w: filled on rank 0. */
int mt_ckpt_save_shared(const char *tmpdir, const mt_ckpt_meta *meta, const mt_registry *reg,
                        mt_mesh *mesh, const mt_ckpt_state *st, const mt_ckpt_save_opts *opts,
                        const mt_ckpt_file_opts *fo, mt_ckpt_written *w, mt_err *e);
/* per-writer, part 1 (no MPI, no abort: may run in the background writer):
 * this rank's shard file, laid out by HDF5, filled with pwrite, checked by
 * opening it again */
int mt_ckpt_write_shard(const char *tmpdir, const mt_registry *reg, mt_mesh *mesh,
                        const mt_ckpt_state *st, mt_ckpt_crash crash, int64_t step,
                        mt_ckpt_rows *rows, mt_err *e);
/* A shard just written, opened again: every dataset path[k] a 1-D array of
 * n[k] elements of dtype[k] (0 / -1 with e set). */
int mt_ckpt_check_shard(const char *path, int n_sets, char (*paths)[256], const int64_t *n,
                        const int *dtype, const char *where, mt_err *e);
/* per-writer, part 2 (collective): rank 0 writes index.h5 */
int mt_ckpt_finish_per_writer(const char *tmpdir, const mt_ckpt_meta *meta,
                              const mt_registry *reg, mt_mesh *mesh, const char *config_ini,
                              const mt_ckpt_rows *rows, const mt_ckpt_file_opts *fo,
                              mt_ckpt_written *w, mt_err *e);
int mt_ckpt_save_per_writer(const char *tmpdir, const mt_ckpt_meta *meta, const mt_registry *reg,
                            mt_mesh *mesh, const mt_ckpt_state *st,
                            const mt_ckpt_save_opts *opts, const mt_ckpt_file_opts *fo,
                            mt_ckpt_written *w, mt_err *e);
/* mt_ckpt_save with the file options (fo NULL: as training writes); the
 * state of the groups fo leaves out must be empty (a parameters-only save:
 * ranges of group MT_CKPT_MODEL only; float32 in memory and on disk) */
int mt_ckpt_save_with(const char *root, const mt_ckpt_meta *meta, const mt_registry *reg,
                      mt_mesh *mesh, const mt_ckpt_state *st, const mt_ckpt_save_opts *opts,
                      const mt_ckpt_file_opts *fo, double *write_s, mt_err *e);
/* The halves around the writers (collective): agree on the schema and make
 * the temporary directory; then agree and let rank 0 commit what w says was
 * written (the check before the commit, see mt_ckpt_commit). After a
 * failure every rank agreed on, abandon removes the temporary directory. */
int mt_ckpt_save_begin(const char *root, const mt_ckpt_meta *meta, const mt_registry *reg,
                       mt_mesh *mesh, const mt_ckpt_save_opts *opts, char *tmpdir, size_t len,
                       mt_err *e);
int mt_ckpt_save_end(const char *root, const char *tmpdir, int64_t step, mt_ckpt_mode mode,
                     mt_ckpt_crash crash, int keep, mt_mesh *mesh, const mt_ckpt_written *w,
                     mt_err *e);
void mt_ckpt_save_abandon(const char *tmpdir, mt_mesh *mesh);

/* ------------------------------------------------------------------ */
/* verify.c: the checks, shared by the loader and meshckpt verify      */

/* A problem found: path (a dataset, /index or the directory), what is wrong,
 * and the index row concerned (or NULL). */
typedef void (*mt_ckpt_report_fn)(void *ctx, const char *path, const char *problem,
                                  const int64_t *row);

/* How a tensor is split at run time, from its dataset's attributes (model
 * group): what a conversion keeps. */
typedef struct {
  int tp_sharded, tp_dim, fused_blocks, weight_decay;
  int64_t padded[MT_MAX_DIMS];
  char tied_to[MT_NAME_MAX];
  char axes[MT_AXES_MAX]; /* the axis labels, "" when absent */
  /* experts (format 1.2): ep_split/etp_split as a dimension, -1 when
   * replicated; expert 0 when the tensor is dense */
  int expert, ep_dim, etp_dim;
} mt_ckpt_tensor_attrs;

/* The tensor table (/tensors) and, per group g < groups and tensor i (index
 * g * n + i): extent as 2-D (a vector is one row, an N-d tensor its dims but
 * the last flattened into rows), stored type, and where a
 * contiguous dataset's data starts in the main file (bytes; -1 when it is
 * not plain contiguous: virtual, chunked, compressed). */
typedef struct {
  int n;
  int groups; /* 3, or 1: parameters only */
  char (*names)[MT_NAME_MAX];
  int64_t (*ext)[2];
  int *nd;                      /* dimensions of each (1 to 3), per tensor */
  int64_t (*dims)[MT_MAX_DIMS]; /* the N-d extents of each (in /model) */
  int *dtype;                   /* per g * n + i */
  int64_t *offset;              /* per g * n + i */
  mt_ckpt_tensor_attrs *attrs;  /* per tensor */
} mt_ckpt_tensors;

/* xxh64 of n float32 values (little-endian bytes) */
uint64_t mt_ckpt_box_hash(const float *data, size_t n);
/* how many of x[0..n) are NaN or Inf */
size_t mt_ckpt_count_nonfinite(const float *x, size_t n);
size_t mt_ckpt_count_nonfinite_bf16(const uint16_t *x, size_t n);
/* Root attributes: format, a known version equal to the manifest's, all
 * there, meta_xxh64 matches (required from 1.1), step equals the manifest's,
 * values in range (limit: the checkpoint's bytes); *groups: 3, or 1 for a
 * parameters-only checkpoint (the `groups` attribute, from 1.2). */
int mt_ckpt_check_meta(const char *dir, hid_t file, const mt_ckpt_manifest *man, int64_t limit,
                       mt_ckpt_meta *m, int *groups, mt_err *e);
/* /tensors and every dataset's extent, type, (want_offsets: shared mode)
 * storage and (want_attrs) split attributes (groups < groups), bounded by
 * limit bytes */
int mt_ckpt_read_tensors(const char *dir, hid_t file, int64_t limit, int groups, int want_offsets,
                         int want_attrs, mt_ckpt_tensors *tt, mt_err *e);
void mt_ckpt_tensors_free(mt_ckpt_tensors *tt);
/* /index ([n][MT_CKPT_INDEX_COLS] int64), its size bounded by limit bytes */
int mt_ckpt_read_index(const char *dir, hid_t file, int64_t limit, int64_t **rows, int64_t *n,
                       mt_err *e);
/* Every tensor of every stored group covered by its boxes exactly once
 * (sorted, O(n log n)); returns the number of problems reported. */
long mt_ckpt_check_coverage(const int64_t *rows, int64_t n, const mt_ckpt_tensors *tt,
                            mt_ckpt_report_fn report, void *ctx);
/* The elementary steps every mt_ckpt_check_coverage on this thread has taken
 * so far (sort comparisons, binary-search probes, segment-tree nodes, rows):
 * its cost as a count, so a test checks the growth without a clock. */
int64_t mt_ckpt_coverage_steps(void);
/* Per-writer: every shard file the index names exists and is HDF5. */
long mt_ckpt_check_shard_files(const char *dir, const int64_t *rows, int64_t n,
                               mt_ckpt_report_fn report, void *ctx);

/* ------------------------------------------------------------------ */
/* source.c: a checkpoint opened for reading without a metadata storm  */

/* Rank 0 alone reads the manifest and the main file (root attributes, the
 * tensor table, every dataset's storage, the index), makes the checks of
 * SCHEMA.md ("What a reader checks", 1-5) and broadcasts the result; then
 * every rank reads the boxes it needs directly: from ckpt.h5 at the offsets
 * rank 0 found (MPI-IO), or from the shard files that hold them (serial
 * HDF5, only those), never through the virtual datasets. */
typedef struct {
  char dir[1024];
  int per_writer;
  mt_ckpt_manifest man;
  mt_ckpt_meta meta;
  mt_ckpt_tensors tt;
  int64_t *rows, n_rows;   /* the index */
  int64_t *shard_off;      /* per row: first element in its writer's shard dataset */
  int64_t *order;          /* row numbers sorted by (group, tensor, start0, start1) */
  int64_t *first;          /* [g * n + i], [g * n + i + 1]: its rows in order */
  long problems;           /* reported by the checks on rank 0 (coverage, shards) */
} mt_ckpt_source;

/* Rank 0's half without MPI: the manifest, the main file and every check
 * above into s (the pre-commit check of a save runs it on the temporary
 * directory). report NULL: problems are errors in e. 0, or -1 (e set). */
int mt_ckpt_source_read(const char *dir, mt_ckpt_source *s, mt_ckpt_report_fn report, void *ctx,
                        mt_err *e);
/* the same without the tensors' split attributes (the check before a
 * commit, which compares with what it wrote) */
int mt_ckpt_source_read_light(const char *dir, mt_ckpt_source *s, mt_err *e);
/* Collective over MPI_COMM_WORLD. Errors that leave nothing to check (no
 * manifest, an unreadable main file, root attributes, the tensor table, the
 * index) go to e, agreed on every rank; coverage and shard problems go to
 * report on rank 0 (counted in s->problems, broadcast). 0, or -1 (e set). */
int mt_ckpt_source_open(const char *dir, mt_ckpt_source *s, mt_ckpt_report_fn report, void *ctx,
                        mt_err *e);
void mt_ckpt_source_close(mt_ckpt_source *s);
/* the rows of (g, i): s->order[s->first[g*n+i] .. s->first[g*n+i+1]) */

/* This rank's open files of a source. */
typedef struct {
  mt_ckpt_source *src;
  int rank;
  int collective;      /* shared: collective MPI-IO reads (MT_CKPT_IO=collective) */
  MPI_File fh;         /* shared: ckpt.h5 */
  int fh_open;
  struct {
    int64_t writer;
    hid_t file;
  } *shards;           /* per-writer: the shard files opened so far */
  int n_shards, cap_shards;
  long opens;          /* checkpoint files this rank opened */
  void *staging;       /* for bfloat16 widening */
  size_t staging_cap;
} mt_ckpt_reader;

/* Collective: shared mode opens ckpt.h5 on every rank (each rank checks it
 * can before the collective open); per-writer opens nothing yet. 0, or -1
 * with e set (agreed). */
int mt_ckpt_reader_open(mt_ckpt_reader *r, mt_ckpt_source *s, mt_err *e);
/* closes every file it opened (0, or -1 when a close failed; reads need
 * no more than that) */
int mt_ckpt_reader_close(mt_ckpt_reader *r);
/* close writer's shard file if open (a reader done with it) */
void mt_ckpt_reader_drop_shard(mt_ckpt_reader *r, int64_t writer);
/* Read the part [r0, r0+nr) x [c0, c0+nc) (relative to the box) of stored box
 * (index row) j. as_float: into dst as float32, row k at dst + k * stride
 * (widened from bfloat16); else the stored bytes, rows end to end. Not
 * collective. 0, or -1 with e set ("<what>: <cause>"). */
int mt_ckpt_reader_read(mt_ckpt_reader *r, int64_t j, int64_t r0, int64_t nr, int64_t c0,
                        int64_t nc, void *dst, int64_t stride, int as_float, const char *what,
                        mt_err *e);
/* Rows [r0, r0+nr) x columns [c0, c0+nc) of canonical tensor ti of group g
 * (checkpoint ids) into out (nc floats per row), from every stored box they
 * touch; bytes_read (may be NULL) += the stored bytes read. */
int mt_ckpt_read_region(mt_ckpt_reader *rd, int g, int ti, int64_t r0, int64_t nr, int64_t c0,
                        int64_t nc, float *out, double *bytes_read, mt_err *e);
/* The stored boxes (index rows) listed in js, each read whole (chunk_bytes at
 * a time): checksum, no NaN or Inf. Returns the problems reported; a read
 * that fails for a runtime reason (an I/O error) is no problem of the
 * checkpoint: it stops the checks and goes to *io. */
long mt_ckpt_check_rows(mt_ckpt_reader *r, const int64_t *js, int64_t n, size_t chunk_bytes,
                        mt_ckpt_report_fn report, void *ctx, double *bytes_checked, mt_err *io);
/* MT_CKPT_TRACE_OPENS=FILE: one line "<rank> <path>" per checkpoint file a
 * rank opens to read (the tests count them). */
void mt_ckpt_trace_open(int rank, const char *path);
/* off: no trace lines (the check before a commit, which is no load) */
void mt_ckpt_trace_suspend(int off);
/* the MPI_Info of mt_ckpt_set_io_hints (MPI_INFO_NULL when none); free it */
MPI_Info mt_ckpt_io_info(void);

#endif
