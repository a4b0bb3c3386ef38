/* Stack presets (meshplan --stack NAME): the software stacks of published
 * training runs as named sets of meshplan's own pricing options, so a user
 * need not know which flags match a paper. One row a stack; each value is
 * exactly what `--attention`, `--collectives`, `--dtype` and
 * `--compute-efficiency` would set, and an explicit flag given beside
 * --stack overrides the preset's value.
 *
 * The categories of --dtype (plan.h's mt_cost_dtypes), in bytes per
 * element: weights (the compute copy, ZeRO-3's gathers), master (a separate
 * fp32 copy, 0 none), grads (accumulation buffers), moments (AdamW's),
 * acts (activations), grad_reduce (the dp x cp gradient reductions), msg
 * (tp, sp, cp, pp and ep messages). A stack's mixed precision is written
 * out in full so that it prices the same on any profile and configuration
 * (on the GPU profiles, act_bytes = 2, the mixed row is also the default). */
#include "plan/plan.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* bf16 mixed precision as Megatron-LM and PyTorch FSDP's MixedPrecision
 * (param bf16, reduce fp32) keep it: a bf16 compute copy over fp32 master
 * weights, fp32 gradients and their reduction, bf16 activations and
 * messages */
#define MIXED_FP32_GRADS                                                                   \
  { "weights=2", "master=4", "grads=4", "moments=4", "acts=2", "grad_reduce=4", "msg=2" }

/* Each stack's compute efficiency (a factor on the profile's matmul and
 * attention rates: its kernels and the gaps between them, against the
 * measured curve): fitted on the whole published table, so these are
 * in-sample values, with
 *   python3 apps/scripts/plan-published.py --cv loso
 * ("compute efficiency fitted on the whole table"): the efficiency at which
 * the geometric mean of predicted over published over the stack's runs is 1,
 * at most 1 (the curves are the best measured rates). What they are worth on
 * a run not in the table is the same command's leave-one-source-out figure
 * (docs/planner.md), not the in-sample one. meshtrain is 1 by definition. */
#define EFF_MEGATRON_2021 0.8298
#define EFF_MEGATRON_DEEPSPEED 0.7122
#define EFF_DEEPSPEED_ZERO3 0.6231
#define EFF_MEGATRON_CORE 0.7757
#define EFF_FSDP 0.9089
#define EFF_LLMC 0.8177

static const mt_plan_stack g_stacks[] = {
    /* meshtrain's own: every option as the profile and the configuration
     * say (block attention as the backends run it, collectives as the
     * profile's `collectives` key, hierarchical unless set; the run's own
     * dtypes, or the profile's mixed precision for an fp32 configuration
     * on a bf16 profile). The default: exactly meshplan without --stack. */
    {.name = "meshtrain",
     .stands_for = "meshtrain itself: the profile's and the configuration's own settings",
     .attention = NULL, .collectives = NULL, .dtypes = {NULL},
     .compute_efficiency = 1.0, .zero_max = 3, .sp = 1, .cp = 1, .slices = 1},
    /* Megatron-LM of Narayanan et al. 2021 (arXiv:2104.04473, Tables 1 and
     * 2): attention materialized (before FlashAttention: batched QK^T and
     * PV GEMMs over the T x T scores and the fused scale-mask-softmax
     * through memory); hierarchical collectives (NCCL rings on DGX A100
     * nodes with one HDR link a GPU); mixed precision with gradients
     * accumulated and all-reduced in fp32 (--accumulate-allreduce-grads-in-fp32) */
    {.name = "megatron-2021",
     .stands_for = "Megatron-LM 2021 (Narayanan et al., arXiv:2104.04473, Tables 1 and 2)",
     .attention = "materialized", .collectives = "hierarchical", .dtypes = MIXED_FP32_GRADS,
     .compute_efficiency = EFF_MEGATRON_2021,
     /* the paper's layouts: tp, pp and dp (all-reduced, no distributed
      * optimizer), 1F1B and its interleaved schedule; sequence parallelism
      * came in 2022 (arXiv:2205.05198) */
     .zero_max = 0, .schedules = "1f1b,interleaved"},
    /* Megatron-DeepSpeed of BLOOM-176B (arXiv:2211.05100) and MT-NLG 530B
     * (arXiv:2201.11990): Megatron-LM's 2021 kernels (materialized
     * attention with the fused softmax) and NCCL, DeepSpeed's pipeline and
     * ZeRO-1 with its bf16 optimizer, which accumulates and reduces the
     * gradients in fp32. The same options as megatron-2021: the two stacks
     * differ in what no option prices (at efficiency 1 meshplan is 21% and
     * 37% optimistic on these two runs, 7-22% on Megatron-LM's of 2021),
     * which their compute efficiencies take up. */
    {.name = "megatron-deepspeed",
     .stands_for =
         "Megatron-DeepSpeed 2022 (BLOOM-176B, arXiv:2211.05100; MT-NLG, arXiv:2201.11990)",
     .attention = "materialized", .collectives = "hierarchical", .dtypes = MIXED_FP32_GRADS,
     .compute_efficiency = EFF_MEGATRON_DEEPSPEED,
     /* DeepSpeed's pipeline engine (1F1B) with ZeRO-1 beside Megatron's tp */
     .zero_max = 1, .schedules = "1f1b"},
    /* DeepSpeed ZeRO-3, the baseline of Narayanan et al. 2021 (Table 2):
     * Megatron's materialized attention; flat collectives (its published
     * step time stays 67-82 s from 384 to 1,536 GPUs at a fixed batch: each
     * GPU's whole ZeRO-3 volume at about its own link's rate, which
     * hierarchical rings would hide); gradients reduced in the 16-bit
     * compute dtype (DeepSpeed's communication_data_type defaults to it),
     * the fp32 partitioned gradients and master weights kept per shard */
    {.name = "deepspeed-zero3",
     .stands_for = "DeepSpeed ZeRO-3 2021 (the baseline of arXiv:2104.04473, Table 2)",
     .attention = "materialized", .collectives = "flat",
     .dtypes = {"weights=2", "master=4", "grads=4", "moments=4", "acts=2", "grad_reduce=2",
                "msg=2"},
     .compute_efficiency = EFF_DEEPSPEED_ZERO3,
     /* ZeRO at any stage, Megatron's tp beside it; DeepSpeed's pipeline
      * engine (1F1B) */
     .zero_max = 3, .schedules = "1f1b"},
    /* Megatron-Core (2024-2025; Megatron-Core's MoE README, Megatron-Bridge):
     * Transformer Engine's fused (flash) attention, priced as block
     * attention at the profile's attn_gflops; NCCL's hierarchical rings;
     * the distributed optimizer with fp32 gradient buffers and reductions */
    {.name = "megatron-core",
     .stands_for =
         "Megatron-Core / Megatron-Bridge 2024-2025 (TE fused attention, distributed optimizer)",
     .attention = "block", .collectives = "hierarchical", .dtypes = MIXED_FP32_GRADS,
     .compute_efficiency = EFF_MEGATRON_CORE,
     /* tp with sp, cp, pp's 1F1B, interleaved and zero-bubble schedules, the
      * distributed optimizer (ZeRO-1); its FSDP came after these runs */
     .zero_max = 1, .sp = 1, .cp = 1, .schedules = "1f1b,interleaved,zb-h1"},
    /* PyTorch FSDP (FSDP2 in torchtitan and NeMo AutoModel; Llama 3's
     * PyTorch 4D parallelism, arXiv:2407.21783 section 3.3): SDPA/flash
     * attention (block); NCCL's hierarchical rings; MixedPrecisionPolicy
     * param_dtype bf16, reduce_dtype fp32 (torchtitan's defaults; Llama 3
     * reduce-scatters gradients in fp32): bf16 gathers of fp32 shards */
    {.name = "fsdp",
     .stands_for = "PyTorch FSDP/FSDP2 (torchtitan, NeMo AutoModel, Llama 3's 4D parallelism)",
     .attention = "block", .collectives = "hierarchical", .dtypes = MIXED_FP32_GRADS,
     .compute_efficiency = EFF_FSDP,
     /* FSDP (ZeRO-3; reshard_after_forward off: ZeRO-2) with tp + sp, cp and
      * torch.distributed.pipelining's schedules */
     .zero_max = 3, .sp = 1, .cp = 1},
    /* llm.c (train_gpt2.cu): cuDNN's flash attention
     * (block); NCCL (hierarchical); parameters, gradients and their ZeRO-1
     * reduce-scatter in floatX = bf16 over fp32 master weights
     * (use_master_weights) and fp32 AdamW moments */
    {.name = "llm.c",
     .stands_for = "llm.c (llm.c train_gpt2.cu: bf16 gradients and reductions)",
     .attention = "block", .collectives = "hierarchical",
     .dtypes = {"weights=2", "master=4", "grads=2", "moments=4", "acts=2", "grad_reduce=2",
                "msg=2"},
     .compute_efficiency = EFF_LLMC,
     /* data parallelism alone, ZeRO-1 at most */
     .zero_max = 1, .tp_max = 1, .pp_max = 1},
};

#define N_STACKS ((int)(sizeof g_stacks / sizeof g_stacks[0]))

int mt_plan_stack_count(void) { return N_STACKS; }

const mt_plan_stack *mt_plan_stack_at(int i) {
  return i >= 0 && i < N_STACKS ? &g_stacks[i] : NULL;
}

const mt_plan_stack *mt_plan_stack_find(const char *name, mt_err *e) {
  for (int i = 0; i < N_STACKS; i++)
    if (!strcmp(g_stacks[i].name, name)) return &g_stacks[i];
  char names[256] = "";
  for (int i = 0; i < N_STACKS; i++) {
    size_t at = strlen(names);
    snprintf(names + at, sizeof names - at, "%s%s", i ? ", " : "", g_stacks[i].name);
  }
  mt_err_set(e, "--stack '%s' is not a stack preset (one of: %s)", name, names);
  return NULL;
}

int mt_plan_stack_runs(const mt_plan_stack *s, int tp, int pp, int cp, int zero, int sp,
                       int slices, mt_pp_sched schedule) {
  if (!s) return 1;
  if (zero > s->zero_max || (sp && !s->sp) || (cp > 1 && !s->cp) || (slices > 1 && !s->slices))
    return 0;
  if ((s->tp_max && tp > s->tp_max) || (s->pp_max && pp > s->pp_max)) return 0;
  if (pp <= 1 || !s->schedules) return 1;
  /* the schedule's name as a whole item of the list */
  const char *name = mt_pp_sched_name(schedule), *at = s->schedules;
  const size_t n = strlen(name);
  while ((at = strstr(at, name)) != NULL) {
    if ((at == s->schedules || at[-1] == ',') && (at[n] == ',' || at[n] == 0)) return 1;
    at += n;
  }
  return 0;
}

/* a phrase of the limits, ", "-separated, into buf (len) at *at */
static void part(char *buf, size_t len, size_t *at, const char *fmt, ...) {
  if (*at + 2 >= len) return;
  if (*at) buf[(*at)++] = ',', buf[(*at)++] = ' ', buf[*at] = 0;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf + *at, len - *at, fmt, ap);
  va_end(ap);
  if (w > 0) *at += (size_t)w < len - *at ? (size_t)w : len - *at - 1;
}

void mt_plan_stack_limits(const mt_plan_stack *s, char *buf, size_t len) {
  buf[0] = 0;
  if (!s) return;
  size_t at = 0;
  if (s->zero_max < 3) part(buf, len, &at, "ZeRO %d at most", s->zero_max);
  if (s->tp_max) part(buf, len, &at, "tp %d at most", s->tp_max);
  if (s->pp_max) part(buf, len, &at, "pp %d at most", s->pp_max);
  if (!s->sp) part(buf, len, &at, "no sp");
  if (!s->cp) part(buf, len, &at, "no cp");
  if (!s->slices) part(buf, len, &at, "no token slices");
  if (s->schedules) part(buf, len, &at, "schedules %s", s->schedules);
}

int mt_plan_stack_apply(const mt_plan_stack *s, mt_cost_profile *p, mt_cost_dtypes *dt,
                        mt_err *e) {
  if (s->attention) p->attn_materialized = !strcmp(s->attention, "materialized");
  if (s->collectives) p->coll_flat = !strcmp(s->collectives, "flat");
  if (s->compute_efficiency > 0) p->compute_efficiency = s->compute_efficiency;
  for (int i = 0; i < MT_PLAN_STACK_MAX_DTYPES && s->dtypes[i]; i++)
    if (mt_cost_dtypes_set(dt, s->dtypes[i], e) != 0) return -1;
  return 0;
}
