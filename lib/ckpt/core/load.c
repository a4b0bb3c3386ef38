/* Resolve what to load and load it: model and tensor checks, then every
 * rank reads the hyperslabs its layout needs (load-time resharding). */
#include "ckpt/core/ckpt_core.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* spec is a pointer file (`latest`: "step_<N>" and a newline): the step
 * directory it names, beside it. 1 when it was one (dir set, or e set when
 * its text is no step name), 0 when spec is no regular file. */
static int follow_pointer(const char *spec, char *dir, size_t len, mt_err *e) {
  struct stat sb;
  if (stat(spec, &sb) != 0 || !S_ISREG(sb.st_mode)) return 0;
  char text[128] = "";
  FILE *f = sb.st_size < (off_t)sizeof text ? fopen(spec, "r") : NULL;
  size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
  if (f) fclose(f);
  text[n] = '\0';
  text[strcspn(text, "\r\n")] = '\0';
  int64_t step;
  if (!mt_ckpt_parse_step_dir(text, &step)) {
    mt_err_set(e, "%s is a file, but not a pointer to a checkpoint (it should hold step_<N>, "
                  "as checkpoints/latest does)", spec);
    return 1;
  }
  char base[1024];
  snprintf(base, sizeof base, "%s", spec);
  char *slash = strrchr(base, '/');
  if (slash) snprintf(dir, len, "%.*s/%s", (int)(slash - base), base, text);
  else snprintf(dir, len, "%s", text);
  return 1;
}

int mt_ckpt_resolve(const char *spec, const char *root, char *dir, size_t dir_len, int *found,
                    mt_err *e) {
  mt_err local = {0};
  int64_t have = 0;
  if (mt_ckpt_rank() == 0) {
    char mpath[1100];
    if (!strcmp(spec, "auto")) {
      have = newest_complete(root, dir, dir_len);
    } else if (follow_pointer(spec, dir, dir_len, &local)) {
      mt_ckpt_manifest man;
      snprintf(mpath, sizeof mpath, "%s/%s", dir, MT_CKPT_MANIFEST);
      if (!local.failed && mt_ckpt_file_size(mpath) < 0)
        mt_err_set(&local, "%s points to %s, which is no complete checkpoint (no %s)", spec, dir,
                   MT_CKPT_MANIFEST);
      else if (!local.failed)
        have = mt_ckpt_check_manifest(dir, &man, &local) == 0;
    } else {
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
  if (mt_ckpt_bcast(&have, sizeof have, &local) == 0) mt_ckpt_bcast(dir, (int64_t)dir_len, &local);
  *found = (int)have;
  if (mt_ckpt_agree(&local)) {
    *e = local;
    return mt_err_pass(e);
  }
  return 0;
}

int mt_ckpt_find(const char *spec, char *dir, size_t len, mt_err *e) {
  mt_err local = {0};
  if (mt_ckpt_rank() == 0) {
    char mpath[1100];
    snprintf(mpath, sizeof mpath, "%s/%s", spec, MT_CKPT_MANIFEST);
    if (follow_pointer(spec, dir, len, &local)) {
      /* the step directory it names: checked by whoever opens it */
    } else if (mt_ckpt_file_size(mpath) >= 0) {
      snprintf(dir, len, "%s", spec);
    } else if (mt_ckpt_file_size(spec) < 0) {
      mt_err_set(&local, "%s: no such checkpoint", spec);
    } else if (!newest_complete(spec, dir, len)) {
      mt_err_set(&local, "%s: no complete checkpoint", spec);
    }
  }
  if (mt_ckpt_bcast(dir, (int64_t)len, &local) != 0 || mt_ckpt_agree(&local)) {
    *e = local;
    return mt_err_pass(e);
  }
  return 0;
}

/* the run's model against the checkpoint's; shorter: a run may have fewer
 * positions (model.seq_len) than the checkpoint */
static int check_model(const char *dir, const mt_ckpt_meta *m, const mt_ckpt_meta *expect,
                       int shorter, mt_err *e) {
  struct {
    const char *name;
    int64_t have, want;
  } shape[] = {{"n_layer", m->n_layer, expect->n_layer}, {"n_embd", m->n_embd, expect->n_embd},
               {"n_head", m->n_head, expect->n_head}, {"seq_len", m->seq_len, expect->seq_len},
               {"vocab", m->vocab, expect->vocab},
               {"moe_experts", m->moe_experts, expect->moe_experts},
               {"moe_every", m->moe_every, expect->moe_every},
               {"moe_ffn", m->moe_ffn, expect->moe_ffn},
               {"moe_shared", m->moe_shared, expect->moe_shared},
               {"moe_router", m->moe_router, expect->moe_router},
               {"residual", m->residual, expect->residual},
               {"arch", m->arch, expect->arch}, {"n_kv_head", m->n_kv_head, expect->n_kv_head},
               {"ffn", m->ffn, expect->ffn}, {"tied", m->tied, expect->tied},
               {"bias", m->bias, expect->bias}};
  for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++) {
    if (shape[i].have == shape[i].want) continue;
    if (shorter && !strcmp(shape[i].name, "seq_len") && shape[i].want < shape[i].have) continue;
    mt_err_set(e, "%s is a checkpoint of another model: %s = %lld there, %lld in this run", dir,
               shape[i].name, (long long)shape[i].have, (long long)shape[i].want);
    return -1;
  }
  return 0;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every tensor of the run's model is in the checkpoint, with its shape
 * (every group: the tensor table holds one extent for all three); shorter:
 * a position table (the registry's axes say which) may have more rows in
 * the checkpoint, of which the run reads the first. */
static int check_tensors(const char *dir, const mt_registry *reg, const mt_ckpt_tensors *tt,
                         int shorter, int *ck_of_reg, mt_err *e) {
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
    for (int d = 0; same && d < t->ndim; d++)
      same = tt->dims[k][d] == t->shape[d] ||
             (shorter && d == 0 && mt_tensor_is_positional(t) && tt->dims[k][d] > t->shape[d]);
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
  *p = (piece){.r0 = r0, .c0 = c0, .nr = r1 - r0, .nc = c1 - c0};
  return 1;
}

/* Who checks each stored box's checksum: one rank among those that read it,
 * so a rank opens no file it would not open anyway, and a box that many
 * ranks read (replicated state) goes to each of them in turn. With p = (rank
 * - j) mod size, key[j] = p if this rank reads box j whole, size + p if it
 * reads a part, INT_MAX if nothing; the minimum over the ranks names the
 * checker, rank (key mod size + j) mod size (a part-reader reads the rest
 * too). */
static int checker_keys(const mt_ckpt_source *src, const mt_registry *reg, mt_mesh *mesh,
                        const mt_ckpt_state *st, int groups, const int *ck, int *key, mt_err *e) {
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
  if (more < 0) {
    free(got);
    mt_err_runtime(e, "%s: rank %d: out of memory listing its boxes", src->dir, rank);
    return -1;
  }
  for (int64_t j = 0; j < src->n_rows; j++) {
    const int64_t *row = src->rows + j * MT_CKPT_INDEX_COLS;
    int p = (int)(((int64_t)rank - j % size + size) % size);
    key[j] = got[j] == 0 ? INT_MAX : got[j] == row[MT_IX_COUNT0] * row[MT_IX_COUNT1] ? p : size + p;
  }
  free(got);
  return 0;
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
          job *grown = realloc(jobs, cap * sizeof *jobs);
          if (!grown) {
            more = -1;
            break;
          }
          jobs = grown;
        }
        int64_t key = src->per_writer
                          ? (row[MT_IX_WRITER] << 40) + src->shard_off[j] /* writers < 2^23 */
                          : src->tt.offset[slot] + (int64_t)mt_dtype_bytes(src->tt.dtype[slot]) *
                                                       (p.r0 * src->tt.ext[slot][1] + p.c0);
        jobs[n++] = (job){.j = j, .slot = slot, .key = key, .p = p,
                          .dst = w.sel.piece_mem[b] + (p.r0 - bx->start[0]) * L1 +
                                 (p.c0 - bx->start[1]),
                          .L1 = L1};
      }
    }
  }
  mt_ckpt_walk_end(&w);
  if (more < 0) {
    free(jobs);
    mt_err_runtime(e, "%s: rank %d: out of memory listing what it reads", src->dir,
                   mesh->world_rank);
    return;
  }
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
            size_t grown_cap = cap ? 2 * cap : 1024;
            run *grown = realloc(runs, grown_cap * sizeof *runs);
            if (!grown) {
              if (!e->failed)
                mt_err_runtime(e, "%s: rank %d: out of memory listing what it reads", src->dir,
                               mesh->world_rank);
              break;
            }
            runs = grown;
            cap = grown_cap;
          }
          MPI_Aint addr;
          MT_MPI_CHECK(MPI_Get_address(dst + k * L1, &addr));
          runs[n++] = (run){
              .file = (MPI_Aint)(src->tt.offset[slot] + 4 * ((p.r0 + k) * C + p.c0)),
              .mem = addr, .bytes = (int)(4 * p.nc)};
        }
      }
    }
    int err = n ? mt_ckpt_fault("read") : 0;
    if (err) {
      char path[256];
      mt_ckpt_dataset_path(path, sizeof path, w.g, w.t->name);
      mt_ckpt_err_read_sys(e, err, "%s: rank %d cannot read %s from %s/%s", src->dir, mesh->world_rank,
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
    if (n) { /* local calls inside the collective read: a failure aborts */
      MT_MPI_CHECK(MPI_Type_create_hindexed((int)n, lens, foff, MPI_BYTE, &ftype));
      MT_MPI_CHECK(MPI_Type_create_hindexed((int)n, lens, moff, MPI_BYTE, &mtype));
      MT_MPI_CHECK(MPI_Type_commit(&ftype));
      MT_MPI_CHECK(MPI_Type_commit(&mtype));
    }
    int rc = MPI_File_set_view(rd->fh, 0, MPI_BYTE, ftype, "native", MPI_INFO_NULL);
    MPI_Status status;
    if (rc == MPI_SUCCESS)
      rc = MPI_File_read_all(rd->fh, n ? MPI_BOTTOM : NULL, n ? 1 : 0, mtype, &status);
    if (rc != MPI_SUCCESS && !e->failed) {
      char msg[MPI_MAX_ERROR_STRING];
      mt_err_runtime(e, "%s: rank %d cannot read %s (collective MPI-IO): %s", src->dir,
                 mesh->world_rank, w.t->name, mt_mpi_strerror(rc, msg));
    }
    if (n) {
      MT_MPI_CHECK(MPI_Type_free(&ftype));
      MT_MPI_CHECK(MPI_Type_free(&mtype));
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
  if (more < 0 && !e->failed)
    mt_err_runtime(e, "%s: rank %d: out of memory listing what it reads", src->dir,
                   mesh->world_rank);
  if (MPI_File_set_view(rd->fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL) != MPI_SUCCESS &&
      !e->failed)
    mt_err_runtime(e, "%s: rank %d cannot reset its MPI-IO view of %s", src->dir,
                   mesh->world_rank, MT_CKPT_SHARED_FILE);
}

static int load_scoped(const char *dir, const mt_registry *reg, mt_mesh *mesh,
                       const mt_ckpt_state *st, const mt_ckpt_meta *expect,
                       const mt_ckpt_load_opts *o, mt_ckpt_meta *meta_out, mt_err *e) {
  int rank = mesh->world_rank, size = mesh->world_size;
  int groups = o->params_only ? 1 : MT_CKPT_NGROUPS;
  mt_err local = {0};
  mt_ckpt_fault_init(rank, -1, &local);
  if (mt_ckpt_agree(&local)) {
    *e = local;
    return mt_err_pass(e);
  }
  /* 1. rank 0 reads the manifest and the main file and checks them (root
   * attributes, tensors, index and coverage, shard files named); every rank
   * gets the result */
  mt_ckpt_source src;
  load_report rep = {.dir = dir, .e = &local};
  if (mt_ckpt_source_open(dir, &src, report_problem, &rep, &local) != 0) {
    *e = local;
    return mt_err_pass(e);
  }
  /* 2. the model (the same check on every rank, from the same data) */
  int *ck = mt_calloc((size_t)reg->n + 1, sizeof(int)); /* registry tensor -> checkpoint's */
  if (!local.failed && groups == MT_CKPT_NGROUPS && src.tt.groups < MT_CKPT_NGROUPS)
    mt_err_set(&local, "%s holds parameters only (no optimizer state): start a run from it with "
                       "train.init_from, not train.resume", dir);
  if (!local.failed && check_model(dir, &src.meta, expect, o->shorter_positions, &local) == 0)
    check_tensors(dir, reg, &src.tt, o->shorter_positions, ck, &local);
  if (mt_ckpt_agree(&local)) {
    mt_ckpt_source_close(&src);
    free(ck);
    *e = local;
    return mt_err_pass(e);
  }
  mt_ckpt_reader rd;
  if (mt_ckpt_reader_open(&rd, &src, &local) != 0) {
    mt_ckpt_source_close(&src);
    free(ck);
    *e = local;
    return mt_err_pass(e);
  }
  /* 3. the checksum of every stored box this run reads, each checked by one
   * of the ranks that read it, before any value is used */
  if (o->verify) {
    int64_t *key = mt_malloc(((size_t)src.n_rows + 1) * sizeof(int64_t));
    int *k32 = mt_malloc(((size_t)src.n_rows + 1) * sizeof(int));
    checker_keys(&src, reg, mesh, st, groups, ck, k32, &local);
    for (int64_t j = 0; j < src.n_rows; j++) key[j] = local.failed ? 0 : k32[j];
    mt_ckpt_allreduce_i64(key, src.n_rows, MPI_MIN, &local);
    int64_t *mine = mt_malloc(((size_t)src.n_rows + 1) * sizeof(int64_t)), n_mine = 0;
    for (int64_t j = 0; !local.failed && j < src.n_rows; j++)
      if (key[j] != INT_MAX && (int)((key[j] % size + j % size) % size) == rank) mine[n_mine++] = j;
    mt_err io = {0};
    mt_ckpt_check_rows(&rd, mine, n_mine, (size_t)64 << 20, report_problem, &rep, NULL, &io);
    if (io.failed && !local.failed) local = io;
    free(mine);
    free(k32);
    free(key);
  }
  /* 4. every rank reads what its layout needs */
  if (!mt_ckpt_agree(&local)) {
    int bf16 = 0; /* the collective path reads float32 datasets only */
    for (int64_t k = 0; k < (int64_t)src.tt.n * groups; k++) bf16 |= src.tt.dtype[k] != MT_DT_F32;
    if (rd.collective && !src.per_writer && !bf16)
      read_selection_collective(&rd, reg, mesh, st, groups, ck, !o->verify, &local);
    else
      read_selection(&rd, reg, mesh, st, groups, ck, !o->verify, &local);
  }
  mt_ckpt_reader_close(&rd);
  free(ck);
  mt_ckpt_meta m = src.meta;
  mt_ckpt_source_close(&src);
  if (mt_ckpt_agree(&local)) {
    *e = local;
    return mt_err_pass(e);
  }
  if (meta_out) *meta_out = m;
  return 0;
}

int mt_ckpt_load_with(const char *dir, const mt_registry *reg, mt_mesh *mesh,
                      const mt_ckpt_state *st, const mt_ckpt_meta *expect,
                      const mt_ckpt_load_opts *o, mt_ckpt_meta *meta_out, mt_err *e) {
  MT_CKPT_RETURN_SCOPED(e, load_scoped(dir, reg, mesh, st, expect, o, meta_out, e));
}

int mt_ckpt_load(const char *dir, const mt_registry *reg, mt_mesh *mesh, const mt_ckpt_state *st,
                 const mt_ckpt_meta *expect, int verify, mt_ckpt_meta *meta_out, mt_err *e) {
  mt_ckpt_load_opts o = {.verify = verify};
  MT_TRY(e, mt_ckpt_load_with(dir, reg, mesh, st, expect, &o, meta_out, e));
  return 0;
}

int mt_ckpt_load_params(const char *dir, const mt_registry *reg, mt_mesh *mesh,
                        const mt_ckpt_state *st, const mt_ckpt_meta *expect, int verify,
                        mt_ckpt_meta *meta_out, mt_err *e) {
  mt_ckpt_load_opts o = {.verify = verify, .params_only = 1};
  MT_TRY(e, mt_ckpt_load_with(dir, reg, mesh, st, expect, &o, meta_out, e));
  return 0;
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
               man.mode == MT_CKPT_MODE_PER_WRITER ? MT_CKPT_INDEX_FILE : MT_CKPT_SHARED_FILE);
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
  mt_ckpt_bcast(head, sizeof head, &local);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    free(stored);
    *e = local;
    return mt_err_pass(e);
  }
  *found = (int)head[0];
  if (*found) {
    if (stored) memcpy(bias, stored, (size_t)(rows * E) * sizeof(float));
    if (mt_ckpt_bcast(bias, rows * E * (int64_t)sizeof(float), e) != 0) {
      free(stored);
      return mt_err_pass(e);
    }
  }
  free(stored);
  return 0;
}
