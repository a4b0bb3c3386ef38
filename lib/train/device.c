/* The device a run computes on: train.device and train.precision resolved
 * on every rank, one GPU per rank picked by node-local rank, the CUDA
 * backend started, comm told how device buffers travel (NCCL where each
 * rank of a group has its own GPU, host staging elsewhere), the memory
 * check against the GPU, and checkpoint state moved through host
 * snapshots (the checkpoint format never sees where the state lived). */
#include "train/train_internal.h"

#include <stdlib.h>
#include <string.h>

static const char *PROG = "meshtrain";

/* MT_COMM_HOST_WAIT=0: device collectives only order compute after them
 * (the group timers then count launches, not transfers) */
static int comm_host_wait(void) {
  const char *v = getenv("MT_COMM_HOST_WAIT");
  return !(v && strcmp(v, "0") == 0);
}

/* "nccl" when every group of this axis goes direct, "staged" when none,
 * "mixed" otherwise (agreed over the world); "-" for an axis of one rank */
static const char *axis_path(const mt_group *g, int axis_size) {
  int direct = g->direct != 0, lo = direct, hi = direct;
  MPI_Allreduce(&direct, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&direct, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (axis_size < 2) return "-";
  return lo ? "nccl" : hi ? "mixed" : "staged";
}

/* a profile for this GPU when the configured one gives no peak for it */
static void pick_gpu_profile(mt_trainer *t, const char *gpu_name) {
  double peak = t->precision == MT_PRECISION_BF16 ? t->hw.peak_gflops_bf16
                                                  : t->hw.peak_gflops_fp32;
  if (t->cfg.peak_gflops > 0 || peak > 0) return;
  const char *name = strstr(gpu_name, "A100") ? "a100-sxm"
                     : strstr(gpu_name, "H100") ? "h100-sxm"
                     : strstr(gpu_name, "H200") ? "h200"
                                                : NULL;
  mt_hw_profile hw;
  mt_err e = {0};
  if (name && mt_hw_profile_load(&hw, name, &e) == 0) {
    t->hw = hw;
    mt_info0("meshtrain: metrics.hw = %s has no %s peak; using the %s profile for %s",
             t->cfg.hw_profile, t->precision == MT_PRECISION_BF16 ? "bf16" : "fp32", name,
             gpu_name);
  }
}

static void to_host(void *dst, const void *src, size_t bytes) {
  mt_ops_cuda()->download(dst, src, bytes);
}
static void to_device(void *dst, const void *src, size_t bytes) {
  mt_ops_cuda()->upload(dst, src, bytes);
}

void mt_train_device_setup(mt_trainer *t) {
  const mt_config *cfg = &t->cfg;
  mt_err err = {0};
  char why[256] = "";
  char msg[512];
  /* only a run that may use a GPU asks the CUDA runtime anything */
  int n_visible = strcmp(cfg->device, "cpu") != 0 && mt_cuda_built()
                      ? mt_cuda_device_count(why, sizeof why)
                      : 0;
  int kind = mt_device_resolve(cfg->device, cfg->precision, mt_cuda_built(), n_visible, why,
                               &t->precision, msg, sizeof msg);
  if (kind < 0) mt_err_set(&err, "%s", msg);
  /* every rank must compute on the same kind of device (auto could differ
   * between nodes) */
  int lo = kind, hi = kind;
  MPI_Allreduce(&kind, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&kind, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (!err.failed && lo != hi)
    mt_err_set(&err, "train.device = auto: some ranks see a GPU and others none; set "
                     "train.device = cuda or cpu");
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  t->device = (mt_device_kind)kind;
  t->gpu = -1;
  if (t->device == MT_DEVICE_CPU) {
    /* one line on how the CPU computes in bf16 (the matmul path and why:
     * with or without bf16 instructions, AMX, oneDNN) */
    if (t->precision == MT_PRECISION_BF16)
      mt_info0("meshtrain: precision bf16 on the CPU: bf16 weights' copy and activations over "
               "fp32 master weights and moments; %s", mt_bf16_gemm_note());
    return;
  }

  int shared = 0;
  t->gpu = mt_device_for_local_rank(t->mesh.node.rank, t->mesh.node.size, n_visible, &shared);
  mt_cuda_init(t->gpu, t->precision, &err);
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  mt_cuda_info info;
  mt_cuda_get_info(&info);
  snprintf(t->gpu_name, sizeof t->gpu_name, "%s", info.name);
  int any_shared = shared;
  MPI_Allreduce(&shared, &any_shared, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  t->gpu_shared = any_shared;

  /* comm: staging copies for every device buffer, NCCL where it can serve */
  mt_comm_device_copy copy = {to_host, to_device};
  mt_comm_set_device_copy(&copy);
  mt_comm_nccl_opts no = {info.uuid, mt_cuda_stream(), comm_host_wait()};
  mt_comm_nccl_init(&t->mesh, &no, &err);
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  const char *tp = axis_path(&t->mesh.tp_g, cfg->tp), *dp = axis_path(&t->mesh.dp_g, cfg->dp);
  const char *pp = axis_path(&t->mesh.pp_g, cfg->pp);
  mt_info0("meshtrain: device cuda: %s (%d.%d, %.0f GiB), %s, precision %s (matmuls %s); "
           "device buffers over tp %s, dp %s, pp %s%s",
           info.name, info.sm_major, info.sm_minor, info.total_bytes / 1073741824.0,
           any_shared ? "ranks share GPUs" : "one GPU per rank",
           t->precision == MT_PRECISION_BF16 ? "bf16" : "fp32", info.gemm_path, tp, dp, pp,
           mt_comm_nccl_built() ? "" : " (built without NCCL)");
  if (any_shared && t->world_rank == 0)
    fprintf(stderr, "%s: warning: %d ranks on a node with %d visible GPU(s): ranks share GPUs, "
                    "and groups whose ranks share one go through host MPI\n",
            PROG, t->mesh.node.size, n_visible);
  pick_gpu_profile(t, info.name);
}

void mt_train_device_destroy(mt_trainer *t) {
  if (t->device != MT_DEVICE_CUDA) return;
  if (t->ckpt_host) mt_cuda_host_free(t->ckpt_host);
  t->ckpt_host = NULL;
  t->ckpt_host_n = 0;
  mt_comm_nccl_destroy(&t->mesh);
  mt_comm_set_device_copy(NULL);
  mt_cuda_shutdown();
}

/* ------------------------------------------------------------------ */
/* memory                                                              */

/* kept free beside the tensors for what allocates later and is not
 * planned: NCCL's buffers (made at a group's first call), its staging
 * workspace, the embedding backward's sort buffers, fragmentation (bytes
 * per rank) */
#define MT_GPU_RESERVE_BYTES (512.0 * 1048576.0)

void mt_train_device_check_memory(mt_trainer *t, double need, mt_err *e) {
  /* the ranks of this node that share this GPU */
  MPI_Comm same;
  MT_MPI_CHECK(MPI_Comm_split(t->mesh.node.comm, t->gpu, t->mesh.node.rank, &same));
  int sharing = 1;
  MPI_Comm_size(same, &sharing);
  double total = need;
  MPI_Allreduce(&need, &total, 1, MPI_DOUBLE, MPI_SUM, same);
  MPI_Comm_free(&same);
  /* every rank on this GPU has started its backend by now (setup agreed on
   * it): free memory is what the tensors can have */
  mt_cuda_info info;
  mt_cuda_get_info(&info);
  double reserve = MT_GPU_RESERVE_BYTES * sharing;
  double avail = (double)info.free_bytes - reserve;
  if (!e->failed && total > avail)
    mt_err_set(e,
               "model %s with train.micro_batch = %d needs %.2f GiB of GPU memory per rank for "
               "its tensors; %d rank(s) on GPU %d (%s, %.1f GiB) need %.2f GiB, but %.2f GiB is "
               "free (after the CUDA context, %.2f GiB of backend scratch per rank, and a %.2f "
               "GiB reserve for NCCL): lower train.micro_batch or model size, raise "
               "parallel.zero or parallel.tp, or use more GPUs",
               t->cfg.model_preset, t->cfg.micro_batch, need / 1073741824.0, sharing, t->gpu,
               info.name, info.total_bytes / 1073741824.0, total / 1073741824.0,
               avail / 1073741824.0, info.workspace_bytes / 1073741824.0, reserve / 1073741824.0);
}

/* ------------------------------------------------------------------ */
/* checkpoints: host snapshots                                         */

void mt_train_state_to_host(mt_trainer *t, mt_flat_range **r, const int *n) {
  if (t->ops->loc != MT_LOC_DEVICE) return;
  size_t total = 0;
  for (int g = 0; g < MT_CKPT_NGROUPS; g++)
    for (int i = 0; i < n[g]; i++) total += r[g][i].len;
  if (total > t->ckpt_host_n) { /* page-locked, kept for the next save */
    mt_cuda_host_free(t->ckpt_host);
    t->ckpt_host = mt_cuda_host_alloc(total * sizeof(float));
    t->ckpt_host_n = total;
  }
  size_t k = 0;
  for (int g = 0; g < MT_CKPT_NGROUPS; g++)
    for (int i = 0; i < n[g]; i++) {
      t->ops->download(t->ckpt_host + k, r[g][i].mem, r[g][i].len * sizeof(float));
      r[g][i].mem = t->ckpt_host + k;
      k += r[g][i].len;
    }
}

float *mt_train_state_host_buffers(mt_trainer *t, mt_flat_range **host, mt_flat_range *const *dev,
                                   const int *n) {
  size_t total = 0;
  for (int g = 0; g < MT_CKPT_NGROUPS; g++)
    for (int i = 0; i < n[g]; i++) total += dev[g][i].len;
  float *buf = mt_cuda_host_alloc((total ? total : 1) * sizeof(float));
  size_t k = 0;
  for (int g = 0; g < MT_CKPT_NGROUPS; g++) {
    host[g] = mt_calloc((size_t)n[g] + 1, sizeof(mt_flat_range));
    for (int i = 0; i < n[g]; i++) {
      host[g][i] = dev[g][i];
      host[g][i].mem = buf + k;
      k += dev[g][i].len;
    }
  }
  (void)t;
  return buf;
}

void mt_train_state_upload(mt_trainer *t, mt_flat_range *const *host, mt_flat_range *const *dev,
                           const int *n) {
  for (int g = 0; g < MT_CKPT_NGROUPS; g++)
    for (int i = 0; i < n[g]; i++)
      t->ops->upload(dev[g][i].mem, host[g][i].mem, dev[g][i].len * sizeof(float));
  t->ops->sync();
}

/* ------------------------------------------------------------------ */
/* summary                                                             */

void mt_train_device_json(const mt_trainer *t, cJSON *parent) {
  cJSON *d = cJSON_AddObjectToObject(parent, "device");
  cJSON_AddStringToObject(d, "kind", t->device == MT_DEVICE_CUDA ? "cuda" : "cpu");
  cJSON_AddStringToObject(d, "precision", t->precision == MT_PRECISION_BF16 ? "bf16" : "fp32");
  if (t->device != MT_DEVICE_CUDA) return;
  mt_cuda_info info;
  if (mt_cuda_get_info(&info) != 0) return;
  cJSON_AddStringToObject(d, "gpu", info.name);
  cJSON_AddStringToObject(d, "gemm", info.gemm_path);
  cJSON_AddNumberToObject(d, "gpus_shared", t->gpu_shared);
  cJSON_AddNumberToObject(d, "tensor_bytes_peak", (double)info.peak_bytes);
  cJSON_AddNumberToObject(d, "backend_scratch_bytes", (double)info.workspace_bytes);
  cJSON_AddNumberToObject(d, "nccl_workspace_bytes_peak", (double)mt_comm_nccl_workspace_peak());
  cJSON_AddNumberToObject(d, "memory_total_bytes", (double)info.total_bytes);
  cJSON_AddStringToObject(d, "tp", mt_group_device_path(&t->mesh.tp_g));
  cJSON_AddStringToObject(d, "dp", mt_group_device_path(&t->mesh.dp_g));
  cJSON_AddStringToObject(d, "pp", mt_group_device_path(&t->mesh.pp_g));
  /* MT_CUDA_OP_TIMES=1: GPU seconds per op of the table (this rank) */
  mt_cuda_op_time ot[64];
  int n = mt_cuda_op_times(ot, 64);
  if (n > 0) {
    cJSON *ops = cJSON_AddObjectToObject(d, "op_seconds");
    cJSON *calls = cJSON_AddObjectToObject(d, "op_calls");
    for (int i = 0; i < n; i++) {
      cJSON_AddNumberToObject(ops, ot[i].op, ot[i].seconds);
      cJSON_AddNumberToObject(calls, ot[i].op, (double)ot[i].calls);
    }
  }
}
