/* The key table: every key meshtrain knows, with its type, field, default,
 * help and range, and for each enumerated key (a string key with choices)
 * the enum value each choice stands for. The parser (config.c), the
 * checks (config_check.c), --help and the documentation all read it. */
#include "core/config_internal.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define GT0 MT_CFG_GT0
#define LT1 MT_CFG_LT1
#define NOMAX MT_CFG_NOMAX
#define SHAPE_MAX 1000000.0

#define F(field) offsetof(mt_config, field)

static const mt_cfg_key g_keys[] = {
    /* [model] */
    {"model.preset", MT_CFG_STRING, F(model_preset), "small",
     "model size preset; shape keys of 0 take their value from it", 0, 0,
     "tiny|small|gpt2-124m|custom|tiny-llama|llama-124m|llama3-8b|llama3-70b|llama3-405b|"
     "mixtral-8x7b|deepseek-v3-like"},
    {"model.arch", MT_CFG_STRING, F(arch), "auto",
     "block family: gpt2, or llama (RMSNorm, rotary, SwiGLU, GQA); auto = the preset's", 0, 0,
     "auto|gpt2|llama"},
    {"model.n_kv_head", MT_CFG_INT, F(n_kv_head), "0",
     "key/value heads (grouped-query attention; 1 = multi-query; 0 = the preset's, or n_head)",
     0, SHAPE_MAX, NULL},
    {"model.ffn_size", MT_CFG_INT, F(ffn_size), "0",
     "hidden units of the MLP (0 = the preset's, or 4 x n_embd)", 0, 16 * SHAPE_MAX, NULL},
    {"model.norm_eps", MT_CFG_DOUBLE, F(norm_eps), "0",
     "llama: RMSNorm's epsilon (0 = the preset's, or 1e-5)", 0, 1, NULL},
    {"model.rope_theta", MT_CFG_DOUBLE, F(rope_theta), "0",
     "llama: rotary embedding base (0 = the preset's, or 10000)", 0, 1e12, NULL},
    {"model.rope_scaling", MT_CFG_STRING, F(rope_scaling), "none",
     "llama: rotary frequency scaling: none, or llama3 (Llama 3.1's, with the rope_* keys below)",
     0, 0, "none|llama3"},
    {"model.rope_factor", MT_CFG_DOUBLE, F(rope_factor), "8",
     "rope_scaling = llama3: how much slower the low frequencies turn", 1, 1024, NULL},
    {"model.rope_low_freq_factor", MT_CFG_DOUBLE, F(rope_low_freq_factor), "1",
     "rope_scaling = llama3: wavelengths above original_len / this are scaled fully", GT0, 1024,
     NULL},
    {"model.rope_high_freq_factor", MT_CFG_DOUBLE, F(rope_high_freq_factor), "4",
     "rope_scaling = llama3: wavelengths below original_len / this are kept", GT0, 1024, NULL},
    {"model.rope_original_len", MT_CFG_INT, F(rope_original_len), "8192",
     "rope_scaling = llama3: the context length the frequencies were trained for", 1, SHAPE_MAX,
     NULL},
    {"model.tie_embeddings", MT_CFG_STRING, F(tie_embeddings), "auto",
     "the LM head is the token embedding (auto: gpt2 true, llama false)", 0, 0,
     "auto|true|false"},
    {"model.bias", MT_CFG_STRING, F(bias), "auto",
     "biases on the linears (auto: gpt2 true, llama false)", 0, 0, "auto|true|false"},
    {"model.bos_token_id", MT_CFG_STRING, F(bos_token_id), "",
     "Hugging Face's bos_token_id (import to export): an id, [ids], null; empty: vocab_size-1", 0,
     0, NULL},
    {"model.eos_token_id", MT_CFG_STRING, F(eos_token_id), "",
     "Hugging Face's eos_token_id, as model.bos_token_id (e.g. [128001,128008,128009])", 0, 0,
     NULL},
    {"model.n_layer", MT_CFG_INT, F(n_layer), "0", "transformer blocks (0 = from the preset)", 0,
     SHAPE_MAX, NULL},
    {"model.n_embd", MT_CFG_INT, F(n_embd), "0", "embedding width, channels (0 = from the preset)",
     0, SHAPE_MAX, NULL},
    {"model.n_head", MT_CFG_INT, F(n_head), "0", "attention heads per block (0 = from the preset)",
     0, SHAPE_MAX, NULL},
    {"model.seq_len", MT_CFG_INT, F(seq_len), "0", "context length, tokens (0 = from the preset)",
     0, SHAPE_MAX, NULL},
    {"model.vocab_size", MT_CFG_INT, F(vocab_size), "0",
     "vocabulary size, tokens (0 = from the preset)", 0, SHAPE_MAX, NULL},
    {"model.moe_experts", MT_CFG_INT, F(moe_experts), "0",
     "Mixture-of-Experts: experts per MoE block (0 = a dense model)", 0, 4096, NULL},
    {"model.moe_topk", MT_CFG_INT, F(moe_topk), "2",
     "MoE: experts each token uses (top-k of the router, weights renormalised)", 1, 4096, NULL},
    {"model.moe_every", MT_CFG_INT, F(moe_every), "1",
     "MoE: every n-th block is a MoE block (blocks n-1, 2n-1, ...; 1 = all)", 1, SHAPE_MAX, NULL},
    {"model.moe_ffn", MT_CFG_INT, F(moe_ffn), "0",
     "MoE: hidden units of each expert (0 = 4 x n_embd)", 0, SHAPE_MAX, NULL},
    {"model.moe_shared", MT_CFG_INT, F(moe_shared), "0",
     "MoE: shared experts every token uses, DeepSeek style (0 = none)", 0, 64, NULL},
    {"model.moe_router", MT_CFG_STRING, F(moe_router), "softmax",
     "MoE router scores: softmax (Switch, Mixtral) or sigmoid (DeepSeek-V3)", 0, 0,
     "softmax|sigmoid"},
    {"model.residual", MT_CFG_STRING, F(residual), "standard",
     "residual stream: standard, or ladder (Ladder Residual, arXiv 2501.06589: another model)", 0,
     0, "standard|ladder"},
    {"model.moe_capacity", MT_CFG_DOUBLE, F(moe_capacity), "0",
     "MoE: capacity factor f: an expert takes ceil(f T k / E) slots per sequence (0 = dropless)", 0,
     64, NULL},
    /* [train] */
    {"train.moe_aux_coef", MT_CFG_DOUBLE, F(moe_aux_coef), "0.01",
     "MoE: coefficient of the Switch load-balancing loss (0 = off; used by moe_balance = aux)", 0,
     1, NULL},
    {"train.moe_z_coef", MT_CFG_DOUBLE, F(moe_z_coef), "0",
     "MoE: coefficient of the router z-loss (0 = off)", 0, 1, NULL},
    {"train.moe_balance", MT_CFG_STRING, F(moe_balance), "aux",
     "MoE balancing: aux (the loss), bias (a per-expert routing bias, no aux loss) or none", 0, 0,
     "aux|bias|none"},
    {"train.moe_bias_rate", MT_CFG_DOUBLE, F(moe_bias_rate), "0.001",
     "MoE, moe_balance = bias: the bias step per optimizer step towards equal load", 0, 1, NULL},
    {"train.moe_bias_init", MT_CFG_DOUBLE, F(moe_bias_init), "0",
     "MoE, moe_balance = bias: expert 0's starting routing bias (a forced skew for tests)", 0, 1,
     NULL},
    {"train.steps", MT_CFG_INT, F(steps), "100", "optimizer steps to run", 1, NOMAX, NULL},
    {"train.seed", MT_CFG_INT, F(seed), "1337", "random seed for initialisation and data order", 0,
     NOMAX, NULL},
    {"train.global_batch", MT_CFG_INT, F(global_batch), "32",
     "sequences per optimizer step, all ranks together", 1, 1 << 24, NULL},
    {"train.micro_batch", MT_CFG_INT, F(micro_batch), "4",
     "sequences per forward/backward on one rank", 1, 1 << 20, NULL},
    {"train.lr", MT_CFG_DOUBLE, F(lr), "1e-3",
     "peak learning rate of AdamW, reached after warmup (1e-5 to 1e-2 is usual)", GT0, 1, NULL},
    {"train.min_lr_ratio", MT_CFG_DOUBLE, F(min_lr_ratio), "0.1",
     "final LR of the cosine decay, as a fraction of train.lr", 0, 1, NULL},
    {"train.warmup_steps", MT_CFG_INT, F(warmup_steps), "10",
     "steps of linear LR warmup (at most 10 x train.steps)", 0, NOMAX, NULL},
    {"train.weight_decay", MT_CFG_DOUBLE, F(weight_decay), "0.1",
     "AdamW decoupled weight decay (0.01 to 0.1 is usual)", 0, 1, NULL},
    {"train.beta1", MT_CFG_DOUBLE, F(beta1), "0.9", "AdamW first-moment decay", 0, LT1, NULL},
    {"train.beta2", MT_CFG_DOUBLE, F(beta2), "0.95", "AdamW second-moment decay", 0, LT1, NULL},
    {"train.eps", MT_CFG_DOUBLE, F(eps), "1e-8", "AdamW denominator epsilon", GT0, 1, NULL},
    {"train.grad_clip", MT_CFG_DOUBLE, F(grad_clip), "1.0",
     "clip the global gradient L2 norm to this (0 = off)", 0, 1e6, NULL},
    {"train.eval_every", MT_CFG_INT, F(eval_every), "25",
     "steps between validation losses (0 = never)", 0, NOMAX, NULL},
    {"train.eval_batches", MT_CFG_INT, F(eval_batches), "4",
     "global batches of validation sequences per validation loss", 1, 1 << 20, NULL},
    {"train.threads", MT_CFG_INT, F(threads), "0",
     "compute threads per rank (0 = OMP_NUM_THREADS or the library default)", 0, 4096, NULL},
    {"train.device", MT_CFG_STRING, F(device), "cpu",
     "cpu, cuda (a GPU per rank), auto (cuda if visible), virtual (emulated: train.virtual_hw)", 0,
     0, "cpu|cuda|auto|virtual"},
    {"train.virtual_hw", MT_CFG_STRING, F(virtual_hw), "",
     "device = virtual: the profile whose [cost] section prices ops and messages", 0, 0, NULL},
    {"virtual.moe_skew", MT_CFG_DOUBLE, F(virtual_moe_skew), "0",
     "device = virtual: MoE load skew, a Zipf exponent over the experts (0 = balanced routing)", 0,
     8, NULL},
    {"train.precision", MT_CFG_STRING, F(precision), "fp32",
     "bf16: bf16 weights' copy and activations over fp32 master and moments (fp16: refused)", 0, 0,
     "fp32|bf16|fp16"},
    {"train.grad_dtype", MT_CFG_STRING, F(grad_dtype), "fp32",
     "dtype gradients are held in (bf16: under train.precision = bf16, reduced in bf16)", 0, 0,
     "fp32|bf16"},
    {"train.log_every", MT_CFG_INT, F(log_every), "1", "steps between log lines", 1, NOMAX, NULL},
    {"train.stop_after", MT_CFG_INT, F(stop_after), "0",
     "stop after this many steps of this run, checkpoint, exit 0 (0 = run to train.steps)", 0,
     NOMAX, NULL},
    {"train.collective_timeout_s", MT_CFG_DOUBLE, F(collective_timeout_s), "900",
     "watchdog: a blocking call waiting longer ends the job, exit 3, naming who is missing "
     "(0 = off)", 0, 1e7, NULL},
    {"train.collective_timeout_steps", MT_CFG_DOUBLE, F(collective_timeout_steps), "0",
     "watchdog in a step: also at most this many median steps (at least 10 s; 0 = off)", 0, 1e6,
     NULL},
    {"train.on_spike", MT_CFG_STRING, F(on_spike), "stop",
     "a spike or non-finite loss or norm: stop (exit 3), or reload the newest checkpoint",
     0, 0, "stop|rollback"},
    {"train.spike_factor", MT_CFG_DOUBLE, F(spike_factor), "0",
     "a loss above this x the median of the last spike_window steps is a spike (0 = only "
     "non-finite)", 0, 1e6, NULL},
    {"train.spike_window", MT_CFG_INT, F(spike_window), "50",
     "steps in the running median of train.spike_factor (the rule waits for 5 of them)", 5,
     100000, NULL},
    {"train.max_rollbacks", MT_CFG_INT, F(max_rollbacks), "3",
     "on_spike = rollback: rollbacks in one run before a spike stops it", 0, 1000, NULL},
    {"train.skip_samples", MT_CFG_INT, F(skip_samples), "0",
     "windows to skip after the checkpoint train.resume names (a step directory, not auto)", 0,
     NOMAX, NULL},
    {"train.resume", MT_CFG_STRING, F(resume), "",
     "auto (newest complete checkpoint in output.dir) or a step directory; empty: fresh", 0, 0,
     NULL},
    {"train.init_from", MT_CFG_STRING, F(init_from), "",
     "checkpoint whose parameters start this run (step 0, fresh optimizer state)", 0, 0, NULL},
    {"train.micro_batches", MT_CFG_INT, F(micro_batches), "0",
     "micro-batches per step through the pipeline (0 = global_batch / (micro_batch x dp))", 0,
     1 << 20, NULL},
    {"train.recompute", MT_CFG_BOOL, F(recompute), "false",
     "pipeline: keep only each layer's input and recompute the rest in backward", 0, 1, NULL},
    /* [optim] */
    {"optim.name", MT_CFG_STRING, F(optim), "adamw",
     "adamw, or muon (Muon on hidden matrices, AdamW on the rest; matrices spread by cost)", 0, 0, "adamw|muon"},
    {"optim.muon_momentum", MT_CFG_DOUBLE, F(muon_momentum), "0.95",
     "muon: momentum (m = momentum m + g)", 0, LT1, NULL},
    {"optim.muon_nesterov", MT_CFG_BOOL, F(muon_nesterov), "true",
     "muon: orthogonalise g + momentum m (Nesterov) rather than m", 0, 1, NULL},
    {"optim.muon_ns_steps", MT_CFG_INT, F(muon_ns_steps), "5",
     "muon: Newton-Schulz steps of the quintic (3.4445, -4.7750, 2.0315)", 1, 100, NULL},
    {"optim.muon_scale", MT_CFG_STRING, F(muon_scale), "rms",
     "muon: update scale: rms = 0.2 sqrt(max(rows, cols)), spectral = sqrt(max(1, rows/cols))", 0, 0, "rms|spectral"},
    {"optim.muon_ns_dtype", MT_CFG_STRING, F(muon_ns_dtype), "auto",
     "muon: the iteration's dtype (auto = the weights' copy: bf16 under train.precision = bf16)",
     0, 0, "auto|fp32|bf16"},
    {"optim.muon_exclude", MT_CFG_STRING, F(muon_exclude), "router",
     "muon: name parts of matrices left to AdamW (embeddings, head, vectors always are)", 0, 0, NULL},
    {"optim.muon_distribution", MT_CFG_STRING, F(muon_distribution), "balanced",
     "muon: balanced (each matrix on one owner, by cost), or replicated (every rank, all)", 0,
     0, "balanced|replicated"},
    {"optim.on_switch", MT_CFG_STRING, F(optim_on_switch), "refuse",
     "resuming another optimizer's checkpoint: refuse, or reset (fresh optimizer state)", 0, 0, "refuse|reset"},
    /* [parallel] */
    {"parallel.dp", MT_CFG_INT, F(dp), "1", "data-parallel ranks", 1, 1 << 24, NULL},
    {"parallel.tp", MT_CFG_INT, F(tp), "1", "tensor-parallel ranks", 1, 1 << 16, NULL},
    {"parallel.pp", MT_CFG_INT, F(pp), "1", "pipeline stages", 1, 1 << 16, NULL},
    {"parallel.cp", MT_CFG_INT, F(cp), "1",
     "context-parallel ranks (each sequence split over them)", 1, 1 << 16, NULL},
    {"parallel.cp_mode", MT_CFG_STRING, F(cp_mode), "ring",
     "context parallelism: ring (K/V passed round) or ulysses (all-to-all)", 0, 0, "ring|ulysses"},
    {"parallel.ep", MT_CFG_INT, F(ep), "1",
     "MoE: expert-parallel ranks (experts split over them; folded over tp x cp x dp)", 1, 4096,
     NULL},
    {"parallel.etp", MT_CFG_INT, F(etp), "1",
     "MoE: tensor-parallel ranks inside an expert (folded mesh etp x ep x edp = tp x cp x dp)", 1,
     1 << 16, NULL},
    {"parallel.ep_balance", MT_CFG_STRING, F(ep_balance), "none",
     "MoE: least-loaded sends rows over a rank's bound, and their experts, to idle ep ranks", 0, 0,
     "none|least-loaded"},
    {"parallel.ep_balance_min_rows", MT_CFG_INT, F(ep_balance_min_rows), "0",
     "MoE, ep_balance = least-loaded: the fewest rows worth moving an expert (0: any)", 0, NOMAX,
     NULL},
    {"parallel.ep_balance_alpha", MT_CFG_DOUBLE, F(ep_balance_alpha), "1.1",
     "MoE, ep_balance = least-loaded: the rows a rank keeps, x the ep group's mean", 1, 64, NULL},
    {"parallel.moe_buffer_factor", MT_CFG_DOUBLE, F(moe_buffer_factor), "2",
     "MoE: rows a rank's expert buffers start at, x a balanced routing's (grown on need; 0: worst)",
     0, 1024, NULL},
    {"parallel.sp", MT_CFG_BOOL, F(sp), "false",
     "sequence parallelism: norm/residual regions hold seq_len/tp positions (tp > 1)", 0, 1, NULL},
    {"parallel.grad_reduce_dtype", MT_CFG_STRING, F(grad_reduce_dtype), "fp32",
     "dtype of the dp x cp gradient reduction (bf16: needs train.precision = bf16)", 0, 0,
     "fp32|bf16"},
    {"parallel.zero", MT_CFG_INT, F(zero), "0",
     "ZeRO over dp: 1 shards AdamW moments, 2 also gradients, 3 also parameters", 0, 3, NULL},
    {"parallel.overlap_dp", MT_CFG_BOOL, F(overlap_dp), "true",
     "ZeRO 0-1: reduce gradients over dp during each stage's last backward", 0, 1, NULL},
    {"parallel.bucket_mb", MT_CFG_DOUBLE, F(bucket_mb), "25",
     "gradient all-reduce bucket size, MiB", GT0, 65536, NULL},
    {"parallel.schedule", MT_CFG_STRING, F(pp_schedule), "1f1b", "pipeline schedule (pp > 1)", 0, 0,
     "gpipe|1f1b|interleaved|zb-h1|breadth-first|zb-v"},
    {"parallel.virtual_stages", MT_CFG_INT, F(virtual_stages), "1",
     "model chunks per pipeline rank (interleaved, breadth-first; zb-v: 2; pp = 1: none)", 1,
     1024, NULL},
    {"parallel.pp_token_slices", MT_CFG_INT, F(pp_token_slices), "1",
     "token slices a sequence moves through the pipeline in (TeraPipe; gpipe, 1f1b, interleaved)",
     1, 64, NULL},
    {"parallel.pp_split", MT_CFG_STRING, F(pp_split), "",
     "layers per pipeline stage, comma-separated (empty: balanced)", 0, 0, NULL},
    {"parallel.pp_first_layers", MT_CFG_INT, F(pp_first_layers), "0",
     "layers of the first pipeline stage (0 = an equal share)", 0, SHAPE_MAX, NULL},
    {"parallel.pp_last_layers", MT_CFG_INT, F(pp_last_layers), "0",
     "layers of the last pipeline stage (0 = an equal share)", 0, SHAPE_MAX, NULL},
    {"parallel.layout", MT_CFG_STRING, F(layout), "manual",
     "manual: the mesh as set; auto: planned for the ranks launched, at every start", 0, 0,
     "manual|auto"},
    {"parallel.print_schedule", MT_CFG_BOOL, F(print_schedule), "false",
     "print each pipeline rank's schedule and exit (also: meshtrain --print-schedule)", 0, 1, NULL},
    /* [plan]: what the planner (meshplan, parallel.layout = auto) assumes */
    {"plan.hw", MT_CFG_STRING, F(plan_hw), "",
     "the planner's cost profile (inputs/hw name or path; empty: metrics.hw)", 0, 0, NULL},
    {"plan.headroom", MT_CFG_DOUBLE, F(plan_headroom), "-1",
     "GiB a device keeps free in the plan (-1: 3, or a tenth of the device if less)", -1, NOMAX,
     NULL},
    {"plan.across_nodes", MT_CFG_BOOL, F(plan_across_nodes), "false",
     "the planner may put a tp or ep group across nodes (false: inside one node)", 0, 1, NULL},
    {"plan.cp_min_tokens", MT_CFG_INT, F(plan_cp_min_tokens), "4096",
     "the planner uses cp only beyond this many tokens of a sequence a rank", 0, NOMAX, NULL},
    {"plan.doc_lengths", MT_CFG_STRING, F(plan_doc_lengths), "",
     "with data.documents: the document lengths' histogram (meshdata lengths) the plan prices",
     0, 0, NULL},
    /* [data] */
    {"data.train", MT_CFG_STRING, F(data_train), "inputs/data/corpus.txt",
     "training tokens: a file, a directory (its *.bin), a glob, a list, or synthetic",
     0, 0, NULL},
    {"data.val", MT_CFG_STRING, F(data_val), "",
     "validation tokens, as data.train (empty: held out; a blend's: name=files, ...)", 0, 0,
     NULL},
    {"data.blend", MT_CFG_STRING, F(data_blend), "",
     "weighted sources instead of data.train, e.g. '0.7 web/*.bin, 0.3 code=code/*.bin'", 0,
     0, NULL},
    {"data.format", MT_CFG_STRING, F(data_format), "auto",
     "token file format (auto: llm.c magic, else u16 for *.bin, else text; u32 for vocab > 65536)",
     0, 0, "auto|llmc|u16|u32|text"},
    {"data.val_fraction", MT_CFG_DOUBLE, F(val_fraction), "0.05",
     "fraction of each source's tokens held out for validation when data.val names none", 0,
     LT1, NULL},
    {"data.hash_batches", MT_CFG_BOOL, F(data_hash), "false",
     "write data_hash, a hash of the windows the dp ranks loaded each step, to metrics.jsonl", 0, 1,
     NULL},
    {"data.documents", MT_CFG_BOOL, F(documents), "false",
     "documents do not see each other: attention stays inside each, positions restart at each",
     0, 1, NULL},
    {"data.eot", MT_CFG_INT, F(eot), "50256",
     "the end-of-text token that begins each document (GPT-2's <|endoftext|>: 50256)", 0,
     NOMAX, NULL},
    {"data.balance", MT_CFG_STRING, F(balance), "none",
     "the step's windows over the dp ranks: in sample order, or by their FLOPs (documents)", 0,
     0, "none|flops"},
    {"data.seq_policy", MT_CFG_STRING, F(seq_policy), "pack",
     "documents: packed into windows as read, or kept whole and placed by a balanced plan (varlen)",
     0, 0, "pack|varlen"},
    {"data.long_documents", MT_CFG_STRING, F(long_documents), "refuse",
     "varlen: a document longer than model.seq_len is refused at start, or cut at the windows",
     0, 0, "refuse|split"},
    /* [output] */
    {"output.dir", MT_CFG_STRING, F(output_dir), "outputs/run",
     "directory for metrics.jsonl, summary.json and config.ini", 0, 0, NULL},
    {"output.save_params", MT_CFG_BOOL, F(save_params), "false",
     "write the final parameters as raw fp32, for comparisons", 0, 1, NULL},
    /* [metrics] */
    {"metrics.hw", MT_CFG_STRING, F(hw_profile), "cpu-generic",
     "hardware profile: a name in inputs/hw/ or the path of an INI profile", 0, 0, NULL},
    {"metrics.trace", MT_CFG_BOOL, F(trace), "false",
     "write each rank's timeline as Chrome trace events: output.dir/trace/rank<N>.json", 0, 1,
     NULL},
    {"metrics.peak_gflops", MT_CFG_DOUBLE, F(peak_gflops), "0",
     "peak compute per rank, GFLOP/s (0 = from the hardware profile)", 0, 1e9, NULL},
    /* [ckpt] */
    {"ckpt.every", MT_CFG_INT, F(ckpt_every), "0",
     "steps between checkpoints (0 = only at the end and on a signal)", 0, NOMAX, NULL},
    {"ckpt.keep", MT_CFG_INT, F(ckpt_keep), "2",
     "complete checkpoints kept; older ones go once a new one is durable and checked (0 = all)", 0,
     NOMAX, NULL},
    {"ckpt.mode", MT_CFG_STRING, F(ckpt_mode), "shared",
     "one shared HDF5 file, or one file per writer plus a virtual index", 0, 0,
     "shared|per-writer|none"},
    {"ckpt.async", MT_CFG_BOOL, F(ckpt_async), "false",
     "snapshot to host memory and write in the background (per-writer mode)", 0, 1, NULL},
    {"ckpt.verify_on_load", MT_CFG_BOOL, F(ckpt_verify_on_load), "true",
     "check every written box's xxh64 checksum when resuming", 0, 1, NULL},
    {"ckpt.io_hints", MT_CFG_STRING, F(ckpt_io_hints), "",
     "MPI-IO hints for the shared file: key=value,... (e.g. cb_nodes=8)", 0, 0, NULL},
    {"ckpt.test_crash", MT_CFG_STRING, F(ckpt_test_crash), "none",
     "TEST ONLY: kill rank 0 at this phase of the save at step train.steps", 0, 0,
     "none|create|write|rename|latest"},
};

enum { N_KEYS = (int)(sizeof g_keys / sizeof g_keys[0]) };

const mt_cfg_key *mt_config_keys(int *n) {
  if (n) *n = N_KEYS;
  return g_keys;
}

const mt_cfg_key *mt_cfg_find_key(const char *name) {
  for (int i = 0; i < N_KEYS; i++)
    if (strcmp(g_keys[i].name, name) == 0) return &g_keys[i];
  return NULL;
}

/* ------------------------------------------------------------------ */
/* the enumerated keys' values                                         */

/* one choice of an enumerated key: its text and the enum value it stands
 * for; a table ends with {NULL, 0}, in the order of the key's choices */
typedef struct {
  const char *name;
  int value;
} choice;

static const choice c_preset[] = {{"tiny", MT_PRESET_TINY},
                                  {"small", MT_PRESET_SMALL},
                                  {"gpt2-124m", MT_PRESET_GPT2_124M},
                                  {"custom", MT_PRESET_CUSTOM},
                                  {"tiny-llama", MT_PRESET_TINY_LLAMA},
                                  {"llama-124m", MT_PRESET_LLAMA_124M},
                                  {"llama3-8b", MT_PRESET_LLAMA3_8B},
                                  {"llama3-70b", MT_PRESET_LLAMA3_70B},
                                  {"llama3-405b", MT_PRESET_LLAMA3_405B},
                                  {"mixtral-8x7b", MT_PRESET_MIXTRAL_8X7B},
                                  {"deepseek-v3-like", MT_PRESET_DEEPSEEK_V3_LIKE},
                                  {NULL, 0}};
static const choice c_arch[] = {
    {"auto", MT_ARCH_AUTO}, {"gpt2", MT_ARCH_GPT2}, {"llama", MT_ARCH_LLAMA}, {NULL, 0}};
static const choice c_tri[] = {
    {"auto", MT_TRI_AUTO}, {"true", MT_TRI_TRUE}, {"false", MT_TRI_FALSE}, {NULL, 0}};
static const choice c_rope_scaling[] = {
    {"none", MT_ROPE_SCALING_NONE}, {"llama3", MT_ROPE_SCALING_LLAMA3}, {NULL, 0}};
static const choice c_moe_router[] = {
    {"softmax", MT_ROUTER_SOFTMAX}, {"sigmoid", MT_ROUTER_SIGMOID}, {NULL, 0}};
static const choice c_residual[] = {
    {"standard", MT_RESIDUAL_STANDARD}, {"ladder", MT_RESIDUAL_LADDER}, {NULL, 0}};
static const choice c_device[] = {{"cpu", MT_DEVICE_CPU},
                                  {"cuda", MT_DEVICE_CUDA},
                                  {"auto", MT_DEVICE_AUTO},
                                  {"virtual", MT_DEVICE_VIRTUAL},
                                  {NULL, 0}};
static const choice c_precision[] = {{"fp32", MT_PRECISION_FP32},
                                     {"bf16", MT_PRECISION_BF16},
                                     {"fp16", MT_PRECISION_FP16},
                                     {NULL, 0}};
static const choice c_dtype[] = {{"fp32", MT_DT_F32}, {"bf16", MT_DT_BF16}, {NULL, 0}};
static const choice c_cp_mode[] = {{"ring", MT_CP_RING}, {"ulysses", MT_CP_ULYSSES}, {NULL, 0}};
static const choice c_sched[] = {{"gpipe", MT_SCHED_GPIPE},
                                 {"1f1b", MT_SCHED_1F1B},
                                 {"interleaved", MT_SCHED_INTERLEAVED},
                                 {"zb-h1", MT_SCHED_ZBH1},
                                 {"breadth-first", MT_SCHED_BFS},
                                 {"zb-v", MT_SCHED_ZBV},
                                 {NULL, 0}};
static const choice c_moe_balance[] = {{"aux", MT_MOE_BALANCE_AUX},
                                       {"bias", MT_MOE_BALANCE_BIAS},
                                       {"none", MT_MOE_BALANCE_NONE},
                                       {NULL, 0}};
static const choice c_ep_balance[] = {{"none", MT_EP_BALANCE_NONE},
                                      {"least-loaded", MT_EP_BALANCE_LEAST_LOADED},
                                      {NULL, 0}};
static const choice c_layout[] = {
    {"manual", MT_LAYOUT_MANUAL}, {"auto", MT_LAYOUT_AUTO}, {NULL, 0}};
static const choice c_data_format[] = {{"auto", MT_DATA_AUTO}, {"llmc", MT_DATA_LLMC},
                                       {"u16", MT_DATA_U16},   {"u32", MT_DATA_U32},
                                       {"text", MT_DATA_TEXT}, {NULL, 0}};
static const choice c_balance[] = {{"none", MT_BALANCE_NONE}, {"flops", MT_BALANCE_FLOPS},
                                   {NULL, 0}};
static const choice c_seq_policy[] = {{"pack", MT_SEQ_PACK}, {"varlen", MT_SEQ_VARLEN},
                                      {NULL, 0}};
static const choice c_long_docs[] = {{"refuse", MT_LONG_DOCS_REFUSE},
                                     {"split", MT_LONG_DOCS_SPLIT}, {NULL, 0}};
static const choice c_optim[] = {{"adamw", MT_OPTIM_ADAMW}, {"muon", MT_OPTIM_MUON}, {NULL, 0}};
static const choice c_muon_scale[] = {{"rms", MT_MUON_SCALE_RMS},
                                      {"spectral", MT_MUON_SCALE_SPECTRAL}, {NULL, 0}};
static const choice c_muon_ns[] = {{"auto", MT_MUON_NS_AUTO}, {"fp32", MT_MUON_NS_FP32},
                                   {"bf16", MT_MUON_NS_BF16}, {NULL, 0}};
static const choice c_muon_dist[] = {{"balanced", MT_MUON_DIST_BALANCED},
                                     {"replicated", MT_MUON_DIST_REPLICATED}, {NULL, 0}};
static const choice c_on_switch[] = {{"refuse", MT_OPTIM_SWITCH_REFUSE},
                                     {"reset", MT_OPTIM_SWITCH_RESET}, {NULL, 0}};
static const choice c_spike[] = {{"stop", MT_SPIKE_STOP}, {"rollback", MT_SPIKE_ROLLBACK},
                                 {NULL, 0}};
static const choice c_ckpt_mode[] = {{"shared", MT_CKPT_MODE_SHARED},
                                     {"per-writer", MT_CKPT_MODE_PER_WRITER},
                                     {"none", MT_CKPT_MODE_NONE},
                                     {NULL, 0}};
static const choice c_ckpt_crash[] = {{"none", MT_CKPT_CRASH_NONE},
                                      {"create", MT_CKPT_CRASH_CREATE},
                                      {"write", MT_CKPT_CRASH_WRITE},
                                      {"rename", MT_CKPT_CRASH_RENAME},
                                      {"latest", MT_CKPT_CRASH_LATEST},
                                      {NULL, 0}};

/* each enumerated key's field (the key table's offset) and its choices */
static const struct {
  size_t offset;
  const choice *choices;
} g_enum_keys[] = {
    {F(model_preset), c_preset},    {F(device), c_device},
    {F(arch), c_arch},              {F(tie_embeddings), c_tri},
    {F(bias), c_tri},               {F(rope_scaling), c_rope_scaling},
    {F(precision), c_precision},    {F(grad_dtype), c_dtype},
    {F(grad_reduce_dtype), c_dtype}, {F(cp_mode), c_cp_mode},
    {F(pp_schedule), c_sched},      {F(moe_balance), c_moe_balance},
    {F(ep_balance), c_ep_balance},  {F(layout), c_layout},
    {F(data_format), c_data_format}, {F(ckpt_mode), c_ckpt_mode},
    {F(ckpt_test_crash), c_ckpt_crash}, {F(moe_router), c_moe_router},
    {F(residual), c_residual},
    {F(balance), c_balance},        {F(on_spike), c_spike},
    {F(seq_policy), c_seq_policy},  {F(long_documents), c_long_docs},
    {F(optim), c_optim},            {F(muon_scale), c_muon_scale},
    {F(muon_ns_dtype), c_muon_ns},  {F(optim_on_switch), c_on_switch},
    {F(muon_distribution), c_muon_dist},
};

#undef F

/* the enums are stored through an int (set_value in config.c) */
_Static_assert(sizeof(mt_preset) == sizeof(int) && sizeof(mt_device_kind) == sizeof(int) &&
                   sizeof(mt_arch) == sizeof(int) && sizeof(mt_tristate) == sizeof(int) &&
                   sizeof(mt_rope_scaling) == sizeof(int) && sizeof(mt_moe_router) == sizeof(int) &&
                   sizeof(mt_residual) == sizeof(int) &&
                   sizeof(mt_precision) == sizeof(int) && sizeof(mt_dtype) == sizeof(int) &&
                   sizeof(mt_cp_mode) == sizeof(int) && sizeof(mt_pp_sched) == sizeof(int) &&
                   sizeof(mt_moe_balance) == sizeof(int) && sizeof(mt_ep_balance) == sizeof(int) &&
                   sizeof(mt_layout_mode) == sizeof(int) &&
                   sizeof(mt_data_format) == sizeof(int) && sizeof(mt_ckpt_mode) == sizeof(int) &&
                   sizeof(mt_ckpt_crash) == sizeof(int) && sizeof(mt_spike_action) == sizeof(int) &&
                   sizeof(mt_optim_kind) == sizeof(int) && sizeof(mt_muon_scale) == sizeof(int) &&
                   sizeof(mt_muon_ns) == sizeof(int) && sizeof(mt_optim_switch) == sizeof(int) &&
                   sizeof(mt_muon_dist) == sizeof(int),
               "an enumerated key's field is not int-sized");

static const choice *choices_of(const mt_cfg_key *k) {
  if (!k || !k->choices) return NULL;
  for (size_t i = 0; i < sizeof g_enum_keys / sizeof g_enum_keys[0]; i++)
    if (g_enum_keys[i].offset == k->offset) return g_enum_keys[i].choices;
  return NULL;
}

static const char *name_in(const choice *c, int value) {
  for (; c && c->name; c++)
    if (c->value == value) return c->name;
  return NULL;
}

int mt_cfg_choice_value(const mt_cfg_key *k, const char *text, size_t len) {
  for (const choice *c = choices_of(k); c && c->name; c++)
    if (strlen(c->name) == len && strncmp(c->name, text, len) == 0) return c->value;
  return -1;
}

const char *mt_cfg_choice_name(const mt_cfg_key *k, int value) {
  return name_in(choices_of(k), value);
}

int mt_cfg_choices_agree(const mt_cfg_key *k, char *why, size_t size) {
  const choice *c = choices_of(k);
  if (!c) {
    snprintf(why, size, "%s has choices but no enum", k->name);
    return 0;
  }
  const char *p = k->choices;
  for (; c->name; c++) {
    size_t n = strlen(c->name);
    if (strncmp(p, c->name, n) != 0 || (p[n] != '|' && p[n] != '\0')) {
      snprintf(why, size, "%s: choice '%s' is not next in '%s'", k->name, c->name, k->choices);
      return 0;
    }
    p += n + (p[n] == '|');
  }
  if (*p) {
    snprintf(why, size, "%s: the enum has no value for '%s'", k->name, p);
    return 0;
  }
  return 1;
}

int mt_config_enum_parse(const char *key, const char *text) {
  return mt_cfg_choice_value(mt_cfg_find_key(key), text, strlen(text));
}

const char *mt_config_enum_name(const char *key, int value) {
  return mt_cfg_choice_name(mt_cfg_find_key(key), value);
}

/* the value's text, or "?" for none of the choices */
static const char *text_of(const choice *c, int value) {
  const char *s = name_in(c, value);
  return s ? s : "?";
}

const char *mt_preset_name(mt_preset v) { return text_of(c_preset, (int)v); }
const char *mt_arch_name(mt_arch v) { return text_of(c_arch, (int)v); }
const char *mt_tristate_name(mt_tristate v) { return text_of(c_tri, (int)v); }
const char *mt_rope_scaling_name(mt_rope_scaling v) { return text_of(c_rope_scaling, (int)v); }
const char *mt_moe_router_name(mt_moe_router v) { return text_of(c_moe_router, (int)v); }
const char *mt_residual_name(mt_residual v) { return text_of(c_residual, (int)v); }
const char *mt_device_kind_name(mt_device_kind v) { return text_of(c_device, (int)v); }
const char *mt_precision_name(mt_precision v) { return text_of(c_precision, (int)v); }
const char *mt_cp_mode_name(mt_cp_mode v) { return text_of(c_cp_mode, (int)v); }
const char *mt_pp_sched_name(mt_pp_sched v) { return text_of(c_sched, (int)v); }
const char *mt_moe_balance_name(mt_moe_balance v) { return text_of(c_moe_balance, (int)v); }
const char *mt_ep_balance_name(mt_ep_balance v) { return text_of(c_ep_balance, (int)v); }
const char *mt_layout_mode_name(mt_layout_mode v) { return text_of(c_layout, (int)v); }
const char *mt_data_format_name(mt_data_format v) { return text_of(c_data_format, (int)v); }
const char *mt_balance_name(mt_balance v) { return text_of(c_balance, (int)v); }
const char *mt_seq_policy_name(mt_seq_policy v) { return text_of(c_seq_policy, (int)v); }
const char *mt_long_docs_name(mt_long_docs v) { return text_of(c_long_docs, (int)v); }
const char *mt_optim_kind_name(mt_optim_kind v) { return text_of(c_optim, (int)v); }
const char *mt_muon_scale_name(mt_muon_scale v) { return text_of(c_muon_scale, (int)v); }
const char *mt_muon_ns_name(mt_muon_ns v) { return text_of(c_muon_ns, (int)v); }
const char *mt_optim_switch_name(mt_optim_switch v) { return text_of(c_on_switch, (int)v); }
const char *mt_muon_dist_name(mt_muon_dist v) { return text_of(c_muon_dist, (int)v); }
const char *mt_spike_action_name(mt_spike_action v) { return text_of(c_spike, (int)v); }
const char *mt_ckpt_mode_name(mt_ckpt_mode v) { return text_of(c_ckpt_mode, (int)v); }
const char *mt_ckpt_crash_name(mt_ckpt_crash v) { return text_of(c_ckpt_crash, (int)v); }
