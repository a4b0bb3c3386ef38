/* The cost model: the step time of a layout on a machine, from the plan
 * (memory and bytes per group come from mt_plan_rank_build, the same code as
 * meshtrain --plan) and a hardware profile's [cost] section:
 *
 *   compute   each matmul's FLOPs over the throughput the profile gives for
 *             its size (FLOPs per call), plus the elementwise work (the
 *             activation buffers the model allocates, written forward, read
 *             and written backward) over the memory bandwidth;
 *   tp        the tp group's bytes per micro-batch over its link (a group
 *             inside a node: the intra-node bandwidth, else the network) plus
 *             a latency per collective;
 *   pipeline  the schedule simulator run with these per-op costs (the
 *             bubble) plus the point-to-point messages;
 *   dp        the dp group's bytes over its link, minus what the schedule
 *             lets overlap with backward (the profile's overlap share);
 *   optimizer AdamW's traffic over the memory bandwidth.
 *
 * All seconds, bytes and FLOPs are per rank; the slowest stage sets the pace. */
#include "plan/plan.h"

#include <ini.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* profiles                                                            */

typedef struct {
  mt_cost_profile *p;
  unsigned seen;
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

static int parse_number(const char *v, double lo, double *out) {
  char *end = NULL;
  double x = strtod(v, &end);
  if (end == v || *end || !(x >= lo) || isinf(x)) return -1;
  *out = x;
  return 0;
}

/* "flops:gflops flops:gflops ..." sorted by flops; the key may repeat, each
 * line adding points (a line holds at most 198 characters) */
static int parse_gemm(const char *v, mt_cost_profile *p) {
  const char *s = v;
  while (*s) {
    while (*s == ' ' || *s == ',' || *s == '\t') s++;
    if (!*s) break;
    char *end;
    double f = strtod(s, &end);
    if (end == s || *end != ':' || !(f > 0)) return -1;
    s = end + 1;
    double g = strtod(s, &end);
    if (end == s || !(g > 0) || p->n_gemm == MT_COST_MAX_GEMM) return -1;
    if (p->n_gemm && !(f > p->gemm_flops[p->n_gemm - 1])) return -1;
    p->gemm_flops[p->n_gemm] = f;
    p->gemm_gflops[p->n_gemm++] = g;
    s = end;
  }
  return p->n_gemm > 0 ? 0 : -1;
}

static int cost_handler(void *user, const char *section, const char *name, const char *value) {
  cost_parse *c = user;
  mt_cost_profile *p = c->p;
  if (strcmp(section, "hw") == 0) {
    if (strcmp(name, "name") == 0) snprintf(p->name, sizeof p->name, "%s", value);
    return 1;
  }
  if (strcmp(section, "cost") != 0) return 1; /* other sections belong to others */
  int k = -1;
  for (int i = 0; i < N_REQUIRED; i++)
    if (strcmp(name, g_cost_keys[i]) == 0) k = i;
  double x = 0.0;
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
  if (strcmp(name, "attention") == 0) { /* optional: the attention kernel priced */
    if (strcmp(value, "block") && strcmp(value, "materialized")) {
      snprintf(c->bad, sizeof c->bad, "[cost] attention = '%s' is not block or materialized",
               value);
      return 0;
    }
    p->attn_materialized = value[0] == 'm';
    return 1;
  }
  if (strcmp(name, "collectives") == 0) { /* optional: how collectives cross nodes */
    if (strcmp(value, "hierarchical") && strcmp(value, "flat")) {
      snprintf(c->bad, sizeof c->bad, "[cost] collectives = '%s' is not hierarchical or flat",
               value);
      return 0;
    }
    p->coll_flat = value[0] == 'f';
    return 1;
  }
  if (strcmp(name, "attn_gflops") == 0 || strcmp(name, "stage_us") == 0) { /* optional */
    if (parse_number(value, 0, &x)) {
      snprintf(c->bad, sizeof c->bad, "[cost] %s = '%s' is not a number >= 0", name, value);
      return 0;
    }
    *(name[0] == 'a' ? &p->attn_gflops : &p->stage_us) = x;
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
  int bad = 0;
  switch (k) {
  case 0: bad = parse_number(value, 1, &x) || x != floor(x); p->devices_per_node = (int)x; break;
  case 1: bad = parse_number(value, 0, &x); p->mem_bytes = x * 1073741824.0; break;
  case 2: bad = parse_number(value, 0, &x) || x == 0; p->peak_gflops = x; break;
  case 3: bad = parse_gemm(value, p); break;
  case 4: bad = parse_number(value, 0, &x) || x == 0; p->elementwise_gbs = x; break;
  case 5: bad = parse_number(value, 0, &x) || x == 0; p->intra_gbs = x; break;
  case 6: bad = parse_number(value, 0, &x); p->intra_us = x; break;
  case 7: bad = parse_number(value, 0, &x) || x == 0; p->inter_gbs = x; break;
  case 8: bad = parse_number(value, 0, &x); p->inter_us = x; break;
  case 9: bad = parse_number(value, 0, &x) || x > 1; p->overlap = x; break;
  default:
    snprintf(c->bad, sizeof c->bad, "[cost] unknown key '%s'", name);
    return 0;
  }
  if (bad) {
    snprintf(c->bad, sizeof c->bad, "[cost] %s = '%s' is not valid", name, value);
    return 0;
  }
  c->seen |= 1u << k;
  return 1;
}

int mt_cost_profile_load(mt_cost_profile *p, const char *name_or_path, mt_err *e) {
  memset(p, 0, sizeof *p);
  char path[MT_CFG_STR_MAX + 1200];
  FILE *f = mt_hw_profile_open(name_or_path, path, sizeof path);
  if (!f) {
    mt_err_set(e, "hardware profile '%s': cannot open (looked for %s)", name_or_path, path);
    return -1;
  }
  cost_parse c = {p, 0, ""};
  int rc = ini_parse_file(f, cost_handler, &c);
  fclose(f);
  if (rc != 0) {
    mt_err_set(e, "%s:%d: %s", path, rc, c.bad[0] ? c.bad : "syntax error (or a line over 198 characters)");
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
  /* four points a line keeps every line far below inih's 198 characters */
  for (int i = 0; i < p->n_gemm; i++)
    fprintf(f, "%s %.4g:%.5g%s", i % 4 ? "" : "gemm =", p->gemm_flops[i], p->gemm_gflops[i],
            i % 4 == 3 || i == p->n_gemm - 1 ? "\n" : "");
  fprintf(f, "elementwise_gbs = %.6g\nintra_gbs = %.6g\nintra_us = %.6g\ninter_gbs = %.6g\n"
             "inter_us = %.6g\noverlap = %.3g\n",
          p->elementwise_gbs, p->intra_gbs, p->intra_us, p->inter_gbs, p->inter_us, p->overlap);
  if (p->act_bytes && p->act_bytes != 4) fprintf(f, "act_bytes = %.0f\n", p->act_bytes);
  if (p->attn_br > 0) fprintf(f, "attn_block = %d:%d\n", p->attn_br, p->attn_bc);
  if (p->attn_gflops > 0) fprintf(f, "attn_gflops = %.6g\n", p->attn_gflops);
  if (p->stage_us > 0) fprintf(f, "stage_us = %.6g\n", p->stage_us);
  if (p->coll_flat) fprintf(f, "collectives = flat\n");
}

void mt_cost_price(const mt_cost_profile *p, mt_price *out) {
  memset(out, 0, sizeof *out);
  out->n_gemm = p->n_gemm < MT_PRICE_MAX_GEMM ? p->n_gemm : MT_PRICE_MAX_GEMM;
  memcpy(out->gemm_flops, p->gemm_flops, (size_t)out->n_gemm * sizeof(double));
  memcpy(out->gemm_gflops, p->gemm_gflops, (size_t)out->n_gemm * sizeof(double));
  out->elementwise_gbs = p->elementwise_gbs;
  out->act_bytes = p->act_bytes > 0 ? p->act_bytes : 4;
  out->devices_per_node = p->devices_per_node;
  out->intra_gbs = p->intra_gbs;
  out->intra_us = p->intra_us;
  out->inter_gbs = p->inter_gbs;
  out->inter_us = p->inter_us;
  out->attn_br = p->attn_br;
  out->attn_bc = p->attn_bc;
  out->attn_gflops = p->attn_gflops;
  out->overlap = p->overlap;
  out->stage_us = p->stage_us;
  out->coll_flat = p->coll_flat;
}

/* the matmul curve is core's (mt_price_gemm_gflops): the virtual device
 * prices each matmul it emulates with the same function */
double mt_cost_gemm_gflops(const mt_cost_profile *p, double flops) {
  mt_price q;
  mt_cost_price(p, &q);
  return mt_price_gemm_gflops(&q, flops);
}


/* ------------------------------------------------------------------ */
/* dtypes and headroom                                                 */

void mt_cost_dtypes_default(const mt_cost_profile *p, mt_cost_dtypes *d) {
  /* a bf16 profile: Megatron-LM's mixed precision (bf16 weights copy,
   * activations and messages; fp32 master, gradients, moments and gradient
   * reduction); else fp32 throughout, the weights being the master. When
   * the run itself trains in bf16 (train.precision = bf16 with the
   * mixed-precision state), these follow the configuration instead. */
  if (p->act_bytes == 2)
    *d = (mt_cost_dtypes){.weights = 2, .master = 4, .grads = 4, .moments = 4, .acts = 2,
                          .grad_reduce = 4, .msg = 2};
  else
    *d = (mt_cost_dtypes){.weights = 4, .master = 0, .grads = 4, .moments = 4, .acts = 4,
                          .grad_reduce = 4, .msg = 4};
}

static const char *g_dtype_names[] = {"weights", "master", "grads", "moments", "acts",
                                      "grad_reduce", "msg"};

static double *dtype_field(mt_cost_dtypes *d, int i) {
  double *f[] = {&d->weights, &d->master, &d->grads, &d->moments, &d->acts, &d->grad_reduce,
                 &d->msg};
  return f[i];
}

int mt_cost_dtypes_set(mt_cost_dtypes *d, const char *assignment, mt_err *e) {
  const char *eq = strchr(assignment, '=');
  for (int i = 0; eq && i < 7; i++) {
    size_t n = strlen(g_dtype_names[i]);
    if ((size_t)(eq - assignment) != n || strncmp(assignment, g_dtype_names[i], n) != 0) continue;
    char *end = NULL;
    double x = strtod(eq + 1, &end);
    if (end == eq + 1 || *end || !(x == 1 || x == 2 || x == 4 || (x == 0 && i == 1))) break;
    *dtype_field(d, i) = x;
    return 0;
  }
  mt_err_set(e, "--dtype '%s': expected CATEGORY=BYTES with a category of weights, master, "
                "grads, moments, acts, grad_reduce, msg and bytes 1, 2 or 4 (master also 0)",
             assignment);
  return -1;
}

void mt_cost_dtypes_text(const mt_cost_dtypes *d, char *buf, size_t len) {
  size_t at = 0;
  for (int i = 0; i < 7 && at < len; i++) {
    int n = snprintf(buf + at, len - at, "%s%s %g", i ? ", " : "", g_dtype_names[i],
                     *dtype_field((mt_cost_dtypes *)d, i));
    if (n < 0) break;
    at += (size_t)n;
  }
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

/* ------------------------------------------------------------------ */
/* compute of one micro-batch                                          */

/* seconds of one matmul of m x n x k, `calls` times */
static double gemm_s(const mt_cost_profile *p, double m, double n, double k, double calls) {
  mt_price q;
  mt_cost_price(p, &q);
  return mt_price_gemm_s(&q, m, n, k, calls);
}

/* Block attention's forward over one micro-batch of B sequences, one
 * layer, as the backends run it: each of the B x NHl heads cuts the
 * queries into blocks of BR rows; a block sees the keys up to its last row
 * (causal), in tiles of BC keys, each tile two products (S = Q K^T and
 * P V, 2 x 2 BR BC hs FLOPs). Fused kernels (attn_gflops) compute whole
 * tiles, the masked part of the diagonal ones included; the CPU backend
 * calls a matmul per product on the visible keys. Under context
 * parallelism a rank holds 1/cp of every sequence's queries (two chunks,
 * which balance the causal work) against the whole sequence's keys. The
 * backward recomputes S and forms dP, dS, dQ, dK, dV: 5 products for 2,
 * 2.5 times the forward. */
static double attn_fwd_s(const mt_cost_profile *p, double B, double NHl, int T_full, int cp,
                         double hs, double act_bytes) {
  if (p->attn_materialized) {
    /* the whole square of each of this rank's heads: QK^T and PV as one
     * strided batched GEMM each (the batch's FLOPs set the efficiency),
     * and the scores through memory: the fused scale-mask-softmax reads
     * them and writes the probabilities, dropout reads those and writes
     * the kept ones and a byte of mask (forward, 4.5 elements of traffic);
     * backward the same twice over (dropout's and softmax's gradients).
     * Returns the forward; the caller's 2.5 x covers the backward's three
     * GEMMs and 2 x the traffic. */
    double sq = B * NHl / cp * (double)T_full * T_full, flops = 4.0 * sq * hs;
    return flops / (mt_cost_gemm_gflops(p, flops / 2) * 1e9) +
           4.5 * act_bytes * sq / (p->elementwise_gbs * 1e9);
  }
  mt_price q; /* core's: the virtual device prices each block pair with it */
  mt_cost_price(p, &q);
  return mt_price_attn_fwd_s(&q, B * NHl / cp, 0, T_full, 0, T_full, 1, hs);
}

/* the local shapes of a dense block on one rank (see model.h) */
typedef struct {
  double B, T, C, Cl, Fl, NHl, hs, Vl;
  int T_full, cp;
} dense_shape;

/* one dense block's matmuls (lin) and attention forward (att) */
static void dense_layer(const mt_cost_profile *p, const dense_shape *d, double act_bytes,
                        double *lin, double *att) {
  const double BT = d->B * d->T;
  *lin = gemm_s(p, BT, 3 * d->Cl, d->C, 1) + gemm_s(p, BT, d->C, d->Cl, 1) +
         gemm_s(p, BT, d->Fl, d->C, 1) + gemm_s(p, BT, d->C, d->Fl, 1);
  *att = attn_fwd_s(p, d->B, d->NHl, d->T_full, d->cp, d->hs, act_bytes);
}

static dense_shape shape_of(const mt_config *cfg, const mt_model_shape *sh, int B) {
  const int tp = cfg->tp;
  dense_shape d = {.B = B, .T = (double)sh->seq_len / cfg->cp, .C = sh->n_embd,
                   .Cl = (double)sh->n_embd / tp, .Fl = 4.0 * sh->n_embd / tp,
                   .NHl = (double)sh->n_head / tp, .hs = (double)sh->n_embd / sh->n_head,
                   .Vl = (double)mt_model_pad_vocab(sh->vocab, tp) / tp, .T_full = sh->seq_len,
                   .cp = cfg->cp};
  return d;
}

typedef struct {
  double fwd, bwd;         /* compute seconds of the forward, of the whole backward */
  double bwd_input;        /* of the backward, the input-gradient pass (split backward) */
  double tp;               /* tp communication seconds, forward + backward */
  double cp, ep;           /* exposed cp and ep (all-to-all) seconds, forward + backward */
} chunk_cost;

static double link_bw(const mt_cost_profile *p, int inside) {
  return (inside ? p->intra_gbs : p->inter_gbs) * 1e9;
}
static double link_lat(const mt_cost_profile *p, int inside) {
  return (inside ? p->intra_us : p->inter_us) * 1e-6;
}
/* A collective over n ranks `stride` apart (rank order tp, cp, dp, pp on
 * nodes of devices_per_node ranks), priced as the virtual device prices
 * it (core's mt_price_coll_s: hierarchical across nodes): the seconds of
 * `bytes` (comm's count, the sum of many calls') without the latency, and
 * the latency of one call. */
static double coll_xfer_s(const mt_price *q, double bytes, int n, int stride, int a2a) {
  int k = mt_price_per_node(q, stride, n);
  return mt_price_coll_s(q, bytes, n, k, a2a) - mt_price_coll_lat_s(q, n, k);
}
static double coll_lat(const mt_price *q, int n, int stride) {
  return mt_price_coll_lat_s(q, n, mt_price_per_node(q, stride, n));
}

/* the chunk's layers [l0, l1) (embed, head: it holds them) of a micro-batch
 * of B, which sends cb[0..3] bytes over tp, cp, ep and etp (the plan's
 * count of the chunk's forward and backward, in the fp32 messages the code
 * sends today: priced at dt->msg / 4 of them for the run's dtype). ops_s:
 * the seconds of the chunk's forward, backward (input pass) and weight
 * pass ops per micro-batch, as the virtual device prices the ops the code
 * runs (the plan's step on a clock), which replace the compute priced
 * here from the shapes; NULL: from the shapes (attention = materialized,
 * another stack's, has no ops of ours). q: the profile's prices, for the
 * collectives. */
static chunk_cost chunk(const mt_cost_profile *p, const mt_price *q, const mt_config *cfg,
                        const mt_cost_dtypes *dt, const mt_gpt *m, int l0, int l1, int embed,
                        int head, int B, const double cb[4], const double *ops_s) {
  const int n_l = l1 - l0;
  const double C = m->shape.n_embd, BT = (double)B * m->T, tp = cfg->tp;
  const dense_shape ds = {.B = B, .T = m->T, .C = C, .Cl = m->C_local, .Fl = m->F_local,
                          .NHl = m->NH_local, .hs = C / m->shape.n_head, .Vl = m->V_local,
                          .T_full = m->shape.seq_len, .cp = cfg->cp};
  chunk_cost c = {0, 0, 0, 0, 0, 0};
  double lin, att;
  dense_layer(p, &ds, dt->acts, &lin, &att);
  const double att_b = 2.5 * att;
  int n_moe = 0;
  for (int l = l0; l < l1; l++) n_moe += mt_model_is_moe(&m->shape, l);
  const double refwd = cfg->recompute ? 1.0 : 0.0;
  if (ops_s) {
    c.fwd = ops_s[0];
    c.bwd = ops_s[1] + ops_s[2];
    c.bwd_input = ops_s[1];
  } else {
    /* MoE blocks: the router, and the routed experts' matmuls over this rank's
     * share of the slots (balanced routing: N k slots per ep rank, its E/ep
     * experts each N k / E_l rows) in place of the dense MLP (the shared
     * experts stay in mlp_local) */
    double moe_lin = 0.0;
    if (n_moe > 0) {
      const double E = m->shape.moe_experts, k = m->shape.moe_topk, El = m->moe.E_local;
      const double Fe = m->moe.Fe_local, Fs = m->mlp_local[l0] > 0 ? m->mlp_local[l0] : 0.0;
      const double N = (double)B * m->moe.Ts;
      const double rows = N * k * (m->moe.etp_size > 1 ? m->moe.etp_size : 1) / El;
      const double Cl = m->C_local;
      moe_lin = gemm_s(p, BT, 3 * Cl, C, 1) + gemm_s(p, BT, C, Cl, 1) + gemm_s(p, N, E, C, 1) +
                gemm_s(p, rows, Fe, C, El) + gemm_s(p, rows, C, Fe, El) +
                (Fs > 0 ? gemm_s(p, BT, Fs, C, 1) + gemm_s(p, BT, C, Fs, 1) : 0.0);
    }
    /* elementwise: the layer's activations (the buffers the model allocates:
     * under recompute its one-layer workspace), in the activations' dtype,
     * as the kernels move them: forward, each kernel reads its input and
     * writes its output (2 passes over the set); backward, each reads the
     * kept activation and the incoming gradient and writes its gradient (3) */
    double set_bytes = cfg->recompute ? (double)m->ws_bytes
                                      : 4.0 * (double)mt_gpt_acts_numel(m, 1, B, 0);
    double elem = set_bytes * (dt->acts / 4.0) / (p->elementwise_gbs * 1e9);
    double f_dense = lin + att + 2.0 * elem, f_moe = moe_lin + att + 2.0 * elem;
    c.fwd = (n_l - n_moe) * f_dense + n_moe * f_moe;
    c.bwd = (n_l - n_moe) * (2.0 * lin + att_b + 3.0 * elem + refwd * f_dense) +
            n_moe * (2.0 * moe_lin + att_b + 3.0 * elem + refwd * f_moe);
    /* the split backward's first pass: input gradients (the linears' half,
     * all of attention, the elementwise work); the second the weights' */
    c.bwd_input = (n_l - n_moe) * (lin + att_b + 3.0 * elem + refwd * f_dense) +
                  n_moe * (moe_lin + att_b + 3.0 * elem + refwd * f_moe);
    if (head) {
      double h = gemm_s(p, BT, ds.Vl, C, 1);
      double logits = dt->acts * BT * ds.Vl * 2.0 / (p->elementwise_gbs * 1e9);
      c.fwd += h + logits;
      c.bwd += 2.0 * h + logits;
      c.bwd_input += h + logits;
    }
    if (embed) c.fwd += dt->acts * BT * C / (p->elementwise_gbs * 1e9);
  }
  /* context parallelism: the ring passes K/V while the blocks compute (the
   * part beyond the attention's compute is exposed); Ulysses' all-to-alls
   * are not hidden */
  if (cfg->cp > 1) {
    int inside = cfg->tp * cfg->cp <= p->devices_per_node;
    double bytes = cb[1] * dt->msg / 4.0;
    double calls = n_l * (1.0 + refwd) * 2.0 * (cfg->cp - 1);
    double hidden = n_l * ((1.0 + refwd) * att + att_b);
    if (cfg->cp_mode == MT_CP_RING) { /* the ring's slowest pair sets its pace */
      double t = bytes / link_bw(p, inside) + calls * link_lat(p, inside);
      c.cp = t > hidden ? t - hidden : 0.0;
    } else {
      c.cp = coll_xfer_s(q, bytes, cfg->cp, cfg->tp, 1) + calls * coll_lat(q, cfg->cp, cfg->tp);
    }
  }
  /* expert parallelism: the dispatch and combine all-to-alls (and the etp
   * gathers), as a balanced routing implies, never hidden */
  if (n_moe > 0 && (m->moe.ep_size > 1 || m->moe.etp_size > 1)) {
    /* (the folded mesh of a stage: etp innermost, then ep) */
    const int ep = m->moe.ep_size, etp = m->moe.etp_size;
    c.ep = coll_xfer_s(q, cb[2] * dt->msg / 4.0, ep, etp, 1) +
           coll_xfer_s(q, cb[3] * dt->msg / 4.0, etp, 1, 0) +
           n_moe * 4.0 * coll_lat(q, ep > 1 ? ep : etp, ep > 1 ? etp : 1);
  }
  /* tensor parallelism: this chunk's bytes (as comm counts them) and calls */
  if (tp > 1) {
    double bytes = cb[0] * dt->msg / 4.0;
    double calls = n_l * ((cfg->sp ? 10.0 : 4.0) + refwd * (cfg->sp ? 4.0 : 2.0)) +
                   embed * (cfg->sp ? 2.0 : 1.0) + head * ((cfg->sp ? 3.0 : 1.0) + 2.0);
    c.tp = coll_xfer_s(q, bytes, cfg->tp, 1, 0) + calls * coll_lat(q, cfg->tp, 1);
  }
  return c;
}

/* When a stage's dp reduction ends (ZeRO-0/1, overlapped with the
 * schedule): R seconds of it at the link's full rate, an equal share a
 * chunk, each issued during its chunk's last backward op (t_op long, ending
 * at chunk_end[c]) and run one after another on the link, beside the
 * rank's ops until its last backward ends (t_end) at the overlap share ov
 * of the rate, then at the full rate (as the virtual device runs them:
 * with interleaving a later chunk's gradients are complete several ops
 * before the first chunk's). */
static double chunked_reduce_end(const double *chunk_end, int v, double t_op, double t_end,
                                 double R, double ov) {
  double at[8] = {0};
  for (int c = 0; c < v; c++) at[c] = chunk_end[c] - t_op;
  for (int i = 1; i < v; i++) /* in the order the chunks complete */
    for (int j = i; j > 0 && at[j - 1] > at[j]; j--) {
      double t = at[j];
      at[j] = at[j - 1];
      at[j - 1] = t;
    }
  double cur = at[0];
  for (int c = 0; c < v; c++) {
    double left = R / v;
    if (cur < at[c]) cur = at[c];
    if (cur < t_end) {
      double can = (t_end - cur) * ov;
      if (ov > 0 && can >= left) {
        cur += left / ov;
        continue;
      }
      left -= can;
      cur = t_end;
    }
    cur += left;
  }
  return cur;
}

/* ------------------------------------------------------------------ */
/* bounds for the search                                               */

void mt_cost_layer_times(const mt_config *cfg, const mt_cost_profile *p, const mt_model_shape *sh,
                         double *layer_s, double *embed_s, double *head_s) {
  dense_shape d = shape_of(cfg, sh, cfg->micro_batch);
  double lin, att;
  dense_layer(p, &d, p->act_bytes, &lin, &att);
  const double refwd = cfg->recompute ? 1.0 : 0.0, BT = d.B * d.T;
  *layer_s = (1.0 + refwd) * (lin + att) + 2.0 * lin + 2.5 * att;
  *embed_s = 3.0 * 2.0 * BT * d.C / (p->elementwise_gbs * 1e9);
  *head_s = 3.0 * gemm_s(p, BT, d.Vl, d.C, 1) + 3.0 * 2.0 * BT * d.Vl / (p->elementwise_gbs * 1e9);
}

double mt_cost_step_lower_bound(const mt_config *cfg, const mt_cost_profile *p,
                                const mt_model_shape *sh, double act_bytes_lb, int l_first,
                                int l_mid, int l_last) {
  /* the exact price runs the same matmuls and attention at the same shapes
   * (plus MoE experts, elementwise work, communication, dp and AdamW), so
   * this never exceeds it: a stage runs its micro-batches' forwards and
   * backwards one after another (the last stage with the LM head), and
   * the last stage cannot start before the first micro-batch's forward has
   * passed the pp - 1 stages before it (the pipeline's fill) */
  dense_shape d = shape_of(cfg, sh, cfg->micro_batch);
  double lin, att;
  dense_layer(p, &d, 0.0, &lin, &att); /* 0: no memory traffic, a bound for any dtype */
  if (sh->moe_experts > 0) /* the attention's matmuls only: experts vary with routing */
    lin = gemm_s(p, d.B * d.T, 3 * d.Cl, d.C, 1) + gemm_s(p, d.B * d.T, d.C, d.Cl, 1);
  const double refwd = cfg->recompute ? 1.0 : 0.0;
  const int accum = cfg->global_batch / (cfg->dp * cfg->micro_batch), pp = cfg->pp;
  /* elementwise: at least the block's two layernorms (on the rows of the
   * sequence shard under sp), as the virtual op table prices them (which
   * the exact price runs): ln is one forward (2 passes over N x C; again
   * when recomputed), a backward costs twice that */
  const double s = cfg->sp ? cfg->tp : 1.0;
  const double ln = 2.0 * act_bytes_lb * d.B * d.T / s * d.C / (p->elementwise_gbs * 1e9);
  const double fb = (1.0 + refwd) * (lin + att + 2.0 * ln) + 2.0 * lin + 2.5 * att + 4.0 * ln;
  const double f = lin + att + 2.0 * ln;
  const double head = 3.0 * gemm_s(p, d.B * d.T, d.Vl, d.C, 1);
  if (pp == 1) return accum * (l_mid * fb + head);
  double worst = l_first * fb, last = l_last * fb + head;
  if (last > worst) worst = last;
  if (pp > 2 && l_mid * fb > worst) worst = l_mid * fb;
  int l_min = l_first < l_last ? l_first : l_last;
  if (pp > 2 && l_mid < l_min) l_min = l_mid;
  return accum * worst + (pp - 1) * f * l_min / cfg->virtual_stages;
}

/* the state of the matrices of n_l blocks (no biases, norms, embeddings or
 * buffers): each element's weights, gradient, master and moments as the
 * ZeRO level shards them */
static double state_lower_bound(const mt_config *cfg, const mt_cost_dtypes *dt,
                                const mt_model_shape *sh, int n_l) {
  const double C = sh->n_embd, tp = cfg->tp, ndp = (double)cfg->dp * cfg->cp;
  double per_layer = 12.0 * C * C / tp;
  if (sh->moe_experts > 0) {
    double F = sh->moe_ffn > 0 ? sh->moe_ffn : 4.0 * C;
    double experts = (double)sh->moe_experts / cfg->ep * 2.0 * C * F / cfg->etp;
    double moe = 4.0 * C * C / tp + experts, dense = per_layer;
    per_layer = moe < dense ? moe : dense; /* which blocks are MoE depends on the stage */
  }
  const double n = n_l * per_layer;
  const double w = dt->weights, g = dt->grads, st = dt->master + 2.0 * dt->moments;
  switch (cfg->zero) {
  case 0: return n * (w + g + st);
  case 1: return n * (w + g + st / ndp);
  case 2: return n * (w + (g + st) / ndp);
  default: return n * (w + g + st) / ndp;
  }
}

double mt_cost_mem_lower_bound(const mt_config *cfg, const mt_cost_dtypes *dt,
                               const mt_model_shape *sh, int l_first, int l_most) {
  /* the largest stage's state, or the first stage's state and the
   * activation sets it holds: as many micro-batches as stages in flight
   * (1F1B and ZB-H1; interleaved and GPipe hold more), each with every
   * layer's kept activations: under recompute the layer's input alone;
   * without, at least the buffers of model.h's mt_gpt_acts that every
   * block keeps (the norms', residuals' and projections' C channels a
   * position, sp cuts them over tp; q, k, v, attention out and the MLP's
   * 2 x 4C over tp; MoE blocks without their MLP) */
  const double C = sh->n_embd, tp = cfg->tp, s = cfg->sp ? tp : 1.0;
  const double tokens = (double)cfg->micro_batch * sh->seq_len / cfg->cp;
  const int m = cfg->global_batch / (cfg->dp * cfg->micro_batch);
  const int inflight = cfg->pp == 1 ? 1 : (m < cfg->pp ? m : cfg->pp);
  double per_layer = cfg->recompute ? C / s
                     : sh->moe_experts > 0 ? 4.0 * C / s + 4.0 * C / tp
                                           : 6.0 * C / s + 12.0 * C / tp;
  double act = inflight * l_first * tokens * per_layer * dt->acts;
  double a = state_lower_bound(cfg, dt, sh, l_most), b = state_lower_bound(cfg, dt, sh, l_first);
  return a > b + act ? a : b + act;
}

/* ------------------------------------------------------------------ */
/* a step                                                              */

/* the plan's bytes per category (fp32, as the run counts them today) in
 * the dtypes dt: the weights' copy of the parameters held and the master of
 * the elements this rank updates; gradients, moments, gathered weights,
 * activations and comm buffers rescaled */
static void scale_mem(const mt_plan_rank *pr, const mt_cost_dtypes *dt, double *mem) {
  const double held = pr->mem[MT_MEM_PARAMS] / 4.0, updated = pr->mem[MT_MEM_OPTIM] / 8.0;
  for (int c = 0; c < MT_MEM_NCAT; c++) mem[c] = pr->mem[c];
  mem[MT_MEM_PARAMS] = held * dt->weights + updated * dt->master;
  mem[MT_MEM_GRADS] = pr->mem[MT_MEM_GRADS] * dt->grads / 4.0;
  mem[MT_MEM_OPTIM] = pr->mem[MT_MEM_OPTIM] * dt->moments / 4.0;
  mem[MT_MEM_GATHER] = pr->mem[MT_MEM_GATHER] * dt->weights / 4.0;
  mem[MT_MEM_ACTIV] = pr->mem[MT_MEM_ACTIV] * dt->acts / 4.0;
  mem[MT_MEM_COMM] = pr->mem[MT_MEM_COMM] * dt->msg / 4.0;
}

/* A stage's chunks, as a key: stages with the same chunks (layer counts,
 * MoE blocks, embedding, head) cost the same and hold the same state; the
 * first of them holds the most activation sets (every schedule's in-flight
 * count falls along the pipeline), so it stands for the others. */
static void stage_key(const mt_config *cfg, const mt_layout *lay, int st, int *key) {
  const int pp = cfg->pp, v = cfg->virtual_stages;
  for (int k = 0; k < v; k++) {
    int vs = st + k * pp, a, b;
    mt_layout_stage_layers(cfg, lay, vs, &a, &b);
    key[2 * k] = (b - a) * 4 + (vs == 0) * 2 + (vs == pp * v - 1);
    key[2 * k + 1] = mt_model_moe_before(&lay->shape, b) - mt_model_moe_before(&lay->shape, a);
  }
}

int mt_cost_estimate(const mt_config *cfg, const mt_cost_profile *p, mt_cost *out, mt_err *e) {
  MT_TRY(e, mt_cost_estimate_dt(cfg, p, NULL, out, e));
  return 0;
}

int mt_cost_estimate_dt(const mt_config *cfg, const mt_cost_profile *p, const mt_cost_dtypes *dt_in,
                        mt_cost *out, mt_err *e) {
  memset(out, 0, sizeof *out);
  mt_cost_dtypes dt;
  if (dt_in) dt = *dt_in;
  else mt_cost_dtypes_default(p, &dt);
  mt_layout lay;
  if (mt_layout_validate(cfg, 0, &lay, e) != 0) {
    mt_layout_free(&lay);
    return mt_err_pass(e);
  }
  const int pp = cfg->pp, v = cfg->virtual_stages, accum = lay.accum, B = cfg->micro_batch;
  const int dpn = p->devices_per_node, world = lay.world, ndp = cfg->dp * cfg->cp;
  /* the ops' prices: the virtual device's, in the run's activation dtype;
   * the pipeline's per-op overhead is added to the schedule's ops below
   * (the collectives are priced from them too) */
  mt_price ops_price;
  mt_cost_price(p, &ops_price);
  ops_price.act_bytes = dt.acts;
  ops_price.stage_us = 0.0;
  /* the dp x cp group: ndp ranks tp apart (rank order tp, cp, dp, pp) */
  const double dp_s_per_byte = ndp > 1 ? coll_xfer_s(&ops_price, 1.0, ndp, cfg->tp, 0) : 0.0;
  /* per pp stage: the plan of its first rank and its chunks' costs; the
   * slowest stage's mean chunk sets the per-op times of the schedule's
   * simulation (a stage runs each of its chunks once per micro-batch: with
   * interleaving, pricing every chunk as the slowest one, the LM head's,
   * overstated a 1.3B's pp 4 x 2 step by 17% against the emulation) */
  chunk_cost worst = {0, 0, 0, 0, 0, 0};
  int rc = 0, n_buckets = 1, stage_buckets[64] = {0};
  double stage_gather_s[64] = {0}; /* of stage_dp_s: the parameter gathers */
  double reduce_b = 0.0, gather_b = 0.0; /* dp bytes per step of the stage that sends most */
  int *keys = mt_calloc((size_t)pp * 2 * v, sizeof(int));
  for (int st = 0; st < pp && rc == 0; st++) {
    stage_key(cfg, &lay, st, keys + (size_t)st * 2 * v);
    int seen = -1; /* an earlier stage of the same kind: its figures are this one's */
    for (int o = 0; o < st && seen < 0; o++)
      if (!memcmp(keys + (size_t)o * 2 * v, keys + (size_t)st * 2 * v, 2 * v * sizeof(int)))
        seen = o;
    if (seen >= 0) {
      if (st < 64) {
        out->stage_dp_s[st] = out->stage_dp_s[seen];
        stage_buckets[st] = stage_buckets[seen];
        stage_gather_s[st] = stage_gather_s[seen];
      }
      continue;
    }
    mt_plan_rank pr;
    mt_plan_world w;
    if (mt_plan_rank_world(cfg, &lay, st, 0, 0, 0, p->attn_materialized ? NULL : &ops_price, &pr,
                           &w, e) != 0) {
      rc = mt_err_pass(e);
      break;
    }
    double mem[MT_MEM_NCAT], total = 0.0;
    scale_mem(&pr, &dt, mem);
    for (int c = 0; c < MT_MEM_NCAT; c++) {
      total += mem[c];
      if (mem[c] > out->mem[c]) out->mem[c] = mem[c];
    }
    if (total > out->mem_bytes) out->mem_bytes = total;
    if (pr.dp_bytes > out->dp_bytes) out->dp_bytes = pr.dp_bytes;
    if (pr.tp_bytes > out->tp_bytes) out->tp_bytes = pr.tp_bytes;
    if (pr.pp_bytes > out->pp_bytes) out->pp_bytes = pr.pp_bytes;
    chunk_cost mean = {0, 0, 0, 0, 0, 0};
    for (int vs = st; vs < pp * v; vs += pp) {
      int a, b;
      mt_layout_stage_layers(cfg, &lay, vs, &a, &b);
      double cb[4], ops_s[3]; /* the chunk's bytes and op seconds per micro-batch */
      for (int k = 0; k < 4; k++) cb[k] = w.step.exec.chunk_bytes[vs / pp][k] / accum;
      for (int k = 0; k < 3; k++) ops_s[k] = w.step.exec.chunk_s[vs / pp][k] / accum;
      chunk_cost c = chunk(p, &ops_price, cfg, &dt, &w.step.model, a, b, vs == 0,
                           vs == pp * v - 1, B, cb, p->attn_materialized ? NULL : ops_s);
      /* the collectives of cp and ep ride on the ops like tp's */
      c.tp += c.cp + c.ep;
      mean.fwd += c.fwd / v;
      mean.bwd += c.bwd / v;
      mean.bwd_input += c.bwd_input / v;
      mean.tp += c.tp / v;
      mean.cp += c.cp / v;
      mean.ep += c.ep / v;
    }
    if (mean.fwd + mean.bwd + mean.tp > worst.fwd + worst.bwd + worst.tp) worst = mean;
    /* dp: the stage's gradient and parameter bytes per step, split as the
     * ZeRO level sends them (a reduce-scatter and an all-gather of a tensor
     * count the same bytes): ZeRO-0 reduces everything; ZeRO-1 a
     * reduce-scatter and a gather per step; ZeRO-2 a reduce-scatter per
     * micro-batch and a gather per step; ZeRO-3 per micro-batch a gather
     * for forward, one for backward and a reduce-scatter */
    double sb = ndp > 1 ? pr.dp_state_bytes : 0.0, r, g;
    switch (cfg->zero) {
    case 0: r = sb, g = 0.0; break;
    case 1: r = g = 0.5 * sb; break;
    case 2: r = sb * accum / (accum + 1.0), g = sb / (accum + 1.0); break;
    default: r = sb / 3.0, g = 2.0 * sb / 3.0;
    }
    r = r * dt.grad_reduce / 4.0 + pr.edp_bytes * dt.grad_reduce / 4.0;
    g = g * dt.weights / 4.0;
    if (r + g >= reduce_b + gather_b) {
      reduce_b = r, gather_b = g;
      n_buckets = pr.n_buckets > 0 ? pr.n_buckets : 1;
    }
    /* this stage's dp bytes over its link (latencies added for the step) */
    if (st < 64) {
      out->stage_dp_s[st] = (r + g) * dp_s_per_byte;
      stage_gather_s[st] = g * dp_s_per_byte;
      stage_buckets[st] = pr.n_buckets > 0 ? pr.n_buckets : 1;
    }
    /* AdamW on the elements this rank updates: the gradient read, both
     * moments and the master read and written, the weights' copy written */
    double updated = pr.mem[MT_MEM_OPTIM] / 8.0;
    double bytes = dt.grads + 4.0 * dt.moments +
                   (dt.master > 0 ? 2.0 * dt.master + dt.weights : 2.0 * dt.weights);
    double optim = updated * bytes / (p->elementwise_gbs * 1e9);
    if (optim > out->optim_s) out->optim_s = optim;
    mt_plan_world_destroy(&w);
  }
  free(keys);
  if (rc == 0) {
    /* the pipeline: the simulator with the slowest chunk's per-op costs (the
     * per-op stage overhead riding on each op) and the point-to-point
     * messages as the executor sends them: non-blocking, each on its link
     * (a stage boundary inside a node or across nodes), so that only what
     * the schedule cannot hide of them is exposed (summing every message
     * into the ops overstated a pp 8 interleaved step by 23% against the
     * emulation) */
    double msg = dt.msg * (double)B * (lay.shape.seq_len / cfg->cp) * lay.shape.n_embd /
                 (cfg->sp ? cfg->tp : 1);
    const int stage_ranks = world / pp;
    mt_pp_link *links = mt_calloc((size_t)2 * pp, sizeof(mt_pp_link));
    for (int r = 0; r < 2 * pp && pp > 1; r++) {
      int src = r / 2, dst = (src + (r % 2 ? pp - 1 : 1)) % pp;
      int inside = dpn <= 0 || src * stage_ranks / dpn == dst * stage_ranks / dpn;
      links[r].lat = link_lat(p, inside);
      links[r].xfer = msg / link_bw(p, inside);
    }
    double so = pp > 1 ? p->stage_us * 1e-6 : 0.0;
    double tf = worst.fwd + 0.5 * worst.tp + so, tb = worst.bwd + 0.5 * worst.tp + so;
    double tbi = worst.bwd_input + 0.5 * worst.tp + so, tbw = worst.bwd - worst.bwd_input;
    mt_pp_schedule s;
    mt_pp_schedule_build(&s, lay.sched, pp, accum, v);
    mt_pp_sim sim, sim0;
    mt_err why = {0}; /* validation already accepted the schedule */
    mt_pp_schedule_simulate(&s, tf, tb, tbi, tbw, NULL, &sim0, &why);
    mt_pp_schedule_simulate(&s, tf, tb, tbi, tbw, links, &sim, &why);
    mt_pp_schedule_free(&s);
    free(links);
    out->compute_s = accum * v * (worst.fwd + worst.bwd);
    out->cp_s = accum * v * worst.cp;
    out->ep_s = accum * v * worst.ep;
    out->tp_s = accum * v * worst.tp - out->cp_s - out->ep_s;
    /* the messages' exposed part (what they add to the schedule) and the
     * ops' stage overhead */
    out->pp_p2p_s = sim.makespan - sim0.makespan + accum * v * 2.0 * so;
    out->pp_bubble_s = sim.makespan - out->compute_s - out->tp_s - out->cp_s - out->ep_s -
                       out->pp_p2p_s;
    if (out->pp_bubble_s < 0) out->pp_bubble_s = 0.0;
    /* dp: what the compute beside it does not hide (the profile's overlap
     * share of that compute), never less than one bucket or unit's worth.
     * One stage: ZeRO-0/1 reduce behind the last micro-batch's backward,
     * ZeRO-2 behind every backward, ZeRO-3's prefetched gathers behind every
     * forward and backward; the gathers after the optimizer step (ZeRO-1, 2)
     * are exposed. With pipeline stages the reduction follows the schedule. */
    const double lat = ndp > 1 ? coll_lat(&ops_price, ndp, cfg->tp) : 0.0, ov = p->overlap;
    const double f_mb = v * worst.fwd, b_mb = v * worst.bwd;
    double t_r = reduce_b * dp_s_per_byte, t_g = gather_b * dp_s_per_byte, exposed;
    double calls = 2.0 * n_buckets * (cfg->zero >= 2 ? accum : 1);
    out->dp_total_s = t_r + t_g + (ndp > 1 ? calls * lat : 0.0);
#define EXPOSED(t, hide) ((t) - (hide) > (t) / n_buckets ? (t) - (hide) : (t) / n_buckets)
    if (ndp <= 1 && t_r == 0.0) exposed = 0.0;
    else if (pp > 1) {
      /* dp hides behind backward where the schedule overlaps it: a stage's
       * reductions start during its last backward of each chunk (under
       * ZeRO-2/3 during every micro-batch's) and go on through the
       * cool-down of the stages below it, until the schedule ends; never
       * the last bucket. Without overlap (parallel.overlap_dp = false, ZeRO
       * 0-1) they all run after the schedule. The step waits for the
       * slowest stage. */
      const int overlaps = cfg->zero >= 2 || cfg->overlap_dp;
      double hide = overlaps ? ov * (cfg->zero >= 2 ? accum : 1) * b_mb : 0.0;
      /* breadth-first at ZeRO-3 gathers a chunk's layers when its run of
       * micro-batches begins, after the run's first input arrived: nothing
       * of the stage hides it, and the next stage's run waits for this
       * one's first output, so the stages' gathers add up along the
       * pipeline (forward and backward runs alike) */
      const int run_gathers = cfg->zero == 3 && lay.sched == MT_SCHED_BFS;
      double serial = 0.0;
      exposed = 0.0;
      for (int st = 0; st < pp && st < 64; st++) {
        double cool = overlaps ? sim.makespan - sim.rank_grads_end[st] : 0.0;
        double g_st = run_gathers ? stage_gather_s[st] : 0.0;
        double last_bucket = (out->stage_dp_s[st] - g_st) / stage_buckets[st];
        double x = out->stage_dp_s[st] - g_st - hide - cool, after = 0.0;
        if (overlaps && cfg->zero <= 1 && v <= 8) {
          /* the reduction chunk by chunk in the schedule's order; ZeRO-1's
           * gather of the updated shards follows the optimizer step, with
           * nothing beside it */
          after = stage_gather_s[st];
          x = chunked_reduce_end(sim.chunk_grads_end[st], v, tb, sim.rank_grads_end[st],
                                 out->stage_dp_s[st] - after, ov) - sim.makespan;
          last_bucket = (out->stage_dp_s[st] - after) / stage_buckets[st];
        }
        if (x < last_bucket) x = last_bucket;
        x += after;
        out->stage_dp_exposed_s[st] = x + g_st;
        serial += g_st;
        if (x > exposed) exposed = x;
      }
      exposed += serial;
      if (pp > 64) { /* beyond the per-stage figures: the largest stage's, no cool-down */
        double x = EXPOSED(t_r + t_g, hide);
        if (x > exposed) exposed = x;
      }
    }
    else if (cfg->zero <= 1) exposed = EXPOSED(t_r, ov * b_mb) + t_g;
    else if (cfg->zero == 2) exposed = accum * EXPOSED(t_r / accum, ov * b_mb) + t_g;
    else
      exposed = accum * (EXPOSED(0.5 * t_g / accum, ov * f_mb) +
                         EXPOSED((0.5 * t_g + t_r) / accum, ov * b_mb));
#undef EXPOSED
    out->dp_exposed_s = exposed + (ndp > 1 ? calls * lat : 0.0);
    out->step_s = sim.makespan + out->dp_exposed_s + out->optim_s;
    double tokens = (double)cfg->global_batch * lay.shape.seq_len;
    out->tokens_per_s = tokens / out->step_s;
    const mt_model_shape *sh = &lay.shape; /* MoE: the weights a token uses, as the run counts */
    out->model_flops =
        (sh->moe_experts > 0
             ? mt_train_flops_per_token_mm(mt_model_active_matmul_weights(sh), sh->n_layer,
                                           sh->n_embd, sh->seq_len)
             : mt_train_flops_per_token(sh->n_layer, sh->n_embd, sh->seq_len, sh->vocab)) *
        tokens;
    out->mfu = out->model_flops / (out->step_s * world * p->peak_gflops * 1e9);
    out->headroom = mt_cost_headroom(cfg, p);
    out->fits = out->mem_bytes + out->headroom <= p->mem_bytes;
    out->world = world;
  }
  mt_layout_free(&lay);
  return rc;
}
