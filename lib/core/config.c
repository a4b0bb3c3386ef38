/* Configuration: the parser and writer. A configuration is filled from the
 * key table's defaults (config_keys.c), then an INI file (read with inih),
 * then "section.key=value" overrides in order. Every value goes through the
 * same parser, so a file and --set accept and reject the same text; an
 * enumerated key's text becomes its enum here, once. The checks across
 * keys are config_check.c's.
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
#include "core/config_internal.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <ini.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <strings.h>

#define GT0 MT_CFG_GT0
#define LT1 MT_CFG_LT1
#define NOMAX MT_CFG_NOMAX
#define NOMIN MT_CFG_NOMIN

const char *mt_config_type_name(mt_cfg_type t) {
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
void mt_config_range_text(const mt_cfg_key *k, char *buf, size_t size) {
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
 * it as the start of a comment). An enumerated key (k->choices) takes one of
 * its choices and stores its enum value in the int at out; any other string
 * is stored as text in the MT_CFG_STR_MAX bytes at out. */
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
  if (k->choices) {
    int choice = mt_cfg_choice_value(k, value, len);
    if (choice < 0) {
      snprintf(why, wsize, "%s: '%s' is not one of %s", k->name, clip(value).s, k->choices);
      return 1;
    }
    *(int *)(void *)out = choice;
    return 0;
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
    mt_config_range_text(k, range, sizeof range);
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
  int best_d = 3, n_keys = 0;
  const mt_cfg_key *keys = mt_config_keys(&n_keys);
  for (int k = 0; k < n_keys; k++) {
    const char *cand = keys[k].name;
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
  int n_keys = 0;
  const mt_cfg_key *keys = mt_config_keys(&n_keys);
  for (int i = 0; i < n_keys; i++) {
    if (keys[i].choices && !mt_cfg_choices_agree(&keys[i], why, sizeof why))
      mt_die("config key table: %s", why);
    if (set_value(cfg, &keys[i], keys[i].def, why, sizeof why))
      mt_die("config key table: bad default: %s", why);
  }
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
  const mt_cfg_key *keys; /* the key table (mt_config_keys) */
  int *first_line;        /* where each key was set in this file, 0 = not yet */
  unsigned char *given;   /* the keys given (by index), for the presets: set here */
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
    const mt_cfg_key *k = mt_cfg_find_key(full);
    int idx = k ? (int)(k - c->keys) : -1;
    if (!k)
      unknown_key(why, sizeof why, full);
    else if (c->first_line[idx])
      snprintf(why, sizeof why, "%s given twice (first at line %d)", full, c->first_line[idx]);
    else
      bad = set_value(c->cfg, k, value ? value : "", why, sizeof why);
    if (!bad) c->first_line[idx] = c->line, c->given[idx] = 1;
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

/* the INI text of f (named path in messages) into cfg; closes f */
static int load_ini_stream(mt_config *cfg, FILE *f, const char *path, unsigned char *given,
                           mt_err *e) {
  ini_ctx *c = mt_calloc(1, sizeof *c);
  c->f = f;
  c->path = path;
  c->cfg = cfg;
  c->given = given;
  int n_keys = 0;
  c->keys = mt_config_keys(&n_keys);
  c->first_line = mt_calloc((size_t)n_keys, sizeof(int));
  int rc = ini_parse_stream(ini_read_line, c, ini_on_value, c);
  int failed = -1;
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
  free(c->first_line);
  free(c);
  fclose(f);
  return failed;
}

static int load_ini(mt_config *cfg, const char *path, unsigned char *given, mt_err *e) {
  FILE *f = fopen(path, "r");
  if (!f) {
    mt_err_set(e, "%s: cannot open config file: %s", path, strerror(errno));
    return -1;
  }
  return load_ini_stream(cfg, f, path, given, e);
}

/* ------------------------------------------------------------------ */
/* overrides and the whole load                                        */

static void trim(char *s) {
  size_t skip = strspn(s, " \t");
  memmove(s, s + skip, strlen(s + skip) + 1);
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
}

static int apply_override(mt_config *cfg, const char *text, unsigned char *given, mt_err *e) {
  const char *eq = strchr(text, '=');
  if (!eq) {
    mt_err_set(e, "--set %s: expected section.key=value", clip(text).s);
    return -1;
  }
  char name[128], value[MT_CFG_STR_MAX + 16], why[400];
  size_t name_len = (size_t)(eq - text), value_len = strlen(eq + 1);
  if (name_len >= sizeof name || value_len >= sizeof value) {
    if (name_len >= sizeof name)
      mt_err_set(e, "--set %.40s...: unknown key", text);
    else
      mt_err_set(e, "--set %.*s=...: value is %zu characters, longer than the limit of %d",
                 (int)name_len, text, value_len, MT_CFG_STR_MAX - 1);
    return -1;
  }
  memcpy(name, text, name_len);
  name[name_len] = '\0';
  memcpy(value, eq + 1, value_len + 1);
  trim(name);
  trim(value);
  const mt_cfg_key *k = mt_cfg_find_key(name);
  if (!k) {
    unknown_key(why, sizeof why, name);
    mt_err_set(e, "--set %s: %s", clip(text).s, why);
    return -1;
  }
  if (set_value(cfg, k, value, why, sizeof why)) {
    mt_err_set(e, "--set %s: %s", clip(text).s, why);
    return -1;
  }
  int n_keys = 0;
  given[k - mt_config_keys(&n_keys)] = 1;
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
      return -1;
    }
    p = *end ? end + 1 : end;
  }
  return 0;
}

/* The MoE presets' experts: the MoE keys a file or an override left at
 * their defaults take the preset's values (as the shape keys' 0 takes the
 * preset's dimension; model.h's presets hold the rest of the shape). */
static void preset_moe(mt_config *cfg, const unsigned char *given) {
  static const struct {
    mt_preset preset;
    int experts, topk, ffn, shared;
    mt_moe_router router;
    mt_moe_balance balance;
  } moe[] = {/* Mixtral 8x7B: 8 SwiGLU experts, top-2, softmax */
             {MT_PRESET_MIXTRAL_8X7B, 8, 2, 14336, 0, MT_ROUTER_SOFTMAX, MT_MOE_BALANCE_AUX},
             /* DeepSeek-V3: 256 fine-grained experts, top-8, one shared, sigmoid
              * scores, aux-loss-free balancing by a routing bias */
             {MT_PRESET_DEEPSEEK_V3_LIKE, 256, 8, 2048, 1, MT_ROUTER_SIGMOID,
              MT_MOE_BALANCE_BIAS}};
  int n_keys = 0;
  const mt_cfg_key *keys = mt_config_keys(&n_keys);
  for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++) {
    if (cfg->model_preset != moe[i].preset) continue;
    /* the preset's value where the configuration gave none (a key given at
     * its default value keeps it) */
#define PRESET_KEY(name, field, v) \
  if (!given[mt_cfg_find_key(name) - keys]) cfg->field = (v)
    PRESET_KEY("model.moe_experts", moe_experts, moe[i].experts);
    PRESET_KEY("model.moe_topk", moe_topk, moe[i].topk);
    PRESET_KEY("model.moe_ffn", moe_ffn, moe[i].ffn);
    PRESET_KEY("model.moe_shared", moe_shared, moe[i].shared);
    PRESET_KEY("model.moe_router", moe_router, moe[i].router);
    PRESET_KEY("train.moe_balance", moe_balance, moe[i].balance);
#undef PRESET_KEY
  }
}

/* Keys whose default follows another key, where the configuration gave no
 * value: parallel.schedule = zb-v has one value of virtual_stages (2, the
 * V's two chunks per rank), and train.device = virtual computes no values
 * to checkpoint (ckpt.mode = none). A value given is kept, and checked. */
static void follow_defaults(mt_config *cfg, const unsigned char *given) {
  int n_keys = 0;
  const mt_cfg_key *keys = mt_config_keys(&n_keys);
  const int v_given = given[mt_cfg_find_key("parallel.virtual_stages") - keys],
            mode_given = given[mt_cfg_find_key("ckpt.mode") - keys];
  if (cfg->pp_schedule == MT_SCHED_ZBV && !v_given) cfg->virtual_stages = 2;
  if (cfg->device == MT_DEVICE_VIRTUAL && !mode_given) cfg->ckpt_mode = MT_CKPT_MODE_NONE;
}

int mt_config_token_ids_ok(const char *text) {
  const char *p = text;
  while (*p == ' ') p++;
  if (!*p || !strcmp(p, "null")) return 1;
  int list = *p == '[', n = 0;
  if (list) p++;
  for (;;) {
    while (*p == ' ') p++;
    if (list && *p == ']' && n == 0) break; /* [] */
    int digits = 0;
    while (isdigit((unsigned char)*p)) p++, digits++;
    if (digits < 1 || digits > 9) return 0; /* ids below 10^9 */
    n++;
    while (*p == ' ') p++;
    if (!list || *p != ',') break;
    p++;
  }
  if (list && *p++ != ']') return 0;
  while (*p == ' ') p++;
  return *p == '\0';
}

/* The keys the optimizer and the model compute with in fp32: a value that
 * is not 0 but below fp32's smallest normal number becomes 0 there (or a
 * subnormal that has lost its digits): train.lr = 4.9e-324 would train
 * nothing. */
static int check_fp32_values(const mt_config *cfg, mt_err *e) {
  static const char *fp32_keys[] = {"train.lr", "train.min_lr_ratio", "train.weight_decay",
                                    "train.beta1", "train.beta2", "train.eps", "train.grad_clip",
                                    "train.moe_aux_coef", "train.moe_z_coef",
                                    "train.moe_bias_rate", "train.moe_bias_init",
                                    "model.norm_eps"};
  for (size_t i = 0; i < sizeof fp32_keys / sizeof fp32_keys[0]; i++) {
    const mt_cfg_key *k = mt_cfg_find_key(fp32_keys[i]);
    const double x = *(const double *)(const void *)((const char *)cfg + k->offset);
    if (x != 0.0 && fabs(x) < FLT_MIN) {
      mt_err_set(e, "%s = %g is below fp32's smallest normal number %g, and meshtrain computes "
                    "it in fp32 (where it is 0 or has lost its digits)", k->name, x,
                 (double)FLT_MIN);
      return -1;
    }
  }
  return 0;
}

/* the checks of single keys the key table cannot state */
static int check_values(const mt_config *cfg, mt_err *e) {
  MT_TRY(e, check_io_hints(cfg->ckpt_io_hints, e));
  MT_TRY(e, check_fp32_values(cfg, e));
  const char *ids[2] = {cfg->bos_token_id, cfg->eos_token_id};
  for (int i = 0; i < 2; i++)
    if (!mt_config_token_ids_ok(ids[i])) {
      mt_err_set(e, "model.%s_token_id: '%s' is not an id, a list of ids ([1,2]) or null",
                 i ? "eos" : "bos", clip(ids[i]).s);
      return -1;
    }
  return 0;
}

int mt_config_load(mt_config *cfg, const char *ini_path, int n_over, char *const *overrides,
                   mt_err *e) {
  mt_config_defaults(cfg);
  int n_keys = 0, rc = 0;
  mt_config_keys(&n_keys);
  unsigned char *given = mt_calloc((size_t)n_keys, 1); /* the keys the ini or --set gave */
  if (ini_path) rc = load_ini(cfg, ini_path, given, e);
  for (int i = 0; i < n_over && rc == 0; i++) rc = apply_override(cfg, overrides[i], given, e);
  if (rc == 0) {
    preset_moe(cfg, given);
    follow_defaults(cfg, given);
  }
  free(given);
  MT_TRY(e, rc);
  MT_TRY(e, check_values(cfg, e));
  return 0;
}

int mt_config_load_text(mt_config *cfg, const char *text, const char *name, mt_err *e) {
  mt_config_defaults(cfg);
  int n_keys = 0;
  mt_config_keys(&n_keys);
  unsigned char *given = mt_calloc((size_t)n_keys, 1);
  if (text[0]) { /* (fmemopen takes no empty buffer) */
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    if (!f) {
      free(given);
      mt_err_runtime(e, "%s: cannot read the configuration text: %s", name, strerror(errno));
      return -1;
    }
    if (load_ini_stream(cfg, f, name, given, e) != 0) {
      free(given);
      return -1;
    }
  }
  preset_moe(cfg, given);
  follow_defaults(cfg, given);
  free(given);
  MT_TRY(e, check_values(cfg, e));
  return 0;
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
    if (k->choices) { /* an enumerated key: its choice's text */
      const char *name = mt_cfg_choice_name(k, *(const int *)(const void *)field);
      snprintf(buf, size, "%s", name ? name : "?");
      break;
    }
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

/* every key of section (NULL: all), grouped in [sections] */
static void write_keys(const mt_config *cfg, const char *section, FILE *f) {
  char value[MT_CFG_STR_MAX + 8];
  int n_keys = 0;
  const mt_cfg_key *keys = mt_config_keys(&n_keys);
  for (int i = 0; i < n_keys; i++) {
    const char *name = keys[i].name;
    size_t sl = section_len(name);
    if (section && (strlen(section) != sl || strncmp(name, section, sl) != 0)) continue;
    if (i == 0 || sl != section_len(keys[i - 1].name) ||
        strncmp(name, keys[i - 1].name, sl) != 0)
      fprintf(f, "\n[%.*s]\n", (int)sl, name);
    format_value(cfg, &keys[i], value, sizeof value);
    fprintf(f, "%s = %s\n", name + sl + 1, value);
  }
}

void mt_config_write_ini(const mt_config *cfg, FILE *f) {
  fprintf(f, "# meshtrain configuration: every key, as used by this run\n");
  write_keys(cfg, NULL, f);
}

void mt_config_write_ini_section(const mt_config *cfg, const char *section, FILE *f) {
  write_keys(cfg, section, f);
}

void mt_config_print_help(FILE *f) {
  fprintf(f, "Configuration keys. Set them in an INI file ([section] then key = value)\n"
             "or with --set section.key=value; --set is applied after the file.\n");
  int n_keys = 0;
  const mt_cfg_key *keys = mt_config_keys(&n_keys);
  for (int i = 0; i < n_keys; i++) {
    const mt_cfg_key *k = &keys[i];
    size_t sl = section_len(k->name);
    if (i == 0 || sl != section_len(keys[i - 1].name) ||
        strncmp(k->name, keys[i - 1].name, sl) != 0)
      fprintf(f, "\n[%.*s]\n", (int)sl, k->name);
    char allowed[256] = "";
    if (k->choices)
      snprintf(allowed, sizeof allowed, "one of %s", k->choices);
    else if (k->type == MT_CFG_BOOL)
      snprintf(allowed, sizeof allowed, "true|false");
    else if (k->type != MT_CFG_STRING)
      mt_config_range_text(k, allowed, sizeof allowed);
    char def[64];
    snprintf(def, sizeof def, "%s", k->def[0] ? k->def : "\"\"");
    /* a long list of choices goes after the help text, within 100 columns
     * (on a line of its own where the two together would not fit) */
    int wide = strlen(allowed) > 38, own = wide && strlen(k->help) + strlen(allowed) > 92;
    fprintf(f, "  %-20s %-6s  default %-22s %s\n", k->name, mt_config_type_name(k->type), def,
            wide ? "" : allowed);
    fprintf(f, "      %s%s%s\n", k->help, wide && !own ? "; " : "", wide && !own ? allowed : "");
    /* on lines of their own, broken after a '|' within 100 columns */
    for (const char *p = allowed; own && *p;) {
      size_t n = strlen(p);
      if (n > 94)
        for (n = 94; n > 0 && p[n - 1] != '|'; n--) continue;
      if (n == 0) n = strlen(p);
      fprintf(f, "      %.*s\n", (int)n, p);
      p += n;
    }
  }
}
