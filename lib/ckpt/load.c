/* Resolve what to load and load it: model and tensor checks, then every
 * rank reads the hyperslabs its layout needs (load-time resharding). */
#include "ckpt/ckpt_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* newest complete step directory under root; 0 if none */
static int newest_complete(const char *root, char *dir, size_t len) {
  DIR *d = opendir(root);
  if (!d) return 0;
  struct dirent *de;
  int64_t best = -1;
  while ((de = readdir(d))) {
    int64_t s;
    if (!mt_ckpt_parse_step_dir(de->d_name, &s) || s <= best) continue;
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", root, de->d_name);
    mt_err ignore = {0};
    mt_ckpt_manifest man;
    if (mt_ckpt_check_manifest(p, &man, &ignore) == 0) {
      best = s;
      snprintf(dir, len, "%s", p);
    }
  }
  closedir(d);
  return best >= 0;
}

int mt_ckpt_resolve(const char *spec, const char *root, char *dir, size_t dir_len, int *found,
                    mt_err *e) {
  mt_err local = {0};
  int have = 0;
  if (mt_log_rank() == 0) {
    if (!strcmp(spec, "auto")) {
      have = newest_complete(root, dir, dir_len);
    } else {
      char mpath[1100];
      snprintf(mpath, sizeof mpath, "%s/%s", spec, MT_CKPT_MANIFEST);
      if (mt_ckpt_file_size(spec) < 0) {
        mt_err_set(&local, "train.resume: %s: no such checkpoint", spec);
      } else if (mt_ckpt_file_size(mpath) >= 0) {
        snprintf(dir, dir_len, "%s", spec);
        mt_ckpt_manifest man;
        have = mt_ckpt_check_manifest(dir, &man, &local) == 0;
      } else if (!(have = newest_complete(spec, dir, dir_len))) {
        mt_err_set(&local, "train.resume: %s holds no complete checkpoint (no %s)", spec,
                   MT_CKPT_MANIFEST);
      }
    }
  }
  MPI_Bcast(&have, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Bcast(dir, (int)dir_len, MPI_CHAR, 0, MPI_COMM_WORLD);
  *found = have;
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    *e = local;
    return -1;
  }
  return 0;
}

/* the run's model against the checkpoint's */
static int check_model(const char *dir, const mt_ckpt_meta *m, const mt_ckpt_meta *expect,
                       mt_err *e) {
  struct {
    const char *name;
    int64_t have, want;
  } shape[] = {{"n_layer", m->n_layer, expect->n_layer}, {"n_embd", m->n_embd, expect->n_embd},
               {"n_head", m->n_head, expect->n_head}, {"seq_len", m->seq_len, expect->seq_len},
               {"vocab", m->vocab, expect->vocab},
               {"moe_experts", m->moe_experts, expect->moe_experts},
               {"moe_every", m->moe_every, expect->moe_every},
               {"moe_ffn", m->moe_ffn, expect->moe_ffn},
               {"moe_shared", m->moe_shared, expect->moe_shared}};
  for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++)
    if (shape[i].have != shape[i].want) {
      mt_err_set(e, "%s is a checkpoint of another model: %s = %lld there, %lld in this run",
                 dir, shape[i].name, (long long)shape[i].have, (long long)shape[i].want);
      return -1;
    }
  return 0;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every tensor of the run's model is in the checkpoint, with its shape
 * (every group: the tensor table holds one extent for all three). */
static int check_tensors(const char *dir, const mt_registry *reg, const mt_ckpt_tensors *tt,
                         mt_err *e) {
  char **sorted = mt_malloc(((size_t)tt->n + 1) * sizeof *sorted);
  for (int i = 0; i < tt->n; i++) sorted[i] = tt->names[i];
  qsort(sorted, (size_t)tt->n, sizeof *sorted, cmp_name);
  for (int i = 0; i < reg->n && !e->failed; i++) {
    const mt_tensor *t = &reg->t[i];
    const char *key = t->name;
    char **hit = bsearch(&key, sorted, (size_t)tt->n, sizeof *sorted, cmp_name);
    if (!hit) {
      mt_err_set(e, "%s: missing tensor /model/%s", dir, t->name);
      break;
    }
    int k = (int)((char(*)[MT_NAME_MAX])*hit - tt->names);
    int same = tt->nd[k] == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = tt->dims[k][d] == t->shape[d];
    if (!same) {
      char have[96] = "", model[96] = "";
      for (int d = 0; d < tt->nd[k]; d++)
        snprintf(have + strlen(have), sizeof have - strlen(have), "%s%lld", d ? "," : "",
                 (long long)tt->dims[k][d]);
      for (int d = 0; d < t->ndim; d++)
        snprintf(model + strlen(model), sizeof model - strlen(model), "%s%lld", d ? "," : "",
                 (long long)t->shape[d]);
      mt_err_set(e, "%s: tensor /model/%s has shape [%s] in the checkpoint but [%s] in the model",
                 dir, t->name, have, model);
    }
  }
  free(sorted);
  return e->failed ? -1 : 0;
}

/* Loader problems become the load's error (the first one wins). */
typedef struct {
  const char *dir;
  mt_err *e;
} load_report;

static void report_problem(void *ctx, const char *path, const char *problem, const int64_t *row) {
  load_report *r = ctx;
  if (!row) {
    mt_err_set(r->e, "%s: %s: %s", r->dir, path, problem);
    return;
  }
  mt_err_set(r->e, "%s: %s in %s box [%lld:%lld, %lld:%lld] written by rank %lld%s", r->dir,
             problem, path, (long long)row[MT_IX_START0],
             (long long)(row[MT_IX_START0] + row[MT_IX_COUNT0]), (long long)row[MT_IX_START1],
             (long long)(row[MT_IX_START1] + row[MT_IX_COUNT1]), (long long)row[MT_IX_WRITER],
             !strcmp(problem, "checksum mismatch") ? " (corrupt data)"
             : strstr(problem, "NaN")              ? " (saved so: its checksum matches)"
                                                   : "");
}

/* The index and the tensor table from rank 0 to every rank (for the checksum
 * check, shared out over the ranks). */
static int share_index(int64_t **rows, int64_t *n, mt_ckpt_tensors *tt, int rank, mt_err *e) {
  int64_t sizes[2] = {*n, tt->n};
  MPI_Bcast(sizes, 2, MPI_INT64_T, 0, MPI_COMM_WORLD);
  if (sizes[0] * MT_CKPT_INDEX_COLS > INT32_MAX || sizes[1] * MT_NAME_MAX > INT32_MAX) {
    mt_err_set(e, "checkpoint: the index is too large to share out (%lld boxes)",
               (long long)sizes[0]);
    return -1;
  }
  if (rank != 0) {
    *n = sizes[0];
    tt->n = (int)sizes[1];
    *rows = mt_malloc((size_t)*n * MT_CKPT_INDEX_COLS * sizeof(int64_t) + 8);
    tt->names = mt_calloc((size_t)tt->n + 1, MT_NAME_MAX);
    tt->ext = mt_calloc((size_t)tt->n * MT_CKPT_NGROUPS + 1, 2 * sizeof(int64_t));
  }
  MPI_Bcast(*rows, (int)(*n * MT_CKPT_INDEX_COLS), MPI_INT64_T, 0, MPI_COMM_WORLD);
  MPI_Bcast(tt->names, tt->n * MT_NAME_MAX, MPI_CHAR, 0, MPI_COMM_WORLD);
  MPI_Bcast(tt->ext, tt->n * MT_CKPT_NGROUPS * 2, MPI_INT64_T, 0, MPI_COMM_WORLD);
  return 0;
}

/* Read this rank's selections of every tensor (collective in shared mode
 * with MT_CKPT_IO=collective: every rank takes part in every read, failed
 * or not). scan: refuse values that are not finite (the checksum pass, when
 * it ran, checked every stored value already). */
static void read_tensors(hid_t file, const char *dir, const char *file_path, int per_writer,
                         const mt_registry *reg, mt_mesh *mesh, const mt_ckpt_state *st,
                         int scan, mt_err *e) {
  hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  if (!per_writer) H5Pset_dxpl_mpio(dxpl, mt_ckpt_tensor_io_mode());
  mt_ckpt_walk w;
  mt_ckpt_walk_begin(&w, reg, mesh, st, 0);
  float *staging = NULL;
  size_t cap = 0;
  int more;
  while ((more = mt_ckpt_walk_next(&w)) != 0) {
    if (more < 0) mt_die("out of memory (checkpoint selection)");
    float *direct = mt_ckpt_sel_contiguous(&w.sel, w.v.local_ext[1]);
    if (!direct && w.sel.volume > cap) {
      free(staging);
      cap = w.sel.volume;
      staging = mt_malloc(cap * sizeof(float));
    }
    char path[256];
    mt_ckpt_dataset_path(path, sizeof path, w.g, w.t->name);
    hid_t ms = mt_ckpt_mem_space(w.sel.volume);
    hid_t d = H5Dopen2(file, path, H5P_DEFAULT);
    hid_t fs = d >= 0 ? H5Dget_space(d) : -1;
    float dummy;
    float *into = direct ? direct : staging ? staging : &dummy;
    int ok = d >= 0 && fs >= 0 && mt_ckpt_select_boxes(fs, &w.sel.boxes) == 0 &&
             H5Dread(d, H5T_NATIVE_FLOAT, ms, fs, dxpl, into) >= 0;
    int err = ok ? mt_ckpt_fault("read") : 0;
    if (!ok)
      mt_ckpt_err_h5(e, "%s: rank %d cannot read %s from %s", dir, mesh->world_rank, path,
                     file_path);
    else if (err)
      mt_ckpt_err_sys(e, err, "%s: rank %d cannot read %s from %s", dir, mesh->world_rank, path,
                      file_path);
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (d >= 0) H5Dclose(d);
    if (!ok || err) continue;
    size_t nonfinite = scan ? mt_ckpt_count_nonfinite(into, w.sel.volume) : 0;
    if (nonfinite)
      mt_err_set(e, "%s: %zu NaN or Inf values in %s (refused: a run does not resume from them)",
                 dir, nonfinite, path);
    if (!direct) mt_ckpt_sel_copy(&w.sel, staging, w.v.local_ext[1], 1);
  }
  mt_ckpt_walk_end(&w);
  free(staging);
  H5Pclose(dxpl);
}

int mt_ckpt_load(const char *dir, const mt_registry *reg, mt_mesh *mesh, const mt_ckpt_state *st,
                 const mt_ckpt_meta *expect, int verify, mt_ckpt_meta *meta_out, mt_err *e) {
  int rank = mesh->world_rank;
  mt_ckpt_writer_wait(); /* HDF5 is used by one thread at a time */
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  mt_err local = {0};
  mt_ckpt_fault_init(rank, -1, &local);
  /* 1. rank 0 reads the manifest: every listed file there, with its size */
  mt_ckpt_manifest man;
  memset(&man, 0, sizeof man);
  if (rank == 0 && !local.failed) mt_ckpt_check_manifest(dir, &man, &local);
  MPI_Bcast(&man, (int)sizeof man, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    *e = local;
    return -1;
  }
  int per_writer = strcmp(man.mode, "per-writer") == 0;
  char file_path[1100];
  snprintf(file_path, sizeof file_path, "%s/%s", dir,
           per_writer ? MT_CKPT_INDEX_FILE : MT_CKPT_SHARED_FILE);
  /* 2. every rank can read the file: a parallel open that fails on one rank
   * leaves the others waiting inside HDF5, so find out first */
  int err = mt_ckpt_fault("open"), fd = -1;
  if (!err && (fd = open(file_path, O_RDONLY)) < 0) err = errno;
  if (fd >= 0) close(fd);
  if (err) mt_ckpt_err_sys(&local, err, "%s: rank %d cannot open %s", dir, rank, file_path);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    *e = local;
    return -1;
  }
  /* shared: one parallel open, independent (or collective) reads. per-writer:
   * every rank opens the index on its own and reads through its virtual
   * datasets (parallel HDF5 cannot read virtual datasets). */
  hid_t fapl = per_writer ? mt_ckpt_fapl_serial() : mt_ckpt_fapl_mpio(MPI_COMM_WORLD);
  hid_t file = H5Fopen(file_path, H5F_ACC_RDONLY, fapl);
  if (file < 0) mt_ckpt_err_h5(&local, "%s: rank %d cannot open %s as HDF5", dir, rank, file_path);
  H5Pclose(fapl);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    if (file >= 0) H5Fclose(file);
    *e = local;
    return -1;
  }
  /* 3. rank 0 checks the root attributes, the model, the tensors, the index
   * and its coverage, and (per-writer) the shard files */
  mt_ckpt_meta m;
  memset(&m, 0, sizeof m);
  mt_ckpt_tensors tt = {0};
  int64_t *rows = NULL, n_rows = 0;
  load_report rep = {dir, &local};
  if (rank == 0 && mt_ckpt_check_meta(dir, file, &man, man.total_bytes, &m, &local) == 0 &&
      check_model(dir, &m, expect, &local) == 0 &&
      mt_ckpt_read_tensors(dir, file, man.total_bytes, &tt, &local) == 0 &&
      check_tensors(dir, reg, &tt, &local) == 0) {
    if (mt_ckpt_read_index(dir, file, man.total_bytes, &rows, &n_rows, &local) == 0) {
      mt_ckpt_check_coverage(rows, n_rows, &tt, report_problem, &rep);
      if (!local.failed && per_writer)
        mt_ckpt_check_shard_files(dir, rows, n_rows, report_problem, &rep);
    }
  }
  MPI_Bcast(&m, (int)sizeof m, MPI_BYTE, 0, MPI_COMM_WORLD);
  /* 4. the data of every box against its checksum, shared out over the ranks */
  if (!mt_err_agree(&local, MPI_COMM_WORLD) && verify &&
      share_index(&rows, &n_rows, &tt, rank, &local) == 0)
    mt_ckpt_check_data(file, rows, n_rows, &tt, rank, mesh->world_size, (size_t)64 << 20,
                       report_problem, &rep, NULL);
  free(rows);
  mt_ckpt_tensors_free(&tt);
  /* 5. every rank reads what its layout needs */
  if (!mt_err_agree(&local, MPI_COMM_WORLD))
    read_tensors(file, dir, file_path, per_writer, reg, mesh, st, !verify, &local);
  H5Fclose(file);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    *e = local;
    return -1;
  }
  if (meta_out) *meta_out = m;
  return 0;
}
