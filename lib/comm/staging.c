/* Device buffers staged through the host: a call that the direct backend
 * does not serve runs its MPI call on host copies of its buffers, made
 * with the device backend's copy functions (mt_comm_set_device_copy), and
 * copies the receive side back when it ends (a non-blocking call: in
 * mt_wait, requests.c). Each group counts its staged device calls. */
#include "comm/comm_internal.h"

#include <stdlib.h>
#include <string.h>

static mt_comm_device_copy g_dev;
static int g_have_dev;
static long g_staged;

void mt_comm_set_device_copy(const mt_comm_device_copy *c) {
  g_have_dev = c != NULL;
  if (c) g_dev = *c;
}

long mt_comm_staged_calls(void) { return g_staged; }

/* a host block of `bytes` for a device call */
static char *host_block(size_t bytes) {
  if (!g_have_dev) mt_die("a device buffer was handed to comm, but no device backend registered "
                          "its copy functions");
  g_staged++;
  return mt_malloc(bytes ? bytes : 1);
}

mt_comm_staged mt_comm_stage(mt_group *g, mt_loc loc, const void *send, size_t send_bytes,
                             void *recv, size_t recv_bytes, size_t extra_bytes) {
  if (loc == MT_LOC_HOST) return (mt_comm_staged){NULL, (void *)send, recv, NULL};
  g->device_staged++;
  const int in_place = send && send == recv;
  char *b = host_block(send_bytes + (in_place ? 0 : recv_bytes) + extra_bytes);
  mt_comm_staged x = {b, b, in_place ? b : b + send_bytes, NULL};
  x.extra = (char *)x.recv + recv_bytes;
  if (send_bytes) g_dev.to_host(x.send, send, send_bytes);
  return x;
}

void mt_comm_unstage(const mt_comm_staged *x, void *recv, size_t recv_bytes) {
  if (!x->block) return;
  if (recv_bytes) g_dev.to_device(recv, x->recv, recv_bytes);
  free(x->block);
}

void mt_comm_to_device(void *dev, const void *host, size_t bytes) {
  if (bytes) g_dev.to_device(dev, host, bytes);
}

void mt_comm_local_copy(void *dst, const void *src, size_t bytes, mt_loc loc) {
  if (dst == src || bytes == 0) return;
  if (loc == MT_LOC_HOST) {
    memcpy(dst, src, bytes);
    return;
  }
  char *h = host_block(bytes);
  g_dev.to_host(h, src, bytes);
  g_dev.to_device(dst, h, bytes);
  free(h);
}
