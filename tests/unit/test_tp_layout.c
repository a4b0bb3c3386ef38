/* test_tp_layout: the tensor-parallel layout as the registry derives it, and
 * the vocabulary-parallel ops, on one process (no MPI: every tp rank is
 * simulated by building its registry or calling the ops on its shard).
 *
 * Layout, for the model shapes tiny and wide (L=3, C=48, NH=4, T=16,
 * V=130), tp = 1, 2, 4, every tp rank, sp off and on (mt_gpt_register):
 *   - the vocabulary is padded to a multiple of 64*tp and wte's rows split in
 *     tp contiguous ranges of Vp/tp;
 *   - over the tp ranks, the local elements of each sharded tensor cover
 *     every global element exactly once; every rank holds all of a
 *     replicated one;
 *   - QKV: rank r's local row i of fused block k (q, k, v) is global row
 *     k*C + r*C/tp + i, so each rank holds whole heads of q, k and v;
 *     attn.proj and mlp.proj split their input dim (columns), mlp.fc and the
 *     QKV/fc biases their output dim;
 *   - numel_local = (sum of the sharded tensors, padded) / tp + (sum of the
 *     replicated ones), and equals the formula from the shape alone;
 *   - exactly the 4L+2 LayerNorm tensors are tp_partial_grad, and only under
 *     sp with tp > 1.
 * Pipeline stages (mt_gpt_register_stages), tiny and wide over pp = 2, 3
 * (balanced) and tp = 1, 2, every stage: a stage holds exactly its layers'
 * tensors, wte and wpe on the first, the final LN on the last and wte's copy
 * (the tied LM head) there too, written by the first only (pp_stage 0); the
 * held tensors lie end to end from offset 0 in registration order, the
 * others have numel_local 0; the stages together hold the tp rank's whole
 * layout plus that one copy.
 * Ops, simulated over 1, 2, 4 and 3 vocabulary shards (a shard may hold no
 * real column, and 3 shards make uneven real counts):
 *   - encoder_vp_forward: the shards' outputs (positions added by one) sum to
 *     encoder_forward's, bit for bit; encoder_vp_backward's wte rows are
 *     encoder_backward's rows, bit for bit, and dwpe is skipped when NULL;
 *   - xent_vp_*: with the per-row statistics combined as the model does (max,
 *     then sums), the losses and the probabilities and gradients of every
 *     column equal softmax_xent_forward/backward's: bit for bit with one
 *     shard, within 1e-6 relative otherwise (only the order of the double sum
 *     of exps changes); padding columns exactly 0.
 * Exits 1 naming every failing check. */
#include "model/model.h"
#include "../check.h"
#include "../test_rng.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* layout                                                              */

static size_t numel_formula(const mt_model_shape *s, int tp) {
  size_t C = (size_t)s->n_embd, L = (size_t)s->n_layer, T = (size_t)s->seq_len;
  size_t Vp = (size_t)mt_model_pad_vocab(s->vocab, tp);
  size_t sharded = Vp * C + L * (3 * C * C + 3 * C + C * C + 4 * C * C + 4 * C + 4 * C * C);
  size_t replicated = T * C + L * 6 * C + 2 * C;
  return sharded / (size_t)tp + replicated;
}

static void test_layout(const char *tag, mt_model_shape s, int tp, int sp) {
  s.vocab_padded = mt_model_pad_vocab(s.vocab, tp);
  const int C = s.n_embd;
  MT_CHECK(s.vocab_padded % (64 * tp) == 0 && s.vocab_padded >= s.vocab &&
               s.vocab_padded - s.vocab < 64 * tp,
           "%s tp=%d: vocab %d padded to %d", tag, tp, s.vocab, s.vocab_padded);
  mt_registry reg[4];
  mt_err err = {0};
  const char *msg = err.msg;
  for (int r = 0; r < tp; r++)
    if (mt_gpt_register(&reg[r], &s, tp, r, sp, &err) != 0) {
      MT_CHECK(0, "%s tp=%d rank %d: register: %s", tag, tp, r, msg);
      return;
    }
  for (int r = 0; r < tp; r++) {
    size_t sharded = 0, replicated = 0;
    int n_partial = 0, ln_partial = 1;
    for (int i = 0; i < reg[r].n; i++) {
      const mt_tensor *t = &reg[r].t[i];
      if (t->tp.kind == MT_PLACE_SHARDED) sharded += mt_tensor_numel_padded(t);
      else replicated += mt_tensor_numel_padded(t);
      int is_ln = strstr(t->name, "ln") == t->name || strstr(t->name, ".ln") != NULL;
      n_partial += t->tp_partial_grad;
      if (is_ln) ln_partial &= t->tp_partial_grad == (sp && tp > 1);
    }
    MT_CHECK(reg[r].numel_local == sharded / (size_t)tp + replicated,
             "%s tp=%d rank %d: numel_local %zu != sharded %zu / tp + replicated %zu", tag, tp, r,
             reg[r].numel_local, sharded, replicated);
    MT_CHECK(reg[r].numel_local == numel_formula(&s, tp),
             "%s tp=%d rank %d: numel_local %zu != formula %zu", tag, tp, r, reg[r].numel_local,
             numel_formula(&s, tp));
    MT_CHECK(ln_partial && n_partial == (sp && tp > 1 ? 4 * s.n_layer + 2 : 0),
             "%s tp=%d sp=%d: %d tensors tp_partial_grad", tag, tp, sp, n_partial);
  }
  /* coverage: each global element of a sharded tensor exactly once */
  for (int i = 0; i < reg[0].n; i++) {
    const mt_tensor *t0 = &reg[0].t[i];
    size_t n = mt_tensor_numel_padded(t0);
    unsigned char *seen = calloc(n, 1);
    int bad_index = 0;
    for (int r = 0; r < tp; r++) {
      const mt_tensor *t = &reg[r].t[i];
      for (size_t j = 0; j < t->numel_local; j++) {
        size_t g = mt_tensor_global_index(t, j, tp);
        if (g >= n) bad_index = 1;
        else seen[g]++;
      }
    }
    int want = t0->tp.kind == MT_PLACE_SHARDED ? 1 : tp, ok = !bad_index;
    for (size_t g = 0; g < n; g++) ok &= seen[g] == want;
    MT_CHECK(ok, "%s tp=%d: %s: global elements not covered %d time(s) each", tag, tp, t0->name,
             want);
    free(seen);
  }
  /* QKV rows by fused block, projection columns, vocabulary rows */
  for (int r = 0; r < tp; r++) {
    const mt_registry *g = &reg[r];
    const mt_tensor *qkv = &g->t[mt_registry_find(g, "blocks.0.attn.qkv.weight")];
    const mt_tensor *qkvb = &g->t[mt_registry_find(g, "blocks.1.attn.qkv.bias")];
    const mt_tensor *proj = &g->t[mt_registry_find(g, "blocks.1.attn.proj.weight")];
    const mt_tensor *mproj = &g->t[mt_registry_find(g, "blocks.0.mlp.proj.weight")];
    const mt_tensor *fc = &g->t[mt_registry_find(g, "blocks.0.mlp.fc.weight")];
    const mt_tensor *wte = &g->t[mt_registry_find(g, "wte.weight")];
    int Cl = C / tp, ok = qkv->local_shape[0] == 3 * Cl && qkv->local_shape[1] == C;
    for (int k = 0; k < 3 && ok; k++)
      for (int i = 0; i < Cl && ok; i++) {
        size_t local_row = (size_t)(k * Cl + i);
        size_t want = (size_t)(k * C + r * Cl + i);
        ok &= mt_tensor_global_index(qkv, local_row * C, tp) / (size_t)C == want;
        ok &= mt_tensor_global_index(qkvb, local_row, tp) == want;
      }
    MT_CHECK(ok, "%s tp=%d rank %d: QKV rows are not q|k|v blocks of C/tp rows each", tag, tp, r);
    MT_CHECK(
        proj->local_shape[0] == C && proj->local_shape[1] == Cl &&
            mt_tensor_global_index(proj, 1, tp) == (size_t)(r * Cl + 1) &&
            mproj->local_shape[1] == 4 * Cl &&
            mt_tensor_global_index(mproj, (size_t)(4 * Cl), tp) == (size_t)(4 * C + r * 4 * Cl),
        "%s tp=%d rank %d: row-parallel weights do not split their columns", tag, tp, r);
    MT_CHECK(fc->local_shape[0] == 4 * Cl && fc->local_start[0] == 4 * Cl * r,
             "%s tp=%d rank %d: mlp.fc rows", tag, tp, r);
    MT_CHECK(wte->local_shape[0] == s.vocab_padded / tp &&
                 wte->local_start[0] == (int64_t)r * (s.vocab_padded / tp),
             "%s tp=%d rank %d: wte holds rows from %lld, %lld of them", tag, tp, r,
             (long long)wte->local_start[0], (long long)wte->local_shape[0]);
  }
  for (int r = 0; r < tp; r++) mt_registry_free(&reg[r]);
}

/* ------------------------------------------------------------------ */
/* vocabulary-parallel ops                                             */

/* shard r of `shards` over Vp columns: [v0, v0+Vl), nreal of them < V */
static void test_stage_layout(const char *tag, mt_model_shape s, int tp, int pp) {
  s.vocab_padded = mt_model_pad_vocab(s.vocab, tp);
  mt_err err = {0};
  const char *msg = err.msg;
  mt_registry whole, reg;
  if (mt_gpt_register(&whole, &s, tp, 0, 0, &err) != 0) {
    MT_CHECK(0, "%s: register: %s", tag, msg);
    return;
  }
  int *stage_of_layer = calloc((size_t)s.n_layer, sizeof(int));
  for (int st = 0; st < pp; st++) {
    int a, b;
    mt_registry_stage_layers(s.n_layer, pp, 1, NULL, 0, st, &a, &b);
    for (int l = a; l < b; l++) stage_of_layer[l] = st;
  }
  size_t total = 0, wte_local = whole.t[mt_registry_find(&whole, "wte.weight")].numel_local;
  for (int st = 0; st < pp; st++) {
    if (mt_gpt_register(&reg, &s, tp, 0, 0, &err) != 0 ||
        mt_gpt_register_stages(&reg, stage_of_layer, pp - 1, st, &err) != 0) {
      MT_CHECK(0, "%s pp=%d stage %d: %s", tag, pp, st, msg);
      break;
    }
    size_t off = 0;
    for (int i = 0; i < reg.n; i++) {
      const mt_tensor *t = &reg.t[i];
      int layer = -1, want;
      if (sscanf(t->name, "blocks.%d.", &layer) == 1) want = stage_of_layer[layer] == st;
      else if (strncmp(t->name, "lnf.", 4) == 0) want = st == pp - 1;
      else if (strcmp(t->name, "wte.weight") == 0) want = st == 0 || st == pp - 1;
      else want = st == 0;
      int owner = strcmp(t->name, "wte.weight") == 0 ? t->pp_stage == 0 : 1;
      MT_CHECK(mt_registry_holds(&reg, t) == want && owner &&
                   t->numel_local == (want ? whole.t[i].numel_local : 0) && t->offset == off,
               "%s tp=%d pp=%d stage %d: %s held %d (want %d), numel %zu, offset %zu (want %zu)",
               tag, tp, pp, st, t->name, mt_registry_holds(&reg, t), want, t->numel_local,
               t->offset, off);
      off += t->numel_local;
    }
    MT_CHECK(reg.numel_local == off, "%s pp=%d stage %d: numel_local %zu, tensors %zu", tag, pp, st,
             reg.numel_local, off);
    total += reg.numel_local;
    mt_registry_free(&reg);
  }
  MT_CHECK(total == whole.numel_local + wte_local,
           "%s tp=%d pp=%d: stages hold %zu elements, the model %zu + wte %zu", tag, tp, pp, total,
           whole.numel_local, wte_local);
  free(stage_of_layer);
  mt_registry_free(&whole);
}

static void shard_of(int r, int shards, int V, int Vp, int *v0, int *Vl, int *nreal) {
  *Vl = Vp / shards;
  *v0 = r * *Vl;
  int real = V - *v0;
  *nreal = real < 0 ? 0 : real > *Vl ? *Vl : real;
}

static void test_encoder_vp(const mt_ops *ops, int shards) {
  const int B = 2, T = 5, C = 70, V = 130, Vp = 192; /* C > one 64-column block */
  int inp[10];
  for (int i = 0; i < B * T; i++) inp[i] = (int)(rng_next() % V);
  inp[3] = inp[7]; /* a repeated token accumulates */
  size_t nw = (size_t)Vp * C, np = (size_t)T * C, no = (size_t)B * T * C;
  float *wte = malloc(nw * sizeof(float)), *wpe = malloc(np * sizeof(float));
  for (size_t i = 0; i < nw; i++) wte[i] = rng_uniform(-1, 1);
  for (size_t i = 0; i < np; i++) wpe[i] = rng_uniform(-1, 1);
  float *ref = calloc(no, sizeof(float)), *sum = calloc(no, sizeof(float));
  float *part = calloc(no, sizeof(float)), *dout = malloc(no * sizeof(float));
  ops->encoder_forward(MT_DT_F32, ref, inp, wte, wpe, B, T, C);
  for (int r = 0; r < shards; r++) {
    int v0, Vl, nreal;
    shard_of(r, shards, V, Vp, &v0, &Vl, &nreal);
    ops->encoder_vp_forward(MT_DT_F32, part, inp, wte + (size_t)v0 * C, v0, Vl, r == 0 ? wpe : NULL,
                            NULL, B, T, C);
    for (size_t i = 0; i < no; i++) sum[i] += part[i];
  }
  MT_CHECK(memcmp(sum, ref, no * sizeof(float)) == 0,
           "encoder_vp_forward over %d shards: the sum differs from encoder_forward", shards);
  for (size_t i = 0; i < no; i++) dout[i] = rng_uniform(-1, 1);
  float *dwte = calloc(nw, sizeof(float)), *dwpe = calloc(np, sizeof(float));
  float *dwte_vp = calloc(nw, sizeof(float)), *dwpe_vp = calloc(np, sizeof(float));
  ops->encoder_backward(MT_DT_F32, dwte, dwpe, dout, inp, B, T, C);
  for (int r = 0; r < shards; r++) {
    int v0, Vl, nreal;
    shard_of(r, shards, V, Vp, &v0, &Vl, &nreal);
    ops->encoder_vp_backward(MT_DT_F32, dwte_vp + (size_t)v0 * C, r == 0 ? dwpe_vp : NULL, dout,
                             inp, NULL, v0, Vl, B, T, C);
  }
  MT_CHECK(memcmp(dwte, dwte_vp, nw * sizeof(float)) == 0 &&
               memcmp(dwpe, dwpe_vp, np * sizeof(float)) == 0,
           "encoder_vp_backward over %d shards differs from encoder_backward", shards);
  free(wte), free(wpe), free(ref), free(sum), free(part), free(dout);
  free(dwte), free(dwpe), free(dwte_vp), free(dwpe_vp);
}

static void test_xent_vp(const mt_ops *ops, int shards) {
  const int N = 9, V = 130, Vp = 192;
  size_t n = (size_t)N * Vp;
  int targets[9] = {0, 129, 64, 63, 127, 128, 5, 100, 129};
  float *logits = malloc(n * sizeof(float)), *probs = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) logits[i] = rng_uniform(-4, 4);
  for (int i = 0; i < N; i++)
    for (int j = V; j < Vp; j++) logits[(size_t)i * Vp + j] = 1000.0f; /* padding must not leak */
  float losses[9], losses_vp[9], rowmax[9], part_max[9];
  double stats[18], part_stats[18];
  ops->softmax_xent_forward(MT_DT_F32, losses, probs, logits, targets, N, V, Vp);
  float *dref = malloc(n * sizeof(float));
  ops->softmax_xent_backward(MT_DT_F32, dref, probs, targets, 0.25f, N, V, Vp);

  /* per shard: its columns, contiguous (N, Vl), as the LM head writes them */
  int Vl = Vp / shards;
  float **sl = malloc((size_t)shards * sizeof(float *));
  for (int r = 0; r < shards; r++) {
    sl[r] = malloc((size_t)N * Vl * sizeof(float));
    for (int i = 0; i < N; i++)
      memcpy(sl[r] + (size_t)i * Vl, logits + (size_t)i * Vp + (size_t)r * Vl, (size_t)Vl * sizeof(float));
  }
  for (int i = 0; i < N; i++) rowmax[i] = -INFINITY;
  for (int r = 0; r < shards; r++) { /* all-reduce max (a NaN partial max stays NaN) */
    int v0, vl, nreal;
    shard_of(r, shards, V, Vp, &v0, &vl, &nreal);
    ops->xent_vp_max(MT_DT_F32, part_max, sl[r], N, vl, nreal);
    for (int i = 0; i < N; i++) rowmax[i] = (float)mt_worst(rowmax[i], part_max[i]);
  }
  memset(stats, 0, sizeof stats);
  for (int r = 0; r < shards; r++) { /* all-reduce sum */
    int v0, vl, nreal;
    shard_of(r, shards, V, Vp, &v0, &vl, &nreal);
    ops->xent_vp_exp(MT_DT_F32, part_stats, sl[r], rowmax, targets, v0, N, vl, nreal);
    for (int i = 0; i < 2 * N; i++) stats[i] += part_stats[i];
  }
  double loss_err = 0.0, prob_err = 0.0, grad_err = 0.0;
  int pad_zero = 1, bitwise = 1;
  for (int r = 0; r < shards; r++) {
    int v0, vl, nreal;
    shard_of(r, shards, V, Vp, &v0, &vl, &nreal);
    ops->xent_vp_finish(MT_DT_F32, losses_vp, sl[r], sl[r], stats, rowmax, targets, N, vl, nreal);
    for (int i = 0; i < N; i++) {
      loss_err = mt_worst(loss_err, fabs(losses_vp[i] - losses[i]) / fabs(losses[i]));
      bitwise &= losses_vp[i] == losses[i];
      for (int j = 0; j < vl; j++) {
        float p = sl[r][(size_t)i * vl + j], want = probs[(size_t)i * Vp + v0 + j];
        if (v0 + j >= V) pad_zero &= p == 0.0f;
        prob_err = mt_worst(prob_err, fabs(p - want) / fmax(fabs(want), 1e-30));
        bitwise &= p == want;
      }
    }
    ops->xent_vp_backward(MT_DT_F32, sl[r], sl[r], targets, v0, 0.25f, N, vl, nreal);
    for (int i = 0; i < N; i++)
      for (int j = 0; j < vl; j++) {
        float d = sl[r][(size_t)i * vl + j], want = dref[(size_t)i * Vp + v0 + j];
        if (v0 + j >= V) pad_zero &= d == 0.0f;
        grad_err = mt_worst(grad_err, fabs(d - want) / 0.25);
        bitwise &= d == want;
      }
  }
  printf("xent_vp over %d shards: loss rel err %.2e, prob rel err %.2e, grad err %.2e%s\n", shards,
         loss_err, prob_err, grad_err, bitwise ? " (bitwise)" : "");
  MT_CHECK(pad_zero, "xent_vp over %d shards: padding columns got probability or gradient", shards);
  MT_CHECK(loss_err <= 1e-6 && prob_err <= 1e-6 && grad_err <= 1e-6,
           "xent_vp over %d shards differs from softmax_xent", shards);
  MT_CHECK(shards > 1 || bitwise, "xent_vp on one shard is not softmax_xent bit for bit");
  for (int r = 0; r < shards; r++) free(sl[r]);
  free(sl), free(logits), free(probs), free(dref);
}

int main(void) {
  g_rng = 0x3243F6A8885A308Dull; /* this test's inputs */
  mt_kernels_set_threads(1);
  mt_model_shape tiny, wide = {.n_layer = 3, .n_embd = 48, .n_head = 4, .seq_len = 16, .vocab = 130};
  if (mt_model_preset(MT_PRESET_TINY, &tiny) != 0) return 1;
  for (int tp = 1; tp <= 4; tp *= 2)
    for (int sp = 0; sp <= 1; sp++) {
      test_layout("tiny", tiny, tp, sp);
      test_layout("wide", wide, tp, sp);
    }
  tiny.n_layer = 6; /* two layers a stage at pp = 3 */
  for (int tp = 1; tp <= 2; tp++)
    for (int pp = 2; pp <= 3; pp++) {
      test_stage_layout("tiny", tiny, tp, pp);
      test_stage_layout("wide", wide, tp, pp);
    }
  const mt_ops *ops = mt_ops_cpu();
  int shards[] = {1, 2, 4, 3};
  for (int k = 0; k < 4; k++) {
    test_encoder_vp(ops, shards[k]);
    test_xent_vp(ops, shards[k]);
  }
  return mt_check_summary("test_tp_layout");
}
