/* Who may call HDF5, and how loudly.
 *
 * HDF5 prints its error stack on stderr by default. The ckpt module turns
 * that off only while one of its own entry points runs (errors then reach
 * the caller as one line in an mt_err) and gives the caller's setting back
 * when the entry point returns: a program that uses HDF5 besides
 * meshtrain's checkpoints keeps its own error printing.
 *
 * The parallel HDF5 build is not thread-safe: at most one thread may be
 * inside it. The one other thread the module starts (the background writer
 * of an asynchronous save) registers itself here; every scope begins by
 * waiting for it. Lowest layer of core: no other file of the module is
 * called from here. */
#include "ckpt/core/ckpt_core.h"

#include <stddef.h>

static void (*g_writer_join)(void *);
static void *g_writer_arg;

void mt_ckpt_writer_register(void (*join)(void *), void *arg) {
  g_writer_join = join;
  g_writer_arg = arg;
}

void mt_ckpt_writer_wait(void) {
  if (g_writer_join) g_writer_join(g_writer_arg);
}

void mt_ckpt_h5_quiet(mt_ckpt_h5_scope *s) {
  s->active = H5Eget_auto2(H5E_DEFAULT, &s->func, &s->data) >= 0;
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  s->open_objects = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
}

void mt_ckpt_h5_scope_begin(mt_ckpt_h5_scope *s) {
  mt_ckpt_writer_wait();
  mt_ckpt_h5_quiet(s);
}

void mt_ckpt_h5_scope_end(const mt_ckpt_h5_scope *s) {
  /* every path out of an entry point closes what it opened: a file left
   * open (by a bug) would make HDF5's shutdown crash the process later */
  ssize_t open_now = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
  if (open_now > s->open_objects && s->open_objects >= 0)
    mt_warn("checkpoint: %zd HDF5 object(s) left open by the ckpt module", open_now - s->open_objects);
  H5Eclear2(H5E_DEFAULT);
  if (s->active) H5Eset_auto2(H5E_DEFAULT, s->func, s->data);
}
