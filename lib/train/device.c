/* The device a run computes on: train.device and train.precision resolved
 * on every rank (with what the GPU backend cannot serve: a head size its
 * attention kernels do not take, MT_CUDA_* and MT_COMM_* variables with bad
 * values), one GPU per rank picked by node-local rank, the CUDA backend
 * started, comm told how device buffers travel (NCCL for every group and
 * point-to-point link that carries device traffic where each rank has its
 * own GPU, by UUID; host staging elsewhere), the memory check against the
 * GPU, and checkpoint state moved through host snapshots (the checkpoint
 * format never sees where the state lived). */
#include "train/train_internal.h"

#include <stdlib.h>
#include <string.h>

static const char *PROG = "meshtrain";
static size_t g_nccl_reserved; /* NCCL's buffers (mt_comm_nccl_bytes) */
static int g_nccl_counted;     /* ... counted under MT_MEM_COMM (the plan has them) */

/* MT_COMM_HOST_WAIT=1: device collectives block the host until their data
 * is there (0, the default: they only order later compute after them, so
 * compute and communication overlap; the group timers count device time
 * from event pairs either way). mt_device_env_check has validated it. */
static int comm_host_wait(void) {
  const char *v = getenv("MT_COMM_HOST_WAIT");
  return v && strcmp(v, "1") == 0;
}

/* Per group of the mesh's table: whether it has an NCCL communicator on
 * every rank ("nccl"), on none ("staged"), on some ("mixed"), or carries no
 * device traffic in this run ("-"), agreed over the world at set-up. */
static const char *g_comm_of[MT_G_N];

static void agree_communicators(mt_trainer *t, unsigned groups, unsigned p2p) {
  int n;
  const mt_group_desc *d = mt_mesh_groups(&n);
  for (int i = 0; i < n; i++) {
    mt_group *g = mt_mesh_group(&t->mesh, &d[i]);
    int peers[8], tags[8];
    int coll = g && g->size > 1 && (groups & (1u << d[i].id)) != 0;
    int links = g && g->size > 1 ? mt_comm_p2p_links(g->name, g->size, g->rank, p2p, peers, tags)
                                 : 0;
    int used = coll || links > 0;
    /* direct: its collectives on a communicator, every link on its own */
    int direct = !coll || g->direct;
    for (int k = 0; k < links; k++) direct &= mt_group_p2p_direct(g, peers[k], tags[k]);
    int v[2] = {used ? direct : 1, used ? direct : 0}, any_used = used;
    MT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &v[0], 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    MT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &v[1], 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    MT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &any_used, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    g_comm_of[d[i].id] = !any_used ? "-" : v[0] ? "nccl" : v[1] ? "mixed" : "staged";
  }
}

/* Ranks of this node on the same GPU (by its UUID, not its index: with one
 * visible GPU per rank every rank sees index 0): *sharing = how many, and
 * *first = the lowest node rank among them (a colour for them). */
static void same_gpu(mt_trainer *t, const char *uuid, int *sharing, int *first) {
  enum { ID = 48 };
  const mt_group *node = &t->mesh.node;
  char mine[ID];
  memset(mine, 0, sizeof mine);
  snprintf(mine, sizeof mine, "%s", uuid);
  char *all = mt_malloc((size_t)node->size * ID);
  MT_MPI_CHECK(MPI_Allgather(mine, ID, MPI_CHAR, all, ID, MPI_CHAR, node->comm));
  *sharing = 0;
  *first = -1;
  for (int r = 0; r < node->size; r++)
    if (!strncmp(all + (size_t)r * ID, mine, ID)) {
      (*sharing)++;
      if (*first < 0) *first = r;
    }
  free(all);
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

/* train.device = virtual: the time-warp emulation. Every rank loads the
 * profile (the same file: every rank fails the same way, exit 2), its
 * clock starts at 0, every group of the mesh but the node's goes on the
 * virtual backend, and setup picks the virtual op table. A virtual run
 * holds no values, so it writes no checkpoint and loads none (validation,
 * plan/layout.c, refuses the keys that would). */
static void virtual_setup(mt_trainer *t) {
  const mt_config *cfg = &t->cfg;
  mt_err err = {0};
  /* (the plan's validation accepted the profile and the checkpoint keys) */
  mt_cost_profile_load(&t->vprof, cfg->virtual_hw, &err);
  /* every op the model may call has a price (a new op added to the table
   * without one would run free, and every time with it would be wrong) */
  char unpriced[512];
  if (!err.failed && mt_ops_unpriced(mt_ops_virtual(), mt_ops_null(), unpriced,
                                     sizeof unpriced) > 0)
    mt_err_set(&err, "train.device = virtual: the cost model has no price for op %s (each op "
                     "of the op table needs one on the virtual device)", unpriced);
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  mt_price price;
  mt_cost_price(&t->vprof, &price);
  /* a bf16 run (train.precision = bf16): its activations are 2 bytes
   * whatever the profile's act_bytes, and its messages are counted in the
   * dtypes they are sent in */
  const int bf16 = t->lay.dtypes.acts == MT_DT_BF16;
  if (bf16) {
    price.act_bytes = 2.0;
    price.bytes_as_sent = 1;
  }
  mt_vclock_start(&price);
  mt_ops_null_moe_skew(cfg->virtual_moe_skew);
  mt_mesh_set_virtual(&t->mesh);
  t->device = MT_DEVICE_VIRTUAL;
  t->precision = bf16 ? MT_PRECISION_BF16 : MT_PRECISION_FP32;
  t->gpu = -1;
  mt_info0("meshtrain: device virtual: %d ranks emulated as %s devices (%d per node), ops and "
           "messages priced by its [cost] section; times are virtual",
           t->world_size, t->vprof.name, t->vprof.devices_per_node);
}

void mt_train_device_setup(mt_trainer *t) {
  const mt_config *cfg = &t->cfg;
  if (cfg->device == MT_DEVICE_VIRTUAL) {
    virtual_setup(t);
    return;
  }
  mt_err err = {0};
  char why[256] = "";
  char msg[512];
  /* only a run that may use a GPU asks the CUDA runtime anything */
  int n_visible = cfg->device != MT_DEVICE_CPU && mt_cuda_built()
                      ? mt_cuda_device_count(why, sizeof why)
                      : 0;
  int kind = mt_device_resolve(cfg->device, mt_cuda_built(), n_visible, why, msg, sizeof msg);
  if (kind < 0) mt_err_set(&err, "%s", msg);
  t->precision = cfg->precision; /* fp32 or bf16 (mt_config_check refused fp16) */
  /* what only the GPU backend's kernels cannot serve, and its environment */
  if (kind == MT_DEVICE_CUDA) {
    const mt_model_shape *s = &t->lay.shape;
    int hs = s->n_head > 0 ? s->n_embd / s->n_head : 0;
    if (hs < 1 || hs > MT_CUDA_MAX_HEAD_SIZE)
      mt_err_set(&err, "model.n_embd / model.n_head = %d / %d = %d channels per head: the CUDA "
                       "attention kernels take 1 .. %d (change model.n_head, or set "
                       "train.device = cpu)", s->n_embd, s->n_head, hs, MT_CUDA_MAX_HEAD_SIZE);
    else if (mt_device_env_check(msg, sizeof msg) != 0)
      mt_err_set(&err, "%s", msg);
  }
  /* every rank must compute on the same kind of device (auto could differ
   * between nodes) */
  int lo = kind, hi = kind;
  MT_MPI_CHECK(MPI_Allreduce(&kind, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  MT_MPI_CHECK(MPI_Allreduce(&kind, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
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
               "fp32 master weights and moments, gradients %s (reduced in %s); %s",
               mt_dtype_name(t->cfg.grad_dtype), mt_dtype_name(t->cfg.grad_reduce_dtype),
               mt_bf16_gemm_note());
    return;
  }

  t->gpu = mt_device_for_local_rank(t->mesh.node.rank, t->mesh.node.size, n_visible, NULL);
  /* under bf16 the model's bf16 tensors go to the backend's bf16 op table;
   * its fp32 table (the MoE router, the fp32 master's ops) computes in fp32,
   * as the CPU's does */
  mt_cuda_init(t->gpu, MT_PRECISION_FP32, &err);
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  mt_cuda_info info;
  mt_cuda_get_info(&info);
  snprintf(t->gpu_name, sizeof t->gpu_name, "%s", info.name);
  int sharing, first;
  same_gpu(t, info.uuid, &sharing, &first);
  int shared = sharing > 1, any_shared = shared;
  MT_MPI_CHECK(MPI_Allreduce(&shared, &any_shared, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  t->gpu_shared = any_shared;

  /* comm: staging copies for every device buffer, NCCL where it can serve
   * (the groups and point-to-point sets this run's device traffic takes) */
  mt_comm_device_copy copy = {to_host, to_device};
  mt_comm_set_device_copy(&copy);
  unsigned groups, p2p;
  mt_comm_nccl_needs(cfg, &groups, &p2p);
  mt_comm_nccl_opts no = {.device_id = info.uuid,
                          .compute_stream = mt_cuda_stream(),
                          .host_wait = comm_host_wait(),
                          .groups = groups,
                          .p2p = p2p};
  mt_comm_nccl_init(&t->mesh, &no, &err);
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  agree_communicators(t, groups, p2p);
  /* NCCL's buffers, as the plan counts them in its comm category (for
   * train.device = cuda; under auto the plan cannot know of a GPU, and the
   * memory check adds them) */
  mt_mesh_dims dims = mt_mesh_dims_of(&t->mesh);
  g_nccl_reserved = (size_t)mt_comm_nccl_bytes(&dims, t->world_rank, groups, p2p);
  g_nccl_counted = cfg->device == MT_DEVICE_CUDA;
  if (g_nccl_counted) mt_mem_count(MT_MEM_COMM, g_nccl_reserved);
  char paths[256] = "";
  int n;
  const mt_group_desc *d = mt_mesh_groups(&n);
  for (int i = 0; i < n; i++)
    if (strcmp(g_comm_of[d[i].id], "-") != 0) {
      size_t used = strlen(paths);
      snprintf(paths + used, sizeof paths - used, "%s%s %s", used ? ", " : "", d[i].name,
               g_comm_of[d[i].id]);
    }
  char prec[256];
  if (t->precision == MT_PRECISION_BF16)
    snprintf(prec, sizeof prec,
             "bf16 (bf16 weights' copy and activations over fp32 master weights and moments, "
             "gradients %.8s (reduced in %.8s); matmuls on bf16 tensors, fp32 accumulation)",
             mt_dtype_name(t->cfg.grad_dtype), mt_dtype_name(t->cfg.grad_reduce_dtype));
  else
    snprintf(prec, sizeof prec, "fp32 (matmuls fp32)");
  mt_info0("meshtrain: device cuda: %s (%d.%d, %.0f GiB), %s, precision %s; "
           "device traffic over %s%s",
           info.name, info.sm_major, info.sm_minor, info.total_bytes / 1073741824.0,
           any_shared ? "ranks share GPUs" : "one GPU per rank", prec,
           paths[0] ? paths : "no group", mt_comm_nccl_built() ? "" : " (built without NCCL)");
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
  if (g_nccl_counted) mt_mem_uncount(MT_MEM_COMM, g_nccl_reserved);
  g_nccl_reserved = 0;
  g_nccl_counted = 0;
  mt_comm_set_device_copy(NULL);
  mt_cuda_shutdown();
}

/* ------------------------------------------------------------------ */
/* memory                                                              */

/* kept free beside the tensors for what allocates later and is not
 * planned: NCCL's staging workspace, the embedding backward's sort buffers,
 * fragmentation (bytes per rank; NCCL's own buffers are in the plan's comm
 * category) */
#define MT_GPU_RESERVE_BYTES (256.0 * 1048576.0)

void mt_train_device_check_memory(mt_trainer *t, double need, mt_err *e) {
  /* the ranks of this node on this GPU (by UUID) */
  mt_cuda_info self;
  mt_cuda_get_info(&self);
  int sharing_n, first;
  same_gpu(t, self.uuid, &sharing_n, &first);
  MPI_Comm same;
  MT_MPI_CHECK(MPI_Comm_split(t->mesh.node.comm, first, t->mesh.node.rank, &same));
  int sharing = 1;
  MT_MPI_CHECK(MPI_Comm_size(same, &sharing));
  if (!g_nccl_counted) need += (double)g_nccl_reserved;
  double total = need;
  MT_MPI_CHECK(MPI_Allreduce(&need, &total, 1, MPI_DOUBLE, MPI_SUM, same));
  MT_MPI_CHECK(MPI_Comm_free(&same));
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
               mt_preset_name(t->cfg.model_preset), t->cfg.micro_batch, need / 1073741824.0,
               sharing, t->gpu,
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
  cJSON_AddStringToObject(d, "kind", t->device == MT_DEVICE_CUDA      ? "cuda"
                                     : t->device == MT_DEVICE_VIRTUAL ? "virtual"
                                                                      : "cpu");
  cJSON_AddStringToObject(d, "precision", t->precision == MT_PRECISION_BF16 ? "bf16" : "fp32");
  if (t->device == MT_DEVICE_VIRTUAL) {
    cJSON_AddStringToObject(d, "virtual_hw", t->vprof.name);
    cJSON_AddNumberToObject(d, "devices_per_node", t->vprof.devices_per_node);
    return;
  }
  if (t->device != MT_DEVICE_CUDA) return;
  mt_cuda_info info;
  if (mt_cuda_get_info(&info) != 0) return;
  cJSON_AddStringToObject(d, "gpu", info.name);
  /* the model's matmuls: on bf16 tensors under bf16, else the fp32 table's */
  cJSON_AddStringToObject(d, "gemm", t->precision == MT_PRECISION_BF16 ? "bf16" : info.gemm_path);
  cJSON_AddNumberToObject(d, "gpus_shared", t->gpu_shared);
  cJSON_AddNumberToObject(d, "tensor_bytes_peak", (double)info.peak_bytes);
  cJSON_AddNumberToObject(d, "backend_scratch_bytes", (double)info.workspace_bytes);
  cJSON_AddNumberToObject(d, "nccl_workspace_bytes_peak", (double)mt_comm_nccl_workspace_peak());
  cJSON_AddNumberToObject(d, "memory_total_bytes", (double)info.total_bytes);
  cJSON_AddNumberToObject(d, "nccl_reserved_bytes", (double)g_nccl_reserved);
  cJSON_AddStringToObject(d, "host_wait", comm_host_wait() ? "1" : "0");
  /* how each group's device traffic travelled (rank 0's groups; the
   * communicators agreed over every rank): "nccl" when it all went direct
   * over communicators every rank has, "staged" through host MPI, "mixed",
   * "none" without device traffic. "dp" is the dp x cp group, which carries
   * the gradients. */
  int n_groups;
  const mt_group_desc *gd = mt_mesh_groups(&n_groups);
  cJSON *groups = cJSON_AddObjectToObject(d, "groups");
  mt_mesh *mesh = (mt_mesh *)&t->mesh;
  for (int i = 0; i < n_groups; i++) {
    const mt_group *g = mt_mesh_group(mesh, &gd[i]);
    if (!g) continue;
    const char *path = mt_group_device_traffic(g);
    if (!strcmp(path, "nccl") && strcmp(g_comm_of[gd[i].id], "nccl") != 0)
      path = "mixed"; /* direct here, staged on some other rank */
    cJSON *o = cJSON_AddObjectToObject(groups, gd[i].name);
    cJSON_AddNumberToObject(o, "size", g->size);
    cJSON_AddStringToObject(o, "path", path);
    cJSON_AddStringToObject(o, "communicator", g_comm_of[gd[i].id]);
    cJSON_AddNumberToObject(o, "direct_calls", (double)g->device_direct);
    cJSON_AddNumberToObject(o, "staged_calls", (double)g->device_staged);
    const char *key = gd[i].id == MT_G_DP ? "dp_only" : gd[i].id == MT_G_DP_CP ? "dp" : gd[i].name;
    cJSON_AddStringToObject(d, key, path);
  }
  /* MT_CUDA_OP_TIMES=1: GPU seconds per op (this rank; an op called on
   * bf16 tensors as "bf16 <op>") */
  mt_cuda_op_time ot[128];
  int n = mt_cuda_op_times(ot, 128);
  if (n > 0) {
    cJSON *ops = cJSON_AddObjectToObject(d, "op_seconds");
    cJSON *calls = cJSON_AddObjectToObject(d, "op_calls");
    for (int i = 0; i < n; i++) {
      cJSON_AddNumberToObject(ops, ot[i].op, ot[i].seconds);
      cJSON_AddNumberToObject(calls, ot[i].op, (double)ot[i].calls);
    }
  }
}
