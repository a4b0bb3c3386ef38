/* The checks of a checkpoint, shared by the loader and `meshckpt verify`
 * (so the two accept exactly the same checkpoints): root attributes and
 * their checksum, the tensor table, the index (bounded before anything is
 * allocated), coverage of every tensor by its boxes (no hole, no overlap),
 * shard files, and the data itself (box checksums, no NaN or Inf). */
#include <xxhash.h>

#include "ckpt/core/ckpt_core.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t mt_ckpt_box_hash(const float *data, size_t n) { return XXH64(data, n * sizeof(float), 0); }

size_t mt_ckpt_count_nonfinite(const float *x, size_t n) {
  /* exponent bits all set: Inf or NaN (integer tests: they vectorise, and
   * hold under -ffinite-math-only too). First whether there is any, with an
   * OR over the values: the exponent field plus one carries into bit 31
   * exactly when it is all ones; counting only when there is one. */
  uint32_t any = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], sizeof u);
    any |= (u & 0x7f800000u) + 0x00800000u;
  }
  if (!(any & 0x80000000u)) return 0;
  size_t count = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], sizeof u);
    count += (u & 0x7f800000u) == 0x7f800000u;
  }
  return count;
}

/* ------------------------------------------------------------------ */
/* root attributes                                                     */

size_t mt_ckpt_count_nonfinite_bf16(const uint16_t *x, size_t n) {
  size_t count = 0;
  for (size_t i = 0; i < n; i++) count += (x[i] & 0x7f80u) == 0x7f80u;
  return count;
}

int mt_ckpt_check_meta(const char *dir, hid_t file, const mt_ckpt_manifest *man, int64_t limit,
                       mt_ckpt_meta *m, int *groups, mt_err *e) {
  char fmt[64] = "", version[32] = "";
  memset(m, 0, sizeof *m);
  *groups = MT_CKPT_NGROUPS;
  if (mt_ckpt_attr_str(file, "format", fmt, sizeof fmt) != 0 || strcmp(fmt, MT_CKPT_FORMAT) != 0) {
    mt_err_set(e, "%s: not a meshtrain checkpoint (format attribute '%s')", dir, fmt);
    return -1;
  }
  if (mt_ckpt_attr_str(file, "version", version, sizeof version) != 0) {
    mt_err_set(e, "%s: no format version attribute", dir);
    return -1;
  }
  MT_TRY(e, mt_ckpt_check_version(dir, version, e));
  if (strcmp(version, man->version) != 0) {
    mt_err_set(e, "%s: the file says format version %s, the manifest %s", dir, version,
               man->version);
    return -1;
  }
  int got = mt_ckpt_read_meta(file, m);
  if (got < 0 || (got == 0 && mt_ckpt_meta_has_moe(version))) {
    mt_err_set(e, "%s: checkpoint metadata incomplete", dir);
    return -1;
  }
  int major, minor, patch;
  mt_ckpt_parse_version(version, &major, &minor, &patch);
  int64_t g64 = MT_CKPT_NGROUPS;
  if (major == 1 && minor >= 2 && mt_ckpt_attr_i64(file, "groups", &g64) != 0) {
    mt_err_set(e, "%s: no groups attribute (required by format %s)", dir, version);
    return -1;
  }
  if (g64 != 1 && g64 != MT_CKPT_NGROUPS) {
    mt_err_set(e, "%s: root attribute groups = %lld is neither 1 (parameters only) nor %d", dir,
               (long long)g64, MT_CKPT_NGROUPS);
    return -1;
  }
  *groups = (int)g64;
  int64_t stored;
  if (mt_ckpt_attr_i64(file, "meta_xxh64", &stored) == 0) {
    uint64_t want = mt_ckpt_meta_hash(m, version, g64);
    if (memcmp(&want, &stored, sizeof want) != 0) {
      mt_err_set(e, "%s: the root attributes (step, samples, optimizer_step, seed, model, ...) do "
                    "not match their checksum meta_xxh64: edited or corrupt", dir);
      return -1;
    }
  } else if (major > 1 || minor >= 1) { /* required from format 1.1 */
    mt_err_set(e, "%s: no meta_xxh64 attribute (required by format %s)", dir, version);
    return -1;
  }
  if (m->step != man->step) {
    mt_err_set(e, "%s: the file says step %lld, the manifest step %lld", dir, (long long)m->step,
               (long long)man->step);
    return -1;
  }
  /* values a checkpoint can hold: model sizes at least 1 and no larger than
   * the bytes the checkpoint has; counters not negative */
  struct {
    const char *name;
    int64_t v, lo, hi;
  } range[] = {{"n_layer", m->n_layer, 1, limit}, {"n_embd", m->n_embd, 1, limit / 4},
               {"n_head", m->n_head, 1, limit / 4}, {"seq_len", m->seq_len, 1, limit / 4},
               {"vocab", m->vocab, 1, limit / 4},   {"samples", m->samples, 0, INT64_MAX},
               {"tokens", m->tokens, 0, INT64_MAX}, {"optimizer_step", m->optimizer_step, 0, INT64_MAX},
               {"world", m->world, 1, INT32_MAX}, {"moe_experts", m->moe_experts, 0, limit / 4},
               {"moe_topk", m->moe_topk, 0, m->moe_experts},
               {"moe_every", m->moe_every, 0, m->n_layer}, {"moe_ffn", m->moe_ffn, 0, limit / 4},
               {"moe_shared", m->moe_shared, 0, limit / 4}, {"ep", m->ep, 1, INT32_MAX},
               {"etp", m->etp, 1, INT32_MAX}, {"n_kv_head", m->n_kv_head, 1, m->n_head},
               {"ffn", m->ffn, 1, limit / 4}, {"tied", m->tied, 0, 1}, {"bias", m->bias, 0, 1}};
  for (size_t i = 0; i < sizeof range / sizeof range[0]; i++)
    if (range[i].v < range[i].lo || range[i].v > range[i].hi) {
      mt_err_set(e, "%s: root attribute %s = %lld is out of range", dir, range[i].name,
                 (long long)range[i].v);
      return -1;
    }
  return 0;
}

/* ------------------------------------------------------------------ */
/* tensor table, extents, index                                        */

/* a dataset's extent as (rows, cols) (a vector is one row, an N-d tensor
 * its dims but the last flattened), its N-d extents (nd_dims), its stored
 * type and, if its data is plain contiguous and allocated, where it starts
 * in the file (else -1); with attrs, how runtimes split it. Returns its
 * dimensions (1 to 3), or -1 if missing, of another rank, or claiming more
 * than limit_elems elements. */
static int dataset_info(hid_t file, const char *path, int64_t limit_elems, int64_t ext[2],
                        int64_t *nd_dims, int *dtype, int64_t *offset,
                        mt_ckpt_tensor_attrs *attrs, int want_offset) {
  hid_t d = H5Dopen2(file, path, H5P_DEFAULT);
  hid_t s = d >= 0 ? H5Dget_space(d) : -1;
  hsize_t dims[MT_MAX_DIMS] = {0};
  int nd = s >= 0 ? H5Sget_simple_extent_ndims(s) : -1;
  if (nd >= 1 && nd <= 3) H5Sget_simple_extent_dims(s, dims, NULL);
  *dtype = -1;
  *offset = -1;
  if (d >= 0) {
    /* the creation list only where the data's file offset is wanted: of a
     * virtual dataset it is every mapping (per-writer mode's index file) */
    hid_t t = H5Dget_type(d), dcpl = want_offset ? H5Dget_create_plist(d) : -1;
    *dtype = mt_ckpt_dtype_of(t);
    if (dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CONTIGUOUS && H5Pget_nfilters(dcpl) == 0 &&
        H5Pget_external_count(dcpl) == 0) {
      haddr_t a = H5Dget_offset(d);
      if (a != HADDR_UNDEF) *offset = (int64_t)a;
    }
    if (t >= 0) H5Tclose(t);
    if (dcpl >= 0) H5Pclose(dcpl);
  }
  if (d >= 0 && attrs && nd >= 1 && nd <= 3) {
    char split[32] = "";
    int64_t v;
    memset(attrs, 0, sizeof *attrs);
    if (mt_ckpt_attr_str(d, "tp_split", split, sizeof split) == 0 &&
        (!strcmp(split, "dim0") || !strcmp(split, "dim1"))) {
      attrs->tp_sharded = 1;
      attrs->tp_dim = split[3] - '0';
    }
    attrs->fused_blocks = mt_ckpt_attr_i64(d, "fused_blocks", &v) == 0 && v >= 1 && v <= 64 ? (int)v : 1;
    attrs->weight_decay = mt_ckpt_attr_i64(d, "weight_decay", &v) == 0 && v == 1;
    mt_ckpt_attr_str(d, "tied_to", attrs->tied_to, sizeof attrs->tied_to);
    mt_ckpt_attr_str(d, "axes", attrs->axes, sizeof attrs->axes);
    attrs->ep_dim = attrs->etp_dim = -1;
    char eps[32] = "", etps[32] = "";
    if (mt_ckpt_attr_str(d, "ep_split", eps, sizeof eps) == 0) { /* an expert */
      attrs->expert = 1;
      mt_ckpt_attr_str(d, "etp_split", etps, sizeof etps);
      if (!strncmp(eps, "dim", 3) && eps[3] >= '0' && eps[3] < '0' + nd && !eps[4])
        attrs->ep_dim = eps[3] - '0';
      if (!strncmp(etps, "dim", 3) && etps[3] >= '0' && etps[3] < '0' + nd && !etps[4])
        attrs->etp_dim = etps[3] - '0';
    }
    for (int k = 0; k < nd; k++) attrs->padded[k] = (int64_t)dims[k];
    hid_t a = H5Aexists(d, "padded_shape") > 0 ? H5Aopen(d, "padded_shape", H5P_DEFAULT) : -1;
    hid_t as = a >= 0 ? H5Aget_space(a) : -1;
    int64_t pv[MT_MAX_DIMS];
    if (as >= 0 && H5Sget_simple_extent_npoints(as) == nd && H5Aread(a, H5T_NATIVE_INT64, pv) >= 0)
      for (int k = 0; k < nd; k++) /* a padding of at most 64 x 1024 rows is believed */
        if (pv[k] >= (int64_t)dims[k] && pv[k] <= (int64_t)dims[k] + 65536) attrs->padded[k] = pv[k];
    if (as >= 0) H5Sclose(as);
    if (a >= 0) H5Aclose(a);
  }
  if (s >= 0) H5Sclose(s);
  if (d >= 0) H5Dclose(d);
  H5Eclear2(H5E_DEFAULT);
  if (nd < 1 || nd > 3) return -1;
  ext[0] = 1;
  for (int k = 0; k < nd; k++) {
    if (dims[k] < 1 || (int64_t)dims[k] > limit_elems) dims[k] = (hsize_t)limit_elems + 1;
    nd_dims[k] = (int64_t)dims[k];
    if (k < nd - 1) /* no overflow: a product beyond the limit stops at limit + 1 */
      ext[0] = ext[0] > limit_elems / (int64_t)dims[k] ? limit_elems + 1 : ext[0] * (int64_t)dims[k];
  }
  ext[1] = (int64_t)dims[nd - 1];
  return nd;
}

int mt_ckpt_read_tensors(const char *dir, hid_t file, int64_t limit, int groups,
                         int want_offsets, int want_attrs, mt_ckpt_tensors *tt, mt_err *e) {
  memset(tt, 0, sizeof *tt);
  tt->groups = groups;
  hid_t d = H5Dopen2(file, "tensors", H5P_DEFAULT);
  hid_t s = d >= 0 ? H5Dget_space(d) : -1, ft = d >= 0 ? H5Dget_type(d) : -1;
  hsize_t n = 0;
  int ok = s >= 0 && ft >= 0 && H5Sget_simple_extent_ndims(s) == 1 &&
           H5Sget_simple_extent_dims(s, &n, NULL) == 1 && H5Tget_class(ft) == H5T_STRING &&
           !H5Tis_variable_str(ft);
  size_t width = ok ? H5Tget_size(ft) : 0;
  if (!ok || n == 0 || width == 0 || width > MT_NAME_MAX) {
    mt_err_set(e, "%s: no readable tensor table (/tensors)", dir);
  } else if ((int64_t)n > limit / (int64_t)width || n > INT32_MAX / MT_CKPT_NGROUPS) {
    mt_err_set(e, "%s: the tensor table claims %llu names, more than the checkpoint's %lld bytes "
                  "can hold", dir, (unsigned long long)n, (long long)limit);
  } else {
    tt->n = (int)n;
    tt->names = mt_calloc((size_t)n + 1, MT_NAME_MAX);
    hid_t mt = H5Tcopy(H5T_C_S1);
    H5Tset_size(mt, MT_NAME_MAX);
    if (H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, tt->names) < 0)
      mt_err_set(e, "%s: unreadable tensor table (/tensors)", dir);
    H5Tclose(mt);
    for (int i = 0; i < tt->n; i++) tt->names[i][MT_NAME_MAX - 1] = '\0';
  }
  if (ft >= 0) H5Tclose(ft);
  if (s >= 0) H5Sclose(s);
  if (d >= 0) H5Dclose(d);
  if (e->failed) return mt_err_pass(e);
  /* every tensor's extent in every group, the same in each group */
  size_t slots = (size_t)tt->n * MT_CKPT_NGROUPS + 1;
  tt->ext = mt_calloc(slots, 2 * sizeof(int64_t));
  tt->nd = mt_calloc((size_t)tt->n + 1, sizeof(int));
  tt->dims = mt_calloc((size_t)tt->n + 1, sizeof *tt->dims);
  tt->dtype = mt_calloc(slots, sizeof(int));
  tt->offset = mt_calloc(slots, sizeof(int64_t));
  tt->attrs = mt_calloc((size_t)tt->n + 1, sizeof *tt->attrs);
  for (int g = 0; g < groups; g++)
    for (int i = 0; i < tt->n; i++) {
      char path[256];
      mt_ckpt_dataset_path(path, sizeof path, g, tt->names[i]);
      size_t k = (size_t)g * (size_t)tt->n + (size_t)i;
      int64_t *x = tt->ext[k], dims[MT_MAX_DIMS] = {0};
      int nd = dataset_info(file, path, limit / 2, x, dims, &tt->dtype[k], &tt->offset[k],
                            g == 0 && want_attrs ? &tt->attrs[i] : NULL, want_offsets);
      if (g == 0) {
        tt->nd[i] = nd;
        memcpy(tt->dims[i], dims, sizeof dims);
      }
      if (nd < 0 || (g > 0 && (nd != tt->nd[i] || memcmp(dims, tt->dims[i], sizeof dims)))) {
        mt_err_set(e, "%s: missing tensor %s (or not 1-D to 3-D, or of another shape than "
                      "/model/%s)", dir, path, tt->names[i]);
        return -1;
      }
      if (x[0] < 1 || x[1] < 1 || x[0] > limit / 2 / x[1]) { /* 2: bfloat16 */
        mt_err_set(e, "%s: tensor %s claims %lld x %lld elements, more than the checkpoint's "
                      "%lld bytes hold", dir, path, (long long)x[0], (long long)x[1],
                   (long long)limit);
        return -1;
      }
      const int64_t *x0 = tt->ext[i];
      if (g > 0 && (x[0] != x0[0] || x[1] != x0[1])) {
        mt_err_set(e, "%s: tensor %s has another shape than /model/%s", dir, path, tt->names[i]);
        return -1;
      }
      if (tt->dtype[k] < 0) {
        mt_err_set(e, "%s: tensor %s is stored neither as float32 nor as bfloat16 "
                      "(little-endian)", dir, path);
        return -1;
      }
    }
  return 0;
}

void mt_ckpt_tensors_free(mt_ckpt_tensors *tt) {
  free(tt->names);
  free(tt->ext);
  free(tt->nd);
  free(tt->dims);
  free(tt->dtype);
  free(tt->offset);
  free(tt->attrs);
  memset(tt, 0, sizeof *tt);
}

int mt_ckpt_read_index(const char *dir, hid_t file, int64_t limit, int64_t **rows, int64_t *n,
                       mt_err *e) {
  *rows = NULL;
  *n = 0;
  hid_t d = H5Dopen2(file, "index", H5P_DEFAULT);
  hid_t s = d >= 0 ? H5Dget_space(d) : -1;
  hsize_t dims[2] = {0, 0};
  int ok = s >= 0 && H5Sget_simple_extent_ndims(s) == 2 &&
           H5Sget_simple_extent_dims(s, dims, NULL) == 2 && dims[1] == MT_CKPT_INDEX_COLS;
  /* each row describes at least one stored element (4 bytes) and is itself
   * 64 bytes in the file: both bound the rows by the checkpoint's bytes */
  int64_t max_rows = limit / (int64_t)(MT_CKPT_INDEX_COLS * sizeof(int64_t));
  if (!ok) {
    mt_err_set(e, "%s: no readable index (/index, [boxes, %d] int64)", dir, MT_CKPT_INDEX_COLS);
  } else if (dims[0] == 0) {
    mt_err_set(e, "%s: the index is empty", dir);
  } else if ((int64_t)dims[0] > max_rows) {
    mt_err_set(e, "%s: the index claims %llu boxes, more than the checkpoint's %lld bytes can "
                  "hold (corrupt index)", dir, (unsigned long long)dims[0], (long long)limit);
  } else {
    *rows = mt_malloc((size_t)dims[0] * MT_CKPT_INDEX_COLS * sizeof(int64_t));
    if (H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, *rows) < 0) {
      mt_err_set(e, "%s: unreadable index", dir);
      free(*rows);
      *rows = NULL;
    } else {
      *n = (int64_t)dims[0];
    }
  }
  if (s >= 0) H5Sclose(s);
  if (d >= 0) H5Dclose(d);
  return e->failed ? -1 : 0;
}

/* ------------------------------------------------------------------ */
/* coverage                                                            */

/* The boxes of one tensor tile it exactly when, taken in (start0, start1)
 * order, each box finds every column it spans filled up to exactly its first
 * row ("skyline"); then the columns it spans are filled to its last row. A
 * lower fill is a hole, a higher one an overlap; at the end every column is
 * filled to the last row. Columns are cut into segments at every box edge;
 * a segment tree with range assignment and range min/max makes it
 * O(n log n) for n boxes. */
typedef struct {
  int64_t *mn, *mx, *lazy;
  int size;
} skyline;

/* The coverage check's elementary steps on this thread (sort comparisons,
 * binary-search probes, segment-tree nodes visited, rows walked): its cost
 * as a count, the same on any machine at any load (mt_ckpt_coverage_steps). */
static _Thread_local int64_t coverage_steps;

int64_t mt_ckpt_coverage_steps(void) { return coverage_steps; }

static void sky_apply(skyline *s, int node, int64_t v) {
  s->mn[node] = s->mx[node] = s->lazy[node] = v;
}

static void sky_push(skyline *s, int node) {
  if (s->lazy[node] >= 0) {
    sky_apply(s, 2 * node, s->lazy[node]);
    sky_apply(s, 2 * node + 1, s->lazy[node]);
    s->lazy[node] = -1;
  }
}

static void sky_query(skyline *s, int node, int lo, int hi, int a, int b, int64_t *mn, int64_t *mx) {
  coverage_steps++;
  if (b <= lo || hi <= a) return;
  if (a <= lo && hi <= b) {
    if (s->mn[node] < *mn) *mn = s->mn[node];
    if (s->mx[node] > *mx) *mx = s->mx[node];
    return;
  }
  sky_push(s, node);
  int mid = (lo + hi) / 2;
  sky_query(s, 2 * node, lo, mid, a, b, mn, mx);
  sky_query(s, 2 * node + 1, mid, hi, a, b, mn, mx);
}

static void sky_assign(skyline *s, int node, int lo, int hi, int a, int b, int64_t v) {
  coverage_steps++;
  if (b <= lo || hi <= a) return;
  if (a <= lo && hi <= b) {
    sky_apply(s, node, v);
    return;
  }
  sky_push(s, node);
  int mid = (lo + hi) / 2;
  sky_assign(s, 2 * node, lo, mid, a, b, v);
  sky_assign(s, 2 * node + 1, mid, hi, a, b, v);
  s->mn[node] = s->mn[2 * node] < s->mn[2 * node + 1] ? s->mn[2 * node] : s->mn[2 * node + 1];
  s->mx[node] = s->mx[2 * node] > s->mx[2 * node + 1] ? s->mx[2 * node] : s->mx[2 * node + 1];
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* cmp_i64, counted as a step of the coverage check */
static int cmp_cut(const void *a, const void *b) {
  coverage_steps++;
  return cmp_i64(a, b);
}

static int lower_bound(const int64_t *v, int n, int64_t x) {
  int lo = 0, hi = n;
  while (lo < hi) {
    coverage_steps++;
    int mid = (lo + hi) / 2;
    if (v[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* rows of one tensor, sorted by (start0, start1): 0 if they tile [R, C],
 * else -1 with why filled */
static int tile_check(const int64_t *const *box, int n, int64_t R, int64_t C, char *why,
                      size_t why_len) {
  int64_t *cuts = malloc(((size_t)2 * (size_t)n + 2) * sizeof(int64_t));
  int k = 0, rc = -1;
  skyline s = {0};
  if (!cuts) {
    snprintf(why, why_len, "out of memory checking coverage");
    return -1;
  }
  cuts[k++] = 0;
  cuts[k++] = C;
  for (int i = 0; i < n; i++) {
    const int64_t *r = box[i];
    if (r[MT_IX_START0] < 0 || r[MT_IX_START1] < 0 || r[MT_IX_COUNT0] < 1 || r[MT_IX_COUNT1] < 1 ||
        r[MT_IX_START0] > R - r[MT_IX_COUNT0] || r[MT_IX_START1] > C - r[MT_IX_COUNT1]) {
      snprintf(why, why_len, "box [%lld:+%lld, %lld:+%lld] lies outside the tensor [%lld, %lld]",
               (long long)r[MT_IX_START0], (long long)r[MT_IX_COUNT0], (long long)r[MT_IX_START1],
               (long long)r[MT_IX_COUNT1], (long long)R, (long long)C);
      goto done;
    }
    cuts[k++] = r[MT_IX_START1];
    cuts[k++] = r[MT_IX_START1] + r[MT_IX_COUNT1];
  }
  qsort(cuts, (size_t)k, sizeof *cuts, cmp_cut);
  int m = 0;
  for (int i = 0; i < k; i++)
    if (m == 0 || cuts[i] != cuts[m - 1]) cuts[m++] = cuts[i];
  int segs = m - 1; /* segment j is columns [cuts[j], cuts[j+1]) */
  s.size = segs;
  s.mn = calloc((size_t)4 * (size_t)segs, sizeof(int64_t));
  s.mx = calloc((size_t)4 * (size_t)segs, sizeof(int64_t));
  s.lazy = malloc((size_t)4 * (size_t)segs * sizeof(int64_t));
  if (!s.mn || !s.mx || !s.lazy) {
    snprintf(why, why_len, "out of memory checking coverage");
    goto done;
  }
  for (int i = 0; i < 4 * segs; i++) s.lazy[i] = -1;
  for (int i = 0; i < n; i++) {
    const int64_t *r = box[i];
    int a = lower_bound(cuts, m, r[MT_IX_START1]);
    int b = lower_bound(cuts, m, r[MT_IX_START1] + r[MT_IX_COUNT1]);
    int64_t mn = INT64_MAX, mx = INT64_MIN;
    sky_query(&s, 1, 0, segs, a, b, &mn, &mx);
    if (mx > r[MT_IX_START0]) {
      snprintf(why, why_len, "box [%lld:%lld, %lld:%lld] written by rank %lld overlaps another",
               (long long)r[MT_IX_START0], (long long)(r[MT_IX_START0] + r[MT_IX_COUNT0]),
               (long long)r[MT_IX_START1], (long long)(r[MT_IX_START1] + r[MT_IX_COUNT1]),
               (long long)r[MT_IX_WRITER]);
      goto done;
    }
    if (mn < r[MT_IX_START0]) {
      snprintf(why, why_len, "rows %lld..%lld of columns %lld..%lld are in no box (a box is "
                             "missing from the index)",
               (long long)mn, (long long)r[MT_IX_START0], (long long)r[MT_IX_START1],
               (long long)(r[MT_IX_START1] + r[MT_IX_COUNT1]));
      goto done;
    }
    sky_assign(&s, 1, 0, segs, a, b, r[MT_IX_START0] + r[MT_IX_COUNT0]);
  }
  int64_t mn = INT64_MAX, mx = INT64_MIN;
  sky_query(&s, 1, 0, segs, 0, segs, &mn, &mx);
  if (mn < R) {
    snprintf(why, why_len, "rows from %lld of %lld are not covered by the boxes (a box is "
                           "missing from the index)", (long long)mn, (long long)R);
    goto done;
  }
  rc = 0;
done:
  free(cuts);
  free(s.mn);
  free(s.mx);
  free(s.lazy);
  return rc;
}

typedef struct {
  const int64_t *row;
} row_ref;

static int cmp_rows(const void *a, const void *b) {
  coverage_steps++;
  const int64_t *x = ((const row_ref *)a)->row, *y = ((const row_ref *)b)->row;
  static const int key[] = {MT_IX_GROUP, MT_IX_TENSOR, MT_IX_START0, MT_IX_START1};
  for (int k = 0; k < 4; k++)
    if (x[key[k]] != y[key[k]]) return x[key[k]] < y[key[k]] ? -1 : 1;
  return 0;
}

long mt_ckpt_check_coverage(const int64_t *rows, int64_t n, const mt_ckpt_tensors *tt,
                            mt_ckpt_report_fn report, void *ctx) {
  long problems = 0;
  char path[256], why[300];
  row_ref *ref = malloc((size_t)(n > 0 ? n : 1) * sizeof *ref);
  const int64_t **box = malloc((size_t)(n > 0 ? n : 1) * sizeof *box);
  if (!ref || !box) {
    report(ctx, "/index", "out of memory checking coverage", NULL);
    free(ref);
    free(box);
    return 1;
  }
  int64_t m = 0;
  for (int64_t i = 0; i < n; i++) {
    const int64_t *r = rows + i * MT_CKPT_INDEX_COLS;
    if (r[MT_IX_GROUP] < 0 || r[MT_IX_GROUP] >= tt->groups || r[MT_IX_TENSOR] < 0 ||
        r[MT_IX_TENSOR] >= tt->n || r[MT_IX_WRITER] < 0 || r[MT_IX_WRITER] > INT32_MAX) {
      snprintf(why, sizeof why, "row %lld names no tensor or writer (group %lld, tensor %lld, "
                                "writer %lld)", (long long)i, (long long)r[MT_IX_GROUP],
               (long long)r[MT_IX_TENSOR], (long long)r[MT_IX_WRITER]);
      report(ctx, "/index", why, NULL);
      problems++;
      continue;
    }
    ref[m++].row = r;
  }
  coverage_steps += n;
  qsort(ref, (size_t)m, sizeof *ref, cmp_rows);
  /* walk every (group, tensor), with or without boxes */
  int64_t j = 0;
  for (int g = 0; g < tt->groups; g++)
    for (int t = 0; t < tt->n; t++) {
      int64_t j0 = j;
      while (j < m && ref[j].row[MT_IX_GROUP] == g && ref[j].row[MT_IX_TENSOR] == t) j++;
      for (int64_t q = j0; q < j; q++) box[q - j0] = ref[q].row;
      const int64_t *x = tt->ext[(size_t)g * (size_t)tt->n + (size_t)t];
      mt_ckpt_dataset_path(path, sizeof path, g, tt->names[t]);
      if (j == j0) {
        report(ctx, path, "no box in the index covers it (missing from the index)", NULL);
        problems++;
      } else if (j - j0 > INT32_MAX / 2 ||
                 tile_check(box, (int)(j - j0), x[0], x[1], why, sizeof why) != 0) {
        report(ctx, path, why, NULL);
        problems++;
      }
    }
  free(ref);
  free(box);
  return problems;
}

/* ------------------------------------------------------------------ */
/* shard files                                                         */

long mt_ckpt_check_shard_files(const char *dir, const int64_t *rows, int64_t n,
                               mt_ckpt_report_fn report, void *ctx) {
  /* distinct writers, in order */
  int64_t *w = malloc((size_t)(n > 0 ? n : 1) * sizeof *w);
  if (!w) {
    report(ctx, "/index", "out of memory checking shard files", NULL);
    return 1;
  }
  for (int64_t i = 0; i < n; i++) w[i] = rows[i * MT_CKPT_INDEX_COLS + MT_IX_WRITER];
  qsort(w, (size_t)n, sizeof *w, cmp_i64);
  long problems = 0;
  char shard[1200], name[64], why[200];
  for (int64_t i = 0; i < n; i++) {
    if (i > 0 && w[i] == w[i - 1]) continue;
    snprintf(name, sizeof name, "shard-%05lld.h5", (long long)w[i]);
    snprintf(shard, sizeof shard, "%s/%s", dir, name);
    if (mt_ckpt_file_size(shard) < 0) {
      snprintf(why, sizeof why, "shard file %s of writer rank %lld is missing", name,
               (long long)w[i]);
      report(ctx, dir, why, NULL);
      problems++;
    } else if (H5Fis_hdf5(shard) <= 0) {
      snprintf(why, sizeof why, "%s is not an HDF5 file", name);
      report(ctx, dir, why, NULL);
      problems++;
    }
  }
  free(w);
  return problems;
}
