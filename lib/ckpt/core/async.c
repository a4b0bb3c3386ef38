/* Asynchronous save: a snapshot of this rank's state, then a background
 * thread writes its shard file; committed at a step boundary.
 *
 * The snapshot copy itself runs in the background thread too, while the
 * next step's forward and backward (which read the parameters and moments,
 * never change them) go on; mt_ckpt_async_fence, called before the
 * optimizer changes the state, waits for the copy to be complete. So a
 * save blocks training for the agreement and the temporary directory only
 * (and for whatever of the copy the forward and backward did not hide).
 *
 * The writer thread makes no MPI call and never aborts: it writes one
 * serial HDF5 file and hands its error (if any) back in the save's mt_err;
 * mt_ckpt_async_poll agrees on it over all ranks at the next step boundary.
 * MPI must be initialised with at least MPI_THREAD_FUNNELED (a second thread
 * exists, only the main thread calls MPI); HDF5 is called by one thread at
 * a time (every other entry point of this module waits for the writer). */
#include "ckpt/core/ckpt_core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mt_ckpt_async {
  char root[1024], tmpdir[1024];
  mt_ckpt_mode mode;
  mt_ckpt_crash crash;
  char *config_ini;
  int keep;
  mt_ckpt_meta meta;
  float *moe_bias; /* meta's MoE routing bias, copied at begin (NULL: none) */
  const mt_registry *reg;
  mt_mesh *mesh;
  mt_flat_range *ranges[MT_CKPT_NGROUPS]; /* point into snapshot */
  mt_flat_range *live[MT_CKPT_NGROUPS];   /* the caller's ranges, copied from */
  mt_ckpt_state st;
  pthread_mutex_t lock;
  pthread_cond_t copied_cv;
  int copied; /* the snapshot is complete (under lock) */
  double t_copied;
  float *snapshot;
  size_t snapshot_n;
  pthread_t thread;
  int thread_running; /* started and not joined yet */
  atomic_int done;
  mt_ckpt_rows rows;
  mt_err err;
  double t_start, t_written;
};

/* One host buffer for snapshots, kept from save to save: the copy then runs
 * at memory bandwidth instead of page-fault speed. (At most one save is in
 * flight, so one buffer is enough.) */
static float *g_snapshot;
static size_t g_snapshot_cap;
static float *snapshot_buffer(size_t n) {
  if (n > g_snapshot_cap) {
    if (g_snapshot) mt_mem_free(MT_MEM_OTHER, g_snapshot, g_snapshot_cap * sizeof(float));
    g_snapshot = mt_mem_alloc(MT_MEM_OTHER, n * sizeof(float));
    g_snapshot_cap = n;
  }
  return g_snapshot ? g_snapshot : (g_snapshot = mt_mem_alloc(MT_MEM_OTHER, sizeof(float)));
}

/* the save in flight (at most one) */
static mt_ckpt_async *g_inflight;

/* the snapshot: this rank's ranges copied, then the state may change */
static void copy_snapshot(mt_ckpt_async *a) {
  for (int g = 0; g < MT_CKPT_NGROUPS; g++)
    for (int i = 0; i < a->st.n_ranges[g]; i++)
      memcpy(a->ranges[g][i].mem, a->live[g][i].mem, a->live[g][i].len * sizeof(float));
  pthread_mutex_lock(&a->lock);
  a->copied = 1;
  a->t_copied = mt_now();
  pthread_cond_broadcast(&a->copied_cv);
  pthread_mutex_unlock(&a->lock);
}

double mt_ckpt_async_fence(mt_ckpt_async *a) {
  if (!a) return 0.0;
  double t0 = mt_now();
  pthread_mutex_lock(&a->lock);
  while (!a->copied) pthread_cond_wait(&a->copied_cv, &a->lock);
  pthread_mutex_unlock(&a->lock);
  return mt_now() - t0;
}

static void *async_writer(void *arg) {
  mt_ckpt_async *a = arg;
  copy_snapshot(a);
  mt_ckpt_h5_scope quiet; /* the only thread in HDF5 now: errors go to a->err */
  mt_ckpt_h5_quiet(&quiet);
  mt_ckpt_write_shard(a->tmpdir, a->reg, a->mesh, &a->st, a->crash, a->meta.step, &a->rows,
                      &a->err);
  mt_ckpt_h5_scope_end(&quiet);
  a->t_written = mt_now();
  atomic_store(&a->done, 1);
  return NULL;
}

static void join_writer(void *arg) {
  mt_ckpt_async *a = arg;
  if (!a->thread_running) return;
  pthread_join(a->thread, NULL);
  a->thread_running = 0;
}

mt_ckpt_async *mt_ckpt_async_begin(const char *root, const mt_ckpt_meta *meta,
                                   const mt_registry *reg, mt_mesh *mesh,
                                   const mt_ckpt_state *st, const mt_ckpt_save_opts *opts,
                                   mt_err *e) {
  mt_err local = {0};
  int provided = MPI_THREAD_SINGLE;
  MT_MPI_CHECK(MPI_Query_thread(&provided));
  if (provided < MPI_THREAD_FUNNELED)
    mt_err_set(&local, "ckpt.async needs MPI initialised with MPI_THREAD_FUNNELED or more "
                       "(MPI_Init_thread); this process has level %d", provided);
  if (g_inflight) mt_err_set(&local, "checkpoint: an asynchronous save is still in flight");
  if (mt_ckpt_agree(&local)) {
    *e = local;
    mt_err_pass_at(e, __FILE__, __LINE__);
    return NULL;
  }
  mt_ckpt_async *a = mt_calloc(1, sizeof *a);
  a->t_start = mt_now();
  mt_ckpt_h5_scope scope;
  mt_ckpt_h5_scope_begin(&scope);
  int begun = mt_ckpt_save_begin(root, meta, reg, mesh, opts, a->tmpdir, sizeof a->tmpdir, e);
  mt_ckpt_h5_scope_end(&scope);
  if (begun != 0) {
    free(a);
    mt_err_pass_at(e, __FILE__, __LINE__);
    return NULL;
  }
  snprintf(a->root, sizeof a->root, "%s", root);
  a->mode = MT_CKPT_MODE_PER_WRITER;
  a->crash = opts->test_crash;
  a->config_ini = strdup(opts->config_ini ? opts->config_ini : "");
  a->keep = opts->keep;
  a->meta = *meta;
  if (meta->moe_bias && meta->moe_bias_rows > 0) { /* the model's changes after this step */
    size_t n = (size_t)meta->moe_bias_rows * (size_t)meta->moe_experts;
    a->moe_bias = mt_malloc(n * sizeof(float) + 8);
    memcpy(a->moe_bias, meta->moe_bias, n * sizeof(float));
    a->meta.moe_bias = a->moe_bias;
  }
  a->reg = reg;
  a->mesh = mesh;
  /* where the snapshot goes (the copy itself is the writer thread's first
   * job); the caller's range list is copied, its memory read until the fence */
  for (int g = 0; g < MT_CKPT_NGROUPS; g++)
    for (int i = 0; i < st->n_ranges[g]; i++) a->snapshot_n += st->ranges[g][i].len;
  a->snapshot = snapshot_buffer(a->snapshot_n);
  size_t k = 0;
  for (int g = 0; g < MT_CKPT_NGROUPS; g++) {
    a->ranges[g] = mt_calloc((size_t)st->n_ranges[g] + 1, sizeof(mt_flat_range));
    a->live[g] = mt_calloc((size_t)st->n_ranges[g] + 1, sizeof(mt_flat_range));
    for (int i = 0; i < st->n_ranges[g]; i++) {
      const mt_flat_range *r = &st->ranges[g][i];
      a->live[g][i] = *r;
      a->ranges[g][i] = (mt_flat_range){.begin = r->begin, .len = r->len, .mem = a->snapshot + k};
      k += r->len;
    }
    a->st.ranges[g] = a->ranges[g];
    a->st.n_ranges[g] = st->n_ranges[g];
  }
  pthread_mutex_init(&a->lock, NULL);
  pthread_cond_init(&a->copied_cv, NULL);
  atomic_init(&a->done, 0);
  g_inflight = a;
  /* from here on every entry point of the module waits for this writer
   * before it calls HDF5 */
  mt_ckpt_writer_register(join_writer, a);
  if (pthread_create(&a->thread, NULL, async_writer, a) == 0) {
    a->thread_running = 1;
  } else { /* no thread to be had: write now, in this one */
    mt_warn("checkpoint: cannot start a writer thread; writing step %lld in the foreground",
            (long long)meta->step);
    async_writer(a);
  }
  return a;
}

int mt_ckpt_async_poll(mt_ckpt_async **ap, int wait, double *write_s, int64_t *step, mt_err *e) {
  mt_ckpt_async *a = *ap;
  if (!a) return 0;
  /* all ranks decide together whether the writers are done */
  int64_t done = wait ? 1 : atomic_load(&a->done);
  mt_err agreed = {0};
  if (mt_ckpt_allreduce_i64(&done, 1, MPI_MIN, &agreed) != 0) done = 1; /* and fail below */
  if (!done) return 0;
  join_writer(a); /* the copy is done too: the thread did it first */
  g_inflight = NULL;
  mt_ckpt_writer_register(NULL, NULL);
  mt_ckpt_h5_scope scope;
  mt_ckpt_h5_scope_begin(&scope);
  /* the writer's error, if any, is agreed here, at a step boundary */
  mt_err local = a->err.failed ? a->err : agreed;
  mt_ckpt_written w = {0};
  mt_ckpt_finish_per_writer(a->tmpdir, &a->meta, a->reg, a->mesh, a->config_ini, &a->rows, NULL,
                            &w, &local);
  int rc = 0;
  if (mt_ckpt_agree(&local)) {
    mt_ckpt_save_abandon(a->tmpdir, a->mesh);
    rc = mt_err_pass(&local);
  } else if (mt_ckpt_save_end(a->root, a->tmpdir, a->meta.step, a->mode, a->crash, a->keep,
                              a->mesh, &w, &local) != 0) {
    rc = mt_err_pass(&local);
  }
  mt_ckpt_written_free(&w);
  mt_ckpt_h5_scope_end(&scope);
  if (rc != 0) *e = local;
  if (write_s) *write_s = a->t_written - a->t_start;
  if (step) *step = a->meta.step;
  free(a->rows.rows);
  free(a->config_ini);
  free(a->moe_bias);
  for (int g = 0; g < MT_CKPT_NGROUPS; g++) {
    free(a->ranges[g]);
    free(a->live[g]);
  }
  pthread_cond_destroy(&a->copied_cv);
  pthread_mutex_destroy(&a->lock);
  free(a);
  *ap = NULL;
  return rc == 0 ? 1 : -1;
}
