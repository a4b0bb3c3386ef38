/* Hugging Face export and import of the tensors (see ckpt.h; config.json
 * is hf_config.c's).
 *
 * A name map, built from the model's sizes (never by parsing a name),
 * pairs each Hugging Face tensor with a box of one of our tensors seen as
 * 2-D (rows: every dim but the last; a vector is one row): most are a whole
 * tensor, a Mixtral expert's w1, w3 and w2 are rows of our fused expert
 * tensors. Export writes each box (transposed for GPT-2's Conv1D);
 * import fills each box and checks that the boxes of a tensor cover it.
 *
 * GPT-2 -> GPT2LMHeadModel ("transformer." prefix; GPT2Model files without
 * it are read too):
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
 * same order in both.
 *
 * Llama -> LlamaForCausalLM ("model." prefix; LlamaModel files without it
 * are read too), nn.Linear weights out x in as ours, nothing transposed:
 *   wte.weight [V, C]                   -> model.embed_tokens.weight
 *   blocks.L.ln1.weight, .ln2.weight    -> model.layers.L.input_layernorm.weight,
 *                                          .post_attention_layernorm.weight
 *   blocks.L.attn.q / k / v / proj      -> model.layers.L.self_attn.q_proj / k_proj /
 *                                          v_proj / o_proj (.weight, .bias with biases)
 *   blocks.L.mlp.gate / up / proj       -> model.layers.L.mlp.gate_proj / up_proj / down_proj
 *   lnf.weight                          -> model.norm.weight
 *   lm_head.weight (untied)             -> lm_head.weight
 * Our rotary positions turn channel pairs (d, d + head size / 2), Hugging
 * Face's rotate_half, so q and k rows keep their order (no permutation).
 *
 * Llama with experts in every block -> MixtralForCausalLM, per block L:
 *   blocks.L.moe.router.weight [E, C]   -> model.layers.L.block_sparse_moe.gate.weight
 *   blocks.L.moe.experts.fc.weight [E, 2F, C]: of expert e, rows [0, F) (gate)
 *                                       -> ...block_sparse_moe.experts.e.w1.weight [F, C],
 *                                          rows [F, 2F) (up) -> ...experts.e.w3.weight
 *   blocks.L.moe.experts.proj.weight [E, C, F]: expert e
 *                                       -> ...experts.e.w2.weight [C, F] */
#include "ckpt/interop/hf_internal.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* the name map                                                        */

typedef struct {
  char ours[MT_NAME_MAX], hf[160];
  int64_t rows, cols;     /* our tensor seen as 2-D */
  int64_t r0, nr, c0, nc; /* the box of it the Hugging Face tensor holds */
  int transpose;          /* GPT-2's Conv1D: theirs is the box transposed */
  int ndim;               /* the Hugging Face tensor's shape */
  int64_t shape[MT_MAX_DIMS];
} hf_entry;

typedef struct {
  hf_entry *e;
  int n, cap;
  const char *prefix; /* of every name but lm_head's; files of the bare model lack it */
  const char *cls;
} hf_map;

/* a box of our tensor `ours` (rows x cols) as the tensor `hf` of shape [d0]
 * (d1 = 0) or [d0, d1] */
static hf_entry *add_box(hf_map *m, const char *ours, int64_t rows, int64_t cols, const char *hf,
                         int64_t r0, int64_t nr, int64_t c0, int64_t nc, int64_t d0, int64_t d1) {
  if (m->n == m->cap) {
    m->cap = m->cap ? 2 * m->cap : 64;
    m->e = realloc(m->e, (size_t)m->cap * sizeof *m->e);
    if (!m->e) mt_die("hf: out of memory for the name map");
  }
  hf_entry *x = &m->e[m->n++];
  *x = (hf_entry){.rows = rows, .cols = cols, .r0 = r0, .nr = nr, .c0 = c0, .nc = nc,
                  .ndim = d1 ? 2 : 1, .shape = {d0, d1}};
  snprintf(x->ours, sizeof x->ours, "%s", ours);
  snprintf(x->hf, sizeof x->hf, "%s", hf);
  return x;
}

/* our whole tensor [d0] (d1 = 0) or [d0, d1] as theirs of the same shape */
static hf_entry *add(hf_map *m, const char *ours, const char *hf, int64_t d0, int64_t d1) {
  int64_t rows = d1 ? d0 : 1, cols = d1 ? d1 : d0;
  return add_box(m, ours, rows, cols, hf, 0, rows, 0, cols, d0, d1);
}

/* ... transposed (GPT-2's Conv1D: [d0, d1] ours, [d1, d0] theirs) */
static void add_t(hf_map *m, const char *ours, const char *hf, int64_t d0, int64_t d1) {
  hf_entry *x = add(m, ours, hf, d0, d1);
  x->transpose = 1;
  x->shape[0] = d1;
  x->shape[1] = d0;
}

/* GPT-2's block l: our tensor o as transformer.h.l.h ([d0] or [d0, d1];
 * transposed: a Conv1D weight) */
static void gpt2_block(hf_map *m, int l, const char *o, const char *h, int64_t d0, int64_t d1,
                       int transposed) {
  char a[MT_NAME_MAX], b[160];
  snprintf(a, sizeof a, "blocks.%d.%s", l, o);
  snprintf(b, sizeof b, "transformer.h.%d.%s", l, h);
  if (transposed) add_t(m, a, b, d0, d1);
  else add(m, a, b, d0, d1);
}

static void map_gpt2(hf_map *m, const mt_ckpt_hf_config *c) {
  const int64_t C = c->n_embd;
  m->prefix = "transformer.";
  add(m, "wte.weight", "transformer.wte.weight", c->vocab, C);
  add(m, "wpe.weight", "transformer.wpe.weight", c->seq_len, C);
  for (int l = 0; l < c->n_layer; l++) {
    gpt2_block(m, l, "ln1.weight", "ln_1.weight", C, 0, 0);
    gpt2_block(m, l, "ln1.bias", "ln_1.bias", C, 0, 0);
    gpt2_block(m, l, "attn.qkv.weight", "attn.c_attn.weight", 3 * C, C, 1);
    gpt2_block(m, l, "attn.qkv.bias", "attn.c_attn.bias", 3 * C, 0, 0);
    gpt2_block(m, l, "attn.proj.weight", "attn.c_proj.weight", C, C, 1);
    gpt2_block(m, l, "attn.proj.bias", "attn.c_proj.bias", C, 0, 0);
    gpt2_block(m, l, "ln2.weight", "ln_2.weight", C, 0, 0);
    gpt2_block(m, l, "ln2.bias", "ln_2.bias", C, 0, 0);
    gpt2_block(m, l, "mlp.fc.weight", "mlp.c_fc.weight", 4 * C, C, 1);
    gpt2_block(m, l, "mlp.fc.bias", "mlp.c_fc.bias", 4 * C, 0, 0);
    gpt2_block(m, l, "mlp.proj.weight", "mlp.c_proj.weight", C, 4 * C, 1);
    gpt2_block(m, l, "mlp.proj.bias", "mlp.c_proj.bias", C, 0, 0);
  }
  add(m, "lnf.weight", "transformer.ln_f.weight", C, 0);
  add(m, "lnf.bias", "transformer.ln_f.bias", C, 0);
}

/* a linear of ours (out x in, bias when biased) as theirs */
static void add_linear(hf_map *m, int l, const char *ours, const char *hf, int64_t out,
                       int64_t in, int bias) {
  char a[MT_NAME_MAX], b[160];
  snprintf(a, sizeof a, "blocks.%d.%s.weight", l, ours);
  snprintf(b, sizeof b, "model.layers.%d.%s.weight", l, hf);
  add(m, a, b, out, in);
  if (!bias) return;
  snprintf(a, sizeof a, "blocks.%d.%s.bias", l, ours);
  snprintf(b, sizeof b, "model.layers.%d.%s.bias", l, hf);
  add(m, a, b, out, 0);
}

/* Mixtral's block L: the router and each expert's w1 (gate), w3 (up), w2 */
static void map_experts(hf_map *m, int l, const mt_ckpt_hf_config *c) {
  const int64_t C = c->n_embd, F = c->moe_ffn, E = c->moe_experts;
  char fc[MT_NAME_MAX], proj[MT_NAME_MAX], b[160];
  add_linear(m, l, "moe.router", "block_sparse_moe.gate", E, C, 0);
  snprintf(fc, sizeof fc, "blocks.%d.moe.experts.fc.weight", l);     /* [E, 2F, C] */
  snprintf(proj, sizeof proj, "blocks.%d.moe.experts.proj.weight", l); /* [E, C, F] */
  for (int64_t e = 0; e < E; e++) {
    const char *pre = "model.layers.%d.block_sparse_moe.experts.%lld.%s";
    snprintf(b, sizeof b, pre, l, (long long)e, "w1.weight");
    add_box(m, fc, E * 2 * F, C, b, e * 2 * F, F, 0, C, F, C);
    snprintf(b, sizeof b, pre, l, (long long)e, "w2.weight");
    add_box(m, proj, E * C, F, b, e * C, C, 0, F, C, F);
    snprintf(b, sizeof b, pre, l, (long long)e, "w3.weight");
    add_box(m, fc, E * 2 * F, C, b, e * 2 * F + F, F, 0, C, F, C);
  }
}

static void map_llama(hf_map *m, const mt_ckpt_hf_config *c) {
  const int64_t C = c->n_embd, Ckv = (int64_t)c->n_kv_head * (C / c->n_head), F = c->ffn;
  const int b = c->bias;
  char a[MT_NAME_MAX], h[160];
  m->prefix = "model.";
  add(m, "wte.weight", "model.embed_tokens.weight", c->vocab, C);
  for (int l = 0; l < c->n_layer; l++) {
    snprintf(a, sizeof a, "blocks.%d.ln1.weight", l);
    snprintf(h, sizeof h, "model.layers.%d.input_layernorm.weight", l);
    add(m, a, h, C, 0);
    add_linear(m, l, "attn.q", "self_attn.q_proj", C, C, b);
    add_linear(m, l, "attn.k", "self_attn.k_proj", Ckv, C, b);
    add_linear(m, l, "attn.v", "self_attn.v_proj", Ckv, C, b);
    add_linear(m, l, "attn.proj", "self_attn.o_proj", C, C, b);
    snprintf(a, sizeof a, "blocks.%d.ln2.weight", l);
    snprintf(h, sizeof h, "model.layers.%d.post_attention_layernorm.weight", l);
    add(m, a, h, C, 0);
    if (c->moe_experts > 0) {
      map_experts(m, l, c);
      continue;
    }
    add_linear(m, l, "mlp.gate", "mlp.gate_proj", F, C, b);
    add_linear(m, l, "mlp.up", "mlp.up_proj", F, C, b);
    add_linear(m, l, "mlp.proj", "mlp.down_proj", C, F, b);
  }
  add(m, "lnf.weight", "model.norm.weight", C, 0);
  if (!c->tied) add(m, "lm_head.weight", "lm_head.weight", c->vocab, C);
}

static hf_map map_of(const mt_ckpt_hf_config *c) {
  hf_map m = {.cls = mt_ckpt_hf_class(c)};
  if (mt_hf_family(c) == MT_HF_GPT2) map_gpt2(&m, c);
  else map_llama(&m, c);
  return m;
}

static int64_t numel(const hf_entry *x) {
  int64_t n = 1;
  for (int d = 0; d < x->ndim; d++) n *= x->shape[d];
  return n;
}

static void shape_text(const int64_t *shape, int nd, char *out, size_t len) {
  out[0] = '\0';
  for (int d = 0; d < nd; d++)
    snprintf(out + strlen(out), len - strlen(out), "%s%lld", d ? ", " : "", (long long)shape[d]);
}

/* ------------------------------------------------------------------ */
/* export                                                              */

/* the checkpoint's tensor of each entry (ti), checked: every entry's tensor
 * there with the shape the map expects, every tensor there in the map */
static int match_checkpoint(const mt_ckpt_source *s, const hf_map *m, int *ti, mt_err *e) {
  int *used = mt_calloc((size_t)s->tt.n + 1, sizeof(int));
  for (int k = 0; k < m->n && !e->failed; k++) {
    const hf_entry *x = &m->e[k];
    ti[k] = -1;
    for (int i = 0; i < s->tt.n && ti[k] < 0; i++)
      if (!strcmp(s->tt.names[i], x->ours)) ti[k] = i;
    if (ti[k] < 0) {
      mt_err_set(e, "%s: no tensor %s, which %s of these sizes needs (for %s)", s->dir, x->ours,
                 m->cls, x->hf);
    } else if (s->tt.ext[ti[k]][0] != x->rows || s->tt.ext[ti[k]][1] != x->cols) {
      mt_err_set(e, "%s: tensor %s is [%lld, %lld] (as 2-D); %s of these sizes needs [%lld, "
                    "%lld]", s->dir, x->ours, (long long)s->tt.ext[ti[k]][0],
                 (long long)s->tt.ext[ti[k]][1], m->cls, (long long)x->rows,
                 (long long)x->cols);
    } else {
      used[ti[k]] = 1;
    }
  }
  for (int i = 0; i < s->tt.n && !e->failed; i++)
    if (!used[i])
      mt_err_set(e, "%s: tensor %s is not part of %s: no Hugging Face name for it", s->dir,
                 s->tt.names[i], m->cls);
  free(used);
  return e->failed ? -1 : 0;
}

/* buffers of one export: cap floats each */
typedef struct {
  float *buf, *tbuf;
  uint16_t *half;
  size_t cap, es;
} piece;

/* write n floats of p (converted to the output's type) at *off */
static int put_floats(int fd, piece *p, const float *x, int64_t n, int64_t *off,
                      const char *path, mt_err *e) {
  const void *data = x;
  if (p->es == 2) {
    for (int64_t k = 0; k < n; k++) p->half[k] = mt_bf16_from_f32(x[k]);
    data = p->half;
  }
  MT_TRY(e, mt_st_write_all(fd, data, (size_t)n * p->es, *off, path, e));
  *off += n * (int64_t)p->es;
  return 0;
}

/* the box of entry x (our tensor ti) into fd at *off, streaming */
static int write_entry(mt_ckpt_reader *rd, int ti, const hf_entry *x, int fd, piece *p,
                       int64_t *off, const char *path, mt_err *e) {
  if (!x->transpose) { /* whole rows of the box at a time */
    int64_t per = (int64_t)p->cap / x->nc > 0 ? (int64_t)p->cap / x->nc : 1;
    for (int64_t r = 0; r < x->nr; r += per) {
      int64_t k = x->nr - r < per ? x->nr - r : per;
      MT_TRY(e, mt_ckpt_read_region(rd, 0, ti, x->r0 + r, k, x->c0, x->nc, p->buf, NULL, e));
      MT_TRY(e, put_floats(fd, p, p->buf, k * x->nc, off, path, e));
    }
    return 0;
  }
  /* out x in -> in x out: columns [c, c+k) of ours are rows of theirs */
  const int64_t R = x->nr;
  int64_t per = (int64_t)p->cap / R > 0 ? (int64_t)p->cap / R : 1;
  for (int64_t c = 0; c < x->nc; c += per) {
    int64_t k = x->nc - c < per ? x->nc - c : per;
    MT_TRY(e, mt_ckpt_read_region(rd, 0, ti, x->r0, R, x->c0 + c, k, p->buf, NULL, e));
    for (int64_t r = 0; r < R; r++)
      for (int64_t q = 0; q < k; q++) p->tbuf[q * R + r] = p->buf[r * k + q];
    MT_TRY(e, put_floats(fd, p, p->tbuf, k * R, off, path, e));
  }
  return 0;
}

/* the file name of shard k of n (one shard: model.safetensors) */
static void shard_name(int k, int n, char *out, size_t len) {
  if (n == 1) snprintf(out, len, "model.safetensors");
  else snprintf(out, len, "model-%05d-of-%05d.safetensors", k + 1, n);
}

/* The shards of an earlier export into dir that this one (n shards) did not
 * write over: model-K-of-M.safetensors with M != n (an index would not name
 * them, a reader globbing the directory would read them) */
static void remove_stale_shards(const char *dir, int n, mt_err *e) {
  DIR *d = opendir(dir);
  if (!d) return;
  char path[4096];
  for (struct dirent *x; !e->failed && (x = readdir(d));) {
    int k, m, used = 0;
    if (sscanf(x->d_name, "model-%5d-of-%5d.safetensors%n", &k, &m, &used) != 2 ||
        x->d_name[used] != '\0' || m == n)
      continue;
    snprintf(path, sizeof path, "%s/%s", dir, x->d_name);
    if (unlink(path) != 0 && errno != ENOENT) mt_ckpt_err_sys(e, errno, "cannot remove %s", path);
  }
  closedir(d);
}

/* entries [k0, k1) into out_dir/<name>.tmp: header, then each box */
static int write_shard(mt_ckpt_reader *rd, const hf_map *m, const int *ti, int k0, int k1,
                       int dtype, piece *p, const char *tmp, mt_err *e) {
  mt_st_tensor *t = mt_calloc((size_t)(k1 - k0) + 1, sizeof *t);
  for (int k = k0; k < k1; k++) {
    mt_st_tensor *y = &t[k - k0];
    snprintf(y->name, sizeof y->name, "%s", m->e[k].hf);
    y->dtype = dtype == MT_DT_BF16 ? MT_ST_BF16 : MT_ST_F32;
    y->ndim = m->e[k].ndim;
    memcpy(y->shape, m->e[k].shape, sizeof y->shape);
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int64_t off = 0;
  if (fd < 0) mt_ckpt_err_sys(e, errno, "cannot create %s", tmp);
  else mt_st_write_header(fd, t, k1 - k0, "{\"format\":\"pt\",\"producer\":\"meshtrain\"}", &off,
                          tmp, e);
  for (int k = k0; k < k1 && !e->failed; k++)
    write_entry(rd, ti[k], &m->e[k], fd, p, &off, tmp, e);
  if (fd >= 0 && !e->failed && fsync(fd) != 0) mt_ckpt_err_sys(e, errno, "cannot write %s", tmp);
  if (fd >= 0) close(fd);
  free(t);
  return e->failed ? -1 : 0;
}

/* model.safetensors.index.json: the total bytes of tensor data and each
 * tensor's shard (malloc'd text) */
static char *index_json(const hf_map *m, const int *shard, int n_shards, int64_t total) {
  cJSON *o = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(o, "metadata");
  cJSON_AddNumberToObject(meta, "total_size", (double)total);
  cJSON *wm = cJSON_AddObjectToObject(o, "weight_map");
  char name[64];
  for (int k = 0; k < m->n; k++) {
    shard_name(shard[k], n_shards, name, sizeof name);
    cJSON_AddStringToObject(wm, m->e[k].hf, name);
  }
  char *text = cJSON_Print(o);
  cJSON_Delete(o);
  return text;
}

/* rank 0: every tensor of the model group, streaming, into one file or
 * shards of at most max_shard_bytes; then the index and config.json */
static int export_rank0(mt_ckpt_reader *rd, const char *out_dir, const mt_ckpt_hf_export_opts *o,
                        mt_err *e) {
  const mt_ckpt_source *s = rd->src;
  hf_map m = map_of(o->model);
  int *ti = mt_calloc((size_t)m.n + 1, sizeof(int)), *shard = mt_calloc((size_t)m.n + 1, sizeof(int));
  piece p = {.cap = (size_t)16 << 20, .es = o->dtype == MT_DT_BF16 ? 2 : 4};
  int n_shards = 1;
  int64_t total = 0, in_shard = 0;
  if (mt_ckpt_hf_check_exportable(o->model, s->dir, e) == 0) match_checkpoint(s, &m, ti, e);
  for (int k = 0; k < m.n && !e->failed; k++) { /* in order; a shard full starts the next */
    int64_t bytes = numel(&m.e[k]) * (int64_t)p.es;
    if (o->max_shard_bytes > 0 && in_shard > 0 && in_shard + bytes > o->max_shard_bytes) {
      n_shards++;
      in_shard = 0;
    }
    shard[k] = n_shards - 1;
    in_shard += bytes;
    total += bytes;
    if ((size_t)m.e[k].nc > p.cap) p.cap = (size_t)m.e[k].nc;
    if ((size_t)m.e[k].nr > p.cap) p.cap = (size_t)m.e[k].nr;
  }
  p.buf = mt_malloc(p.cap * sizeof(float));
  p.tbuf = mt_malloc(p.cap * sizeof(float));
  p.half = mt_malloc(p.cap * sizeof(uint16_t));
  if (!e->failed && mt_ckpt_mkdir_p(out_dir) != 0) mt_ckpt_err_sys(e, errno, "cannot create %s", out_dir);
  char name[64], path[1200], tmp[1300];
  int written = 0; /* shards written as .tmp */
  for (int k0 = 0; k0 < m.n && !e->failed; written++) {
    int k1 = k0;
    while (k1 < m.n && shard[k1] == shard[k0]) k1++;
    shard_name(shard[k0], n_shards, name, sizeof name);
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", out_dir, name);
    write_shard(rd, &m, ti, k0, k1, o->dtype, &p, tmp, e);
    k0 = k1;
  }
  /* all written: each into place, then the index, then config.json */
  for (int k = 0; k < written; k++) {
    shard_name(k, n_shards, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", out_dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (e->failed) unlink(tmp);
    else if (rename(tmp, path) != 0) mt_ckpt_err_sys(e, errno, "cannot rename %s", tmp);
  }
  /* the other form's file of an earlier export would be read first (a
   * single file) or name shards no longer there (an index): it goes */
  snprintf(path, sizeof path, "%s/%s", out_dir,
           n_shards > 1 ? "model.safetensors" : "model.safetensors.index.json");
  if (!e->failed && unlink(path) != 0 && errno != ENOENT)
    mt_ckpt_err_sys(e, errno, "cannot remove %s", path);
  if (!e->failed) remove_stale_shards(out_dir, n_shards, e);
  if (!e->failed && n_shards > 1) {
    char *text = index_json(&m, shard, n_shards, total);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", out_dir);
    if (mt_ckpt_write_file_durable(path, text) != 0)
      mt_ckpt_err_sys(e, errno, "cannot write %s", path);
    free(text);
  }
  if (!e->failed) {
    char *text = mt_hf_config_json(o->model, o->dtype, s->meta.step);
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    if (mt_ckpt_write_file_durable(path, text) != 0)
      mt_ckpt_err_sys(e, errno, "cannot write %s", path);
    free(text);
  }
  free(p.buf);
  free(p.tbuf);
  free(p.half);
  free(ti);
  free(shard);
  free(m.e);
  return e->failed ? -1 : 0;
}

static int export_scoped(const char *ckpt_dir, const char *out_dir,
                         const mt_ckpt_hf_export_opts *o, mt_err *e) {
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
  if (rank == 0) export_rank0(&rd, out_dir, o, &local);
  mt_ckpt_reader_close(&rd);
  mt_ckpt_source_close(&src);
  if (mt_ckpt_agree(&local)) {
    *e = local;
    return mt_err_pass(e);
  }
  return 0;
}

int mt_ckpt_export_hf(const char *ckpt_dir, const char *out_dir, const mt_ckpt_hf_export_opts *o,
                      mt_err *e) {
  MT_CKPT_RETURN_SCOPED(e, export_scoped(ckpt_dir, out_dir, o, e));
}

/* ------------------------------------------------------------------ */
/* import                                                              */

/* the tensor of HF name `name` (or without the map's prefix), and its file */
static const mt_st_tensor *find_hf(const mt_st_set *s, const hf_map *m, const char *name,
                                   const mt_st_file **f) {
  const mt_st_tensor *t = mt_st_set_find(s, name, f);
  size_t n = strlen(m->prefix);
  if (!t && !strncmp(name, m->prefix, n)) t = mt_st_set_find(s, name + n, f);
  return t;
}

/* is a file's tensor name one of the map's (with or without the prefix)? */
static int known(const hf_map *m, const char *nm) {
  size_t n = strlen(m->prefix);
  for (int k = 0; k < m->n; k++)
    if (!strcmp(m->e[k].hf, nm) || (!strncmp(m->e[k].hf, m->prefix, n) && !strcmp(m->e[k].hf + n, nm)))
      return 1;
  return 0;
}

/* buffers transformers stores beside the parameters: GPT-2's causal masks,
 * an old Llama's rotary frequencies */
static int is_buffer(const char *nm) {
  static const char *const ends[] = {".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq"};
  size_t L = strlen(nm);
  for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
    size_t k = strlen(ends[i]);
    if (L > k && !strcmp(nm + L - k, ends[i])) return 1;
  }
  return 0;
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

/* a stored lm_head of a tied model must be the embedding */
static int check_tied_head(const mt_st_set *set, const hf_map *m, const char *dir, mt_err *e) {
  const mt_st_file *fh = NULL, *fw = NULL;
  const mt_st_tensor *head = mt_st_set_find(set, "lm_head.weight", &fh);
  const mt_st_tensor *wte = find_hf(set, m, m->e[0].hf, &fw); /* the map's first: wte */
  if (!head || !wte) return 0;
  int same = head->bytes == wte->bytes && head->dtype == wte->dtype;
  char *p = same ? read_bytes(fh, head, e) : NULL, *q = p ? read_bytes(fw, wte, e) : NULL;
  same = same && p && q && memcmp(p, q, (size_t)head->bytes) == 0;
  free(p);
  free(q);
  if (!same && !e->failed)
    mt_err_set(e, "%s: lm_head.weight differs from %s: config.json ties them "
                  "(tie_word_embeddings)", dir, m->e[0].hf + strlen(m->prefix));
  return e->failed ? -1 : 0;
}

/* entry x's Hugging Face tensor into its box of dst (our tensor's local
 * memory, rows of Lc floats): found, of its shape, finite */
static int import_entry(const mt_st_set *set, const hf_map *m, const hf_entry *x, float *dst,
                        int64_t Lc, float **scratch, size_t *cap, const char *dir, mt_err *e) {
  const mt_st_file *f = NULL;
  const mt_st_tensor *t = find_hf(set, m, x->hf, &f);
  char a[80], b[80];
  shape_text(x->shape, x->ndim, b, sizeof b);
  if (!t) {
    mt_err_set(e, "%s: no tensor %s (%s with this config.json needs it, shape [%s])", dir, x->hf,
               m->cls, b);
    return -1;
  }
  int same = t->ndim == x->ndim;
  for (int d = 0; same && d < x->ndim; d++) same = t->shape[d] == x->shape[d];
  if (!same) {
    shape_text(t->shape, t->ndim, a, sizeof a);
    mt_err_set(e, "%s: %s has shape [%s]; the %s of config.json needs [%s]", f->path, t->name, a,
               m->cls, b);
    return -1;
  }
  size_t n = (size_t)numel(x);
  if (n > *cap) {
    free(*scratch);
    *scratch = mt_malloc(n * sizeof(float));
    *cap = n;
  }
  float *v = *scratch;
  MT_TRY(e, mt_st_read_f32(f, t, 0, (int64_t)n, v, e));
  size_t bad = mt_ckpt_count_nonfinite(v, n);
  if (bad) {
    mt_err_set(e, "%s: tensor %s holds %zu NaN or Inf values: not imported (a checkpoint of "
                  "them would not verify, nor train)", f->path, t->name, bad);
    return -1;
  }
  for (int64_t r = 0; r < x->nr; r++)
    for (int64_t c = 0; c < x->nc; c++)
      dst[(x->r0 + r) * Lc + x->c0 + c] = x->transpose ? v[c * x->nr + r] : v[r * x->nc + c];
  return 0;
}

/* rank 0: every parameter of reg from the directory's safetensors into mem
 * (reg's flat layout, padding rows zero), checked as a save checks what it
 * writes: every tensor the class's, of its dtype and shape, finite */
static int import_rank0(const char *dir, const mt_ckpt_hf_config *c, const mt_registry *reg,
                        float *mem, mt_err *e) {
  mt_st_set set;
  MT_TRY(e, mt_st_open_dir(dir, &set, e));
  hf_map m = map_of(c);
  /* every tensor of the files is the class's (or a buffer transformers keeps) */
  for (int fi = 0; fi < set.n_files && !e->failed; fi++)
    for (int k = 0; k < set.files[fi].n && !e->failed; k++) {
      const char *nm = set.files[fi].t[k].name;
      if (!known(&m, nm) && !is_buffer(nm) && !(c->tied && !strcmp(nm, "lm_head.weight")))
        mt_err_set(e, "%s: tensor %s is not part of %s with config.json's sizes",
                   set.files[fi].path, nm, m.cls);
    }
  float *scratch = NULL;
  size_t cap = 0;
  for (int i = 0; i < reg->n && !e->failed; i++) {
    const mt_tensor *t = &reg->t[i];
    const int nd = t->ndim;
    int64_t R = 1, Lr = 1;
    for (int d = 0; d < nd - 1; d++) R *= t->shape[d], Lr *= t->local_shape[d];
    const int64_t C = t->shape[nd - 1], Lc = t->local_shape[nd - 1];
    float *dst = mem + t->offset;
    memset(dst, 0, (size_t)(Lr * Lc) * sizeof(float)); /* padding rows */
    int64_t covered = 0;
    for (int k = 0; k < m.n && !e->failed; k++) {
      const hf_entry *x = &m.e[k];
      if (strcmp(x->ours, t->name) != 0) continue;
      if (x->rows != R || x->cols != C)
        mt_err_set(e, "the model has %s as [%lld, %lld] (as 2-D), the %s map [%lld, %lld]",
                   t->name, (long long)R, (long long)C, m.cls, (long long)x->rows,
                   (long long)x->cols);
      else if (import_entry(&set, &m, x, dst, Lc, &scratch, &cap, dir, e) == 0)
        covered += x->nr * x->nc;
    }
    if (!e->failed && covered != R * C)
      mt_err_set(e, "the model has tensor %s, which %s does not hold whole", t->name, m.cls);
  }
  if (!e->failed && c->tied) check_tied_head(&set, &m, dir, e);
  free(scratch);
  free(m.e);
  mt_st_close_dir(&set);
  return e->failed ? -1 : 0;
}

int mt_ckpt_import_hf(const char *dir, const mt_ckpt_hf_config *c, const mt_registry *reg,
                      const char *out_root, mt_ckpt_mode mode, const char *config_ini,
                      mt_err *e) {
  int rank = mt_ckpt_rank(), size = mt_ckpt_size();
  mt_err local = {0};
  float *mem = NULL;
  if (rank == 0) {
    mem = malloc((reg->numel_local + 1) * sizeof(float));
    if (!mem) mt_err_set(&local, "import: out of memory for %zu parameters", reg->numel_local);
    else import_rank0(dir, c, reg, mem, &local);
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
    const int moe = c->moe_experts > 0;
    mt_ckpt_meta m = {.n_layer = c->n_layer, .n_embd = c->n_embd, .n_head = c->n_head,
                      .seq_len = c->seq_len, .vocab = c->vocab, .dp = 1, .tp = 1, .pp = 1,
                      .cp = 1, .zero = 0, .world = 1, .ep = 1, .etp = 1,
                      .moe_experts = c->moe_experts, .moe_topk = moe ? c->moe_topk : 0,
                      .moe_every = moe, .moe_ffn = moe ? c->moe_ffn : 0, .moe_shared = 0,
                      .arch = c->arch, .n_kv_head = c->n_kv_head, .ffn = c->ffn,
                      .tied = c->tied, .bias = c->bias};
    mt_ckpt_save_opts opts = {.mode = mode, .keep = 0, .test_crash = MT_CKPT_CRASH_NONE,
                              .config_ini = config_ini};
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
