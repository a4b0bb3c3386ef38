/* Configuration: one table of keys (name, type, field, default, help, range),
 * filled from the defaults, then an INI file (read with inih), then
 * "section.key=value" overrides in order. Every value goes through the same
 * parser, so a file and --set accept and reject the same text.
 *
 * INI rules (inih, plus what this file adds):
 *   - "[section]" then "key = value" (or "key: value"); '#' or ';' starts a
 *     comment line, and " ;" starts a comment after a value.
 *   - Leading whitespace on a line is ignored (indented keys are ordinary
 *     keys; inih's multi-line continuation values are not supported).
 *   - A key given twice in one file is an error; --set may repeat a key, and
 *     the last one wins.
 *   - Keys before the first [section] are errors.
 *   - A string value in matching double quotes has the quotes removed.
 *   - A line may hold at most 198 characters (inih's buffer, INI_MAX_LINE =
 *     200, is fixed when the library is built); a longer line is an error,
 *     never silently truncated or split. Longer values can be given with --set.
 * No MPI here: the result is a pure function of the inputs, so every rank
 * that loads the same file and overrides gets the same mt_config. */
#include "core/core.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <ini.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <strings.h>

/* Exclusive bounds, stored as the nearest inclusive double so the public
 * [min, max] stays exact: "> 0" is ">= DBL_TRUE_MIN", "< 1" is
 * "<= 1 - 2^-53". describe_range prints them back as "> 0" and "< 1". */
#define GT0 DBL_TRUE_MIN
#define LT1 (1.0 - DBL_EPSILON / 2)
#define NOMAX INFINITY
#define NOMIN (-INFINITY)
#define SHAPE_MAX 1000000.0

#define F(field) offsetof(mt_config, field)

static const mt_cfg_key g_keys[] = {
    /* [model] */
    {"model.preset", MT_CFG_STRING, F(model_preset), "small",
     "model size preset; shape keys of 0 take their value from it", 0, 0,
     "tiny|small|gpt2-124m|custom"},
    {"model.n_layer", MT_CFG_INT, F(n_layer), "0",
     "transformer blocks (0 = from the preset)", 0, SHAPE_MAX, NULL},
    {"model.n_embd", MT_CFG_INT, F(n_embd), "0",
     "embedding width, channels (0 = from the preset)", 0, SHAPE_MAX, NULL},
    {"model.n_head", MT_CFG_INT, F(n_head), "0",
     "attention heads per block (0 = from the preset)", 0, SHAPE_MAX, NULL},
    {"model.seq_len", MT_CFG_INT, F(seq_len), "0",
     "context length, tokens (0 = from the preset)", 0, SHAPE_MAX, NULL},
    {"model.vocab_size", MT_CFG_INT, F(vocab_size), "0",
     "vocabulary size, tokens (0 = from the preset)", 0, SHAPE_MAX, NULL},
    {"model.moe_experts", MT_CFG_INT, F(moe_experts), "0",
     "Mixture-of-Experts: experts per MoE block (0 = a dense model)", 0, 4096, NULL},
    {"model.moe_topk", MT_CFG_INT, F(moe_topk), "2",
     "MoE: experts each token uses (top-k of the router, weights renormalised)", 1, 4096, NULL},
    {"model.moe_every", MT_CFG_INT, F(moe_every), "1",
     "MoE: every n-th block is a MoE block (blocks n-1, 2n-1, ...; 1 = all)", 1, SHAPE_MAX,
     NULL},
    {"model.moe_ffn", MT_CFG_INT, F(moe_ffn), "0",
     "MoE: hidden units of each expert (0 = 4 x n_embd)", 0, SHAPE_MAX, NULL},
    {"model.moe_shared", MT_CFG_INT, F(moe_shared), "0",
     "MoE: shared experts every token uses, DeepSeek style (0 = none)", 0, 64, NULL},
    {"model.moe_capacity", MT_CFG_DOUBLE, F(moe_capacity), "0",
     "MoE: capacity factor f: an expert takes ceil(f T k / E) slots per sequence (0 = dropless)",
     0, 64, NULL},
    /* [train] */
    {"train.moe_aux_coef", MT_CFG_DOUBLE, F(moe_aux_coef), "0.01",
     "MoE: coefficient of the Switch load-balancing loss (0 = off; used by moe_balance = aux)",
     0, 1, NULL},
    {"train.moe_z_coef", MT_CFG_DOUBLE, F(moe_z_coef), "0",
     "MoE: coefficient of the router z-loss (0 = off)", 0, 1, NULL},
    {"train.moe_balance", MT_CFG_STRING, F(moe_balance), "aux",
     "MoE balancing: aux (the loss), bias (a per-expert routing bias, no aux loss) or none", 0,
     0, "aux|bias|none"},
    {"train.moe_bias_rate", MT_CFG_DOUBLE, F(moe_bias_rate), "0.001",
     "MoE, moe_balance = bias: the bias step per optimizer step towards equal load", 0, 1,
     NULL},
    {"train.moe_bias_init", MT_CFG_DOUBLE, F(moe_bias_init), "0",
     "MoE, moe_balance = bias: expert 0's starting routing bias (a forced skew for tests)", 0,
     1, NULL},
    {"train.steps", MT_CFG_INT, F(steps), "100", "optimizer steps to run", 1, NOMAX, NULL},
    {"train.seed", MT_CFG_INT, F(seed), "1337",
     "random seed for initialisation and data order", 0, NOMAX, NULL},
    {"train.global_batch", MT_CFG_INT, F(global_batch), "32",
     "sequences per optimizer step, all ranks together", 1, 1 << 24, NULL},
    {"train.micro_batch", MT_CFG_INT, F(micro_batch), "4",
     "sequences per forward/backward on one rank", 1, 1 << 20, NULL},
    {"train.lr", MT_CFG_DOUBLE, F(lr), "1e-3",
     "peak learning rate of AdamW, reached after warmup (1e-5 to 1e-2 is usual)", GT0, 1, NULL},
    {"train.min_lr_ratio", MT_CFG_DOUBLE, F(min_lr_ratio), "0.1",
     "final LR of the cosine decay, as a fraction of train.lr", 0, 1, NULL},
    {"train.warmup_steps", MT_CFG_INT, F(warmup_steps), "10",
     "steps of linear LR warmup (at most 10 x train.steps)", 0, NOMAX, NULL},
    {"train.weight_decay", MT_CFG_DOUBLE, F(weight_decay), "0.1",
     "AdamW decoupled weight decay (0.01 to 0.1 is usual)", 0, 1, NULL},
    {"train.beta1", MT_CFG_DOUBLE, F(beta1), "0.9", "AdamW first-moment decay", 0, LT1, NULL},
    {"train.beta2", MT_CFG_DOUBLE, F(beta2), "0.95", "AdamW second-moment decay", 0, LT1, NULL},
    {"train.eps", MT_CFG_DOUBLE, F(eps), "1e-8", "AdamW denominator epsilon", GT0, 1, NULL},
    {"train.grad_clip", MT_CFG_DOUBLE, F(grad_clip), "1.0",
     "clip the global gradient L2 norm to this (0 = off)", 0, 1e6, NULL},
    {"train.eval_every", MT_CFG_INT, F(eval_every), "25",
     "steps between validation losses (0 = never)", 0, NOMAX, NULL},
    {"train.eval_batches", MT_CFG_INT, F(eval_batches), "4",
     "global batches of validation sequences per validation loss", 1, 1 << 20, NULL},
    {"train.threads", MT_CFG_INT, F(threads), "0",
     "compute threads per rank (0 = OMP_NUM_THREADS or the library default)", 0, 4096, NULL},
    {"train.device", MT_CFG_STRING, F(device), "cpu",
     "cpu, cuda (a GPU per rank), auto (cuda if visible), virtual (emulated: train.virtual_hw)",
     0, 0, "cpu|cuda|auto|virtual"},
    {"train.virtual_hw", MT_CFG_STRING, F(virtual_hw), "",
     "device = virtual: the profile whose [cost] section prices ops and messages", 0, 0, NULL},
    {"virtual.moe_skew", MT_CFG_DOUBLE, F(virtual_moe_skew), "0",
     "device = virtual: MoE load skew, a Zipf exponent over the experts (0 = balanced routing)",
     0, 8, NULL},
    {"train.precision", MT_CFG_STRING, F(precision), "fp32",
     "bf16: bf16 weights' copy and activations over fp32 master and moments (fp16: refused)",
     0, 0, "fp32|bf16|fp16"},
    {"train.grad_dtype", MT_CFG_STRING, F(grad_dtype), "fp32",
     "dtype gradients are held in (bf16: under train.precision = bf16, reduced in bf16)", 0,
     0, "fp32|bf16"},
    {"train.log_every", MT_CFG_INT, F(log_every), "1", "steps between log lines", 1, NOMAX,
     NULL},
    {"train.stop_after", MT_CFG_INT, F(stop_after), "0",
     "stop after this many steps of this run, checkpoint, exit 0 (0 = run to train.steps)", 0,
     NOMAX, NULL},
    {"train.resume", MT_CFG_STRING, F(resume), "",
     "auto (newest complete checkpoint in output.dir) or a step directory; empty: fresh", 0, 0,
     NULL},
    {"train.init_from", MT_CFG_STRING, F(init_from), "",
     "checkpoint whose parameters start this run (step 0, fresh optimizer state)", 0, 0, NULL},
    {"train.micro_batches", MT_CFG_INT, F(micro_batches), "0",
     "micro-batches per step through the pipeline (0 = global_batch / (micro_batch x dp))", 0,
     1 << 20, NULL},
    {"train.recompute", MT_CFG_BOOL, F(recompute), "false",
     "pipeline: keep only each layer's input and recompute the rest in backward", 0, 1, NULL},
    /* [parallel] */
    {"parallel.dp", MT_CFG_INT, F(dp), "1", "data-parallel ranks", 1, 1 << 24, NULL},
    {"parallel.tp", MT_CFG_INT, F(tp), "1", "tensor-parallel ranks", 1, 1 << 16, NULL},
    {"parallel.pp", MT_CFG_INT, F(pp), "1", "pipeline stages", 1, 1 << 16, NULL},
    {"parallel.cp", MT_CFG_INT, F(cp), "1",
     "context-parallel ranks (each sequence split over them)", 1, 1 << 16, NULL},
    {"parallel.cp_mode", MT_CFG_STRING, F(cp_mode), "ring",
     "context parallelism: ring (K/V passed round) or ulysses (all-to-all)", 0, 0,
     "ring|ulysses"},
    {"parallel.ep", MT_CFG_INT, F(ep), "1",
     "MoE: expert-parallel ranks (experts split over them; folded over tp x cp x dp)", 1, 4096,
     NULL},
    {"parallel.etp", MT_CFG_INT, F(etp), "1",
     "MoE: tensor-parallel ranks inside an expert (folded mesh etp x ep x edp = tp x cp x dp)",
     1, 1 << 16, NULL},
    {"parallel.ep_balance", MT_CFG_STRING, F(ep_balance), "none",
     "MoE: least-loaded sends rows over a rank's bound, and their experts, to idle ep ranks",
     0, 0, "none|least-loaded"},
    {"parallel.ep_balance_min_rows", MT_CFG_INT, F(ep_balance_min_rows), "0",
     "MoE, ep_balance = least-loaded: the fewest rows worth moving an expert (0: any)", 0,
     NOMAX, NULL},
    {"parallel.ep_balance_alpha", MT_CFG_DOUBLE, F(ep_balance_alpha), "1.1",
     "MoE, ep_balance = least-loaded: the rows a rank keeps, x the ep group's mean", 1, 64,
     NULL},
    {"parallel.sp", MT_CFG_BOOL, F(sp), "false",
     "sequence parallelism: norm/residual regions hold seq_len/tp positions (tp > 1)", 0, 1,
     NULL},
    {"parallel.grad_reduce_dtype", MT_CFG_STRING, F(grad_reduce_dtype), "fp32",
     "dtype of the dp x cp gradient reduction (bf16: needs train.precision = bf16)", 0, 0, "fp32|bf16"},
    {"parallel.zero", MT_CFG_INT, F(zero), "0",
     "ZeRO over dp: 1 shards AdamW moments, 2 also gradients, 3 also parameters", 0, 3, NULL},
    {"parallel.overlap_dp", MT_CFG_BOOL, F(overlap_dp), "true",
     "ZeRO 0-1: reduce gradients over dp during each stage's last backward", 0, 1, NULL},
    {"parallel.bucket_mb", MT_CFG_DOUBLE, F(bucket_mb), "25",
     "gradient all-reduce bucket size, MiB", GT0, 65536, NULL},
    {"parallel.schedule", MT_CFG_STRING, F(pp_schedule), "1f1b",
     "pipeline schedule (pp > 1)", 0, 0, "gpipe|1f1b|interleaved|zb-h1|breadth-first|zb-v"},
    {"parallel.virtual_stages", MT_CFG_INT, F(virtual_stages), "1",
     "model chunks per pipeline rank (interleaved schedule)", 1, 1024, NULL},
    {"parallel.pp_split", MT_CFG_STRING, F(pp_split), "",
     "layers per pipeline stage, comma-separated (empty: balanced)", 0, 0, NULL},
    {"parallel.pp_first_layers", MT_CFG_INT, F(pp_first_layers), "0",
     "layers of the first pipeline stage (0 = an equal share)", 0, SHAPE_MAX, NULL},
    {"parallel.pp_last_layers", MT_CFG_INT, F(pp_last_layers), "0",
     "layers of the last pipeline stage (0 = an equal share)", 0, SHAPE_MAX, NULL},
    {"parallel.layout", MT_CFG_STRING, F(layout), "manual",
     "manual: the mesh as set; auto: planned for the ranks launched, at every start", 0, 0,
     "manual|auto"},
    {"parallel.print_schedule", MT_CFG_BOOL, F(print_schedule), "false",
     "print each pipeline rank's schedule and exit (also: meshtrain --print-schedule)", 0, 1,
     NULL},
    /* [plan]: what the planner (meshplan, parallel.layout = auto) assumes */
    {"plan.hw", MT_CFG_STRING, F(plan_hw), "",
     "the planner's cost profile (inputs/hw name or path; empty: metrics.hw)", 0, 0, NULL},
    {"plan.headroom", MT_CFG_DOUBLE, F(plan_headroom), "-1",
     "GiB a device keeps free in the plan (-1: 3, or a tenth of the device if less)", -1,
     NOMAX, NULL},
    {"plan.cp_min_tokens", MT_CFG_INT, F(plan_cp_min_tokens), "4096",
     "the planner uses cp only beyond this many tokens of a sequence a rank", 0, NOMAX, NULL},
    /* [data] */
    {"data.train", MT_CFG_STRING, F(data_train), "inputs/data/corpus.txt",
     "path of the training tokens", 0, 0, NULL},
    {"data.val", MT_CFG_STRING, F(data_val), "",
     "path of the validation tokens (empty: split off the end of data.train)", 0, 0, NULL},
    {"data.format", MT_CFG_STRING, F(data_format), "auto",
     "token file format (auto: llm.c magic, else u16 for *.bin, else text; u32 for vocab > 65536)",
     0, 0, "auto|llmc|u16|u32|text"},
    {"data.val_fraction", MT_CFG_DOUBLE, F(val_fraction), "0.05",
     "fraction of data.train held out for validation when data.val is empty", 0, LT1, NULL},
    /* [output] */
    {"output.dir", MT_CFG_STRING, F(output_dir), "outputs/run",
     "directory for metrics.jsonl, summary.json and config.ini", 0, 0, NULL},
    {"output.save_params", MT_CFG_BOOL, F(save_params), "false",
     "write the final parameters as raw fp32, for comparisons", 0, 1, NULL},
    /* [metrics] */
    {"metrics.hw", MT_CFG_STRING, F(hw_profile), "cpu-generic",
     "hardware profile: a name in inputs/hw/ or the path of an INI profile", 0, 0, NULL},
    {"metrics.trace", MT_CFG_BOOL, F(trace), "false",
     "write each rank's timeline as Chrome trace events: output.dir/trace/rank<N>.json", 0, 1,
     NULL},
    {"metrics.peak_gflops", MT_CFG_DOUBLE, F(peak_gflops), "0",
     "peak compute per rank, GFLOP/s (0 = from the hardware profile)", 0, 1e9, NULL},
    /* [ckpt] */
    {"ckpt.every", MT_CFG_INT, F(ckpt_every), "0",
     "steps between checkpoints (0 = only at the end and on a signal)", 0, NOMAX, NULL},
    {"ckpt.keep", MT_CFG_INT, F(ckpt_keep), "2",
     "complete checkpoints kept; older ones go once a new one is durable and checked (0 = all)",
     0, NOMAX, NULL},
    {"ckpt.mode", MT_CFG_STRING, F(ckpt_mode), "shared",
     "one shared HDF5 file, or one file per writer plus a virtual index", 0, 0,
     "shared|per-writer|none"},
    {"ckpt.async", MT_CFG_BOOL, F(ckpt_async), "false",
     "snapshot to host memory and write in the background (per-writer mode)", 0, 1, NULL},
    {"ckpt.verify_on_load", MT_CFG_BOOL, F(ckpt_verify_on_load), "true",
     "check every written box's xxh64 checksum when resuming", 0, 1, NULL},
    {"ckpt.io_hints", MT_CFG_STRING, F(ckpt_io_hints), "",
     "MPI-IO hints for the shared file: key=value,... (e.g. cb_nodes=8)", 0, 0, NULL},
    {"ckpt.test_crash", MT_CFG_STRING, F(ckpt_test_crash), "none",
     "TEST ONLY: kill rank 0 at this phase of the save at step train.steps", 0, 0,
     "none|create|write|rename|latest"},
};

#undef F

enum { N_KEYS = (int)(sizeof g_keys / sizeof g_keys[0]) };

const mt_cfg_key *mt_config_keys(int *n) {
  if (n) *n = N_KEYS;
  return g_keys;
}

static const mt_cfg_key *find_key(const char *name) {
  for (int i = 0; i < N_KEYS; i++)
    if (strcmp(g_keys[i].name, name) == 0) return &g_keys[i];
  return NULL;
}

static const char *type_name(mt_cfg_type t) {
  switch (t) {
  case MT_CFG_INT: return "int";
  case MT_CFG_DOUBLE: return "float";
  case MT_CFG_BOOL: return "bool";
  case MT_CFG_STRING: return "string";
  }
  return "?";
}

/* ------------------------------------------------------------------ */
/* value parsing                                                       */

/* "between 0 and 1000000", ">= 1", "> 0", ">= 0 and < 1", "" (no bound). */
static void describe_range(const mt_cfg_key *k, char *buf, size_t size) {
  const char *num = k->type == MT_CFG_INT ? "%.0f" : "%g";
  char lo[64] = "", hi[64] = "", a[32], b[32];
  int lo_incl = 0, hi_incl = 0;
  if (k->min == GT0 && k->type == MT_CFG_DOUBLE) {
    snprintf(lo, sizeof lo, "> 0");
  } else if (k->min > NOMIN) {
    snprintf(a, sizeof a, num, k->min);
    snprintf(lo, sizeof lo, ">= %s", a);
    lo_incl = 1;
  }
  if (k->max == LT1 && k->type == MT_CFG_DOUBLE) {
    snprintf(hi, sizeof hi, "< 1");
  } else if (k->max < NOMAX) {
    snprintf(b, sizeof b, num, k->max);
    snprintf(hi, sizeof hi, "<= %s", b);
    hi_incl = 1;
  }
  if (lo_incl && hi_incl)
    snprintf(buf, size, "between %s and %s", a, b);
  else if (lo[0] && hi[0])
    snprintf(buf, size, "%s and %s", lo, hi);
  else
    snprintf(buf, size, "%s", lo[0] ? lo : hi);
}

/* Bad values are echoed in error messages, clipped and with control
 * characters shown as '?', so the message stays one readable line (and fits
 * mt_err.msg). */
typedef struct {
  char s[72];
} clipped;
static clipped clip(const char *text) {
  clipped c;
  if (strlen(text) < sizeof c.s)
    snprintf(c.s, sizeof c.s, "%s", text);
  else
    snprintf(c.s, sizeof c.s, "%.*s...", (int)sizeof c.s - 4, text);
  for (char *p = c.s; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
  return c;
}

static int in_choices(const char *choices, const char *value) {
  size_t n = strlen(value);
  for (const char *p = choices; *p;) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && strncmp(p, value, n) == 0) return 1;
    if (!bar) break;
    p = bar + 1;
  }
  return 0;
}

static int parse_int(const mt_cfg_key *k, const char *text, int *out, char *why, size_t wsize) {
  const char *p = text;
  if (*p == '+' || *p == '-') p++;
  int digits = 0;
  for (; isdigit((unsigned char)*p); p++) digits++;
  if (digits == 0 || *p != '\0') {
    snprintf(why, wsize, "%s: '%s' is not an integer", k->name, clip(text).s);
    return 1;
  }
  errno = 0;
  long long v = strtoll(text, NULL, 10);
  if (errno == ERANGE || v < -2147483647LL - 1 || v > 2147483647LL) {
    snprintf(why, wsize, "%s: '%s' is out of range for an integer", k->name,
             clip(text).s);
    return 1;
  }
  *out = (int)v;
  return 0;
}

/* A decimal number: [+-] digits [. digits] [e [+-] digits], at least one
 * digit before the exponent. strtod alone would also take hexadecimal
 * ("0x10" = 16), "inf", "nan" and "0x1p-3". */
static int is_decimal(const char *p) {
  if (*p == '+' || *p == '-') p++;
  int digits = 0;
  for (; isdigit((unsigned char)*p); p++) digits++;
  if (*p == '.')
    for (p++; isdigit((unsigned char)*p); p++) digits++;
  if (!digits) return 0;
  if (*p == 'e' || *p == 'E') {
    p++;
    if (*p == '+' || *p == '-') p++;
    if (!isdigit((unsigned char)*p)) return 0;
    while (isdigit((unsigned char)*p)) p++;
  }
  return *p == '\0';
}

static int parse_double(const mt_cfg_key *k, const char *text, double *out, char *why,
                        size_t wsize) {
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (text[0] == '\0' || isspace((unsigned char)text[0]) || end == text || *end != '\0') {
    snprintf(why, wsize, "%s: '%s' is not a number", k->name, clip(text).s);
    return 1;
  }
  if (!isfinite(v)) {
    snprintf(why, wsize, "%s: '%s' is not a finite number", k->name, clip(text).s);
    return 1;
  }
  if (!is_decimal(text)) {
    snprintf(why, wsize, "%s: '%s' is not a decimal number (write e.g. 16, 0.5 or 3e-4)",
             k->name, clip(text).s);
    return 1;
  }
  *out = v;
  return 0;
}

static int parse_bool(const mt_cfg_key *k, const char *text, int *out, char *why, size_t wsize) {
  static const char *yes[] = {"true", "1", "yes", "on"}, *no[] = {"false", "0", "no", "off"};
  for (int i = 0; i < 4; i++) {
    if (strcasecmp(text, yes[i]) == 0) { *out = 1; return 0; }
    if (strcasecmp(text, no[i]) == 0) { *out = 0; return 0; }
  }
  snprintf(why, wsize, "%s: '%s' is not a boolean (true|false|yes|no|on|off|1|0)", k->name,
           clip(text).s);
  return 1;
}

/* Strings must survive mt_config_write_ini -> load: no control characters
 * (a line break would end the value) and no ';' after whitespace (inih reads
 * it as the start of a comment). */
static int parse_string(const mt_cfg_key *k, const char *text, char *out, char *why,
                        size_t wsize) {
  size_t len = strlen(text);
  if (len >= 2 && text[0] == '"' && text[len - 1] == '"') {
    text++;
    len -= 2;
  } else if (len >= 1 && (text[0] == '"' || text[len - 1] == '"')) {
    snprintf(why, wsize, "%s: '%s' has an unmatched '\"' (note that ' ;' starts a comment)",
             k->name, clip(text).s);
    return 1;
  }
  if (len > MT_CFG_STR_MAX - 1) {
    snprintf(why, wsize, "%s: value is %zu characters, longer than the limit of %d", k->name, len,
             MT_CFG_STR_MAX - 1);
    return 1;
  }
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)text[i];
    if (c < 0x20 || c == 0x7f) {
      snprintf(why, wsize, "%s: value contains a control character (byte %zu)", k->name, i);
      return 1;
    }
    if (c == ';' && i > 0 && isspace((unsigned char)text[i - 1])) {
      snprintf(why, wsize, "%s: value contains ' ;', which starts a comment in an INI file",
               k->name);
      return 1;
    }
  }
  char value[MT_CFG_STR_MAX];
  memcpy(value, text, len);
  value[len] = '\0';
  if (k->choices && !in_choices(k->choices, value)) {
    snprintf(why, wsize, "%s: '%s' is not one of %s", k->name, clip(value).s, k->choices);
    return 1;
  }
  /* zero the whole field so two configs with equal values compare equal */
  memset(out, 0, MT_CFG_STR_MAX);
  memcpy(out, value, len);
  return 0;
}

/* Parse text as the value of key k into cfg. On failure cfg is unchanged and
 * why holds "key: reason" (without the location). */
static int set_value(mt_config *cfg, const mt_cfg_key *k, const char *text, char *why,
                     size_t wsize) {
  char *field = (char *)cfg + k->offset;
  double v = 0;
  switch (k->type) {
  case MT_CFG_STRING: return parse_string(k, text, field, why, wsize);
  case MT_CFG_BOOL: return parse_bool(k, text, (int *)(void *)field, why, wsize);
  case MT_CFG_INT: {
    int i = 0;
    if (parse_int(k, text, &i, why, wsize)) return 1;
    v = i;
    break;
  }
  case MT_CFG_DOUBLE:
    if (parse_double(k, text, &v, why, wsize)) return 1;
    break;
  }
  if (!(v >= k->min && v <= k->max)) {
    char range[96];
    describe_range(k, range, sizeof range);
    snprintf(why, wsize, "%s must be %s (got %s)", k->name, range, clip(text).s);
    return 1;
  }
  if (k->type == MT_CFG_INT)
    *(int *)(void *)field = (int)v;
  else
    *(double *)(void *)field = v;
  return 0;
}

/* A near miss for an unknown key, or NULL: edit distance <= 2. */
static const char *suggest_key(const char *name) {
  enum { L = 64 };
  size_t n = strlen(name);
  if (n >= L) return NULL;
  const char *best = NULL;
  int best_d = 3;
  for (int k = 0; k < N_KEYS; k++) {
    const char *cand = g_keys[k].name;
    size_t m = strlen(cand);
    int prev[L], cur[L];
    for (size_t j = 0; j <= m; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
      cur[0] = (int)i;
      for (size_t j = 1; j <= m; j++) {
        int sub = prev[j - 1] + (name[i - 1] != cand[j - 1]);
        int del = prev[j] + 1, ins = cur[j - 1] + 1;
        cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
      }
      memcpy(prev, cur, sizeof(int) * (m + 1));
    }
    if (prev[m] < best_d) {
      best_d = prev[m];
      best = cand;
    }
  }
  return best;
}

static void unknown_key(char *why, size_t wsize, const char *name) {
  const char *near = suggest_key(name);
  if (near)
    snprintf(why, wsize, "unknown key '%s' (did you mean '%s'?)", name, near);
  else
    snprintf(why, wsize, "unknown key '%s'", name);
}

void mt_config_defaults(mt_config *cfg) {
  memset(cfg, 0, sizeof *cfg); /* padding too: configs compare with memcmp */
  char why[256];
  for (int i = 0; i < N_KEYS; i++)
    if (set_value(cfg, &g_keys[i], g_keys[i].def, why, sizeof why))
      mt_die("config key table: bad default: %s", why);
}

/* ------------------------------------------------------------------ */
/* INI file                                                            */

typedef struct {
  FILE *f;
  const char *path;
  mt_config *cfg;
  int line;          /* physical line of the text last handed to inih */
  int max_line;      /* longest line inih can take, characters before '\n' */
  int too_long_line; /* first line that did not fit inih's buffer, 0 if none */
  int err_line;      /* line of the first error found by the handler */
  int nul_line;      /* first line holding a NUL byte, 0 if none */
  char err[400];
  int first_line[N_KEYS]; /* where each key was set in this file, 0 = not yet */
} ini_ctx;

/* fgets for inih that counts lines, refuses (rather than splits) lines longer
 * than inih's buffer, and drops leading whitespace so that indented keys are
 * keys and not inih continuation lines. A NUL byte would end the C string
 * early and silently truncate the value: it is replaced by 0x01 (which no
 * value accepts) and its line remembered, so the handler names the key. */
static char *ini_read_line(char *str, int num, void *stream) {
  ini_ctx *c = stream;
  if (c->too_long_line || num < 2) return NULL;
  int len = 0, ch = EOF, had_nul = 0;
  while (len < num - 1 && (ch = getc(c->f)) != EOF) {
    if (ch == '\0') {
      had_nul = 1;
      ch = 0x01;
    }
    str[len++] = (char)ch;
    if (ch == '\n') break;
  }
  if (len == 0) return NULL;
  str[len] = '\0';
  c->line++;
  c->max_line = num - 2; /* inih's buffer (INI_MAX_LINE) holds the line, '\n', NUL */
  if (had_nul && !c->nul_line) c->nul_line = c->line;
  if (len == num - 1 && str[len - 1] != '\n') {
    int next = getc(c->f);
    if (next != EOF) {
      c->too_long_line = c->line;
      return NULL;
    }
  }
  size_t skip = strspn(str, " \t");
  if (skip) memmove(str, str + skip, (size_t)len - skip + 1);
  return str;
}

static int ini_on_value(void *user, const char *section, const char *name, const char *value) {
  ini_ctx *c = user;
  if (c->err_line) return 0;
  char why[sizeof c->err - 64];
  char full[160];
  int bad = 1;
  if (c->nul_line) {
    c->err_line = c->line;
    if (c->nul_line == c->line)
      snprintf(c->err, sizeof c->err, "%s:%d: %s%s%s: value contains a NUL byte (a damaged or "
               "binary file?)", c->path, c->line, clip(section).s, section[0] ? "." : "",
               clip(name).s);
    else /* a section header or comment above this key */
      snprintf(c->err, sizeof c->err, "%s:%d: line contains a NUL byte (a damaged or binary "
               "file?)", c->path, c->nul_line);
    return 0;
  }
  if (section[0] == '\0') {
    snprintf(why, sizeof why, "key '%s' is outside any [section]", name);
  } else if ((size_t)snprintf(full, sizeof full, "%s.%s", section, name) >= sizeof full) {
    snprintf(why, sizeof why, "unknown key '%.60s...'", full);
  } else {
    const mt_cfg_key *k = find_key(full);
    int idx = k ? (int)(k - g_keys) : -1;
    if (!k)
      unknown_key(why, sizeof why, full);
    else if (c->first_line[idx])
      snprintf(why, sizeof why, "%s given twice (first at line %d)", full, c->first_line[idx]);
    else
      bad = set_value(c->cfg, k, value ? value : "", why, sizeof why);
    if (!bad) c->first_line[idx] = c->line;
  }
  if (!bad) return 1;
  c->err_line = c->line;
  snprintf(c->err, sizeof c->err, "%s:%d: %s", c->path, c->line, why);
  return 0;
}

/* The text of line `line` (1-based) of f, trimmed, for syntax errors. */
static void fetch_line(FILE *f, int line, char *buf, size_t size) {
  buf[0] = '\0';
  rewind(f);
  for (int i = 1; i <= line; i++)
    if (!fgets(buf, (int)size, f)) {
      buf[0] = '\0';
      return;
    }
  buf[strcspn(buf, "\r\n")] = '\0';
  size_t skip = strspn(buf, " \t");
  memmove(buf, buf + skip, strlen(buf + skip) + 1);
}

static int load_ini(mt_config *cfg, const char *path, mt_err *e) {
  FILE *f = fopen(path, "r");
  if (!f) {
    mt_err_set(e, "%s: cannot open config file: %s", path, strerror(errno));
    return 1;
  }
  ini_ctx *c = mt_calloc(1, sizeof *c);
  c->f = f;
  c->path = path;
  c->cfg = cfg;
  int rc = ini_parse_stream(ini_read_line, c, ini_on_value, c);
  int failed = 1;
  if (ferror(f)) {
    mt_err_set(e, "%s: cannot read config file: %s", path, strerror(errno));
  } else if (rc > 0 && rc == c->err_line) {
    mt_err_set(e, "%s", c->err);
  } else if (c->nul_line && (rc <= 0 || c->nul_line <= rc)) {
    /* on a line the handler never saw: a section header, a comment, or a
     * line inih could not parse */
    mt_err_set(e, "%s:%d: line contains a NUL byte (a damaged or binary file?)", path,
               c->nul_line);
  } else if (rc > 0) {
    /* inih found a line that is neither a section, a key = value nor a
     * comment; every line before it fit the buffer, so rc is its number */
    char text[256];
    fetch_line(f, rc, text, sizeof text);
    mt_err_set(e, "%s:%d: expected '[section]' or 'key = value', got '%s'", path, rc, clip(text).s);
  } else if (rc < 0) {
    mt_err_set(e, "%s: out of memory parsing config file", path);
  } else if (c->too_long_line) {
    mt_err_set(e,
               "%s:%d: line longer than %d characters (the INI reader's limit); "
               "give long values with --set",
               path, c->too_long_line, c->max_line);
  } else {
    failed = 0;
  }
  free(c);
  fclose(f);
  return failed;
}

/* ------------------------------------------------------------------ */
/* overrides and the whole load                                        */

static void trim(char *s) {
  size_t skip = strspn(s, " \t");
  memmove(s, s + skip, strlen(s + skip) + 1);
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
}

static int apply_override(mt_config *cfg, const char *text, mt_err *e) {
  const char *eq = strchr(text, '=');
  if (!eq) {
    mt_err_set(e, "--set %s: expected section.key=value", clip(text).s);
    return 1;
  }
  char name[128], value[MT_CFG_STR_MAX + 16], why[400];
  size_t name_len = (size_t)(eq - text), value_len = strlen(eq + 1);
  if (name_len >= sizeof name || value_len >= sizeof value) {
    if (name_len >= sizeof name)
      mt_err_set(e, "--set %.40s...: unknown key", text);
    else
      mt_err_set(e, "--set %.*s=...: value is %zu characters, longer than the limit of %d",
                 (int)name_len, text, value_len, MT_CFG_STR_MAX - 1);
    return 1;
  }
  memcpy(name, text, name_len);
  name[name_len] = '\0';
  memcpy(value, eq + 1, value_len + 1);
  trim(name);
  trim(value);
  const mt_cfg_key *k = find_key(name);
  if (!k) {
    unknown_key(why, sizeof why, name);
    mt_err_set(e, "--set %s: %s", clip(text).s, why);
    return 1;
  }
  if (set_value(cfg, k, value, why, sizeof why)) {
    mt_err_set(e, "--set %s: %s", clip(text).s, why);
    return 1;
  }
  return 0;
}

/* ckpt.io_hints: empty, or key=value pairs separated by commas (keys in
 * lower case, digits and _; values without blanks), as MPI_Info takes them */
static int check_io_hints(const char *v, mt_err *e) {
  for (const char *p = v; *p;) {
    const char *end = strchr(p, ','), *eq = strchr(p, '=');
    if (!end) end = p + strlen(p);
    int bad = !eq || eq >= end || eq == p || eq + 1 == end;
    for (const char *q = p; !bad && q < eq; q++)
      bad = !(islower((unsigned char)*q) || isdigit((unsigned char)*q) || *q == '_');
    for (const char *q = eq ? eq + 1 : p; !bad && q < end; q++)
      bad = isspace((unsigned char)*q) || *q == '=';
    if (bad) {
      mt_err_set(e, "ckpt.io_hints: '%.*s' is not key=value (e.g. "
                    "striping_factor=16,cb_nodes=8)", (int)(end - p), p);
      return 1;
    }
    p = *end ? end + 1 : end;
  }
  return 0;
}

/* Ranges that depend on another key (each key's own range is checked as
 * it is read). */
static int check_across(const mt_config *cfg, mt_err *e) {
  if ((double)cfg->warmup_steps > 10.0 * (double)cfg->steps) {
    mt_err_set(e, "train.warmup_steps = %d is more than 10 x train.steps = %d: the run would "
                  "never get above a tenth of train.lr", cfg->warmup_steps, cfg->steps);
    return -1;
  }
  if (cfg->micro_batch > cfg->global_batch) {
    mt_err_set(e, "train.micro_batch = %d is more than train.global_batch = %d", cfg->micro_batch,
               cfg->global_batch);
    return -1;
  }
  if (cfg->lr * cfg->weight_decay >= 1.0) {
    mt_err_set(e, "train.lr x train.weight_decay = %g: decoupled decay would take all of every "
                  "weight each step (it must be below 1)", cfg->lr * cfg->weight_decay);
    return -1;
  }
  return 0;
}

int mt_config_load(mt_config *cfg, const char *ini_path, int n_over, char *const *overrides,
                   mt_err *e) {
  mt_config_defaults(cfg);
  if (ini_path && load_ini(cfg, ini_path, e)) return -1;
  for (int i = 0; i < n_over; i++)
    if (apply_override(cfg, overrides[i], e)) return -1;
  if (check_io_hints(cfg->ckpt_io_hints, e) != 0) return -1;
  return check_across(cfg, e);
}

/* ------------------------------------------------------------------ */
/* output                                                              */

/* Shortest %g text that reads back as exactly v ("0.001", not
 * "0.0010000000000000000208"). */
static void format_double(double v, char *buf, size_t size) {
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(buf, size, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) return;
  }
}

/* The text of key k's value in cfg, as an INI file would give it back. */
static void format_value(const mt_config *cfg, const mt_cfg_key *k, char *buf, size_t size) {
  const char *field = (const char *)cfg + k->offset;
  switch (k->type) {
  case MT_CFG_INT: snprintf(buf, size, "%d", *(const int *)(const void *)field); break;
  case MT_CFG_BOOL:
    snprintf(buf, size, "%s", *(const int *)(const void *)field ? "true" : "false");
    break;
  case MT_CFG_DOUBLE: format_double(*(const double *)(const void *)field, buf, size); break;
  case MT_CFG_STRING: {
    /* quote what inih would otherwise change: outer whitespace (stripped), a
     * leading ';' (a comment) or outer quotes (removed on load) */
    size_t n = strnlen(field, MT_CFG_STR_MAX);
    int quote = n > 0 && (isspace((unsigned char)field[0]) ||
                          isspace((unsigned char)field[n - 1]) || field[0] == ';' ||
                          field[0] == '"' || field[n - 1] == '"');
    snprintf(buf, size, quote ? "\"%.*s\"" : "%.*s", (int)n, field);
    break;
  }
  }
}

static size_t section_len(const char *name) { return (size_t)(strchr(name, '.') - name); }

void mt_config_write_ini(const mt_config *cfg, FILE *f) {
  fprintf(f, "# meshtrain configuration: every key, as used by this run\n");
  char value[MT_CFG_STR_MAX + 8];
  for (int i = 0; i < N_KEYS; i++) {
    const char *name = g_keys[i].name;
    size_t sl = section_len(name);
    if (i == 0 || sl != section_len(g_keys[i - 1].name) ||
        strncmp(name, g_keys[i - 1].name, sl) != 0)
      fprintf(f, "\n[%.*s]\n", (int)sl, name);
    format_value(cfg, &g_keys[i], value, sizeof value);
    fprintf(f, "%s = %s\n", name + sl + 1, value);
  }
}

void mt_config_print_help(FILE *f) {
  fprintf(f, "Configuration keys. Set them in an INI file ([section] then key = value)\n"
             "or with --set section.key=value; --set is applied after the file.\n");
  for (int i = 0; i < N_KEYS; i++) {
    const mt_cfg_key *k = &g_keys[i];
    size_t sl = section_len(k->name);
    if (i == 0 || sl != section_len(g_keys[i - 1].name) ||
        strncmp(k->name, g_keys[i - 1].name, sl) != 0)
      fprintf(f, "\n[%.*s]\n", (int)sl, k->name);
    char allowed[128] = "";
    if (k->choices)
      snprintf(allowed, sizeof allowed, "one of %s", k->choices);
    else if (k->type == MT_CFG_BOOL)
      snprintf(allowed, sizeof allowed, "true|false");
    else if (k->type != MT_CFG_STRING)
      describe_range(k, allowed, sizeof allowed);
    char def[64];
    snprintf(def, sizeof def, "%s", k->def[0] ? k->def : "\"\"");
    /* a long list of choices goes after the help text, within 100 columns */
    int wide = strlen(allowed) > 38;
    fprintf(f, "  %-20s %-6s  default %-22s %s\n", k->name, type_name(k->type), def,
            wide ? "" : allowed);
    fprintf(f, "      %s%s%s\n", k->help, wide ? "; " : "", wide ? allowed : "");
  }
}
