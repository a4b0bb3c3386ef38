/* The safetensors file of Hugging Face, written and read here (private to
 * lib/ckpt/interop). */
#ifndef MT_CKPT_SAFETENSORS_H
#define MT_CKPT_SAFETENSORS_H

#include "ckpt/core/ckpt_core.h"


enum { MT_ST_F32 = 0, MT_ST_BF16 = 1, MT_ST_F16 = 2 };
typedef struct {
  char name[160];
  int dtype, ndim;
  int64_t shape[MT_MAX_DIMS];
  int64_t offset, bytes; /* of its data in the file */
} mt_st_tensor;
typedef struct {
  char path[1100];
  int fd;
  int64_t data_start;
  mt_st_tensor *t;
  int n;
} mt_st_file;
size_t mt_st_dtype_size(int dtype);
const char *mt_st_dtype_name(int dtype);
/* the header of n tensors laid end to end in this order (metadata_json: an
 * object of strings, or NULL); *data_start: where tensor 0's bytes go */
int mt_st_write_header(int fd, const mt_st_tensor *t, int n, const char *metadata_json,
                       int64_t *data_start, const char *path, mt_err *e);
int mt_st_write_all(int fd, const void *buf, size_t bytes, int64_t off, const char *path,
                    mt_err *e);
/* open and check the header: sizes, dtypes, every tensor once, and offsets
 * that tile the data (in order, no gap, no overlap, nothing after) */
int mt_st_open(const char *path, mt_st_file *f, mt_err *e);
void mt_st_close(mt_st_file *f);
const mt_st_tensor *mt_st_find(const mt_st_file *f, const char *name);
/* elements [first, first+n) of t (flat, row-major) as float32 */
int mt_st_read_f32(const mt_st_file *f, const mt_st_tensor *t, int64_t first, int64_t n,
                   float *out, mt_err *e);

/* A model directory: model.safetensors, or the shards that
 * model.safetensors.index.json lists (the map and the shards checked to
 * agree); a directory of PyTorch .bin weights only is refused saying so. */
typedef struct {
  mt_st_file *files;
  int n_files;
} mt_st_set;
int mt_st_open_dir(const char *dir, mt_st_set *s, mt_err *e);
void mt_st_close_dir(mt_st_set *s);
/* the tensor of that name in any of the files (and which file), or NULL */
const mt_st_tensor *mt_st_set_find(const mt_st_set *s, const char *name, const mt_st_file **f);

#endif
