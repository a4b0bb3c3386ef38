/* The cost model's hardware profile (plan.h): a profile's [cost] section
 * (inputs/hw/<name>.ini) read and checked, written back (meshplan
 * calibrate), turned into core's prices (what the virtual device and the
 * cost model price with), and the memory headroom a device keeps. */
#include "plan/cost_internal.h"

#include <ini.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  mt_cost_profile *p;
  unsigned seen, seen_optional;
  mt_price_curve main, by_width[2]; /* gemm; gemm_bf16, gemm_fp32 */
  double attn[3];                   /* attn_gflops_bf16, attn_gflops_fp32; attn_gflops */
  double hw_peak[2];                /* [hw] peak_gflops_bf16, peak_gflops_fp32 */
  char bad[200];
} cost_parse;

enum {
  SEEN_DPN = 1, SEEN_MEM = 2, SEEN_PEAK = 4, SEEN_GEMM = 8, SEEN_ELEM = 16, SEEN_INTRA_BW = 32,
  SEEN_INTRA_LAT = 64, SEEN_INTER_BW = 128, SEEN_INTER_LAT = 256, SEEN_OVERLAP = 512,
  SEEN_ALL = 1023
};

static const char *g_cost_keys[] = {"devices_per_node", "mem_gib", "peak_gflops", "gemm",
                                    "elementwise_gbs", "intra_gbs", "intra_us", "inter_gbs",
                                    "inter_us", "overlap"};
#define N_REQUIRED ((int)(sizeof g_cost_keys / sizeof g_cost_keys[0]))
static const char *g_optional_keys[] = {"attn_block", "attention",     "collectives",
                                        "attn_gflops", "stage_us",      "act_bytes",
                                        "gemm_bf16",   "gemm_fp32",     "ring_step_us",
                                        "small_step_us", "attn_gflops_bf16", "attn_gflops_fp32",
                                        "ep_dispatch"};
static const char *g_width_names[] = {"bf16", "fp32"};
#define N_OPTIONAL ((int)(sizeof g_optional_keys / sizeof g_optional_keys[0]))

/* Each number's accepted range (g_cost_keys' order; gemm: a point's
 * GFLOP/s; then attn_gflops and stage_us): wide enough for a laptop's CPU
 * and the largest accelerator node, narrow enough to catch a slip of units
 * (MB/s for GB/s) or of exponent (a rate of 1e-300 prices a step at
 * centuries). */
static const struct {
  double lo, hi;
  const char *unit;
} g_range[] = {{1, 4096, "devices"},      {0.01, 1048576, "GiB"}, {1, 1e8, "GFLOP/s"},
               {1e-3, 1e8, "GFLOP/s"},    {0.01, 1e6, "GB/s"},    {1e-3, 1e5, "GB/s"},
               {0, 1e6, "us"},            {1e-3, 1e5, "GB/s"},    {0, 1e6, "us"},
               {0, 1, "(a fraction)"},    {0, 1e8, "GFLOP/s"},    {0, 1e6, "us"}};
enum { RANGE_ATTN = N_REQUIRED, RANGE_STAGE = N_REQUIRED + 1 };

static int parse_number(const char *v, double lo, double *out) {
  char *end = NULL;
  double x = strtod(v, &end);
  if (end == v || *end || !(x >= lo) || isinf(x)) return -1;
  *out = x;
  return 0;
}

/* a number of key name (range r of g_range) into *out, or 0 with the line
 * naming the key, the value and the range */
static int ranged(cost_parse *c, const char *name, const char *value, int r, double *out) {
  char *end = NULL;
  double x = strtod(value, &end);
  if (end == value || *end) {
    snprintf(c->bad, sizeof c->bad, "[cost] %s = '%s' is not a number", name, value);
    return 0;
  }
  if (!(x >= g_range[r].lo && x <= g_range[r].hi)) { /* (NaN fails) */
    snprintf(c->bad, sizeof c->bad, "[cost] %s = %s is outside the accepted range %g to %g %s",
             name, value, g_range[r].lo, g_range[r].hi, g_range[r].unit);
    return 0;
  }
  *out = x;
  return 1;
}

/* "flops:gflops flops:gflops ..." sorted by flops; the key may repeat, each
 * line adding points (a line holds at most 198 characters) */
static int parse_gemm(const char *v, mt_price_curve *c) {
  const char *s = v;
  while (*s) {
    while (*s == ' ' || *s == ',' || *s == '\t') s++;
    if (!*s) break;
    char *end;
    double f = strtod(s, &end);
    if (end == s || *end != ':' || !(f > 0)) return -1;
    s = end + 1;
    double g = strtod(s, &end);
    if (end == s || !(g >= g_range[3].lo && g <= g_range[3].hi) || c->n == MT_COST_MAX_GEMM)
      return -1;
    if (c->n && !(f > c->flops[c->n - 1])) return -1;
    c->flops[c->n] = f;
    c->gflops[c->n++] = g;
    s = end;
  }
  return c->n > 0 ? 0 : -1;
}

/* gemm, gemm_bf16 or gemm_fp32 into its curve, or 0 with the line */
static int gemm_key(cost_parse *c, const char *name, const char *value, mt_price_curve *curve) {
  if (parse_gemm(value, curve) == 0) return 1;
  snprintf(c->bad, sizeof c->bad, "[cost] %s = '%s' is not FLOPS:GFLOPS points by rising FLOPS, "
                                  "each GFLOP/s %g to %g", name, value, g_range[3].lo,
           g_range[3].hi);
  return 0;
}

/* a key whose value is one of two words: *is_second says which (1: the
 * inih handler's "go on"), or 0 with the line naming the bad value */
static int one_of_two(cost_parse *c, const char *name, const char *value, const char *first,
                      const char *second, int *is_second) {
  if (strcmp(value, first) && strcmp(value, second)) {
    snprintf(c->bad, sizeof c->bad, "[cost] %s = '%s' is not %s or %s", name, value, first,
             second);
    return 0;
  }
  *is_second = strcmp(value, second) == 0;
  return 1;
}

static int cost_handler(void *user, const char *section, const char *name, const char *value) {
  cost_parse *c = user;
  mt_cost_profile *p = c->p;
  if (strcmp(section, "hw") == 0) {
    if (strcmp(name, "name") == 0) snprintf(p->name, sizeof p->name, "%s", value);
    for (int w = 0; w < 2; w++) /* the peaks' ratio derives a curve not given (metrics checks) */
      if (strncmp(name, "peak_gflops_", 12) == 0 && strcmp(name + 12, g_width_names[w]) == 0)
        c->hw_peak[w] = strtod(value, NULL);
    return 1;
  }
  if (strcmp(section, "cost") != 0) return 1; /* other sections belong to others */
  int k = -1, o = -1;
  for (int i = 0; i < N_REQUIRED; i++)
    if (strcmp(name, g_cost_keys[i]) == 0) k = i;
  for (int i = 0; i < N_OPTIONAL; i++)
    if (strcmp(name, g_optional_keys[i]) == 0) o = i;
  /* a key once (the last would win unseen); the gemm curves may span lines */
  const int curve = k == 3 || (o >= 0 && strncmp(name, "gemm_", 5) == 0);
  if (!curve && ((k >= 0 && (c->seen & (1u << k))) || (o >= 0 && (c->seen_optional & (1u << o))))) {
    snprintf(c->bad, sizeof c->bad, "[cost] key '%s' given twice (give each key once)", name);
    return 0;
  }
  if (o >= 0) c->seen_optional |= 1u << o;
  double x = 0.0;
  if (curve && k < 0) /* gemm_bf16, gemm_fp32 */
    return gemm_key(c, name, value, &c->by_width[strcmp(name + 5, "fp32") == 0]);
  if (strcmp(name, "attn_block") == 0) { /* optional: "BR:BC" rows and keys of a tile */
    int br = 0, bc = 0;
    char tail = 0;
    if (sscanf(value, "%d:%d%c", &br, &bc, &tail) != 2 || br < 1 || bc < 1 || br > 4096 ||
        bc > 4096) {
      snprintf(c->bad, sizeof c->bad, "[cost] attn_block = '%s' is not ROWS:KEYS (e.g. 128:128)",
               value);
      return 0;
    }
    p->attn_br = br;
    p->attn_bc = bc;
    return 1;
  }
  if (strstr(name, "_step_us")) { /* optional: INSIDE:ACROSS, us */
    double *st = name[0] == 'r' ? p->ring_step_us : p->small_step_us;
    char tail = 0;
    if (sscanf(value, "%lf:%lf%c", &st[0], &st[1], &tail) != 2 || !(st[0] >= 0 && st[0] <= 1e4) ||
        !(st[1] >= 0 && st[1] <= 1e4)) {
      snprintf(c->bad, sizeof c->bad, "[cost] %s = '%s' is not INSIDE:ACROSS, two latencies of "
                                      "0 to 1e4 us (e.g. 3.4:14)", name, value);
      return 0;
    }
    return 1;
  }
  if (strcmp(name, "attention") == 0) /* optional: the attention kernel priced */
    return one_of_two(c, name, value, "block", "materialized", &p->attn_materialized);
  if (strcmp(name, "collectives") == 0) /* optional: how collectives cross nodes */
    return one_of_two(c, name, value, "hierarchical", "flat", &p->coll_flat);
  if (strcmp(name, "ep_dispatch") == 0) /* optional: how routed tokens cross nodes */
    return one_of_two(c, name, value, "flat", "per-node", &p->ep_per_node);
  if ((o >= 0 && strncmp(name, "attn_gflops", 11) == 0) || strcmp(name, "stage_us") == 0) {
    const int attn = name[0] == 'a';
    if (!ranged(c, name, value, attn ? RANGE_ATTN : RANGE_STAGE, &x)) return 0;
    /* (optional) stage_us; attn_gflops, or _bf16 / _fp32 by width */
    *(attn ? &c->attn[name[11] ? strcmp(name + 12, "fp32") == 0 : 2] : &p->stage_us) = x;
    return 1;
  }
  if (strcmp(name, "act_bytes") == 0) { /* optional: bytes an activation element takes */
    if (parse_number(value, 1, &x) || (x != 2 && x != 4)) {
      snprintf(c->bad, sizeof c->bad, "[cost] act_bytes = '%s' is not 2 or 4", value);
      return 0;
    }
    p->act_bytes = x;
    return 1;
  }
  if (k < 0) {
    snprintf(c->bad, sizeof c->bad, "[cost] unknown key '%s'", name);
    return 0;
  }
  if (k == 3) { /* gemm */
    if (!gemm_key(c, name, value, &c->main)) return 0;
  } else {
    if (!ranged(c, name, value, k, &x)) return 0;
    if (k == 0 && x != floor(x)) {
      snprintf(c->bad, sizeof c->bad, "[cost] devices_per_node = %s is not a whole number", value);
      return 0;
    }
    double *field[] = {NULL, &p->mem_bytes, &p->peak_gflops, NULL, &p->elementwise_gbs,
                       &p->intra_gbs, &p->intra_us, &p->inter_gbs, &p->inter_us, &p->overlap};
    if (k == 0) p->devices_per_node = (int)x;
    else *field[k] = k == 1 ? x * 1073741824.0 : x;
  }
  c->seen |= 1u << k;
  return 1;
}

/* no matmul above the peak (1% for rounding in a written profile): a peak
 * below the matmul curve would read as an MFU above 100%. (A measured
 * attn_gflops may pass the sgemm peak: the block kernels count the FLOPs of
 * the tiles they skip or fuse.) */
static int check_peak(const mt_cost_profile *p, const char *path, mt_err *e) {
  const mt_price_curve *g = &p->gemm[mt_price_width(p->act_bytes)];
  double top = 0.0;
  for (int i = 0; i < g->n; i++) top = g->gflops[i] > top ? g->gflops[i] : top;
  if (top > 1.01 * p->peak_gflops) {
    mt_err_set(e, "%s: [cost] peak_gflops = %g is below the gemm curve's top (%g GFLOP/s): the "
                  "peak bounds every matmul (raise peak_gflops, or lower the curve)", path,
               p->peak_gflops, top);
    return -1;
  }
  return 0;
}

/* gemm and attn_gflops are the rates of the width trained in (act_bytes);
 * the other width's from its own key, else the one given scaled by the
 * [hw] peaks' ratio */
static int set_curves(mt_cost_profile *p, const cost_parse *c, const char *path, mt_err *e) {
  const int w = mt_price_width(p->act_bytes), x = 1 - w;
  const char *own = c->by_width[w].n > 0 ? "gemm" : c->attn[w] > 0 ? "attn_gflops" : NULL;
  if (own) {
    mt_err_set(e, "%s: [cost] %s_%s is %s's own width (act_bytes = %g): give it once, as %s",
               path, own, g_width_names[w], own, p->act_bytes, own);
    return -1;
  }
  const double ratio = c->hw_peak[w] > 0 && c->hw_peak[x] > 0 ? c->hw_peak[x] / c->hw_peak[w] : 1;
  p->gemm[w] = c->main;
  p->gemm_given = 1u << w;
  if (c->by_width[x].n > 0) {
    p->gemm[x] = c->by_width[x];
    p->gemm_given |= 1u << x;
  } else {
    p->gemm[x] = c->main;
    for (int i = 0; i < p->gemm[x].n; i++) p->gemm[x].gflops[i] *= ratio;
  }
  p->attn_given = (c->attn[2] > 0 ? 1u << w : 0) | (c->attn[x] > 0 ? 1u << x : 0);
  p->attn_gflops[w] = c->attn[2] > 0 ? c->attn[2] : c->attn[x] / ratio;
  p->attn_gflops[x] = c->attn[x] > 0 ? c->attn[x] : c->attn[2] * ratio;
  return 0;
}

int mt_cost_profile_load(mt_cost_profile *p, const char *name_or_path, mt_err *e) {
  memset(p, 0, sizeof *p);
  char path[MT_CFG_STR_MAX + 1200];
  FILE *f = mt_hw_profile_open(name_or_path, path, sizeof path);
  if (!f) {
    mt_err_set(e, "hardware profile '%s': cannot open (looked for %s)", name_or_path, path);
    return -1;
  }
  cost_parse c = {.p = p};
  int rc = ini_parse_file(f, cost_handler, &c);
  fclose(f);
  if (rc != 0) {
    mt_err_set(e, "%s:%d: %s", path, rc,
               c.bad[0] ? c.bad : "syntax error (or a line over 198 characters)");
    return -1;
  }
  if (p->act_bytes == 0) p->act_bytes = 4;
  if (p->attn_br == 0) p->attn_br = 64, p->attn_bc = 256; /* the CPU backend's blocks */
  for (int i = 0; i < N_REQUIRED; i++)
    if (!(c.seen & (1u << i))) {
      mt_err_set(e, "%s: [cost] key '%s' missing (a cost profile needs %s)", path,
                 g_cost_keys[i], "devices_per_node, mem_gib, peak_gflops, gemm, "
                 "elementwise_gbs, intra_gbs, intra_us, inter_gbs, inter_us, overlap");
      return -1;
    }
  MT_TRY(e, set_curves(p, &c, path, e));
  MT_TRY(e, check_peak(p, path, e));
  if (!p->name[0]) snprintf(p->name, sizeof p->name, "%s", name_or_path);
  return 0;
}

void mt_cost_profile_write(const mt_cost_profile *p, const char *description, FILE *f) {
  fprintf(f, "# %.180s\n[hw]\nname = %.180s\ndescription = %.180s\npeak_gflops_fp32 = %.6g\n"
             "peak_gflops_bf16 = %.6g\nranks_per_node = %d\n\n[cost]\n",
          description, p->name, description, p->peak_gflops, p->peak_gflops,
          p->devices_per_node);
  fprintf(f, "devices_per_node = %d\nmem_gib = %.6g\npeak_gflops = %.6g\n",
          p->devices_per_node, p->mem_bytes / 1073741824.0, p->peak_gflops);
  /* four points a line keeps every line far below inih's 198 characters;
   * gemm the width trained in, the other's where it was not derived */
  const int w = mt_price_width(p->act_bytes);
  for (int v = 0; v < 2; v++) {
    const int u = v ? 1 - w : w;
    const mt_price_curve *g = &p->gemm[u];
    char key[16];
    snprintf(key, sizeof key, v ? "gemm_%s =" : "gemm =", g_width_names[u]);
    if (v && !(p->gemm_given & (1u << u))) continue;
    for (int i = 0; i < g->n; i++)
      fprintf(f, "%s %.4g:%.5g%s", i % 4 ? "" : key, g->flops[i], g->gflops[i],
              i % 4 == 3 || i == g->n - 1 ? "\n" : "");
  }
  fprintf(f, "elementwise_gbs = %.6g\nintra_gbs = %.6g\nintra_us = %.6g\ninter_gbs = %.6g\n"
             "inter_us = %.6g\noverlap = %.3g\n",
          p->elementwise_gbs, p->intra_gbs, p->intra_us, p->inter_gbs, p->inter_us, p->overlap);
  if (p->act_bytes && p->act_bytes != 4) fprintf(f, "act_bytes = %.0f\n", p->act_bytes);
  if (p->attn_br > 0) fprintf(f, "attn_block = %d:%d\n", p->attn_br, p->attn_bc);
  for (int v = 0; v < 2; v++) { /* as the curves: the other width's where given */
    const int u = v ? 1 - w : w;
    if (p->attn_given & (1u << u))
      fprintf(f, "attn_gflops%s%s = %.6g\n", v ? "_" : "", v ? g_width_names[u] : "",
              p->attn_gflops[u]);
  }
  if (p->stage_us > 0) fprintf(f, "stage_us = %.6g\n", p->stage_us);
  if (p->coll_flat) fprintf(f, "collectives = flat\n");
  if (p->ep_per_node) fprintf(f, "ep_dispatch = per-node\n");
  for (int s = 0; s < 2; s++) {
    const double *st = s ? p->small_step_us : p->ring_step_us;
    if (st[0] > 0 || st[1] > 0)
      fprintf(f, "%s_step_us = %.6g:%.6g\n", s ? "small" : "ring", st[0], st[1]);
  }
}

/* the one place the compute efficiency enters: every matmul and attention
 * tile the cost model prices reads its rate from here (scaling the curve's
 * rates scales its log-log interpolation exactly) */
void mt_cost_price(const mt_cost_profile *p, mt_price *out) {
  const double eff = p->compute_efficiency > 0 ? p->compute_efficiency : 1.0;
  memset(out, 0, sizeof *out);
  for (int w = 0; w < 2; w++) {
    out->gemm[w] = p->gemm[w];
    for (int i = 0; i < out->gemm[w].n; i++) out->gemm[w].gflops[i] *= eff;
  }
  out->elementwise_gbs = p->elementwise_gbs;
  out->act_bytes = p->act_bytes > 0 ? p->act_bytes : 4;
  out->devices_per_node = p->devices_per_node;
  out->intra_gbs = p->intra_gbs;
  out->intra_us = p->intra_us;
  out->inter_gbs = p->inter_gbs;
  out->inter_us = p->inter_us;
  out->attn_br = p->attn_br;
  out->attn_bc = p->attn_bc;
  for (int w = 0; w < 2; w++) out->attn_gflops[w] = eff * p->attn_gflops[w];
  out->overlap = p->overlap;
  out->stage_us = p->stage_us;
  out->coll_flat = p->coll_flat;
  memcpy(out->ring_step_us, p->ring_step_us, sizeof out->ring_step_us);
  memcpy(out->small_step_us, p->small_step_us, sizeof out->small_step_us);
}

/* the matmul curve is core's (mt_price_gemm_gflops): the virtual device
 * prices each matmul it emulates with the same function */
double mt_cost_gemm_gflops(const mt_cost_profile *p, double es, double flops) {
  mt_price q;
  mt_cost_price(p, &q);
  return mt_price_gemm_gflops(&q, es, flops);
}

double mt_cost_headroom(const mt_config *cfg, const mt_cost_profile *p) {
  const double GiB = 1073741824.0;
  if (cfg->plan_headroom >= 0) return cfg->plan_headroom * GiB;
  /* fragmentation of the caching allocator and the collectives' buffers
   * (NCCL's channels, the pipeline's receive buffers) take about 2-3 GiB of
   * an 80 GB GPU in practice; a small test profile keeps a tenth */
  double h = 3.0 * GiB;
  return h < 0.1 * p->mem_bytes ? h : 0.1 * p->mem_bytes;
}
