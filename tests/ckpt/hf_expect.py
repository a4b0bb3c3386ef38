#!/usr/bin/env python3
"""A Hugging Face export holds exactly the tensors its class has: every
name LlamaForCausalLM or MixtralForCausalLM (by config.json's model_type)
of config.json's sizes has, of its shape, and nothing else, in
model.safetensors or the shards model.safetensors.index.json lists; and
config.json holds the given values.

  hf_expect.py DIR [KEY=JSON ...]     e.g. num_key_value_heads=2 rope_scaling=null

Exit 1 with what differs."""
import json
import os
import struct
import sys


def headers(d):
    """name -> shape over the directory's safetensors, and the files"""
    files = ["model.safetensors"] if os.path.exists(f"{d}/model.safetensors") else \
        sorted(set(json.load(open(f"{d}/model.safetensors.index.json"))["weight_map"].values()))
    h = {}
    for f in files:
        with open(f"{d}/{f}", "rb") as fp:
            (n,) = struct.unpack("<Q", fp.read(8))
            head = json.loads(fp.read(n))
        h.update({k: v["shape"] for k, v in head.items() if k != "__metadata__"})
    return h, files


def expected(cfg):
    """every tensor of the class of cfg, with its shape"""
    C, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    H, F = cfg["num_attention_heads"], cfg["intermediate_size"]
    kv = (cfg.get("num_key_value_heads") or H) * (C // H)
    bias = cfg.get("attention_bias", False)
    want = {"model.embed_tokens.weight": [V, C], "model.norm.weight": [C]}
    if not cfg.get("tie_word_embeddings", False):
        want["lm_head.weight"] = [V, C]
    for l in range(L):
        a = f"model.layers.{l}."
        want.update({a + "input_layernorm.weight": [C], a + "post_attention_layernorm.weight": [C]})
        for p, out in (("q", C), ("k", kv), ("v", kv), ("o", C)):
            want[f"{a}self_attn.{p}_proj.weight"] = [out, C]
            if bias and cfg["model_type"] == "llama":
                want[f"{a}self_attn.{p}_proj.bias"] = [out]
        if cfg["model_type"] == "mixtral":
            E = cfg["num_local_experts"]
            want[a + "block_sparse_moe.gate.weight"] = [E, C]
            for e in range(E):
                x = f"{a}block_sparse_moe.experts.{e}."
                want.update({x + "w1.weight": [F, C], x + "w3.weight": [F, C], x + "w2.weight": [C, F]})
            continue
        for p, shape in (("gate", [F, C]), ("up", [F, C]), ("down", [C, F])):
            want[f"{a}mlp.{p}_proj.weight"] = shape
            if cfg.get("mlp_bias", False):
                want[f"{a}mlp.{p}_proj.bias"] = shape[:1]
    return want


def main():
    d = sys.argv[1]
    cfg = json.load(open(f"{d}/config.json"))
    cls = {"llama": "LlamaForCausalLM", "mixtral": "MixtralForCausalLM"}[cfg["model_type"]]
    problems = [] if cfg["architectures"] == [cls] else [f"architectures {cfg['architectures']}"]
    for kv in sys.argv[2:]:
        key, value = kv.split("=", 1)
        if cfg.get(key, "(absent)") != json.loads(value):
            problems.append(f"config.json: {key} = {json.dumps(cfg.get(key, '(absent)'))}, not {value}")
    h, files = headers(d)
    want = expected(cfg)
    missing, extra = sorted(set(want) - set(h)), sorted(set(h) - set(want))
    problems += [f"missing {missing}"] if missing else []
    problems += [f"extra {extra}"] if extra else []
    problems += [f"{k}: shape {h[k]}, {cls} has {want[k]}" for k in want if k in h and h[k] != want[k]]
    if problems:
        print(f"{d}: not {cls}'s:\n  " + "\n  ".join(problems))
        sys.exit(1)
    print(f"{d}: {len(h)} tensors in {len(files)} file(s), exactly {cls}'s names and shapes; "
          f"config.json as expected")


if __name__ == "__main__":
    main()
