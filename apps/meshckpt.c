/* meshckpt: offline tools for meshtrain checkpoints.
 *
 *   meshckpt inspect DIR [--tensors]
 *   meshckpt verify DIR [--deep] [--chunk-mb N]
 *   meshckpt diff DIR_A DIR_B [--chunk-mb N]
 *
 * Runs on any number of MPI ranks (or none): tensors are shared out over the
 * ranks and read in chunks of --chunk-mb, so memory is bounded by the chunk,
 * not the model. Exit codes: 0 ok / equal, 1 problems found / different,
 * 2 bad input. */
#include <hdf5.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ckpt/ckpt_internal.h"
#include "comm/comm.h"
#include "core/core.h"
#include "model/model.h"
#include "parallel/parallel.h"
#include "registry/registry.h"

static int g_rank = 0, g_size = 1;
static size_t g_chunk_bytes = 64u << 20;

static void usage(FILE *f) {
  fprintf(f,
          "usage: meshckpt inspect DIR [--tensors]     schema, layout, sizes, step\n"
          "       meshckpt verify DIR [--deep]         every check the loader makes: manifest,\n"
          "                                            root attributes and their checksum,\n"
          "                                            model, coverage, shard files, checksums,\n"
          "                                            no NaN/Inf (--deep: also every tensor\n"
          "                                            read whole through its dataset)\n"
          "       meshckpt diff DIR_A DIR_B            per-tensor max abs/rel difference\n"
          "       meshckpt diff DIR_A DIR_B --rtol X   values within X (relative) count as equal\n"
          "       meshckpt convert DIR OUTROOT [--mode shared|per-writer] [--dtype fp32|bf16]\n"
          "                [--optim-dtype fp32|bf16] [--params-only]\n"
          "                [--target tp=N,pp=M[,ep=E][,etp=F]]\n"
          "                [--buffer-mb B]             rewrite into OUTROOT/step_<N> (committed\n"
          "                                            atomically), streaming: at most B MiB of\n"
          "                                            tensor data per rank (default 64); under\n"
          "                                            mpirun each rank converts its share.\n"
          "                                            --dtype: the parameters (the optimizer\n"
          "                                            state stays as stored unless\n"
          "                                            --optim-dtype); --target: one box per\n"
          "                                            tp shard (a MoE model's experts: per ep x\n"
          "                                            etp shard), written for that layout\n"
          "       meshckpt export DIR OUT.h5 [--dtype fp32|bf16]\n"
          "                                            the model alone, one plain HDF5 file\n"
          "       meshckpt export DIR OUTDIR --format hf [--dtype fp32|bf16]\n"
          "                                            Hugging Face GPT-2: OUTDIR/model.safetensors\n"
          "                                            and config.json (GPT2LMHeadModel)\n"
          "       meshckpt import HFDIR OUTROOT --format hf [--mode shared|per-writer]\n"
          "                                            a step-0 checkpoint, parameters only, from\n"
          "                                            a Hugging Face GPT-2 (start training from\n"
          "                                            it with train.init_from=OUTROOT/step_0)\n"
          "options: --chunk-mb N (read size per rank, default 64), --hints K=V,K=V (MPI-IO\n"
          "         hints for ckpt.h5, e.g. striping_factor=16,cb_nodes=8), --check (parse\n"
          "         the arguments and read the checkpoint's metadata as the command would,\n"
          "         check --target against its model, write nothing: one OK line, exit 0;\n"
          "         what slurm/meshslurm.py runs before it writes a ckpt-convert job)\n"
          "DIR is a step directory (checkpoints/step_<N>) or a checkpoints directory\n"
          "(its newest complete step is used). Exit: 0 ok/equal, 1 problems/different,\n"
          "2 bad input.\n");
}

/* problems found by this rank, printed by rank 0 at the end */
typedef struct {
  char *text;
  size_t len, cap;
  long count;
} report;

static void report_add(report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report_add(report *r, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  size_t n = strlen(line) + 1;
  if (r->len + n + 1 > r->cap) {
    r->cap = (r->len + n + 1) * 2;
    r->text = realloc(r->text, r->cap);
    if (!r->text) abort();
  }
  memcpy(r->text + r->len, line, n - 1);
  r->len += n - 1;
  r->text[r->len++] = '\n';
  r->text[r->len] = '\0';
  r->count++;
}

/* gather every rank's report lines to rank 0, in rank order; returns the total count */
static long report_flush(report *r, FILE *f) {
  int len = (int)r->len;
  int *lens = g_rank == 0 ? mt_calloc((size_t)g_size, sizeof(int)) : NULL;
  MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, MPI_COMM_WORLD);
  int *displs = NULL;
  char *all = NULL;
  if (g_rank == 0) {
    displs = mt_calloc((size_t)g_size, sizeof(int));
    int tot = 0;
    for (int i = 0; i < g_size; i++) {
      displs[i] = tot;
      tot += lens[i];
    }
    all = mt_calloc((size_t)tot + 1, 1);
  }
  MPI_Gatherv(r->text ? r->text : "", len, MPI_CHAR, all, lens, displs, MPI_CHAR, 0, MPI_COMM_WORLD);
  long count = r->count;
  MPI_Allreduce(MPI_IN_PLACE, &count, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) {
    fputs(all, f);
    free(all);
    free(lens);
    free(displs);
  }
  free(r->text);
  memset(r, 0, sizeof *r);
  return count;
}

/* ------------------------------------------------------------------ */
/* opening                                                             */

typedef struct {
  char dir[1024];
  char mode[32];
  int64_t manifest_step;
  mt_ckpt_manifest man;
  mt_ckpt_meta meta;
  mt_ckpt_source src; /* what rank 0 read and checked, on every rank */
  hid_t file;         /* the main file, opened by every rank (inspect, diff, export, --deep) */
  mt_ckpt_tensors tt; /* src.tt */
  int n_tensors;      /* tt.n */
  char (*names)[MT_NAME_MAX]; /* tt.names */
} ckpt;

static int resolve_dir(const char *spec, char *dir, size_t len, mt_err *e) {
  char manifest[1100];
  snprintf(manifest, sizeof manifest, "%s/%s", spec, MT_CKPT_MANIFEST);
  if (mt_ckpt_file_size(manifest) >= 0) { /* a step directory: ckpt_open checks it */
    snprintf(dir, len, "%s", spec);
    return 0;
  }
  int found = 0;
  char tmp[1024];
  snprintf(tmp, sizeof tmp, "%s", spec);
  if (mt_ckpt_resolve(tmp, tmp, dir, len, &found, e) != 0) return -1;
  if (!found) {
    mt_err_set(e, "%s: no complete checkpoint", spec);
    return -1;
  }
  return 0;
}

/* a problem found while opening: the open's error (commands other than verify) */
static void open_problem(void *ctx, const char *path, const char *problem, const int64_t *row) {
  (void)row;
  mt_err_set((mt_err *)ctx, "%s: %s", path, problem);
}

/* Rank 0 reads and checks the checkpoint as the loader does (the manifest,
 * the root attributes and their checksum, the tensor table, the index and
 * its coverage: sizes bounded by the checkpoint's bytes) and shares the
 * result; with main_file, every rank then also opens the main file (serial
 * driver, read-only). Coverage problems go to report (NULL: they are
 * errors). Returns 0; -1 with e set (bad_input: the path is no checkpoint
 * at all). */
static int ckpt_open(const char *spec, ckpt *c, int main_file, mt_ckpt_report_fn on_problem,
                     void *ctx, int *bad_input, mt_err *e) {
  memset(c, 0, sizeof *c);
  c->file = -1;
  *bad_input = 1;
  if (resolve_dir(spec, c->dir, sizeof c->dir, e) != 0) return -1;
  *bad_input = 0;
  mt_err local = {0};
  if (mt_ckpt_source_open(c->dir, &c->src, on_problem ? on_problem : open_problem,
                          on_problem ? ctx : (void *)&local, &local) != 0) {
    *e = local;
    return -1;
  }
  c->man = c->src.man;
  c->meta = c->src.meta;
  c->tt = c->src.tt;
  c->n_tensors = c->tt.n;
  c->names = c->tt.names;
  snprintf(c->mode, sizeof c->mode, "%s", c->man.mode);
  c->manifest_step = c->man.step;
  if (!local.failed && main_file) {
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", c->dir,
             strcmp(c->mode, "per-writer") == 0 ? MT_CKPT_INDEX_FILE : MT_CKPT_SHARED_FILE);
    hid_t fapl = mt_ckpt_fapl_serial();
    c->file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (c->file < 0) mt_ckpt_err_h5(&local, "%s: cannot open %s as HDF5", c->dir, path);
    H5Pclose(fapl);
  }
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    *e = local;
    return -1;
  }
  return 0;
}

static void ckpt_close(ckpt *c) {
  if (c->file >= 0) H5Fclose(c->file);
  c->file = -1;
  mt_ckpt_source_close(&c->src);
}

static int64_t attr_i64(hid_t obj, const char *name) {
  int64_t v = -1;
  return mt_ckpt_attr_i64(obj, name, &v) == 0 ? v : -1;
}

static void attr_str(hid_t obj, const char *name, char *buf, size_t len) {
  if (mt_ckpt_attr_str(obj, name, buf, len) != 0) buf[0] = '\0';
}

/* a tensor's shape as 2-D (rows, cols: every dim but the last flattened
 * into rows, a vector one row) and its N-d dims (NULL: not wanted);
 * returns total elements or -1 (not 1-D to 3-D) */
static long long dset_shape_nd(hid_t d, hsize_t *rows, hsize_t *cols, int *nd, hsize_t *nd_dims) {
  hid_t s = H5Dget_space(d);
  hsize_t dims[H5S_MAX_RANK] = {0};
  *rows = *cols = 0;
  *nd = H5Sget_simple_extent_dims(s, dims, NULL);
  H5Sclose(s);
  if (*nd < 1 || *nd > 3) return -1;
  *rows = 1;
  for (int k = 0; k < *nd - 1; k++) *rows *= dims[k];
  *cols = dims[*nd - 1];
  if (nd_dims)
    for (int k = 0; k < *nd; k++) nd_dims[k] = dims[k];
  return (long long)(*rows * *cols);
}

static long long dset_shape(hid_t d, hsize_t *rows, hsize_t *cols, int *nd) {
  return dset_shape_nd(d, rows, cols, nd, NULL);
}

/* read rows [r0, r0+nr) of a tensor seen as 2-D */
static int read_rows(hid_t d, int nd, hsize_t r0, hsize_t nr, hsize_t cols, float *buf) {
  (void)nd;
  hid_t fs = H5Dget_space(d);
  mt_ckpt_select_rows(fs, r0, nr, cols);
  hsize_t n = nr * cols;
  hid_t ms = H5Screate_simple(1, &n, NULL);
  herr_t rc = H5Dread(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf);
  H5Sclose(ms);
  H5Sclose(fs);
  return rc < 0 ? -1 : 0;
}

static hsize_t rows_per_chunk(hsize_t cols) {
  hsize_t r = (hsize_t)(g_chunk_bytes / (cols * sizeof(float)));
  return r ? r : 1;
}

static void dataset_path(char *out, size_t len, int group, const char *name) {
  snprintf(out, len, "/%s/%s", mt_ckpt_group_path(group), name);
}

/* ------------------------------------------------------------------ */
/* inspect                                                             */

static int cmd_inspect(ckpt *c, int list_tensors) {
  if (g_rank != 0) return 0;
  static const char *keys[] = {"step", "samples", "tokens", "optimizer_step", "seed",
                               "n_layer", "n_embd", "n_head", "seq_len", "vocab"};
  char fmt[64], version[32];
  attr_str(c->file, "format", fmt, sizeof fmt);
  attr_str(c->file, "version", version, sizeof version);
  printf("checkpoint %s\n  format %s %s, mode %s\n", c->dir, fmt, version, c->mode);
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    printf("  %-15s %lld\n", keys[i], (long long)attr_i64(c->file, keys[i]));
  printf("  written by      dp=%lld tp=%lld pp=%lld cp=%lld zero=%lld on %lld ranks\n",
         (long long)attr_i64(c->file, "dp"), (long long)attr_i64(c->file, "tp"),
         (long long)attr_i64(c->file, "pp"), (long long)attr_i64(c->file, "cp"),
         (long long)attr_i64(c->file, "zero"), (long long)attr_i64(c->file, "world"));
  const mt_ckpt_meta *m = &c->meta;
  if (m->moe_experts > 0) {
    /* the MoE layout: which blocks, how the experts are stored and split */
    int moe_blocks = 0, moe_tensors = 0;
    char blocks[256] = "";
    for (int l = 0; l < m->n_layer; l++)
      if (m->moe_every > 0 && (l + 1) % m->moe_every == 0) {
        if (moe_blocks++ < 16)
          snprintf(blocks + strlen(blocks), sizeof blocks - strlen(blocks), "%s%d",
                   moe_blocks > 1 ? "," : "", l);
      }
    long long expert_elems = 0;
    for (int i = 0; i < c->n_tensors; i++) {
      char path[256];
      dataset_path(path, sizeof path, 0, c->names[i]);
      hid_t d = H5Dopen2(c->file, path, H5P_DEFAULT);
      if (d < 0) continue;
      if (H5Aexists(d, "ep_split") > 0) {
        hsize_t r, k;
        int nd;
        long long n = dset_shape(d, &r, &k, &nd);
        moe_tensors++;
        if (n > 0) expert_elems += n;
      }
      H5Dclose(d);
    }
    printf("  moe             %lld experts, top-%lld, expert hidden %lld, %lld shared, in %d of "
           "%lld blocks (%s%s)\n",
           (long long)m->moe_experts, (long long)m->moe_topk, (long long)m->moe_ffn,
           (long long)m->moe_shared, moe_blocks, (long long)m->n_layer, blocks,
           moe_blocks > 16 ? ",..." : "");
    printf("  experts         %d tensors, %lld elements, stored whole: E x out x in (biases E x "
           "out), global expert ids on dim 0\n", moe_tensors, expert_elems);
    printf("  written by      folded mesh ep=%lld etp=%lld edp=%lld (experts split over ep on "
           "dim 0, over etp inside each expert)\n",
           (long long)m->ep, (long long)m->etp,
           m->ep * m->etp > 0 ? (long long)(m->tp * m->cp * m->dp / (m->ep * m->etp)) : 0LL);
  }
  for (int g = 0; g < MT_CKPT_NGROUPS; g++) {
    long long elems = 0;
    for (int i = 0; i < c->n_tensors; i++) {
      char path[256];
      dataset_path(path, sizeof path, g, c->names[i]);
      hid_t d = H5Dopen2(c->file, path, H5P_DEFAULT);
      if (d < 0) continue;
      hsize_t r, k, dims[3] = {0};
      int nd;
      long long n = dset_shape_nd(d, &r, &k, &nd, dims);
      if (n > 0) elems += n;
      if (list_tensors && g == 0) {
        char split[96], shape[96] = "", ep_split[32] = "", etp_split[32] = "";
        attr_str(d, "tp_split", split, sizeof split);
        if (H5Aexists(d, "ep_split") > 0) { /* an expert tensor: the folded mesh's splits */
          attr_str(d, "ep_split", ep_split, sizeof ep_split);
          attr_str(d, "etp_split", etp_split, sizeof etp_split);
          snprintf(split, sizeof split, "ep %s, etp %s", ep_split, etp_split);
        }
        for (int q = 0; q < nd; q++)
          snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%llu", q ? ", " : "",
                   (unsigned long long)dims[q]);
        printf("    %-40s [%s]  %s\n", c->names[i], shape, split);
      }
      H5Dclose(d);
    }
    printf("  %-18s %d tensors, %lld elements, %.2f MB fp32\n", mt_ckpt_group_path(g),
           c->n_tensors, elems, elems * 4.0 / 1e6);
  }
  return 0;
}

/* ------------------------------------------------------------------ */
/* verify                                                              */

/* verify's problems go to the report, one line each */
static void report_problem(void *ctx, const char *path, const char *problem, const int64_t *row) {
  report *rep = ctx;
  if (!row) {
    report_add(rep, "%s: %s", path, problem);
    return;
  }
  report_add(rep, "%s: %s in box [%lld:%lld, %lld:%lld] written by rank %lld", path, problem,
             (long long)row[MT_IX_START0], (long long)(row[MT_IX_START0] + row[MT_IX_COUNT0]),
             (long long)row[MT_IX_START1], (long long)(row[MT_IX_START1] + row[MT_IX_COUNT1]),
             (long long)row[MT_IX_WRITER]);
}

/* The tensors the root attributes describe (a GPT of that shape) against
 * the checkpoint's: what the loader checks against the run's model. */
static void check_model_tensors(ckpt *c, report *rep) {
  const mt_ckpt_meta *m = &c->meta;
  mt_model_shape shape = {.n_layer = (int)m->n_layer, .n_embd = (int)m->n_embd,
                          .n_head = (int)m->n_head, .seq_len = (int)m->seq_len,
                          .vocab = (int)m->vocab, .vocab_padded = 0,
                          .moe_experts = (int)m->moe_experts, .moe_topk = (int)m->moe_topk,
                          .moe_every = (int)m->moe_every, .moe_ffn = (int)m->moe_ffn,
                          .moe_shared = (int)m->moe_shared, .moe_capacity = 0.0};
  if (m->n_layer > c->n_tensors || m->n_embd > INT32_MAX || m->seq_len > INT32_MAX ||
      m->vocab > INT32_MAX || m->moe_experts > INT32_MAX || m->moe_ffn > INT32_MAX ||
      m->moe_shared > INT32_MAX) {
    report_add(rep, "%s: the root attributes describe a model larger than the checkpoint", c->dir);
    return;
  }
  shape.vocab_padded = mt_model_pad_vocab(shape.vocab, 1);
  mt_registry reg;
  mt_registry_init(&reg, 1, 0);
  mt_err why = {0};
  if (mt_gpt_register(&reg, &shape, 1, 0, 0, &why) != 0) {
    report_add(rep, "%s: the root attributes describe no valid model (%s)", c->dir, why.msg);
  } else {
    for (int i = 0; i < reg.n; i++) {
      const mt_tensor *t = &reg.t[i];
      int k = 0;
      while (k < c->n_tensors && strcmp(c->names[k], t->name) != 0) k++;
      if (k == c->n_tensors) {
        report_add(rep, "/model/%s: missing (the model of the root attributes has it)", t->name);
        continue;
      }
      int same = c->tt.nd[k] == t->ndim;
      for (int d = 0; same && d < t->ndim; d++) same = c->tt.dims[k][d] == t->shape[d];
      if (!same) {
        char have[96] = "", want[96] = "";
        for (int d = 0; d < c->tt.nd[k]; d++)
          snprintf(have + strlen(have), sizeof have - strlen(have), "%s%lld", d ? ", " : "",
                   (long long)c->tt.dims[k][d]);
        for (int d = 0; d < t->ndim; d++)
          snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "",
                   (long long)t->shape[d]);
        report_add(rep, "/model/%s: shape [%s], the model of the root attributes has [%s]",
                   t->name, have, want);
      }
    }
  }
  mt_registry_free(&reg);
}

/* The stored boxes of this rank's share, for the data checks: the index in
 * its order (writer by writer, so a rank opens few shard files), cut into
 * size slices of about equal bytes. */
static int64_t my_rows(const mt_ckpt_source *s, int64_t **out) {
  double total = 0, acc = 0;
  for (int64_t j = 0; j < s->n_rows; j++)
    total += (double)(s->rows[j * MT_CKPT_INDEX_COLS + MT_IX_COUNT0] *
                      s->rows[j * MT_CKPT_INDEX_COLS + MT_IX_COUNT1]);
  int64_t n = 0;
  *out = mt_malloc(((size_t)s->n_rows + 1) * sizeof(int64_t));
  for (int64_t j = 0; j < s->n_rows; j++) {
    double v = (double)(s->rows[j * MT_CKPT_INDEX_COLS + MT_IX_COUNT0] *
                        s->rows[j * MT_CKPT_INDEX_COLS + MT_IX_COUNT1]);
    int owner = total > 0 ? (int)((acc + v / 2) / total * g_size) : 0; /* the slice of its middle */
    if (owner >= g_size) owner = g_size - 1;
    if (owner == g_rank) (*out)[n++] = j;
    acc += v;
  }
  return n;
}

static int cmd_verify(const char *spec, int deep) {
  report rep = {0};
  ckpt cc, *c = &cc;
  int bad_input = 0;
  mt_err err = {0};
  /* what the loader checks on rank 0 before reading: the manifest, the root
   * attributes, the tensors, the index and its coverage (problems to rep) */
  if (ckpt_open(spec, c, deep, report_problem, &rep, &bad_input, &err) != 0) {
    ckpt_close(c);
    if (bad_input) mt_err_check_all(&err, MPI_COMM_WORLD, "meshckpt");
    /* a checkpoint the loader refuses before reading any data: a problem found */
    free(rep.text);
    if (g_rank == 0) printf("%s\nverify: %s: 1 problem(s)\n", err.msg, spec);
    return 1;
  }
  int64_t step = c->meta.step;
  char dir_base[1024];
  const char *slash = strrchr(c->dir, '/');
  snprintf(dir_base, sizeof dir_base, "%.1000s", slash ? slash + 1 : c->dir);
  char expect_name[64];
  snprintf(expect_name, sizeof expect_name, "step_%lld", (long long)step);
  if (g_rank == 0 && strcmp(dir_base, expect_name) != 0)
    report_add(&rep, "steps disagree: file %lld, manifest %lld, directory %s", (long long)step,
               (long long)c->manifest_step, dir_base);
  if (g_rank == 0) check_model_tensors(c, &rep);
  const int64_t *rows = c->src.rows;
  int64_t n_rows = c->src.n_rows;
  if (g_rank == 0 && !strcmp(c->mode, "per-writer"))
    mt_ckpt_check_shard_files(c->dir, rows, n_rows, report_problem, &rep);
  /* the data: every box's checksum, no NaN or Inf (boxes shared out over
   * ranks, read directly as the loader reads them) */
  double bytes_checked = 0;
  mt_ckpt_reader rd;
  if (mt_ckpt_reader_open(&rd, &c->src, &err) != 0) {
    if (g_rank == 0) report_add(&rep, "%s", err.msg);
  } else {
    int64_t *mine = NULL, n_mine = my_rows(&c->src, &mine);
    mt_ckpt_check_rows(&rd, mine, n_mine, g_chunk_bytes, report_problem, &rep, &bytes_checked);
    free(mine);
    mt_ckpt_reader_close(&rd);
  }
  long boxes_checked = (long)n_rows;
  /* --deep: every tensor read whole through its dataset (tensors shared out) */
  float *buf = mt_malloc(g_chunk_bytes + 64);
  for (int g = 0; deep && g < c->tt.groups; g++) {
    for (int ti = 0; ti < c->n_tensors; ti++) {
      if ((g * c->n_tensors + ti) % g_size != g_rank) continue;
      char path[256];
      dataset_path(path, sizeof path, g, c->names[ti]);
      hid_t ds = H5Dopen2(c->file, path, H5P_DEFAULT);
      if (ds < 0) {
        report_add(&rep, "%s: missing", path);
        continue;
      }
      hsize_t nrows = (hsize_t)c->tt.ext[(size_t)g * (size_t)c->n_tensors + (size_t)ti][0];
      hsize_t ncols = (hsize_t)c->tt.ext[(size_t)g * (size_t)c->n_tensors + (size_t)ti][1];
      long long nonfinite = 0;
      hsize_t per = rows_per_chunk(ncols);
      for (hsize_t r0 = 0; r0 < nrows; r0 += per) {
        hsize_t nr = nrows - r0 < per ? nrows - r0 : per;
        if (ncols > g_chunk_bytes / sizeof(float)) {
          report_add(&rep, "%s: rows of %llu values are wider than --chunk-mb; not read whole",
                     path, (unsigned long long)ncols);
          break;
        }
        if (read_rows(ds, 0, r0, nr, ncols, buf) != 0) {
          report_add(&rep, "%s: unreadable rows %llu..%llu", path, (unsigned long long)r0,
                     (unsigned long long)(r0 + nr));
          break;
        }
        for (hsize_t k = 0; k < nr * ncols; k++) nonfinite += !isfinite(buf[k]);
      }
      if (nonfinite) report_add(&rep, "%s: %lld NaN or Inf values", path, nonfinite);
      H5Dclose(ds);
    }
  }
  free(buf);
  MPI_Allreduce(MPI_IN_PLACE, &bytes_checked, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  long problems = report_flush(&rep, stdout);
  if (g_rank == 0) {
    if (problems) printf("verify: %s: %ld problem(s)\n", c->dir, problems);
    else printf("verify: %s: OK (step %lld, %d tensors x %d groups%s, %ld boxes, %.1f MB checked, "
                "no NaN/Inf%s)\n", c->dir, (long long)step, c->n_tensors, c->tt.groups,
                c->tt.groups < MT_CKPT_NGROUPS ? " (parameters only)" : "", boxes_checked,
                bytes_checked / 1e6, deep ? ", every tensor read whole" : "");
  }
  ckpt_close(c);
  return problems ? 1 : 0;
}

/* ------------------------------------------------------------------ */
/* diff                                                                */

/* rtol > 0: values within rtol of each other (relative to the larger) count
 * as equal, e.g. after a round trip through bfloat16 (rtol 2^-8) */
static int cmd_diff(ckpt *a, ckpt *b, double rtol) {
  report rep = {0};
  int differ = 0;
  int groups = a->tt.groups < b->tt.groups ? a->tt.groups : b->tt.groups;
  if (a->tt.groups != b->tt.groups && g_rank == 0)
    printf("note: one checkpoint holds parameters only: comparing the parameters\n");
  if (a->n_tensors != b->n_tensors) {
    if (g_rank == 0) report_add(&rep, "tensor counts differ: %d vs %d", a->n_tensors, b->n_tensors);
    differ = 1;
  }
  float *x = mt_malloc(g_chunk_bytes / 2 + 64), *y = mt_malloc(g_chunk_bytes / 2 + 64);
  size_t half = g_chunk_bytes / 2;
  int n = a->n_tensors < b->n_tensors ? a->n_tensors : b->n_tensors;
  double worst_rel = 0;
  for (int g = 0; g < groups; g++) {
    for (int ti = 0; ti < n; ti++) {
      if ((g * n + ti) % g_size != g_rank) continue;
      char pa[256];
      dataset_path(pa, sizeof pa, g, a->names[ti]);
      hid_t da = H5Dopen2(a->file, pa, H5P_DEFAULT), db = H5Dopen2(b->file, pa, H5P_DEFAULT);
      hsize_t ra = 0, ca = 0, rb = 0, cb = 0;
      int nda = 0, ndb = 0;
      if (da < 0 || db < 0 || dset_shape(da, &ra, &ca, &nda) != dset_shape(db, &rb, &cb, &ndb) ||
          ra != rb || ca != cb) {
        report_add(&rep, "%s: missing or of another shape in one checkpoint", pa);
        differ = 1;
      } else {
        double max_abs = 0, max_rel = 0;
        long long ndiff = 0;
        hsize_t per = (hsize_t)(half / (ca * sizeof(float)));
        if (!per) per = 1;
        for (hsize_t r0 = 0; r0 < ra; r0 += per) {
          hsize_t nr = ra - r0 < per ? ra - r0 : per;
          if (read_rows(da, nda, r0, nr, ca, x) || read_rows(db, ndb, r0, nr, ca, y)) {
            report_add(&rep, "%s: unreadable", pa);
            differ = 1;
            break;
          }
          for (hsize_t k = 0; k < nr * ca; k++) {
            if (memcmp(&x[k], &y[k], sizeof(float)) == 0) continue;
            double d = fabs((double)x[k] - (double)y[k]);
            double m = fmax(fabs((double)x[k]), fabs((double)y[k]));
            double rel = m > 0 ? d / m : INFINITY;
            if (rel > worst_rel || !(rel == rel)) worst_rel = rel;
            if (rtol > 0 && rel <= rtol) continue;
            ndiff++;
            if (d > max_abs) max_abs = d;
            if (m > 0 && d / m > max_rel) max_rel = d / m;
          }
        }
        if (ndiff) {
          report_add(&rep, "%-48s %lld values differ, max abs %.3g, max rel %.3g", pa, ndiff,
                     max_abs, max_rel);
          differ = 1;
        }
      }
      if (da >= 0) H5Dclose(da);
      if (db >= 0) H5Dclose(db);
    }
  }
  free(x);
  free(y);
  MPI_Allreduce(MPI_IN_PLACE, &differ, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &worst_rel, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  report_flush(&rep, stdout);
  int64_t sa = attr_i64(a->file, "step"), sb = attr_i64(b->file, "step");
  if (g_rank == 0) {
    if (sa != sb) printf("note: steps differ (%lld vs %lld)\n", (long long)sa, (long long)sb);
    if (differ) printf("diff: different\n");
    else if (worst_rel > 0) printf("diff: equal within rtol %g (largest relative difference %.3g)\n", rtol, worst_rel);
    else printf("diff: equal (every tensor bitwise identical)\n");
  }
  return differ ? 1 : 0;
}

/* ------------------------------------------------------------------ */
/* convert and export                                                  */


typedef struct {
  const char *mode;
  int param_dtype, optim_dtype, params_only, target_tp, target_pp, target_ep, target_etp;
  double buffer_mb;
  const char *test_crash;
} convert_args;

/* The registries of a target layout (mt_ckpt_target_ranks of them: each
 * stage's tp x dp ranks with dp the fewest that hold ep x etp, tp fastest)
 * for the GPT the checkpoint's root attributes describe. */
static int target_registries(const ckpt *c, int tp, int pp, int ep, int etp, mt_registry **out,
                             mt_err *e) {
  mt_model_shape shape = {.n_layer = (int)c->meta.n_layer, .n_embd = (int)c->meta.n_embd,
                          .n_head = (int)c->meta.n_head, .seq_len = (int)c->meta.seq_len,
                          .vocab = (int)c->meta.vocab, .moe_experts = (int)c->meta.moe_experts,
                          .moe_topk = (int)c->meta.moe_topk, .moe_every = (int)c->meta.moe_every,
                          .moe_ffn = (int)c->meta.moe_ffn, .moe_shared = (int)c->meta.moe_shared};
  shape.vocab_padded = mt_model_pad_vocab(shape.vocab, tp);
  *out = NULL;
  if (shape.moe_experts == 0 && (ep > 1 || etp > 1)) {
    mt_err_set(e, "--target ep=%d,etp=%d: the checkpoint has no experts (a dense model)", ep, etp);
    return -1;
  }
  if (shape.moe_experts > 0 && shape.moe_experts % ep != 0) {
    mt_err_set(e, "--target ep=%d does not divide the checkpoint's %d experts", ep,
               shape.moe_experts);
    return -1;
  }
  if (shape.moe_experts > 0 && shape.moe_ffn % etp != 0) {
    mt_err_set(e, "--target etp=%d does not divide the experts' hidden size %d (moe_ffn)", etp,
               shape.moe_ffn);
    return -1;
  }
  if (pp > shape.n_layer) {
    mt_err_set(e, "--target: pp = %d is more than the model's %d layers", pp, shape.n_layer);
    return -1;
  }
  int *stage_of_layer = mt_calloc((size_t)shape.n_layer + 1, sizeof(int));
  for (int s = 0; s < pp; s++) {
    int l0, l1;
    mt_registry_stage_layers(shape.n_layer, pp, 1, NULL, s, &l0, &l1);
    for (int l = l0; l < l1; l++) stage_of_layer[l] = s;
  }
  const int n = mt_ckpt_target_stage_ranks(tp, ep, etp), world = n * pp;
  mt_registry *regs = mt_calloc((size_t)world, sizeof *regs);
  mt_err why = {0};
  int rc = 0;
  for (int w = 0; w < world && rc == 0; w++) {
    int q = w % n, etp_rank, ep_rank, edp_rank;
    mt_mesh_fold_coords(q, etp, ep, &etp_rank, &ep_rank, &edp_rank);
    mt_gpt_layout lay = {.tp_size = tp, .tp_rank = q % tp, .sp = 0, .n_layer = shape.n_layer,
                         .stage_of_layer = pp > 1 ? stage_of_layer : NULL, .pp_last = pp - 1,
                         .pp_rank = w / n, .ep_size = ep, .ep_rank = ep_rank, .etp_size = etp,
                         .etp_rank = etp_rank};
    char moe[64] = "";
    if (shape.moe_experts > 0) snprintf(moe, sizeof moe, ",ep=%d,etp=%d", ep, etp);
    if (mt_gpt_register_layout(&regs[w], &shape, &lay, &why) != 0) {
      mt_err_set(e, "--target tp=%d,pp=%d%s does not fit the model (%s)", tp, pp, moe, why.msg);
      rc = -1;
    }
  }
  free(stage_of_layer);
  *out = regs;
  return rc;
}

static int cmd_convert(ckpt *c, const char *dst, const convert_args *ca) {
  mt_err err = {0};
  mt_registry *targets = NULL;
  if (ca->target_tp > 0)
    target_registries(c, ca->target_tp, ca->target_pp, ca->target_ep, ca->target_etp, &targets,
                      &err);
  mt_err_check_all(&err, MPI_COMM_WORLD, "meshckpt");
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", c->dir);
  ckpt_close(c); /* the conversion opens the source itself */
  mt_ckpt_convert_opts o = {.mode = ca->mode, .param_dtype = ca->param_dtype,
                            .optim_dtype = ca->optim_dtype, .params_only = ca->params_only,
                            .target_tp = ca->target_tp, .target_pp = ca->target_pp,
                            .target_ep = ca->target_ep, .target_etp = ca->target_etp,
                            .targets = targets,
                            .buffer_bytes = (size_t)(ca->buffer_mb * 1048576.0),
                            .test_crash = ca->test_crash};
  mt_ckpt_convert_stats st;
  int rc = mt_ckpt_convert(dir, dst, &o, &st, &err);
  if (rc != 0) {
    mt_err_report(&err, "meshckpt");
  } else if (g_rank == 0) {
    printf("convert: %s -> %s/step_%lld (%s, parameters %s, %s, %lld boxes)\n", dir, dst,
           (long long)st.step, ca->mode, st.param_dtype == MT_CKPT_BF16 ? "bf16" : "fp32",
           st.groups == 1 ? "no optimizer state"
                          : st.optim_dtype == MT_CKPT_BF16 ? "optimizer state bf16"
                                                           : "optimizer state fp32",
           (long long)st.boxes);
    printf("convert: read %.3f GB, wrote %.3f GB in %.2f s on %d rank(s): %.3f GB/s read; "
           "peak RSS %.1f MiB (largest rank), buffer %.1f MiB per rank\n",
           st.bytes_read / 1e9, st.bytes_written / 1e9, st.seconds, g_size,
           st.bytes_read / 1e9 / st.seconds, st.peak_rss_max / 1048576.0,
           st.buffer_bytes / 1048576.0);
  }
  for (int w = 0; targets && w < mt_ckpt_target_ranks(ca->target_tp, ca->target_pp, ca->target_ep,
                                                     ca->target_etp);
       w++)
    mt_registry_free(&targets[w]);
  free(targets);
  return rc ? 1 : 0;
}

/* fp32 -> bf16, round to nearest even (NaN stays NaN) */
static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* The model's tensors, whole, into one plain HDF5 file for inference: fp32
 * or bf16 (an HDF5 16-bit float type: 1 sign, 8 exponent, 7 mantissa bits).
 * Rank 0 writes; memory is one chunk. */
static int cmd_export(ckpt *c, const char *out, const char *dtype) {
  int rc = 0;
  if (g_rank == 0) {
    int bf16 = !strcmp(dtype, "bf16");
    hid_t ftype = H5Tcopy(H5T_IEEE_F32LE);
    if (bf16) {
      H5Tset_fields(ftype, 15, 7, 8, 0, 7);
      H5Tset_ebias(ftype, 127);
      H5Tset_precision(ftype, 16);
      H5Tset_size(ftype, 2);
    }
    hid_t f = H5Fcreate(out, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) {
      fprintf(stderr, "meshckpt: error: cannot create %s\n", out);
      rc = 2;
    }
    float *buf = mt_malloc(g_chunk_bytes + 64);
    uint16_t *half = mt_malloc(g_chunk_bytes / 2 + 64);
    static const char *keys[] = {"step",        "n_layer",  "n_embd",    "n_head",
                                 "seq_len",     "vocab",    "moe_experts", "moe_topk",
                                 "moe_every",   "moe_ffn",  "moe_shared"};
    for (size_t k = 0; rc == 0 && k < sizeof keys / sizeof keys[0]; k++) {
      if (k >= 6 && c->meta.moe_experts == 0) break; /* a dense model: no MoE keys */
      int64_t v = attr_i64(c->file, keys[k]);
      hid_t s = H5Screate(H5S_SCALAR);
      hid_t a = H5Acreate2(f, keys[k], H5T_NATIVE_INT64, s, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(a, H5T_NATIVE_INT64, &v);
      H5Aclose(a);
      H5Sclose(s);
    }
    for (int i = 0; rc == 0 && i < c->n_tensors; i++) {
      char path[256];
      dataset_path(path, sizeof path, 0, c->names[i]);
      hid_t src = H5Dopen2(c->file, path, H5P_DEFAULT);
      hsize_t rows, cols, dims[3] = {0};
      int nd;
      dset_shape_nd(src, &rows, &cols, &nd, dims);
      hid_t fs = H5Screate_simple(nd, dims, NULL);
      hid_t dst = H5Dcreate2(f, c->names[i], ftype, fs, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      char tied[MT_NAME_MAX];
      attr_str(src, "tied_to", tied, sizeof tied);
      if (tied[0]) {
        hid_t t = H5Tcopy(H5T_C_S1), s = H5Screate(H5S_SCALAR);
        H5Tset_size(t, strlen(tied) + 1);
        hid_t a = H5Acreate2(dst, "tied_to", t, s, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(a, t, tied);
        H5Aclose(a);
        H5Sclose(s);
        H5Tclose(t);
      }
      hsize_t per = rows_per_chunk(cols);
      for (hsize_t r0 = 0; r0 < rows && rc == 0; r0 += per) {
        hsize_t nr = rows - r0 < per ? rows - r0 : per;
        if (read_rows(src, nd, r0, nr, cols, buf) != 0) {
          fprintf(stderr, "meshckpt: error: cannot read %s\n", path);
          rc = 1;
          break;
        }
        hid_t sel = H5Dget_space(dst);
        mt_ckpt_select_rows(sel, r0, nr, cols);
        hsize_t nn = nr * cols;
        hid_t ms = H5Screate_simple(1, &nn, NULL);
        if (bf16) {
          for (hsize_t k = 0; k < nn; k++) half[k] = to_bf16(buf[k]);
          H5Dwrite(dst, ftype, ms, sel, H5P_DEFAULT, half);
        } else {
          H5Dwrite(dst, H5T_NATIVE_FLOAT, ms, sel, H5P_DEFAULT, buf);
        }
        H5Sclose(ms);
        H5Sclose(sel);
      }
      H5Dclose(dst);
      H5Sclose(fs);
      H5Dclose(src);
    }
    free(buf);
    free(half);
    H5Tclose(ftype);
    if (f >= 0) H5Fclose(f);
    if (rc == 0) printf("export: %d tensors of %s as %s -> %s\n", c->n_tensors, c->dir, dtype, out);
  }
  MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return rc;
}

/* Hugging Face GPT-2: model.safetensors + config.json into the directory out */
static int cmd_export_hf(ckpt *c, const char *out, const char *dtype) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", c->dir);
  ckpt_close(c); /* the export opens the checkpoint itself */
  mt_err err = {0};
  double t0 = mt_now();
  if (mt_ckpt_export_hf(dir, out, !strcmp(dtype, "bf16") ? MT_CKPT_BF16 : MT_CKPT_F32, &err) != 0) {
    mt_err_report(&err, "meshckpt");
    return 1;
  }
  if (g_rank == 0)
    printf("export: %s -> %s/model.safetensors + config.json (GPT2LMHeadModel, %s) in %.2f s\n",
           dir, out, dtype, mt_now() - t0);
  return 0;
}

/* a step-0 checkpoint (parameters only) from a Hugging Face GPT-2 directory */
static int cmd_import_hf(const char *in, const char *out_root, const convert_args *ca) {
  mt_err err = {0};
  mt_ckpt_gpt2_config hc;
  mt_ckpt_hf_read_config(in, &hc, &err);
  mt_err_check_all(&err, MPI_COMM_WORLD, "meshckpt");
  mt_model_shape shape = {.n_layer = hc.n_layer, .n_embd = hc.n_embd, .n_head = hc.n_head,
                          .seq_len = hc.n_positions, .vocab = hc.vocab};
  shape.vocab_padded = mt_model_pad_vocab(shape.vocab, 1);
  mt_registry reg;
  mt_registry_init(&reg, 1, 0);
  mt_err why = {0};
  if (mt_gpt_register(&reg, &shape, 1, 0, 0, &why) != 0)
    mt_err_set(&err, "%s/config.json describes no model meshtrain can build (%s)", in, why.msg);
  mt_err_check_all(&err, MPI_COMM_WORLD, "meshckpt");
  double t0 = mt_now();
  int rc = mt_ckpt_import_hf(in, &hc, &reg, out_root, ca->mode, &err);
  mt_registry_free(&reg);
  if (rc != 0) {
    mt_err_report(&err, "meshckpt");
    return 2;
  }
  if (g_rank == 0)
    printf("import: %s -> %s/step_0 (%s, parameters only: L=%d C=%d H=%d T=%d V=%d) in %.2f s\n",
           in, out_root, ca->mode, hc.n_layer, hc.n_embd, hc.n_head, hc.n_positions, hc.vocab,
           mt_now() - t0);
  return 0;
}

/* --check: everything the command reads before it works, read now (the
 * checkpoint's manifest, metadata and index; both of diff's; for import the
 * Hugging Face config), --target checked against the model; nothing written.
 * Collective; returns the exit code. */
static int check_only(const char *cmd, const char **pos, const convert_args *ca) {
  mt_err err = {0};
  if (!strcmp(cmd, "import")) {
    mt_ckpt_gpt2_config hc;
    mt_ckpt_hf_read_config(pos[0], &hc, &err);
    mt_err_check_all(&err, MPI_COMM_WORLD, "meshckpt");
    if (g_rank == 0) printf("meshckpt: check: OK: import of %s (GPT-2, %d layers)\n", pos[0], hc.n_layer);
    return 0;
  }
  ckpt a, b;
  int bad_input = 0, two = !strcmp(cmd, "diff");
  ckpt_open(pos[0], &a, 1, NULL, NULL, &bad_input, &err);
  mt_err_check_all(&err, MPI_COMM_WORLD, "meshckpt");
  if (two) {
    ckpt_open(pos[1], &b, 1, NULL, NULL, &bad_input, &err);
    mt_err_check_all(&err, MPI_COMM_WORLD, "meshckpt");
    ckpt_close(&b);
  }
  mt_registry *targets = NULL;
  if (!strcmp(cmd, "convert") && ca->target_tp > 0)
    target_registries(&a, ca->target_tp, ca->target_pp, ca->target_ep, ca->target_etp, &targets,
                      &err);
  for (int w = 0; targets && w < mt_ckpt_target_ranks(ca->target_tp, ca->target_pp, ca->target_ep,
                                                     ca->target_etp);
       w++)
    mt_registry_free(&targets[w]);
  free(targets);
  mt_err_check_all(&err, MPI_COMM_WORLD, "meshckpt");
  if (g_rank == 0)
    printf("meshckpt: check: OK: %s of %s (step %lld, %s, %d tensors, written by dp=%lld tp=%lld "
           "pp=%lld)\n", cmd, a.dir, (long long)a.manifest_step, a.mode, a.n_tensors,
           (long long)a.meta.dp, (long long)a.meta.tp, (long long)a.meta.pp);
  ckpt_close(&a);
  return 0;
}

/* ------------------------------------------------------------------ */

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  mt_log_init(g_rank);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  mt_err err = {0};
  const char *cmd = argc > 1 ? argv[1] : NULL;
  const char *pos[2] = {NULL, NULL};
  int npos = 0, deep = 0, list = 0, check = 0;
  const char *dtype = "fp32", *format = NULL, *hints = NULL;
  double rtol = 0;
  convert_args ca = {.mode = "shared", .param_dtype = -1, .optim_dtype = -1, .params_only = 0,
                     .target_tp = 0, .target_pp = 0, .target_ep = 1, .target_etp = 1,
                     .buffer_mb = 64, .test_crash = "none"};
  for (int i = 2; i < argc; i++) {
    const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(arg, "--deep")) deep = 1;
    else if (!strcmp(arg, "--check")) check = 1;
    else if (!strcmp(arg, "--tensors")) list = 1;
    else if (!strcmp(arg, "--params-only")) ca.params_only = 1;
    else if (!strcmp(arg, "--mode") && val) {
      ca.mode = argv[++i];
      if (strcmp(ca.mode, "shared") && strcmp(ca.mode, "per-writer"))
        mt_err_set(&err, "--mode: '%s' is not shared or per-writer", ca.mode);
    } else if ((!strcmp(arg, "--dtype") || !strcmp(arg, "--optim-dtype")) && val) {
      i++;
      if (strcmp(val, "fp32") && strcmp(val, "bf16"))
        mt_err_set(&err, "%s: '%s' is not fp32 or bf16", arg, val);
      int code = !strcmp(val, "bf16") ? MT_CKPT_BF16 : MT_CKPT_F32;
      if (!strcmp(arg, "--dtype")) {
        dtype = val;
        ca.param_dtype = code;
      } else {
        ca.optim_dtype = code;
      }
    } else if (!strcmp(arg, "--format") && val) {
      format = argv[++i];
      if (strcmp(format, "hf") && strcmp(format, "h5"))
        mt_err_set(&err, "--format: '%s' is not hf or h5", format);
    } else if (!strcmp(arg, "--target") && val) {
      i++;
      /* tp=N,pp=M and, for a MoE checkpoint, optionally ep=E, etp=F */
      int used = 0;
      if (sscanf(val, "tp=%d,pp=%d%n", &ca.target_tp, &ca.target_pp, &used) != 2 ||
          ca.target_tp < 1 || ca.target_pp < 1 || ca.target_tp > 4096 || ca.target_pp > 4096)
        mt_err_set(&err, "--target: '%s' is not tp=N,pp=M[,ep=E][,etp=F] (positive)", val);
      const char *rest = val + used;
      if (!err.failed && !strncmp(rest, ",ep=", 4) &&
          sscanf(rest, ",ep=%d%n", &ca.target_ep, &used) == 1)
        rest += used;
      if (!err.failed && !strncmp(rest, ",etp=", 5) &&
          sscanf(rest, ",etp=%d%n", &ca.target_etp, &used) == 1)
        rest += used;
      if (!err.failed && (*rest != '\0' || ca.target_ep < 1 || ca.target_etp < 1 ||
                          ca.target_ep > 4096 || ca.target_etp > 4096))
        mt_err_set(&err, "--target: '%s' is not tp=N,pp=M[,ep=E][,etp=F] (positive)", val);
    } else if (!strcmp(arg, "--buffer-mb") && val) {
      ca.buffer_mb = atof(argv[++i]);
      if (!(ca.buffer_mb >= 1)) mt_err_set(&err, "--buffer-mb: '%s' is not a number >= 1", val);
    } else if (!strcmp(arg, "--rtol") && val) {
      rtol = atof(argv[++i]);
      if (!(rtol >= 0)) mt_err_set(&err, "--rtol: '%s' is not a number >= 0", val);
    } else if (!strcmp(arg, "--hints") && val) {
      hints = argv[++i];
    } else if (!strcmp(arg, "--test-crash") && val) {
      ca.test_crash = argv[++i];
    } else if (!strcmp(arg, "--chunk-mb") && val) {
      double mb = atof(argv[++i]);
      if (!(mb > 0)) mt_err_set(&err, "--chunk-mb: '%s' is not a positive number", val);
      else g_chunk_bytes = (size_t)(mb * 1048576.0);
    } else if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) cmd = "help";
    else if (arg[0] == '-') mt_err_set(&err, "unknown option '%s' (or its value is missing)", arg);
    else if (npos < 2) pos[npos++] = arg;
    else mt_err_set(&err, "too many arguments ('%s')", arg);
  }
  if (!cmd || !strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    if (g_rank == 0) usage(cmd ? stdout : stderr);
    MPI_Finalize();
    return cmd ? 0 : MT_EXIT_BADINPUT;
  }
  if (hints && !err.failed) mt_ckpt_set_io_hints(hints, &err);
  int two_ckpts = !strcmp(cmd, "diff"), need = two_ckpts || !strcmp(cmd, "convert") ||
                                                   !strcmp(cmd, "export") || !strcmp(cmd, "import")
                                               ? 2
                                               : 1;
  if (strcmp(cmd, "inspect") && strcmp(cmd, "verify") && strcmp(cmd, "diff") &&
      strcmp(cmd, "convert") && strcmp(cmd, "export") && strcmp(cmd, "import"))
    mt_err_set(&err, "unknown command '%s' (inspect|verify|diff|convert|export|import)", cmd);
  else if (npos != need)
    mt_err_set(&err, "%s needs %d path%s (see --help)", cmd, need, need == 1 ? "" : "s");
  else if (!strcmp(cmd, "import") && (!format || strcmp(format, "hf") != 0))
    mt_err_set(&err, "import needs --format hf (a Hugging Face GPT-2 directory)");
  else if (ca.target_tp > 0 && strcmp(cmd, "convert") != 0)
    mt_err_set(&err, "--target is an option of convert");
  mt_err_check_all(&err, MPI_COMM_WORLD, "meshckpt");
  if (check) {
    int rc = check_only(cmd, pos, &ca);
    MPI_Finalize();
    return rc;
  }
  if (!strcmp(cmd, "verify")) {
    int rc = cmd_verify(pos[0], deep);
    MPI_Finalize();
    return rc;
  }
  if (!strcmp(cmd, "import")) {
    int rc = cmd_import_hf(pos[0], pos[1], &ca);
    MPI_Finalize();
    return rc;
  }
  ckpt a, b;
  int rc = 0, bad_input = 0;
  int main_file = strcmp(cmd, "convert") != 0;
  ckpt_open(pos[0], &a, main_file, NULL, NULL, &bad_input, &err);
  mt_err_check_all(&err, MPI_COMM_WORLD, "meshckpt");
  if (two_ckpts) {
    ckpt_open(pos[1], &b, 1, NULL, NULL, &bad_input, &err);
    mt_err_check_all(&err, MPI_COMM_WORLD, "meshckpt");
  }
  if (!strcmp(cmd, "inspect")) rc = cmd_inspect(&a, list);
  else if (!strcmp(cmd, "convert")) rc = cmd_convert(&a, pos[1], &ca);
  else if (!strcmp(cmd, "export") && format && !strcmp(format, "hf")) rc = cmd_export_hf(&a, pos[1], dtype);
  else if (!strcmp(cmd, "export")) rc = cmd_export(&a, pos[1], dtype);
  else rc = cmd_diff(&a, &b, rtol);
  ckpt_close(&a);
  if (two_ckpts) ckpt_close(&b);
  MPI_Finalize();
  return rc;
}
