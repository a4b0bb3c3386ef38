/* Configuration's enumerated keys: every choice of every key with the enum
 * constant it must become (text -> enum through the parser and --set, enum
 * -> text through the name functions), and the MoE presets, which fill only
 * the MoE keys a configuration leaves out. */
#include "test_config.h"

/* ------------------------------------------------------------------ */
/* the enumerated keys                                                 */

/* every choice of every enumerated key, with the enum constant it must
 * become: written out here, so a table that maps a name to the wrong
 * constant fails */
static const struct {
  const char *key, *name;
  int value;
} g_choices[] = {
    {"model.preset", "tiny", MT_PRESET_TINY},
    {"model.preset", "small", MT_PRESET_SMALL},
    {"model.preset", "gpt2-124m", MT_PRESET_GPT2_124M},
    {"model.preset", "custom", MT_PRESET_CUSTOM},
    {"model.preset", "tiny-llama", MT_PRESET_TINY_LLAMA},
    {"model.preset", "llama-124m", MT_PRESET_LLAMA_124M},
    {"model.preset", "llama3-8b", MT_PRESET_LLAMA3_8B},
    {"model.preset", "llama3-70b", MT_PRESET_LLAMA3_70B},
    {"model.preset", "llama3-405b", MT_PRESET_LLAMA3_405B},
    {"model.preset", "mixtral-8x7b", MT_PRESET_MIXTRAL_8X7B},
    {"model.preset", "deepseek-v3-like", MT_PRESET_DEEPSEEK_V3_LIKE},
    {"model.moe_router", "softmax", MT_ROUTER_SOFTMAX},
    {"model.moe_router", "sigmoid", MT_ROUTER_SIGMOID},
    {"model.residual", "standard", MT_RESIDUAL_STANDARD},
    {"model.residual", "ladder", MT_RESIDUAL_LADDER},
    {"model.arch", "auto", MT_ARCH_AUTO},
    {"model.arch", "gpt2", MT_ARCH_GPT2},
    {"model.arch", "llama", MT_ARCH_LLAMA},
    {"model.tie_embeddings", "auto", MT_TRI_AUTO},
    {"model.tie_embeddings", "true", MT_TRI_TRUE},
    {"model.tie_embeddings", "false", MT_TRI_FALSE},
    {"model.bias", "auto", MT_TRI_AUTO},
    {"model.bias", "true", MT_TRI_TRUE},
    {"model.bias", "false", MT_TRI_FALSE},
    {"model.rope_scaling", "none", MT_ROPE_SCALING_NONE},
    {"model.rope_scaling", "llama3", MT_ROPE_SCALING_LLAMA3},
    {"train.moe_balance", "aux", MT_MOE_BALANCE_AUX},
    {"train.moe_balance", "bias", MT_MOE_BALANCE_BIAS},
    {"train.moe_balance", "none", MT_MOE_BALANCE_NONE},
    {"train.device", "cpu", MT_DEVICE_CPU},
    {"train.device", "cuda", MT_DEVICE_CUDA},
    {"train.device", "auto", MT_DEVICE_AUTO},
    {"train.device", "virtual", MT_DEVICE_VIRTUAL},
    {"train.precision", "fp32", MT_PRECISION_FP32},
    {"train.precision", "bf16", MT_PRECISION_BF16},
    {"train.precision", "fp16", MT_PRECISION_FP16},
    {"train.grad_dtype", "fp32", MT_DT_F32},
    {"train.grad_dtype", "bf16", MT_DT_BF16},
    {"parallel.cp_mode", "ring", MT_CP_RING},
    {"parallel.cp_mode", "ulysses", MT_CP_ULYSSES},
    {"parallel.ep_balance", "none", MT_EP_BALANCE_NONE},
    {"parallel.ep_balance", "least-loaded", MT_EP_BALANCE_LEAST_LOADED},
    {"parallel.grad_reduce_dtype", "fp32", MT_DT_F32},
    {"parallel.grad_reduce_dtype", "bf16", MT_DT_BF16},
    {"parallel.schedule", "gpipe", MT_SCHED_GPIPE},
    {"parallel.schedule", "1f1b", MT_SCHED_1F1B},
    {"parallel.schedule", "interleaved", MT_SCHED_INTERLEAVED},
    {"parallel.schedule", "zb-h1", MT_SCHED_ZBH1},
    {"parallel.schedule", "breadth-first", MT_SCHED_BFS},
    {"parallel.schedule", "zb-v", MT_SCHED_ZBV},
    {"parallel.layout", "manual", MT_LAYOUT_MANUAL},
    {"parallel.layout", "auto", MT_LAYOUT_AUTO},
    {"data.balance", "none", MT_BALANCE_NONE},
    {"data.balance", "flops", MT_BALANCE_FLOPS},
    {"optim.name", "adamw", MT_OPTIM_ADAMW},
    {"optim.name", "muon", MT_OPTIM_MUON},
    {"optim.muon_scale", "rms", MT_MUON_SCALE_RMS},
    {"optim.muon_scale", "spectral", MT_MUON_SCALE_SPECTRAL},
    {"optim.muon_ns_dtype", "auto", MT_MUON_NS_AUTO},
    {"optim.muon_ns_dtype", "fp32", MT_MUON_NS_FP32},
    {"optim.muon_ns_dtype", "bf16", MT_MUON_NS_BF16},
    {"optim.muon_distribution", "balanced", MT_MUON_DIST_BALANCED},
    {"optim.muon_distribution", "replicated", MT_MUON_DIST_REPLICATED},
    {"optim.on_switch", "refuse", MT_OPTIM_SWITCH_REFUSE},
    {"optim.on_switch", "reset", MT_OPTIM_SWITCH_RESET},
    {"data.seq_policy", "pack", MT_SEQ_PACK},
    {"data.seq_policy", "varlen", MT_SEQ_VARLEN},
    {"data.long_documents", "refuse", MT_LONG_DOCS_REFUSE},
    {"data.long_documents", "split", MT_LONG_DOCS_SPLIT},
    {"train.on_spike", "stop", MT_SPIKE_STOP},
    {"train.on_spike", "rollback", MT_SPIKE_ROLLBACK},
    {"data.format", "auto", MT_DATA_AUTO},
    {"data.format", "llmc", MT_DATA_LLMC},
    {"data.format", "u16", MT_DATA_U16},
    {"data.format", "u32", MT_DATA_U32},
    {"data.format", "text", MT_DATA_TEXT},
    {"ckpt.mode", "shared", MT_CKPT_MODE_SHARED},
    {"ckpt.mode", "per-writer", MT_CKPT_MODE_PER_WRITER},
    {"ckpt.mode", "none", MT_CKPT_MODE_NONE},
    {"ckpt.test_crash", "none", MT_CKPT_CRASH_NONE},
    {"ckpt.test_crash", "create", MT_CKPT_CRASH_CREATE},
    {"ckpt.test_crash", "write", MT_CKPT_CRASH_WRITE},
    {"ckpt.test_crash", "rename", MT_CKPT_CRASH_RENAME},
    {"ckpt.test_crash", "latest", MT_CKPT_CRASH_LATEST},
};
enum { N_CHOICES = (int)(sizeof g_choices / sizeof g_choices[0]) };

/* the typed name function of an enumerated key's value (NULL: the key has
 * none, a failure) */
static const char *typed_name(const char *key, int v) {
  if (!strcmp(key, "model.preset")) return mt_preset_name((mt_preset)v);
  if (!strcmp(key, "model.arch")) return mt_arch_name((mt_arch)v);
  if (!strcmp(key, "model.tie_embeddings") || !strcmp(key, "model.bias"))
    return mt_tristate_name((mt_tristate)v);
  if (!strcmp(key, "model.rope_scaling")) return mt_rope_scaling_name((mt_rope_scaling)v);
  if (!strcmp(key, "model.moe_router")) return mt_moe_router_name((mt_moe_router)v);
  if (!strcmp(key, "model.residual")) return mt_residual_name((mt_residual)v);
  if (!strcmp(key, "train.moe_balance")) return mt_moe_balance_name((mt_moe_balance)v);
  if (!strcmp(key, "train.device")) return mt_device_kind_name((mt_device_kind)v);
  if (!strcmp(key, "train.precision")) return mt_precision_name((mt_precision)v);
  if (!strcmp(key, "train.grad_dtype") || !strcmp(key, "parallel.grad_reduce_dtype"))
    return mt_dtype_name((mt_dtype)v);
  if (!strcmp(key, "parallel.cp_mode")) return mt_cp_mode_name((mt_cp_mode)v);
  if (!strcmp(key, "parallel.ep_balance")) return mt_ep_balance_name((mt_ep_balance)v);
  if (!strcmp(key, "parallel.schedule")) return mt_pp_sched_name((mt_pp_sched)v);
  if (!strcmp(key, "parallel.layout")) return mt_layout_mode_name((mt_layout_mode)v);
  if (!strcmp(key, "data.format")) return mt_data_format_name((mt_data_format)v);
  if (!strcmp(key, "data.balance")) return mt_balance_name((mt_balance)v);
  if (!strcmp(key, "data.seq_policy")) return mt_seq_policy_name((mt_seq_policy)v);
  if (!strcmp(key, "optim.name")) return mt_optim_kind_name((mt_optim_kind)v);
  if (!strcmp(key, "optim.muon_scale")) return mt_muon_scale_name((mt_muon_scale)v);
  if (!strcmp(key, "optim.muon_ns_dtype")) return mt_muon_ns_name((mt_muon_ns)v);
  if (!strcmp(key, "optim.muon_distribution")) return mt_muon_dist_name((mt_muon_dist)v);
  if (!strcmp(key, "optim.on_switch")) return mt_optim_switch_name((mt_optim_switch)v);
  if (!strcmp(key, "data.long_documents")) return mt_long_docs_name((mt_long_docs)v);
  if (!strcmp(key, "train.on_spike")) return mt_spike_action_name((mt_spike_action)v);
  if (!strcmp(key, "ckpt.mode")) return mt_ckpt_mode_name((mt_ckpt_mode)v);
  if (!strcmp(key, "ckpt.test_crash")) return mt_ckpt_crash_name((mt_ckpt_crash)v);
  return NULL;
}

static void test_enums(void) {
  int n = 0, listed = 0;
  const mt_cfg_key *keys = mt_config_keys(&n);
  for (int i = 0; i < n; i++) {
    const mt_cfg_key *k = &keys[i];
    if (!k->choices) {
      MT_CHECK(mt_config_enum_parse(k->name, k->def) == -1, "%s has no choices but parses",
               k->name);
      continue;
    }
    MT_CHECK(k->type == MT_CFG_STRING, "%s: choices on a key that is not a string", k->name);
    /* each choice of the key's choices string, in order */
    int n_choices = 0;
    for (const char *p = k->choices; *p;) {
      size_t len = strcspn(p, "|");
      char name[64];
      snprintf(name, sizeof name, "%.*s", (int)len, p);
      p += len + (p[len] == '|');
      n_choices++;
      int want = -1;
      for (int c = 0; c < N_CHOICES; c++)
        if (!strcmp(g_choices[c].key, k->name) && !strcmp(g_choices[c].name, name))
          want = g_choices[c].value;
      MT_CHECK(want >= 0, "%s = %s: not in this test's list of choices", k->name, name);
      /* the text -> the enum, through the parser */
      int v = mt_config_enum_parse(k->name, name);
      MT_CHECK(v == want, "%s = %s parses to %d, want %d", k->name, name, v, want);
      char text[128];
      snprintf(text, sizeof text, "%s=%s", k->name, name);
      char *o[] = {text};
      mt_config cfg;
      if (!load_ok(&cfg, NULL, 1, o, text))
        MT_CHECK(*(const int *)(const void *)((const char *)&cfg + k->offset) == want,
                 "--set %s: field %d, want %d", text,
                 *(const int *)(const void *)((const char *)&cfg + k->offset), want);
      /* and back to the text: the generic name and the typed one */
      const char *back = mt_config_enum_name(k->name, want), *typed = typed_name(k->name, want);
      MT_CHECK(back && !strcmp(back, name), "%s: %d names '%s', want '%s'", k->name, want,
               back ? back : "(null)", name);
      MT_CHECK(typed && !strcmp(typed, name), "%s: the typed name of %d is '%s', want '%s'",
               k->name, want, typed ? typed : "(none)", name);
    }
    for (int c = 0; c < N_CHOICES; c++) listed += !strcmp(g_choices[c].key, k->name);
    int expected = 0;
    for (int c = 0; c < N_CHOICES; c++) expected += !strcmp(g_choices[c].key, k->name);
    MT_CHECK(expected == n_choices, "%s: %d choices, this test lists %d", k->name, n_choices,
             expected);
    /* a value outside the choices: refused at load, naming the key, the value
     * and the choices (from --set and from a file) */
    char text[128], want_msg[256];
    snprintf(text, sizeof text, "%s=bogus", k->name);
    snprintf(want_msg, sizeof want_msg, "%s: 'bogus' is not one of %s", k->name, k->choices);
    err_set(text, "unknown choice", want_msg, NULL, NULL);
    MT_CHECK(mt_config_enum_parse(k->name, "bogus") == -1, "%s: 'bogus' parses", k->name);
    MT_CHECK(mt_config_enum_name(k->name, 99) == NULL, "%s: 99 has a name", k->name);
    if (strstr(k->name, "grad") == NULL) /* (mt_dtype_name stops the process on a bad type) */
      MT_CHECK(!strcmp(typed_name(k->name, 99), "?"), "%s: the typed name of 99", k->name);
  }
  MT_CHECK(listed == N_CHOICES, "this test lists %d choices, the key table has %d", N_CHOICES,
           listed);
  MT_CHECK(mt_config_enum_parse("train.stepz", "1") == -1, "an unknown key parses");
  /* the messages of issue 10's tests, unchanged */
  err_set("train.device=gpu", "device", "train.device: 'gpu' is not one of cpu|cuda|auto|virtual",
          NULL, NULL);
  err_set("train.grad_dtype=fp8", "grad dtype", "train.grad_dtype: 'fp8' is not one of fp32|bf16",
          NULL, NULL);
  err_set("parallel.cp_mode=zigzag", "cp mode",
          "parallel.cp_mode: 'zigzag' is not one of ring|ulysses", NULL, NULL);
  err_file("[parallel]\nschedule = \"zb\"\n", "schedule in a file", ":2:",
           "parallel.schedule: 'zb' is not one of gpipe|1f1b|interleaved|zb-h1|breadth-first|zb-v",
           NULL);
  /* a quoted choice is the choice */
  char *q[] = {"parallel.schedule=\"zb-v\""};
  mt_config cfg;
  if (!load_ok(&cfg, NULL, 1, q, "quoted choice"))
    MT_CHECK(cfg.pp_schedule == MT_SCHED_ZBV, "quoted zb-v: %d", (int)cfg.pp_schedule);
}

/* ------------------------------------------------------------------ */
/* the checks across keys                                              */

/* load the overrides (they must load) and check them for world_size ranks:
 * want NULL expects acceptance, else a one-line refusal containing want */
/* A MoE preset fills the MoE keys the configuration leaves out, and only
 * those: a key given, even at its default value, stays. */
static void test_preset_keys(void) {
  char *preset[] = {"model.preset=deepseek-v3-like"};
  char *given[] = {"model.preset=deepseek-v3-like", "model.moe_topk=2", "model.moe_router=softmax",
                   "train.moe_balance=aux"};
  char *dense[] = {"model.preset=mixtral-8x7b", "model.moe_experts=0"};
  mt_config cfg;
  mt_err e = {0};
  MT_CHECK(mt_config_load(&cfg, NULL, 1, preset, &e) == 0, "%s", e.msg);
  MT_CHECK(cfg.moe_topk == 8 && cfg.moe_router == MT_ROUTER_SIGMOID &&
               cfg.moe_balance == MT_MOE_BALANCE_BIAS && cfg.moe_experts == 256,
           "deepseek-v3-like's MoE keys: top-%d, router %d, balance %d, %d experts", cfg.moe_topk,
           (int)cfg.moe_router, (int)cfg.moe_balance, cfg.moe_experts);
  MT_CHECK(mt_config_load(&cfg, NULL, 4, given, &e) == 0, "%s", e.msg);
  MT_CHECK(cfg.moe_topk == 2 && cfg.moe_router == MT_ROUTER_SOFTMAX &&
               cfg.moe_balance == MT_MOE_BALANCE_AUX && cfg.moe_experts == 256,
           "keys given at their defaults were overwritten by the preset: top-%d, router %d, "
           "balance %d", cfg.moe_topk, (int)cfg.moe_router, (int)cfg.moe_balance);
  MT_CHECK(mt_config_load(&cfg, NULL, 2, dense, &e) == 0 && cfg.moe_experts == 0,
           "mixtral-8x7b with model.moe_experts = 0: %d experts", cfg.moe_experts);
}

/* Keys whose default follows another key: zb-v's virtual_stages (2) and
 * the virtual device's ckpt.mode (none), where the configuration gave no
 * value; a value given stays (and is checked as ever). */
static void test_following_defaults(void) {
  char *zbv[] = {"parallel.schedule=zb-v"}, *zbv1[] = {"parallel.schedule=zb-v",
                                                       "parallel.virtual_stages=1"};
  char *ilv[] = {"parallel.schedule=interleaved"};
  char *virt[] = {"train.device=virtual"}, *virt_shared[] = {"train.device=virtual",
                                                             "ckpt.mode=shared"};
  mt_config cfg;
  mt_err e = {0};
  MT_CHECK(mt_config_load(&cfg, NULL, 1, zbv, &e) == 0 && cfg.virtual_stages == 2,
           "zb-v: virtual_stages %d, want 2 (%s)", cfg.virtual_stages, e.msg);
  MT_CHECK(mt_config_load(&cfg, NULL, 2, zbv1, &e) == 0 && cfg.virtual_stages == 1,
           "zb-v with virtual_stages = 1 given: %d", cfg.virtual_stages);
  MT_CHECK(mt_config_load(&cfg, NULL, 1, ilv, &e) == 0 && cfg.virtual_stages == 1,
           "interleaved: virtual_stages %d, want the default 1", cfg.virtual_stages);
  const char *path = write_file("zbv.ini", "[parallel]\nschedule = zb-v\n");
  MT_CHECK(mt_config_load(&cfg, path, 0, NULL, &e) == 0 && cfg.virtual_stages == 2,
           "zb-v from a file: virtual_stages %d", cfg.virtual_stages);
  MT_CHECK(mt_config_load(&cfg, NULL, 1, virt, &e) == 0 && cfg.ckpt_mode == MT_CKPT_MODE_NONE,
           "train.device = virtual: ckpt.mode %d, want none", (int)cfg.ckpt_mode);
  MT_CHECK(mt_config_load(&cfg, NULL, 2, virt_shared, &e) == 0 &&
               cfg.ckpt_mode == MT_CKPT_MODE_SHARED,
           "train.device = virtual with ckpt.mode = shared given: %d", (int)cfg.ckpt_mode);
  MT_CHECK(mt_config_load(&cfg, NULL, 0, NULL, &e) == 0 && cfg.ckpt_mode == MT_CKPT_MODE_SHARED &&
               cfg.virtual_stages == 1,
           "defaults: ckpt.mode %d, virtual_stages %d", (int)cfg.ckpt_mode, cfg.virtual_stages);
  MT_CHECK(mt_config_load_text(&cfg, "[parallel]\nschedule = zb-v\n", "text", &e) == 0 &&
               cfg.virtual_stages == 2,
           "zb-v from text: virtual_stages %d", cfg.virtual_stages);
}

int main(void) {
  if (config_test_begin("test_config_enums")) return 1;
  test_enums();
  test_preset_keys();
  test_following_defaults();
  return config_test_end("test_config_enums");
}
