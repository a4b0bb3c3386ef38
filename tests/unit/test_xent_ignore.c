/* test_xent_ignore: a target of MT_TARGET_IGNORE (-1, the padding of
 * variable-length batches) in the CPU backend's cross-entropy ops, fp32 and
 * bf16 storage: loss 0 and dlogits 0 on the ignored rows, the compact
 * batch's bits on the others, on the whole ops and the vocabulary-parallel
 * pieces on one and two simulated ranks (tests/xent_ignore_check.h; the
 * CUDA backend's twin is tests/gpu/gpu_xent_ignore.c). At 2 threads, the
 * rows split over both.
 *
 * And the whole model (preset tiny at T = 8, B = 2, fp32, dloss = 1/16):
 *   - every target ignored: mt_gpt_forward returns 0 and every parameter
 *     gradient is exactly 0;
 *   - a set S of positions ignored (inside and at the end of sequence 0, two
 *     of sequence 1) and then its complement, the gradients accumulated,
 *     equal the gradients of the batch with every target, and the two loss
 *     sums (mt_gpt_forward's mean over the positions with a target times
 *     their count) add up to its loss sum: leaving a position out takes
 *     exactly its loss's share away (an ignored row that still gave a
 *     gradient would count twice);
 *   - sequence 1 ignored whole at B = 2 gives sequence 0's gradients and
 *     mean loss at B = 1.
 * These compare sums taken in another order: within TOL_MODEL = 1e-5 of
 * the largest element of each tensor (test_model_ref's bound for a batch
 * split into micro-batches; measured: 5e-7). */
#include "model/model.h"
#include "../xent_ignore_check.h"

#define TOL_MODEL 1e-5
#define XI_T 8
#define XI_B 2

/* forward and backward (dloss 1/(B T)) on the targets, accumulating into
 * m->grads; the loss sum (the mean times the positions with a target) */
static double model_pass(mt_gpt *m, const int *inp, const int *tgt, int B) {
  int real = 0;
  for (int i = 0; i < B * XI_T; i++) real += tgt[i] != MT_TARGET_IGNORE;
  double mean = mt_gpt_forward(m, inp, tgt, B);
  mt_gpt_backward(m, 1.0f / (XI_B * XI_T), NULL, NULL);
  return mean * real;
}

/* the worst over the tensors of max |a - b| / max |b| (NaN stays) */
static double grads_err(const mt_gpt *m, const float *a, const float *b) {
  double worst = 0.0;
  for (int i = 0; i < m->reg.n; i++) {
    const mt_tensor *t = &m->reg.t[i];
    double emax = 0.0, rmax = 0.0;
    for (size_t j = 0; j < t->numel_local; j++) {
      emax = mt_worst(emax, fabs((double)a[t->offset + j] - (double)b[t->offset + j]));
      rmax = mt_worst(rmax, fabs((double)b[t->offset + j]));
    }
    worst = mt_worst(worst, rmax > 0.0 ? emax / rmax : emax);
  }
  return worst;
}

static void test_model(void) {
  mt_model_shape s;
  if (mt_model_preset(MT_PRESET_TINY, &s) != 0) {
    MT_FAIL("preset tiny is unknown");
    return;
  }
  s.seq_len = XI_T;
  const int BT = XI_B * XI_T, V = s.vocab;
  printf("the whole model: tiny, T=%d B=%d V=%d\n", XI_T, XI_B, V);
  mt_gpt m;
  mt_err e = {0};
  if (mt_gpt_create(&m, &s, mt_ops_cpu(), XI_B, &e) != 0) {
    MT_FAIL("mt_gpt_create: %s", e.msg);
    return;
  }
  mt_gpt_init_params(&m, 4321);
  const size_t np = m.reg.numel_local, gb = np * sizeof(float);
  int inp[XI_B * XI_T], tgt[XI_B * XI_T], tgt_s[XI_B * XI_T], tgt_c[XI_B * XI_T];
  const int in_s[XI_B * XI_T] = {0, 0, 0, 1, 0, 1, 1, 1, 0, 1, 0, 0, 0, 1, 0, 0};
  for (int i = 0; i < BT; i++) {
    inp[i] = (int)(rng_next() % (uint64_t)V);
    tgt[i] = (int)(rng_next() % (uint64_t)V);
    tgt_s[i] = in_s[i] ? MT_TARGET_IGNORE : tgt[i];
    tgt_c[i] = in_s[i] ? tgt[i] : MT_TARGET_IGNORE;
  }
  float *g_all = malloc(gb), *g_parts = malloc(gb);

  /* every target ignored */
  int none[XI_B * XI_T];
  for (int i = 0; i < BT; i++) none[i] = MT_TARGET_IGNORE;
  mt_gpt_zero_grad(&m);
  float l_none = mt_gpt_forward(&m, inp, none, XI_B);
  mt_gpt_backward(&m, 1.0f / BT, NULL, NULL);
  size_t nonzero = 0;
  for (size_t j = 0; j < np; j++) nonzero += m.grads[j] != 0.0f;
  mt_check_true("model, every target ignored: loss 0", l_none == 0.0f);
  char what[160];
  snprintf(what, sizeof what, "model, every target ignored: gradients exactly 0 (%zu non-zero)",
           nonzero);
  mt_check_true(what, nonzero == 0);

  /* S ignored, then its complement, against every target */
  mt_gpt_zero_grad(&m);
  double sum_all = model_pass(&m, inp, tgt, XI_B);
  memcpy(g_all, m.grads, gb);
  mt_gpt_zero_grad(&m);
  double sum_parts = model_pass(&m, inp, tgt_s, XI_B);
  sum_parts += model_pass(&m, inp, tgt_c, XI_B);
  memcpy(g_parts, m.grads, gb);
  mt_check_err("model, S ignored + its complement: loss sums", fabs(sum_parts - sum_all) / sum_all,
               TOL_MODEL);
  mt_check_err("model, S ignored + its complement: gradients", grads_err(&m, g_parts, g_all),
               TOL_MODEL);

  /* sequence 1 ignored whole, against sequence 0 alone */
  for (int i = XI_T; i < BT; i++) tgt_s[i] = MT_TARGET_IGNORE;
  for (int i = 0; i < XI_T; i++) tgt_s[i] = tgt[i];
  mt_gpt_zero_grad(&m);
  float l_pad = mt_gpt_forward(&m, inp, tgt_s, XI_B);
  mt_gpt_backward(&m, 1.0f / BT, NULL, NULL);
  memcpy(g_parts, m.grads, gb);
  mt_gpt_zero_grad(&m);
  float l_one = mt_gpt_forward(&m, inp, tgt, 1);
  mt_gpt_backward(&m, 1.0f / BT, NULL, NULL);
  mt_check_err("model, sequence 1 ignored: mean loss = sequence 0's at B = 1",
               fabs((double)l_pad - l_one) / l_one, TOL_MODEL);
  mt_check_err("model, sequence 1 ignored: gradients = sequence 0's at B = 1",
               grads_err(&m, g_parts, m.grads), TOL_MODEL);
  free(g_all), free(g_parts);
  mt_gpt_destroy(&m);
}

int main(void) {
  g_rng = 0x2B7E151628AED2A6ull; /* this test's inputs (none drawn from g_rng yet) */
  mt_kernels_set_threads(2);
  const mt_ops *cpu = mt_ops_cpu();
  xent_ignore_check(cpu, MT_DT_F32);
  xent_ignore_check(cpu, MT_DT_BF16);
  test_model();
  return mt_check_summary("test_xent_ignore");
}
