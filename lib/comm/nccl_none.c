/* A build without NCCL: device buffers always travel staged through host
 * MPI (staging.c); nothing to set up. */
#include "comm/comm.h"

int mt_comm_nccl_built(void) { return 0; }

int mt_comm_nccl_init(mt_mesh *m, const mt_comm_nccl_opts *o, mt_err *e) {
  (void)m, (void)o, (void)e;
  return 0;
}

void mt_comm_nccl_destroy(mt_mesh *m) { (void)m; }
size_t mt_comm_nccl_workspace_peak(void) { return 0; }
