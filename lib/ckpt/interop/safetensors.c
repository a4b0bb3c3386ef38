/* safetensors, written and read here: an 8-byte little-endian header length
 * N, N bytes of JSON ({"name": {"dtype", "shape", "data_offsets": [begin,
 * end]}, ..., "__metadata__": {string: string}}, offsets relative to the
 * end of the header), then the tensors' raw little-endian bytes, row-major.
 * A reader trusts nothing in the file: every size and offset is checked
 * against the file before it is used. */
#include "ckpt/interop/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* the largest header read (bytes): a header lists a few hundred tensors */
#define ST_HEADER_MAX (100LL << 20)

static const struct {
  const char *name;
  int dtype;
  size_t size;
} g_st_dtypes[] = {{"F32", MT_ST_F32, 4}, {"BF16", MT_ST_BF16, 2}, {"F16", MT_ST_F16, 2}};

size_t mt_st_dtype_size(int dtype) {
  for (size_t i = 0; i < sizeof g_st_dtypes / sizeof g_st_dtypes[0]; i++)
    if (g_st_dtypes[i].dtype == dtype) return g_st_dtypes[i].size;
  return 0;
}

const char *mt_st_dtype_name(int dtype) {
  for (size_t i = 0; i < sizeof g_st_dtypes / sizeof g_st_dtypes[0]; i++)
    if (g_st_dtypes[i].dtype == dtype) return g_st_dtypes[i].name;
  return "?";
}

/* ------------------------------------------------------------------ */
/* writing                                                             */

int mt_st_write_header(int fd, const mt_st_tensor *t, int n, const char *metadata_json,
                       int64_t *data_start, const char *path, mt_err *e) {
  cJSON *o = cJSON_CreateObject();
  cJSON *meta = metadata_json ? cJSON_Parse(metadata_json) : NULL;
  if (meta) cJSON_AddItemToObject(o, "__metadata__", meta);
  int64_t off = 0;
  for (int i = 0; i < n; i++) {
    cJSON *x = cJSON_AddObjectToObject(o, t[i].name);
    cJSON_AddStringToObject(x, "dtype", mt_st_dtype_name(t[i].dtype));
    cJSON *shape = cJSON_AddArrayToObject(x, "shape");
    int64_t numel = 1;
    for (int d = 0; d < t[i].ndim; d++) {
      cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t[i].shape[d]));
      numel *= t[i].shape[d];
    }
    int64_t bytes = numel * (int64_t)mt_st_dtype_size(t[i].dtype);
    cJSON *offs = cJSON_AddArrayToObject(x, "data_offsets");
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + bytes)));
    off += bytes;
  }
  char *text = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  size_t len = strlen(text), padded = (len + 7) / 8 * 8; /* the data starts 8-byte aligned */
  char *buf = mt_calloc(8 + padded + 1, 1);
  uint64_t n64 = (uint64_t)padded;
  for (int k = 0; k < 8; k++) buf[k] = (char)((n64 >> (8 * k)) & 0xff);
  memcpy(buf + 8, text, len);
  memset(buf + 8 + len, ' ', padded - len);
  free(text);
  int rc = mt_st_write_all(fd, buf, 8 + padded, 0, path, e);
  free(buf);
  *data_start = (int64_t)(8 + padded);
  return rc == 0 ? 0 : mt_err_pass(e);
}

int mt_st_write_all(int fd, const void *buf, size_t bytes, int64_t off, const char *path,
                    mt_err *e) {
  const char *p = buf;
  while (bytes > 0) {
    ssize_t k = pwrite(fd, p, bytes, (off_t)off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      mt_ckpt_err_sys(e, k == 0 ? EIO : errno, "cannot write %s", path);
      return -1;
    }
    p += k;
    off += k;
    bytes -= (size_t)k;
  }
  return 0;
}

/* ------------------------------------------------------------------ */
/* reading                                                             */

void mt_st_close(mt_st_file *f) {
  if (f->fd >= 0) close(f->fd);
  free(f->t);
  memset(f, 0, sizeof *f);
  f->fd = -1;
}

static int cmp_offset(const void *a, const void *b) {
  const mt_st_tensor *x = *(const mt_st_tensor *const *)a, *y = *(const mt_st_tensor *const *)b;
  if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
  return (x->bytes > y->bytes) - (x->bytes < y->bytes);
}

/* The data_offsets tile the data buffer in order: taken by their starts,
 * the first begins at 0, each begins where the one before ends (no gap, no
 * overlap: a tensor never reads another's bytes), the last ends with the
 * file. A tensor of no bytes takes none. */
static int check_tiling(const mt_st_file *f, int64_t data_size, mt_err *e) {
  const mt_st_tensor **by = mt_malloc(((size_t)f->n + 1) * sizeof *by);
  for (int i = 0; i < f->n; i++) by[i] = &f->t[i];
  qsort(by, (size_t)f->n, sizeof *by, cmp_offset);
  int64_t at = f->data_start; /* where the next tensor must begin */
  int rc = 0;
  for (int i = 0; i < f->n && rc == 0; i++) {
    const mt_st_tensor *t = by[i];
    if (t->offset < at) {
      mt_err_set(e, "%s: tensor %s (data_offsets [%lld, %lld]) overlaps tensor %s: the offsets "
                    "must tile the data without overlap", f->path, t->name,
                 (long long)(t->offset - f->data_start),
                 (long long)(t->offset - f->data_start + t->bytes), by[i - 1]->name);
      rc = -1;
    } else if (t->offset > at) {
      mt_err_set(e, "%s: %lld bytes before tensor %s (data_offsets [%lld, %lld]) belong to no "
                    "tensor: the offsets must tile the data without gaps", f->path,
                 (long long)(t->offset - at), t->name, (long long)(t->offset - f->data_start),
                 (long long)(t->offset - f->data_start + t->bytes));
      rc = -1;
    }
    at = t->offset + t->bytes;
  }
  if (rc == 0 && at != f->data_start + data_size) {
    mt_err_set(e, "%s: the last %lld bytes of the data belong to no tensor (trailing bytes)",
               f->path, (long long)(f->data_start + data_size - at));
    rc = -1;
  }
  free(by);
  return rc;
}

/* A NUL inside a string of JSON text (the byte, or the escape \u0000):
 * cJSON's strings end there, so a tensor "a\u0000b" would read as "a".
 * Returns the NUL's offset in text, or -1; *start is the offset of the
 * string's opening quote. (A backslash occurs only inside strings.) */
static long json_string_nul(const char *text, size_t n, size_t *start) {
  int in_string = 0;
  for (size_t i = 0; i < n; i++) {
    if (!in_string) {
      if (text[i] == '"') in_string = 1, *start = i;
    } else if (text[i] == '\0') {
      return (long)i;
    } else if (text[i] == '"') {
      in_string = 0;
    } else if (text[i] == '\\' && i + 1 < n) {
      if (i + 5 < n && !strncmp(text + i + 1, "u0000", 5)) return (long)i;
      i++; /* the escaped character (a \uXXXX's digits are plain characters) */
    }
  }
  return -1;
}

/* 0, or -1 with e naming file path and the string cut by a NUL */
static int check_no_nul(const char *path, const char *text, size_t n, mt_err *e) {
  size_t start = 0;
  long at = json_string_nul(text, n, &start);
  if (at < 0) return 0;
  mt_err_set(e, "%s: a JSON string holds a NUL (byte %ld of the JSON, in \"%.*s\"...): a "
                "tensor name or file name cannot hold one", path, at,
             (int)((size_t)at - start - 1 < 80 ? (size_t)at - start - 1 : 80), text + start + 1);
  return -1;
}

int mt_st_open(const char *path, mt_st_file *f, mt_err *e) {
  memset(f, 0, sizeof *f);
  f->fd = open(path, O_RDONLY);
  snprintf(f->path, sizeof f->path, "%s", path);
  if (f->fd < 0) { /* a missing shard: bad input (exit 2); an I/O error: runtime (3) */
    mt_ckpt_err_read_sys(e, errno, "cannot open %s", path);
    return -1;
  }
  struct stat sb;
  if (fstat(f->fd, &sb) != 0) {
    mt_ckpt_err_read_sys(e, errno, "cannot open %s", path);
    mt_st_close(f);
    return -1;
  }
  int64_t size = (int64_t)sb.st_size;
  unsigned char lenb[8];
  uint64_t n = 0;
  if (size < 8 || pread(f->fd, lenb, 8, 0) != 8) {
    mt_err_set(e, "%s: truncated header (the file has %lld bytes, fewer than the 8 of the header "
                  "length)", path, (long long)size);
    mt_st_close(f);
    return -1;
  }
  for (int k = 0; k < 8; k++) n |= (uint64_t)lenb[k] << (8 * k);
  if (n == 0 || n > (uint64_t)(size - 8) || (int64_t)n > ST_HEADER_MAX) {
    mt_err_set(e, "%s: truncated header (it claims %llu bytes of JSON, the file has %lld after "
                  "the length)", path, (unsigned long long)n, (long long)(size - 8));
    mt_st_close(f);
    return -1;
  }
  char *text = mt_malloc(n + 1);
  if (pread(f->fd, text, n, 8) != (ssize_t)n) {
    mt_err_set(e, "%s: truncated header (short read)", path);
    free(text);
    mt_st_close(f);
    return -1;
  }
  text[n] = '\0';
  if (check_no_nul(path, text, n, e) != 0) {
    free(text);
    mt_st_close(f);
    return -1;
  }
  cJSON *o = cJSON_Parse(text);
  free(text);
  if (!o || !cJSON_IsObject(o)) {
    mt_err_set(e, "%s: the header is not a JSON object (truncated or not safetensors)", path);
    cJSON_Delete(o);
    mt_st_close(f);
    return -1;
  }
  f->data_start = 8 + (int64_t)n;
  int64_t data_size = size - f->data_start;
  int count = cJSON_GetArraySize(o);
  f->t = mt_calloc((size_t)count + 1, sizeof *f->t);
  cJSON *it;
  int rc = 0;
  cJSON_ArrayForEach(it, o) {
    if (!strcmp(it->string, "__metadata__")) continue;
    mt_st_tensor *t = &f->t[f->n];
    snprintf(t->name, sizeof t->name, "%s", it->string);
    cJSON *dt = cJSON_GetObjectItem(it, "dtype"), *sh = cJSON_GetObjectItem(it, "shape");
    cJSON *of = cJSON_GetObjectItem(it, "data_offsets");
    if (strlen(it->string) >= sizeof t->name || !cJSON_IsString(dt) || !cJSON_IsArray(sh) ||
        !cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 || cJSON_GetArraySize(sh) > MT_MAX_DIMS) {
      mt_err_set(e, "%s: tensor '%.100s' has a malformed header entry", path, it->string);
      rc = -1;
      break;
    }
    t->dtype = -1;
    for (size_t k = 0; k < sizeof g_st_dtypes / sizeof g_st_dtypes[0]; k++)
      if (!strcmp(dt->valuestring, g_st_dtypes[k].name)) t->dtype = g_st_dtypes[k].dtype;
    if (t->dtype < 0) {
      mt_err_set(e, "%s: tensor %s has dtype '%.20s', which this reader does not take (F32, "
                    "BF16, F16)", path, t->name, dt->valuestring);
      rc = -1;
      break;
    }
    int64_t numel = 1;
    t->ndim = cJSON_GetArraySize(sh);
    for (int d = 0; d < t->ndim && rc == 0; d++) {
      cJSON *v = cJSON_GetArrayItem(sh, d);
      if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e15 ||
          v->valuedouble != (double)(int64_t)v->valuedouble) {
        mt_err_set(e, "%s: tensor %s has a malformed shape", path, t->name);
        rc = -1;
      } else {
        t->shape[d] = (int64_t)v->valuedouble;
        numel = t->shape[d] && numel > INT64_MAX / 8 / t->shape[d] ? -1 : numel * t->shape[d];
      }
    }
    if (rc != 0) break;
    double b0 = cJSON_GetArrayItem(of, 0)->valuedouble, b1 = cJSON_GetArrayItem(of, 1)->valuedouble;
    int64_t want = numel < 0 ? -1 : numel * (int64_t)mt_st_dtype_size(t->dtype);
    if (!cJSON_IsNumber(cJSON_GetArrayItem(of, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(of, 1)) ||
        b0 < 0 || b1 < b0 || b1 > (double)data_size || want < 0 || (int64_t)(b1 - b0) != want) {
      mt_err_set(e, "%s: tensor %s: its data_offsets [%.0f, %.0f] do not hold its shape's %lld "
                    "bytes within the file's %lld data bytes (truncated or corrupt)", path,
                 t->name, b0, b1, (long long)want, (long long)data_size);
      rc = -1;
      break;
    }
    if (mt_st_find(f, t->name)) {
      mt_err_set(e, "%s: tensor %s is listed twice in the header", path, t->name);
      rc = -1;
      break;
    }
    t->offset = f->data_start + (int64_t)b0;
    t->bytes = want;
    f->n++;
  }
  cJSON_Delete(o);
  if (rc == 0 && check_tiling(f, data_size, e) != 0) rc = mt_err_pass(e);
  if (rc != 0) {
    mt_st_close(f);
    return -1;
  }
  return 0;
}

const mt_st_tensor *mt_st_find(const mt_st_file *f, const char *name) {
  for (int i = 0; i < f->n; i++)
    if (!strcmp(f->t[i].name, name)) return &f->t[i];
  return NULL;
}

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu, u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else { /* subnormal: normalise */
      int shift = 0;
      while (!(man & 0x400u)) {
        man <<= 1;
        shift++;
      }
      man &= 0x3ffu;
      u = sign | ((uint32_t)(127 - 15 - shift + 1) << 23) | (man << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp - 15 + 127) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

int mt_st_read_f32(const mt_st_file *f, const mt_st_tensor *t, int64_t first, int64_t n,
                   float *out, mt_err *e) {
  size_t es = mt_st_dtype_size(t->dtype);
  int64_t off = t->offset + first * (int64_t)es, bytes = n * (int64_t)es;
  char *raw = t->dtype == MT_ST_F32 ? (char *)out : mt_malloc((size_t)bytes + 8);
  int64_t done = 0;
  while (done < bytes) {
    ssize_t k = pread(f->fd, raw + done, (size_t)(bytes - done), (off_t)(off + done));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      mt_ckpt_err_sys(e, k == 0 ? EIO : errno, "%s: cannot read tensor %s", f->path, t->name);
      if (raw != (char *)out) free(raw);
      return -1;
    }
    done += k;
  }
  if (t->dtype == MT_ST_BF16) {
    for (int64_t i = 0; i < n; i++) {
      uint16_t h;
      memcpy(&h, raw + 2 * i, 2);
      uint32_t u = (uint32_t)h << 16;
      memcpy(&out[i], &u, 4);
    }
  } else if (t->dtype == MT_ST_F16) {
    for (int64_t i = 0; i < n; i++) {
      uint16_t h;
      memcpy(&h, raw + 2 * i, 2);
      out[i] = half_to_float(h);
    }
  }
  if (raw != (char *)out) free(raw);
  return 0;
}

/* ------------------------------------------------------------------ */
/* a model directory: one file, or shards listed in an index           */

#define ST_INDEX_MAX (16LL << 20)

static int file_exists(const char *dir, const char *name) {
  char p[1300];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

void mt_st_close_dir(mt_st_set *s) {
  for (int i = 0; i < s->n_files; i++) mt_st_close(&s->files[i]);
  free(s->files);
  memset(s, 0, sizeof *s);
}

static int add_file(mt_st_set *s, const char *dir, const char *name, mt_err *e) {
  char p[1300];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  mt_st_file *grown = realloc(s->files, (size_t)(s->n_files + 1) * sizeof *s->files);
  if (!grown) {
    mt_err_runtime(e, "%s: out of memory", p);
    return -1;
  }
  s->files = grown;
  MT_TRY(e, mt_st_open(p, &s->files[s->n_files], e));
  s->n_files++;
  return 0;
}

/* model.safetensors.index.json: {"weight_map": {tensor: shard file}}; every
 * shard opened and checked, every tensor in the shard the map names, every
 * tensor of a shard in the map, none in two shards */
static int open_index(mt_st_set *s, const char *dir, mt_err *e) {
  char p[1300];
  snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
  FILE *fp = fopen(p, "r");
  if (!fp) {
    mt_ckpt_err_read_sys(e, errno, "cannot read %s", p);
    return -1;
  }
  char *text = mt_malloc((size_t)ST_INDEX_MAX + 1);
  size_t n = fread(text, 1, (size_t)ST_INDEX_MAX + 1, fp);
  fclose(fp);
  if ((long long)n > ST_INDEX_MAX) {
    free(text);
    mt_err_set(e, "%s: more than %lld bytes, larger than an index can be", p, ST_INDEX_MAX);
    return -1;
  }
  text[n] = '\0';
  if (check_no_nul(p, text, n, e) != 0) {
    free(text);
    return -1;
  }
  cJSON *o = cJSON_Parse(text);
  free(text);
  cJSON *map = cJSON_GetObjectItem(o, "weight_map"), *it;
  int rc = 0;
  if (!cJSON_IsObject(map) || cJSON_GetArraySize(map) == 0) {
    mt_err_set(e, "%s: no weight_map (an object of tensor names and shard files)", p);
    rc = -1;
  }
  /* the shard files, each once, in the order the map first names them */
  cJSON_ArrayForEach(it, map) {
    if (rc != 0) break;
    const char *file = cJSON_IsString(it) ? it->valuestring : NULL;
    if (!file || !file[0] || strchr(file, '/') || file[0] == '.') {
      mt_err_set(e, "%s: tensor %.100s maps to '%.100s', not a file beside the index", p,
                 it->string, file ? file : "?");
      rc = -1;
      break;
    }
    int have = 0;
    for (int i = 0; i < s->n_files && !have; i++) {
      const char *base = strrchr(s->files[i].path, '/');
      have = !strcmp(base ? base + 1 : s->files[i].path, file);
    }
    if (!have && add_file(s, dir, file, e) != 0) rc = mt_err_pass(e);
  }
  /* the map and the shards agree */
  cJSON_ArrayForEach(it, map) {
    if (rc != 0) break;
    const mt_st_file *f = NULL;
    if (!mt_st_set_find(s, it->string, &f)) {
      mt_err_set(e, "%s: tensor %.100s is in the weight_map, but not in %s", p, it->string,
                 it->valuestring);
      rc = -1;
    } else {
      const char *base = strrchr(f->path, '/');
      if (strcmp(base ? base + 1 : f->path, it->valuestring) != 0) {
        mt_err_set(e, "%s: tensor %.100s is in %s, the weight_map says %s", p, it->string,
                   base ? base + 1 : f->path, it->valuestring);
        rc = -1;
      }
    }
  }
  for (int i = 0; rc == 0 && i < s->n_files; i++)
    for (int k = 0; rc == 0 && k < s->files[i].n; k++) {
      const char *name = s->files[i].t[k].name;
      if (!cJSON_GetObjectItemCaseSensitive(map, name)) {
        mt_err_set(e, "%s: tensor %s is not in the weight_map of %s", s->files[i].path, name, p);
        rc = -1;
      }
      for (int j = i + 1; rc == 0 && j < s->n_files; j++)
        if (mt_st_find(&s->files[j], name)) {
          mt_err_set(e, "%s: tensor %s is in two shards (%s and %s)", p, name,
                     s->files[i].path, s->files[j].path);
          rc = -1;
        }
    }
  cJSON_Delete(o);
  return rc;
}

int mt_st_open_dir(const char *dir, mt_st_set *s, mt_err *e) {
  memset(s, 0, sizeof *s);
  int rc;
  if (file_exists(dir, "model.safetensors")) {
    rc = add_file(s, dir, "model.safetensors", e) == 0 ? 0 : mt_err_pass(e);
  } else if (file_exists(dir, "model.safetensors.index.json")) {
    rc = open_index(s, dir, e) == 0 ? 0 : mt_err_pass(e);
  } else if (file_exists(dir, "pytorch_model.bin") ||
             file_exists(dir, "pytorch_model.bin.index.json")) {
    mt_err_set(e, "%s holds PyTorch weights only (pytorch_model.bin, a pickle, which meshckpt "
                  "does not read): write them as safetensors first, e.g. "
                  "GPT2LMHeadModel.from_pretrained(DIR).save_pretrained(OUT, "
                  "safe_serialization=True)", dir);
    rc = -1;
  } else {
    mt_err_set(e, "%s: no model.safetensors (nor model.safetensors.index.json with shards)", dir);
    rc = -1;
  }
  if (rc != 0) mt_st_close_dir(s);
  return rc;
}

const mt_st_tensor *mt_st_set_find(const mt_st_set *s, const char *name, const mt_st_file **f) {
  for (int i = 0; i < s->n_files; i++) {
    const mt_st_tensor *t = mt_st_find(&s->files[i], name);
    if (t) {
      if (f) *f = &s->files[i];
      return t;
    }
  }
  return NULL;
}
