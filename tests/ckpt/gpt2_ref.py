#!/usr/bin/env python3
"""An independent GPT-2: reads a Hugging Face model.safetensors by hand (the
8-byte header length, the JSON header, raw little-endian data) and computes
the mean next-token loss of the windows of a byte file with numpy, float64.

  gpt2_ref.py HFDIR TOKENS T          mean loss over the (len-1)/T windows
  gpt2_ref.py HFDIR TOKENS T --torch  the same with transformers' GPT2LMHeadModel

Windows: tokens[w*T : w*T+T+1] for w = 0 .. (len-1)//T - 1 (the bytes of the
file are the tokens), as meshtrain's sampler cuts a byte-level text file."""
import json
import math
import struct
import sys


def read_safetensors(path):
    import numpy as np
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b0, b1 = t["data_offsets"]
        raw = blob[base + b0: base + b1]
        if t["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4").astype(np.float64)
        elif t["dtype"] == "BF16":
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            a = u.view(np.float32).astype(np.float64)
        else:
            raise SystemExit(f"dtype {t['dtype']} not handled here")
        out[name.removeprefix("transformer.")] = a.reshape(t["shape"])
    return out


def gelu_new(x):
    import numpy as np
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def layernorm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / (var + eps) ** 0.5 * w + b


def loss_numpy(hfdir, windows):
    import numpy as np
    cfg = json.load(open(f"{hfdir}/config.json"))
    p = read_safetensors(f"{hfdir}/model.safetensors")
    L, C, H = cfg["n_layer"], cfg["n_embd"], cfg["n_head"]
    hd = C // H
    total, count = 0.0, 0
    for seq in windows:
        idx, tgt = np.array(seq[:-1]), np.array(seq[1:])
        T = len(idx)
        x = p["wte.weight"][idx] + p["wpe.weight"][:T]
        mask = np.triu(np.ones((T, T), dtype=bool), 1)
        for l in range(L):
            g = lambda k: p[f"h.{l}.{k}"]
            h = layernorm(x, g("ln_1.weight"), g("ln_1.bias"))
            qkv = h @ g("attn.c_attn.weight") + g("attn.c_attn.bias")  # Conv1D: in x out
            q, k, v = (qkv[:, i * C:(i + 1) * C].reshape(T, H, hd).transpose(1, 0, 2) for i in range(3))
            att = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
            att[:, mask] = -np.inf
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            y = (att @ v).transpose(1, 0, 2).reshape(T, C)
            x = x + y @ g("attn.c_proj.weight") + g("attn.c_proj.bias")
            h = layernorm(x, g("ln_2.weight"), g("ln_2.bias"))
            h = gelu_new(h @ g("mlp.c_fc.weight") + g("mlp.c_fc.bias"))
            x = x + h @ g("mlp.c_proj.weight") + g("mlp.c_proj.bias")
        x = layernorm(x, p["ln_f.weight"], p["ln_f.bias"])
        logits = x @ p["wte.weight"].T  # the tied head
        m = logits.max(-1, keepdims=True)
        lse = (m + np.log(np.exp(logits - m).sum(-1, keepdims=True)))[:, 0]
        total += float((lse - logits[np.arange(T), tgt]).sum())
        count += T
    return total / count


def loss_torch(hfdir, windows, cls="GPT2LMHeadModel", **kw):
    """the same with transformers' class cls (float64), after checking it
    loaded every tensor of the export: no missing, unexpected or mismatched
    key"""
    import torch
    import transformers
    model, info = getattr(transformers, cls).from_pretrained(
        hfdir, torch_dtype=torch.float64, output_loading_info=True, **kw)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        raise SystemExit(f"{cls} did not load the export whole: {bad}")
    print(f"{cls} loaded every tensor of the export", file=sys.stderr)
    model.eval()
    with torch.no_grad():
        ids = torch.tensor([w for w in windows], dtype=torch.long)
        out = model(ids[:, :-1])
        logp = torch.log_softmax(out.logits, -1)
        nll = -logp.gather(-1, ids[:, 1:, None])[..., 0]
    return float(nll.mean())


def main(numpy_fn=None, torch_fn=None):
    """HFDIR TOKENS T [--torch]: the mean loss of the windows (the reference's
    functions, or a caller's)"""
    hfdir, tokens, T = sys.argv[1], sys.argv[2], int(sys.argv[3])
    data = list(open(tokens, "rb").read())
    windows = [data[w * T: w * T + T + 1] for w in range((len(data) - 1) // T)]
    f = (torch_fn or loss_torch) if "--torch" in sys.argv else (numpy_fn or loss_numpy)
    print(f"{f(hfdir, windows):.10f}")


if __name__ == "__main__":
    main()
