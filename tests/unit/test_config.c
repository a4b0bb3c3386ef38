/* Configuration: defaults, INI values, --set overrides, the error messages a
 * user sees for bad input (each must name the key, the bad value and where it
 * came from), the checks across keys (mt_config_check), the write_ini ->
 * load round trip, and --help coverage (the enumerated keys and the
 * presets' keys: test_config_enums.c).
 * MT_TEST_PRINT_HELP=1 also prints the --help text on stdout. */
#include <float.h>
#include <math.h>

#include "test_config.h"

/* ------------------------------------------------------------------ */

static void test_table(void) {
  int n = 0;
  const mt_cfg_key *keys = mt_config_keys(&n);
  MT_CHECK(n > 30, "only %d keys", n);
  /* one row per field: fields do not overlap and cover the struct */
  static unsigned char covered[sizeof(mt_config)];
  for (int i = 0; i < n; i++) {
    size_t size = field_size(&keys[i]);
    MT_CHECK(keys[i].offset + size <= sizeof(mt_config), "%s: offset out of the struct",
             keys[i].name);
    for (size_t b = keys[i].offset; b < keys[i].offset + size && b < sizeof covered; b++) {
      MT_CHECK(!covered[b], "%s overlaps another key's field", keys[i].name);
      covered[b] = 1;
    }
    MT_CHECK(strchr(keys[i].name, '.') != NULL, "%s: not section.key", keys[i].name);
    MT_CHECK(keys[i].help && keys[i].help[0], "%s: no help", keys[i].name);
    for (int j = 0; j < i; j++)
      MT_CHECK(strcmp(keys[i].name, keys[j].name) != 0, "%s listed twice", keys[i].name);
  }
  /* what no key covers must look like padding: runs shorter than a double's
   * alignment that end where a double (or the struct) starts */
  const size_t align = _Alignof(double);
  for (size_t b = 0; b < sizeof covered;) {
    if (covered[b]) {
      b++;
      continue;
    }
    size_t start = b;
    while (b < sizeof covered && !covered[b]) b++;
    MT_CHECK(b - start < align && b % align == 0,
             "mt_config bytes %zu..%zu are not covered by any key (a field without a key?)", start,
             b - 1);
  }
}

static void test_defaults(void) {
  mt_config cfg;
  mt_config_defaults(&cfg);
  MT_CHECK(cfg.model_preset == MT_PRESET_SMALL, "preset default '%s'",
           mt_preset_name(cfg.model_preset));
  MT_CHECK(cfg.n_layer == 0 && cfg.n_embd == 0 && cfg.n_head == 0 && cfg.seq_len == 0 &&
               cfg.vocab_size == 0,
           "shape defaults not 0");
  MT_CHECK(cfg.steps == 100 && cfg.seed == 1337 && cfg.global_batch == 32 && cfg.micro_batch == 4,
           "train int defaults");
  MT_CHECK(cfg.lr == 1e-3 && cfg.min_lr_ratio == 0.1 && cfg.warmup_steps == 10 &&
               cfg.weight_decay == 0.1 && cfg.beta1 == 0.9 && cfg.beta2 == 0.95 &&
               cfg.eps == 1e-8 && cfg.grad_clip == 1.0,
           "optimizer defaults");
  MT_CHECK(cfg.eval_every == 25 && cfg.eval_batches == 4 && cfg.threads == 0 && cfg.log_every == 1,
           "eval/log defaults");
  MT_CHECK(cfg.dp == 1 && cfg.tp == 1 && cfg.pp == 1 && cfg.cp == 1 && cfg.zero == 0 &&
               cfg.bucket_mb == 25,
           "parallel defaults");
  MT_CHECK(strcmp(cfg.data_train, "inputs/data/corpus.txt") == 0 && cfg.data_val[0] == '\0' &&
               cfg.data_format == MT_DATA_AUTO && cfg.val_fraction == 0.05,
           "data defaults");
  MT_CHECK(strcmp(cfg.output_dir, "outputs/run") == 0 && cfg.save_params == 0, "output defaults");
  MT_CHECK(strcmp(cfg.hw_profile, "cpu-generic") == 0 && cfg.peak_gflops == 0, "metrics defaults");
  MT_CHECK(cfg.device == MT_DEVICE_CPU && cfg.precision == MT_PRECISION_FP32 &&
               cfg.grad_dtype == MT_DT_F32 && cfg.grad_reduce_dtype == MT_DT_F32 &&
               cfg.cp_mode == MT_CP_RING && cfg.pp_schedule == MT_SCHED_1F1B &&
               cfg.moe_balance == MT_MOE_BALANCE_AUX && cfg.ep_balance == MT_EP_BALANCE_NONE &&
               cfg.layout == MT_LAYOUT_MANUAL && cfg.ckpt_mode == MT_CKPT_MODE_SHARED &&
               cfg.ckpt_test_crash == MT_CKPT_CRASH_NONE,
           "enumerated defaults");

  /* no file, no overrides: the defaults, byte for byte */
  mt_config loaded;
  memset(&loaded, 0x5a, sizeof loaded);
  if (!load_ok(&loaded, NULL, 0, NULL, "defaults"))
    MT_CHECK(memcmp(&cfg, &loaded, sizeof cfg) == 0, "load(NULL) differs from defaults");
}

static void test_file_and_overrides(void) {
  const char *path = write_file("good.ini",
                                "# a comment\n"
                                "; another comment\n"
                                "[model]\n"
                                "preset = custom\n"
                                "n_layer = 6\n"
                                "  n_embd = 384   ; indented, inline comment\n"
                                "n_head: 6\n"
                                "\n"
                                "[train]\n"
                                "steps = 250\r\n"
                                "lr = 6e-4\n"
                                "beta1 = 0\n"
                                "seed = +7\n"
                                "[parallel]\n"
                                "dp = 2\n"
                                "tp = 2\n"
                                "[data]\n"
                                "train = \"my data/corpus.bin\"\n"
                                "val =\n"
                                "val_fraction = 0.25\n"
                                "format = llmc\n"
                                "[output]\n"
                                "save_params = YES\n"
                                "[metrics]\n"
                                "hw = h200\n");
  mt_config cfg;
  if (load_ok(&cfg, path, 0, NULL, "good.ini")) return;
  MT_CHECK(cfg.model_preset == MT_PRESET_CUSTOM, "preset '%s'", mt_preset_name(cfg.model_preset));
  MT_CHECK(cfg.n_layer == 6 && cfg.n_embd == 384 && cfg.n_head == 6, "shape %d %d %d", cfg.n_layer,
           cfg.n_embd, cfg.n_head);
  MT_CHECK(cfg.steps == 250 && cfg.lr == 6e-4 && cfg.beta1 == 0 && cfg.seed == 7,
           "train values %d %g %g %d", cfg.steps, cfg.lr, cfg.beta1, cfg.seed);
  MT_CHECK(cfg.dp == 2 && cfg.tp == 2 && cfg.pp == 1, "parallel values");
  MT_CHECK(strcmp(cfg.data_train, "my data/corpus.bin") == 0, "quoted string '%s'", cfg.data_train);
  MT_CHECK(cfg.data_val[0] == '\0' && cfg.val_fraction == 0.25, "val values");
  MT_CHECK(cfg.data_format == MT_DATA_LLMC, "format '%s'", mt_data_format_name(cfg.data_format));
  MT_CHECK(cfg.save_params == 1, "save_params %d", cfg.save_params);
  MT_CHECK(strcmp(cfg.hw_profile, "h200") == 0, "hw '%s'", cfg.hw_profile);
  MT_CHECK(cfg.warmup_steps == 10 && cfg.grad_clip == 1.0, "unset keys keep defaults");

  /* overrides beat the file, apply in order, and are trimmed like INI values */
  char *over[] = {"train.steps=300", "train.lr = 1e-2", "train.steps=400", "output.save_params=off",
                  "model.preset=tiny", "data.val=val.bin"};
  if (load_ok(&cfg, path, 6, over, "good.ini + overrides")) return;
  MT_CHECK(cfg.steps == 400, "last override wins: steps %d", cfg.steps);
  MT_CHECK(cfg.lr == 1e-2, "override lr %g", cfg.lr);
  MT_CHECK(cfg.save_params == 0, "override bool");
  MT_CHECK(cfg.model_preset == MT_PRESET_TINY, "override preset '%s'",
           mt_preset_name(cfg.model_preset));
  MT_CHECK(strcmp(cfg.data_val, "val.bin") == 0, "override string '%s'", cfg.data_val);
  MT_CHECK(cfg.n_layer == 6, "file values not overridden stay");

  /* bool spellings */
  const char *yes[] = {"true", "TRUE", "1", "yes", "On"}, *no[] = {"false", "0", "No", "OFF"};
  for (int i = 0; i < 5; i++) {
    char text[64];
    snprintf(text, sizeof text, "output.save_params=%s", yes[i]);
    char *o[] = {text};
    if (!load_ok(&cfg, NULL, 1, o, text)) MT_CHECK(cfg.save_params == 1, "%s gave 0", text);
  }
  for (int i = 0; i < 4; i++) {
    char text[64];
    snprintf(text, sizeof text, "output.save_params=%s", no[i]);
    char *o[] = {"output.save_params=1", text};
    if (!load_ok(&cfg, NULL, 2, o, text)) MT_CHECK(cfg.save_params == 0, "%s gave 1", text);
  }

  /* range edges that must be accepted (train.eps: fp32's smallest normal number) */
  char *edges[] = {"train.min_lr_ratio=1", "train.min_lr_ratio=0", "train.beta2=0.999999",
                   "parallel.zero=1", "train.grad_clip=0", "model.n_embd=1000000",
                   "train.seed=-0", "train.eps=1.1754943508222875e-38"};
  for (int i = 0; i < 8; i++) load_ok(&cfg, NULL, 1, &edges[i], edges[i]);
}

static void test_errors(void) {
  /* INI structure */
  err_file("[train]\nsteps = 5\n\n\n\n\nstepz = 7\n", "unknown key", ":7:", "unknown key",
           "'train.stepz'");
  err_file("[trian]\nsteps = 5\n", "unknown section", ":2:", "unknown key 'trian.steps'", NULL);
  err_file("steps = 5\n[train]\n", "key outside a section", ":1:", "steps", "outside any");
  err_file("[train]\nsteps = 3\nlr = 1e-3\nsteps = 4\n", "duplicate key", ":4:",
           "train.steps given twice", "first at line 2");
  err_file("[train]\nsteps = 3\nthis is not ini\n", "syntax error", ":3:", "this is not ini",
           NULL);
  err_file("[train\nsteps = 3\n", "unclosed section", ":1:", "[train", NULL);

  /* malformed values, from a file */
  err_file("[train]\n\n\nsteps = abc\n", "bad int", ":4:", "train.steps", "'abc' is not an integer");
  err_file("[train]\nsteps = 12x\n", "int with garbage", ":2:", "train.steps", "'12x'");
  err_file("[train]\nsteps =\n", "empty int", ":2:", "train.steps", "'' is not an integer");
  err_file("[train]\nsteps = 1.5\n", "fractional int", ":2:", "train.steps", "'1.5'");
  err_file("[train]\nseed = 99999999999\n", "int overflow", ":2:", "train.seed", "'99999999999'");
  err_file("[train]\nlr = 1e-3x\n", "bad double", ":2:", "train.lr", "'1e-3x' is not a number");
  err_file("[train]\nlr = nan\n", "nan", ":2:", "train.lr", "'nan' is not a finite number");
  err_file("[train]\nlr = inf\n", "inf", ":2:", "train.lr", "'inf'");
  err_file("[train]\nlr = 1e999\n", "double overflow", ":2:", "train.lr", "'1e999'");
  err_file("[output]\nsave_params = maybe\n", "bad bool", ":2:", "output.save_params",
           "'maybe' is not a boolean");
  err_file("[model]\npreset = huge\n", "bad choice", ":2:", "model.preset",
           "'huge' is not one of tiny|small|gpt2-124m|custom");
  err_file("[data]\nformat = LLMC\n", "choices are case-sensitive", ":2:", "data.format", "LLMC");
  err_file("[data]\ntrain = \"half quoted\n", "unmatched quote", ":2:", "data.train", "unmatched");

  /* decimal keys take decimal numbers only: strtod would read 0x10 as 16 */
  err_file("[parallel]\nbucket_mb = 0x10\n", "hex double", ":2:", "parallel.bucket_mb",
           "'0x10' is not a decimal number");
  err_set("train.lr=0x1p-10", "hex float", "train.lr", "'0x1p-10' is not a decimal number", NULL);
  err_file("[train]\nsteps = 0x10\n", "hex int", ":2:", "train.steps", "'0x10' is not an integer");
  /* Hugging Face token ids: an id, a list of ids, null */
  {
    char *bad[] = {"model.eos_token_id=[1,,2]", "model.bos_token_id=-1", "model.bos_token_id=[1"};
    for (int i = 0; i < 3; i++)
      load_err(NULL, 1, &bad[i], bad[i], "model.", "is not an id, a list of ids ([1,2]) or null",
               (const char *)NULL);
  }
  {
    const char *ids[] = {"", "null", "0", "2", "[128001,128008,128009]", " [ 1 , 2 ] ", "[]"};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
      MT_CHECK(mt_config_token_ids_ok(ids[i]), "token ids '%s' refused", ids[i]);
  }
  {
    const char *fine[] = {"train.grad_clip=.5", "train.grad_clip=5.", "train.grad_clip=+1.5e+2",
                          "train.grad_clip=3E-4", "train.grad_clip=007"};
    const double want[] = {0.5, 5.0, 150.0, 3e-4, 7.0};
    for (int i = 0; i < 5; i++) {
      mt_config cfg;
      char *o[1] = {(char *)fine[i]};
      if (load_ok(&cfg, NULL, 1, o, fine[i]) == 0)
        MT_CHECK(cfg.grad_clip == want[i], "%s gave %.17g", fine[i], cfg.grad_clip);
    }
  }
  /* a NUL byte would truncate the C string: the value (or line) is refused */
  {
    static const struct {
      const char *name, *text, *frag1, *frag2;
      size_t len;
    } nul_cases[] = {
#define NUL_CASE(name, text, frag1, frag2) {name, text, frag1, frag2, sizeof(text) - 1}
        NUL_CASE("nul_value.ini", "[data]\ntrain = corpus.txt\0.evil\n", ":2: data.train:",
                 "value contains a NUL byte"),
        NUL_CASE("nul_int.ini", "[train]\n\nsteps = 1\0002\n", ":3: train.steps:", "NUL byte"),
        NUL_CASE("nul_comment.ini", "# note\0\n[train]\nsteps = 3\n", ":1:",
                 "line contains a NUL byte"),
        NUL_CASE("nul_section.ini", "[tra\0in]\nsteps = 3\n", ":1:", "line contains a NUL byte"),
#undef NUL_CASE
    };
    for (size_t i = 0; i < sizeof nul_cases / sizeof nul_cases[0]; i++) {
      const char *path = write_file(nul_cases[i].name, "");
      FILE *f = fopen(path, "wb");
      if (!f || fwrite(nul_cases[i].text, 1, nul_cases[i].len, f) != nul_cases[i].len ||
          fclose(f) != 0) {
        MT_FAIL("cannot write %s", path);
        continue;
      }
      load_err(path, 0, NULL, nul_cases[i].name, path, nul_cases[i].frag1, nul_cases[i].frag2,
               (const char *)NULL);
    }
  }

  /* out of range, phrased for people */
  err_file("[train]\nsteps = 0\n", "steps < 1", ":2:", "train.steps must be >= 1", "(got 0)");
  err_file("[model]\nn_layer = -1\n", "negative shape", ":2:",
           "model.n_layer must be between 0 and 1000000", "(got -1)");
  err_set("train.lr=-1", "negative lr", "--set train.lr=-1:", "train.lr must be > 0", "(got -1)");
  err_set("train.lr=0", "zero lr", "train.lr must be > 0", "(got 0)", NULL);
  /* values checked for sense, not only for type (issue 23) */
  err_set("train.lr=9.2e18", "lr beyond sense", "train.lr must be > 0 and <= 1", "(got 9.2e18)",
          NULL);
  err_set("train.weight_decay=3", "decay beyond 1", "train.weight_decay must be between 0 and 1",
          NULL, NULL);
  err_set("train.eps=2", "eps beyond 1", "train.eps must be > 0 and <= 1", NULL, NULL);
  err_set("model.moe_capacity=1000", "capacity factor", "model.moe_capacity must be between 0 "
          "and 64", NULL, NULL);
  err_set("train.beta1=1", "beta1 = 1", "train.beta1 must be >= 0 and < 1", "(got 1)", NULL);
  /* positive, yet 0 (or subnormal) in fp32, where they are computed */
  {
    char *lr[] = {"train.lr=4.9e-324"}, *eps[] = {"train.eps=1e-40"};
    load_err(NULL, 1, lr, "lr 0 in fp32",
             "train.lr = 4.94066e-324 is below fp32's smallest normal number", (const char *)NULL);
    load_err(NULL, 1, eps, "eps subnormal in fp32", "train.eps = 1e-40 is below",
             (const char *)NULL);
    char *o[] = {"train.lr=1.2e-38", "train.weight_decay=0"};
    mt_config ok;
    load_ok(&ok, NULL, 2, o, "lr at fp32's smallest normal, weight decay 0");
  }
  err_set("train.min_lr_ratio=1.5", "ratio > 1", "train.min_lr_ratio must be between 0 and 1",
          "(got 1.5)", NULL);
  err_set("parallel.zero=4", "zero = 4", "parallel.zero must be between 0 and 3", "(got 4)",
          NULL);
  err_set("parallel.bucket_mb=0", "zero bucket", "parallel.bucket_mb must be > 0", NULL, NULL);
  err_set("data.val_fraction=1", "val_fraction = 1", "data.val_fraction must be >= 0 and < 1",
          NULL, NULL);

  /* overrides */
  err_set("foo", "no '='", "--set foo: expected section.key=value", NULL, NULL);
  err_set("train.stepz=3", "unknown override", "--set train.stepz=3:", "unknown key 'train.stepz'",
          "did you mean 'train.steps'");
  err_set("steps=3", "override without section", "unknown key 'steps'", NULL, NULL);
  err_set("train.steps=abc", "bad override int", "--set train.steps=abc:", "train.steps",
          "'abc' is not an integer");
  err_set("train.lr=", "empty double", "train.lr", "'' is not a number", NULL);
  err_set("output.save_params=2", "bad override bool", "output.save_params", "'2'", NULL);
  err_set("data.format=bin", "bad override choice", "data.format", "'bin' is not one of", NULL);
  err_set("data.train=a ;b", "comment inside a string", "data.train", "' ;'", NULL);
  err_set("data.train=a\nb", "newline inside a string", "data.train", "control character", NULL);
  static char longval[700];
  memcpy(longval, "output.dir=", 11);
  memset(longval + 11, 'x', 600);
  err_set(longval, "string too long", "output.dir", "longer than the limit of 511", NULL);

  /* an error in a later override is reported even when the file is fine */
  const char *ok = write_file("ok.ini", "[train]\nsteps = 5\n");
  char *o[] = {"train.steps=6", "train.warmup_steps=-2"};
  load_err(ok, 2, o, "second override", "--set train.warmup_steps=-2",
           "train.warmup_steps must be >= 0", (const char *)NULL);
  /* and the file is checked before the overrides */
  char *o2[] = {"train.steps=x"};
  const char *bad = write_file("bad_first.ini", "[train]\nlr = -1\n");
  load_err(bad, 1, o2, "file before overrides", bad, ":2:", "train.lr must be > 0",
           (const char *)NULL);

  /* missing file, a directory */
  char missing[320];
  snprintf(missing, sizeof missing, "%s/missing.ini", g_dir);
  load_err(missing, 0, NULL, "missing file", missing, "cannot open config file",
           (const char *)NULL);
  load_err(g_dir, 0, NULL, "directory as config", g_dir, "config file", (const char *)NULL);

  /* a line longer than inih's buffer is refused, never split or truncated */
  char text[600];
  int len = snprintf(text, sizeof text, "[data]\ntrain = ");
  memset(text + len, 'p', 300);
  snprintf(text + len + 300, sizeof text - (size_t)len - 300, "\n[train]\nsteps = 3\n");
  err_file(text, "long line", ":2:", "longer than", "--set");
}

static void fill_strings(mt_config *cfg) {
  /* values that need quoting or are otherwise awkward for an INI file */
  snprintf(cfg->data_train, MT_CFG_STR_MAX, "  spaced path/with = and : and #hash;semi  ");
  snprintf(cfg->data_val, MT_CFG_STR_MAX, "\"quoted\"");
  snprintf(cfg->output_dir, MT_CFG_STR_MAX, ";starts-with-semicolon");
  snprintf(cfg->hw_profile, MT_CFG_STR_MAX, "inputs/hw/h200.ini");
}

static int round_trip(const mt_config *cfg, const char *name) {
  char path[320];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  if (g_nfiles < 64) snprintf(g_files[g_nfiles++], sizeof g_files[0], "%s", path);
  FILE *f = fopen(path, "w");
  if (!f) {
    MT_FAIL("cannot write %s", path);
    return 1;
  }
  mt_config_write_ini(cfg, f);
  fclose(f);
  mt_config back;
  memset(&back, 0xa5, sizeof back);
  if (load_ok(&back, path, 0, NULL, name)) return 1;
  if (memcmp(cfg, &back, sizeof back) != 0) {
    int n = 0;
    const mt_cfg_key *keys = mt_config_keys(&n);
    for (int i = 0; i < n; i++) {
      size_t size = field_size(&keys[i]);
      if (memcmp((const char *)cfg + keys[i].offset, (const char *)&back + keys[i].offset, size))
        MT_FAIL("%s: round trip changed %s", name, keys[i].name);
    }
    MT_FAIL("%s: round trip is not byte-identical", name);
    return 1;
  }
  return 0;
}

static void test_round_trip(void) {
  mt_config cfg;
  mt_config_defaults(&cfg);
  round_trip(&cfg, "rt_defaults.ini");

  /* every key away from its default, doubles that need 17 digits */
  char *over[] = {"model.preset=gpt2-124m", "model.n_layer=12", "model.n_embd=768",
                  "model.n_head=12", "model.seq_len=1024", "model.vocab_size=50257",
                  "train.steps=5000", "train.seed=0", "train.global_batch=512",
                  "train.micro_batch=8", "train.lr=0.00060000000000000006",
                  "train.min_lr_ratio=0.3333333333333333", "train.warmup_steps=700",
                  "train.weight_decay=1e-30", "train.beta1=0.99999999999999989",
                  "train.beta2=0.1", "train.eps=1.1754943508222875e-38", "train.grad_clip=0",
                  "train.eval_every=0", "train.eval_batches=20", "train.threads=16",
                  "train.log_every=10", "parallel.dp=4", "parallel.tp=2", "parallel.pp=2",
                  "parallel.cp=2", "parallel.cp_mode=ulysses", "parallel.zero=1",
                  "parallel.bucket_mb=0.5",
                  "data.format=u16", "data.val_fraction=0", "output.save_params=true",
                  "data.blend=0.7 web/*.bin, 0.3 code=code/*.bin", "data.hash_batches=true",
                  "data.documents=true", "data.eot=3", "data.balance=flops", "data.seq_policy=varlen",
                  "data.long_documents=split",
                  "plan.doc_lengths=lengths.txt",
                  "metrics.peak_gflops=989000.5", "train.stop_after=7",
                  "train.collective_timeout_s=42.5", "train.collective_timeout_steps=6",
                  "train.on_spike=rollback", "train.spike_factor=3.5", "train.spike_window=20",
                  "train.max_rollbacks=5", "train.skip_samples=64",
                  "train.resume=auto", "train.micro_batches=16", "train.recompute=true",
                  "parallel.sp=true", "parallel.schedule=interleaved",
                  "parallel.virtual_stages=2", "parallel.pp_split=5,7",
                  "parallel.pp_token_slices=4",
                  "parallel.print_schedule=true", "parallel.overlap_dp=false",
                  "ckpt.every=50", "ckpt.keep=0",
                  "ckpt.mode=per-writer", "ckpt.async=true", "ckpt.verify_on_load=false",
                  "ckpt.test_crash=rename", "train.device=auto", "train.precision=bf16",
                  "train.grad_dtype=bf16", "parallel.grad_reduce_dtype=bf16",
                  "train.virtual_hw=h200", "metrics.trace=true", "virtual.moe_skew=1.25",
                  "model.moe_experts=64", "model.moe_topk=6",
                  "model.moe_every=2", "model.moe_ffn=1408", "model.moe_shared=2",
                  "model.moe_router=sigmoid", "model.residual=ladder",
                  "model.arch=llama", "model.n_kv_head=4", "model.ffn_size=2048",
                  "model.norm_eps=1.0000000000000001e-05", "model.rope_theta=500000",
                  "model.rope_scaling=llama3", "model.rope_factor=32",
                  "model.rope_low_freq_factor=0.5", "model.rope_high_freq_factor=6",
                  "model.rope_original_len=4096", "model.tie_embeddings=true",
                  "model.bias=false", "model.bos_token_id=128000",
                  "model.eos_token_id=[128001, 128008, 128009]",
                  "model.moe_capacity=1.25", "train.moe_aux_coef=0.001", "train.moe_z_coef=0.0001",
                  "train.moe_balance=bias", "train.moe_bias_rate=0.002", "train.moe_bias_init=0.25",
                  "parallel.ep_balance=least-loaded", "parallel.ep_balance_alpha=1.3",
                  "parallel.ep_balance_min_rows=3000", "parallel.moe_buffer_factor=1.5",
                  "parallel.ep=8", "parallel.etp=2", "train.init_from=imported/step_0",
                  "ckpt.io_hints=striping_factor=4,cb_nodes=2",
                  "parallel.pp_first_layers=3", "parallel.pp_last_layers=2",
                  "parallel.layout=auto", "plan.hw=h200", "plan.headroom=2.5",
                  "plan.cp_min_tokens=8192", "plan.across_nodes=true", "optim.name=muon",
                  "optim.muon_momentum=0.90000000000000002", "optim.muon_nesterov=false",
                  "optim.muon_ns_steps=7", "optim.muon_scale=spectral", "optim.muon_ns_dtype=bf16",
                  "optim.muon_exclude=router,attn.proj", "optim.on_switch=reset",
                  "optim.muon_distribution=replicated"};
  int n = (int)(sizeof over / sizeof over[0]);
  /* preset was "gpt2-124m" on the way: a shorter final value must not leave
   * bytes of it behind, or memcmp would fail */
  char *over2[sizeof over / sizeof over[0] + 1];
  memcpy(over2, over, sizeof over);
  over2[n] = "model.preset=tiny";
  if (load_ok(&cfg, NULL, n + 1, over2, "round-trip overrides")) return;
  fill_strings(&cfg);
  MT_CHECK(cfg.beta1 < 1 && cfg.beta1 > 0.9999, "beta1 %.17g", cfg.beta1);
  /* "every key": derived from the key table, so a new key cannot be left out */
  {
    mt_config def;
    mt_config_defaults(&def);
    int nk = 0;
    const mt_cfg_key *keys = mt_config_keys(&nk);
    for (int i = 0; i < nk; i++) {
      size_t size = field_size(&keys[i]);
      if (memcmp((const char *)&cfg + keys[i].offset, (const char *)&def + keys[i].offset,
                 size) == 0)
        MT_FAIL("round trip: %s is still at its default %s: give it a value in the overrides",
                keys[i].name, keys[i].def);
    }
  }
  round_trip(&cfg, "rt_all.ini");
  /* the same text from memory (a checkpoint's stored configuration) */
  {
    char *text = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&text, &len);
    mt_config_write_ini(&cfg, mf);
    fclose(mf);
    mt_config back;
    mt_err e = {0};
    memset(&back, 0xa5, sizeof back);
    MT_CHECK(mt_config_load_text(&back, text, "text", &e) == 0, "load_text: %s", e.msg);
    MT_CHECK(memcmp(&cfg, &back, sizeof back) == 0, "load_text: not the config written");
    free(text);
    /* one section alone: the model's keys, the rest at their defaults */
    text = NULL;
    mf = open_memstream(&text, &len);
    mt_config_write_ini_section(&cfg, "model", mf);
    fclose(mf);
    MT_CHECK(strstr(text, "[model]") && !strstr(text, "[train]"), "section: %s", text);
    MT_CHECK(mt_config_load_text(&back, text, "section", &e) == 0, "section: %s", e.msg);
    MT_CHECK(back.rope_theta == cfg.rope_theta && back.lr == 1e-3 &&
                 !strcmp(back.eos_token_id, cfg.eos_token_id),
             "section: rope_theta %g lr %g eos '%s'", back.rope_theta, back.lr, back.eos_token_id);
    free(text);
    MT_CHECK(mt_config_load_text(&back, "", "empty", &e) == 0 && back.lr == 1e-3, "empty text");
    MT_CHECK(mt_config_load_text(&back, "[model]\nnope = 1\n", "ckpt", &e) != 0 &&
                 strstr(e.msg, "ckpt:2: unknown key 'model.nope'"),
             "load_text error: %s", e.msg);
  }

  /* the written file is readable: "0.001", not 0.0010000000000000000208 */
  char path[320];
  snprintf(path, sizeof path, "%s/rt_defaults.ini", g_dir);
  FILE *f = fopen(path, "r");
  char line[256];
  int saw_lr = 0, saw_section = 0;
  while (f && fgets(line, sizeof line, f)) {
    if (strcmp(line, "lr = 0.001\n") == 0) saw_lr = 1;
    if (strcmp(line, "[parallel]\n") == 0) saw_section = 1;
  }
  if (f) fclose(f);
  MT_CHECK(saw_lr, "write_ini did not write 'lr = 0.001'");
  MT_CHECK(saw_section, "write_ini did not write '[parallel]'");
}

static void check_case(int world_size, const char *want, int n, char **over) {
  mt_config cfg;
  char what[512] = "";
  for (int i = 0; i < n; i++)
    snprintf(what + strlen(what), sizeof what - strlen(what), "%s ", over[i]);
  if (load_ok(&cfg, NULL, n, over, what)) return;
  mt_err e = {0};
  int rc = mt_config_check(&cfg, world_size, &e);
  if (!want) {
    MT_CHECK(rc == 0 && !e.failed, "%s(%d ranks): refused: %s", what, world_size, e.msg);
    return;
  }
  MT_CHECK(rc != 0 && e.failed, "%s(%d ranks): accepted, want '%s'", what, world_size, want);
  MT_CHECK(strstr(e.msg, want) != NULL, "%s(%d ranks): '%s' lacks '%s'", what, world_size, e.msg,
           want);
  MT_CHECK(!strchr(e.msg, '\n'), "%s: message is not one line", what);
  MT_CHECK(e.code == MT_EXIT_BADINPUT, "%s: exit code %d", what, e.code);
}
#define CHECK_CASE(world, want, ...)                                                         \
  do {                                                                                       \
    char *o_[] = {__VA_ARGS__};                                                              \
    check_case((world), (want), (int)(sizeof o_ / sizeof o_[0]), o_);                        \
  } while (0)

static void test_check(void) {
  /* the defaults, on one rank or on ranks unknown */
  CHECK_CASE(1, NULL, "train.steps=100");
  CHECK_CASE(0, NULL, "train.steps=100");
  /* the optimizer's schedule and the batch (checked at load before) */
  CHECK_CASE(0, "train.warmup_steps = 101 is more than 10 x train.steps = 10", "train.steps=10",
             "train.warmup_steps=101");
  CHECK_CASE(0, "train.micro_batch = 64 is more than train.global_batch = 32",
             "train.micro_batch=64");
  CHECK_CASE(0, "train.lr x train.weight_decay = 1: decoupled decay", "train.lr=1",
             "train.weight_decay=1");
  /* the mesh and the batch */
  CHECK_CASE(6, "parallel.tp = 4 does not divide the 6 MPI ranks launched", "parallel.tp=4");
  CHECK_CASE(0, "parallel.sp = true needs parallel.tp > 1", "parallel.sp=true");
  CHECK_CASE(0, "train.global_batch = 30 is not divisible by train.micro_batch x parallel.dp "
                "= 4 x 1 = 4", "train.global_batch=30");
  CHECK_CASE(0, "data.val is empty and data.val_fraction = 0", "data.val_fraction=0");
  CHECK_CASE(0, NULL, "data.val_fraction=0", "train.eval_every=0");
  CHECK_CASE(0, "output.dir is empty", "output.dir=");
  CHECK_CASE(0, "ckpt.async = true needs ckpt.mode = per-writer (each rank writes its own file "
                "in the background; ckpt.mode is shared)", "ckpt.async=true");
  CHECK_CASE(0, NULL, "ckpt.async=true", "ckpt.mode=per-writer");
  CHECK_CASE(0, "parallel.etp x parallel.ep = 1 x 4 does not divide the 2 ranks of a pipeline "
                "stage", "model.moe_experts=4", "parallel.dp=2", "parallel.ep=4");
  CHECK_CASE(0, "model.moe_capacity = 1.5 with parallel.cp = 2 needs parallel.cp_mode = ulysses",
             "model.moe_experts=4", "parallel.cp=2", "model.moe_capacity=1.5");
  CHECK_CASE(0, NULL, "model.moe_experts=4", "parallel.cp=2", "model.moe_capacity=1.5",
             "parallel.cp_mode=ulysses");
  CHECK_CASE(0, "parallel.ep_balance = least-loaded needs parallel.etp = 1", "model.moe_experts=4",
             "parallel.tp=2", "parallel.etp=2", "parallel.ep_balance=least-loaded");
  CHECK_CASE(0, "parallel.ep_balance = least-loaded needs parallel.ep > 1",
             "model.moe_experts=4", "parallel.ep_balance=least-loaded");
  CHECK_CASE(0, "train.moe_bias_init = 0.5 needs train.moe_balance = bias (it is the routing "
                "bias's start; train.moe_balance is aux)", "train.moe_bias_init=0.5");
  CHECK_CASE(0, NULL, "train.moe_bias_init=0.5", "train.moe_balance=bias");
  CHECK_CASE(0, "output.save_params = true needs parallel.zero <= 2", "parallel.zero=3",
             "output.save_params=true");
  /* the pipeline's keys */
  CHECK_CASE(0, "train.micro_batches = 3 does not match train.global_batch / (train.micro_batch "
                "x parallel.dp) = 32 / (4 x 1) = 8", "train.micro_batches=3");
  CHECK_CASE(0, NULL, "train.micro_batches=8");
  CHECK_CASE(0, "output.save_params = true needs parallel.pp = 1", "parallel.pp=2",
             "output.save_params=true");
  CHECK_CASE(0, "parallel.pp_split and parallel.pp_first_layers / pp_last_layers both set",
             "parallel.pp=2", "parallel.pp_split=3,3", "parallel.pp_first_layers=2");
  /* train.precision and the gradients' dtypes (issue 10's messages) */
  CHECK_CASE(0, "train.precision = fp16: fp16 needs dynamic loss scaling, which meshtrain does "
                "not implement; use train.precision = bf16", "train.precision=fp16");
  CHECK_CASE(0, "train.grad_dtype = bf16 needs train.precision = bf16; set it to fp32",
             "train.grad_dtype=bf16", "parallel.grad_reduce_dtype=bf16");
  CHECK_CASE(0, "train.grad_dtype = bf16 with parallel.grad_reduce_dtype = fp32: bf16 gradients "
                "are reduced in bf16", "train.precision=bf16", "train.grad_dtype=bf16");
  CHECK_CASE(0, "parallel.grad_reduce_dtype = bf16 needs train.precision = bf16; set it to fp32",
             "parallel.grad_reduce_dtype=bf16");
  CHECK_CASE(0, NULL, "train.precision=bf16", "train.grad_dtype=bf16",
             "parallel.grad_reduce_dtype=bf16");
  CHECK_CASE(0, NULL, "train.precision=bf16", "parallel.grad_reduce_dtype=bf16");
  CHECK_CASE(0, "output.save_params = true needs parallel.zero = 0 under train.precision = bf16",
             "train.precision=bf16", "parallel.zero=1", "output.save_params=true");
  /* the virtual device */
  CHECK_CASE(0, "virtual.moe_skew = 1 needs train.device = virtual", "virtual.moe_skew=1");
  CHECK_CASE(0, "virtual.moe_skew = 1: the model has no experts", "virtual.moe_skew=1",
             "train.device=virtual", "train.virtual_hw=h200", "ckpt.mode=none");
  CHECK_CASE(0, "train.device = virtual needs train.virtual_hw = PROFILE", "train.device=virtual",
             "ckpt.mode=none");
  CHECK_CASE(0, "train.device = virtual computes no values to checkpoint: set ckpt.mode = none "
                "(it is per-writer)", "train.device=virtual", "train.virtual_hw=h200",
             "ckpt.mode=per-writer");
  CHECK_CASE(0, "train.device = virtual cannot load a checkpoint", "train.device=virtual",
             "train.virtual_hw=h200", "ckpt.mode=none", "train.resume=auto");
  CHECK_CASE(0, NULL, "train.device=virtual", "train.virtual_hw=h200", "ckpt.mode=none");
  /* the mesh against the ranks launched (none known: not checked) */
  CHECK_CASE(2, "the mesh pp x dp x cp x tp = 1 x 4 x 1 x 1 = 4 ranks does not match the 2 MPI "
                "ranks launched", "parallel.dp=4");
  CHECK_CASE(0, NULL, "parallel.dp=4");
  CHECK_CASE(8, NULL, "parallel.dp=2", "parallel.tp=2", "parallel.pp=2");
  /* the order: a configuration with two faults gets the message of the
   * first, whatever the ranks */
  CHECK_CASE(2, "train.precision = fp16", "train.precision=fp16");
}

static void test_help(void) {
  char *text = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&text, &size);
  if (!f) {
    MT_FAIL("open_memstream failed");
    return;
  }
  mt_config_print_help(f);
  fclose(f);
  int n = 0;
  const mt_cfg_key *keys = mt_config_keys(&n);
  for (int i = 0; i < n; i++) {
    MT_CHECK(strstr(text, keys[i].name) != NULL, "help lacks %s", keys[i].name);
    MT_CHECK(strstr(text, keys[i].help) != NULL, "help lacks the help of %s", keys[i].name);
  }
  const char *sections[] = {"[model]", "[train]", "[parallel]", "[data]", "[output]", "[metrics]"};
  for (int i = 0; i < 6; i++) MT_CHECK(strstr(text, sections[i]), "help lacks %s", sections[i]);
  MT_CHECK(strstr(text, "tiny|small|gpt2-124m|custom"), "help lacks the preset choices");
  MT_CHECK(strstr(text, "> 0"), "help lacks the '> 0' range of train.lr");
  size_t width = 0;
  for (char *p = text; *p;) {
    size_t w = strcspn(p, "\n");
    if (w > width) width = w;
    p += w + (p[w] == '\n');
  }
  MT_CHECK(width <= 100, "help has a line of %zu columns", width);
  if (getenv("MT_TEST_PRINT_HELP")) fputs(text, stdout);
  free(text);
}

int main(void) {
  if (config_test_begin("test_config")) return 1;
  test_table();
  test_defaults();
  test_file_and_overrides();
  test_errors();
  test_check();
  test_round_trip();
  test_help();

  return config_test_end("test_config");
}
