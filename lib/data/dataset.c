/* Token datasets: open (mmap) and validate token files, split them into
 * train/val views, and write token files.
 *
 * A dataset maps the whole file read-only; the kernel pages tokens in as the
 * sampler touches them, so a 100 GB file costs no resident memory up front and
 * every rank can read any token without communication. */
#include "data/data_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* llm.c .bin layout: 256 int32 header words (magic, version, token count),
 * then the tokens: uint16 (version 1) or uint32 (version 2, vocabularies
 * beyond 65536). */
enum { LLMC_HEADER_INTS = 256, LLMC_MAGIC = 20240520, LLMC_VERSION = 1, LLMC_VERSION_U32 = 2 };
#define LLMC_HEADER_BYTES ((size_t)LLMC_HEADER_INTS * sizeof(int32_t))

/* Token files are little-endian on disk; we read them in place. */
_Static_assert(sizeof(uint16_t) == 2 && sizeof(uint32_t) == 4 && sizeof(int32_t) == 4,
               "token layout");
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "meshtrain reads token files in place and needs a little-endian host"
#endif

/* Largest token id a dataset's storage can hold: 255 (text), 65535 (llmc
 * version 1, u16), 2^32-1 (u32, llmc version 2). */
static uint64_t max_id(const mt_dataset *ds) {
  return ds->bytes ? 255 : ds->u16 ? UINT16_MAX : UINT32_MAX;
}

/* auto, a *.bin without the llm.c magic: is it an llm.c file whose header was
 * damaged? Real tokens never start with 1012 zero bytes (header words 3..255,
 * which llm.c leaves zero), nor with a count that matches the body exactly. */
static int looks_like_llmc(const void *map, size_t file_bytes) {
  if (file_bytes < LLMC_HEADER_BYTES) return 0;
  int32_t h[LLMC_HEADER_INTS];
  memcpy(h, map, sizeof h);
  int tail_zero = 1;
  for (int i = 3; i < LLMC_HEADER_INTS && tail_zero; i++) tail_zero = h[i] == 0;
  return tail_zero ||
         (h[2] > 0 && (size_t)h[2] * sizeof(uint16_t) == file_bytes - LLMC_HEADER_BYTES);
}

/* auto, a *.bin read as uint16: is it really uint32 tokens? Ids below 65536
 * stored as little-endian uint32 put a zero in every second uint16; a real
 * uint16 token stream is never zero at all of its first odd positions. */
static int looks_like_u32(const uint16_t *u16, size_t ntok) {
  size_t n = ntok / 2 < 4096 ? ntok / 2 : 4096;
  if (n < 16) return 0;
  int any_nonzero_even = 0;
  for (size_t i = 0; i < n; i++) {
    if (u16[2 * i + 1] != 0) return 0;
    any_nonzero_even |= u16[2 * i] != 0;
  }
  return any_nonzero_even;
}

/* The header of an llm.c file of file_bytes bytes: returns the token count
 * and sets *width (bytes per token: 2 for version 1, 4 for version 2), or
 * sets e ("bad llm.c header: ...") and returns 0. */
static size_t llmc_check_header(const char *path, const void *map, size_t file_bytes,
                                size_t *width, mt_err *e) {
  if (file_bytes < LLMC_HEADER_BYTES) {
    mt_err_set(e, "%s: bad llm.c header: file is %zu bytes, shorter than the %zu-byte header",
               path, file_bytes, LLMC_HEADER_BYTES);
    return 0;
  }
  int32_t h[3];
  memcpy(h, map, sizeof h);
  if (h[0] != LLMC_MAGIC) {
    mt_err_set(e, "%s: bad llm.c header: magic %d, expected %d", path, (int)h[0], LLMC_MAGIC);
    return 0;
  }
  if (h[1] != LLMC_VERSION && h[1] != LLMC_VERSION_U32) {
    mt_err_set(e, "%s: bad llm.c header: version %d, expected %d (uint16 tokens) or %d (uint32 "
               "tokens)", path, (int)h[1], LLMC_VERSION, LLMC_VERSION_U32);
    return 0;
  }
  *width = h[1] == LLMC_VERSION ? sizeof(uint16_t) : sizeof(uint32_t);
  if (h[2] <= 0) {
    mt_err_set(e, "%s: bad llm.c header: token count %d, expected > 0", path, (int)h[2]);
    return 0;
  }
  size_t ntok = (size_t)h[2];
  size_t body = file_bytes - LLMC_HEADER_BYTES;
  if (body != ntok * *width) {
    mt_err_set(e,
               "%s: bad llm.c header: header says %zu tokens (%zu bytes) but the file holds "
               "%zu bytes after the header (%s)",
               path, ntok, ntok * *width, body,
               body < ntok * *width ? "truncated" : "trailing bytes");
    return 0;
  }
  return ntok;
}

int mt_dataset_open(mt_dataset *ds, const char *path, mt_data_format format, mt_err *e) {
  memset(ds, 0, sizeof *ds);
  if (!path || !*path) {
    mt_err_set(e, "data file path is empty");
    return -1;
  }
  if ((unsigned)format > MT_DATA_TEXT) {
    mt_err_set(e, "%s: unknown data format %d", path, (int)format);
    return -1;
  }
  if (strlen(path) >= sizeof ds->path) {
    mt_err_set(e, "%.64s...: path longer than %zu characters", path, sizeof ds->path - 1);
    return -1;
  }

  /* stat before open: opening a FIFO (or a tty) for reading blocks until a
   * writer appears, so a named pipe given as data.train would hang every rank */
  struct stat st;
  if (stat(path, &st) != 0) {
    int err = errno;
    mt_err_set(e, "%s: cannot open: %s%s", path, strerror(err),
               err == ENOENT ? " (meshdata corpus PATH writes a corpus; meshdata tokenize makes "
                               "shards of text; data.train = synthetic trains on drawn tokens)"
                             : "");
    return -1;
  }
  if (S_ISDIR(st.st_mode)) {
    mt_err_set(e, "%s: is a directory, expected a token file", path);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    mt_err_set(e, "%s: not a regular file (%s), expected a token file", path,
               S_ISFIFO(st.st_mode) ? "a named pipe" : S_ISCHR(st.st_mode) ? "a device"
               : S_ISSOCK(st.st_mode) ? "a socket" : "a special file");
    return -1;
  }
  /* O_NONBLOCK: should the path turn into a FIFO between stat and open, the
   * open returns at once and fstat below refuses it */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    mt_err_set(e, "%s: cannot open: %s", path, strerror(errno));
    return -1;
  }
  if (fstat(fd, &st) != 0) {
    mt_err_set(e, "%s: cannot stat: %s", path, strerror(errno));
    close(fd);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    mt_err_set(e, "%s: not a regular file, expected a token file", path);
    close(fd);
    return -1;
  }
  if (st.st_size == 0) {
    mt_err_set(e, "%s: empty file (no tokens)", path);
    close(fd);
    return -1;
  }
  size_t bytes = (size_t)st.st_size;
  void *map = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_errno = errno;
  close(fd); /* the mapping keeps the file alive */
  if (map == MAP_FAILED) {
    mt_err_set(e, "%s: cannot mmap %zu bytes: %s", path, bytes, strerror(map_errno));
    return -1;
  }

  mt_data_format fmt = format;
  int auto_bin = 0; /* auto chose u16 from the name alone */
  if (fmt == MT_DATA_AUTO) {
    int32_t magic = 0;
    if (bytes >= LLMC_HEADER_BYTES) memcpy(&magic, map, sizeof magic);
    if (magic == LLMC_MAGIC) {
      fmt = MT_DATA_LLMC;
    } else if (mt_data_has_suffix(path, ".bin") && looks_like_llmc(map, bytes)) {
      mt_err_set(e,
                 "%s: bad llm.c header: magic %d, expected %d, but the rest of the header is "
                 "llm.c's (damaged file? set data.format = u16 to read it as raw tokens)",
                 path, (int)magic, LLMC_MAGIC);
      munmap(map, bytes);
      return -1;
    } else if (mt_data_has_suffix(path, ".bin")) {
      fmt = MT_DATA_U16;
      auto_bin = 1;
    } else {
      fmt = MT_DATA_TEXT;
    }
  }

  size_t ntok = 0;
  if (fmt == MT_DATA_LLMC) {
    size_t width = 0;
    ntok = llmc_check_header(path, map, bytes, &width, e);
    if (ntok == 0) {
      munmap(map, bytes);
      return mt_err_pass(e);
    }
    const char *body = (const char *)map + LLMC_HEADER_BYTES;
    if (width == sizeof(uint16_t)) ds->u16 = (const uint16_t *)body;
    else ds->u32 = (const uint32_t *)body;
  } else if (fmt == MT_DATA_U16 || fmt == MT_DATA_U32) {
    size_t width = fmt == MT_DATA_U16 ? sizeof(uint16_t) : sizeof(uint32_t);
    if (bytes % width != 0) {
      mt_err_set(e, "%s: %s token file is %zu bytes, not a multiple of %zu (odd size)", path,
                 mt_data_format_name(fmt), bytes, width);
      munmap(map, bytes);
      return -1;
    }
    ntok = bytes / width;
    if (width == sizeof(uint32_t)) {
      ds->u32 = (const uint32_t *)map;
    } else {
      ds->u16 = (const uint16_t *)map;
      if (auto_bin && looks_like_u32(ds->u16, ntok)) {
        mt_err_set(e,
                   "%s: data.format = auto reads *.bin as uint16 tokens, but every second "
                   "uint16 is 0, as in a uint32 token file: set data.format = u32 (or u16)",
                   path);
        munmap(map, bytes);
        return -1;
      }
    }
  } else { /* text */
    ntok = bytes;
    ds->bytes = (const uint8_t *)map;
  }

  snprintf(ds->path, sizeof ds->path, "%s", path);
  ds->format = fmt;
  ds->guessed = auto_bin || (format == MT_DATA_AUTO && fmt == MT_DATA_TEXT);
  /* what the file was when mapped: a change under the run is seen
   * (mt_dataset_check) */
  ds->file_bytes = (int64_t)st.st_size;
  ds->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
  ds->dev = (uint64_t)st.st_dev;
  ds->ino = (uint64_t)st.st_ino;
  mt_data_guard_install();
  ds->map = map;
  ds->map_bytes = bytes;
  ds->guard_slot = mt_data_guard_slot(map, bytes);
  ds->begin = 0;
  ds->end = ntok;
  ds->owns_map = 1;
  return 0;
}

void mt_dataset_split(const mt_dataset *ds, double val_fraction, mt_dataset *train,
                      mt_dataset *val) {
  if (!(val_fraction > 0.0)) val_fraction = 0.0; /* also catches NaN */
  if (val_fraction > 1.0) val_fraction = 1.0;
  size_t n = mt_dataset_ntokens(ds);
  size_t nval = (size_t)((double)n * val_fraction);
  if (nval > n) nval = n;
  size_t cut = ds->end - nval;
  mt_dataset view = *ds;
  view.owns_map = 0;
  if (train) {
    *train = view;
    train->end = cut;
  }
  if (val) {
    *val = view;
    val->begin = cut;
  }
}

void mt_dataset_close(mt_dataset *ds) {
  if (!ds) return;
  if (ds->owns_map && ds->map) {
    mt_data_guard_forget(ds->map);
    munmap(ds->map, ds->map_bytes);
  }
  memset(ds, 0, sizeof *ds);
}

size_t mt_dataset_ntokens(const mt_dataset *ds) { return ds->end - ds->begin; }

/* token at absolute index k, as stored (up to 2^32-1) */
static uint32_t token_at(const mt_dataset *ds, size_t k) {
  return ds->bytes ? ds->bytes[k] : ds->u16 ? ds->u16[k] : ds->u32[k];
}

int mt_dataset_token(const mt_dataset *ds, size_t i) { return (int)token_at(ds, ds->begin + i); }

/* First index in [lo, hi) (absolute) whose token is >= vocab, or SIZE_MAX. */
static size_t first_bad_token(const mt_dataset *ds, size_t lo, size_t hi, int vocab) {
  if ((uint64_t)vocab > max_id(ds)) return SIZE_MAX;
  const uint32_t v = (uint32_t)vocab;
  if (ds->bytes) {
    for (size_t k = lo; k < hi; k++)
      if (ds->bytes[k] >= v) return k;
  } else if (ds->u16) {
    for (size_t k = lo; k < hi; k++)
      if (ds->u16[k] >= v) return k;
  } else {
    for (size_t k = lo; k < hi; k++)
      if (ds->u32[k] >= v) return k;
  }
  return SIZE_MAX;
}

/* the scan, under the guard against a file cut short */
typedef struct {
  const mt_dataset *ds;
  size_t lo, hi, bad;
  int vocab;
} scan_args;

static void scan(void *arg) {
  scan_args *a = arg;
  a->bad = first_bad_token(a->ds, a->lo, a->hi, a->vocab);
}

static int guarded_scan(const mt_dataset *ds, size_t lo, size_t hi, int vocab, size_t *bad) {
  scan_args a = {.ds = ds, .lo = lo, .hi = hi, .bad = SIZE_MAX, .vocab = vocab};
  int rc = mt_data_guarded(ds, scan, &a);
  *bad = a.bad;
  return rc != 0;
}

int mt_dataset_validate(const mt_dataset *ds, int vocab, MPI_Comm comm, mt_err *e) {
  int rank, size;
  MT_MPI_TRY(e, MPI_Comm_rank(comm, &rank));
  MT_MPI_TRY(e, MPI_Comm_size(comm, &size));
  /* Every rank reaches both collectives whatever it finds locally, so a bad
   * token seen by one rank cannot leave the others waiting. */
  size_t n = mt_dataset_ntokens(ds);
  size_t share = n / (size_t)size, extra = n % (size_t)size, r = (size_t)rank;
  size_t lo = ds->begin + r * share + (r < extra ? r : extra);
  size_t hi = lo + share + (r < extra ? 1 : 0);
  /* A vocabulary the format cannot hold: a uint16 file of a 128k-token
   * vocabulary has lost the high bits of its ids when it was written. Decided
   * from (format, vocab) alone, so every rank fails alike, after the
   * collectives below. */
  int too_wide = vocab > 0 && ds->format != MT_DATA_TEXT &&
                 (uint64_t)vocab > max_id(ds) + 1;
  if (vocab <= 0 || too_wide) lo = hi = ds->begin; /* reported below on every rank */
  size_t bad = SIZE_MAX;
  int faulted = guarded_scan(ds, lo, hi, vocab, &bad);
  uint64_t mine = bad == SIZE_MAX ? UINT64_MAX : (uint64_t)bad, first = UINT64_MAX;
  int64_t any_fault = faulted, fault_seen = 0;
  MT_MPI_TRY(e, MPI_Allreduce(&any_fault, &fault_seen, 1, MPI_INT64_T, MPI_MAX, comm));
  if (fault_seen) {
    MT_TRY(e, mt_dataset_check(ds, e));
    mt_err_runtime(e, "%s: changed under the run (reading its mapping failed on some rank)",
                   ds->path);
    return -1;
  }
  MT_MPI_TRY(e, MPI_Allreduce(&mine, &first, 1, MPI_UINT64_T, MPI_MIN, comm));
  if (vocab <= 0) {
    mt_err_set(e, "%s: vocab size %d must be positive", ds->path, vocab);
    return -1;
  }
  if (too_wide) {
    mt_err_set(e,
               "%s: format %s holds token ids up to %llu, too few for vocab size %d: write "
               "the tokens as uint32 (data.format = u32; meshdata encode --format u32 or "
               "llmc2)",
               ds->path, mt_data_format_name(ds->format), (unsigned long long)max_id(ds), vocab);
    return -1;
  }
  if (first == UINT64_MAX) return 0;
  /* The value comes from the rank that found it (all ranks map the same file,
   * but the owner's reading is the one the offset refers to). */
  long long value = (mine == first) ? (long long)token_at(ds, (size_t)first) : -1, v = -1;
  MT_MPI_TRY(e, MPI_Allreduce(&value, &v, 1, MPI_LONG_LONG, MPI_MAX, comm));
  mt_err_set(e, "%s: token id %lld at offset %llu is >= vocab size %d", ds->path, v,
             (unsigned long long)first, vocab);
  return -1;
}

/* ------------------------------------------------------------------ */
/* writing token files                                                 */

int mt_token_writer_open(mt_token_writer *w, const char *path, const char *format, mt_err *e) {
  memset(w, 0, sizeof *w);
  if (!format || !*format) format = "llmc";
  if (strcmp(format, "llmc") == 0 || strcmp(format, "llmc2") == 0) {
    w->llmc = 1;
    w->width = format[4] == '2' ? sizeof(uint32_t) : sizeof(uint16_t);
  } else if (strcmp(format, "u16") == 0) {
    w->width = sizeof(uint16_t);
  } else if (strcmp(format, "u32") == 0) {
    w->width = sizeof(uint32_t);
  } else {
    mt_err_set(e, "%s: cannot write format '%s' (expected llmc|llmc2|u16|u32)", path, format);
    return -1;
  }
  if (strlen(path) >= sizeof w->path) {
    mt_err_set(e, "%.64s...: path longer than %zu characters", path, sizeof w->path - 1);
    return -1;
  }
  snprintf(w->path, sizeof w->path, "%s", path);
  snprintf(w->format, sizeof w->format, "%s", format);
  snprintf(w->tmp_path, sizeof w->tmp_path, "%s.tmp", path);
  w->f = fopen(w->tmp_path, "wb");
  if (!w->f) {
    mt_err_runtime(e, "%s: cannot create %s: %s", path, w->tmp_path, strerror(errno));
    return -1;
  }
  if (w->llmc) {
    /* header with count 0; the real count is patched in at close */
    int32_t header[LLMC_HEADER_INTS] = {
        LLMC_MAGIC, w->width == sizeof(uint16_t) ? LLMC_VERSION : LLMC_VERSION_U32, 0};
    if (fwrite(header, sizeof header, 1, w->f) != 1) {
      mt_err_runtime(e, "%s: write failed: %s", w->tmp_path, strerror(errno));
      mt_token_writer_abort(w);
      return -1;
    }
  }
  return 0;
}

int mt_token_writer_put(mt_token_writer *w, const uint32_t *tok, size_t n, mt_err *e) {
  if (!w->f) {
    mt_err_set(e, "%s: token writer is not open", w->path);
    return -1;
  }
  if (w->llmc && n > (size_t)INT32_MAX - w->n) {
    mt_err_set(e, "%s: more than %d tokens do not fit an llm.c header (use --format u16 or u32)",
               w->path, INT32_MAX);
    mt_token_writer_abort(w);
    return -1;
  }
  if (w->width == sizeof(uint32_t)) {
    if (n && fwrite(tok, sizeof *tok, n, w->f) != n) {
      mt_err_runtime(e, "%s: write failed: %s", w->tmp_path, strerror(errno));
      mt_token_writer_abort(w);
      return -1;
    }
    w->n += n;
    return 0;
  }
  /* uint16 formats: narrow in chunks, refusing an id that would lose its high bits */
  enum { CHUNK = 4096 };
  uint16_t narrow[CHUNK];
  for (size_t i = 0; i < n; i += CHUNK) {
    size_t m = n - i < CHUNK ? n - i : CHUNK;
    for (size_t k = 0; k < m; k++) {
      if (tok[i + k] > UINT16_MAX) {
        mt_err_set(e,
                   "%s: token id %lu (token %zu) does not fit format %s (uint16, ids up to "
                   "65535): use format u32 (meshdata encode --format u32)",
                   w->path, (unsigned long)tok[i + k], w->n + i + k, w->format);
        mt_token_writer_abort(w);
        return -1;
      }
      narrow[k] = (uint16_t)tok[i + k];
    }
    if (fwrite(narrow, sizeof *narrow, m, w->f) != m) {
      mt_err_runtime(e, "%s: write failed: %s", w->tmp_path, strerror(errno));
      mt_token_writer_abort(w);
      return -1;
    }
  }
  w->n += n;
  return 0;
}

int mt_token_writer_close(mt_token_writer *w, mt_err *e) {
  if (!w->f) {
    mt_err_set(e, "%s: token writer is not open", w->path);
    return -1;
  }
  if (w->n == 0) {
    mt_err_set(e, "%s: no tokens to write", w->path);
    mt_token_writer_abort(w);
    return -1;
  }
  if (w->llmc) {
    int32_t count = (int32_t)w->n;
    if (fseek(w->f, 2 * (long)sizeof(int32_t), SEEK_SET) != 0 ||
        fwrite(&count, sizeof count, 1, w->f) != 1) {
      mt_err_runtime(e, "%s: write failed: %s", w->tmp_path, strerror(errno));
      mt_token_writer_abort(w);
      return -1;
    }
  }
  int bad = ferror(w->f);
  if (fclose(w->f) != 0) bad = 1;
  w->f = NULL;
  if (bad) {
    mt_err_runtime(e, "%s: write failed: %s", w->tmp_path, strerror(errno));
    remove(w->tmp_path);
    return -1;
  }
  if (rename(w->tmp_path, w->path) != 0) {
    mt_err_runtime(e, "%s: cannot rename %s into place: %s", w->path, w->tmp_path, strerror(errno));
    remove(w->tmp_path);
    return -1;
  }
  return 0;
}

void mt_token_writer_abort(mt_token_writer *w) {
  if (w->f) {
    fclose(w->f);
    w->f = NULL;
    remove(w->tmp_path);
  }
}

int mt_tokens_write(const char *path, const char *format, const uint32_t *tok, size_t n,
                    mt_err *e) {
  mt_token_writer w;
  MT_TRY(e, mt_token_writer_open(&w, path, format, e));
  MT_TRY(e, mt_token_writer_put(&w, tok, n, e));
  MT_TRY(e, mt_token_writer_close(&w, e));
  return 0;
}
