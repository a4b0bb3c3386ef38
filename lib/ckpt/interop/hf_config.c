/* config.json of transformers' GPT2LMHeadModel, LlamaForCausalLM and
 * MixtralForCausalLM: read and checked to describe a model meshtrain
 * computes (anything else refused with one line naming the key and its
 * value), and written for an export (see ckpt.h).
 *
 * Defaults of keys a file leaves out are transformers' (LlamaConfig,
 * MixtralConfig): rms_norm_eps 1e-6 (Mixtral 1e-5), rope_theta 10000
 * (Mixtral 1e6), num_key_value_heads = num_attention_heads, hidden_act
 * silu, no biases, untied embeddings. */
#include "ckpt/interop/hf_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *mt_ckpt_hf_class(const mt_ckpt_hf_config *c) {
  switch (mt_hf_family(c)) {
  case MT_HF_GPT2: return "GPT2LMHeadModel";
  case MT_HF_MIXTRAL: return "MixtralForCausalLM";
  default: return "LlamaForCausalLM";
  }
}

int mt_hf_family(const mt_ckpt_hf_config *c) {
  if (c->arch != 2) return MT_HF_GPT2;
  return c->moe_experts > 0 ? MT_HF_MIXTRAL : MT_HF_LLAMA;
}

void mt_ckpt_hf_config_of_meta(const mt_ckpt_meta *in, mt_ckpt_hf_config *c) {
  mt_ckpt_meta m = *in;
  mt_ckpt_meta_arch_defaults(&m);
  memset(c, 0, sizeof *c);
  *c = (mt_ckpt_hf_config){.arch = (int)m.arch, .n_layer = (int)m.n_layer,
                           .n_embd = (int)m.n_embd, .n_head = (int)m.n_head,
                           .n_kv_head = (int)m.n_kv_head, .ffn = (int)m.ffn,
                           .seq_len = (int)m.seq_len, .vocab = (int)m.vocab,
                           .tied = m.tied != 0, .bias = m.bias != 0,
                           .moe_experts = (int)m.moe_experts, .moe_topk = (int)m.moe_topk,
                           .moe_ffn = (int)m.moe_ffn};
}

/* ------------------------------------------------------------------ */
/* reading                                                             */

/* an input's failure (missing, a directory, no access) is bad input, exit
 * 2; an I/O error a runtime one, 3 */
static char *read_text(const char *path, long max, mt_err *e) {
  FILE *f = fopen(path, "r");
  if (!f) {
    mt_ckpt_err_read_sys(e, errno, "cannot read %s", path);
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

/* the file being read: its path for messages, its object, the error */
typedef struct {
  const char *path;
  const cJSON *o;
  mt_err *e;
  const char *scope; /* of the object's keys in messages: "" or "rope_scaling." */
} reader;

/* the value of key as a message shows it: 'text', a number, or "not given" */
static const char *shown(const reader *r, const char *key, char *buf, size_t len) {
  const cJSON *x = cJSON_GetObjectItem(r->o, key);
  if (!x) return "(not given)";
  if (cJSON_IsString(x)) {
    snprintf(buf, len, "'%.40s'", x->valuestring);
    return buf;
  }
  char *t = cJSON_PrintUnformatted(x);
  snprintf(buf, len, "%.40s", t ? t : "?");
  free(t);
  return buf;
}

/* one line: "<path>: <key> = <value> <why>" */
static int refuse(const reader *r, const char *key, const char *why) {
  char v[64];
  mt_err_set(r->e, "%s: %s%s = %s %s", r->path, r->scope, key, shown(r, key, v, sizeof v), why);
  return -1;
}

static int given(const reader *r, const char *key) {
  const cJSON *x = cJSON_GetObjectItem(r->o, key);
  return x && !cJSON_IsNull(x);
}

/* an integer in [lo, hi]; absent or null: def (def < 0: required) */
static int get_int(const reader *r, const char *key, int def, int lo, int hi, int *v) {
  const cJSON *x = cJSON_GetObjectItem(r->o, key);
  if (!given(r, key) && def >= 0) {
    *v = def;
    return 0;
  }
  if (!cJSON_IsNumber(x) || x->valuedouble < lo || x->valuedouble > hi ||
      x->valuedouble != floor(x->valuedouble)) {
    char why[96];
    snprintf(why, sizeof why, "is not an integer from %d to %d", lo, hi);
    return refuse(r, key, why);
  }
  *v = (int)x->valuedouble;
  return 0;
}

/* a number in (lo, hi]; absent or null: def */
static int get_num(const reader *r, const char *key, double def, double lo, double hi,
                   double *v) {
  const cJSON *x = cJSON_GetObjectItem(r->o, key);
  if (!given(r, key)) {
    *v = def;
    return 0;
  }
  if (!cJSON_IsNumber(x) || !(x->valuedouble > lo && x->valuedouble <= hi)) {
    char why[96];
    snprintf(why, sizeof why, "is not a number above %g and at most %g", lo, hi);
    return refuse(r, key, why);
  }
  *v = x->valuedouble;
  return 0;
}

static int get_bool(const reader *r, const char *key, int def, int *v) {
  const cJSON *x = cJSON_GetObjectItem(r->o, key);
  if (!given(r, key)) *v = def;
  else if (cJSON_IsBool(x)) *v = cJSON_IsTrue(x);
  else return refuse(r, key, "is not true or false");
  return 0;
}

/* an id, a list of ids or null (absent: null), as compact JSON text */
static int get_ids(const reader *r, const char *key, char *out, size_t len) {
  const cJSON *x = cJSON_GetObjectItem(r->o, key), *it;
  int ok = !x || cJSON_IsNull(x) || cJSON_IsNumber(x) || cJSON_IsArray(x);
  if (cJSON_IsNumber(x)) ok = x->valuedouble >= 0 && x->valuedouble < 1e9 &&
                              x->valuedouble == floor(x->valuedouble);
  if (cJSON_IsArray(x))
    cJSON_ArrayForEach(it, x) {
      ok = ok && cJSON_IsNumber(it) && it->valuedouble >= 0 && it->valuedouble < 1e9 &&
           it->valuedouble == floor(it->valuedouble);
    }
  char *t = ok && x ? cJSON_PrintUnformatted(x) : NULL;
  if (ok && t && strlen(t) >= len) ok = 0;
  if (ok) snprintf(out, len, "%s", t ? t : "null");
  free(t);
  return ok ? 0 : refuse(r, key, "is not a token id, a list of ids or null");
}

/* GPT-2: the checks as they were, each naming the key */
static int read_gpt2(const reader *r, mt_ckpt_hf_config *c) {
  const char *path = r->path;
  mt_err *e = r->e;
  const cJSON *o = r->o;
  const cJSON *act = cJSON_GetObjectItem(o, "activation_function");
  const cJSON *inner = cJSON_GetObjectItem(o, "n_inner");
  const cJSON *eps = cJSON_GetObjectItem(o, "layer_norm_epsilon");
  const cJSON *tie = cJSON_GetObjectItem(o, "tie_word_embeddings");
  const cJSON *scale = cJSON_GetObjectItem(o, "scale_attn_weights");
  const cJSON *inv = cJSON_GetObjectItem(o, "scale_attn_by_inverse_layer_idx");
  c->arch = 1;
  MT_TRY(e, get_int(r, "n_layer", -1, 1, 10000000, &c->n_layer));
  MT_TRY(e, get_int(r, "n_embd", -1, 1, 10000000, &c->n_embd));
  MT_TRY(e, get_int(r, "n_head", -1, 1, 10000000, &c->n_head));
  MT_TRY(e, get_int(r, "n_positions", -1, 1, 10000000, &c->seq_len));
  MT_TRY(e, get_int(r, "vocab_size", -1, 1, 10000000, &c->vocab));
  c->n_kv_head = c->n_head;
  c->ffn = 4 * c->n_embd;
  c->tied = c->bias = 1;
  if (c->n_embd % c->n_head != 0) {
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
  }
  return e->failed ? -1 : 0;
}

/* rope_scaling: null, absent or rope_type "default": none; "llama3" with
 * its four fields; anything else refused */
static int read_rope_scaling(const reader *r, mt_ckpt_hf_config *c) {
  const cJSON *rs = cJSON_GetObjectItem(r->o, "rope_scaling");
  c->rope_scaling = MT_ROPE_SCALING_NONE;
  if (!rs || cJSON_IsNull(rs)) return 0;
  if (!cJSON_IsObject(rs)) return refuse(r, "rope_scaling", "is not null or an object");
  const cJSON *type = cJSON_GetObjectItem(rs, "rope_type");
  if (!type) type = cJSON_GetObjectItem(rs, "type");
  const char *t = cJSON_IsString(type) ? type->valuestring : "?";
  if (!strcmp(t, "default")) return 0;
  if (strcmp(t, "llama3") != 0) {
    mt_err_set(r->e, "%s: rope_scaling type '%.40s' is not llama3: meshtrain's rotary scaling is "
                     "none or llama3", r->path, t);
    return -1;
  }
  reader sub = {r->path, rs, r->e, "rope_scaling."};
  c->rope_scaling = MT_ROPE_SCALING_LLAMA3;
  MT_TRY(r->e, get_num(&sub, "factor", -1, 0.999999, 1024, &c->rope_factor));
  MT_TRY(r->e, get_num(&sub, "low_freq_factor", -1, 0, 1024, &c->rope_low_freq_factor));
  MT_TRY(r->e, get_num(&sub, "high_freq_factor", -1, 0, 1024, &c->rope_high_freq_factor));
  MT_TRY(r->e, get_int(&sub, "original_max_position_embeddings", -1, 1, 1000000,
                       &c->rope_original_len));
  if (c->rope_factor < 0 || c->rope_low_freq_factor < 0 || c->rope_high_freq_factor < 0)
    return refuse(r, "rope_scaling", "lacks factor, low_freq_factor or high_freq_factor");
  if (!(c->rope_low_freq_factor < c->rope_high_freq_factor))
    return refuse(r, "rope_scaling", "has low_freq_factor not below high_freq_factor");
  return 0;
}

/* Llama, Mixtral */
static int read_llama(const reader *r, int mixtral, mt_ckpt_hf_config *c) {
  mt_err *e = r->e;
  char why[160], v[64];
  c->arch = 2;
  MT_TRY(e, get_int(r, "num_hidden_layers", -1, 1, 1000000, &c->n_layer));
  MT_TRY(e, get_int(r, "hidden_size", -1, 1, 1000000, &c->n_embd));
  MT_TRY(e, get_int(r, "num_attention_heads", -1, 1, 1000000, &c->n_head));
  MT_TRY(e, get_int(r, "num_key_value_heads", c->n_head, 1, 1000000, &c->n_kv_head));
  MT_TRY(e, get_int(r, "intermediate_size", -1, 1, 16000000, &c->ffn));
  MT_TRY(e, get_int(r, "vocab_size", -1, 1, 1000000, &c->vocab));
  MT_TRY(e, get_int(r, "max_position_embeddings", -1, 1, 1000000, &c->seq_len));
  if (c->n_embd % c->n_head != 0) {
    snprintf(why, sizeof why, "is not divisible by num_attention_heads = %d", c->n_head);
    return refuse(r, "hidden_size", why);
  }
  const int hs = c->n_embd / c->n_head;
  if (given(r, "head_dim")) {
    const cJSON *x = cJSON_GetObjectItem(r->o, "head_dim");
    if (!cJSON_IsNumber(x) || x->valuedouble != hs) {
      snprintf(why, sizeof why, "is not hidden_size / num_attention_heads = %d: meshtrain's heads "
                                "are that wide", hs);
      return refuse(r, "head_dim", why);
    }
  }
  if (hs % 2 != 0) {
    snprintf(why, sizeof why, "gives heads of %d channels: rotary positions turn pairs, the head "
                              "size must be even", hs);
    return refuse(r, "hidden_size", why);
  }
  if (c->n_head % c->n_kv_head != 0) {
    snprintf(why, sizeof why, "does not divide num_attention_heads = %d", c->n_head);
    return refuse(r, "num_key_value_heads", why);
  }
  const cJSON *act = cJSON_GetObjectItem(r->o, "hidden_act");
  if (given(r, "hidden_act") && !(cJSON_IsString(act) && !strcmp(act->valuestring, "silu")))
    return refuse(r, "hidden_act", "is not silu: meshtrain's llama MLP is SwiGLU");
  MT_TRY(e, get_num(r, "rms_norm_eps", mixtral ? 1e-5 : 1e-6, 0, 1, &c->norm_eps));
  MT_TRY(e, get_num(r, "rope_theta", mixtral ? 1e6 : 1e4, 0, 1e12, &c->rope_theta));
  MT_TRY(e, read_rope_scaling(r, c));
  MT_TRY(e, get_bool(r, "tie_word_embeddings", 0, &c->tied));
  int attn_bias = 0, mlp_bias = 0;
  MT_TRY(e, get_bool(r, "attention_bias", 0, &attn_bias));
  MT_TRY(e, get_bool(r, "mlp_bias", attn_bias, &mlp_bias));
  if (!mixtral && mlp_bias != attn_bias) {
    snprintf(why, sizeof why, "but attention_bias = %s: meshtrain's model.bias puts biases on "
                              "every linear or on none", shown(r, "attention_bias", v, sizeof v));
    return refuse(r, "mlp_bias", why);
  }
  /* MixtralForCausalLM has no biases whatever the config says */
  c->bias = mixtral ? 0 : attn_bias;
  if (!mixtral) return 0;
  MT_TRY(e, get_int(r, "num_local_experts", -1, 1, 4096, &c->moe_experts));
  MT_TRY(e, get_int(r, "num_experts_per_tok", -1, 1, 4096, &c->moe_topk));
  if (c->moe_topk > c->moe_experts) {
    snprintf(why, sizeof why, "is more than num_local_experts = %d", c->moe_experts);
    return refuse(r, "num_experts_per_tok", why);
  }
  c->moe_ffn = c->ffn;
  if (given(r, "sliding_window")) {
    int w = 0;
    MT_TRY(e, get_int(r, "sliding_window", -1, 1, 2000000000, &w));
    if (w < c->seq_len) {
      snprintf(why, sizeof why, "is shorter than max_position_embeddings = %d: meshtrain's "
                                "attention is causal over the whole sequence", c->seq_len);
      return refuse(r, "sliding_window", why);
    }
  }
  return 0;
}

int mt_ckpt_hf_read_config(const char *dir, mt_ckpt_hf_config *c, mt_err *e) {
  char path[1100];
  snprintf(path, sizeof path, "%s/config.json", dir);
  memset(c, 0, sizeof *c);
  struct stat sb;
  if (stat(dir, &sb) != 0) {
    mt_ckpt_err_read_sys(e, errno, "%s: cannot open the Hugging Face model directory", dir);
    return -1;
  }
  if (!S_ISDIR(sb.st_mode)) {
    mt_err_set(e, "%s is a file, not a Hugging Face model directory (config.json and "
                  "model.safetensors)", dir);
    return -1;
  }
  char *text = read_text(path, 1 << 20, e);
  if (!text) return mt_err_pass(e);
  cJSON *o = cJSON_Parse(text);
  free(text);
  reader r = {path, o, e, ""};
  const cJSON *mt = cJSON_GetObjectItem(o, "model_type");
  const char *type = cJSON_IsString(mt) ? mt->valuestring : "?";
  if (!cJSON_IsObject(o))
    mt_err_set(e, "%s: not a JSON object", path);
  else if (!strcmp(type, "gpt2"))
    read_gpt2(&r, c);
  else if (!strcmp(type, "llama") || !strcmp(type, "mixtral"))
    read_llama(&r, !strcmp(type, "mixtral"), c);
  else
    mt_err_set(e, "%s describes a '%.40s' model: meshckpt imports model_type gpt2, llama and "
                  "mixtral", path, type);
  if (!e->failed) get_ids(&r, "bos_token_id", c->bos_token_id, sizeof c->bos_token_id);
  if (!e->failed) get_ids(&r, "eos_token_id", c->eos_token_id, sizeof c->eos_token_id);
  cJSON_Delete(o);
  return e->failed ? -1 : 0;
}

/* ------------------------------------------------------------------ */
/* export: what the class can hold                                     */

int mt_ckpt_hf_check_exportable(const mt_ckpt_hf_config *c, const char *dir, mt_err *e) {
  const char *cls = mt_ckpt_hf_class(c);
  if (c->arch != 2 && c->moe_experts > 0)
    mt_err_set(e, "%s: a GPT-2 with experts has no Hugging Face class (Mixtral's blocks are "
                  "Llama's): not exported", dir);
  else if (c->arch != 2 && (!c->tied || !c->bias || c->ffn != 4 * c->n_embd))
    mt_err_set(e, "%s: %s ties its head and has biases and an MLP of 4 x n_embd; this gpt2 has "
                  "tied = %d, bias = %d, MLP %d: not exported", dir, cls, c->tied, c->bias,
               c->ffn);
  else if (mt_hf_family(c) == MT_HF_MIXTRAL && c->bias)
    mt_err_set(e, "%s: MixtralForCausalLM has no biases; this model has (model.bias = true): not "
                  "exported", dir);
  return e->failed ? -1 : 0;
}

/* ------------------------------------------------------------------ */
/* writing                                                             */

/* the shortest decimal text that reads back as v (single: as the float v);
 * a whole number as Python writes a float (10000.0) */
static void num_text(double v, int single, char *buf, size_t len) {
  if (v == floor(v) && fabs(v) < 1e15) {
    snprintf(buf, len, "%.1f", v);
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, len, "%.*g", prec, v);
    double back = strtod(buf, NULL);
    if (single ? (float)back == (float)v : back == v) return;
  }
}

/* one "key": value line of an object written in order */
static void put(FILE *f, int *n, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(FILE *f, int *n, const char *key, const char *fmt, ...) {
  fprintf(f, "%s\n  \"%s\": ", (*n)++ ? "," : "{", key);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
}

/* token ids as written: the stored JSON text, or vocab - 1 when not known */
static void put_ids(FILE *f, int *n, const char *key, const char *ids, int vocab) {
  cJSON *x = ids[0] ? cJSON_Parse(ids) : NULL;
  char *t = x ? cJSON_PrintUnformatted(x) : NULL;
  if (t) put(f, n, key, "%s", t);
  else put(f, n, key, "%d", vocab - 1);
  free(t);
  cJSON_Delete(x);
}

static void put_llama(FILE *f, int *n, const mt_ckpt_hf_config *c) {
  const int mixtral = mt_hf_family(c) == MT_HF_MIXTRAL;
  char num[40];
  put(f, n, "vocab_size", "%d", c->vocab);
  put(f, n, "hidden_size", "%d", c->n_embd);
  put(f, n, "intermediate_size", "%d", mixtral ? c->moe_ffn : c->ffn);
  put(f, n, "num_hidden_layers", "%d", c->n_layer);
  put(f, n, "num_attention_heads", "%d", c->n_head);
  put(f, n, "num_key_value_heads", "%d", c->n_kv_head);
  put(f, n, "head_dim", "%d", c->n_embd / c->n_head);
  put(f, n, "hidden_act", "\"silu\"");
  put(f, n, "max_position_embeddings", "%d", c->seq_len);
  num_text(c->norm_eps, 1, num, sizeof num); /* meshtrain adds it in fp32 */
  put(f, n, "rms_norm_eps", "%s", num);
  num_text(c->rope_theta, 0, num, sizeof num);
  put(f, n, "rope_theta", "%s", num);
  if (c->rope_scaling == MT_ROPE_SCALING_LLAMA3) {
    char a[40], b[40], d[40];
    num_text(c->rope_factor, 0, a, sizeof a);
    num_text(c->rope_low_freq_factor, 0, b, sizeof b);
    num_text(c->rope_high_freq_factor, 0, d, sizeof d);
    put(f, n, "rope_scaling",
        "{\"rope_type\": \"llama3\", \"factor\": %s, \"low_freq_factor\": %s, "
        "\"high_freq_factor\": %s, \"original_max_position_embeddings\": %d}",
        a, b, d, c->rope_original_len);
  } else {
    put(f, n, "rope_scaling", "null");
  }
  put(f, n, "tie_word_embeddings", "%s", c->tied ? "true" : "false");
  put(f, n, "attention_bias", "%s", c->bias ? "true" : "false");
  if (!mixtral) put(f, n, "mlp_bias", "%s", c->bias ? "true" : "false");
  put(f, n, "attention_dropout", "0.0");
  put(f, n, "initializer_range", "0.02");
  if (mixtral) {
    put(f, n, "num_local_experts", "%d", c->moe_experts);
    put(f, n, "num_experts_per_tok", "%d", c->moe_topk);
    put(f, n, "sliding_window", "null");
    put(f, n, "output_router_logits", "false");
  } else {
    put(f, n, "pretraining_tp", "1");
  }
}

static void put_gpt2(FILE *f, int *n, const mt_ckpt_hf_config *c) {
  put(f, n, "vocab_size", "%d", c->vocab);
  put(f, n, "n_positions", "%d", c->seq_len);
  put(f, n, "n_ctx", "%d", c->seq_len);
  put(f, n, "n_embd", "%d", c->n_embd);
  put(f, n, "n_layer", "%d", c->n_layer);
  put(f, n, "n_head", "%d", c->n_head);
  put(f, n, "n_inner", "null");
  put(f, n, "activation_function", "\"gelu_new\"");
  put(f, n, "layer_norm_epsilon", "1e-05");
  put(f, n, "initializer_range", "0.02");
  put(f, n, "resid_pdrop", "0.0");
  put(f, n, "embd_pdrop", "0.0");
  put(f, n, "attn_pdrop", "0.0");
  put(f, n, "scale_attn_weights", "true");
  put(f, n, "scale_attn_by_inverse_layer_idx", "false");
  put(f, n, "reorder_and_upcast_attn", "false");
  put(f, n, "tie_word_embeddings", "true");
}

char *mt_hf_config_json(const mt_ckpt_hf_config *c, int dtype, int64_t step) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  int n = 0, family = mt_hf_family(c);
  static const char *const type[] = {"", "gpt2", "llama", "mixtral"};
  put(f, &n, "architectures", "[\"%s\"]", mt_ckpt_hf_class(c));
  put(f, &n, "model_type", "\"%s\"", type[family]);
  if (family == MT_HF_GPT2) put_gpt2(f, &n, c);
  else put_llama(f, &n, c);
  put_ids(f, &n, "bos_token_id", c->bos_token_id, c->vocab);
  put_ids(f, &n, "eos_token_id", c->eos_token_id, c->vocab);
  put(f, &n, "use_cache", "true");
  put(f, &n, "torch_dtype", "\"%s\"", dtype == MT_DT_BF16 ? "bfloat16" : "float32");
  put(f, &n, "meshtrain_step", "%lld", (long long)step);
  fprintf(f, "\n}\n");
  fclose(f);
  return text;
}
