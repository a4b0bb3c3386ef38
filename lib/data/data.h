/* data: token datasets and the global, deterministic sampler.
 * Token files are memory-mapped, never read whole. Formats:
 *   llmc  : llm.c .bin: 256 int32 header (magic 20240520, version, ntok), then
 *           uint16 tokens (version 1) or uint32 tokens (version 2, for
 *           vocabularies beyond 65536); the version is read from the header
 *   u16   : nanoGPT raw uint16 tokens, no header (ids up to 65535)
 *   u32   : raw little-endian uint32 tokens, no header (vocabularies beyond 65536,
 *           e.g. Llama-3's 128256; ids up to 2^31-1 are usable)
 *   text  : any file, one token per byte (byte-level vocabulary, 256)
 *   auto  : llmc when the magic matches, else u16 for *.bin, else text. auto
 *           refuses a *.bin that is an llm.c file with a damaged magic, and one
 *           that reads as uint32 (every second uint16 zero): data.format says
 *           what such a file is.
 * A vocabulary larger than the format can hold (over 65536 for llmc v1 and u16)
 * is refused at validation. Tokens are addressed as uint32 everywhere. 
 * No MPI here except mt_dataset_validate, which splits the scan over a communicator. */
#ifndef MT_DATA_H
#define MT_DATA_H

#include <stddef.h>
#include <stdint.h>
#include <mpi.h>
#include "core/core.h"

typedef struct {
  char path[MT_CFG_STR_MAX];
  mt_data_format format; /* resolved format: llmc | u16 | u32 | text (never auto) */
  void *map;            /* mmap of the whole file */
  size_t map_bytes;
  const uint8_t *bytes; /* text: tokens are bytes */
  const uint16_t *u16;  /* llmc/u16: tokens */
  const uint32_t *u32;  /* u32: tokens */
  size_t begin, end;    /* the token range [begin, end) this view covers */
  int owns_map;
  int guard_slot;       /* the SIGBUS guard's slot for map (guard.c) */
  int guessed;          /* data.format = auto chose the format from the name alone */
  /* the file when it was mapped: size (bytes), modification time (ns),
   * device and inode, for mt_dataset_check */
  int64_t file_bytes, mtime_ns;
  uint64_t dev, ino;
} mt_dataset;

/* Open path in the given format (data.format: auto|llmc|u16|u32|text; a name
 * from a command line: mt_config_enum_parse("data.format", name)). On failure
 * returns non-zero with a one-line message naming the file and what is wrong
 * (missing, not a regular file, bad header, size not a multiple of the token
 * width, ...). Never blocks: a FIFO is refused before it is opened. */
int mt_dataset_open(mt_dataset *ds, const char *path, mt_data_format format, mt_err *e);
/* Split ds into train = first (1-val_fraction) and val = the rest (views that
 * share ds's mapping; ds keeps owning it). */
void mt_dataset_split(const mt_dataset *ds, double val_fraction, mt_dataset *train,
                      mt_dataset *val);
void mt_dataset_close(mt_dataset *ds);
/* Is ds's file still what was mapped (same size, modification time, file),
 * and did no read of its mapping fault (a file cut short turns a read
 * beyond its new end into SIGBUS, caught while tokens are read)? 0, or -1
 * with a runtime error (exit 3) naming the file and what changed. One stat,
 * no MPI: the training loop agrees on it over the ranks between steps. */
int mt_dataset_check(const mt_dataset *ds, mt_err *e);
size_t mt_dataset_ntokens(const mt_dataset *ds);
/* token i (relative to begin) as an int; a u32 id above INT_MAX comes back
 * wrapped, so read tokens only after mt_dataset_validate (vocab <= INT_MAX) */
int mt_dataset_token(const mt_dataset *ds, size_t i);

/* Collective over comm: each rank scans a 1/size share of the tokens; every
 * rank learns whether any token id is >= vocab. On failure returns non-zero
 * on every rank with a message naming the file, the token offset and value,
 * or that the format cannot hold a vocabulary of this size (uint16 formats
 * and vocab > 65536). */
int mt_dataset_validate(const mt_dataset *ds, int vocab, MPI_Comm comm, mt_err *e);

/* Global sampler over one source: its token files (shards, given in order)
 * are cut into windows of T+1 tokens (inputs and shifted targets), per
 * shard: a window never spans two files, a shard of n tokens gives
 * (n-1)/T windows (none when shorter than T+1). The source's windows are
 * numbered shard after shard; each epoch visits every window once in an
 * order given by a keyed bijection of (seed, epoch). Sample g (global
 * index, 0-based, over the whole run) is a pure function of (seed, g), so
 * any dp layout and any resume see the same data. Global batch s is
 * samples [s*G, (s+1)*G). One shard reads exactly as one file always has. */
typedef struct {
  const mt_dataset *ds;     /* the first shard */
  const mt_dataset *shards; /* n_shards shards (the caller keeps them) */
  int n_shards;
  int n_short;              /* shards shorter than T+1 tokens: no window */
  uint64_t *first;          /* n_shards+1 prefix sums of windows (NULL: one shard) */
  int T;
  uint64_t seed;
  uint64_t n_windows;
  int synthetic_vocab; /* > 0: no files; window w's tokens drawn from (seed, w) below it */
} mt_sampler;

int mt_sampler_init(mt_sampler *s, const mt_dataset *ds, int T, uint64_t seed, mt_err *e);
/* over n_shards shards; fails when none holds a window */
int mt_sampler_init_shards(mt_sampler *s, const mt_dataset *shards, int n_shards, int T,
                           uint64_t seed, mt_err *e);
/* Synthetic tokens (no files): 2^40 windows whose T+1 tokens are a hash of
 * (seed, window, position) modulo vocab, so every rank reads the same;
 * what the virtual device and benchmarks train on when no file is asked. */
void mt_sampler_init_synthetic(mt_sampler *s, int vocab, int T, uint64_t seed);
void mt_sampler_free(mt_sampler *s);
/* window index of global sample g */
uint64_t mt_sampler_window(const mt_sampler *s, uint64_t g);
/* inputs (T) and targets (T) of global sample g */
void mt_sampler_get(const mt_sampler *s, uint64_t g, int *inputs, int *targets);
/* sequential (unshuffled) window w, for validation */
void mt_sampler_get_window(const mt_sampler *s, uint64_t w, int *inputs, int *targets);
/* Reading tokens never kills the rank: when the file was cut short under
 * the run, mt_sampler_get and mt_sampler_get_window fill zeros and the
 * dataset's mapping is marked; mt_dataset_check then reports it. */
/* the keyed bijection on [0, n) of (seed, epoch), at i */
uint64_t mt_keyed_permute(uint64_t n, uint64_t seed, uint64_t epoch, uint64_t i);

/* ------------------------------------------------------------------ */
/* sources and blends (sources.c, blend.c)                              */

/* A source: token files named by a spec, a comma-separated list of
 *   a file                 (any format)
 *   a directory            its *.bin files, sorted by name
 *   a glob                 a pattern with * ? or [...], e.g. web/shard_*.bin: the
 *                          matches, sorted by name
 * A list entry or glob that matches nothing, or a directory without *.bin
 * files, is refused. Every file is mapped (mmap) and its descriptor closed
 * at once: hundreds of shards hold no descriptors, only mappings. Under
 * data.format = auto the shards of a source must resolve to one format
 * unless every one of them says so itself (the llm.c magic): a *.bin read as
 * uint16 from its name beside an llm.c file is refused. */
enum { MT_SOURCE_NAME_MAX = 64 };
typedef struct {
  char name[MT_SOURCE_NAME_MAX];
  double weight;     /* normalised: the weights of a blend sum to 1 */
  int n_files;
  mt_dataset *files; /* the opened files (own their mappings) */
  int n_train, n_val;
  mt_dataset *train, *val; /* views of files: training, validation shards */
  int own_val;       /* validation from its own files (else held out) */
  int synthetic_vocab; /* the spec "synthetic:V": tokens drawn below V, no files (else 0) */
} mt_source;

typedef struct {
  int n;
  mt_source *src;
} mt_sources;

/* Expand a spec (above) into paths (malloc'd array of malloc'd strings). */
int mt_source_paths(const char *spec, char ***paths, int *n, mt_err *e);
void mt_source_paths_free(char **paths, int n);

/* The run's sources: data.blend ("W1 [name=]spec1, W2 [name=]spec2": weights
 * positive numbers, normalised) or, when blend is empty, data.train as one
 * source named "train". val: empty (each source holds out the last
 * val_fraction of its tokens: whole shards from the end, the shard the cut
 * falls in split), a spec (one source), or for a blend "name=spec, ..." (the
 * named sources' validation files; the others hold out). No MPI: every
 * rank opens the same files and fails alike. */
int mt_sources_open(mt_sources *ss, const char *train, const char *blend, const char *val,
                    mt_data_format format, double val_fraction, mt_err *e);
void mt_sources_close(mt_sources *ss);
/* Collective: every file's tokens < vocab (mt_dataset_validate). */
int mt_sources_validate(const mt_sources *ss, int vocab, MPI_Comm comm, mt_err *e);
/* mt_dataset_check over every file (no MPI) */
int mt_sources_check(const mt_sources *ss, mt_err *e);
/* What decides the training windows, as a 64-bit hash (never 0): each
 * source's name and weight, and its training shards' file names (not
 * their directories: data may move between systems), formats and token
 * ranges (the held-out part excluded). A checkpoint records it
 * (data_hash); a resume compares. */
uint64_t mt_sources_hash(const mt_sources *ss);

/* A weighted blend of sources' training windows. Sample g goes to a source
 * by a deterministic low-discrepancy schedule computed from g alone in
 * O(sources): source 0 takes floor((g+1) f0) - floor(g f0) of sample g
 * (f0 its weight), the samples it leaves are renumbered and source 1 takes
 * its share f1 = w1 / (w1 + ... + w_last) of those, and so on (Bresenham's
 * line, nested; fractions in 32-bit fixed point, exact integer arithmetic,
 * the same on every rank). Sample g is then the k-th sample of its source
 * (k = the samples before g that went to it), whose window is that source's
 * sampler's sample k: epochs per source, a keyed permutation of each. So
 * a global batch is a pure function of (seed, step), whatever the layout,
 * micro-batch or resume; within any n consecutive samples a source's count
 * is within (sources) of n*weight. One source: exactly its sampler. */
typedef struct {
  int n;
  mt_sampler *src;   /* per source, over its training shards */
  uint64_t *frac;    /* per source: its share of what the sources before it leave, 2^-32 */
} mt_blend;

int mt_blend_init(mt_blend *b, const mt_sources *ss, int T, uint64_t seed, mt_err *e);
void mt_blend_free(mt_blend *b);
/* the source of sample g, and its index k in that source's stream */
int mt_blend_source(const mt_blend *b, uint64_t g, uint64_t *k);
/* window of sample g in its source's numbering; *source set */
uint64_t mt_blend_window(const mt_blend *b, uint64_t g, int *source);
void mt_blend_get(const mt_blend *b, uint64_t g, int *inputs, int *targets);
/* total training windows, over the sources */
uint64_t mt_blend_windows(const mt_blend *b);

/* Write the default corpus (deterministic, generated, English-like text) to
 * path as raw bytes; about nbytes long. Returns 0 on success. */
int mt_corpus_generate(const char *path, size_t nbytes, uint64_t seed, mt_err *e);
/* Write tokens as an llm.c .bin (format "llmc": version 1, uint16 tokens;
 * "llmc2": version 2, uint32 tokens), raw uint16 ("u16") or raw uint32
 * ("u32"). The uint16 formats refuse an id above 65535, naming it. */
int mt_tokens_write(const char *path, const char *format, const uint32_t *tok, size_t n,
                    mt_err *e);

/* Streaming token writer, for token files too large to hold as one array.
 * Writes to "<path>.tmp" and renames it into place on a successful close, so
 * a failed or interrupted write never leaves a truncated file under path.
 * llmc files hold at most INT32_MAX tokens (the header count is an int32). */
typedef struct {
  FILE *f;
  char path[MT_CFG_STR_MAX];
  char tmp_path[MT_CFG_STR_MAX + 8];
  char format[8]; /* llmc | llmc2 | u16 | u32 */
  int llmc;       /* 1: llm.c header */
  size_t width;   /* bytes per token on disk: 2 or 4 */
  size_t n;       /* tokens written so far */
} mt_token_writer;
int mt_token_writer_open(mt_token_writer *w, const char *path, const char *format, mt_err *e);
/* Append n token ids. A uint16 format refuses (and removes the partial file
 * for) an id above 65535, naming the id and its position. */
int mt_token_writer_put(mt_token_writer *w, const uint32_t *tok, size_t n, mt_err *e);
/* Finish the header (llmc), close and rename into place. Returns non-zero
 * (and removes the partial file) when any write failed. */
int mt_token_writer_close(mt_token_writer *w, mt_err *e);
/* Give up: close and remove the partial file. */
void mt_token_writer_abort(mt_token_writer *w);

/* ------------------------------------------------------------------ */
/* variable-length sequences (varlen.c): data.seq_policy = varlen       */

/* What a step's plan is cut to: rows of T positions (model.seq_len), each
 * held by one dp rank and split over its cp ranks in K = T / chunk_len
 * chunks, chunk j on cp rank owner(j) (ring, zigzag: j < cp ? j : 2 cp - 1
 * - j; else j); row_cap: the most rows a dp rank can take; lin: the work of
 * a position, att: of a visible (query, key) pair (integers: every rank
 * computes the same plan). */
typedef struct {
  int T, dp, cp, chunk_len, ring, row_cap;
  long long lin, att;
} mt_varlen_shape;

/* A step's plan: sequence i (of n_segs) at positions [pos[i], pos[i] +
 * len[i]) of row row[i]; rows_per_rank rows per dp rank, dp rank d's being
 * [d rows_per_rank, (d+1) rows_per_rank), those whose sequences cross a
 * chunk boundary first; order: the sequences by (row, position), row r's
 * being order[row_first[r] .. row_first[r+1]); local[r]: no sequence of row
 * r crosses a chunk boundary (attention needs no cp exchange); pad: the
 * positions no sequence holds; imbalance: the most work of a (dp, cp) rank
 * over the mean; fallback: the rows would not fit row_cap, so the windows
 * are kept as they are (row w = window w). */
typedef struct {
  int n_segs, n_rows, rows_per_rank;
  int *row, *pos, *order, *row_first;
  unsigned char *local;
  long long pad;
  double imbalance;
  int fallback;
} mt_varlen_plan;

/* The plan of n sequences (window win[i] at start[i], len[i] positions,
 * none longer than T) of a step of G windows (lib/data/varlen.c says how).
 * Deterministic: a function of its arguments alone. */
void mt_varlen_plan_make(mt_varlen_plan *p, const mt_varlen_shape *s, const int *win,
                         const int *start, const int *len, int n, int G);
void mt_varlen_plan_free(mt_varlen_plan *p);
/* the placements as a 64-bit hash (a plan's identity across reruns) */
uint64_t mt_varlen_plan_hash(const mt_varlen_plan *p);

/* The longest document of a source's training files (a document begins at
 * each eot token and at a file's start; a file's end ends one): its length,
 * file and first token's offset. Collective over comm: each rank scans a
 * share of every file. */
typedef struct {
  long long len, offset;
  char path[MT_CFG_STR_MAX];
} mt_doc_longest;
void mt_sources_longest_document(const mt_sources *ss, int eot, MPI_Comm comm,
                                 mt_doc_longest *out);

#endif
