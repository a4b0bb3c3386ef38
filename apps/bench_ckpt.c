/* meshbench ckpt: checkpoint save and load bandwidth against raw POSIX I/O of
 * the same bytes, measured in the same run.
 *
 *   mpirun -n R meshbench ckpt [--model gpt2-124m] [--dir DIR] [--reps N] [--json FILE]
 *
 * The state is the model's parameters and both AdamW moments (3 x 4 bytes per
 * parameter; about 1.5 GB for gpt2-124m), each rank holding 1/R of it as a
 * ZeRO-style flat share. Reported per mode (shared, per-writer): save and
 * load GB/s, their ratio to raw write+fsync and read of the same bytes, and
 * the blocking time of an asynchronous save against a blocking one. */
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
#include "core/core.h"
#include "model/model.h"

int mt_bench_ckpt(int argc, char **argv);

static double barrier_time(double t0) {
  double dt = mt_now() - t0, mx = dt;
  MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return mx;
}

/* write (and fsync) or read n bytes of buf at path; returns 0 on success */
static int raw_io(const char *path, char *buf, size_t n, int write_it) {
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
    done += (size_t)k;
  }
  int rc = write_it ? fsync(fd) : 0;
  close(fd);
  return rc;
}

static void remove_dir(const char *path) {
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
  if (system(cmd) != 0) mt_warn("could not remove %s", path);
}

int mt_bench_ckpt(int argc, char **argv) {
  const char *model_name = "gpt2-124m", *dir = "outputs/bench-ckpt", *json = NULL;
  const char *save_to = NULL, *save_mode = "shared";
  int reps = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--model") && i + 1 < argc) model_name = argv[++i];
    else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--save-to") && i + 1 < argc) save_to = argv[++i];
    else if (!strcmp(argv[i], "--mode") && i + 1 < argc) save_mode = argv[++i];
    else {
      if (strcmp(argv[i], "--help")) fprintf(stderr, "meshbench ckpt: unknown option '%s'\n", argv[i]);
      printf("usage: mpirun -n R meshbench ckpt [--model tiny|small|gpt2-124m] [--dir DIR] "
             "[--reps N] [--json FILE]\n"
             "       mpirun -n R meshbench ckpt --save-to ROOT [--mode shared|per-writer]\n"
             "           (only save the benchmark's state once, as ROOT/step_1: a checkpoint of\n"
             "           the model's shape for the conversion tests and benchmarks)\n");
      return strcmp(argv[i], "--help") ? MT_EXIT_BADINPUT : 0;
    }
  }
  int init = 0;
  MPI_Initialized(&init);
  int thread_level = MPI_THREAD_SINGLE; /* FUNNELED: the asynchronous save's writer thread */
  if (!init) MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &thread_level);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  mt_log_init(rank);
  mt_model_shape shape;
  if (mt_model_preset(model_name, &shape) != 0 || reps < 1) {
    if (rank == 0) fprintf(stderr, "meshbench ckpt: unknown model '%s' or bad --reps\n", model_name);
    return MT_EXIT_BADINPUT;
  }
  mt_registry reg;
  mt_registry_init(&reg, 1, 0);
  char msg[256];
  mt_gpt_register(&reg, &shape, 1, 0, 0, msg, sizeof msg);
  mt_mesh mesh;
  mt_err err = {0};
  mt_mesh_create(&mesh, 1, 1, world, 1, &err);
  /* this rank's share of the flat state, three groups */
  size_t n = reg.numel_local, lo = n * (size_t)rank / (size_t)world,
         hi = n * (size_t)(rank + 1) / (size_t)world, len = hi - lo;
  float *mem = mt_malloc(3 * len * sizeof(float) + 64);
  for (size_t i = 0; i < 3 * len; i++) mem[i] = (float)((i * 2654435761u) % 1000) * 1e-3f;
  mt_flat_range ranges[MT_CKPT_NGROUPS];
  mt_ckpt_state st;
  for (int g = 0; g < MT_CKPT_NGROUPS; g++) {
    ranges[g] = (mt_flat_range){lo, len, mem + (size_t)g * len};
    st.ranges[g] = &ranges[g];
    st.n_ranges[g] = len > 0;
  }
  double total_bytes = 3.0 * 4.0 * (double)n;
  mt_ckpt_meta meta = {1, 0, 0, 1, 1, shape.n_layer, shape.n_embd, shape.n_head, shape.seq_len,
                       shape.vocab, world, 1, 1, 1, 1, world};
  if (save_to) {
    mt_ckpt_save_opts opts = {save_mode, 0, "none", ""};
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
  MPI_Barrier(MPI_COMM_WORLD);
  snprintf(raw, sizeof raw, "%s/raw-%05d.bin", root, rank);
  const char *modes[2] = {"shared", "per-writer"};
  double raw_w = 1e30, raw_r = 1e30, save[2] = {1e30, 1e30}, load[2] = {1e30, 1e30};
  double async_block = 1e30;
  for (int rep = 0; rep < reps; rep++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = mt_now();
    if (raw_io(raw, (char *)mem, 3 * len * sizeof(float), 1) != 0) mt_die("raw write of %s failed", raw);
    double w = barrier_time(t0);
    t0 = mt_now();
    if (raw_io(raw, (char *)mem, 3 * len * sizeof(float), 0) != 0) mt_die("raw read of %s failed", raw);
    double r = barrier_time(t0);
    unlink(raw);
    if (w < raw_w) raw_w = w;
    if (r < raw_r) raw_r = r;
    for (int m = 0; m < 2; m++) {
      char mroot[1200], step_dir[1300];
      snprintf(mroot, sizeof mroot, "%s/%s", root, modes[m]);
      snprintf(step_dir, sizeof step_dir, "%s/step_1", mroot);
      mt_ckpt_save_opts opts = {modes[m], 1, "none", ""};
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = mt_now();
      if (mt_ckpt_save(mroot, &meta, &reg, &mesh, &st, &opts, NULL, &err) != 0) mt_die("%s", err.msg);
      double s = barrier_time(t0);
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = mt_now();
      mt_ckpt_meta got;
      if (mt_ckpt_load(step_dir, &reg, &mesh, &st, &meta, 0, &got, &err) != 0) mt_die("%s", err.msg);
      double l = barrier_time(t0);
      if (s < save[m]) save[m] = s;
      if (l < load[m]) load[m] = l;
      if (m == 1) { /* async: how long training is held up */
        meta.step = 2;
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = mt_now();
        mt_ckpt_async *a = mt_ckpt_async_begin(mroot, &meta, &reg, &mesh, &st, &opts, &err);
        double b = barrier_time(t0);
        if (!a) mt_die("%s", err.msg);
        mt_ckpt_async_poll(&a, 1, NULL, NULL, &err);
        meta.step = 1;
        if (b < async_block) async_block = b;
      }
      if (rank == 0) remove_dir(mroot);
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
  if (rank == 0) {
    double gb = total_bytes / 1e9;
    printf("# meshbench ckpt: %s state (params + 2 AdamW moments) = %.3f GB, %d rank(s), best of %d\n",
           model_name, gb, world, reps);
    printf("# %-11s %10s %10s %10s %10s %12s %12s\n", "mode", "save_s", "save_GB/s", "load_s",
           "load_GB/s", "save/raw_w", "load/raw_r");
    printf("  %-11s %10.3f %10.3f %10.3f %10.3f %12s %12s\n", "raw-posix", raw_w, gb / raw_w, raw_r,
           gb / raw_r, "1.000", "1.000");
    for (int m = 0; m < 2; m++)
      printf("  %-11s %10.3f %10.3f %10.3f %10.3f %12.3f %12.3f\n", modes[m], save[m], gb / save[m],
             load[m], gb / load[m], raw_w / save[m], raw_r / load[m]);
    printf("# async (per-writer): blocking %.3f s against a blocking save of %.3f s: ratio %.3f\n",
           async_block, save[1], async_block / save[1]);
    if (json) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "bench", "ckpt");
      cJSON_AddStringToObject(o, "model", model_name);
      cJSON_AddNumberToObject(o, "ranks", world);
      cJSON_AddNumberToObject(o, "bytes", total_bytes);
      cJSON_AddNumberToObject(o, "raw_write_s", raw_w);
      cJSON_AddNumberToObject(o, "raw_read_s", raw_r);
      for (int m = 0; m < 2; m++) {
        cJSON *x = cJSON_AddObjectToObject(o, modes[m]);
        cJSON_AddNumberToObject(x, "save_s", save[m]);
        cJSON_AddNumberToObject(x, "load_s", load[m]);
        cJSON_AddNumberToObject(x, "save_vs_raw", raw_w / save[m]);
        cJSON_AddNumberToObject(x, "load_vs_raw", raw_r / load[m]);
      }
      cJSON_AddNumberToObject(o, "async_blocking_s", async_block);
      cJSON_AddNumberToObject(o, "async_blocking_ratio", async_block / save[1]);
      char *s = cJSON_PrintUnformatted(o);
      FILE *f = fopen(json, "a");
      if (f) {
        fprintf(f, "%s\n", s);
        fclose(f);
      }
      free(s);
      cJSON_Delete(o);
    }
    remove_dir(root);
  }
  free(mem);
  mt_mesh_destroy(&mesh);
  mt_registry_free(&reg);
  return 0;
}
