/* meshdata: make and inspect token files for meshtrain.
 *
 *   meshdata corpus OUT [--bytes N] [--seed S]   the default generated corpus, as text
 *   meshdata encode IN OUT [--format llmc|u16|u32] [--from text|ids]
 *                                                 text or token ids -> token file
 *   meshdata info FILE [--format auto|llmc|u16|u32|text]
 *   meshdata tokenize INPUT... --tokenizer FILE --out DIR [...]
 *                                                 text/JSONL -> llm.c shards
 *
 * Runs on one process; under mpirun only rank 0 works and every rank exits
 * with its status. tokenize is apps/meshdata_tokenize.py (Hugging Face
 * tokenizers), run by python3 in place of this program, before MPI starts. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "data/data.h"

static const char *const PROG = "meshdata";

static void usage(FILE *f) {
  fprintf(f,
          "usage: meshdata COMMAND ARGS [OPTIONS]\n"
          "\n"
          "commands:\n"
          "  corpus OUT [--bytes N] [--seed S]\n"
          "      write the default corpus (generated English-like text) to OUT.\n"
          "      --bytes N   size in bytes; suffix K, M or G for KiB, MiB, GiB (default 4M)\n"
          "      --seed S    generator seed, an unsigned integer (default 1)\n"
          "  encode IN OUT [--format llmc|llmc2|u16|u32] [--from text|ids]\n"
          "      write the token file OUT from IN.\n"
          "      --from      text: every byte of IN is a token (vocab 256; default)\n"
          "                  ids:  IN holds decimal token ids separated by white space,\n"
          "                        as a tokenizer prints them (any vocabulary)\n"
          "      --format    llmc: llm.c .bin with a 1024-byte header (default)\n"
          "                  llmc2: llm.c .bin version 2: uint32 tokens after the\n"
          "                        header, for vocabularies beyond 65536\n"
          "                  u16:  raw uint16 tokens (nanoGPT); llmc and u16 hold ids\n"
          "                        up to 65535 and refuse larger ones\n"
          "                  u32:  raw uint32 tokens, for vocabularies beyond 65536\n"
          "                        (train with data.format = u32)\n"
          "  lengths SPEC --eot N [--format auto|llmc|u16|u32|text] [--out FILE]\n"
          "      the histogram of document lengths of a source (a file, a directory, a glob\n"
          "      or a comma-separated list, as data.train): a document begins at each\n"
          "      token N and at each file's start. Writes \"length count\" lines (FILE, or\n"
          "      stdout) after a '#' line of totals; plan.doc_lengths reads it.\n"
          "  info FILE [--format auto|llmc|u16|u32|text]\n"
          "      print the format, token count and smallest/largest token id.\n"
          "      --format    how to read FILE (default auto: llmc when the llm.c magic\n"
          "                  matches, else u16 for *.bin, else text)\n"
          "  tokenize INPUT... --tokenizer FILE --out DIR [--field NAME] [--lines]\n"
          "           [--workers N] [--shard-tokens N] [--eot-token NAME] [--vocab-limit N]\n"
          "           [--val-docs N] [--prefix NAME] [--overwrite]\n"
          "      tokenize .txt / .jsonl[.gz] files, directories or globs with a Hugging Face\n"
          "      tokenizer.json into DIR/PREFIX_000000.bin ... (llm.c shards, uint16 tokens\n"
          "      up to a 65536 vocabulary, else uint32: version 2) and DIR/manifest.json.\n"
          "      Needs python3 with the tokenizers package; meshdata tokenize --help\n"
          "      says more.\n"
          "  --help, -h\n"
          "      this text.\n"
          "\n"
          "examples:\n"
          "  meshdata corpus inputs/data/corpus.txt\n"
          "  meshdata encode inputs/data/corpus.txt inputs/data/corpus.bin\n"
          "  meshdata encode ids.txt train.u32.bin --from ids --format u32\n"
          "  meshdata info inputs/data/corpus.bin\n"
          "  meshdata tokenize docs.jsonl --tokenizer tokenizer.json --out shards --workers 4\n");
}

/* ------------------------------------------------------------------ */
/* argument parsing                                                    */

enum { MAX_POS = 4, MAX_OPT = 4 };

typedef struct {
  const char *pos[MAX_POS];
  int npos;
  const char *opt_name[MAX_OPT];
  const char *opt_value[MAX_OPT];
  int nopt;
  int help;
} args;

/* Split argv (after the command) into positionals and --name value /
 * --name=value options; allowed is "|a|b|" listing the option names. */
static int split_args(const char *cmd, int argc, char **argv, const char *allowed, args *a,
                      mt_err *e) {
  memset(a, 0, sizeof *a);
  for (int i = 0; i < argc; i++) {
    const char *s = argv[i];
    if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
      a->help = 1;
      continue;
    }
    if (strncmp(s, "--", 2) != 0 || s[2] == '\0') {
      if (a->npos == MAX_POS) {
        mt_err_set(e, "%s: too many arguments at '%s' (see meshdata --help)", cmd, s);
        return 1;
      }
      a->pos[a->npos++] = s;
      continue;
    }
    const char *name = s + 2, *eq = strchr(name, '='), *value;
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    char key[64];
    if (len == 0 || len >= sizeof key - 2) {
      mt_err_set(e, "%s: unknown option '%s' (see meshdata --help)", cmd, s);
      return 1;
    }
    snprintf(key, sizeof key, "|%.*s|", (int)len, name);
    if (!strstr(allowed, key)) {
      mt_err_set(e, "%s: unknown option '--%.*s' (see meshdata --help)", cmd, (int)len, name);
      return 1;
    }
    if (eq)
      value = eq + 1;
    else if (i + 1 < argc)
      value = argv[++i];
    else {
      mt_err_set(e, "%s: option '--%s' needs a value", cmd, name);
      return 1;
    }
    if (a->nopt == MAX_OPT) {
      mt_err_set(e, "%s: too many options", cmd);
      return 1;
    }
    a->opt_name[a->nopt] = name;
    a->opt_value[a->nopt++] = value;
  }
  return 0;
}

static int need_positionals(const char *cmd, const args *a, int n, const char *what,
                            mt_err *e) {
  if (a->npos != n) {
    mt_err_set(e, "%s: expected %s, got %d argument%s (see meshdata --help)", cmd, what,
               a->npos, a->npos == 1 ? "" : "s");
    return 1;
  }
  return 0;
}

/* what a command does after parse_args: go on, return 0 (its --help was
 * printed), or return 1 (e says why) */
enum { ARGS_OK, ARGS_HELP, ARGS_BAD };

/* A command's arguments: split (split_args), then --help (usage on stdout),
 * or exactly n_pos positionals, which `what` names in the error. */
static int parse_args(const char *cmd, int argc, char **argv, const char *allowed, int n_pos,
                      const char *what, args *a, mt_err *e) {
  if (split_args(cmd, argc, argv, allowed, a, e)) return ARGS_BAD;
  if (a->help) {
    usage(stdout);
    return ARGS_HELP;
  }
  return need_positionals(cmd, a, n_pos, what, e) ? ARGS_BAD : ARGS_OK;
}

/* the last value given for option name, or def */
static const char *opt(const args *a, const char *name, const char *def) {
  const char *v = def;
  size_t len = strlen(name);
  for (int i = 0; i < a->nopt; i++)
    if (strncmp(a->opt_name[i], name, len) == 0 &&
        (a->opt_name[i][len] == '\0' || a->opt_name[i][len] == '='))
      v = a->opt_value[i];
  return v;
}

static int parse_u64(const char *s, uint64_t *out) {
  if (!s || !*s || *s == '-' || *s == '+') return 1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end) return 1;
  *out = (uint64_t)v;
  return 0;
}

/* "4096", "64K", "4M", "1G" (binary multiples) */
static int parse_bytes(const char *s, uint64_t *out) {
  if (!s || !*s || *s == '-' || *s == '+') return 1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return 1;
  unsigned shift = 0;
  if (*end) {
    switch (*end) {
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    default: return 1;
    }
    if (end[1] != '\0') return 1;
  }
  if (v > (UINT64_MAX >> shift)) return 1;
  *out = (uint64_t)v << shift;
  return 0;
}

/* ------------------------------------------------------------------ */
/* commands                                                            */

static int cmd_corpus(int argc, char **argv, mt_err *e) {
  args a;
  int st = parse_args("corpus", argc, argv, "|bytes|seed|", 1, "OUT", &a, e);
  if (st != ARGS_OK) return st == ARGS_BAD;
  uint64_t nbytes = 0, seed = 0;
  const char *sb = opt(&a, "bytes", "4M"), *ss = opt(&a, "seed", "1");
  if (parse_bytes(sb, &nbytes) || nbytes == 0 || nbytes > (uint64_t)SIZE_MAX) {
    mt_err_set(e, "corpus: --bytes '%s' is not a positive size (e.g. 4096, 64K, 4M)", sb);
    return 1;
  }
  if (parse_u64(ss, &seed)) {
    mt_err_set(e, "corpus: --seed '%s' is not an unsigned integer", ss);
    return 1;
  }
  double t0 = mt_now();
  if (mt_corpus_generate(a.pos[0], (size_t)nbytes, seed, e)) return 1;
  printf("corpus: wrote %llu bytes (seed %llu) to %s in %.2f s\n", (unsigned long long)nbytes,
         (unsigned long long)seed, a.pos[0], mt_now() - t0);
  return 0;
}

/* Stream the decimal token ids of a text file (separated by white space)
 * into w. Errors name the file, the line and the offending text. */
static int encode_ids(const mt_dataset *in, mt_token_writer *w, mt_err *e) {
  enum { CHUNK = 1 << 16 };
  static uint32_t chunk[CHUNK];
  size_t n = mt_dataset_ntokens(in), m = 0, line = 1;
  const uint8_t *p = in->bytes;
  for (size_t i = 0; i < n;) {
    uint8_t c = p[i];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      line += c == '\n';
      i++;
      continue;
    }
    size_t start = i;
    uint64_t id = 0;
    while (i < n && p[i] >= '0' && p[i] <= '9' && id <= UINT32_MAX)
      id = id * 10 + (uint64_t)(p[i++] - '0');
    int sep = i == n || p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n';
    if (i == start || !sep || id > UINT32_MAX) {
      size_t len = 0;
      while (start + len < n && len < 24 && p[start + len] > ' ' && p[start + len] < 0x7f) len++;
      mt_err_set(e, "encode: %s:%zu: '%.*s' is not a token id (a decimal number up to %lu)",
                 in->path, line, (int)len, (const char *)p + start, (unsigned long)UINT32_MAX);
      return 1;
    }
    chunk[m++] = (uint32_t)id;
    if (m == CHUNK) {
      if (mt_token_writer_put(w, chunk, m, e)) return 1;
      m = 0;
    }
  }
  return m ? mt_token_writer_put(w, chunk, m, e) : 0;
}

static int cmd_encode(int argc, char **argv, mt_err *e) {
  args a;
  int st = parse_args("encode", argc, argv, "|format|from|", 2, "IN OUT", &a, e);
  if (st != ARGS_OK) return st == ARGS_BAD;
  const char *fmt = opt(&a, "format", "llmc"), *from = opt(&a, "from", "text");
  if (strcmp(fmt, "llmc") != 0 && strcmp(fmt, "llmc2") != 0 && strcmp(fmt, "u16") != 0 &&
      strcmp(fmt, "u32") != 0) {
    mt_err_set(e, "encode: --format '%s' is not one of llmc|llmc2|u16|u32", fmt);
    return 1;
  }
  int ids = strcmp(from, "ids") == 0;
  if (!ids && strcmp(from, "text") != 0) {
    mt_err_set(e, "encode: --from '%s' is not one of text|ids", from);
    return 1;
  }
  mt_dataset in;
  if (mt_dataset_open(&in, a.pos[0], MT_DATA_TEXT, e)) return 1;
  mt_token_writer w;
  if (mt_token_writer_open(&w, a.pos[1], fmt, e)) {
    mt_dataset_close(&in);
    return 1;
  }
  size_t n = mt_dataset_ntokens(&in);
  int rc = 0;
  if (ids) {
    rc = encode_ids(&in, &w, e);
  } else {
    /* stream in chunks: the input stays mapped, never copied whole */
    enum { CHUNK = 1 << 16 };
    static uint32_t chunk[CHUNK];
    for (size_t i = 0; i < n && !rc; i += CHUNK) {
      size_t m = n - i < CHUNK ? n - i : CHUNK;
      for (size_t k = 0; k < m; k++) chunk[k] = in.bytes[i + k];
      rc = mt_token_writer_put(&w, chunk, m, e);
    }
  }
  size_t ntok = w.n;
  if (!rc) rc = mt_token_writer_close(&w, e);
  else mt_token_writer_abort(&w);
  mt_dataset_close(&in);
  if (rc) return 1;
  if (ids)
    printf("encode: %zu token ids of %s -> %zu tokens (%s) in %s\n", ntok, a.pos[0], ntok, fmt,
           a.pos[1]);
  else
    printf("encode: %zu bytes of %s -> %zu tokens (%s, vocab 256) in %s\n", n, a.pos[0], ntok,
           fmt, a.pos[1]);
  return 0;
}

/* --format's value (default auto) as a data.format; -1 with e set naming
 * what (the file or the spec) */
static int format_opt(const args *a, const char *what, mt_err *e) {
  const char *fmt = opt(a, "format", "auto");
  const int format = mt_config_enum_parse("data.format", fmt);
  if (format < 0)
    mt_err_set(e, "%s: unknown data format '%s' (expected auto|llmc|u16|u32|text)", what, fmt);
  return format;
}

static int cmd_info(int argc, char **argv, mt_err *e) {
  args a;
  int st = parse_args("info", argc, argv, "|format|", 1, "FILE", &a, e);
  if (st != ARGS_OK) return st == ARGS_BAD;
  mt_dataset ds;
  const int format = format_opt(&a, a.pos[0], e);
  if (format < 0) return 1;
  if (mt_dataset_open(&ds, a.pos[0], (mt_data_format)format, e)) return 1;
  size_t n = mt_dataset_ntokens(&ds);
  uint32_t lo = UINT32_MAX, hi = 0;
  if (ds.bytes) {
    for (size_t i = 0; i < n; i++) {
      uint32_t t = ds.bytes[i];
      lo = t < lo ? t : lo;
      hi = t > hi ? t : hi;
    }
  } else if (ds.u16) {
    for (size_t i = 0; i < n; i++) {
      uint32_t t = ds.u16[i];
      lo = t < lo ? t : lo;
      hi = t > hi ? t : hi;
    }
  } else {
    for (size_t i = 0; i < n; i++) {
      uint32_t t = ds.u32[i];
      lo = t < lo ? t : lo;
      hi = t > hi ? t : hi;
    }
  }
  printf("file:         %s\n", ds.path);
  printf("format:       %s\n", mt_data_format_name(ds.format));
  printf("bytes:        %zu\n", ds.map_bytes);
  printf("tokens:       %zu\n", n);
  printf("min token id: %lu\n", (unsigned long)lo);
  printf("max token id: %lu (needs vocab_size >= %llu)\n", (unsigned long)hi,
         (unsigned long long)hi + 1);
  mt_dataset_close(&ds);
  return 0;
}

/* lengths: the document lengths of a source's files, counted per length */
static int cmd_lengths(int argc, char **argv, mt_err *e) {
  args a;
  int st = parse_args("lengths", argc, argv, "|eot|format|out|", 1, "SPEC", &a, e);
  if (st != ARGS_OK) return st == ARGS_BAD;
  uint64_t eot;
  if (!opt(&a, "eot", NULL) || parse_u64(opt(&a, "eot", NULL), &eot) || eot > UINT32_MAX) {
    mt_err_set(e, "lengths: --eot N, the end-of-text token id, is required (a non-negative "
                  "integer)");
    return 1;
  }
  const int format = format_opt(&a, a.pos[0], e);
  if (format < 0) return 1;
  char **paths = NULL;
  int n = 0;
  if (mt_source_paths(a.pos[0], &paths, &n, e)) return 1;
  size_t cap = 1 << 16, docs = 0, tokens = 0;
  uint64_t *count = mt_calloc(cap, sizeof(uint64_t));
  int rc = 0;
  for (int f = 0; f < n && rc == 0; f++) {
    mt_dataset ds;
    if (mt_dataset_open(&ds, paths[f], (mt_data_format)format, e)) {
      rc = 1;
      break;
    }
    size_t nt = mt_dataset_ntokens(&ds), len = 0;
    for (size_t i = 0; i <= nt; i++) {
      if (i < nt && (i == 0 || (uint64_t)mt_dataset_token(&ds, i) != eot)) {
        len++;
        continue;
      }
      if (len > 0) { /* a document ends: before an end-of-text token, or at the end */
        if (len >= cap) {
          size_t grown = cap;
          while (grown <= len) grown *= 2;
          count = realloc(count, grown * sizeof(uint64_t));
          if (!count) mt_die("out of memory");
          memset(count + cap, 0, (grown - cap) * sizeof(uint64_t));
          cap = grown;
        }
        count[len]++, docs++, tokens += len;
      }
      len = 1;
    }
    mt_dataset_close(&ds);
  }
  mt_source_paths_free(paths, n);
  if (rc == 0 && docs == 0) {
    mt_err_set(e, "lengths: %s holds no token", a.pos[0]);
    rc = 1;
  }
  const char *out = opt(&a, "out", NULL);
  FILE *fo = rc == 0 ? (out ? fopen(out, "w") : stdout) : NULL;
  if (rc == 0 && !fo) {
    mt_err_set(e, "lengths: cannot write %s", out);
    rc = 1;
  }
  if (fo) {
    size_t seen = 0, median = 0, p90 = 0, p99 = 0;
    for (size_t l = 1; l < cap; l++) {
      seen += count[l];
      if (!median && 2 * seen >= docs) median = l;
      if (!p90 && 10 * seen >= 9 * docs) p90 = l;
      if (!p99 && 100 * seen >= 99 * docs) p99 = l;
    }
    fprintf(fo, "# %zu documents, %zu tokens, mean %.1f, median %zu, 90th percentile %zu, 99th "
                "%zu (meshdata lengths %s --eot %llu)\n",
            docs, tokens, (double)tokens / (double)docs, median, p90, p99, a.pos[0],
            (unsigned long long)eot);
    for (size_t l = 1; l < cap; l++)
      if (count[l]) fprintf(fo, "%zu %llu\n", l, (unsigned long long)count[l]);
    if (out) fclose(fo);
  }
  free(count);
  return rc;
}

/* tokenize: replace this process with python3 running meshdata_tokenize.py
 * (with argv's arguments). The script is looked for beside the executable
 * (installed: bin/../share/meshtrain) and then in the source tree it was
 * built from; python3 is the one found at build time, else the PATH's. */
static int cmd_tokenize(int argc, char **argv) {
  static const char *const SCRIPT = "meshdata_tokenize.py";
  char exe[1024] = "", script[1200] = "";
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  char *slash = n > 0 ? strrchr(exe, '/') : NULL;
  if (slash) *slash = '\0';
  if (slash) snprintf(script, sizeof script, "%s/../share/meshtrain/%s", exe, SCRIPT);
  if (!script[0] || access(script, R_OK) != 0)
    snprintf(script, sizeof script, "%s/apps/%s", MT_SOURCE_DIR, SCRIPT);
  if (access(script, R_OK) != 0) {
    fprintf(stderr, "%s: error: tokenize: %s is neither in %s/../share/meshtrain nor in "
            "%s/apps\n", PROG, SCRIPT, exe, MT_SOURCE_DIR);
    return MT_EXIT_BADINPUT;
  }
  const char *python = access(MT_PYTHON3, X_OK) == 0 ? MT_PYTHON3 : "python3";
  char **script_argv = calloc((size_t)argc + 1, sizeof *script_argv);
  if (!script_argv) return MT_EXIT_RUNTIME;
  script_argv[0] = (char *)python;
  script_argv[1] = script;
  for (int i = 2; i < argc; i++) script_argv[i] = argv[i];
  execvp(python, script_argv);
  fprintf(stderr, "%s: error: tokenize needs python3 with the tokenizers package (%s: %s); "
          "install them: apt-get install python3 python3-pip && python3 -m pip install "
          "tokenizers\n", PROG, python, strerror(errno));
  free(script_argv);
  return MT_EXIT_BADINPUT;
}

static int run(int argc, char **argv, mt_err *e) {
  if (argc < 2) {
    usage(stderr);
    mt_err_set(e, "no command given (corpus, encode, info or tokenize)");
    return 1;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(cmd, "corpus") == 0) return cmd_corpus(argc - 2, argv + 2, e);
  if (strcmp(cmd, "encode") == 0) return cmd_encode(argc - 2, argv + 2, e);
  if (strcmp(cmd, "info") == 0) return cmd_info(argc - 2, argv + 2, e);
  if (strcmp(cmd, "lengths") == 0) return cmd_lengths(argc - 2, argv + 2, e);
  mt_err_set(e,
             "unknown command '%s' (expected corpus, encode, info, lengths or tokenize; see "
             "meshdata --help)",
             cmd);
  return 1;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "tokenize") == 0) return cmd_tokenize(argc, argv);
  mt_mpi_init(&argc, &argv, MPI_THREAD_SINGLE);
  int rank = mt_log_rank();
  mt_err e = {0};
  int rc = 0;
  if (rank == 0) {
    rc = run(argc, argv, &e) ? MT_EXIT_BADINPUT : MT_EXIT_OK;
    if (rc) mt_err_report(&e, PROG);
  }
  MT_MPI_CHECK(MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD));
  MT_MPI_CHECK(MPI_Finalize());
  return rc;
}
