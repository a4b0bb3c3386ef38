/* Unit test of lib/data: token file formats and their errors, train/val
 * split, the global sampler (permutation per epoch, determinism, alignment
 * of inputs and targets with the file) and collective validation (the
 * generated corpus: test_corpus.c).
 *
 * Runs on any number of ranks: each rank works in its own temp directory;
 * the validation test opens one file written by rank 0 on every rank. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../check.h"
#include "../test_rng.h"
#include "core/core.h"
#include "data/data.h"

static int g_rank = 0;

/* ------------------------------------------------------------------ */
/* temp files                                                          */

static char g_dir[256];
enum { MAX_FILES = 64 };
static char g_files[MAX_FILES][320];
static int g_nfiles = 0;

/* path of a file in this rank's temp dir, remembered for cleanup */
/* data.format's value for a name, as the configuration parses it */
static mt_data_format fmt_of(const char *name) {
  return (mt_data_format)mt_config_enum_parse("data.format", name);
}

static const char *tmp_path(const char *name) {
  if (g_nfiles == MAX_FILES) {
    fprintf(stderr, "test_data: too many temp files\n");
    exit(1);
  }
  snprintf(g_files[g_nfiles], sizeof g_files[0], "%s/%s", g_dir, name);
  return g_files[g_nfiles++];
}

static void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) {
    fprintf(stderr, "test_data: cannot write %s\n", path);
    exit(1);
  }
}

static void cleanup(void) {
  for (int i = 0; i < g_nfiles; i++) unlink(g_files[i]);
  if (g_dir[0] && rmdir(g_dir) != 0)
    fprintf(stderr, "[rank %d] warning: temp dir %s not empty\n", g_rank, g_dir);
}

/* Opening path as format fmt fails (e reset first, then set), with one line
 * that names the file and contains what. */
static void check_open_error(const char *path, mt_data_format fmt, mt_err *e, const char *what,
                             const char *label) {
  mt_dataset ds;
  *e = (mt_err){0};
  int rc = mt_dataset_open(&ds, path, fmt, e);
  MT_CHECK(rc != 0, "%s: open succeeded, expected an error", label);
  MT_CHECK(e->failed, "%s: mt_err not set", label);
  MT_CHECK(strstr(e->msg, path) == e->msg, "%s: message does not start with the path: '%s'", label,
           e->msg);
  MT_CHECK(strstr(e->msg, what) != NULL, "%s: message lacks '%s': '%s'", label, what, e->msg);
  MT_CHECK(strchr(e->msg, '\n') == NULL, "%s: message is not one line: '%s'", label, e->msg);
}

/* ------------------------------------------------------------------ */
/* formats                                                             */

static void test_round_trip(void) {
  enum { N = 1000 };
  uint32_t tok[N];
  for (int i = 0; i < N; i++) tok[i] = (uint32_t)(rng_next() & 0xffff);
  tok[0] = 0;
  tok[1] = 65535;

  struct {
    const char *name, *write_fmt, *read_fmt, *expect_fmt;
  } cases[] = {
      {"rt_llmc.bin", "llmc", "llmc", "llmc"}, {"rt_llmc.bin", "llmc", "auto", "llmc"},
      {"rt_llmc.dat", "llmc", "auto", "llmc"}, /* the magic decides, not the name */
      {"rt_u16.bin", "u16", "u16", "u16"},     {"rt_u16.bin", "u16", "auto", "u16"},
      {"rt_u32.bin", "u32", "u32", "u32"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char path[320];
    snprintf(path, sizeof path, "%s/%s", g_dir, cases[c].name);
    mt_err e = {0};
    int rc = mt_tokens_write(path, cases[c].write_fmt, tok, N, &e);
    MT_CHECK(rc == 0, "write %s: %s", cases[c].name, e.msg);
    mt_dataset ds;
    rc = mt_dataset_open(&ds, path, fmt_of(cases[c].read_fmt), &e);
    MT_CHECK(rc == 0, "open %s as %s: %s", cases[c].name, cases[c].read_fmt, e.msg);
    if (rc) continue;
    MT_CHECK(ds.format == fmt_of(cases[c].expect_fmt), "%s read as %s: format %s, expected %s",
             cases[c].name, cases[c].read_fmt, mt_data_format_name(ds.format),
             cases[c].expect_fmt);
    MT_CHECK(mt_dataset_ntokens(&ds) == N, "%s: %zu tokens, expected %d", cases[c].name,
             mt_dataset_ntokens(&ds), N);
    MT_CHECK(ds.owns_map == 1, "opened dataset must own its map");
    int mism = -1;
    for (int i = 0; i < N && mism < 0; i++)
      if (mt_dataset_token(&ds, (size_t)i) != (int)tok[i]) mism = i;
    MT_CHECK(mism < 0, "%s: token %d differs", cases[c].name, mism);
    mt_dataset_close(&ds);
  }
  tmp_path("rt_llmc.bin");
  tmp_path("rt_llmc.dat");
  tmp_path("rt_u16.bin");
  tmp_path("rt_u32.bin");

  /* a raw uint16 file not named .bin reads as text under auto: 2 tokens a value */
  const char *raw = tmp_path("raw_u16.dat");
  uint16_t tok16[N];
  for (int i = 0; i < N; i++) tok16[i] = (uint16_t)tok[i];
  write_bytes(raw, tok16, sizeof tok16);
  mt_dataset ds;
  mt_err e = {0};
  MT_CHECK(mt_dataset_open(&ds, raw, MT_DATA_AUTO, &e) == 0, "open %s: %s", raw, e.msg);
  MT_CHECK(ds.format == MT_DATA_TEXT && mt_dataset_ntokens(&ds) == 2 * N,
           "auto on *.dat: %s with %zu tokens, expected text with %d",
           mt_data_format_name(ds.format),
           mt_dataset_ntokens(&ds), 2 * N);
  mt_dataset_close(&ds);

  /* writing refuses an unknown format and zero tokens, and leaves no file */
  const char *nowrite = tmp_path("nowrite.bin");
  e = (mt_err){0};
  MT_CHECK(mt_tokens_write(nowrite, "text", tok, N, &e) != 0 && strstr(e.msg, nowrite),
           "writing format text should fail naming the file: '%s'", e.msg);
  e = (mt_err){0};
  MT_CHECK(mt_tokens_write(nowrite, "llmc", tok, 0, &e) != 0 && strstr(e.msg, "no tokens"),
           "writing 0 tokens should fail: '%s'", e.msg);
  MT_CHECK(access(nowrite, F_OK) != 0, "a failed write left %s behind", nowrite);
}

static void test_text(void) {
  const char *path = tmp_path("hello.txt");
  const unsigned char text[] = {'h', 'e', 'l', 'l', 'o', '\n', 0x00, 0xff};
  write_bytes(path, text, sizeof text);
  for (int f = 0; f < 2; f++) {
    const char *fmt = f ? "text" : "auto";
    mt_dataset ds;
    mt_err e = {0};
    int rc = mt_dataset_open(&ds, path, fmt_of(fmt), &e);
    MT_CHECK(rc == 0, "open %s as %s: %s", path, fmt, e.msg);
    if (rc) continue;
    MT_CHECK(ds.format == MT_DATA_TEXT, "%s as %s: format %s", path, fmt,
             mt_data_format_name(ds.format));
    MT_CHECK(mt_dataset_ntokens(&ds) == sizeof text, "text: %zu tokens, expected %zu",
             mt_dataset_ntokens(&ds), sizeof text);
    for (size_t i = 0; i < sizeof text; i++)
      MT_CHECK(mt_dataset_token(&ds, i) == text[i], "text token %zu = %d, expected %d", i,
               mt_dataset_token(&ds, i), text[i]);
    mt_dataset_close(&ds);
  }
  /* a file named .bin is text when asked for text */
  const char *bin = tmp_path("odd.bin");
  write_bytes(bin, "abc", 3);
  mt_dataset ds;
  mt_err e = {0};
  MT_CHECK(mt_dataset_open(&ds, bin, MT_DATA_TEXT, &e) == 0 && mt_dataset_ntokens(&ds) == 3,
           "odd.bin as text: %s", e.msg);
  mt_dataset_close(&ds);
}

static void test_errors(void) {
  int32_t header[256] = {20240520, 1, 100};
  uint16_t body[100] = {0};
  unsigned char buf[sizeof header + sizeof body];
  mt_dataset ds;
  mt_err e;

  /* bad magic */
  const char *p = tmp_path("bad_magic.bin");
  header[0] = 12345;
  memcpy(buf, header, sizeof header);
  memcpy(buf + sizeof header, body, sizeof body);
  write_bytes(p, buf, sizeof buf);
  check_open_error(p, MT_DATA_LLMC, &e, "bad llm.c header", "bad magic");
  MT_CHECK(strstr(e.msg, "magic") != NULL, "bad magic message lacks 'magic': '%s'", e.msg);
  mt_dataset_close(&ds); /* closing a dataset that failed to open is harmless */

  /* bad version */
  p = tmp_path("bad_version.bin");
  header[0] = 20240520;
  header[1] = 2;
  memcpy(buf, header, sizeof header);
  write_bytes(p, buf, sizeof buf);
  check_open_error(p, MT_DATA_AUTO, &e, "version", "bad version");

  /* truncated: the header promises 100 tokens, the file holds 50 */
  p = tmp_path("truncated.bin");
  header[1] = 1;
  memcpy(buf, header, sizeof header);
  write_bytes(p, buf, sizeof header + 50 * sizeof(uint16_t));
  check_open_error(p, MT_DATA_AUTO, &e, "bad llm.c header", "truncated llmc");
  MT_CHECK(strstr(e.msg, "100 tokens") && strstr(e.msg, "truncated"),
           "truncated message should give the header count and say truncated: '%s'", e.msg);

  /* trailing bytes beyond the header count */
  p = tmp_path("trailing.bin");
  header[2] = 10;
  memcpy(buf, header, sizeof header);
  write_bytes(p, buf, sizeof buf);
  check_open_error(p, MT_DATA_LLMC, &e, "bad llm.c header", "llmc too long");

  /* shorter than the header */
  p = tmp_path("short.bin");
  write_bytes(p, header, 100);
  check_open_error(p, MT_DATA_LLMC, &e, "bad llm.c header", "short llmc");

  /* odd-size u16, given explicitly and found by auto (*.bin without magic) */
  p = tmp_path("odd_u16.bin");
  write_bytes(p, "1234567", 7);
  check_open_error(p, MT_DATA_U16, &e, "multiple of 2", "odd u16");
  check_open_error(p, MT_DATA_AUTO, &e, "multiple of 2", "odd u16 auto");

  /* missing file: the system's words, then how to make one */
  p = tmp_path("does_not_exist.bin");
  check_open_error(p, MT_DATA_AUTO, &e, "cannot open", "missing file");
  char expect[600];
  snprintf(expect, sizeof expect, "%s: cannot open: No such file or directory (meshdata corpus", p);
  MT_CHECK(strncmp(e.msg, expect, strlen(expect)) == 0 && strstr(e.msg, "data.train = synthetic"),
           "missing file: '%s', expected '%s ...'", e.msg, expect);

  /* empty file */
  p = tmp_path("empty.txt");
  write_bytes(p, "", 0);
  check_open_error(p, MT_DATA_AUTO, &e, "empty", "empty file");

  /* a directory */
  check_open_error(g_dir, MT_DATA_AUTO, &e, "directory", "directory");

  /* unknown format */
  p = tmp_path("hello2.txt");
  write_bytes(p, "hi", 2);
  check_open_error(p, (mt_data_format)99, &e, "unknown data format", "format");
}

/* ------------------------------------------------------------------ */
/* uint32 tokens, and inputs auto-detection must not guess               */

static void test_wide_and_guarded(void) {
  enum { N = 3000 };
  uint32_t tok[N];
  for (int i = 0; i < N; i++) tok[i] = (uint32_t)(rng_next() % 128256); /* Llama-3 vocab */
  tok[0] = 65536;
  tok[1] = 128255;
  mt_dataset ds;
  mt_err e = {0};

  /* u32: ids above 65535 survive write -> open -> sampler, and the vocab check */
  const char *p = tmp_path("wide.bin");
  MT_CHECK(mt_tokens_write(p, "u32", tok, N, &e) == 0, "write u32: %s", e.msg);
  if (mt_dataset_open(&ds, p, MT_DATA_U32, &e) == 0) {
    MT_CHECK(mt_dataset_ntokens(&ds) == N && ds.format == MT_DATA_U32, "u32: %zu tokens, %s",
             mt_dataset_ntokens(&ds), mt_data_format_name(ds.format));
    MT_CHECK(mt_dataset_token(&ds, 0) == 65536 && mt_dataset_token(&ds, 1) == 128255,
             "u32 tokens 0, 1: %d %d", mt_dataset_token(&ds, 0), mt_dataset_token(&ds, 1));
    MT_CHECK(mt_dataset_validate(&ds, 128256, MPI_COMM_SELF, &e) == 0, "vocab 128256: %s", e.msg);
    e = (mt_err){0};
    MT_CHECK(mt_dataset_validate(&ds, 128255, MPI_COMM_SELF, &e) != 0 &&
                 strstr(e.msg, "token id 128255 at offset 1 is >= vocab size 128255"),
             "vocab 128255 must name id 128255: '%s'", e.msg);
    mt_sampler s;
    e = (mt_err){0};
    int inp[4], tgt[4];
    if (mt_sampler_init(&s, &ds, 4, 1, &e) == 0) {
      mt_sampler_get_window(&s, 0, inp, tgt);
      MT_CHECK(inp[0] == 65536 && inp[1] == 128255 && tgt[0] == 128255 && tgt[3] == (int)tok[4],
               "u32 window 0: %d %d / %d %d", inp[0], inp[1], tgt[0], tgt[3]);
    } else {
      MT_CHECK(0, "sampler on u32: %s", e.msg);
    }
    mt_dataset_close(&ds);
  } else {
    MT_CHECK(0, "open u32: %s", e.msg);
  }
  /* a u32 id above INT_MAX is reported with its true value, not wrapped */
  uint32_t huge[4] = {1, 2, 3000000000u, 4};
  p = tmp_path("huge.bin");
  e = (mt_err){0};
  MT_CHECK(mt_tokens_write(p, "u32", huge, 4, &e) == 0, "write huge: %s", e.msg);
  if (mt_dataset_open(&ds, p, MT_DATA_U32, &e) == 0) {
    MT_CHECK(mt_dataset_validate(&ds, 1000, MPI_COMM_SELF, &e) != 0 &&
                 strstr(e.msg, "token id 3000000000 at offset 2 "),
             "id 3e9 must be reported as such: '%s'", e.msg);
    mt_dataset_close(&ds);
  }

  /* the uint16 formats refuse an id that does not fit, and leave no file */
  const char *fmts[2] = {"llmc", "u16"};
  for (int f = 0; f < 2; f++) {
    p = tmp_path(f ? "narrow.u16.bin" : "narrow.llmc.bin");
    e = (mt_err){0};
    int rc = mt_tokens_write(p, fmts[f], tok, N, &e);
    MT_CHECK(rc != 0 && strstr(e.msg, "token id 65536 (token 0) does not fit format") &&
                 strstr(e.msg, fmts[f]) && strstr(e.msg, "u32") && !strchr(e.msg, '\n'),
             "%s with id 65536: rc %d '%s'", fmts[f], rc, e.msg);
    MT_CHECK(access(p, F_OK) != 0, "a refused %s write left %s behind", fmts[f], p);
  }
  /* ... and a vocabulary they cannot hold, even when every id in the file fits */
  p = tmp_path("small_ids.bin");
  uint32_t small[100];
  for (int i = 0; i < 100; i++) small[i] = (uint32_t)i;
  e = (mt_err){0};
  MT_CHECK(mt_tokens_write(p, "llmc", small, 100, &e) == 0, "write: %s", e.msg);
  if (mt_dataset_open(&ds, p, MT_DATA_AUTO, &e) == 0) {
    MT_CHECK(mt_dataset_validate(&ds, 65536, MPI_COMM_SELF, &e) == 0, "vocab 65536 fits: %s",
             e.msg);
    e = (mt_err){0};
    int rc = mt_dataset_validate(&ds, 70000, MPI_COMM_SELF, &e);
    MT_CHECK(rc != 0 &&
                 strstr(e.msg,
                        "format llmc holds token ids up to 65535, too few for vocab "
                        "size 70000") &&
                 strstr(e.msg, "data.format = u32"),
             "llmc with vocab 70000: rc %d '%s'", rc, e.msg);
    mt_dataset_close(&ds);
  }
  /* text holds bytes: any vocab of 256 or more is fine */
  p = tmp_path("bytes.txt");
  write_bytes(p, "hello", 5);
  e = (mt_err){0};
  if (mt_dataset_open(&ds, p, MT_DATA_AUTO, &e) == 0) {
    MT_CHECK(mt_dataset_validate(&ds, 70000, MPI_COMM_SELF, &e) == 0, "text, vocab 70000: %s",
             e.msg);
    mt_dataset_close(&ds);
  }

  /* u32 of a size that is not a multiple of 4 */
  p = tmp_path("odd.u32");
  write_bytes(p, "123456", 6);
  check_open_error(p, MT_DATA_U32, &e, "not a multiple of 4", "odd u32");

  /* auto on a *.bin of uint32 tokens below 65536: refused, data.format decides */
  p = tmp_path("small_u32.bin");
  e = (mt_err){0};
  MT_CHECK(mt_tokens_write(p, "u32", small, 100, &e) == 0, "write: %s", e.msg);
  check_open_error(p, MT_DATA_AUTO, &e, "set data.format = u32", "u32 as auto");
  e = (mt_err){0};
  MT_CHECK(mt_dataset_open(&ds, p, MT_DATA_U16, &e) == 0 && mt_dataset_ntokens(&ds) == 200,
           "an explicit u16 reads it anyway: %s", e.msg);
  mt_dataset_close(&ds);

  /* llm.c file with a damaged magic: refused under llmc and under auto */
  int32_t header[256] = {20240521, 1, 100};
  unsigned char buf[sizeof header + 200];
  memset(buf, 7, sizeof buf);
  memcpy(buf, header, sizeof header);
  p = tmp_path("damaged_magic.bin");
  write_bytes(p, buf, sizeof buf);
  check_open_error(p, MT_DATA_LLMC, &e, "magic 20240521", "damaged magic llmc");
  check_open_error(p, MT_DATA_AUTO, &e, "magic 20240521", "damaged magic auto");
  MT_CHECK(strstr(e.msg, "data.format = u16"), "damaged magic: no way out named: '%s'", e.msg);
  /* the count alone gives it away too (a header tail that is not zero) */
  header[5] = 9;
  header[0] = 0;
  memcpy(buf, header, sizeof header);
  write_bytes(p, buf, sizeof buf);
  check_open_error(p, MT_DATA_AUTO, &e, "bad llm.c header", "damaged, count");
  /* raw uint16 tokens that merely start with zeros are not mistaken for one */
  uint16_t raw16[1024];
  for (int i = 0; i < 1024; i++) raw16[i] = (uint16_t)(i < 8 ? 0 : 1 + i % 300);
  p = tmp_path("raw_zeros.bin");
  write_bytes(p, raw16, sizeof raw16);
  e = (mt_err){0};
  MT_CHECK(mt_dataset_open(&ds, p, MT_DATA_AUTO, &e) == 0 && ds.format == MT_DATA_U16,
           "raw u16 starting with zeros: %s", e.msg);
  mt_dataset_close(&ds);

  /* a FIFO is refused at once, not opened (which would block for a writer) */
  p = tmp_path("tokens.fifo");
  if (mkfifo(p, 0600) == 0) {
    check_open_error(p, MT_DATA_AUTO, &e, "named pipe", "fifo");
  } else {
    MT_CHECK(0, "mkfifo %s failed", p);
  }
}

/* ------------------------------------------------------------------ */
/* split                                                               */

static void test_split(void) {
  enum { N = 1000 };
  uint32_t tok[N];
  for (int i = 0; i < N; i++) tok[i] = (uint32_t)i;
  const char *p = tmp_path("split.bin");
  mt_err e = {0};
  MT_CHECK(mt_tokens_write(p, "llmc", tok, N, &e) == 0, "write: %s", e.msg);
  mt_dataset ds, train, val;
  if (mt_dataset_open(&ds, p, MT_DATA_AUTO, &e) != 0) {
    MT_CHECK(0, "open split.bin: %s", e.msg);
    return;
  }
  mt_dataset_split(&ds, 0.1, &train, &val);
  MT_CHECK(mt_dataset_ntokens(&train) == 900 && mt_dataset_ntokens(&val) == 100,
           "split 0.1 of 1000: train %zu val %zu, expected 900 and 100", mt_dataset_ntokens(&train),
           mt_dataset_ntokens(&val));
  MT_CHECK(mt_dataset_token(&train, 0) == 0 && mt_dataset_token(&train, 899) == 899,
           "train is not the first 900 tokens");
  MT_CHECK(mt_dataset_token(&val, 0) == 900 && mt_dataset_token(&val, 99) == 999,
           "val is not the last 100 tokens");
  MT_CHECK(train.owns_map == 0 && val.owns_map == 0 && train.map == ds.map && val.map == ds.map,
           "views must share the mapping and not own it");
  mt_dataset_close(&train); /* closing views must not unmap the parent */
  mt_dataset_close(&val);
  MT_CHECK(mt_dataset_token(&ds, 999) == 999, "parent unreadable after closing its views");

  mt_dataset_split(&ds, 0.0, &train, &val);
  MT_CHECK(mt_dataset_ntokens(&train) == N && mt_dataset_ntokens(&val) == 0,
           "split 0: train %zu val %zu", mt_dataset_ntokens(&train), mt_dataset_ntokens(&val));
  mt_dataset_split(&ds, 0.25, &train, &val);
  MT_CHECK(
      mt_dataset_ntokens(&train) + mt_dataset_ntokens(&val) == N && mt_dataset_ntokens(&val) == 250,
      "split 0.25: train %zu val %zu", mt_dataset_ntokens(&train), mt_dataset_ntokens(&val));

  /* a split of a split: val of train covers tokens [675, 900) */
  mt_dataset inner_train, inner_val;
  mt_dataset_split(&ds, 0.1, &train, &val);
  mt_dataset_split(&train, 0.25, &inner_train, &inner_val);
  MT_CHECK(mt_dataset_ntokens(&inner_val) == 225 && mt_dataset_token(&inner_val, 0) == 675,
           "nested split: %zu tokens starting at %d", mt_dataset_ntokens(&inner_val),
           mt_dataset_token(&inner_val, 0));
  mt_dataset_close(&ds);
}

/* ------------------------------------------------------------------ */
/* sampler                                                             */

static int same_ints(const int *a, const int *b, int n) {
  return memcmp(a, b, (size_t)n * sizeof(int)) == 0;
}

static void test_sampler_case(size_t ntok, int T, uint64_t seed) {
  uint32_t *tok = mt_malloc(ntok * sizeof *tok);
  for (size_t i = 0; i < ntok; i++) tok[i] = (uint32_t)(rng_next() % 50000);
  char name[64];
  snprintf(name, sizeof name, "sampler_%zu_%d.bin", ntok, T);
  const char *p = tmp_path(name);
  mt_err e = {0};
  MT_CHECK(mt_tokens_write(p, "llmc", tok, ntok, &e) == 0, "write: %s", e.msg);
  mt_dataset ds;
  if (mt_dataset_open(&ds, p, MT_DATA_LLMC, &e) != 0) {
    MT_CHECK(0, "open %s: %s", p, e.msg);
    free(tok);
    return;
  }
  mt_sampler s;
  MT_CHECK(mt_sampler_init(&s, &ds, T, seed, &e) == 0, "sampler init: %s", e.msg);
  uint64_t n = s.n_windows;
  MT_CHECK(n == (ntok - 1) / (size_t)T, "ntok %zu T %d: %llu windows, expected %zu", ntok, T,
           (unsigned long long)n, (ntok - 1) / (size_t)T);

  /* every epoch visits every window exactly once */
  enum { EPOCHS = 3 };
  uint64_t *order = mt_malloc(EPOCHS * n * sizeof *order);
  unsigned char *seen = mt_malloc(n);
  for (int ep = 0; ep < EPOCHS; ep++) {
    memset(seen, 0, n);
    uint64_t bad = UINT64_MAX;
    for (uint64_t i = 0; i < n; i++) {
      uint64_t w = mt_sampler_window(&s, (uint64_t)ep * n + i);
      order[(uint64_t)ep * n + i] = w;
      if (w >= n || seen[w]) {
        if (bad == UINT64_MAX) bad = i;
      } else {
        seen[w] = 1;
      }
    }
    MT_CHECK(bad == UINT64_MAX,
             "ntok %zu T %d seed %llu epoch %d: position %llu repeats or leaves [0,%llu)", ntok, T,
             (unsigned long long)seed, ep, (unsigned long long)bad, (unsigned long long)n);
  }
  if (n >= 8) {
    /* epochs differ from each other and are not the identity */
    MT_CHECK(memcmp(order, order + n, n * sizeof *order) != 0,
             "epochs 0 and 1 have the same order");
    MT_CHECK(memcmp(order + n, order + 2 * n, n * sizeof *order) != 0,
             "epochs 1 and 2 have the same order");
    uint64_t fixed = 0;
    for (uint64_t i = 0; i < n; i++) fixed += order[i] == i;
    MT_CHECK(fixed < n / 2 + 2, "epoch 0 leaves %llu of %llu windows in place",
             (unsigned long long)fixed, (unsigned long long)n);
    /* another seed gives another order */
    mt_sampler s2;
    mt_sampler_init(&s2, &ds, T, seed + 1, &e);
    uint64_t same = 0;
    for (uint64_t i = 0; i < n; i++) same += mt_sampler_window(&s2, i) == order[i];
    MT_CHECK(same < n, "seed %llu and %llu give the same epoch", (unsigned long long)seed,
             (unsigned long long)seed + 1);
  }

  /* inputs/targets: the window's tokens, targets shifted by one */
  int *in = mt_malloc((size_t)T * sizeof(int)), *tg = mt_malloc((size_t)T * sizeof(int));
  int *in2 = mt_malloc((size_t)T * sizeof(int)), *tg2 = mt_malloc((size_t)T * sizeof(int));
  const uint64_t gs[] = {0, 1, n - 1, n, 2 * n + n / 2, 1000003};
  mt_dataset ds2;
  MT_CHECK(mt_dataset_open(&ds2, p, MT_DATA_AUTO, &e) == 0, "reopen: %s", e.msg);
  mt_sampler fresh;
  MT_CHECK(mt_sampler_init(&fresh, &ds2, T, seed, &e) == 0, "fresh sampler: %s", e.msg);
  for (size_t k = 0; k < sizeof gs / sizeof gs[0]; k++) {
    uint64_t g = gs[k];
    uint64_t w = mt_sampler_window(&s, g);
    mt_sampler_get(&s, g, in, tg);
    int ok = 1;
    for (int t = 0; t < T; t++) {
      ok &= in[t] == (int)tok[w * (uint64_t)T + (uint64_t)t];
      ok &= tg[t] == (int)tok[w * (uint64_t)T + (uint64_t)t + 1];
      if (t + 1 < T) ok &= tg[t] == in[t + 1];
    }
    MT_CHECK(ok, "sample %llu (window %llu) does not match the file", (unsigned long long)g,
             (unsigned long long)w);
    mt_sampler_get_window(&s, w, in2, tg2);
    MT_CHECK(same_ints(in, in2, T) && same_ints(tg, tg2, T),
             "get_window(%llu) differs from get of its sample", (unsigned long long)w);
    /* a fresh sampler on a fresh mapping: same g, same sample */
    mt_sampler_get(&fresh, g, in2, tg2);
    MT_CHECK(mt_sampler_window(&fresh, g) == w && same_ints(in, in2, T) && same_ints(tg, tg2, T),
             "sample %llu differs in a fresh sampler", (unsigned long long)g);
  }
  /* the last window ends exactly at or before the last token */
  mt_sampler_get_window(&s, n - 1, in, tg);
  MT_CHECK(tg[T - 1] == (int)tok[n * (uint64_t)T], "last window's last target is not token %llu",
           (unsigned long long)(n * (uint64_t)T));

  mt_dataset_close(&ds2);
  mt_dataset_close(&ds);
  free(in);
  free(tg);
  free(in2);
  free(tg2);
  free(order);
  free(seen);
  free(tok);
}

static void test_sampler(void) {
  /* n_windows: 1, 2, 3, a power of two, just above one, large non-power */
  test_sampler_case(2, 1, 0);
  test_sampler_case(5, 2, 7);
  test_sampler_case(10, 3, 1);
  test_sampler_case(16 * 8 + 1, 8, 3);
  test_sampler_case(17 * 8 + 1, 8, 3);
  test_sampler_case(1000, 7, 1);
  test_sampler_case(1001, 10, 42);
  test_sampler_case(5000, 3, 0xdeadbeefull);
  test_sampler_case(100004, 1, 2);

  /* too short for one sequence */
  uint32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  const char *p = tmp_path("short_seq.bin");
  mt_err e = {0};
  mt_tokens_write(p, "u16", tok, 8, &e);
  mt_dataset ds;
  MT_CHECK(mt_dataset_open(&ds, p, MT_DATA_AUTO, &e) == 0, "open: %s", e.msg);
  mt_sampler s;
  int rc = mt_sampler_init(&s, &ds, 8, 1, &e);
  MT_CHECK(rc != 0 && strstr(e.msg, p) && strstr(e.msg, "shorter than one sequence"),
           "8 tokens with T=8 should fail naming the file: '%s'", e.msg);
  e = (mt_err){0};
  MT_CHECK(mt_sampler_init(&s, &ds, 7, 1, &e) == 0 && s.n_windows == 1,
           "8 tokens with T=7 is one window: %s", e.msg);

  /* a sampler over a view reads the view's tokens */
  mt_dataset train, val;
  mt_dataset_split(&ds, 0.5, &train, &val);
  MT_CHECK(mt_sampler_init(&s, &val, 3, 1, &e) == 0 && s.n_windows == 1, "val sampler: %s", e.msg);
  int in[3], tg[3];
  mt_sampler_get_window(&s, 0, in, tg);
  MT_CHECK(in[0] == 5 && in[2] == 7 && tg[2] == 8, "val window starts at %d, expected 5", in[0]);
  mt_dataset_close(&ds);
}

/* ------------------------------------------------------------------ */
/* validate (collective)                                               */

static void test_validate(MPI_Comm comm) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  enum { N = 4099 };
  const size_t bad1 = 3777, bad2 = 3900; /* near the end: only the last rank's share */
  char path[320];
  if (rank == 0) {
    uint32_t *tok = mt_malloc(N * sizeof *tok);
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)(rng_next() % 256);
    tok[bad1] = 300;
    tok[bad2] = 999;
    snprintf(path, sizeof path, "%s", tmp_path("validate.bin"));
    mt_err e = {0};
    MT_CHECK(mt_tokens_write(path, "llmc", tok, N, &e) == 0, "write: %s", e.msg);
    free(tok);
  }
  MPI_Bcast(path, (int)sizeof path, MPI_CHAR, 0, comm);

  mt_dataset ds;
  mt_err e = {0};
  MT_CHECK(mt_dataset_open(&ds, path, MT_DATA_AUTO, &e) == 0, "open: %s", e.msg);
  char expect[600];
  snprintf(expect, sizeof expect, "%s: token id 300 at offset %zu is >= vocab size 256", path,
           bad1);
  int rc = mt_dataset_validate(&ds, 256, comm, &e);
  MT_CHECK(rc != 0 && strcmp(e.msg, expect) == 0, "validate 256: rc %d '%s', expected '%s'", rc,
           e.msg, expect);
  e = (mt_err){0};
  snprintf(expect, sizeof expect, "%s: token id 999 at offset %zu is >= vocab size 512", path,
           bad2);
  rc = mt_dataset_validate(&ds, 512, comm, &e);
  MT_CHECK(rc != 0 && strcmp(e.msg, expect) == 0, "validate 512: rc %d '%s', expected '%s'", rc,
           e.msg, expect);
  /* vocab 128: about half the tokens are out of range, so every rank finds
   * some; all must report the first in the file, found here by a serial scan */
  size_t first = 0;
  while (mt_dataset_token(&ds, first) < 128) first++;
  snprintf(expect, sizeof expect, "%s: token id %d at offset %zu is >= vocab size 128", path,
           mt_dataset_token(&ds, first), first);
  e = (mt_err){0};
  rc = mt_dataset_validate(&ds, 128, comm, &e);
  MT_CHECK(rc != 0 && strcmp(e.msg, expect) == 0, "validate 128: rc %d '%s', expected '%s'", rc,
           e.msg, expect);
  e = (mt_err){0};
  MT_CHECK(mt_dataset_validate(&ds, 0, comm, &e) != 0 && strstr(e.msg, "vocab size 0"),
           "vocab 0 must be rejected: '%s'", e.msg);
  e = (mt_err){0};
  MT_CHECK(mt_dataset_validate(&ds, 1000, comm, &e) == 0, "validate 1000 failed: %s", e.msg);
  MT_CHECK(mt_dataset_validate(&ds, 65536, comm, &e) == 0, "validate 65536 failed: %s", e.msg);

  /* on a view the offset is the token's place in the file */
  mt_dataset train, val;
  mt_dataset_split(&ds, 0.1, &train, &val);
  e = (mt_err){0};
  rc = mt_dataset_validate(&val, 512, comm, &e);
  MT_CHECK(rc != 0 && strstr(e.msg, "token id 999 at offset 3900 "),
           "validate of val view: rc %d '%s'", rc, e.msg);
  e = (mt_err){0};
  MT_CHECK(mt_dataset_validate(&train, 256, comm, &e) == 0,
           "train view (tokens [0,3690)) is clean: %s", e.msg);
  mt_dataset_close(&ds);

  /* a text file: bytes >= vocab */
  if (rank == 0) {
    snprintf(path, sizeof path, "%s", tmp_path("validate.txt"));
    write_bytes(path, "abc~z", 5);
  }
  MPI_Bcast(path, (int)sizeof path, MPI_CHAR, 0, comm);
  e = (mt_err){0};
  MT_CHECK(mt_dataset_open(&ds, path, MT_DATA_AUTO, &e) == 0, "open: %s", e.msg);
  MT_CHECK(mt_dataset_validate(&ds, 256, comm, &e) == 0, "text with vocab 256: %s", e.msg);
  rc = mt_dataset_validate(&ds, 100, comm, &e);
  MT_CHECK(rc != 0 && strstr(e.msg, "token id 126 at offset 3 is >= vocab size 100"),
           "text with vocab 100: '%s'", e.msg);
  mt_dataset_close(&ds);
  MPI_Barrier(comm); /* rank 0 removes the files after everyone closed them */
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  mt_log_init(g_rank);
  mt_check_set_rank(g_rank);
  snprintf(g_dir, sizeof g_dir, "/tmp/mt_test_data_XXXXXX");
  if (!mkdtemp(g_dir)) {
    fprintf(stderr, "test_data: mkdtemp failed\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  g_rng = 12345 + (uint64_t)g_rank; /* this test's inputs: the ranks' differ */

  test_round_trip();
  test_text();
  test_errors();
  test_wide_and_guarded();
  test_split();
  test_sampler();
  test_validate(MPI_COMM_WORLD);

  cleanup();
  int fails = 0;
  MPI_Allreduce(mt_check_failures(), &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  int rc = mt_check_report("test_data", fails, g_rank == 0);
  MPI_Finalize();
  return rc;
}
