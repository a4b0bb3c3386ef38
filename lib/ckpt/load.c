/* Resolve what to load and load it: model and tensor checks, then every
 * rank reads the hyperslabs its layout needs (load-time resharding). */
#include "ckpt/ckpt_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
        mt_err_set(&local, "%s: no such checkpoint", spec);
      } else if (mt_ckpt_file_size(mpath) >= 0) {
        snprintf(dir, dir_len, "%s", spec);
        mt_ckpt_manifest man;
        have = mt_ckpt_check_manifest(dir, &man, &local) == 0;
      } else if (!(have = newest_complete(spec, dir, dir_len))) {
        mt_err_set(&local, "%s holds no complete checkpoint (no %s)", spec, MT_CKPT_MANIFEST);
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
                         int *ck_of_reg, mt_err *e) {
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
    ck_of_reg[i] = k;
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

/* One piece of a load: the part of stored box j (an index row) that falls in
 * box b of this rank's selection. */
typedef struct {
  int64_t r0, c0, nr, nc; /* canonical coordinates */
} piece;

static int intersect(const int64_t *row, const mt_ckpt_box *b, piece *p) {
  int64_t r0 = row[MT_IX_START0] > b->start[0] ? row[MT_IX_START0] : b->start[0];
  int64_t c0 = row[MT_IX_START1] > b->start[1] ? row[MT_IX_START1] : b->start[1];
  int64_t r1 = row[MT_IX_START0] + row[MT_IX_COUNT0], c1 = row[MT_IX_START1] + row[MT_IX_COUNT1];
  if (b->start[0] + b->count[0] < r1) r1 = b->start[0] + b->count[0];
  if (b->start[1] + b->count[1] < c1) c1 = b->start[1] + b->count[1];
  if (r1 <= r0 || c1 <= c0) return 0;
  *p = (piece){r0, c0, r1 - r0, c1 - c0};
  return 1;
}

/* Who checks each stored box's checksum: one rank among those that read it,
 * so a rank opens no file it would not open anyway, and a box that many
 * ranks read (replicated state) goes to each of them in turn. With p = (rank
 * - j) mod size, key[j] = p if this rank reads box j whole, size + p if it
 * reads a part, INT_MAX if nothing; the minimum over the ranks names the
 * checker, rank (key mod size + j) mod size (a part-reader reads the rest
 * too). */
static void checker_keys(const mt_ckpt_source *src, const mt_registry *reg, mt_mesh *mesh,
                         const mt_ckpt_state *st, int groups, const int *ck, int *key) {
  int rank = mesh->world_rank, size = mesh->world_size;
  int64_t *got = mt_calloc((size_t)src->n_rows + 1, sizeof(int64_t)); /* elements this rank reads */
  mt_ckpt_walk w;
  mt_ckpt_walk_begin(&w, reg, mesh, st, 0);
  int more;
  while ((more = mt_ckpt_walk_next(&w)) == 1) {
    if (w.g >= groups) continue;
    int64_t slot = (int64_t)w.g * src->tt.n + ck[w.i];
    for (int b = 0; b < w.sel.boxes.n; b++)
      for (int64_t q = src->first[slot]; q < src->first[slot + 1]; q++) {
        piece p;
        int64_t j = src->order[q];
        if (intersect(src->rows + j * MT_CKPT_INDEX_COLS, &w.sel.boxes.b[b], &p)) got[j] += p.nr * p.nc;
      }
  }
  mt_ckpt_walk_end(&w);
  if (more < 0) mt_die("out of memory (checkpoint selection)");
  for (int64_t j = 0; j < src->n_rows; j++) {
    const int64_t *row = src->rows + j * MT_CKPT_INDEX_COLS;
    int p = (int)(((int64_t)rank - j % size + size) % size);
    key[j] = got[j] == 0 ? INT_MAX : got[j] == row[MT_IX_COUNT0] * row[MT_IX_COUNT1] ? p : size + p;
  }
  free(got);
}

/* Read this rank's selections of every tensor of the first `groups` groups,
 * straight from the stored boxes. scan: refuse values that are not finite
 * (the checksum pass, when it ran, checked every stored value already). */
/* One read of the load: part p of stored box j into dst (rows L1 apart). */
typedef struct {
  int64_t j, slot, key; /* key: where it lies (writer and shard offset, or file offset) */
  piece p;
  float *dst;
  int64_t L1;
} job;

static int cmp_job(const void *a, const void *b) {
  const job *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return (x->p.r0 > y->p.r0) - (x->p.r0 < y->p.r0);
}

/* Read this rank's selections of every tensor of the first `groups` groups,
 * straight from the stored boxes, in the order they lie on disk (shard by
 * shard, each shard front to back: every shard file opened once, read
 * sequentially). scan: refuse values that are not finite (the checksum
 * pass, when it ran, checked every stored value already). */
static void read_selection(mt_ckpt_reader *rd, const mt_registry *reg, mt_mesh *mesh,
                           const mt_ckpt_state *st, int groups, const int *ck, int scan,
                           mt_err *e) {
  mt_ckpt_source *src = rd->src;
  job *jobs = NULL;
  size_t n = 0, cap = 0;
  mt_ckpt_walk w;
  mt_ckpt_walk_begin(&w, reg, mesh, st, 0);
  int more;
  while ((more = mt_ckpt_walk_next(&w)) == 1) {
    if (w.g >= groups || w.sel.volume == 0) continue;
    int64_t L1 = w.v.local_ext[1], slot = (int64_t)w.g * src->tt.n + ck[w.i];
    for (int b = 0; b < w.sel.boxes.n; b++) {
      const mt_ckpt_box *bx = &w.sel.boxes.b[b];
      for (int64_t q = src->first[slot]; q < src->first[slot + 1]; q++) {
        int64_t j = src->order[q];
        const int64_t *row = src->rows + j * MT_CKPT_INDEX_COLS;
        piece p;
        if (!intersect(row, bx, &p)) continue;
        if (n == cap) {
          cap = cap ? 2 * cap : 256;
          jobs = realloc(jobs, cap * sizeof *jobs);
          if (!jobs) mt_die("out of memory (checkpoint read list)");
        }
        int64_t key = src->per_writer
                          ? (row[MT_IX_WRITER] << 40) + src->shard_off[j] /* writers < 2^23 */
                          : src->tt.offset[slot] + (int64_t)mt_ckpt_dtype_size(src->tt.dtype[slot]) *
                                                       (p.r0 * src->tt.ext[slot][1] + p.c0);
        jobs[n++] = (job){j, slot, key, p,
                          w.sel.piece_mem[b] + (p.r0 - bx->start[0]) * L1 + (p.c0 - bx->start[1]),
                          L1};
      }
    }
  }
  mt_ckpt_walk_end(&w);
  if (more < 0) mt_die("out of memory (checkpoint selection)");
  qsort(jobs, n, sizeof *jobs, cmp_job);
  int64_t bad_slot = -1;
  size_t nonfinite = 0;
  for (size_t k = 0; k < n && !e->failed; k++) {
    const job *jb = &jobs[k];
    const int64_t *row = src->rows + jb->j * MT_CKPT_INDEX_COLS;
    int g = (int)(jb->slot / src->tt.n);
    char path[256], what[2600];
    mt_ckpt_dataset_path(path, sizeof path, g, src->tt.names[jb->slot % src->tt.n]);
    if (src->per_writer)
      snprintf(what, sizeof what, "%s: rank %d cannot read %s from %s/shard-%05lld.h5", src->dir,
               mesh->world_rank, path, src->dir, (long long)row[MT_IX_WRITER]);
    else
      snprintf(what, sizeof what, "%s: rank %d cannot read %s from %s/%s", src->dir,
               mesh->world_rank, path, src->dir, MT_CKPT_SHARED_FILE);
    if (mt_ckpt_reader_read(rd, jb->j, jb->p.r0 - row[MT_IX_START0], jb->p.nr,
                            jb->p.c0 - row[MT_IX_START1], jb->p.nc, jb->dst, jb->L1, 1, what, e) != 0)
      break;
    size_t bad = 0;
    for (int64_t r = 0; scan && r < jb->p.nr; r++)
      bad += mt_ckpt_count_nonfinite(jb->dst + r * jb->L1, (size_t)jb->p.nc);
    if (bad && bad_slot < 0) bad_slot = jb->slot;
    if (bad_slot == jb->slot) nonfinite += bad;
    /* a shard this rank has read all it needs of: closed (a rank may need
     * many: the open files stay few) */
    if (src->per_writer && (k + 1 == n || (jobs[k + 1].key >> 40) != (jb->key >> 40)))
      mt_ckpt_reader_drop_shard(rd, row[MT_IX_WRITER]);
  }
  if (nonfinite && !e->failed) {
    char path[256];
    mt_ckpt_dataset_path(path, sizeof path, (int)(bad_slot / src->tt.n),
                         src->tt.names[bad_slot % src->tt.n]);
    mt_err_set(e, "%s: %zu NaN or Inf values in %s (refused: a run does not resume from them)",
               src->dir, nonfinite, path);
  }
  free(jobs);
}

/* A run of bytes of ckpt.h5 and where it goes in memory. */
typedef struct {
  MPI_Aint file, mem;
  int bytes;
} run;

static int cmp_run(const void *a, const void *b) {
  MPI_Aint x = ((const run *)a)->file, y = ((const run *)b)->file;
  return (x > y) - (x < y);
}

/* Shared mode with MT_CKPT_IO=collective: one collective MPI-IO read per
 * (group, tensor), every rank taking part (with nothing to read, or after an
 * error, with an empty view), so MPI-IO can aggregate (the cb_* hints,
 * ckpt.io_hints). Float32 datasets only (the caller reads a checkpoint with
 * bfloat16 independently). */
static void read_selection_collective(mt_ckpt_reader *rd, const mt_registry *reg, mt_mesh *mesh,
                                      const mt_ckpt_state *st, int groups, const int *ck,
                                      int scan, mt_err *e) {
  mt_ckpt_source *src = rd->src;
  mt_ckpt_walk w;
  mt_ckpt_walk_begin(&w, reg, mesh, st, 0);
  run *runs = NULL;
  size_t cap = 0;
  int more;
  while ((more = mt_ckpt_walk_next(&w)) == 1) {
    if (w.g >= groups) continue;
    int64_t L1 = w.v.local_ext[1], slot = (int64_t)w.g * src->tt.n + ck[w.i];
    int64_t C = src->tt.ext[slot][1];
    size_t n = 0;
    for (int b = 0; b < w.sel.boxes.n && !e->failed; b++) {
      const mt_ckpt_box *bx = &w.sel.boxes.b[b];
      for (int64_t q = src->first[slot]; q < src->first[slot + 1]; q++) {
        const int64_t *row = src->rows + src->order[q] * MT_CKPT_INDEX_COLS;
        piece p;
        if (!intersect(row, bx, &p)) continue;
        float *dst = w.sel.piece_mem[b] + (p.r0 - bx->start[0]) * L1 + (p.c0 - bx->start[1]);
        for (int64_t k = 0; k < p.nr; k++) {
          if (n == cap) {
            cap = cap ? 2 * cap : 1024;
            runs = realloc(runs, cap * sizeof *runs);
            if (!runs) mt_die("out of memory (checkpoint read list)");
          }
          MPI_Aint addr;
          MPI_Get_address(dst + k * L1, &addr);
          runs[n++] = (run){(MPI_Aint)(src->tt.offset[slot] + 4 * ((p.r0 + k) * C + p.c0)), addr,
                            (int)(4 * p.nc)};
        }
      }
    }
    int err = n ? mt_ckpt_fault("read") : 0;
    if (err) {
      char path[256];
      mt_ckpt_dataset_path(path, sizeof path, w.g, w.t->name);
      mt_ckpt_err_sys(e, err, "%s: rank %d cannot read %s from %s/%s", src->dir, mesh->world_rank,
                      path, src->dir, MT_CKPT_SHARED_FILE);
    }
    if (e->failed) n = 0; /* still take part */
    qsort(runs, n, sizeof *runs, cmp_run);
    MPI_Datatype ftype = MPI_BYTE, mtype = MPI_BYTE;
    int *lens = mt_calloc(n + 1, sizeof(int));
    MPI_Aint *foff = mt_calloc(n + 1, sizeof(MPI_Aint)), *moff = mt_calloc(n + 1, sizeof(MPI_Aint));
    for (size_t k = 0; k < n; k++) {
      lens[k] = runs[k].bytes;
      foff[k] = runs[k].file;
      moff[k] = runs[k].mem;
    }
    if (n) {
      MPI_Type_create_hindexed((int)n, lens, foff, MPI_BYTE, &ftype);
      MPI_Type_create_hindexed((int)n, lens, moff, MPI_BYTE, &mtype);
      MPI_Type_commit(&ftype);
      MPI_Type_commit(&mtype);
    }
    int rc = MPI_File_set_view(rd->fh, 0, MPI_BYTE, ftype, "native", MPI_INFO_NULL);
    MPI_Status status;
    if (rc == MPI_SUCCESS)
      rc = MPI_File_read_all(rd->fh, n ? MPI_BOTTOM : NULL, n ? 1 : 0, mtype, &status);
    if (rc != MPI_SUCCESS && !e->failed) {
      char msg[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, msg, &len);
      mt_err_set(e, "%s: rank %d cannot read %s (collective MPI-IO): %s", src->dir,
                 mesh->world_rank, w.t->name, msg);
    }
    if (n) {
      MPI_Type_free(&ftype);
      MPI_Type_free(&mtype);
    }
    free(lens);
    free(foff);
    free(moff);
    size_t nonfinite = 0;
    for (size_t k = 0; scan && !e->failed && k < n; k++)
      nonfinite += mt_ckpt_count_nonfinite((const float *)runs[k].mem, (size_t)runs[k].bytes / 4);
    if (nonfinite) {
      char path[256];
      mt_ckpt_dataset_path(path, sizeof path, w.g, w.t->name);
      mt_err_set(e, "%s: %zu NaN or Inf values in %s (refused: a run does not resume from them)",
                 src->dir, nonfinite, path);
    }
  }
  mt_ckpt_walk_end(&w);
  free(runs);
  if (more < 0) mt_die("out of memory (checkpoint selection)");
  MPI_File_set_view(rd->fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL);
}

static int load(const char *dir, const mt_registry *reg, mt_mesh *mesh, const mt_ckpt_state *st,
                const mt_ckpt_meta *expect, int verify, int groups, mt_ckpt_meta *meta_out,
                mt_err *e) {
  int rank = mesh->world_rank, size = mesh->world_size;
  mt_ckpt_writer_wait(); /* HDF5 is used by one thread at a time */
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  mt_err local = {0};
  mt_ckpt_fault_init(rank, -1, &local);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    *e = local;
    return -1;
  }
  /* 1. rank 0 reads the manifest and the main file and checks them (root
   * attributes, tensors, index and coverage, shard files named); every rank
   * gets the result */
  mt_ckpt_source src;
  load_report rep = {dir, &local};
  if (mt_ckpt_source_open(dir, &src, report_problem, &rep, &local) != 0) {
    *e = local;
    return -1;
  }
  /* 2. the model (the same check on every rank, from the same data) */
  int *ck = mt_calloc((size_t)reg->n + 1, sizeof(int)); /* registry tensor -> checkpoint's */
  if (!local.failed && groups == MT_CKPT_NGROUPS && src.tt.groups < MT_CKPT_NGROUPS)
    mt_err_set(&local, "%s holds parameters only (no optimizer state): start a run from it with "
                       "train.init_from, not train.resume", dir);
  if (!local.failed && check_model(dir, &src.meta, expect, &local) == 0)
    check_tensors(dir, reg, &src.tt, ck, &local);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    mt_ckpt_source_close(&src);
    free(ck);
    *e = local;
    return -1;
  }
  mt_ckpt_reader rd;
  if (mt_ckpt_reader_open(&rd, &src, &local) != 0) {
    mt_ckpt_source_close(&src);
    free(ck);
    *e = local;
    return -1;
  }
  /* 3. the checksum of every stored box this run reads, each checked by one
   * of the ranks that read it, before any value is used */
  if (verify) {
    int *key = mt_malloc(((size_t)src.n_rows + 1) * sizeof(int));
    checker_keys(&src, reg, mesh, st, groups, ck, key);
    for (int64_t j0 = 0; j0 < src.n_rows; j0 += 1 << 26) { /* MPI counts are int */
      int n = src.n_rows - j0 > (1 << 26) ? 1 << 26 : (int)(src.n_rows - j0);
      MPI_Allreduce(MPI_IN_PLACE, key + j0, n, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    }
    int64_t *mine = mt_malloc(((size_t)src.n_rows + 1) * sizeof(int64_t)), n_mine = 0;
    for (int64_t j = 0; j < src.n_rows; j++)
      if (key[j] != INT_MAX && (int)((key[j] % size + j % size) % size) == rank) mine[n_mine++] = j;
    mt_ckpt_check_rows(&rd, mine, n_mine, (size_t)64 << 20, report_problem, &rep, NULL);
    free(mine);
    free(key);
  }
  /* 4. every rank reads what its layout needs */
  if (!mt_err_agree(&local, MPI_COMM_WORLD)) {
    int bf16 = 0; /* the collective path reads float32 datasets only */
    for (int64_t k = 0; k < (int64_t)src.tt.n * groups; k++) bf16 |= src.tt.dtype[k] != MT_CKPT_F32;
    if (rd.collective && !src.per_writer && !bf16)
      read_selection_collective(&rd, reg, mesh, st, groups, ck, !verify, &local);
    else
      read_selection(&rd, reg, mesh, st, groups, ck, !verify, &local);
  }
  mt_ckpt_reader_close(&rd);
  free(ck);
  mt_ckpt_meta m = src.meta;
  mt_ckpt_source_close(&src);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    *e = local;
    return -1;
  }
  if (meta_out) *meta_out = m;
  return 0;
}

int mt_ckpt_load(const char *dir, const mt_registry *reg, mt_mesh *mesh, const mt_ckpt_state *st,
                 const mt_ckpt_meta *expect, int verify, mt_ckpt_meta *meta_out, mt_err *e) {
  return load(dir, reg, mesh, st, expect, verify, MT_CKPT_NGROUPS, meta_out, e);
}

int mt_ckpt_load_params(const char *dir, const mt_registry *reg, mt_mesh *mesh,
                        const mt_ckpt_state *st, const mt_ckpt_meta *expect, int verify,
                        mt_ckpt_meta *meta_out, mt_err *e) {
  return load(dir, reg, mesh, st, expect, verify, 1, meta_out, e);
}

int mt_ckpt_load_moe_bias(const char *dir, float *bias, int64_t rows, int64_t E, int *found,
                          mt_err *e) {
  mt_err local = {0};
  int64_t head[3] = {0, 0, 0}; /* found, rows, E */
  float *stored = NULL;
  if (mt_log_rank() == 0) {
    mt_ckpt_manifest man;
    if (mt_ckpt_check_manifest(dir, &man, &local) == 0) {
      char path[1100];
      snprintf(path, sizeof path, "%s/%s", dir,
               strcmp(man.mode, "per-writer") == 0 ? MT_CKPT_INDEX_FILE : MT_CKPT_SHARED_FILE);
      hid_t fapl = mt_ckpt_fapl_serial();
      hid_t file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
      H5Pclose(fapl);
      if (file < 0) {
        mt_ckpt_err_h5(&local, "%s: rank 0 cannot open %s as HDF5", dir, path);
      } else {
        char where[1200];
        snprintf(where, sizeof where, "%s: reading %s", dir, MT_CKPT_MOE_BIAS);
        int got = mt_ckpt_read_moe_bias(file, &stored, &head[1], &head[2], where, &local);
        head[0] = got > 0;
        if (got > 0 && (head[1] != rows || head[2] != E))
          mt_err_set(&local, "%s: %s is %lld x %lld (MoE blocks x experts), this model's %lld x "
                     "%lld", dir, MT_CKPT_MOE_BIAS, (long long)head[1], (long long)head[2],
                     (long long)rows, (long long)E);
        H5Fclose(file);
      }
    }
  }
  MPI_Bcast(head, 3, MPI_INT64_T, 0, MPI_COMM_WORLD);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    free(stored);
    *e = local;
    return -1;
  }
  *found = (int)head[0];
  if (*found) {
    if (stored) memcpy(bias, stored, (size_t)(rows * E) * sizeof(float));
    MPI_Bcast(bias, (int)(rows * E), MPI_FLOAT, 0, MPI_COMM_WORLD);
  }
  free(stored);
  return 0;
}
