/* Shared by lib/comm's files (not part of the API). */
#ifndef MT_COMM_INTERNAL_H
#define MT_COMM_INTERNAL_H

#include "comm/comm.h"

/* the virtual backend (virtual.c): a call (mt_comm_backend_call's
 * contract), and the end of a request it started */
int mt_comm_virtual_call(mt_group *g, const mt_coll *c);
void mt_comm_virtual_wait(mt_request *r);
void mt_comm_virtual_progress(mt_request *r);

#endif
