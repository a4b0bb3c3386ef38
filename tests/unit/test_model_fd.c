/* The whole model's gradient against finite differences of its own loss,
 * tensor by tensor, for each architecture: mt_gpt_forward / mt_gpt_backward
 * on the CPU op table (fp32), one rank. test_model_ref holds GPT-2 to an
 * independent double reference; this test covers what that reference does
 * not model (Llama's RMSNorm, rotary positions, SwiGLU, grouped-query and
 * multi-query attention with their key/value heads spread over the query
 * heads, the untied LM head, biases on or off, Llama 3.1's rope scaling)
 * through the model's own forward.
 *
 * For every registered tensor W and a random direction D on it (entries
 * uniform in [-1, 1], padding rows of the vocabulary left at 0), the
 * directional derivative g.D from backward against the central difference
 * (L(W + h D) - L(W - h D)) / 2h of the mean loss L. The parameters are
 * perturbed to O(0.3) noise first (weights of 1 around the norms'), so
 * every term matters and attention is far from uniform.
 * Tolerance: the loss is an fp32 mean of B T = 32 terms of about 5, each
 * accurate to a few units of 6e-8 relative: L itself to about 1e-6; with h
 * = 1e-3 the difference quotient's round-off is about 1e-6 / 1e-3 = 1e-3,
 * and its truncation O(h^2) |L'''| below that (at h = 1e-2 it was 3 times
 * the tolerance on the embedding: RMSNorm of rows of norm 0.2 curves
 * strongly, and the error fell 100-fold at h = 1e-3), against directional
 * derivatives of 1e-2 .. 1 (printed): |numeric - analytic| <= 2e-3 + 2e-2
 * |analytic|; the worst measured is 9% of that. A sign error, a missing
 * term (a query head's key and value gradients overwritten instead of
 * added back: tried, 7 to 70 times the tolerance), the inverse rotation
 * left out or a swapped gate and up gives O(1) relative errors. The
 * ladder residual's cases (each module reading the stream without the
 * previous module's output) hold its backward's two streams to the same
 * differences. */
#include "core/core.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "../check.h"
#include "../test_rng.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *tag;
  mt_model_shape s;
} fd_case;

static float loss_of(mt_gpt *m, const int *inp, const int *tgt, int B) {
  return mt_gpt_forward(m, inp, tgt, B);
}

static void run_case(const fd_case *c) {
  mt_model_shape s = c->s;
  s.vocab_padded = mt_model_pad_vocab(s.vocab, 1);
  const int B = 2, T = s.seq_len, BT = B * T;
  mt_gpt m;
  mt_err e = {0};
  if (mt_gpt_create(&m, &s, mt_ops_cpu(), B, &e) != 0) {
    MT_FAIL("%s: create: %s", c->tag, e.msg);
    return;
  }
  printf("case %s: %s, KV=%d F=%d%s%s, %zu parameters\n", c->tag, mt_arch_name(m.shape.arch),
         m.shape.n_kv_head, m.shape.ffn, m.shape.tied ? ", tied" : "",
         m.shape.bias ? ", biases" : "", mt_model_num_params(&m.shape));
  const mt_registry *r = &m.reg;
  for (int i = 0; i < r->n; i++) { /* O(0.3) noise; norm weights around 1 */
    const mt_tensor *t = &r->t[i];
    int norm = strstr(t->name, "ln") != NULL;
    for (size_t k = 0; k < t->numel_local; k++)
      m.params[t->offset + k] = norm ? urand(0.7f, 1.3f) : urand(-0.3f, 0.3f);
  }
  int *inp = malloc((size_t)BT * sizeof(int)), *tgt = malloc((size_t)BT * sizeof(int));
  for (int i = 0; i < BT; i++) inp[i] = (int)urand(0.0f, (float)s.vocab - 0.5f);
  for (int i = 0; i < BT; i++) tgt[i] = (int)urand(0.0f, (float)s.vocab - 0.5f);
  mt_gpt_zero_grad(&m);
  loss_of(&m, inp, tgt, B);
  mt_gpt_backward(&m, 1.0f / (float)BT, NULL, NULL);
  const float h = 1e-3f;
  for (int i = 0; i < r->n; i++) {
    const mt_tensor *t = &r->t[i];
    size_t n = t->numel_local;
    float *p = m.params + t->offset, *g = m.grads + t->offset;
    float *keep = malloc(n * sizeof(float)), *dir = malloc(n * sizeof(float));
    memcpy(keep, p, n * sizeof(float));
    /* padding rows of the vocabulary (no token reaches them) stay put */
    size_t real = t->ndim == 2 ? (size_t)t->shape[0] * (size_t)t->local_shape[1] : n;
    double analytic = 0.0;
    for (size_t k = 0; k < n; k++) {
      dir[k] = k < real ? urand(-1.0f, 1.0f) : 0.0f;
      analytic += (double)g[k] * dir[k];
    }
    for (size_t k = 0; k < n; k++) p[k] = keep[k] + h * dir[k];
    double up = loss_of(&m, inp, tgt, B);
    for (size_t k = 0; k < n; k++) p[k] = keep[k] - h * dir[k];
    double down = loss_of(&m, inp, tgt, B);
    memcpy(p, keep, n * sizeof(float));
    double numeric = (up - down) / (2.0 * h);
    char what[160];
    snprintf(what, sizeof what, "%s %s (g.D %+.3e)", c->tag, t->name, analytic);
    double err = fabs(numeric - analytic) / (2e-3 + 2e-2 * fabs(analytic));
    mt_check_err(what, err, 1.0);
    free(keep);
    free(dir);
  }
  free(inp);
  free(tgt);
  mt_gpt_destroy(&m);
}

/* The presets' parameter counts: GPT-2 124M's and the Llama 3 models' as
 * Hugging Face's transformers counts them (sum of numel of every parameter
 * of GPT2LMHeadModel, tied head once; of LlamaForCausalLM). */
/* A stored configuration's model keys as its run resolved them: a
 * preset's norm epsilon (deepseek-v3-like's 1e-6, not the architecture's
 * 1e-5), a value set by hand (in double), the token ids. */
static void test_stored_keys(void) {
  mt_model_stored st;
  mt_err e = {0};
  const char *preset = "[model]\npreset = deepseek-v3-like\n";
  MT_CHECK(mt_model_stored_of(preset, "a preset's", &st, &e) == 0, "%s", e.msg);
  MT_CHECK(st.norm_eps == (double)1e-6f && st.shape.rope_theta > 0,
           "deepseek-v3-like's stored norm_eps %g (want its preset's 1e-6)", st.norm_eps);
  const char *set = "[model]\npreset = tiny-llama\nnorm_eps = 3e-6\nbos_token_id = 7\n";
  MT_CHECK(mt_model_stored_of(set, "a set value's", &st, &e) == 0, "%s", e.msg);
  MT_CHECK(st.norm_eps == 3e-6 && !strcmp(st.bos_token_id, "7"),
           "a set norm_eps %.17g (want 3e-6 exactly), bos '%s'", st.norm_eps, st.bos_token_id);
  MT_CHECK(mt_model_stored_of("[model]\nn_layer = x\n", "a bad", &st, &e) != 0,
           "a configuration that does not parse was taken");
}

static void test_presets(void) {
  const struct {
    mt_preset p;
    size_t params;
  } want[] = {{MT_PRESET_GPT2_124M, 124439808},
              {MT_PRESET_LLAMA3_8B, 8030261248},
              {MT_PRESET_LLAMA3_70B, 70553706496},
              {MT_PRESET_LLAMA3_405B, 405853388800}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    mt_model_shape s;
    char what[96];
    size_t got = mt_model_preset(want[i].p, &s) == 0 ? mt_model_num_params(&s) : 0;
    snprintf(what, sizeof what, "%s: %zu parameters", mt_preset_name(want[i].p), got);
    mt_check_true(what, got == want[i].params);
  }
  /* Mixtral 8x7B (MixtralForCausalLM's count; 12.9B active per token):
   * its experts come from the preset through the config */
  mt_config cfg;
  mt_model_shape s;
  mt_err e = {0};
  char *over[] = {"model.preset=mixtral-8x7b"};
  int ok = mt_config_load(&cfg, NULL, 1, over, &e) == 0 &&
           mt_model_shape_from_config(&cfg, &s, &e) == 0;
  if (!ok) printf("mixtral-8x7b: %s\n", e.msg);
  char what[96];
  snprintf(what, sizeof what, "mixtral-8x7b: %zu parameters, %zu active",
           ok ? mt_model_num_params(&s) : 0, ok ? mt_model_active_params(&s) : 0);
  mt_check_true(what, ok && mt_model_num_params(&s) == 46702792704 &&
                          mt_model_active_params(&s) == 12879925248);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  mt_log_init(0);
  mt_kernels_set_threads(1);
  g_rng = 0x243F6A8885A308D3ull; /* this test's inputs */
  const fd_case cases[] = {
      {"gpt2", {.n_layer = 2, .n_embd = 16, .n_head = 2, .seq_len = 16, .vocab = 50}},
      {"llama-gqa",
       {.n_layer = 2, .n_embd = 32, .n_head = 4, .seq_len = 16, .vocab = 50,
        .arch = MT_ARCH_LLAMA, .n_kv_head = 2, .ffn = 24, .norm_eps = 1e-5f,
        .rope_theta = 10000.0}},
      {"llama-mqa-tied-bias",
       {.n_layer = 2, .n_embd = 32, .n_head = 4, .seq_len = 16, .vocab = 50,
        .arch = MT_ARCH_LLAMA, .n_kv_head = 1, .ffn = 24, .tied = 1, .bias = 1,
        .norm_eps = 1e-5f, .rope_theta = 500000.0, .rope_scaling = MT_ROPE_SCALING_LLAMA3,
        .rope_factor = 8.0, .rope_low_freq_factor = 1.0, .rope_high_freq_factor = 4.0,
        .rope_original_len = 8}},
      /* the ladder residual (three blocks: the middle one both receives a
       * pending MLP output and passes one on; the last adds its own) */
      {"gpt2-ladder",
       {.n_layer = 3, .n_embd = 16, .n_head = 2, .seq_len = 16, .vocab = 50,
        .residual = MT_RESIDUAL_LADDER}},
      {"llama-gqa-ladder",
       {.n_layer = 3, .n_embd = 32, .n_head = 4, .seq_len = 16, .vocab = 50,
        .arch = MT_ARCH_LLAMA, .n_kv_head = 2, .ffn = 24, .norm_eps = 1e-5f,
        .rope_theta = 10000.0, .residual = MT_RESIDUAL_LADDER}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
  test_presets();
  test_stored_keys();
  MPI_Finalize();
  return mt_check_summary("test_model_fd");
}
