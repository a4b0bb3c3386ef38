/* meshbench ckpt: checkpoint save and load bandwidth against raw POSIX I/O of
 * the same bytes, measured in the same run.
 *
 *   mpirun -n R meshbench ckpt [--model gpt2-124m] [--dir DIR] [--reps N] [--step-s S]
 *                              [--json FILE]
 *   mpirun -n R meshbench ckpt --save-to ROOT [--mode shared|per-writer]
 *
 * The state is the model's parameters and both AdamW moments (3 x 4 bytes per
 * parameter; about 1.5 GB for gpt2-124m), each rank holding 1/R of it as a
 * ZeRO-style flat share. Reported per mode (shared, per-writer): save and
 * load GB/s, their ratio to raw write+fsync and read of the same bytes, and
 * the blocking time of an asynchronous save against a blocking one (at the
 * step boundary, plus the wait for the snapshot at the next optimizer step
 * after a stand-in forward/backward of S seconds; and with no overlap).
 * Medians of interleaved repetitions: these machines are noisy. --save-to
 * writes the state once as a checkpoint (for the conversion benchmark). */
#define _GNU_SOURCE /* sync_file_range */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "comm/comm.h"
#include "bench/bench.h"
#include "core/core.h"
#include "model/model.h"


static double barrier_time(double t0) {
  double dt = mt_now() - t0, mx = dt;
  MT_MPI_CHECK(MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  return mx;
}

/* write (and fsync) or read n bytes of buf at path; early: start the disk's
 * writeback behind each 64 MiB written (sync_file_range), as the checkpoint
 * writers do; returns 0 on success */
static int raw_io(const char *path, char *buf, size_t n, int write_it, int early) {
  int fd = write_it ? open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644) : open(path, O_RDONLY);
  if (fd < 0) return -1;
  size_t done = 0;
  while (done < n) {
    size_t chunk = n - done > (64u << 20) ? (64u << 20) : n - done;
    ssize_t k = write_it ? write(fd, buf + done, chunk) : read(fd, buf + done, chunk);
    if (k <= 0) {
      close(fd);
      return -1;
    }
#ifdef SYNC_FILE_RANGE_WRITE
    if (write_it && early) sync_file_range(fd, (off_t)done, (off_t)k, SYNC_FILE_RANGE_WRITE);
#endif
    done += (size_t)k;
  }
  int rc = write_it ? fsync(fd) : 0;
  close(fd);
  return rc;
}


/* median over the repetitions (rows of nt times) of (x[a] + x[b]) / x[c]
 * (b, c < 0: left out) */
static double median_of(const double *t, int nt, int reps, int a, int b, int c) {
  double *v = mt_calloc((size_t)reps, sizeof(double));
  for (int q = 0; q < reps; q++) {
    const double *x = t + (size_t)q * (size_t)nt;
    v[q] = (x[a] + (b >= 0 ? x[b] : 0.0)) / (c >= 0 ? x[c] : 1.0);
  }
  double m = mt_median(v, reps);
  free(v);
  return m;
}

static void remove_dir(const char *path) {
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
  if (system(cmd) != 0) mt_warn("could not remove %s", path);
}

int mt_bench_ckpt(int argc, char **argv) {
  const char *model_name = "gpt2-124m", *dir = "outputs/bench-ckpt", *json = NULL;
  const char *save_to = NULL, *save_mode = "shared";
  int reps = 3, rc = MT_EXIT_OK;
  double step_s = 0.5; /* the stand-in forward/backward an async snapshot overlaps with */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--model") && i + 1 < argc) model_name = argv[++i];
    else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--save-to") && i + 1 < argc) save_to = argv[++i];
    else if (!strcmp(argv[i], "--step-s") && i + 1 < argc) step_s = atof(argv[++i]);
    else if (!strcmp(argv[i], "--mode") && i + 1 < argc) save_mode = argv[++i];
    else {
      if (strcmp(argv[i], "--help")) fprintf(stderr, "meshbench ckpt: unknown option '%s'\n", argv[i]);
      printf("usage: mpirun -n R meshbench ckpt [--model tiny|small|gpt2-124m] [--dir DIR] "
             "[--reps N] [--step-s S] [--json FILE]\n"
             "  (--reps: interleaved repetitions, medians reported, default 3; --step-s: the\n"
             "  stand-in forward/backward an async snapshot overlaps with, default 0.5)\n"
             "       mpirun -n R meshbench ckpt --save-to ROOT [--mode shared|per-writer]\n"
             "           (only save the benchmark's state once, as ROOT/step_1: a checkpoint of\n"
             "           the model's shape for the conversion tests and benchmarks)\n");
      return strcmp(argv[i], "--help") ? MT_EXIT_BADINPUT : 0;
    }
  }
  int init = 0;
  MT_MPI_CHECK(MPI_Initialized(&init));
  /* FUNNELED: the asynchronous save's writer thread */
  if (!init) mt_mpi_init(NULL, NULL, MPI_THREAD_FUNNELED);
  int rank, world;
  MT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  mt_log_init(rank);
  mt_model_shape shape;
  const int preset = mt_config_enum_parse("model.preset", model_name);
  if (preset < 0 || mt_model_preset((mt_preset)preset, &shape) != 0 || reps < 1) {
    if (rank == 0) fprintf(stderr, "meshbench ckpt: unknown model '%s' or bad --reps\n", model_name);
    return MT_EXIT_BADINPUT;
  }
  mt_registry reg;
  mt_registry_init(&reg, 1, 0);
  mt_mesh mesh;
  mt_err err = {0};
  if (mt_gpt_register(&reg, &shape, 1, 0, 0, &err) != 0) mt_die("%s", err.msg);
  mt_mesh_create(&mesh, 1, 1, world, 1, &err);
  /* this rank's share of the flat state, three groups */
  size_t n = reg.numel_local, lo = n * (size_t)rank / (size_t)world,
         hi = n * (size_t)(rank + 1) / (size_t)world, len = hi - lo;
  float *mem = mt_malloc(3 * len * sizeof(float) + 64);
  for (size_t i = 0; i < 3 * len; i++) mem[i] = (float)((i * 2654435761u) % 1000) * 1e-3f;
  mt_flat_range ranges[MT_CKPT_NGROUPS];
  mt_ckpt_state st;
  for (int g = 0; g < MT_CKPT_NGROUPS; g++) {
    ranges[g] = (mt_flat_range){.begin = lo, .len = len, .mem = mem + (size_t)g * len};
    st.ranges[g] = &ranges[g];
    st.n_ranges[g] = len > 0;
  }
  double total_bytes = 3.0 * 4.0 * (double)n;
  mt_ckpt_meta meta = {.step = 1, .samples = 0, .tokens = 0, .optimizer_step = 1, .seed = 1,
                       .n_layer = shape.n_layer, .n_embd = shape.n_embd, .n_head = shape.n_head,
                       .seq_len = shape.seq_len, .vocab = shape.vocab, .dp = world, .tp = 1,
                       .pp = 1, .cp = 1, .zero = 1, .world = world, .ep = 1, .etp = 1};
  if (save_to) {
    int mode = mt_config_enum_parse("ckpt.mode", save_mode);
    if (mode != MT_CKPT_MODE_SHARED && mode != MT_CKPT_MODE_PER_WRITER)
      mt_die("meshbench ckpt: --mode '%s' is not shared or per-writer", save_mode);
    mt_ckpt_save_opts opts = {.mode = (mt_ckpt_mode)mode, .keep = 0,
                              .test_crash = MT_CKPT_CRASH_NONE, .config_ini = ""};
    if (mt_ckpt_save(save_to, &meta, &reg, &mesh, &st, &opts, NULL, &err) != 0) mt_die("%s", err.msg);
    if (rank == 0) printf("meshbench ckpt: %s state (%.3f GB) saved as %s/step_1 (%s)\n", model_name,
                          total_bytes / 1e9, save_to, save_mode);
    free(mem);
    mt_mesh_destroy(&mesh);
    mt_registry_free(&reg);
    return 0;
  }
  char root[1024], raw[1100];
  snprintf(root, sizeof root, "%s/run-%d", dir, world);
  if (rank == 0) {
    remove_dir(root);
    mkdir(dir, 0755);
    mkdir(root, 0755);
  }
  MT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  snprintf(raw, sizeof raw, "%s/raw-%05d.bin", root, rank);
  const char *modes[2] = {"shared", "per-writer"};
  /* per repetition: raw write and read, then each mode's save and load, then
   * an asynchronous save; the repetitions interleave everything, and the
   * ratios are taken per repetition (against the raw I/O of the same
   * repetition) before their median: the machine's load drifts */
  enum { RAW_W, RAW_W2, RAW_R, SAVE_SH, LOAD_SH, SAVE_PW, LOAD_PW, A_BEGIN, A_FENCE, A_NOOVERLAP, A_COPY,
         CHECK_SH, CHECK_PW, NT };
  double *t = mt_calloc((size_t)reps * NT, sizeof(double));
  for (int rep = 0; rep < reps; rep++) {
    double *x = t + (size_t)rep * NT;
    MT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = mt_now();
    if (raw_io(raw, (char *)mem, 3 * len * sizeof(float), 1, 0) != 0) mt_die("raw write of %s failed", raw);
    x[RAW_W] = barrier_time(t0);
    unlink(raw);
    MT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    t0 = mt_now();
    if (raw_io(raw, (char *)mem, 3 * len * sizeof(float), 1, 1) != 0) mt_die("raw write of %s failed", raw);
    x[RAW_W2] = barrier_time(t0);
    t0 = mt_now();
    if (raw_io(raw, (char *)mem, 3 * len * sizeof(float), 0, 0) != 0) mt_die("raw read of %s failed", raw);
    x[RAW_R] = barrier_time(t0);
    unlink(raw);
    for (int m = 0; m < 2; m++) {
      char mroot[1200], step_dir[1300];
      snprintf(mroot, sizeof mroot, "%s/%s", root, modes[m]);
      snprintf(step_dir, sizeof step_dir, "%s/step_1", mroot);
      mt_ckpt_save_opts opts = {.mode = m ? MT_CKPT_MODE_PER_WRITER : MT_CKPT_MODE_SHARED,
                                .keep = 1, .test_crash = MT_CKPT_CRASH_NONE, .config_ini = ""};
      MT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
      t0 = mt_now();
      if (mt_ckpt_save(mroot, &meta, &reg, &mesh, &st, &opts, NULL, &err) != 0) mt_die("%s", err.msg);
      x[m ? SAVE_PW : SAVE_SH] = barrier_time(t0);
      /* the checks that make the commit a promise: the slowest rank's share
       * (rank 0 also reads the checkpoint back before the rename) */
      double chk = mt_ckpt_last_check_seconds();
      MT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &chk, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
      x[m ? CHECK_PW : CHECK_SH] = chk;
      MT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
      t0 = mt_now();
      mt_ckpt_meta got;
      if (mt_ckpt_load(step_dir, &reg, &mesh, &st, &meta, 0, &got, &err) != 0) mt_die("%s", err.msg);
      x[m ? LOAD_PW : LOAD_SH] = barrier_time(t0);
      if (m == 1) {
        /* asynchronous: what training waits for at the step boundary (begin),
         * then at the next optimizer step (the fence) after a stand-in for
         * the forward and backward of step_s seconds; and with no overlap
         * at all (the fence right after begin) */
        for (int overlap = 1; overlap >= 0; overlap--) {
          meta.step = 2 + overlap;
          MT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
          t0 = mt_now();
          mt_ckpt_async *a = mt_ckpt_async_begin(mroot, &meta, &reg, &mesh, &st, &opts, &err);
          double b = barrier_time(t0);
          if (!a) mt_die("%s", err.msg);
          double tc = mt_now();
          if (overlap) {
            volatile double acc = 0; /* the forward and backward: busy, as compute is */
            while (mt_now() - tc < step_s) acc += 1e-9;
          }
          double t1 = mt_now();
          mt_ckpt_async_fence(a);
          double f = barrier_time(t1), copy = mt_now() - tc;
          MT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &copy, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
          if (mt_ckpt_async_poll(&a, 1, NULL, NULL, &err) < 0) mt_die("%s", err.msg);
          if (overlap) {
            x[A_BEGIN] = b;
            x[A_FENCE] = f;
          } else {
            x[A_NOOVERLAP] = b + f;
            x[A_COPY] = copy;
          }
        }
        meta.step = 1;
      }
      if (rank == 0) remove_dir(mroot);
      MT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    }
  }
  /* medians over the repetitions of the times and of the per-repetition ratios */
  double med[NT], r_save[2], r_save2[2], r_load[2], r_async, r_async0;
  for (int k = 0; k < NT; k++) med[k] = median_of(t, NT, reps, k, -1, -1);
  r_save[0] = median_of(t, NT, reps, RAW_W, -1, SAVE_SH);
  r_save[1] = median_of(t, NT, reps, RAW_W, -1, SAVE_PW);
  r_save2[0] = median_of(t, NT, reps, RAW_W2, -1, SAVE_SH);
  r_save2[1] = median_of(t, NT, reps, RAW_W2, -1, SAVE_PW);
  r_load[0] = median_of(t, NT, reps, RAW_R, -1, LOAD_SH);
  r_load[1] = median_of(t, NT, reps, RAW_R, -1, LOAD_PW);
  r_async = median_of(t, NT, reps, A_BEGIN, A_FENCE, SAVE_PW);
  r_async0 = median_of(t, NT, reps, A_NOOVERLAP, -1, SAVE_PW);
  /* the checks as a fraction of the save they are part of, per repetition */
  double f_check[2] = {median_of(t, NT, reps, CHECK_SH, -1, SAVE_SH),
                       median_of(t, NT, reps, CHECK_PW, -1, SAVE_PW)};
  if (rank == 0) {
    double gb = total_bytes / 1e9;
    printf("# meshbench ckpt: %s state (params + 2 AdamW moments) = %.3f GB, %d rank(s), median of %d "
           "interleaved repetitions\n", model_name, gb, world, reps);
    printf("# %-11s %10s %10s %10s %10s %12s %12s %12s\n", "mode", "save_s", "save_GB/s", "load_s",
           "load_GB/s", "save/raw_w", "save/raw_w2", "load/raw_r");
    printf("  %-11s %10.3f %10.3f %10.3f %10.3f %12s %12.3f %12s\n", "raw-posix", med[RAW_W],
           gb / med[RAW_W], med[RAW_R], gb / med[RAW_R], "1.000",
           median_of(t, NT, reps, RAW_W2, -1, RAW_W), "1.000");
    for (int m = 0; m < 2; m++) {
      double sv = med[m ? SAVE_PW : SAVE_SH], ld = med[m ? LOAD_PW : LOAD_SH];
      printf("  %-11s %10.3f %10.3f %10.3f %10.3f %12.3f %12.3f %12.3f\n", modes[m], sv, gb / sv,
             ld, gb / ld, r_save[m], r_save2[m], r_load[m]);
    }
    printf("# ratios: median over repetitions of raw/mode in the same repetition (1 = as fast as "
           "raw POSIX of the same bytes: raw_w write then fsync, raw_w2 the same with the "
           "writeback started behind each 64 MiB as the writers do, raw_r read)\n");
    printf("# async (per-writer): blocking %.3f s at the step boundary + %.3f s at the next optimizer "
           "step after a %.2f s stand-in forward/backward, against a blocking save of %.3f s: "
           "ratio %.3f (no overlap at all: %.3f s, ratio %.3f; the snapshot copy took %.3f s)\n",
           med[A_BEGIN], med[A_FENCE], step_s, med[SAVE_PW], r_async, med[A_NOOVERLAP], r_async0,
           med[A_COPY]);
    printf("# pre-commit checks (NaN/Inf scan of every value written, shard opened again, "
           "checkpoint read back on rank 0 before the rename): shared %.4f s of a %.3f s save "
           "(%.2f%%), per-writer %.4f s of a %.3f s save (%.2f%%)\n",
           med[CHECK_SH], med[SAVE_SH], 100.0 * f_check[0], med[CHECK_PW], med[SAVE_PW],
           100.0 * f_check[1]);
    if (json) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "bench", "ckpt");
      cJSON_AddStringToObject(o, "model", model_name);
      cJSON_AddNumberToObject(o, "ranks", world);
      cJSON_AddNumberToObject(o, "reps", reps);
      cJSON_AddNumberToObject(o, "bytes", total_bytes);
      cJSON_AddNumberToObject(o, "raw_write_s", med[RAW_W]);
      cJSON_AddNumberToObject(o, "raw_write_early_writeback_s", med[RAW_W2]);
      cJSON_AddNumberToObject(o, "raw_read_s", med[RAW_R]);
      for (int m = 0; m < 2; m++) {
        cJSON *y = cJSON_AddObjectToObject(o, modes[m]);
        cJSON_AddNumberToObject(y, "save_s", med[m ? SAVE_PW : SAVE_SH]);
        cJSON_AddNumberToObject(y, "load_s", med[m ? LOAD_PW : LOAD_SH]);
        cJSON_AddNumberToObject(y, "save_vs_raw", r_save[m]);
        cJSON_AddNumberToObject(y, "save_vs_raw_early_writeback", r_save2[m]);
        cJSON_AddNumberToObject(y, "load_vs_raw", r_load[m]);
        cJSON_AddNumberToObject(y, "check_s", med[m ? CHECK_PW : CHECK_SH]);
        cJSON_AddNumberToObject(y, "check_fraction_of_save", f_check[m]);
      }
      cJSON_AddNumberToObject(o, "async_begin_s", med[A_BEGIN]);
      cJSON_AddNumberToObject(o, "async_fence_s", med[A_FENCE]);
      cJSON_AddNumberToObject(o, "async_step_s", step_s);
      cJSON_AddNumberToObject(o, "async_blocking_ratio", r_async);
      cJSON_AddNumberToObject(o, "async_no_overlap_ratio", r_async0);
      cJSON_AddNumberToObject(o, "async_copy_s", med[A_COPY]);
      rc = mt_bench_json_append("meshbench ckpt", json, o);
    }
    remove_dir(root);
  }
  free(t);
  free(mem);
  mt_mesh_destroy(&mesh);
  mt_registry_free(&reg);
  return rc;
}
