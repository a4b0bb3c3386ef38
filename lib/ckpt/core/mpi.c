/* The module's communicator and its few collectives, every one checked.
 *
 * The checkpoint's collectives run on a duplicate of MPI_COMM_WORLD made on
 * the module's first call (every entry point is collective over the world):
 * its messages never meet the training's, and it returns errors instead of
 * aborting, so a failed call becomes an mt_err like any other failure.
 * These move index rows, offsets and flags (int64, bytes), not tensors:
 * the training's collectives (lib/comm, float buffers counted per mesh
 * group) are not the right tool for them. */
#include "ckpt/core/ckpt_core.h"
#include "core/flight.h"

#include <limits.h>
#include <stdlib.h>

static MPI_Comm g_comm = MPI_COMM_NULL;

/* MPI_Finalize deletes MPI_COMM_SELF's attributes first: the duplicate is
 * freed there, while MPI still works */
static int free_at_finalize(MPI_Comm comm, int key, void *value, void *extra) {
  (void)comm;
  (void)key;
  (void)value;
  (void)extra;
  int rc = MPI_SUCCESS; /* a failure here makes MPI_Finalize fail */
  if (g_comm != MPI_COMM_NULL && g_comm != MPI_COMM_WORLD) rc = MPI_Comm_free(&g_comm);
  g_comm = MPI_COMM_NULL;
  return rc;
}

MPI_Comm mt_ckpt_comm(void) {
  if (g_comm == MPI_COMM_NULL) {
    if (MPI_Comm_dup(MPI_COMM_WORLD, &g_comm) != MPI_SUCCESS) g_comm = MPI_COMM_WORLD;
    MT_MPI_CHECK(MPI_Comm_set_errhandler(g_comm, MPI_ERRORS_RETURN));
    int key;
    if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_at_finalize, &key, NULL) == MPI_SUCCESS)
      MT_MPI_CHECK(MPI_Comm_set_attr(MPI_COMM_SELF, key, NULL));
  }
  return g_comm;
}

/* the flight recorder's entry of one of these collectives (all of them
 * over the module's duplicate of the world, numbered as group "ckpt") */
static int flight(const char *op) {
  return mt_flight_begin(op, "ckpt", 0, 1, mt_ckpt_size(), -1, MT_FLIGHT_NEW, 0.0);
}

int mt_ckpt_rank(void) {
  int r = 0;
  MT_MPI_CHECK(MPI_Comm_rank(mt_ckpt_comm(), &r));
  return r;
}

int mt_ckpt_size(void) {
  int n = 1;
  MT_MPI_CHECK(MPI_Comm_size(mt_ckpt_comm(), &n));
  return n;
}

int mt_ckpt_bcast(void *buf, int64_t bytes, mt_err *e) {
  char *p = buf;
  while (bytes > 0) { /* MPI counts are int */
    int n = bytes > (1 << 30) ? (1 << 30) : (int)bytes;
    const int fl = flight("bcast");
    const int rc = MPI_Bcast(p, n, MPI_BYTE, 0, mt_ckpt_comm());
    mt_flight_end(fl);
    MT_MPI_TRY(e, rc);
    p += n;
    bytes -= n;
  }
  return 0;
}

int mt_ckpt_allreduce_i64(int64_t *v, int64_t n, MPI_Op op, mt_err *e) {
  for (int64_t a = 0; a < n; a += 1 << 26) { /* MPI counts are int */
    int k = n - a > (1 << 26) ? 1 << 26 : (int)(n - a);
    const int fl = flight("allreduce");
    const int rc = MPI_Allreduce(MPI_IN_PLACE, v + a, k, MPI_INT64_T, op, mt_ckpt_comm());
    mt_flight_end(fl);
    MT_MPI_TRY(e, rc);
  }
  return 0;
}

int mt_ckpt_allreduce_f64(double *v, int n, MPI_Op op, mt_err *e) {
  const int fl = flight("allreduce");
  const int rc = MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, op, mt_ckpt_comm());
  mt_flight_end(fl);
  MT_MPI_TRY(e, rc);
  return 0;
}

int mt_ckpt_gather_i64(const int64_t *mine, int64_t n, int64_t **all, int64_t *n_all, mt_err *e) {
  MPI_Comm comm = mt_ckpt_comm();
  int rank = mt_ckpt_rank(), world = mt_ckpt_size();
  *all = NULL;
  *n_all = 0;
  if (n > INT_MAX) {
    mt_err_runtime(e, "checkpoint: rank %d has %lld index entries, more than MPI can send at once",
                   rank, (long long)n);
    n = 0; /* still take part */
  }
  int count = (int)n;
  int *counts = rank == 0 ? mt_calloc((size_t)world, sizeof(int)) : NULL;
  int *displs = rank == 0 ? mt_calloc((size_t)world, sizeof(int)) : NULL;
  const int fl = flight("gather_index");
  int rc = MPI_Gather(&count, 1, MPI_INT, counts, 1, MPI_INT, 0, comm);
  int64_t total = 0;
  int64_t too_many = 0;
  for (int r = 0; rc == MPI_SUCCESS && rank == 0 && r < world; r++) {
    displs[r] = (int)(total < INT_MAX ? total : 0);
    total += counts[r];
    if (total > INT_MAX) too_many = 1; /* MPI displacements are int */
  }
  if (rc == MPI_SUCCESS) rc = MPI_Bcast(&too_many, 1, MPI_INT64_T, 0, comm);
  if (rc == MPI_SUCCESS && !too_many) {
    if (rank == 0) *all = mt_malloc((size_t)total * sizeof(int64_t) + 8);
    rc = MPI_Gatherv(mine, count, MPI_INT64_T, *all, counts, displs, MPI_INT64_T, 0, comm);
    *n_all = total;
  }
  mt_flight_end(fl);
  free(counts);
  free(displs);
  if (rc != MPI_SUCCESS) {
    char s[MPI_MAX_ERROR_STRING];
    mt_err_runtime(e, "checkpoint: gathering the index on rank 0 failed: %s",
                   mt_mpi_strerror(rc, s));
  } else if (too_many) {
    mt_err_runtime(e, "checkpoint: the index has more than %d entries", INT_MAX);
  }
  if (e->failed) {
    free(*all);
    *all = NULL;
    *n_all = 0;
    return -1;
  }
  return 0;
}

int mt_ckpt_agree(mt_err *e) { return mt_err_agree(e, mt_ckpt_comm()); }
