/* Unit test of lib/data's sources and blends: specs (file, directory,
 * glob, list) and their errors, llm.c version-2 shards read back, windows
 * cut per shard, held-out validation over shards, and the blend schedule
 * (each source's share within 1% of its weight over 10,000 windows, every
 * window of a source once per epoch, one source = its sampler exactly).
 * One rank; its own temp directory.
 * And the SIGBUS guard's slots: 4096, then unguarded (said once). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../check.h"
#include "core/core.h"
#include "data/data.h"
#include "data/data_internal.h"

static char g_dir[256];

static void path_of(char *out, size_t n, const char *name) {
  snprintf(out, n, "%s/%s", g_dir, name);
}

/* a shard of n tokens, token i = base + i (mod 60000), in format */
static void write_shard(const char *name, const char *format, size_t n, uint32_t base) {
  char p[512];
  path_of(p, sizeof p, name);
  uint32_t *tok = malloc(n * sizeof *tok);
  for (size_t i = 0; i < n; i++) tok[i] = (base + (uint32_t)i) % 60000u;
  mt_err e = {0};
  MT_CHECK(mt_tokens_write(p, format, tok, n, &e) == 0, "write %s: %s", p, e.msg);
  free(tok);
}

/* llm.c version 2: uint32 ids above 65535 read back through auto */
static void test_llmc_v2(void) {
  char p[512];
  path_of(p, sizeof p, "wide.bin");
  uint32_t tok[6] = {70000, 5, 128255, 65536, 0, 99999};
  mt_err e = {0};
  MT_CHECK(mt_tokens_write(p, "llmc2", tok, 6, &e) == 0, "write llmc2: %s", e.msg);
  FILE *f = fopen(p, "rb");
  int32_t h[3] = {0};
  MT_CHECK(f && fread(h, sizeof h, 1, f) == 1, "read header");
  if (f) fclose(f);
  MT_CHECK(h[0] == 20240520 && h[1] == 2 && h[2] == 6, "header %d %d %d", h[0], h[1], h[2]);
  struct stat st;
  MT_CHECK(stat(p, &st) == 0 && st.st_size == 1024 + 6 * 4, "size %lld", (long long)st.st_size);
  mt_dataset ds;
  MT_CHECK(mt_dataset_open(&ds, p, MT_DATA_AUTO, &e) == 0, "open v2: %s", e.msg);
  MT_CHECK(ds.format == MT_DATA_LLMC && mt_dataset_ntokens(&ds) == 6, "v2: %s, %zu tokens",
           mt_data_format_name(ds.format), mt_dataset_ntokens(&ds));
  for (int i = 0; i < 6; i++)
    MT_CHECK(mt_dataset_token(&ds, (size_t)i) == (int)tok[i], "v2 token %d: %d, expected %u", i,
             mt_dataset_token(&ds, (size_t)i), tok[i]);
  MT_CHECK(mt_dataset_validate(&ds, 128256, MPI_COMM_SELF, &e) == 0, "v2 vocab 128256: %s", e.msg);
  MT_CHECK(mt_dataset_validate(&ds, 100000, MPI_COMM_SELF, &e) != 0 && strstr(e.msg, "128255"),
           "v2: id 128255 >= 100000 not refused: %s", e.msg);
  mt_dataset_close(&ds);
  /* version 1 still holds uint16 and refuses a vocabulary beyond it */
  path_of(p, sizeof p, "narrow.bin");
  uint32_t small[4] = {1, 2, 3, 65535};
  MT_CHECK(mt_tokens_write(p, "llmc", small, 4, &e) == 0, "write llmc: %s", e.msg);
  MT_CHECK(mt_dataset_open(&ds, p, MT_DATA_AUTO, &e) == 0 && mt_dataset_token(&ds, 3) == 65535,
           "v1 read back: %s", e.msg);
  memset(&e, 0, sizeof e);
  MT_CHECK(mt_dataset_validate(&ds, 70000, MPI_COMM_SELF, &e) != 0, "v1 took vocab 70000");
  mt_dataset_close(&ds);
  memset(&e, 0, sizeof e);
  MT_CHECK(mt_tokens_write(p, "llmc", tok, 6, &e) != 0 && strstr(e.msg, "70000"),
           "llmc (v1) wrote id 70000: %s", e.msg);
}

static void expect_open_error(const char *train, const char *blend, const char *val,
                              const char *want, const char *what) {
  mt_sources ss;
  mt_err e = {0};
  int rc = mt_sources_open(&ss, train, blend, val, MT_DATA_AUTO, 0.1, &e);
  MT_CHECK(rc != 0 && strstr(e.msg, want), "%s: expected an error with '%s', got rc %d '%s'",
           what, want, rc, e.msg);
  if (rc == 0) mt_sources_close(&ss);
}

static void test_specs(void) {
  char d[512], spec[1200], p[512];
  path_of(d, sizeof d, "web");
  mkdir(d, 0755);
  /* web/ has 3 shards (written out of order), one shorter than a window */
  write_shard("web/s2.bin", "llmc", 1000, 2000);
  write_shard("web/s0.bin", "llmc", 1000, 0);
  write_shard("web/s1.bin", "llmc2", 5, 1000);
  path_of(p, sizeof p, "web/notes.txt");
  FILE *f = fopen(p, "w");
  if (f) fputs("not a shard", f), fclose(f);
  mt_err e = {0};
  char **paths = NULL;
  int n = 0;
  MT_CHECK(mt_source_paths(d, &paths, &n, &e) == 0 && n == 3, "directory: %d files: %s", n,
           e.msg);
  for (int i = 0; i < n; i++) {
    char want[32];
    snprintf(want, sizeof want, "/s%d.bin", i);
    MT_CHECK(strstr(paths[i], want) != NULL, "directory order: %s at %d", paths[i], i);
  }
  mt_source_paths_free(paths, n);
  snprintf(spec, sizeof spec, "%s/s*.bin , %s/s0.bin", d, d);
  MT_CHECK(mt_source_paths(spec, &paths, &n, &e) == 0 && n == 4, "glob + file: %d: %s", n, e.msg);
  mt_source_paths_free(paths, n);

  /* one source over the directory: windows per shard, the short one none */
  mt_sources ss;
  MT_CHECK(mt_sources_open(&ss, d, "", "", MT_DATA_AUTO, 0.0, &e) == 0, "open dir: %s", e.msg);
  if (!e.failed) {
    mt_blend b;
    const int T = 64;
    MT_CHECK(mt_blend_init(&b, &ss, T, 7, &e) == 0, "blend: %s", e.msg);
    /* s0: 999/64 = 15 windows, s1: 0, s2: 15 */
    MT_CHECK(b.src[0].n_windows == 30 && b.src[0].n_short == 1, "windows %llu short %d",
             (unsigned long long)b.src[0].n_windows, b.src[0].n_short);
    int in[64], tg[64], ok = 1;
    for (uint64_t w = 0; w < 30; w++) {
      mt_sampler_get_window(&b.src[0], w, in, tg);
      uint32_t base = w < 15 ? (uint32_t)(w * T) : (uint32_t)(2000 + (w - 15) * T);
      for (int t = 0; t < T; t++) ok &= in[t] == (int)(base + t) && tg[t] == (int)(base + t + 1);
    }
    MT_CHECK(ok, "a window spans two shards or starts in the wrong place");
    mt_blend_free(&b);
    mt_sources_close(&ss);
  }
  /* held out over shards: 10% of 2005 tokens = 200, from the last shard */
  MT_CHECK(mt_sources_open(&ss, d, "", "", MT_DATA_AUTO, 0.1, &e) == 0, "open: %s", e.msg);
  if (!e.failed) {
    const mt_source *s = &ss.src[0];
    MT_CHECK(s->n_train == 3 && s->n_val == 1 && mt_dataset_ntokens(&s->val[0]) == 200 &&
                 mt_dataset_ntokens(&s->train[2]) == 800 && mt_dataset_token(&s->val[0], 0) == 2800,
             "held out: %d train, %d val shards, %zu val tokens", s->n_train, s->n_val,
             mt_dataset_ntokens(&s->val[0]));
    mt_sources_close(&ss);
  }
  /* errors */
  snprintf(spec, sizeof spec, "%s/none*.bin", d);
  expect_open_error(spec, "", "", "matches no file", "empty glob");
  snprintf(spec, sizeof spec, "%s/s0.bin,%s/missing.bin", d, d);
  expect_open_error(spec, "", "", "missing.bin: cannot open", "missing list entry");
  path_of(p, sizeof p, "empty");
  mkdir(p, 0755);
  expect_open_error(p, "", "", "holds no token files", "empty directory");
  path_of(p, sizeof p, "mixed");
  mkdir(p, 0755);
  write_shard("mixed/a.bin", "llmc", 100, 0);
  write_shard("mixed/b.bin", "u16", 100, 0);
  expect_open_error(p, "", "", "disagree", "mixed formats");
  snprintf(spec, sizeof spec, "0.5 %s, -1 %s", d, d);
  expect_open_error("", spec, "", "not a positive number", "negative weight");
  snprintf(spec, sizeof spec, "0 a=%s, 1 b=%s", d, d);
  expect_open_error("", spec, "", "not a positive number", "zero weight");
  snprintf(spec, sizeof spec, "abc %s", d);
  expect_open_error("", spec, "", "does not start with a weight", "weight not a number");
  snprintf(spec, sizeof spec, "1 %s, 1 %s", d, d);
  expect_open_error("", spec, "", "two sources named", "duplicate names");
  snprintf(spec, sizeof spec, "1 a=%s, 1 b=%s/s0.bin", d, d);
  expect_open_error("", spec, "c=x.bin", "no data.blend source is named 'c'", "val names");
}

/* the blend: shares, epochs, determinism */
static void test_blend(void) {
  char a[512], b2[512], c[512], blend[1800];
  path_of(a, sizeof a, "a.bin");
  path_of(b2, sizeof b2, "b.bin");
  path_of(c, sizeof c, "c.bin");
  write_shard("a.bin", "llmc", 50001, 0);
  write_shard("b.bin", "llmc", 20001, 0);
  write_shard("c.bin", "u16", 3001, 0);
  snprintf(blend, sizeof blend, "0.6 a=%s, 0.3 b=%s, 0.1 c=%s", a, b2, c);
  mt_sources ss;
  mt_err e = {0};
  MT_CHECK(mt_sources_open(&ss, "", blend, "", MT_DATA_AUTO, 0.0, &e) == 0, "blend: %s", e.msg);
  if (e.failed) return;
  mt_blend bl;
  const int T = 10; /* windows: a 5000, b 2000, c 300 (c runs out: epochs) */
  MT_CHECK(mt_blend_init(&bl, &ss, T, 42, &e) == 0, "blend init: %s", e.msg);
  const double want[3] = {0.6, 0.3, 0.1};
  enum { N = 10000 };
  int count[3] = {0}, worst_err = 0;
  uint64_t next[3] = {0};
  unsigned char *seen_c = calloc(300 * 4, 1);
  for (uint64_t g = 0; g < N; g++) {
    uint64_t k = 0;
    int s = mt_blend_source(&bl, g, &k);
    MT_CHECK(k == next[s], "sample %llu: index %llu in source %d, expected %llu",
             (unsigned long long)g, (unsigned long long)k, s, (unsigned long long)next[s]);
    next[s]++;
    count[s]++;
    if (s == 2) seen_c[(k / 300) * 300 + mt_blend_window(&bl, g, NULL)]++;
    /* any prefix: within 2 samples of its quota (low discrepancy) */
    for (int i = 0; i < 3; i++) {
      int d = (int)fabs(count[i] - want[i] * (double)(g + 1));
      if (d > worst_err) worst_err = d;
    }
  }
  for (int i = 0; i < 3; i++) {
    double share = (double)count[i] / N;
    MT_CHECK(fabs(share - want[i]) <= 0.01 * want[i], "source %d: share %.4f, weight %.2f", i,
             share, want[i]);
    printf("blend share %s: %.4f (weight %.2f, error %.2f%%)\n", ss.src[i].name, share, want[i],
           100.0 * fabs(share - want[i]) / want[i]);
  }
  MT_CHECK(worst_err <= 3, "a prefix strays %d samples from its quota", worst_err);
  /* c ran 1000 samples = 3 full epochs and a third: each epoch every window once */
  int dup = 0;
  for (int i = 0; i < 900; i++) dup += seen_c[i] != 1;
  MT_CHECK(dup == 0, "source c: %d windows not seen exactly once in its first 3 epochs", dup);
  free(seen_c);
  /* a pure function of (seed, g): a second blend agrees sample by sample */
  mt_blend again;
  MT_CHECK(mt_blend_init(&again, &ss, T, 42, &e) == 0, "again: %s", e.msg);
  int differ = 0;
  for (uint64_t g = 0; g < N; g += 7) {
    int s1 = 0, s2 = 0;
    differ += mt_blend_window(&bl, g, &s1) != mt_blend_window(&again, g, &s2) || s1 != s2;
  }
  MT_CHECK(differ == 0, "%d samples differ between two blends of one seed", differ);
  mt_blend_free(&again);
  mt_blend_free(&bl);
  mt_sources_close(&ss);

  /* one source: exactly the single-file sampler */
  MT_CHECK(mt_sources_open(&ss, a, "", "", MT_DATA_AUTO, 0.05, &e) == 0, "one: %s", e.msg);
  mt_dataset ds, train, val;
  MT_CHECK(mt_dataset_open(&ds, a, MT_DATA_AUTO, &e) == 0, "open a: %s", e.msg);
  mt_dataset_split(&ds, 0.05, &train, &val);
  mt_sampler s;
  MT_CHECK(mt_blend_init(&bl, &ss, 16, 9, &e) == 0 && mt_sampler_init(&s, &train, 16, 9, &e) == 0,
           "init: %s", e.msg);
  MT_CHECK(mt_dataset_ntokens(&ss.src[0].val[0]) == mt_dataset_ntokens(&val),
           "held-out tokens %zu, the file split's %zu", mt_dataset_ntokens(&ss.src[0].val[0]),
           mt_dataset_ntokens(&val));
  differ = 0;
  for (uint64_t g = 0; g < 20000; g++) differ += mt_blend_window(&bl, g, NULL) != mt_sampler_window(&s, g);
  MT_CHECK(differ == 0, "one source: %d samples differ from the single-file sampler", differ);
  mt_sampler_free(&s);
  mt_blend_free(&bl);
  mt_dataset_close(&ds);
  mt_sources_close(&ss);
}

/* The guard holds 4096 mappings: the next is read unguarded (slot -1, said
 * once), a freed slot is taken again. (Addresses only: nothing is mapped.) */
static void test_guard_slots(void) {
  static char fake[4100];
  int ok = 1;
  for (int i = 0; i < 4096; i++) ok &= mt_data_guard_slot(fake + i, 1) >= 0;
  MT_CHECK(ok, "the guard did not take 4096 mappings");
  MT_CHECK(mt_data_guard_slot(fake + 4096, 1) == -1, "a 4097th mapping got a guard slot");
  mt_data_guard_forget(fake + 7);
  MT_CHECK(mt_data_guard_slot(fake + 4096, 1) >= 0, "a freed slot was not taken again");
  for (int i = 0; i <= 4096; i++) mt_data_guard_forget(fake + i);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  mt_log_init(0);
  snprintf(g_dir, sizeof g_dir, "/tmp/mt_test_sources_XXXXXX");
  if (!mkdtemp(g_dir)) {
    fprintf(stderr, "test_sources: mkdtemp failed\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  test_llmc_v2();
  test_specs();
  test_blend();
  test_guard_slots();
  char cmd[320];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "test_sources: could not remove %s\n", g_dir);
  int rc = mt_check_report("test_sources", *mt_check_failures(), 1);
  MPI_Finalize();
  return rc;
}
