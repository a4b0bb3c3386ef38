/* The element types (core.h's mt_dtype): sizes and names. */
#include "core/core.h"

size_t mt_dtype_bytes(mt_dtype t) {
  switch (t) {
  case MT_DT_F32: return 4;
  case MT_DT_F64: return 8;
  case MT_DT_BF16: return 2;
  case MT_DT_I32: return 4;
  }
  mt_die("element type %d unknown", (int)t);
}

const char *mt_dtype_name(mt_dtype t) {
  switch (t) {
  case MT_DT_F32: return "fp32";
  case MT_DT_F64: return "fp64";
  case MT_DT_BF16: return "bf16";
  case MT_DT_I32: return "i32";
  }
  mt_die("element type %d unknown", (int)t);
}
