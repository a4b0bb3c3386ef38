/* test_ops_table: the op tables are complete (mt_ops_missing), and the
 * virtual device's prices every compute op (mt_ops_unpriced).
 * - The CPU backend fills every member: none missing, empty list.
 * - The check finds what it should: with members cleared from a copy of the
 *   CPU table, it counts them and names them in table order (the block
 *   attention and the strided copies the model calls for every layer, a
 *   first and a last member); the reference attention, which a backend
 *   may leave NULL, is not reported; a short names buffer is cut, never
 *   overrun.
 * (The CUDA table is checked when the backend builds it, and by the GPU
 * test gpu_ops.) */
#include "kernels/kernels.h"

#include <stdio.h>
#include <string.h>

#include "../check.h"

int main(void) {
  char names[512];
  const mt_ops *cpu = mt_ops_cpu();
  int n = mt_ops_missing(cpu, names, sizeof names);
  MT_CHECK(n == 0 && names[0] == '\0', "CPU op table: %d member(s) NULL: %s", n, names);
  MT_CHECK(mt_ops_missing(cpu, NULL, 0) == 0, "CPU op table without a names buffer");

  mt_ops t = *cpu;
  t.alloc = NULL;
  t.attn_forward = NULL;
  t.attn_backward = NULL;
  t.add_2d = NULL;
  t.scale = NULL;
  t.attention_forward = NULL; /* optional: not reported */
  t.attention_backward = NULL;
  n = mt_ops_missing(&t, names, sizeof names);
  MT_CHECK(n == 5, "5 members cleared, %d reported (%s)", n, names);
  MT_CHECK(strcmp(names, "alloc, scale, add_2d, attn_forward, attn_backward") == 0,
        "names of the cleared members: '%s'", names);

  /* a buffer too short for the list: cut, terminated, the count still whole */
  char small[12];
  memset(small, 'x', sizeof small);
  n = mt_ops_missing(&t, small, sizeof small);
  MT_CHECK(n == 5, "count with a short buffer: %d", n);
  MT_CHECK(memchr(small, '\0', sizeof small) != NULL && strncmp(small, "alloc", 5) == 0,
        "short buffer: not terminated or wrong start");

  mt_ops only = *cpu;
  only.copy_2d = NULL;
  n = mt_ops_missing(&only, names, sizeof names);
  MT_CHECK(n == 1 && strcmp(names, "copy_2d") == 0, "copy_2d cleared: %d, '%s'", n, names);

  /* the virtual device's table prices every compute op of the null one it
   * is built on; the null table against itself: every compute op reported,
   * memory and its moves (alloc, free, upload, download, sync) never */
  n = mt_ops_unpriced(mt_ops_virtual(), mt_ops_null(), names, sizeof names);
  MT_CHECK(n == 0 && names[0] == '\0', "virtual op table: %d op(s) unpriced: %s", n, names);
  n = mt_ops_unpriced(mt_ops_null(), mt_ops_null(), names, sizeof names);
  MT_CHECK(n > 30 && strncmp(names, "zero, copy, axpy, scale, copy_2d", 32) == 0 &&
               !strstr(names, "alloc") && !strstr(names, "sync") && !strstr(names, "upload"),
           "null against itself: %d, '%.60s'", n, names);
  mt_ops v = *mt_ops_virtual();
  v.attn_backward = mt_ops_null()->attn_backward;
  n = mt_ops_unpriced(&v, mt_ops_null(), names, sizeof names);
  MT_CHECK(n == 1 && strcmp(names, "attn_backward") == 0, "attn_backward unpriced: %d, '%s'", n,
           names);

  if (*mt_check_failures()) return 1;
  printf("test_ops_table: all checks passed\n");
  return 0;
}
