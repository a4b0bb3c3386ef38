/* The checks of a configuration that involve more than one key and can be
 * judged from the configuration alone (and the number of ranks), in one
 * place. Each key's own type, range and choices are checked as it is read
 * (config.c). mt_layout_validate (plan/layout.c) calls mt_config_check
 * right after it has derived the model's shape, so every path meets the
 * same checks in the same order: training (train/setup.c), meshtrain
 * --check, --plan and --print-schedule, meshplan, and each layout the
 * planner tries for parallel.layout = auto.
 *
 * Checks that need more than the configuration stay where that is known:
 *   - the model's shape: model.preset's dimensions and what they need of
 *     the mesh (heads, width and sequence over tp, the MoE keys over ep and
 *     etp): lib/model/shape.c, mt_model_shape_from_config (lib/model owns
 *     the presets);
 *   - what the shape needs of cp (2 x cp ring chunks or cp Ulysses chunks
 *     of model.seq_len, heads over cp, sp tokens over tp), the pipeline
 *     stage split (parallel.pp_split, pp_first_layers / pp_last_layers,
 *     virtual_stages against model.n_layer), pp and virtual_stages against
 *     MT_PP_MAX_CHUNKS, the schedule's own limits (mt_pp_sched_check) and
 *     its simulation: lib/plan/layout.c and lib/parallel/schedule.c;
 *   - the hardware profiles behind metrics.hw and train.virtual_hw (files):
 *     lib/plan/layout.c;
 *   - train.device = cuda: whether this build has CUDA and a GPU is usable
 *     (mt_device_resolve), the CUDA kernels' head size, one device kind on
 *     every rank: lib/train/device.c (and layout.c for the build);
 *   - ckpt.async: the thread level MPI provides: apps/meshtrain.c;
 *   - memory, this machine's room for virtual ranks, the dataset's size and
 *     token ids, a checkpoint's model (train.resume, train.init_from):
 *     lib/train/setup.c, lib/train/resume.c, lib/data, lib/plan/report.c. */
#include "core/core.h"

#include <string.h>

/* the optimizer's schedule and the batch */
static int check_training(const mt_config *cfg, mt_err *e) {
  if ((double)cfg->warmup_steps > 10.0 * (double)cfg->steps)
    mt_err_set(e, "train.warmup_steps = %d is more than 10 x train.steps = %d: the run would "
                  "never get above a tenth of train.lr", cfg->warmup_steps, cfg->steps);
  else if (cfg->micro_batch > cfg->global_batch)
    mt_err_set(e, "train.micro_batch = %d is more than train.global_batch = %d", cfg->micro_batch,
               cfg->global_batch);
  else if (cfg->lr * cfg->weight_decay >= 1.0)
    mt_err_set(e, "train.lr x train.weight_decay = %g: decoupled decay would take all of every "
                  "weight each step (it must be below 1)", cfg->lr * cfg->weight_decay);
  return e->failed ? -1 : 0;
}

/* the mesh against the ranks and the batch; validation data, output,
 * checkpoints; the MoE keys against the mesh */
static int check_mesh_and_batch(const mt_config *cfg, int world_size, mt_err *e) {
  int accum_div = cfg->micro_batch * cfg->dp;
  if (world_size > 0 && world_size % cfg->tp != 0)
    mt_err_set(e, "parallel.tp = %d does not divide the %d MPI ranks launched", cfg->tp,
               world_size);
  else if (cfg->sp && cfg->tp == 1)
    mt_err_set(e, "parallel.sp = true needs parallel.tp > 1 (sequence parallelism splits "
                  "the sequence over the tensor-parallel ranks)");
  else if (cfg->global_batch % accum_div != 0)
    mt_err_set(e, "train.global_batch = %d is not divisible by train.micro_batch x parallel.dp "
                  "= %d x %d = %d", cfg->global_batch, cfg->micro_batch, cfg->dp, accum_div);
  else if (!cfg->data_val[0] && cfg->val_fraction <= 0.0 && cfg->eval_every > 0)
    mt_err_set(e, "data.val is empty and data.val_fraction = 0: no validation data "
                  "(set one, or train.eval_every = 0)");
  else if (!cfg->output_dir[0])
    mt_err_set(e, "output.dir is empty");
  else if (cfg->skip_samples > 0 && (!cfg->resume[0] || strcmp(cfg->resume, "auto") == 0))
    mt_err_set(e, "train.skip_samples = %d needs train.resume = a checkpoint's step directory "
                  "(with '%s' a requeued job would skip again after each resume)",
               cfg->skip_samples, cfg->resume);
  else if (cfg->spike_factor > 0 && cfg->spike_factor <= 1)
    mt_err_set(e, "train.spike_factor = %g: 0 (off) or above 1 (a loss above factor x the "
                  "running median is a spike)", cfg->spike_factor);
  else if (cfg->ckpt_async && cfg->ckpt_mode != MT_CKPT_MODE_PER_WRITER)
    mt_err_set(e, "ckpt.async = true needs ckpt.mode = per-writer (each rank writes its own "
                  "file in the background; ckpt.mode is %s)", mt_ckpt_mode_name(cfg->ckpt_mode));
  else if (cfg->moe_experts > 0 && (cfg->tp * cfg->cp * cfg->dp) % (cfg->etp * cfg->ep) != 0)
    mt_err_set(e, "parallel.etp x parallel.ep = %d x %d does not divide the %d ranks of a "
                  "pipeline stage (tp x cp x dp = %d x %d x %d)",
               cfg->etp, cfg->ep, cfg->tp * cfg->cp * cfg->dp, cfg->tp, cfg->cp, cfg->dp);
  else if (cfg->moe_experts > 0 && cfg->cp > 1 && cfg->moe_capacity > 0 &&
           cfg->cp_mode != MT_CP_ULYSSES)
    mt_err_set(e, "model.moe_capacity = %g with parallel.cp = %d needs parallel.cp_mode = "
                  "ulysses: the capacity keeps a sequence's slots in position order, and ring's "
                  "zigzag chunks are not in rank order (use model.moe_capacity = 0, dropless)",
               cfg->moe_capacity, cfg->cp);
  else if (cfg->ep_balance == MT_EP_BALANCE_LEAST_LOADED && cfg->etp > 1)
    mt_err_set(e, "parallel.ep_balance = least-loaded needs parallel.etp = 1 (an expert's "
                  "rows move with its whole weights; parallel.etp is %d)", cfg->etp);
  else if (cfg->ep_balance == MT_EP_BALANCE_LEAST_LOADED && cfg->ep < 2)
    mt_err_set(e, "parallel.ep_balance = least-loaded needs parallel.ep > 1 (it moves rows "
                  "between expert-parallel ranks; parallel.ep is %d)", cfg->ep);
  else if (cfg->moe_bias_init != 0.0 && cfg->moe_balance != MT_MOE_BALANCE_BIAS)
    mt_err_set(e, "train.moe_bias_init = %g needs train.moe_balance = bias (it is the routing "
                  "bias's start; train.moe_balance is %s)", cfg->moe_bias_init,
               mt_moe_balance_name(cfg->moe_balance));
  else if (cfg->zero == 3 && cfg->save_params)
    mt_err_set(e, "output.save_params = true needs parallel.zero <= 2 (under ZeRO-3 a rank "
                  "holds only its shard of the parameters; checkpoints hold them whole)");
  return e->failed ? -1 : 0;
}

/* the pipeline's keys among themselves (against the model's layers:
 * plan/layout.c) */
static int check_pipeline(const mt_config *cfg, mt_err *e) {
  /* micro-batches per step and rank (the batch divides: check_mesh_and_batch) */
  int m = cfg->global_batch / cfg->dp / cfg->micro_batch;
  if (cfg->micro_batches > 0 && cfg->micro_batches != m)
    mt_err_set(e, "train.micro_batches = %d does not match train.global_batch / (train.micro_batch "
                  "x parallel.dp) = %d / (%d x %d) = %d (set it to 0 or change the batch)",
               cfg->micro_batches, cfg->global_batch, cfg->micro_batch, cfg->dp, m);
  else if (cfg->pp > 1 && cfg->save_params)
    mt_err_set(e, "output.save_params = true needs parallel.pp = 1 (each pipeline stage "
                  "holds only its own parameters)");
  else if (cfg->pp_split[0] && (cfg->pp_first_layers || cfg->pp_last_layers))
    mt_err_set(e, "parallel.pp_split and parallel.pp_first_layers / pp_last_layers both set: "
                  "give one of them");
  return e->failed ? -1 : 0;
}

/* train.precision and the dtypes of the gradients (mt_dtypes_resolve then
 * derives every role's dtype from them) */
static int check_numbers(const mt_config *cfg, mt_err *e) {
  const int bf16 = cfg->precision == MT_PRECISION_BF16;
  if (cfg->precision == MT_PRECISION_FP16)
    mt_err_set(e, "train.precision = fp16: fp16 needs dynamic loss scaling, which meshtrain "
                  "does not implement; use train.precision = bf16 (fp32's exponent range, "
                  "no loss scaling)");
  /* bf16 gradients are the bf16 ops' too, and are reduced where they are */
  else if (cfg->grad_dtype == MT_DT_BF16 && !bf16)
    mt_err_set(e, "train.grad_dtype = bf16 needs train.precision = bf16; set it to fp32");
  else if (cfg->grad_dtype == MT_DT_BF16 && cfg->grad_reduce_dtype != MT_DT_BF16)
    mt_err_set(e, "train.grad_dtype = bf16 with parallel.grad_reduce_dtype = fp32: bf16 "
                  "gradients are reduced in bf16 (set parallel.grad_reduce_dtype = bf16)");
  /* the bf16 reduction narrows and widens with the bf16 ops of the mixed
   * precision */
  else if (cfg->grad_reduce_dtype == MT_DT_BF16 && !bf16)
    mt_err_set(e, "parallel.grad_reduce_dtype = bf16 needs train.precision = bf16; set it "
                  "to fp32");
  else if (bf16 && cfg->zero >= 1 && cfg->save_params)
    mt_err_set(e, "output.save_params = true needs parallel.zero = 0 under train.precision = "
                  "bf16 (from ZeRO-1 on a rank holds only its shard of the fp32 master)");
  return e->failed ? -1 : 0;
}

/* the virtual device: a profile that prices (train.virtual_hw; the file is
 * read by plan/layout.c), and no checkpoint (a virtual run holds no values) */
static int check_virtual(const mt_config *cfg, mt_err *e) {
  const int virt = cfg->device == MT_DEVICE_VIRTUAL;
  if (cfg->virtual_moe_skew > 0.0 && !virt)
    mt_err_set(e, "virtual.moe_skew = %g needs train.device = virtual (a real run's router "
                  "decides its load)", cfg->virtual_moe_skew);
  else if (cfg->virtual_moe_skew > 0.0 && cfg->moe_experts == 0)
    mt_err_set(e, "virtual.moe_skew = %g: the model has no experts (model.moe_experts = 0)",
               cfg->virtual_moe_skew);
  else if (virt && !cfg->virtual_hw[0])
    mt_err_set(e, "train.device = virtual needs train.virtual_hw = PROFILE (a hardware "
                  "profile with a [cost] section, e.g. h200)");
  else if (virt && cfg->ckpt_mode != MT_CKPT_MODE_NONE)
    mt_err_set(e, "train.device = virtual computes no values to checkpoint: set ckpt.mode = "
                  "none (it is %s)", mt_ckpt_mode_name(cfg->ckpt_mode));
  else if (virt && (cfg->resume[0] || cfg->init_from[0]))
    mt_err_set(e, "train.device = virtual cannot load a checkpoint (train.resume and "
                  "train.init_from must be empty)");
  return e->failed ? -1 : 0;
}

int mt_config_check(const mt_config *cfg, int world_size, mt_err *e) {
  MT_TRY(e, check_training(cfg, e));
  MT_TRY(e, check_mesh_and_batch(cfg, world_size, e));
  MT_TRY(e, check_pipeline(cfg, e));
  MT_TRY(e, check_numbers(cfg, e));
  MT_TRY(e, check_virtual(cfg, e));
  const int world = cfg->pp * cfg->dp * cfg->cp * cfg->tp;
  if (world_size > 0 && world != world_size) {
    mt_err_set(e, "the mesh pp x dp x cp x tp = %d x %d x %d x %d = %d ranks does not match "
                  "the %d MPI ranks launched (set parallel.dp/tp/pp/cp or the rank count)",
               cfg->pp, cfg->dp, cfg->cp, cfg->tp, world, world_size);
    return -1;
  }
  return 0;
}
