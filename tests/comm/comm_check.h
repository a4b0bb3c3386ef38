/* What the comm tests with a stand-in device backend (device_staging.c,
 * device_direct.c) share: MPI and a mesh whose dp group is every rank, and
 * the comparison of results. Include once, from the program's source file. */
#ifndef MT_TESTS_COMM_CHECK_H
#define MT_TESTS_COMM_CHECK_H

#include "comm/comm.h"
#include "../check.h"

#include <stdio.h>
#include <string.h>

/* main's first step: MPI, the log, and a mesh of dp = all ranks (an error
 * ends the run); returns the number of ranks */
static inline int comm_test_start(int *argc, char ***argv, mt_mesh *mesh) {
  MPI_Init(argc, argv);
  mt_log_init(0);
  mt_err e = {0};
  int world;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (mt_mesh_create(mesh, 1, 1, world, 1, &e) != 0) {
    fprintf(stderr, "%s\n", e.msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return world;
}

/* the same floats, NaN-aware (a NaN is never the same) */
static inline int same(const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!(a[i] == b[i])) return 0;
  return 1;
}

/* a host buffer h and its "device" copy d: the same n floats, the test
 * values of the program's fill(x, n, rank, salt) (a macro: a program that
 * has no fill includes this too) */
#define fill_both(h, d, n, rank, salt)                                       \
  do {                                                                       \
    fill((h), (n), (rank), (salt));                                          \
    memcpy((d), (h), (n) * sizeof(float));                                   \
  } while (0)

/* parts of N over n ranks as the registry cuts a bucket: the first N % n
 * ranks one element more */
static inline void parts(size_t N, int n, int *counts, int *displs) {
  for (int q = 0, off = 0; q < n; q++) {
    counts[q] = (int)(N / (size_t)n) + (q < (int)(N % (size_t)n));
    displs[q] = off;
    off += counts[q];
  }
}

#endif
