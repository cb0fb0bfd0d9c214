#!/usr/bin/env python3
"""gpt2_forward.py - the forward pass and loss of a GPT-2 as Hugging Face's GPT2LMHeadModel
defines it, in plain Python (standard library only), from an exported folder: model.safetensors
read with safetensors_read.py and config.json.

What it implements, from transformers' modeling_gpt2.py semantics: h = wte[tokens] + wpe[pos];
per block: a = LN(h; ln_1) (eps layer_norm_epsilon), qkv = a @ c_attn.weight + c_attn.bias
(Conv1D: weight [in, out]), split into q | k | v of n_embd each, heads of n_embd / n_head
columns, causal softmax(q k^T / sqrt(d)) v, merged heads @ c_proj.weight + bias, residual;
m = LN(h; ln_2), gelu_new(m @ c_fc.weight + b) @ c_proj.weight + b, residual; LN(h; ln_f);
logits = h @ lm_head.weight^T (nn.Linear, [vocab, n_embd]); loss = mean cross-entropy of
targets.  Computed in double precision.  next_logits gives the last row's logits alone (greedy
decoding in tests/cli/sample.sh).

usage: gpt2_forward.py FOLDER TOKEN,TOKEN,... TARGET,TARGET,...   prints the loss
"""
import json
import math
import os
import sys
from array import array
from operator import mul

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_read  # noqa: E402


def load(folder):
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    _, tensors = safetensors_read.load(os.path.join(folder, "model.safetensors"))
    w = {}
    for name, (dt, shape, data) in tensors.items():
        if dt != "F32":
            raise SystemExit(f"{name}: dtype {dt}")
        a = array("f")
        a.frombytes(data)
        if sys.byteorder != "little":
            a.byteswap()
        vals = a.tolist()
        if len(shape) == 2:
            w[name] = [vals[r * shape[1]:(r + 1) * shape[1]] for r in range(shape[0])]
        else:
            w[name] = vals
    return cfg, w


def cols(m):
    """Rows of the transpose: a Conv1D weight [in, out] as out rows of in values."""
    return [list(c) for c in zip(*m)]


def linear(x, wrows, b):
    """x [T][in] times a weight given as out rows of in values, plus bias."""
    out = []
    for row in x:
        out.append([sum(map(mul, row, wr)) + (b[o] if b else 0.0) for o, wr in enumerate(wrows)])
    return out


def layernorm(x, g, b, eps):
    out = []
    for row in x:
        n = len(row)
        mean = sum(row) / n
        var = sum((v - mean) ** 2 for v in row) / n
        s = 1.0 / math.sqrt(var + eps)
        out.append([(v - mean) * s * g[i] + b[i] for i, v in enumerate(row)])
    return out


def gelu_new(v):
    return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))


def forward_hidden(cfg, w, tokens):
    """The last layernorm's output, one row per token (what the head multiplies)."""
    C, nh, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    d = C // nh
    T = len(tokens)
    p = "transformer."
    h = [[a + b for a, b in zip(w[p + "wte.weight"][t], w[p + "wpe.weight"][i])] for i, t in enumerate(tokens)]
    for layer in range(cfg["n_layer"]):
        q = f"{p}h.{layer}."
        a = layernorm(h, w[q + "ln_1.weight"], w[q + "ln_1.bias"], eps)
        qkv = linear(a, cols(w[q + "attn.c_attn.weight"]), w[q + "attn.c_attn.bias"])
        att = [[0.0] * C for _ in range(T)]
        for head in range(nh):
            lo = head * d
            for t in range(T):
                qt = qkv[t][lo:lo + d]
                scores = [sum(map(mul, qt, qkv[u][C + lo:C + lo + d])) / math.sqrt(d) for u in range(t + 1)]
                m = max(scores)
                e = [math.exp(s - m) for s in scores]
                z = sum(e)
                for j in range(d):
                    att[t][lo + j] = sum(e[u] * qkv[u][2 * C + lo + j] for u in range(t + 1)) / z
        proj = linear(att, cols(w[q + "attn.c_proj.weight"]), w[q + "attn.c_proj.bias"])
        h = [[x + y for x, y in zip(r, s)] for r, s in zip(h, proj)]
        m = layernorm(h, w[q + "ln_2.weight"], w[q + "ln_2.bias"], eps)
        fc = [[gelu_new(v) for v in r] for r in linear(m, cols(w[q + "mlp.c_fc.weight"]), w[q + "mlp.c_fc.bias"])]
        out = linear(fc, cols(w[q + "mlp.c_proj.weight"]), w[q + "mlp.c_proj.bias"])
        h = [[x + y for x, y in zip(r, s)] for r, s in zip(h, out)]
    return layernorm(h, w[p + "ln_f.weight"], w[p + "ln_f.bias"], eps)


def head(cfg, w):
    return w["lm_head.weight"] if not cfg.get("tie_word_embeddings", True) else w["transformer.wte.weight"]


def next_logits(cfg, w, tokens):
    """The logits of the token after tokens (the last row only), over the real vocabulary."""
    return linear(forward_hidden(cfg, w, tokens)[-1:], head(cfg, w), None)[0]


def forward_loss(cfg, w, tokens, targets):
    T = len(tokens)
    logits = linear(forward_hidden(cfg, w, tokens), head(cfg, w), None)
    loss = 0.0
    for row, tgt in zip(logits, targets):
        m = max(row)
        lse = m + math.log(sum(math.exp(v - m) for v in row))
        loss += lse - row[tgt]
    return loss / T


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    cfg, w = load(argv[1])
    tokens = [int(t) for t in argv[2].split(",")]
    targets = [int(t) for t in argv[3].split(",")]
    print(repr(forward_loss(cfg, w, tokens, targets)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
