/* Hugging Face GPT-2 export and import (see ckpt.h).
 *
 * Names: ours -> transformers' GPT2LMHeadModel state dict ("transformer."
 * prefix; the unprefixed names of GPT2Model files are read too):
 *   wte.weight, wpe.weight              -> transformer.wte.weight, .wpe.weight
 *   blocks.L.ln1 / ln2 .weight/.bias    -> transformer.h.L.ln_1 / ln_2
 *   blocks.L.attn.qkv.weight  [3C, C]   -> transformer.h.L.attn.c_attn.weight [C, 3C]
 *   blocks.L.attn.proj.weight [C, C]    -> transformer.h.L.attn.c_proj.weight (transposed)
 *   blocks.L.mlp.fc.weight    [4C, C]   -> transformer.h.L.mlp.c_fc.weight [C, 4C]
 *   blocks.L.mlp.proj.weight  [C, 4C]   -> transformer.h.L.mlp.c_proj.weight [4C, C]
 *   (biases keep their shape)           -> ... .bias
 *   lnf.weight / .bias                  -> transformer.ln_f.weight / .bias
 * GPT-2's Conv1D keeps weights as in x out, hence the transposes; the LM
 * head is tied to wte and is not stored; q, k, v and the heads lie in the
 * same order in both. The model meshtrain computes is GPT-2's: GELU with the
 * tanh approximation ("gelu_new"), LayerNorm epsilon 1e-5, attention scaled
 * by 1/sqrt(head size). */
#include "ckpt/interop/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HF_PREFIX "transformer."

/* Every GPT-2 tensor of a model of n_layer layers: our name, the Hugging
 * Face name (without the prefix), and whether it is a Conv1D weight
 * (transposed). Built from the layer count, never by parsing a name. */
typedef struct {
  char ours[MT_NAME_MAX], hf[128];
  int transpose;
} hf_entry;

static hf_entry *hf_map(int n_layer, int *n) {
  static const struct {
    const char *ours, *hf;
    int transpose;
  } block[] = {{"ln1.weight", "ln_1.weight", 0},       {"ln1.bias", "ln_1.bias", 0},
               {"attn.qkv.weight", "attn.c_attn.weight", 1},
               {"attn.qkv.bias", "attn.c_attn.bias", 0},
               {"attn.proj.weight", "attn.c_proj.weight", 1},
               {"attn.proj.bias", "attn.c_proj.bias", 0},
               {"ln2.weight", "ln_2.weight", 0},       {"ln2.bias", "ln_2.bias", 0},
               {"mlp.fc.weight", "mlp.c_fc.weight", 1}, {"mlp.fc.bias", "mlp.c_fc.bias", 0},
               {"mlp.proj.weight", "mlp.c_proj.weight", 1},
               {"mlp.proj.bias", "mlp.c_proj.bias", 0}};
  static const struct {
    const char *ours, *hf;
  } top[] = {{"wte.weight", "wte.weight"}, {"wpe.weight", "wpe.weight"},
             {"lnf.weight", "ln_f.weight"}, {"lnf.bias", "ln_f.bias"}};
  int nb = (int)(sizeof block / sizeof block[0]), nt = (int)(sizeof top / sizeof top[0]);
  hf_entry *m = mt_calloc((size_t)(nt + nb * n_layer) + 1, sizeof *m);
  int k = 0;
  for (int i = 0; i < nt; i++, k++) {
    snprintf(m[k].ours, sizeof m[k].ours, "%s", top[i].ours);
    snprintf(m[k].hf, sizeof m[k].hf, "%s", top[i].hf);
  }
  for (int l = 0; l < n_layer; l++)
    for (int i = 0; i < nb; i++, k++) {
      snprintf(m[k].ours, sizeof m[k].ours, "blocks.%d.%s", l, block[i].ours);
      snprintf(m[k].hf, sizeof m[k].hf, "h.%d.%s", l, block[i].hf);
      m[k].transpose = block[i].transpose;
    }
  *n = k;
  return m;
}

/* the entry of our tensor `ours`, or NULL */
static const hf_entry *hf_of_ours(const hf_entry *m, int n, const char *ours) {
  for (int k = 0; k < n; k++)
    if (!strcmp(m[k].ours, ours)) return &m[k];
  return NULL;
}

/* ------------------------------------------------------------------ */
/* config.json                                                         */

static char *read_text(const char *path, long max, mt_err *e) {
  FILE *f = fopen(path, "r");
  if (!f) {
    mt_ckpt_err_sys(e, errno, "cannot read %s", path);
    return NULL;
  }
  char *buf = mt_malloc((size_t)max + 1);
  size_t n = fread(buf, 1, (size_t)max + 1, f);
  fclose(f);
  if ((long)n > max) {
    mt_err_set(e, "%s: more than %ld bytes, larger than a config.json can be", path, max);
    free(buf);
    return NULL;
  }
  buf[n] = '\0';
  return buf;
}

static int json_int(const cJSON *o, const char *key, int *v) {
  const cJSON *x = cJSON_GetObjectItem(o, key);
  if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble > 1e7 ||
      x->valuedouble != (double)(int)x->valuedouble)
    return -1;
  *v = (int)x->valuedouble;
  return 0;
}

int mt_ckpt_hf_read_config(const char *dir, mt_ckpt_gpt2_config *c, mt_err *e) {
  char path[1100];
  snprintf(path, sizeof path, "%s/config.json", dir);
  memset(c, 0, sizeof *c);
  char *text = read_text(path, 1 << 20, e);
  if (!text) return mt_err_pass(e);
  cJSON *o = cJSON_Parse(text);
  free(text);
  int rc = -1;
  const cJSON *mt = cJSON_GetObjectItem(o, "model_type");
  const cJSON *act = cJSON_GetObjectItem(o, "activation_function");
  const cJSON *inner = cJSON_GetObjectItem(o, "n_inner");
  const cJSON *eps = cJSON_GetObjectItem(o, "layer_norm_epsilon");
  const cJSON *tie = cJSON_GetObjectItem(o, "tie_word_embeddings");
  const cJSON *scale = cJSON_GetObjectItem(o, "scale_attn_weights");
  const cJSON *inv = cJSON_GetObjectItem(o, "scale_attn_by_inverse_layer_idx");
  if (!cJSON_IsObject(o)) {
    mt_err_set(e, "%s: not a JSON object", path);
  } else if (!cJSON_IsString(mt) || strcmp(mt->valuestring, "gpt2") != 0) {
    mt_err_set(e, "%s describes a '%.40s' model, not GPT-2 (model_type must be gpt2)", path,
               cJSON_IsString(mt) ? mt->valuestring : "?");
  } else if (json_int(o, "n_layer", &c->n_layer) || json_int(o, "n_embd", &c->n_embd) ||
             json_int(o, "n_head", &c->n_head) || json_int(o, "n_positions", &c->n_positions) ||
             json_int(o, "vocab_size", &c->vocab)) {
    mt_err_set(e, "%s: n_layer, n_embd, n_head, n_positions and vocab_size must be positive "
                  "integers", path);
  } else if (c->n_embd % c->n_head != 0) {
    mt_err_set(e, "%s: n_embd %d is not divisible by n_head %d", path, c->n_embd, c->n_head);
  } else if (inner && !cJSON_IsNull(inner) &&
             !(cJSON_IsNumber(inner) && inner->valuedouble == 4.0 * c->n_embd)) {
    mt_err_set(e, "%s: n_inner is not 4 x n_embd: meshtrain's GPT-2 has an MLP of 4 x n_embd",
               path);
  } else if (act && (!cJSON_IsString(act) || (strcmp(act->valuestring, "gelu_new") != 0 &&
                                              strcmp(act->valuestring, "gelu_pytorch_tanh") != 0))) {
    mt_err_set(e, "%s: activation_function '%.40s' is not GELU with the tanh approximation "
                  "(gelu_new), which meshtrain computes", path,
               cJSON_IsString(act) ? act->valuestring : "?");
  } else if (eps && (!cJSON_IsNumber(eps) || fabs(eps->valuedouble - 1e-5) > 1e-12)) {
    mt_err_set(e, "%s: layer_norm_epsilon is not 1e-5, which meshtrain uses", path);
  } else if (tie && cJSON_IsFalse(tie)) {
    mt_err_set(e, "%s: tie_word_embeddings is false: meshtrain's GPT-2 ties the LM head to wte",
               path);
  } else if ((scale && cJSON_IsFalse(scale)) || (inv && cJSON_IsTrue(inv))) {
    mt_err_set(e, "%s: attention scaled otherwise than by 1/sqrt(head size)", path);
  } else {
    rc = 0;
  }
  cJSON_Delete(o);
  return rc;
}

/* ------------------------------------------------------------------ */
/* export                                                              */

static int mkdir_p(const char *path) {
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* rank 0: write every tensor of the model group, streaming */
static int export_rank0(mt_ckpt_reader *rd, const char *out_dir, int dtype, mt_err *e) {
  const mt_ckpt_source *s = rd->src;
  int n = s->tt.n;
  mt_st_tensor *t = mt_calloc((size_t)n + 1, sizeof *t);
  int *transpose = mt_calloc((size_t)n + 1, sizeof(int));
  int n_map = 0;
  hf_entry *map = hf_map((int)s->meta.n_layer, &n_map);
  for (int i = 0; i < n; i++) {
    const hf_entry *h = hf_of_ours(map, n_map, s->tt.names[i]);
    if (!h) {
      mt_err_set(e, "%s: tensor %s is not part of GPT-2: no Hugging Face name for it", s->dir,
                 s->tt.names[i]);
      break;
    }
    transpose[i] = h->transpose;
    snprintf(t[i].name, sizeof t[i].name, HF_PREFIX "%s", h->hf);
    t[i].dtype = dtype == MT_DT_BF16 ? MT_ST_BF16 : MT_ST_F32;
    t[i].ndim = s->tt.nd[i];
    int64_t R = s->tt.ext[i][0], C = s->tt.ext[i][1];
    if (t[i].ndim == 1) t[i].shape[0] = C;
    else if (transpose[i]) t[i].shape[0] = C, t[i].shape[1] = R;
    else t[i].shape[0] = R, t[i].shape[1] = C;
  }
  char path[1200], tmp[1300];
  snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = -1;
  if (!e->failed && mkdir_p(out_dir) != 0) mt_ckpt_err_sys(e, errno, "cannot create %s", out_dir);
  if (!e->failed && (fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0)
    mt_ckpt_err_sys(e, errno, "cannot create %s", tmp);
  int64_t off = 0;
  if (!e->failed)
    mt_st_write_header(fd, t, n, "{\"format\":\"pt\",\"producer\":\"meshtrain\"}", &off, tmp, e);
  size_t cap = (size_t)16 << 20; /* elements per piece: 64 MiB of floats */
  float *buf = mt_malloc(cap * sizeof(float)), *tbuf = mt_malloc(cap * sizeof(float));
  uint16_t *half = mt_malloc(cap * sizeof(uint16_t));
  size_t es = dtype == MT_DT_BF16 ? 2 : 4;
  for (int i = 0; i < n && !e->failed; i++) {
    int64_t R = s->tt.ext[i][0], C = s->tt.ext[i][1];
    if (!transpose[i]) {
      int64_t per = (int64_t)cap / C > 0 ? (int64_t)cap / C : 1; /* whole rows (C <= cap here) */
      for (int64_t r0 = 0; r0 < R && !e->failed; r0 += per) {
        int64_t nr = R - r0 < per ? R - r0 : per;
        if (mt_ckpt_read_region(rd, 0, i, r0, nr, 0, C, buf, NULL, e) != 0) break;
        const void *data = buf;
        if (es == 2) {
          for (int64_t k = 0; k < nr * C; k++) half[k] = mt_bf16_from_f32(buf[k]);
          data = half;
        }
        mt_st_write_all(fd, data, (size_t)(nr * C) * es, off, tmp, e);
        off += nr * C * (int64_t)es;
      }
    } else {
      /* out x in -> in x out: columns [c0, c0+k) of ours are rows of theirs */
      int64_t k = (int64_t)cap / R > 0 ? (int64_t)cap / R : 1;
      for (int64_t c0 = 0; c0 < C && !e->failed; c0 += k) {
        int64_t nc = C - c0 < k ? C - c0 : k;
        if (mt_ckpt_read_region(rd, 0, i, 0, R, c0, nc, buf, NULL, e) != 0) break;
        for (int64_t r = 0; r < R; r++)
          for (int64_t c = 0; c < nc; c++) tbuf[c * R + r] = buf[r * nc + c];
        const void *data = tbuf;
        if (es == 2) {
          for (int64_t q = 0; q < nc * R; q++) half[q] = mt_bf16_from_f32(tbuf[q]);
          data = half;
        }
        mt_st_write_all(fd, data, (size_t)(nc * R) * es, off, tmp, e);
        off += nc * R * (int64_t)es;
      }
    }
  }
  free(buf);
  free(tbuf);
  free(half);
  if (fd >= 0 && !e->failed && fsync(fd) != 0) mt_ckpt_err_sys(e, errno, "cannot write %s", tmp);
  if (fd >= 0) close(fd);
  if (!e->failed && rename(tmp, path) != 0) mt_ckpt_err_sys(e, errno, "cannot rename %s", tmp);
  if (e->failed && fd >= 0) unlink(tmp);
  if (!e->failed) {
    const mt_ckpt_meta *m = &s->meta;
    char cfg[2048], cpath[1200];
    snprintf(cfg, sizeof cfg,
             "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
             "  \"vocab_size\": %lld,\n  \"n_positions\": %lld,\n  \"n_ctx\": %lld,\n"
             "  \"n_embd\": %lld,\n  \"n_layer\": %lld,\n  \"n_head\": %lld,\n"
             "  \"n_inner\": null,\n  \"activation_function\": \"gelu_new\",\n"
             "  \"layer_norm_epsilon\": 1e-05,\n  \"initializer_range\": 0.02,\n"
             "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
             "  \"scale_attn_weights\": true,\n  \"scale_attn_by_inverse_layer_idx\": false,\n"
             "  \"reorder_and_upcast_attn\": false,\n  \"tie_word_embeddings\": true,\n"
             "  \"bos_token_id\": %lld,\n  \"eos_token_id\": %lld,\n  \"use_cache\": true,\n"
             "  \"torch_dtype\": \"%s\",\n  \"meshtrain_step\": %lld\n}\n",
             (long long)m->vocab, (long long)m->seq_len, (long long)m->seq_len,
             (long long)m->n_embd, (long long)m->n_layer, (long long)m->n_head,
             (long long)(m->vocab - 1), (long long)(m->vocab - 1),
             es == 2 ? "bfloat16" : "float32", (long long)m->step);
    snprintf(cpath, sizeof cpath, "%s/config.json", out_dir);
    if (mt_ckpt_write_file_durable(cpath, cfg) != 0)
      mt_ckpt_err_sys(e, errno, "cannot write %s", cpath);
  }
  free(t);
  free(transpose);
  free(map);
  return e->failed ? -1 : 0;
}

static int export_scoped(const char *ckpt_dir, const char *out_dir, int dtype, mt_err *e) {
  int rank = mt_ckpt_rank();
  mt_err local = {0};
  mt_ckpt_fault_init(rank, -1, &local);
  mt_ckpt_source src;
  if (mt_ckpt_source_open(ckpt_dir, &src, NULL, NULL, &local) != 0) {
    *e = local;
    return mt_err_pass(e);
  }
  mt_ckpt_reader rd;
  if (mt_ckpt_reader_open(&rd, &src, &local) != 0) {
    mt_ckpt_source_close(&src);
    *e = local;
    return mt_err_pass(e);
  }
  if (rank == 0) export_rank0(&rd, out_dir, dtype, &local);
  mt_ckpt_reader_close(&rd);
  mt_ckpt_source_close(&src);
  if (mt_ckpt_agree(&local)) {
    *e = local;
    return mt_err_pass(e);
  }
  return 0;
}

int mt_ckpt_export_hf(const char *ckpt_dir, const char *out_dir, int dtype, mt_err *e) {
  mt_ckpt_h5_scope scope;
  mt_ckpt_h5_scope_begin(&scope);
  int rc = export_scoped(ckpt_dir, out_dir, dtype, e);
  mt_ckpt_h5_scope_end(&scope);
  return rc == 0 ? 0 : mt_err_pass(e);
}

/* ------------------------------------------------------------------ */
/* import                                                              */

/* the tensor of HF name `name` (with or without the prefix), and its file */
static const mt_st_tensor *find_hf(const mt_st_set *s, const char *name, const mt_st_file **f) {
  char full[200];
  snprintf(full, sizeof full, HF_PREFIX "%s", name);
  const mt_st_tensor *t = mt_st_set_find(s, full, f);
  return t ? t : mt_st_set_find(s, name, f);
}

static void shape_text(const int64_t *shape, int nd, char *out, size_t len) {
  out[0] = '\0';
  for (int d = 0; d < nd; d++)
    snprintf(out + strlen(out), len - strlen(out), "%s%lld", d ? ", " : "", (long long)shape[d]);
}

/* the bytes of t (a whole tensor) */
static char *read_bytes(const mt_st_file *f, const mt_st_tensor *t, mt_err *e) {
  char *p = mt_malloc((size_t)t->bytes + 1);
  int64_t done = 0;
  while (done < t->bytes) {
    ssize_t k = pread(f->fd, p + done, (size_t)(t->bytes - done), (off_t)(t->offset + done));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      mt_ckpt_err_read_sys(e, k == 0 ? EIO : errno, "%s: cannot read tensor %s", f->path, t->name);
      free(p);
      return NULL;
    }
    done += k;
  }
  return p;
}

/* rank 0: every parameter of reg from the directory's safetensors into mem
 * (reg's flat layout, padding rows zero), checked as a save checks what it
 * writes: every tensor GPT-2's, of its dtype and shape, finite */
static int import_rank0(const char *dir, int n_layer, const mt_registry *reg, float *mem,
                        mt_err *e) {
  mt_st_set set;
  MT_TRY(e, mt_st_open_dir(dir, &set, e));
  int n_map = 0;
  hf_entry *map = hf_map(n_layer, &n_map);
  /* every tensor of the files is GPT-2's (or a buffer transformers keeps) */
  for (int fi = 0; fi < set.n_files && !e->failed; fi++)
    for (int k = 0; k < set.files[fi].n && !e->failed; k++) {
      const char *nm = set.files[fi].t[k].name;
      const char *bare = !strncmp(nm, HF_PREFIX, strlen(HF_PREFIX)) ? nm + strlen(HF_PREFIX) : nm;
      size_t L = strlen(bare);
      if ((L > 10 && !strcmp(bare + L - 10, ".attn.bias")) ||
          (L > 17 && !strcmp(bare + L - 17, ".attn.masked_bias")) ||
          !strcmp(bare, "lm_head.weight"))
        continue; /* the causal-mask buffers; the tied head (checked below) */
      int known = 0;
      for (int k2 = 0; k2 < n_map && !known; k2++) known = !strcmp(map[k2].hf, bare);
      if (!known)
        mt_err_set(e, "%s: tensor %s is not part of GPT2LMHeadModel with config.json's layers",
                   set.files[fi].path, nm);
    }
  float *scratch = NULL;
  size_t scratch_cap = 0;
  for (int i = 0; i < reg->n && !e->failed; i++) {
    const mt_tensor *t = &reg->t[i];
    const hf_entry *h = hf_of_ours(map, n_map, t->name);
    if (!h) {
      mt_err_set(e, "the model has tensor %s, which GPT-2 does not", t->name);
      break;
    }
    const char *hf = h->hf;
    int tr = h->transpose;
    const mt_st_file *f = NULL;
    const mt_st_tensor *x = find_hf(&set, hf, &f);
    int64_t want[MT_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) want[d] = t->shape[d];
    if (tr) want[0] = t->shape[1], want[1] = t->shape[0];
    char a[80], b[80];
    shape_text(want, t->ndim, b, sizeof b);
    if (!x) {
      mt_err_set(e, "%s: no tensor %s%s (GPT-2 with this config.json needs it, shape [%s])", dir,
                 HF_PREFIX, hf, b);
      break;
    }
    int same = x->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = x->shape[d] == want[d];
    if (!same) {
      shape_text(x->shape, x->ndim, a, sizeof a);
      mt_err_set(e, "%s: %s has shape [%s]; the GPT-2 of config.json needs [%s]", f->path,
                 x->name, a, b);
      break;
    }
    /* ours: rows of t->local_shape[1] (padded) floats from t->offset */
    int64_t R = t->ndim == 2 ? t->shape[0] : 1, C = t->shape[t->ndim - 1];
    int64_t Lc = t->ndim == 2 ? t->local_shape[1] : t->local_shape[0];
    int64_t Lr = t->ndim == 2 ? t->local_shape[0] : 1;
    float *dst = mem + t->offset;
    memset(dst, 0, (size_t)(Lr * Lc) * sizeof(float)); /* padding rows and columns */
    size_t need = (size_t)(R * C);
    if (need > scratch_cap) {
      free(scratch);
      scratch = mt_malloc(need * sizeof(float));
      scratch_cap = need;
    }
    if (mt_st_read_f32(f, x, 0, R * C, scratch, e) != 0) break;
    size_t bad = mt_ckpt_count_nonfinite(scratch, need);
    if (bad) {
      mt_err_set(e, "%s: tensor %s holds %zu NaN or Inf values: not imported (a checkpoint of "
                    "them would not verify, nor train)", f->path, x->name, bad);
      break;
    }
    for (int64_t r = 0; r < R; r++)
      for (int64_t c = 0; c < C; c++) dst[r * Lc + c] = tr ? scratch[c * R + r] : scratch[r * C + c];
  }
  /* a stored LM head must be the tied one */
  const mt_st_file *fh = NULL, *fw = NULL;
  const mt_st_tensor *head = mt_st_set_find(&set, "lm_head.weight", &fh);
  const mt_st_tensor *wte = find_hf(&set, "wte.weight", &fw);
  if (!e->failed && head && wte) {
    int same = head->bytes == wte->bytes && head->dtype == wte->dtype;
    char *p = same ? read_bytes(fh, head, e) : NULL, *q = p ? read_bytes(fw, wte, e) : NULL;
    same = same && p && q && memcmp(p, q, (size_t)head->bytes) == 0;
    free(p);
    free(q);
    if (!same && !e->failed)
      mt_err_set(e, "%s: lm_head.weight differs from wte.weight: meshtrain's GPT-2 ties them", dir);
  }
  free(scratch);
  free(map);
  mt_st_close_dir(&set);
  return e->failed ? -1 : 0;
}

int mt_ckpt_import_hf(const char *dir, const mt_ckpt_gpt2_config *c, const mt_registry *reg,
                      const char *out_root, mt_ckpt_mode mode, mt_err *e) {
  int rank = mt_ckpt_rank(), size = mt_ckpt_size();
  mt_err local = {0};
  float *mem = NULL;
  if (rank == 0) {
    mem = malloc((reg->numel_local + 1) * sizeof(float));
    if (!mem) mt_err_set(&local, "import: out of memory for %zu parameters", reg->numel_local);
    else import_rank0(dir, c->n_layer, reg, mem, &local);
  }
  mt_mesh mesh;
  memset(&mesh, 0, sizeof mesh);
  mesh.world_rank = rank;
  mesh.world_size = size;
  if (!mt_ckpt_agree(&local)) {
    /* rank 0 holds the whole model, the others nothing */
    mt_flat_range range = {.begin = 0, .len = reg->numel_local, .mem = mem};
    mt_ckpt_state st;
    memset(&st, 0, sizeof st);
    st.ranges[MT_CKPT_MODEL] = &range;
    st.n_ranges[MT_CKPT_MODEL] = rank == 0;
    mt_ckpt_meta m = {.n_layer = c->n_layer, .n_embd = c->n_embd, .n_head = c->n_head,
                      .seq_len = c->n_positions, .vocab = c->vocab, .dp = 1, .tp = 1, .pp = 1,
                      .cp = 1, .zero = 0, .world = 1, .ep = 1, .etp = 1};
    char ini[512];
    snprintf(ini, sizeof ini,
             "# imported from a Hugging Face GPT-2 (%s)\n[model]\npreset = custom\n"
             "n_layer = %d\nn_embd = %d\nn_head = %d\nseq_len = %d\nvocab_size = %d\n",
             dir, c->n_layer, c->n_embd, c->n_head, c->n_positions, c->vocab);
    mt_ckpt_save_opts opts = {.mode = mode, .keep = 0, .test_crash = MT_CKPT_CRASH_NONE,
                              .config_ini = ini};
    mt_ckpt_file_opts fo = {.groups = 1, .dtype = {MT_DT_F32, MT_DT_F32, MT_DT_F32}};
    mt_ckpt_save_with(out_root, &m, reg, &mesh, &st, &opts, &fo, NULL, &local);
  }
  free(mem);
  if (local.failed) {
    *e = local;
    return mt_err_pass(e);
  }
  return 0;
}
