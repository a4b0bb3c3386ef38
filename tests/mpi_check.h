/* The frame of an MPI test program (tests/tp, tests/cp), around check.h:
 *
 *   mt_mpi_test_begin(&argc, &argv, &rank)  MPI_Init, failures and logs
 *                              tagged with the world rank, one kernel
 *                              thread (bits independent of the machine);
 *                              returns the world size
 *   mt_mpi_test_end(prog)      the failures summed over the ranks, one
 *                              summary line from rank 0, MPI_Finalize;
 *                              returns the exit status (0 or 1) */
#ifndef MT_TESTS_MPI_CHECK_H
#define MT_TESTS_MPI_CHECK_H

#include <mpi.h>

#include "core/core.h"
#include "kernels/kernels.h"
#include "check.h"

static inline int mt_mpi_test_begin(int *argc, char ***argv, int *rank) {
  int world = 1;
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  mt_check_set_rank(*rank);
  mt_log_init(*rank);
  mt_kernels_set_threads(1);
  return world;
}

static inline int mt_mpi_test_end(const char *prog) {
  int rank = 0, bad = *mt_check_failures();
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  int rc = mt_check_report(prog, bad, rank == 0);
  MPI_Finalize();
  return rc;
}

#endif
