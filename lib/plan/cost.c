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
}

/* the matmul curve is core's (mt_price_gemm_gflops): the virtual device
 * prices each matmul it emulates with the same function */
double mt_cost_gemm_gflops(const mt_cost_profile *p, double flops) {
  mt_price q;
  mt_cost_price(p, &q);
  return mt_price_gemm_gflops(&q, flops);
}

/* seconds of one matmul of m x n x k, `calls` times */
static double gemm_s(const mt_cost_profile *p, double m, double n, double k, double calls) {
  mt_price q;
  mt_cost_price(p, &q);
  return mt_price_gemm_s(&q, m, n, k, calls);
}

/* ------------------------------------------------------------------ */
/* one micro-batch on one chunk                                        */

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

/* the chunk's layers [l0, l1) (embed, head: it holds them) of a micro-batch
 * of B, which sends cb[0..3] bytes over tp, cp, ep and etp (the plan's
 * count of the chunk's forward and backward) */
static chunk_cost chunk(const mt_cost_profile *p, const mt_config *cfg, const mt_gpt *m, int l0,
                        int l1, int embed, int head, int B, const double cb[4]) {
  const int n_l = l1 - l0;
  const double T = m->T, C = m->shape.n_embd, BT = (double)B * T, tp = cfg->tp;
  const double Cl = m->C_local, Fl = m->F_local, NHl = m->NH_local, hs = C / m->shape.n_head;
  const double Vl = m->V_local, T_full = m->shape.seq_len;
  chunk_cost c = {0, 0, 0, 0, 0, 0};
  /* a block forward: qkv, proj, fc, fc proj; attention: QK^T and PV per
   * head, causal (half the square); under context parallelism this rank's
   * T / cp queries against the whole sequence's keys */
  double lin = gemm_s(p, BT, 3 * Cl, C, 1) + gemm_s(p, BT, C, Cl, 1) + gemm_s(p, BT, Fl, C, 1) +
               gemm_s(p, BT, C, Fl, 1);
  double att = 2.0 * gemm_s(p, T, T_full, hs, B * NHl) / 2.0;
  /* MoE blocks: the router, and the routed experts' matmuls over this rank's
   * share of the slots (balanced routing: N k slots per ep rank, its E/ep
   * experts each N k / E_l rows) in place of the dense MLP (the shared
   * experts stay in mlp_local) */
  int n_moe = 0;
  double moe_lin = 0.0;
  for (int l = l0; l < l1; l++) n_moe += mt_model_is_moe(&m->shape, l);
  if (n_moe > 0) {
    const double E = m->shape.moe_experts, k = m->shape.moe_topk, El = m->moe.E_local;
    const double Fe = m->moe.Fe_local, Fs = m->mlp_local[l0] > 0 ? m->mlp_local[l0] : 0.0;
    const double N = (double)B * m->moe.Ts;
    const double rows = N * k * (m->moe.etp_size > 1 ? m->moe.etp_size : 1) / El;
    moe_lin = gemm_s(p, BT, 3 * Cl, C, 1) + gemm_s(p, BT, C, Cl, 1) + gemm_s(p, N, E, C, 1) +
              gemm_s(p, rows, Fe, C, El) + gemm_s(p, rows, C, Fe, El) +
              (Fs > 0 ? gemm_s(p, BT, Fs, C, 1) + gemm_s(p, BT, C, Fs, 1) : 0.0);
  }
  /* elementwise: the layer's activations (the buffers the model allocates:
   * under recompute its one-layer workspace) written forward, read and
   * their gradients written backward */
  double set_bytes = cfg->recompute ? (double)m->ws_bytes
                                    : 4.0 * (double)mt_gpt_acts_numel(m, 1, B, 0);
  double elem = set_bytes * (p->act_bytes / 4.0) / (p->elementwise_gbs * 1e9);
  double layer_f = lin + att + elem;
  double layer_b = 2.0 * (lin + att) + 2.0 * elem;
  double refwd = cfg->recompute ? 1.0 : 0.0;
  c.fwd = (n_l - n_moe) * layer_f + n_moe * (moe_lin + att + elem);
  c.bwd = (n_l - n_moe) * (layer_b + refwd * layer_f) +
          n_moe * (2.0 * (moe_lin + att) + 2.0 * elem + refwd * (moe_lin + att + elem));
  c.bwd_input = (n_l - n_moe) * (0.5 * layer_b + refwd * layer_f) +
                n_moe * (moe_lin + att + elem + refwd * (moe_lin + att + elem));
  /* context parallelism: the ring passes K/V while the blocks compute (the
   * part beyond the attention's compute is exposed); Ulysses' all-to-alls
   * are not hidden */
  if (cfg->cp > 1) {
    int inside = cfg->tp * cfg->cp <= p->devices_per_node;
    double bytes = cb[1];
    double calls = n_l * (1.0 + refwd) * 2.0 * (cfg->cp - 1);
    double t = bytes / link_bw(p, inside) + calls * link_lat(p, inside);
    int ring = mt_cp_mode_parse(cfg->cp_mode) == MT_CP_RING;
    c.cp = ring ? (t > 3.0 * n_l * att ? t - 3.0 * n_l * att : 0.0) : t;
  }
  /* expert parallelism: the dispatch and combine all-to-alls (and the etp
   * gathers), as a balanced routing implies, never hidden */
  if (n_moe > 0 && (m->moe.ep_size > 1 || m->moe.etp_size > 1)) {
    int ep_inside = cfg->tp * cfg->cp * cfg->dp <= p->devices_per_node ||
                    m->moe.ep_size * m->moe.etp_size <= p->devices_per_node;
    c.ep = (cb[2] + cb[3]) / link_bw(p, ep_inside) + n_moe * 4.0 * link_lat(p, ep_inside);
  }
  if (head) {
    double h = gemm_s(p, BT, Vl, C, 1);
    double logits = p->act_bytes * BT * Vl * 2.0 / (p->elementwise_gbs * 1e9);
    c.fwd += h + logits;
    c.bwd += 2.0 * h + logits;
    c.bwd_input += h + logits;
  }
  if (embed) c.fwd += p->act_bytes * BT * C / (p->elementwise_gbs * 1e9);
  /* tensor parallelism: this chunk's bytes (as comm counts them) and calls */
  if (tp > 1) {
    double bytes = cb[0];
    double calls = n_l * ((cfg->sp ? 10.0 : 4.0) + refwd * (cfg->sp ? 4.0 : 2.0)) +
                   embed * (cfg->sp ? 2.0 : 1.0) + head * ((cfg->sp ? 3.0 : 1.0) + 2.0);
    int inside = cfg->tp <= p->devices_per_node;
    c.tp = bytes / link_bw(p, inside) + calls * link_lat(p, inside);
  }
  return c;
}

/* ------------------------------------------------------------------ */
/* a step                                                              */

int mt_cost_estimate(const mt_config *cfg, const mt_cost_profile *p, mt_cost *out, mt_err *e) {
  memset(out, 0, sizeof *out);
  mt_layout lay;
  if (mt_layout_validate(cfg, 0, &lay, e) != 0) {
    mt_layout_free(&lay);
    return -1;
  }
  const int pp = cfg->pp, v = cfg->virtual_stages, accum = lay.accum, B = cfg->micro_batch;
  const int dpn = p->devices_per_node, world = lay.world;
  /* groups inside a node? (rank order tp, cp, dp, pp) */
  const int dp_inside = cfg->tp * cfg->cp * cfg->dp <= dpn, pp_inside = world <= dpn;
  /* per pp stage: the plan of its first rank and its chunks' costs; the
   * slowest stage's mean chunk sets the per-op times of the schedule's
   * simulation (a stage runs each of its chunks once per micro-batch: with
   * interleaving, pricing every chunk as the slowest one, the LM head's,
   * overstated a 1.3B's pp 4 x 2 step by 17% against the emulation) */
  chunk_cost worst = {0, 0, 0, 0, 0, 0};
  int rc = 0, n_buckets = 1;
  for (int st = 0; st < pp && rc == 0; st++) {
    mt_plan_rank pr;
    mt_plan_world w;
    if (mt_plan_rank_world(cfg, &lay, st, 0, 0, 0, &pr, &w, e) != 0) {
      rc = -1;
      break;
    }
    double mem = mt_plan_rank_total(&pr);
    if (mem > out->mem_bytes) out->mem_bytes = mem;
    for (int c = 0; c < MT_MEM_NCAT; c++)
      if (pr.mem[c] > out->mem[c]) out->mem[c] = pr.mem[c];
    if (pr.dp_bytes > out->dp_bytes) out->dp_bytes = pr.dp_bytes;
    if (pr.tp_bytes > out->tp_bytes) out->tp_bytes = pr.tp_bytes;
    if (pr.pp_bytes > out->pp_bytes) out->pp_bytes = pr.pp_bytes;
    chunk_cost mean = {0, 0, 0, 0, 0, 0};
    for (int vs = st; vs < pp * v; vs += pp) {
      int a, b;
      mt_layout_stage_layers(cfg, &lay, vs, &a, &b);
      double cb[4]; /* the chunk's bytes per micro-batch */
      for (int k = 0; k < 4; k++) cb[k] = w.step.exec.chunk_bytes[vs / pp][k] / accum;
      chunk_cost c = chunk(p, cfg, &w.step.model, a, b, vs == 0, vs == pp * v - 1, B, cb);
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
    /* dp: this stage's gradient and parameter bytes over its link, a latency
     * per bucket collective (per micro-batch under ZeRO-2/3) */
    double dp_s = pr.dp_state_bytes / link_bw(p, dp_inside) +
                  2.0 * pr.n_buckets * link_lat(p, dp_inside) * (cfg->zero >= 2 ? accum : 1);
    if (cfg->dp * cfg->cp == 1) dp_s = 0.0;
    dp_s += pr.edp_bytes / link_bw(p, dp_inside); /* the experts' gradients over edp */
    if (dp_s >= out->dp_total_s) {
      out->dp_total_s = dp_s;
      n_buckets = pr.n_buckets > 0 ? pr.n_buckets : 1;
    }
    /* AdamW on the elements this rank updates: read parameter, gradient and
     * both moments, write three, fp32 */
    double updated = cfg->zero == 3 ? pr.params_numel
                                    : pr.params_numel / (cfg->zero >= 1 ? cfg->dp : 1);
    double optim = 7.0 * 4.0 * updated / (p->elementwise_gbs * 1e9);
    if (optim > out->optim_s) out->optim_s = optim;
    mt_plan_world_destroy(&w);
  }
  if (rc == 0) {
    /* the pipeline: the simulator with the slowest chunk's per-op costs, the
     * point-to-point messages riding on each op */
    double msg = p->act_bytes * (double)B * lay.shape.seq_len * lay.shape.n_embd /
                 (cfg->sp ? cfg->tp : 1);
    double p2p = pp > 1 ? msg / link_bw(p, pp_inside) + link_lat(p, pp_inside) : 0.0;
    double tf = worst.fwd + 0.5 * worst.tp + p2p, tb = worst.bwd + 0.5 * worst.tp + p2p;
    double tbi = worst.bwd_input + 0.5 * worst.tp + p2p, tbw = worst.bwd - worst.bwd_input;
    mt_pp_schedule s;
    mt_pp_schedule_build(&s, lay.sched, pp, accum, v);
    mt_pp_sim sim;
    mt_err why = {0}; /* validation already accepted the schedule */
    mt_pp_schedule_validate(&s, tf, tb, tbi, tbw, &sim, &why);
    mt_pp_schedule_free(&s);
    out->compute_s = accum * v * (worst.fwd + worst.bwd);
    out->cp_s = accum * v * worst.cp;
    out->ep_s = accum * v * worst.ep;
    out->tp_s = accum * v * worst.tp - out->cp_s - out->ep_s;
    out->pp_p2p_s = accum * v * 2.0 * p2p;
    out->pp_bubble_s = sim.makespan - out->compute_s - out->tp_s - out->cp_s - out->ep_s -
                       out->pp_p2p_s;
    if (out->pp_bubble_s < 0) out->pp_bubble_s = 0.0;
    /* dp hides behind backward where the schedule overlaps it (one stage: the
     * last micro-batch's backward, every micro-batch's under ZeRO-2/3; with
     * pipeline stages it runs after the schedule), never the last bucket */
    double hide = pp == 1 ? p->overlap * (cfg->zero >= 2 ? accum : 1) * v * worst.bwd : 0.0;
    double last_bucket = out->dp_total_s / n_buckets;
    out->dp_exposed_s = out->dp_total_s - hide;
    if (out->dp_exposed_s < last_bucket) out->dp_exposed_s = last_bucket;
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
    out->fits = out->mem_bytes <= p->mem_bytes;
    out->world = world;
  }
  mt_layout_free(&lay);
  return rc;
}
