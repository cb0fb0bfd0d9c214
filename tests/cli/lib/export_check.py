#!/usr/bin/env python3
"""export_check.py - check a `qeffect export` output against `qeffect inspect` of its run.

usage: export_check.py QEFFECT RUN_DIR safetensors FILE CONFIG_JSON [--with-optimizer] [--with-fp8]
       export_check.py QEFFECT RUN_DIR llmc FILE

safetensors: the file is read by our own reader (safetensors_read.py, from the spec); its
tensor names are exactly the Hugging Face names of inspect's named tensors (parameters;
moments and FP8 meta when asked for); every tensor is F32 with inspect's shape (Conv1D
weights and their moments transposed: [in, out]), and the sha256 of its bytes - transposed
back for Conv1D - equals the sha256 `inspect --tensor NAME --json` reports. config.json has
the run's shape, gelu_new, eps 1e-5 and tie_word_embeddings as the run's model.tie_embeddings.
A tied model (inspect marks lm_head.weight and its moments "tied"): the file has no
lm_head.weight nor its moments (--with-fp8 still has lm_head.fp8.*), and inspect's
lm_head.weight hashes as its wte.weight (training keeps the two copies byte-identical).

llmc: the 256-int header (llm.c's train_gpt2.c: magic 20240326, version 3, maxT, V, L, NH,
C, Vp) matches the run's configuration, the file has exactly the 16 tensors' floats in
llm.c's order, and each layer's slice (wte: its first V rows) hashes as inspect says.

Prints one line per fault and exits 1 on any; prints a summary and exits 0 otherwise.
"""
import hashlib
import json
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_read  # noqa: E402

# llm.c's parameter tensors in its file order (train_gpt2.c ParameterTensors), by the GPT-2 name
# of one layer's slice; None: not per layer.
LLMC_ORDER = ["wte.weight", "wpe.weight", "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
              "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",
              "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias", "ln_f.weight", "ln_f.bias"]


def inspect(q, run, *extra):
    out = subprocess.run([q, "inspect", "--run-dir", run, "--json", *extra], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"FAIL: inspect {' '.join(extra)}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def named_sha(q, run, name):
    s = inspect(q, run, "--tensor", name)["summaries"]
    if len(s) != 1 or s[0].get("name") != name or "sha256" not in s[0]:
        raise SystemExit(f"FAIL: inspect --tensor {name} gave {s!r}")
    return s[0]


def hf_name(name):
    return name if name.startswith("lm_head.") else "transformer." + name


def check_safetensors(q, run, path, cfg_path, flags, faults):
    info = inspect(q, run, "--names")
    want_src = {"params"} | ({"adam_m", "adam_v"} if "--with-optimizer" in flags else set()) | \
        ({"fp8_meta"} if "--with-fp8" in flags else set())
    m = info["config"]["model"]
    tied = bool(m.get("tie_embeddings", False))
    marked = sorted(e["name"] for e in info["named"] if e.get("tied"))
    want_marked = ["lm_head.weight", "lm_head.weight.exp_avg", "lm_head.weight.exp_avg_sq"] if tied else []
    if marked != want_marked:
        faults.append(f"inspect --names marks {marked} tied, expected {want_marked}")
    if tied and named_sha(q, run, "lm_head.weight")["sha256"] != named_sha(q, run, "wte.weight")["sha256"]:
        faults.append("a tied model's lm_head.weight is not byte-identical to its wte.weight")
    named = {hf_name(e["name"]): e for e in info["named"] if e["array"] in want_src and not e.get("tied")}
    try:
        meta, tensors = safetensors_read.load(path)
    except safetensors_read.SafetensorsError as e:
        faults.append(f"reader: {e}")
        return 0
    if meta.get("format") != "pt":
        faults.append(f"__metadata__ format is {meta.get('format')!r}, transformers needs 'pt'")
    for n in sorted(set(named) - set(tensors)):
        faults.append(f"missing tensor {n}")
    for n in sorted(set(tensors) - set(named)):
        faults.append(f"unexpected tensor {n}")
    for hf, e in named.items():
        if hf not in tensors:
            continue
        dt, shape, data = tensors[hf]
        want_shape = list(reversed(e["shape"])) if e["conv1d"] else e["shape"]
        if dt != "F32" or shape != want_shape:
            faults.append(f"{hf}: {dt} {shape}, expected F32 {want_shape}")
            continue
        if e["conv1d"]:
            data = safetensors_read.transpose_f32(data, shape[0], shape[1])
        s = named_sha(q, run, e["name"])
        if s["shape"] != e["shape"]:
            faults.append(f"{hf}: inspect --tensor shape {s['shape']} differs from its table's {e['shape']}")
        got = hashlib.sha256(data).hexdigest()
        if got != s["sha256"]:
            faults.append(f"{hf}: sha256 {got} of the file's bytes, inspect says {s['sha256']}")
    with open(cfg_path) as f:
        cfg = json.load(f)
    want = {"model_type": "gpt2", "n_layer": m["layers"], "n_embd": m["hidden"], "n_head": m["heads"],
            "n_positions": m["seq"], "vocab_size": m["vocab"], "activation_function": "gelu_new",
            "layer_norm_epsilon": 1e-5, "tie_word_embeddings": tied, "architectures": ["GPT2LMHeadModel"]}
    for k, v in want.items():
        if cfg.get(k) != v:
            faults.append(f"config.json {k} is {cfg.get(k)!r}, expected {v!r}")
    if cfg.get("n_inner") not in (None, m["ffn"]):
        faults.append(f"config.json n_inner {cfg.get('n_inner')!r}, the model's ffn is {m['ffn']}")
    return len(named)


def check_llmc(q, run, path, faults):
    info = inspect(q, run)
    m = info["config"]["model"]
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 1024:
        faults.append(f"{path}: {len(blob)} bytes, shorter than llm.c's 1024-byte header")
        return 0
    h = struct.unpack("<256i", blob[:1024])
    V, Vp = m["vocab"], (m["vocab"] + 127) // 128 * 128
    T, L, NH, C = m["seq"], m["layers"], m["heads"], m["hidden"]
    want = [20240326, 3, T, V, L, NH, C, Vp]
    if list(h[:8]) != want or any(h[8:]):
        faults.append(f"header {list(h[:8])} (+{sum(1 for x in h[8:] if x)} nonzero), expected {want}")
        return 0
    sizes = [Vp * C, T * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C, L * C, L * C,
             L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C]
    if len(blob) != 1024 + 4 * sum(sizes):
        faults.append(f"{len(blob)} bytes, llm.c's layout needs {1024 + 4 * sum(sizes)}")
        return 0
    at, checked = 1024, 0
    for k, size in enumerate(sizes):
        per_layer = 2 <= k < 14
        for layer in range(L if per_layer else 1):
            n = size // L if per_layer else size
            data = blob[at + 4 * layer * n: at + 4 * (layer + 1) * n]
            name = f"h.{layer}.{LLMC_ORDER[k]}" if per_layer else LLMC_ORDER[k]
            if k == 0:
                data = data[:4 * V * C]  # the padding rows are llm.c's, not the model's
            s = named_sha(q, run, name)
            got = hashlib.sha256(data).hexdigest()
            if got != s["sha256"]:
                faults.append(f"llm.c tensor {k} layer {layer} ({name}): sha256 {got}, inspect says {s['sha256']}")
            checked += 1
        at += 4 * size
    return checked


def main(argv):
    if len(argv) < 5:
        print(__doc__, file=sys.stderr)
        return 2
    q, run, fmt, path = argv[1:5]
    faults = []
    if fmt == "safetensors":
        n = check_safetensors(q, run, path, argv[5], argv[6:], faults)
    else:
        n = check_llmc(q, run, path, faults)
    for f in faults:
        print(f"FAIL: {fmt} {path}: {f}")
    if faults:
        return 1
    print(f"ok: {fmt} {path}: {n} tensors equal inspect's hashes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
