/* The offline tools meshckpt runs: inspect, verify, diff, export to one
 * HDF5 file. They read a checkpoint the way the loader does (rank 0 reads
 * and checks the metadata, every rank reads the boxes it needs through the
 * index), so a tool accepts exactly what a load accepts, and the work (the
 * boxes to check, the tensors to compare) is shared out over the ranks, in
 * chunks of a bounded size. Uses core only. */
#include "ckpt/core/ckpt_core.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* lines found on any rank, printed by rank 0 in rank order            */

typedef struct {
  char *text;
  size_t len, cap;
  long count;
} lines;

static void lines_add(lines *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void lines_add(lines *r, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  size_t n = strlen(line);
  if (r->len + n + 2 > r->cap) {
    size_t cap = (r->len + n + 2) * 2;
    char *grown = realloc(r->text, cap);
    if (!grown) return; /* a line lost; its count stays */
    r->text = grown;
    r->cap = cap;
  }
  memcpy(r->text + r->len, line, n);
  r->len += n;
  r->text[r->len++] = '\n';
  r->text[r->len] = '\0';
  r->count++;
}

/* every rank's lines to rank 0's out; returns the count over all ranks */
static long lines_flush(lines *r, FILE *out, mt_err *e) {
  int64_t mine = (int64_t)r->len, *lens = NULL, n = 0;
  mt_ckpt_gather_i64(&mine, 1, &lens, &n, e);
  int rank = mt_ckpt_rank(), size = mt_ckpt_size();
  /* rank by rank, through rank 0 (the lines are few and short) */
  for (int q = 0; q < size && !e->failed; q++) {
    int64_t len = rank == 0 ? lens[q] : 0;
    if (mt_ckpt_bcast(&len, sizeof len, e) != 0 || len == 0) continue;
    char *buf = mt_malloc((size_t)len + 1);
    if (rank == q) memcpy(buf, r->text, (size_t)len);
    if (q != 0) {
      int rc = MPI_SUCCESS;
      if (rank == q) rc = MPI_Send(buf, (int)len, MPI_CHAR, 0, 7, mt_ckpt_comm());
      else if (rank == 0)
        rc = MPI_Recv(buf, (int)len, MPI_CHAR, q, 7, mt_ckpt_comm(), MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS)
        mt_err_runtime(e, "checkpoint: rank %d's lines cannot reach rank 0", q);
    }
    buf[len] = '\0';
    if (rank == 0 && !e->failed) fputs(buf, out);
    free(buf);
  }
  free(lens);
  int64_t count = r->count;
  mt_ckpt_allreduce_i64(&count, 1, MPI_SUM, e);
  free(r->text);
  memset(r, 0, sizeof *r);
  return (long)count;
}

/* ------------------------------------------------------------------ */
/* opening                                                             */

/* find the checkpoint of spec (its folder to dir), open it inside an HDF5
 * error scope, hand it to use on every rank and close it: use's return,
 * or the failure to find or open it */
typedef int (*source_use_fn)(const mt_ckpt_source *s, void *ctx, mt_err *e);

static int with_source(const char *spec, char *dir, size_t len, source_use_fn use, void *ctx,
                       mt_err *e) {
  mt_ckpt_h5_scope scope;
  mt_ckpt_h5_scope_begin(&scope);
  mt_ckpt_source s;
  int rc = -1;
  if (mt_ckpt_find(spec, dir, len, e) == 0 && mt_ckpt_source_open(dir, &s, NULL, NULL, e) == 0) {
    rc = use(&s, ctx, e);
    mt_ckpt_source_close(&s);
  }
  mt_ckpt_h5_scope_end(&scope);
  return rc == 0 ? 0 : mt_err_pass(e);
}

static int copy_meta(const mt_ckpt_source *s, void *meta, mt_err *e) {
  (void)e;
  *(mt_ckpt_meta *)meta = s->meta;
  return 0;
}

int mt_ckpt_read_meta_of(const char *spec, char *dir, size_t len, mt_ckpt_meta *m, mt_err *e) {
  MT_TRY(e, with_source(spec, dir, len, copy_meta, m, e));
  return 0;
}

/* rank 0 reads the stored configuration, every rank gets a copy ("" where
 * there is none) */
static int share_config(const mt_ckpt_source *s, void *text_out, mt_err *e) {
  char **text = text_out;
  int64_t n = 0;
  if (mt_ckpt_rank() == 0) {
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", s->dir,
             s->per_writer ? MT_CKPT_INDEX_FILE : MT_CKPT_SHARED_FILE);
    hid_t fapl = mt_ckpt_fapl_serial();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    *text = f >= 0 ? mt_ckpt_read_config_text(f, s->man.total_bytes) : NULL;
    if (f >= 0) H5Fclose(f);
    H5Eclear2(H5E_DEFAULT);
    n = *text ? (int64_t)strlen(*text) : 0;
  }
  int rc = mt_ckpt_bcast(&n, sizeof n, e);
  if (rc == 0 && mt_ckpt_rank() != 0) *text = mt_calloc((size_t)n + 1, 1);
  if (rc == 0 && !*text) *text = mt_calloc(1, 1);
  if (rc == 0 && n > 0) rc = mt_ckpt_bcast(*text, n, e);
  return rc;
}

int mt_ckpt_read_config_of(const char *spec, char *dir, size_t len, char **text, mt_err *e) {
  *text = NULL;
  if (with_source(spec, dir, len, share_config, text, e) != 0) {
    free(*text);
    *text = NULL;
    return mt_err_pass(e);
  }
  return 0;
}

/* ------------------------------------------------------------------ */
/* inspect                                                             */

static const char *dtype_of_group(const mt_ckpt_tensors *tt, int g) {
  int d = tt->dtype[(size_t)g * (size_t)tt->n];
  for (int i = 1; i < tt->n; i++)
    if (tt->dtype[(size_t)g * (size_t)tt->n + (size_t)i] != d) return "mixed fp32/bf16";
  return mt_dtype_name(d);
}

static void split_text(const mt_ckpt_tensor_attrs *a, int nd, char *out, size_t len) {
  if (a->expert) {
    char ep[16] = "replicated", etp[16] = "replicated";
    if (a->ep_dim >= 0 && a->ep_dim < nd) snprintf(ep, sizeof ep, "dim%d", a->ep_dim);
    if (a->etp_dim >= 0 && a->etp_dim < nd) snprintf(etp, sizeof etp, "dim%d", a->etp_dim);
    snprintf(out, len, "ep %s, etp %s", ep, etp);
  } else if (a->tp_sharded) {
    snprintf(out, len, "dim%d", a->tp_dim);
  } else {
    snprintf(out, len, "replicated");
  }
}

static void print_inspect(const mt_ckpt_source *s, int list, FILE *f) {
  const mt_ckpt_meta *m = &s->meta;
  const mt_ckpt_tensors *tt = &s->tt;
  fprintf(f, "checkpoint %s\n  format %s %s, mode %s\n", s->dir, MT_CKPT_FORMAT, s->man.version,
          mt_ckpt_mode_name(s->man.mode));
  struct {
    const char *name;
    int64_t v;
  } keys[] = {{"step", m->step},       {"samples", m->samples}, {"tokens", m->tokens},
              {"optimizer_step", m->optimizer_step},           {"seed", m->seed},
              {"n_layer", m->n_layer}, {"n_embd", m->n_embd},   {"n_head", m->n_head},
              {"seq_len", m->seq_len}, {"vocab", m->vocab}};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    fprintf(f, "  %-15s %lld\n", keys[i].name, (long long)keys[i].v);
  fprintf(f, "  arch            %s, %lld key/value heads, MLP hidden %lld, LM head %s, %s\n",
          m->arch == 2 ? "llama (RMSNorm, rotary, SwiGLU)" : "gpt2 (LayerNorm, learned positions, GELU)",
          (long long)m->n_kv_head, (long long)m->ffn, m->tied ? "tied to wte" : "untied",
          m->bias ? "biases" : "no biases");
  fprintf(f, "  residual        %s\n",
          m->residual == 1 ? "ladder (each module reads the stream without the previous "
                             "module's output)"
                           : "standard");
  fprintf(f, "  optimizer       %s\n",
          m->optimizer == 1 ? "muon (exp_avg: Muon's momentum on its matrices; AdamW's elsewhere)"
                            : "adamw");
  fprintf(f, "  written by      dp=%lld tp=%lld pp=%lld cp=%lld zero=%lld on %lld ranks\n",
          (long long)m->dp, (long long)m->tp, (long long)m->pp, (long long)m->cp,
          (long long)m->zero, (long long)m->world);
  if (m->data_hash != 0)
    fprintf(f, "  data hash       %016llx (the training data's sources, weights and shards)\n",
            (unsigned long long)m->data_hash);
  if (m->target_tp > 0) {
    char moe[64] = "";
    if (m->target_ep > 0)
      snprintf(moe, sizeof moe, " ep=%lld etp=%lld", (long long)m->target_ep,
               (long long)m->target_etp);
    fprintf(f, "  laid out for    tp=%lld pp=%lld%s (meshckpt convert --target: one box per tp "
               "shard, written by the rank that loads it)\n",
            (long long)m->target_tp, (long long)m->target_pp, moe);
  }
  if (m->moe_experts > 0) {
    /* the MoE layout: which blocks, how the experts are stored and split */
    int moe_blocks = 0, moe_tensors = 0;
    char blocks[256] = "";
    for (int l = 0; l < m->n_layer; l++)
      if (m->moe_every > 0 && (l + 1) % m->moe_every == 0 && moe_blocks++ < 16)
        snprintf(blocks + strlen(blocks), sizeof blocks - strlen(blocks), "%s%d",
                 moe_blocks > 1 ? "," : "", l);
    long long expert_elems = 0;
    for (int i = 0; i < tt->n; i++)
      if (tt->attrs[i].expert) {
        moe_tensors++;
        expert_elems += tt->ext[i][0] * tt->ext[i][1];
      }
    fprintf(f, "  moe             %lld experts, top-%lld, expert hidden %lld, %lld shared, %s "
               "router, in %d of %lld blocks (%s%s)\n",
            (long long)m->moe_experts, (long long)m->moe_topk, (long long)m->moe_ffn,
            (long long)m->moe_shared, m->moe_router == 1 ? "sigmoid" : "softmax", moe_blocks,
            (long long)m->n_layer, blocks, moe_blocks > 16 ? ",..." : "");
    fprintf(f, "  experts         %d tensors, %lld elements, stored whole: E x out x in (biases E "
               "x out), global expert ids on dim 0\n", moe_tensors, expert_elems);
    fprintf(f, "  written by      folded mesh ep=%lld etp=%lld edp=%lld (experts split over ep on "
               "dim 0, over etp inside each expert)\n",
            (long long)m->ep, (long long)m->etp,
            m->ep * m->etp > 0 ? (long long)(m->tp * m->cp * m->dp / (m->ep * m->etp)) : 0LL);
  }
  for (int g = 0; g < tt->groups; g++) {
    long long elems = 0;
    double bytes = 0;
    for (int i = 0; i < tt->n; i++) {
      long long n = tt->ext[i][0] * tt->ext[i][1];
      elems += n;
      bytes += (double)n * (double)mt_dtype_bytes(tt->dtype[(size_t)g * (size_t)tt->n + (size_t)i]);
    }
    fprintf(f, "  %-18s %d tensors, %lld elements, %.2f MB stored as %s\n", mt_ckpt_group_path(g),
            tt->n, elems, bytes / 1e6, dtype_of_group(tt, g));
    for (int i = 0; list && g == 0 && i < tt->n; i++) {
      char shape[96] = "", split[64];
      for (int q = 0; q < tt->nd[i]; q++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", q ? ", " : "",
                 (long long)tt->dims[i][q]);
      split_text(&tt->attrs[i], tt->nd[i], split, sizeof split);
      fprintf(f, "    %-40s [%s]  %s  %s\n", tt->names[i], shape, split,
              mt_dtype_name(tt->dtype[i]));
    }
  }
  if (tt->groups < MT_CKPT_NGROUPS) fprintf(f, "  (parameters only: no optimizer state)\n");
  fprintf(f, "  files           %d, %.3f MB, %lld boxes in the index\n", s->man.n_files,
          (double)s->man.total_bytes / 1e6, (long long)s->n_rows);
}

struct inspect_args {
  int list;
  FILE *out;
};

static int print_on_rank0(const mt_ckpt_source *s, void *list_and_out, mt_err *e) {
  (void)e;
  const struct inspect_args *a = list_and_out;
  if (mt_ckpt_rank() == 0) print_inspect(s, a->list, a->out);
  return 0;
}

int mt_ckpt_inspect(const char *spec, int list_tensors, FILE *out, mt_err *e) {
  char dir[1024];
  struct inspect_args a = {list_tensors, out};
  MT_TRY(e, with_source(spec, dir, sizeof dir, print_on_rank0, &a, e));
  return 0;
}

/* ------------------------------------------------------------------ */
/* verify                                                              */

static void report_line(void *ctx, const char *path, const char *problem, const int64_t *row) {
  lines *l = ctx;
  if (!row) {
    lines_add(l, "%s: %s", path, problem);
    return;
  }
  lines_add(l, "%s: %s in box [%lld:%lld, %lld:%lld] written by rank %lld", path, problem,
            (long long)row[MT_IX_START0], (long long)(row[MT_IX_START0] + row[MT_IX_COUNT0]),
            (long long)row[MT_IX_START1], (long long)(row[MT_IX_START1] + row[MT_IX_COUNT1]),
            (long long)row[MT_IX_WRITER]);
}

/* the tensors the root attributes describe (the caller's model) against
 * the checkpoint's: what the loader checks against the run's model */
static void check_model(const mt_ckpt_source *s, mt_ckpt_model_fn model, lines *l) {
  const mt_ckpt_meta *m = &s->meta;
  if (m->n_layer > s->tt.n || m->n_embd > INT32_MAX || m->seq_len > INT32_MAX ||
      m->vocab > INT32_MAX || m->moe_experts > INT32_MAX || m->moe_ffn > INT32_MAX ||
      m->moe_shared > INT32_MAX) {
    lines_add(l, "%s: the root attributes describe a model larger than the checkpoint", s->dir);
    return;
  }
  mt_registry reg;
  memset(&reg, 0, sizeof reg);
  char msg[256] = "";
  if (model(m, &reg, msg, sizeof msg) != 0) {
    lines_add(l, "%s: the root attributes describe no valid model (%s)", s->dir, msg);
  } else {
    for (int i = 0; i < reg.n; i++) {
      const mt_tensor *t = &reg.t[i];
      int k = 0;
      while (k < s->tt.n && strcmp(s->tt.names[k], t->name) != 0) k++;
      if (k == s->tt.n) {
        lines_add(l, "/model/%s: missing (the model of the root attributes has it)", t->name);
        continue;
      }
      int same = s->tt.nd[k] == t->ndim;
      for (int d = 0; same && d < t->ndim; d++) same = s->tt.dims[k][d] == t->shape[d];
      if (!same) {
        char have[96] = "", want[96] = "";
        for (int d = 0; d < s->tt.nd[k]; d++)
          snprintf(have + strlen(have), sizeof have - strlen(have), "%s%lld", d ? ", " : "",
                   (long long)s->tt.dims[k][d]);
        for (int d = 0; d < t->ndim; d++)
          snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "",
                   (long long)t->shape[d]);
        lines_add(l, "/model/%s: shape [%s], the model of the root attributes has [%s]", t->name,
                  have, want);
      }
    }
  }
  if (reg.t) mt_registry_free(&reg);
}

/* this rank's share of the boxes for the data checks: the index in its
 * order (writer by writer, so a rank opens few shard files), cut into size
 * slices of about equal bytes */
static int64_t my_rows(const mt_ckpt_source *s, int64_t **out) {
  int rank = mt_ckpt_rank(), size = mt_ckpt_size();
  double total = 0, acc = 0;
  for (int64_t j = 0; j < s->n_rows; j++)
    total += (double)(s->rows[j * MT_CKPT_INDEX_COLS + MT_IX_COUNT0] *
                      s->rows[j * MT_CKPT_INDEX_COLS + MT_IX_COUNT1]);
  int64_t n = 0;
  *out = mt_malloc(((size_t)s->n_rows + 1) * sizeof(int64_t));
  for (int64_t j = 0; j < s->n_rows; j++) {
    double v = (double)(s->rows[j * MT_CKPT_INDEX_COLS + MT_IX_COUNT0] *
                        s->rows[j * MT_CKPT_INDEX_COLS + MT_IX_COUNT1]);
    int owner = total > 0 ? (int)((acc + v / 2) / total * size) : 0; /* the slice of its middle */
    if (owner >= size) owner = size - 1;
    if (owner == rank) (*out)[n++] = j;
    acc += v;
  }
  return n;
}

/* --deep: every tensor read whole through its dataset in the main file
 * (the virtual datasets, in per-writer mode), tensors shared out */
static void deep_read(const mt_ckpt_source *s, size_t chunk, lines *l) {
  int rank = mt_ckpt_rank(), size = mt_ckpt_size();
  char path[1100];
  snprintf(path, sizeof path, "%s/%s", s->dir, s->per_writer ? MT_CKPT_INDEX_FILE : MT_CKPT_SHARED_FILE);
  hid_t fapl = mt_ckpt_fapl_serial();
  hid_t file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
  H5Pclose(fapl);
  if (file < 0) {
    H5Eclear2(H5E_DEFAULT);
    lines_add(l, "%s: cannot open %s as HDF5", s->dir, path);
    return;
  }
  float *buf = mt_malloc(chunk + 64);
  for (int g = 0; g < s->tt.groups; g++)
    for (int ti = 0; ti < s->tt.n; ti++) {
      if ((g * s->tt.n + ti) % size != rank) continue;
      char dpath[256];
      mt_ckpt_dataset_path(dpath, sizeof dpath, g, s->tt.names[ti]);
      hid_t ds = H5Dopen2(file, dpath, H5P_DEFAULT);
      if (ds < 0) {
        H5Eclear2(H5E_DEFAULT);
        lines_add(l, "%s: missing", dpath);
        continue;
      }
      const int64_t *x = s->tt.ext[(size_t)g * (size_t)s->tt.n + (size_t)ti];
      hsize_t cols = (hsize_t)x[1], per = (hsize_t)(chunk / sizeof(float)) / cols;
      long long nonfinite = 0;
      if (per == 0) {
        lines_add(l, "%s: rows of %llu values are wider than --chunk-mb; not read whole", dpath,
                  (unsigned long long)cols);
        per = 0;
      }
      for (hsize_t r0 = 0; per > 0 && r0 < (hsize_t)x[0]; r0 += per) {
        hsize_t nr = (hsize_t)x[0] - r0 < per ? (hsize_t)x[0] - r0 : per, n = nr * cols;
        hid_t fs = H5Dget_space(ds), ms = H5Screate_simple(1, &n, NULL);
        mt_ckpt_select_rows(fs, r0, nr, cols);
        herr_t rc = H5Dread(ds, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf);
        H5Sclose(ms);
        H5Sclose(fs);
        if (rc < 0) {
          H5Eclear2(H5E_DEFAULT);
          lines_add(l, "%s: unreadable rows %llu..%llu", dpath, (unsigned long long)r0,
                    (unsigned long long)(r0 + nr));
          break;
        }
        nonfinite += (long long)mt_ckpt_count_nonfinite(buf, (size_t)n);
      }
      if (nonfinite) lines_add(l, "%s: %lld NaN or Inf values", dpath, nonfinite);
      H5Dclose(ds);
    }
  free(buf);
  H5Fclose(file);
  H5Eclear2(H5E_DEFAULT);
}

static int verify_scoped(const char *spec, const mt_ckpt_verify_opts *o, FILE *out,
                         long *problems, mt_err *e) {
  int rank = mt_ckpt_rank();
  *problems = 0;
  char dir[1024];
  MT_TRY(e, mt_ckpt_find(spec, dir, sizeof dir, e));
  lines l = {0};
  mt_err local = {0};
  mt_ckpt_fault_init(rank, -1, &local);
  mt_ckpt_source s;
  /* what the loader checks on rank 0 before reading: the manifest, the root
   * attributes, the tensors, the index and its coverage (problems to l) */
  if (mt_ckpt_source_open(dir, &s, report_line, &l, &local) != 0) {
    free(l.text);
    if (local.code == MT_EXIT_RUNTIME) { /* an I/O failure: no verdict */
      *e = local;
      return mt_err_pass(e);
    }
    /* a checkpoint the loader refuses before reading any data: a problem */
    if (rank == 0) fprintf(out, "%s\nverify: %s: 1 problem(s)\n", local.msg, spec);
    *problems = 1;
    return 0;
  }
  if (rank == 0) {
    char want[64];
    const char *slash = strrchr(s.dir, '/');
    snprintf(want, sizeof want, "step_%lld", (long long)s.meta.step);
    if (strcmp(slash ? slash + 1 : s.dir, want) != 0)
      lines_add(&l, "steps disagree: file %lld, manifest %lld, directory %s",
                (long long)s.meta.step, (long long)s.man.step, slash ? slash + 1 : s.dir);
    if (o->model) check_model(&s, o->model, &l);
    if (s.per_writer) mt_ckpt_check_shard_files(s.dir, s.rows, s.n_rows, report_line, &l);
  }
  /* the data: every box's checksum, no NaN or Inf (boxes shared out over
   * ranks, read directly as the loader reads them) */
  double checked = 0;
  size_t chunk = o->chunk_bytes ? o->chunk_bytes : (size_t)64 << 20;
  mt_ckpt_reader rd;
  if (mt_ckpt_reader_open(&rd, &s, &local) != 0) {
    if (rank == 0) lines_add(&l, "%s", local.msg);
  } else {
    int64_t *mine = NULL, n_mine = my_rows(&s, &mine);
    mt_err io = {0};
    mt_ckpt_check_rows(&rd, mine, n_mine, chunk, report_line, &l, &checked, &io);
    if (io.failed) *e = io; /* an I/O error: no verdict (agreed below) */
    free(mine);
    mt_ckpt_reader_close(&rd);
  }
  if (o->deep && !e->failed) deep_read(&s, chunk, &l);
  if (mt_ckpt_agree(e)) {
    free(l.text);
    mt_ckpt_source_close(&s);
    return mt_err_pass(e);
  }
  mt_ckpt_allreduce_f64(&checked, 1, MPI_SUM, e);
  *problems = lines_flush(&l, out, e);
  if (rank == 0 && !e->failed) {
    if (*problems) fprintf(out, "verify: %s: %ld problem(s)\n", s.dir, *problems);
    else fprintf(out, "verify: %s: OK (step %lld, %d tensors x %d groups%s, %lld boxes, %.1f MB "
                      "checked, no NaN/Inf%s)\n", s.dir, (long long)s.meta.step, s.tt.n,
                 s.tt.groups, s.tt.groups < MT_CKPT_NGROUPS ? " (parameters only)" : "",
                 (long long)s.n_rows, checked / 1e6, o->deep ? ", every tensor read whole" : "");
  }
  mt_ckpt_source_close(&s);
  return e->failed ? -1 : 0;
}

int mt_ckpt_verify(const char *spec, const mt_ckpt_verify_opts *o, FILE *out, long *problems,
                   mt_err *e) {
  MT_CKPT_RETURN_SCOPED(e, verify_scoped(spec, o, out, problems, e));
}

/* ------------------------------------------------------------------ */
/* diff                                                                */

static int diff_scoped(const char *spec_a, const char *spec_b, double rtol, size_t chunk,
                       FILE *out, int *differ, mt_err *e) {
  int rank = mt_ckpt_rank(), size = mt_ckpt_size();
  *differ = 0;
  char da[1024], db[1024];
  mt_ckpt_source a, b;
  MT_TRY(e, mt_ckpt_find(spec_a, da, sizeof da, e) != 0 ||
                mt_ckpt_find(spec_b, db, sizeof db, e) != 0 ||
                mt_ckpt_source_open(da, &a, NULL, NULL, e) != 0);
  if (mt_ckpt_source_open(db, &b, NULL, NULL, e) != 0) {
    mt_ckpt_source_close(&a);
    return mt_err_pass(e);
  }
  mt_ckpt_reader ra, rb;
  int rc = -1;
  if (mt_ckpt_reader_open(&ra, &a, e) != 0) {
    rc = mt_err_pass(e);
    goto close_sources;
  }
  if (mt_ckpt_reader_open(&rb, &b, e) != 0) {
    rc = mt_err_pass(e);
    goto close_a;
  }
  lines l = {0};
  int groups = a.tt.groups < b.tt.groups ? a.tt.groups : b.tt.groups;
  if (a.tt.groups != b.tt.groups && rank == 0)
    fprintf(out, "note: one checkpoint holds parameters only: comparing the parameters\n");
  int64_t different = 0;
  if (a.tt.n != b.tt.n) {
    if (rank == 0) lines_add(&l, "tensor counts differ: %d vs %d", a.tt.n, b.tt.n);
    different = 1;
  }
  size_t half = (chunk ? chunk : (size_t)64 << 20) / 2;
  float *x = mt_malloc(half + 64), *y = mt_malloc(half + 64);
  double worst_rel = 0;
  for (int g = 0; g < groups && !e->failed; g++)
    for (int ti = 0; ti < a.tt.n && !e->failed; ti++) {
      if ((g * a.tt.n + ti) % size != rank) continue;
      char path[256];
      mt_ckpt_dataset_path(path, sizeof path, g, a.tt.names[ti]);
      int tj = 0; /* the same name in b */
      while (tj < b.tt.n && strcmp(a.tt.names[ti], b.tt.names[tj]) != 0) tj++;
      const int64_t *xa = a.tt.ext[(size_t)g * (size_t)a.tt.n + (size_t)ti];
      const int64_t *xb = tj < b.tt.n ? b.tt.ext[(size_t)g * (size_t)b.tt.n + (size_t)tj] : NULL;
      if (!xb || xa[0] != xb[0] || xa[1] != xb[1]) {
        lines_add(&l, "%s: missing or of another shape in one checkpoint", path);
        different = 1;
        continue;
      }
      int64_t C = xa[1], per = (int64_t)(half / sizeof(float)) / C;
      if (per < 1) per = 1; /* a row wider than the chunk: one row at a time */
      double max_abs = 0, max_rel = 0;
      long long ndiff = 0;
      for (int64_t r0 = 0; r0 < xa[0] && !e->failed; r0 += per) {
        int64_t nr = xa[0] - r0 < per ? xa[0] - r0 : per;
        if ((size_t)(nr * C) * sizeof(float) > half) { /* grow for the one wide row */
          free(x);
          free(y);
          half = (size_t)(nr * C) * sizeof(float);
          x = mt_malloc(half + 64);
          y = mt_malloc(half + 64);
        }
        if (mt_ckpt_read_region(&ra, g, ti, r0, nr, 0, C, x, NULL, e) != 0 ||
            mt_ckpt_read_region(&rb, g, tj, r0, nr, 0, C, y, NULL, e) != 0)
          break;
        for (int64_t k = 0; k < nr * C; k++) {
          if (memcmp(&x[k], &y[k], sizeof(float)) == 0) continue;
          double d = fabs((double)x[k] - (double)y[k]);
          double mx = fmax(fabs((double)x[k]), fabs((double)y[k]));
          double rel = mx > 0 ? d / mx : INFINITY;
          if (rel > worst_rel || !(rel == rel)) worst_rel = rel;
          if (rtol > 0 && rel <= rtol) continue;
          ndiff++;
          if (d > max_abs) max_abs = d;
          if (mx > 0 && d / mx > max_rel) max_rel = d / mx;
        }
      }
      if (ndiff) {
        lines_add(&l, "%-48s %lld values differ, max abs %.3g, max rel %.3g", path, ndiff, max_abs,
                  max_rel);
        different = 1;
      }
    }
  free(x);
  free(y);
  /* an error on one rank (an unreadable box): every rank agrees before more
   * collective calls */
  mt_ckpt_agree(e);
  if (!e->failed) {
    mt_ckpt_allreduce_i64(&different, 1, MPI_MAX, e);
    mt_ckpt_allreduce_f64(&worst_rel, 1, MPI_MAX, e);
    lines_flush(&l, out, e);
  } else {
    free(l.text);
  }
  if (rank == 0 && !e->failed) {
    if (a.meta.step != b.meta.step)
      fprintf(out, "note: steps differ (%lld vs %lld)\n", (long long)a.meta.step,
              (long long)b.meta.step);
    if (different) fprintf(out, "diff: different\n");
    else if (worst_rel > 0)
      fprintf(out, "diff: equal within rtol %g (largest relative difference %.3g)\n", rtol,
              worst_rel);
    else fprintf(out, "diff: equal (every tensor bitwise identical)\n");
  }
  *differ = (int)different;
  rc = e->failed ? -1 : 0;
  mt_ckpt_reader_close(&rb);
close_a:
  mt_ckpt_reader_close(&ra);
close_sources:
  mt_ckpt_source_close(&b);
  mt_ckpt_source_close(&a);
  return rc;
}

int mt_ckpt_diff(const char *a, const char *b, double rtol, size_t chunk_bytes, FILE *out,
                 int *differ, mt_err *e) {
  MT_CKPT_RETURN_SCOPED(e, diff_scoped(a, b, rtol, chunk_bytes, out, differ, e));
}

/* ------------------------------------------------------------------ */
/* export: the model alone, one plain HDF5 file                        */

/* rank 0: the file laid out by HDF5 (h5file.c), then every tensor
 * converted and written, chunk by chunk */
static int export_rank0(mt_ckpt_reader *rd, const char *path, int dtype, size_t chunk,
                        mt_err *e) {
  const mt_ckpt_source *s = rd->src;
  const mt_ckpt_meta *m = &s->meta;
  char where[1200];
  snprintf(where, sizeof where, "export: cannot write %s", path);
  size_t es = mt_dtype_bytes(dtype);
  long long data = 0;
  for (int i = 0; i < s->tt.n; i++) data += (long long)(s->tt.ext[i][0] * s->tt.ext[i][1]) * (long long)es;
  long long metadata = mt_ckpt_metadata_bytes(s->tt.n + 1, 0, 0);
  mt_ckpt_h5out o;
  hid_t fapl = mt_ckpt_fapl_serial();
  unlink(path); /* an export replaces the file */
  int rc = mt_ckpt_h5out_create(&o, path, data + metadata, metadata, fapl, 0, where, e);
  H5Pclose(fapl);
  if (rc != 0) return mt_err_pass(e);
  int64_t *off = mt_calloc((size_t)s->tt.n + 1, sizeof(int64_t));
  struct {
    const char *name;
    int64_t v;
  } keys[] = {{"step", m->step},       {"n_layer", m->n_layer},         {"n_embd", m->n_embd},
              {"n_head", m->n_head},   {"seq_len", m->seq_len},         {"vocab", m->vocab},
              {"moe_experts", m->moe_experts}, {"moe_topk", m->moe_topk},
              {"moe_every", m->moe_every},     {"moe_ffn", m->moe_ffn},
              {"moe_shared", m->moe_shared}};
  for (size_t k = 0; k < sizeof keys / sizeof keys[0] && !e->failed; k++) {
    if (k >= 6 && m->moe_experts == 0) break; /* a dense model: no MoE keys */
    mt_ckpt_put_attr_i64(o.file, keys[k].name, keys[k].v, where, e);
  }
  hid_t ft = mt_ckpt_h5_type(dtype);
  if (ft < 0) mt_ckpt_err_h5(e, "%s", where);
  for (int i = 0; i < s->tt.n && !e->failed; i++) {
    hid_t d = mt_ckpt_h5out_dataset(&o, o.file, s->tt.names[i], ft, s->tt.nd[i], s->tt.dims[i],
                                    H5P_DEFAULT, &off[i], where, e);
    if (d >= 0 && s->tt.attrs[i].tied_to[0])
      mt_ckpt_put_attr_str(d, "tied_to", s->tt.attrs[i].tied_to, where, e);
    if (d >= 0 && H5Dclose(d) < 0) mt_ckpt_err_h5(e, "%s", where);
  }
  if (ft >= 0) H5Tclose(ft);
  if (mt_ckpt_h5out_close(&o, where, e) == 0) {
    int64_t per_elems = (int64_t)(chunk / sizeof(float));
    float *buf = mt_malloc((size_t)per_elems * sizeof(float) + 64);
    uint16_t *half = mt_malloc((size_t)per_elems * sizeof(uint16_t) + 64);
    for (int i = 0; i < s->tt.n && !e->failed; i++) {
      int64_t R = s->tt.ext[i][0], C = s->tt.ext[i][1], per = per_elems / C;
      if (per < 1) {
        mt_err_set(e, "export: rows of %s hold %lld values, more than --chunk-mb holds",
                   s->tt.names[i], (long long)C);
        break;
      }
      for (int64_t r0 = 0; r0 < R && !e->failed; r0 += per) {
        int64_t nr = R - r0 < per ? R - r0 : per;
        if (mt_ckpt_read_region(rd, 0, i, r0, nr, 0, C, buf, NULL, e) != 0) break;
        const void *bytes = buf;
        if (dtype == MT_DT_BF16) {
          for (int64_t k = 0; k < nr * C; k++) half[k] = mt_bf16_from_f32(buf[k]);
          bytes = half;
        }
        if (mt_ckpt_pwrite_full(o.fd, bytes, (size_t)(nr * C) * es,
                                off[i] + r0 * C * (int64_t)es, "write") != 0)
          mt_ckpt_err_sys(e, errno, "%s", where);
      }
    }
    free(buf);
    free(half);
  }
  mt_ckpt_h5out_finish(&o, !e->failed, where, e);
  free(off);
  if (e->failed) unlink(path);
  return e->failed ? -1 : 0;
}

static int export_scoped(const char *spec, const char *path, int dtype, size_t chunk, mt_err *e) {
  char dir[1024];
  mt_ckpt_source s;
  MT_TRY(e, mt_ckpt_fault_init(mt_ckpt_rank(), -1, e) != 0 || mt_ckpt_agree(e) ||
                mt_ckpt_find(spec, dir, sizeof dir, e) != 0 ||
                mt_ckpt_source_open(dir, &s, NULL, NULL, e) != 0);
  mt_err local = {0};
  mt_ckpt_reader rd;
  if (mt_ckpt_reader_open(&rd, &s, &local) == 0) {
    if (mt_ckpt_rank() == 0) export_rank0(&rd, path, dtype, chunk ? chunk : (size_t)64 << 20, &local);
    mt_ckpt_reader_close(&rd);
  }
  mt_ckpt_source_close(&s);
  if (mt_ckpt_agree(&local)) {
    *e = local;
    return mt_err_pass(e);
  }
  return 0;
}

int mt_ckpt_export_h5(const char *spec, const char *path, int dtype, size_t chunk_bytes,
                      mt_err *e) {
  MT_CKPT_RETURN_SCOPED(e, export_scoped(spec, path, dtype, chunk_bytes, e));
}
