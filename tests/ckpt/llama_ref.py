#!/usr/bin/env python3
"""An independent Llama and Mixtral: reads a Hugging Face export by hand
(config.json, model.safetensors or the shards model.safetensors.index.json
lists) and computes the mean next-token loss of the windows of a byte file
with numpy in float64, as transformers' modeling_llama.py and
modeling_mixtral.py define the model (nothing of meshtrain's code or
conventions):

  RMSNorm     x / sqrt(mean(x^2) + rms_norm_eps) * weight
  rotary      inv_freq[i] = rope_theta^(-2i/head_dim), rope_scaling llama3
              rescales it (transformers' _compute_llama3_parameters); q and k
              turn as q * cos + rotate_half(q) * sin, rotate_half(x) =
              cat(-x2, x1) of the head's two halves, cos = cat(cos f, cos f)
  attention   num_key_value_heads heads of k and v, each repeated for
              num_attention_heads / num_key_value_heads query heads
              (repeat_kv), causal softmax of q k^T / sqrt(head_dim)
  MLP         down_proj(silu(gate_proj(x)) * up_proj(x))
  Mixtral     router softmax over num_local_experts, the top
              num_experts_per_tok weights renormalised to sum 1, each expert
              w2(silu(w1 x) * w3 x)
  head        lm_head, or embed_tokens when tie_word_embeddings

  llama_ref.py HFDIR TOKENS T          mean loss over the (len-1)/T windows
  llama_ref.py HFDIR TOKENS T --torch  the same with transformers
                                       (AutoModelForCausalLM, float64), after
                                       checking it loads every tensor: no
                                       missing, unexpected or mismatched key

Windows: tokens[w*T : w*T+T+1] for w = 0 .. (len-1)//T - 1 (the bytes of the
file are the tokens), as meshtrain's sampler cuts a byte-level text file."""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_ref  # noqa: E402  (the file format, the windows, the transformers run)
from gpt2_ref import read_safetensors  # noqa: E402


def read_weights(hfdir):
    """every tensor of the directory: one file, or the shards of the index"""
    index = f"{hfdir}/model.safetensors.index.json"
    if os.path.exists(f"{hfdir}/model.safetensors"):
        return read_safetensors(f"{hfdir}/model.safetensors")
    out = {}
    for shard in sorted(set(json.load(open(index))["weight_map"].values())):
        out.update(read_safetensors(f"{hfdir}/{shard}"))
    return out


def inv_freq(cfg, hd):
    import numpy as np
    inv = 1.0 / cfg.get("rope_theta", 10000.0) ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    rs = cfg.get("rope_scaling")
    if not rs:
        return inv
    assert rs.get("rope_type", rs.get("type")) == "llama3", rs
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / lo, old / hi
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled)


def loss_numpy(hfdir, windows):
    import numpy as np
    cfg = json.load(open(f"{hfdir}/config.json"))
    p = read_weights(hfdir)
    g = lambda k: p[k]
    L, C, H = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"]
    Hkv = cfg.get("num_key_value_heads") or H
    hd, eps = C // H, cfg["rms_norm_eps"]
    bias = lambda k: p.get(k, 0.0)
    inv = inv_freq(cfg, hd)

    def rmsnorm(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def silu(x):
        return x / (1.0 + np.exp(-x))

    def rotate_half(x):
        return np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1)

    def mlp(h, pre, gate, up, down):
        return (silu(h @ g(f"{pre}.{gate}.weight").T + bias(f"{pre}.{gate}.bias")) *
                (h @ g(f"{pre}.{up}.weight").T + bias(f"{pre}.{up}.bias"))) @ \
            g(f"{pre}.{down}.weight").T + bias(f"{pre}.{down}.bias")

    def moe(h, pre):
        E, k = cfg["num_local_experts"], cfg["num_experts_per_tok"]
        logits = h @ g(f"{pre}.gate.weight").T
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            top = np.argsort(-probs[t], kind="stable")[:k]
            w = probs[t, top] / probs[t, top].sum()
            for wi, e in zip(w, top):
                out[t] += wi * mlp(h[t:t + 1], f"{pre}.experts.{e}", "w1", "w3", "w2")[0]
        return out

    head = p["lm_head.weight"] if "lm_head.weight" in p else p["model.embed_tokens.weight"]
    total, count = 0.0, 0
    for seq in windows:
        idx, tgt = np.array(seq[:-1]), np.array(seq[1:])
        T = len(idx)
        freqs = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
        emb = np.concatenate([freqs, freqs], -1)
        cos, sin = np.cos(emb), np.sin(emb)
        mask = np.triu(np.ones((T, T), dtype=bool), 1)
        x = p["model.embed_tokens.weight"][idx]
        for l in range(L):
            a = f"model.layers.{l}"
            h = rmsnorm(x, g(f"{a}.input_layernorm.weight"))
            proj = lambda n, heads: (h @ g(f"{a}.self_attn.{n}.weight").T +
                                     bias(f"{a}.self_attn.{n}.bias")).reshape(T, heads, hd).transpose(1, 0, 2)
            q, k, v = proj("q_proj", H), proj("k_proj", Hkv), proj("v_proj", Hkv)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            k, v = np.repeat(k, H // Hkv, axis=0), np.repeat(v, H // Hkv, axis=0)  # repeat_kv
            att = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
            att[:, mask] = -np.inf
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            y = (att @ v).transpose(1, 0, 2).reshape(T, C)
            x = x + y @ g(f"{a}.self_attn.o_proj.weight").T + bias(f"{a}.self_attn.o_proj.bias")
            h = rmsnorm(x, g(f"{a}.post_attention_layernorm.weight"))
            if cfg["model_type"] == "mixtral":
                x = x + moe(h, f"{a}.block_sparse_moe")
            else:
                x = x + mlp(h, f"{a}.mlp", "gate_proj", "up_proj", "down_proj")
        x = rmsnorm(x, p["model.norm.weight"])
        logits = x @ head.T
        m = logits.max(-1, keepdims=True)
        lse = (m + np.log(np.exp(logits - m).sum(-1, keepdims=True)))[:, 0]
        total += float((lse - logits[np.arange(T), tgt]).sum())
        count += T
    return total / count


def loss_torch(hfdir, windows):
    cls = {"llama": "LlamaForCausalLM", "mixtral": "MixtralForCausalLM"}[
        json.load(open(f"{hfdir}/config.json"))["model_type"]]
    # eager attention and experts: the fused ones take no float64
    kw = {"experts_implementation": "eager"} if cls == "MixtralForCausalLM" else {}
    return gpt2_ref.loss_torch(hfdir, windows, cls, attn_implementation="eager", **kw)


if __name__ == "__main__":
    gpt2_ref.main(loss_numpy, loss_torch)
