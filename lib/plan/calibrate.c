/* A cost profile from meshbench's JSON lines: the matmul throughput by size
 * from `meshbench gemm`, the collectives' latency and bus bandwidth inside a
 * node and across nodes from `meshbench allreduce` (or any collective), the
 * memory bandwidth from `meshbench stream`. The same model then prices
 * layouts on this machine, a GPU node or LEONARDO. */
#include "plan/plan.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* every line of path as JSON, handed to fn; -1 with e set if unreadable */
static int each_line(const char *path, void (*fn)(const cJSON *o, void *ctx), void *ctx,
                     mt_err *e) {
  FILE *f = fopen(path, "r");
  if (!f) {
    mt_err_set(e, "%s: cannot open", path);
    return -1;
  }
  char *line = NULL;
  size_t cap = 0;
  int n = 0;
  while (getline(&line, &cap, f) > 0) {
    cJSON *o = cJSON_Parse(line);
    if (!o) continue;
    fn(o, ctx);
    cJSON_Delete(o);
    n++;
  }
  free(line);
  fclose(f);
  if (n == 0) {
    mt_err_set(e, "%s: no JSON lines (meshbench --json writes them)", path);
    return -1;
  }
  return 0;
}

static double num(const cJSON *o, const char *k) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(x) ? x->valuedouble : NAN;
}

static int is_bench(const cJSON *o, const char *name) {
  const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "bench");
  return cJSON_IsString(b) && strcmp(b->valuestring, name) == 0;
}

/* ---- gemm ---- */
/* the points of each operand width (core's mt_price_width: [0] bf16, [1]
 * fp32) */
typedef struct {
  double flops[2][512], gflops[2][512];
  int n[2];
} gemm_points;

static void add_point(gemm_points *g, int w, const cJSON *sh, const char *rate) {
  double f = 2.0 * num(sh, "m") * num(sh, "n") * num(sh, "k"), gf = num(sh, rate);
  if (!(f > 0) || !(gf > 0) || g->n[w] == 512) return;
  g->flops[w][g->n[w]] = f;
  g->gflops[w][g->n[w]++] = gf;
}

static const char *str(const cJSON *o, const char *k) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(x) ? x->valuestring : "";
}

/* meshbench gemm (its --precision: fp32 unless it says bf16) and gemm-bf16
 * (bf16 on the path the run would choose, default_path, beside fp32) */
static void on_gemm(const cJSON *o, void *ctx) {
  gemm_points *g = ctx;
  const int bf16_bench = is_bench(o, "gemm-bf16");
  if (!is_bench(o, "gemm") && !bf16_bench) return;
  char rate[64];
  snprintf(rate, sizeof rate, "gflops_%.50s", str(o, "default_path"));
  const cJSON *sh;
  cJSON_ArrayForEach(sh, cJSON_GetObjectItemCaseSensitive(o, "shapes")) {
    if (bf16_bench) {
      add_point(g, 0, sh, rate);
      add_point(g, 1, sh, "gflops_fp32");
    } else {
      add_point(g, strcmp(str(o, "precision"), "bf16") == 0 ? 0 : 1, sh, "gflops");
    }
  }
}

static int cmp_pair(const void *a, const void *b) {
  const double *x = a, *y = b;
  return (x[0] > y[0]) - (x[0] < y[0]);
}

/* a width's points sorted by size, equal sizes averaged, at most a curve's
 * table; returns the curve's top rate */
static double fit_curve(const gemm_points *g, int w, mt_price_curve *curve) {
  const int n = g->n[w];
  double (*pairs)[2] = mt_calloc((size_t)n + 1, sizeof *pairs);
  for (int i = 0; i < n; i++) pairs[i][0] = g->flops[w][i], pairs[i][1] = g->gflops[w][i];
  qsort(pairs, (size_t)n, sizeof *pairs, cmp_pair);
  double peak = 0.0;
  curve->n = 0;
  for (int i = 0; i < n;) {
    int j = i;
    double sum = 0.0;
    while (j < n && pairs[j][0] == pairs[i][0]) sum += pairs[j++][1];
    if (curve->n < MT_COST_MAX_GEMM) {
      curve->flops[curve->n] = pairs[i][0];
      curve->gflops[curve->n++] = sum / (j - i);
    }
    if (sum / (j - i) > peak) peak = sum / (j - i);
    i = j;
  }
  free(pairs);
  return peak;
}

/* ---- collectives ---- */
typedef struct {
  double bytes[2][256], time_us[2][256], busbw[2][256];
  int n[2];          /* [0] inside a node, [1] across */
  int ranks_per_node;
} coll_points;

static void on_coll(const cJSON *o, void *ctx) {
  coll_points *c = ctx;
  double nodes = num(o, "nodes"), ranks = num(o, "ranks"), bw = num(o, "busbw_gbs");
  double t = num(o, "time_us"), bytes = num(o, "bytes");
  if (!(nodes >= 1) || !(ranks >= 2) || !(bw > 0) || !(t > 0) || !(bytes > 0)) return;
  int k = nodes > 1;
  if (c->n[k] == 256) return;
  c->bytes[k][c->n[k]] = bytes;
  c->time_us[k][c->n[k]] = t;
  c->busbw[k][c->n[k]++] = bw;
  int rpn = (int)(ranks / nodes);
  if (rpn > c->ranks_per_node) c->ranks_per_node = rpn;
}

/* latency: the time of the smallest message; bandwidth: the best bus
 * bandwidth among the three largest sizes (messages large enough to fill
 * the link) */
static void fit_link(const coll_points *c, int k, double *gbs, double *us) {
  int n = c->n[k];
  double small = INFINITY, lat = 0.0;
  for (int i = 0; i < n; i++)
    if (c->bytes[k][i] < small || (c->bytes[k][i] == small && c->time_us[k][i] < lat)) {
      small = c->bytes[k][i];
      lat = c->time_us[k][i];
    }
  double third = -1.0; /* the third largest distinct size */
  for (int rank = 0; rank < 3; rank++) {
    double next = -1.0;
    for (int i = 0; i < n; i++)
      if (c->bytes[k][i] > next && (third < 0 || c->bytes[k][i] < third)) next = c->bytes[k][i];
    if (next < 0) break;
    third = next;
  }
  double best = 0.0;
  for (int i = 0; i < n; i++)
    if (c->bytes[k][i] >= third && c->busbw[k][i] > best) best = c->busbw[k][i];
  *gbs = best;
  *us = lat;
}

/* ---- stream ---- */
static void on_stream(const cJSON *o, void *ctx) {
  double *gbs = ctx, x = num(o, "gbs");
  if (is_bench(o, "stream") && x > *gbs) *gbs = x;
}

/* ---- attention: the block kernels' rate on whole tiles ---- */
typedef struct {
  mt_price tiles; /* the tile the rate is for (the CPU backend's blocks) */
  double rate_sum[2];
  int n[2]; /* by mt_price_width */
} attn_points;

/* Each row's fused rate: the FLOPs mt_price_attn_fwd_s counts for a fused
 * kernel (whole tiles) times 3.5 (forward and its 2.5 x backward) over the
 * time measured, so that the cost model, priced at that rate, gives back
 * the measured time at these shapes; the rows' mean, by the precision the
 * kernels ran in (meshbench attention --precision; fp32 where unsaid) */
static void on_attn(const cJSON *o, void *ctx) {
  attn_points *a = ctx;
  if (!is_bench(o, "attention")) return;
  double C = num(o, "n_embd"), NH = num(o, "n_head");
  if (!(C > 0) || !(NH > 0)) return;
  const cJSON *prec = cJSON_GetObjectItemCaseSensitive(o, "precision");
  const int w = cJSON_IsString(prec) && strcmp(prec->valuestring, "bf16") == 0 ? 0 : 1;
  const cJSON *row;
  cJSON_ArrayForEach(row, cJSON_GetObjectItemCaseSensitive(o, "rows")) {
    double T = num(row, "T"), B = num(row, "B");
    double t = num(cJSON_GetObjectItemCaseSensitive(row, "blocks"), "time_s");
    if (!(T > 0) || !(B > 0) || !(t > 0)) continue;
    mt_price unit = a->tiles;
    unit.attn_gflops[0] = unit.attn_gflops[1] = 1.0; /* then the price is whole-tile GFLOPs */
    double gflop = mt_price_attn_fwd_s(&unit, 4.0, B * NH, 0, (int)T, 0, (int)T, 1, C / NH);
    a->rate_sum[w] += 3.5 * gflop / t;
    a->n[w]++;
  }
}


int mt_cost_calibrate(const mt_calibration_input *in, mt_cost_profile *p, mt_err *e) {
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", in->name);
  gemm_points *g = mt_calloc(1, sizeof *g);
  coll_points *c = mt_calloc(1, sizeof *c);
  double stream = 0.0;
  int rc = -1;
  if (each_line(in->gemm_json, on_gemm, g, e) != 0 || each_line(in->coll_json, on_coll, c, e) != 0 ||
      each_line(in->stream_json, on_stream, &stream, e) != 0) {
    rc = mt_err_pass(e);
    goto done;
  }
  if (g->n[0] + g->n[1] == 0) {
    mt_err_set(e, "%s: no meshbench gemm shapes", in->gemm_json);
    goto done;
  }
  if (c->n[0] + c->n[1] == 0) {
    mt_err_set(e, "%s: no collective rows with 2 or more ranks", in->coll_json);
    goto done;
  }
  if (!(stream > 0)) {
    mt_err_set(e, "%s: no meshbench stream result", in->stream_json);
    goto done;
  }
  /* matmuls: each width measured its curve; the profile trains in fp32
   * where fp32 was measured (the CPU's default), else in bf16 */
  p->act_bytes = g->n[1] ? 4 : 2;
  double peak = 0.0;
  for (int w = 0; w < 2; w++) {
    if (!g->n[w]) continue;
    double top = fit_curve(g, w, &p->gemm[w]);
    p->gemm_given |= 1u << w;
    if (w == mt_price_width(p->act_bytes)) peak = top;
  }
  if (!g->n[0]) p->gemm[0] = p->gemm[1]; /* not measured: as the other (mt_cost_profile_load) */
  if (!g->n[1]) p->gemm[1] = p->gemm[0];
  /* links: across nodes as inside where the benchmark ran on one node */
  int k_in = c->n[0] ? 0 : 1, k_out = c->n[1] ? 1 : 0;
  fit_link(c, k_in, &p->intra_gbs, &p->intra_us);
  fit_link(c, k_out, &p->inter_gbs, &p->inter_us);
  p->elementwise_gbs = stream;
  p->devices_per_node = in->devices_per_node > 0 ? in->devices_per_node
                                                 : (c->ranks_per_node > 0 ? c->ranks_per_node : 1);
  p->peak_gflops = in->peak_gflops > 0 ? in->peak_gflops : peak;
  p->mem_bytes = in->mem_gib * 1073741824.0;
  p->overlap = in->overlap;
  p->attn_br = 64, p->attn_bc = 256; /* the CPU backend's blocks */
  if (in->attn_json) {
    attn_points a = {.tiles = {.attn_br = p->attn_br, .attn_bc = p->attn_bc}};
    if (each_line(in->attn_json, on_attn, &a, e) != 0) {
      rc = mt_err_pass(e);
      goto done;
    }
    if (a.n[0] + a.n[1] == 0) {
      mt_err_set(e, "%s: no meshbench attention rows with the block kernels timed (and the "
                 "model's n_embd, n_head)", in->attn_json);
      goto done;
    }
    /* a width not measured runs at the other's rate (mt_cost_profile_load) */
    for (int w = 0; w < 2; w++)
      if (a.n[w]) p->attn_gflops[w] = a.rate_sum[w] / a.n[w], p->attn_given |= 1u << w;
    for (int w = 0; w < 2; w++)
      if (!a.n[w]) p->attn_gflops[w] = p->attn_gflops[1 - w];
  }
  rc = 0;
done:
  free(g);
  free(c);
  return rc;
}
