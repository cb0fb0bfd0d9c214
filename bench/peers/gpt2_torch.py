"""gpt2_torch.py - the PyTorch GPT-2 peer of issue 20: nanoGPT-style training from scratch, timed.

    python3 bench/peers/gpt2_torch.py --model d12 --batch 16 --data PKG/brown_train.bin \\
        --trials 3 --steps 30 --warmup 10 --out DIR [--micro 1 --seq 1024 --budget-s S --timeout-s T]

What users would write to train GPT-2 on one GPU in PyTorch 2.x, set beside `qeffect bench step
--pp 1` on the same shard and shape (bench/compare-peers/run.sh, part gpt2):

  - the model is qeffect's GPT-2 (runtime/model: preset.c, stage.c, stage_forward.c): pre-norm
    blocks x + Proj(Attn(QKV(LN1 x))), x + FC2(GELU_tanh(FC1(LN2 x))), layernorm eps 1e-5, biases
    on the four block linears, learned positions (wpe), a final layernorm and an output head
    without bias that IS wte (--tie 1, the default: GPT-2, nanoGPT and qeffect's gpt2 presets
    tie them; --tie 0 gives the head its own matrix, as `qeffect train --tie-embeddings off`);
  - the vocabulary (50257) padded to a multiple of 128 rows (50304), as qeffect and llm.c pad it;
    the padded logits are sliced off before the loss, as qeffect masks them;
  - initialization as qeffect's: normal(0.02), wpe 0.01, proj and fc2 0.02/sqrt(2 layers),
    layernorm 1/0, biases 0; so nothing is timed on all-zero data;
  - bf16 autocast around forward and loss, fp32 parameters, F.scaled_dot_product_attention with
    is_causal=True and (on CUDA, --sdpa flash) every SDPA backend but flash switched off, so
    flash attention is what runs or the first step fails saying so;
  - torch.optim.AdamW(fused=True) with qeffect's betas (0.9, 0.95), eps 1e-8, weight decay 0.1
    on matrices and embeddings (not on biases or layernorm), lr 3e-4 (what bench step trains
    at), no gradient clipping and no lr schedule (qeffect has neither);
  - torch.compile(model) (default mode, the whole model as nanoGPT does; --compile blocks
    compiles each block on its own, which compiles faster at depth; none: eager);
  - data: an llm.c token shard (256 int32 header, magic 20240520, version 1, uint16 tokens),
    windows of seq+1 tokens at random offsets (seeded), --micro microbatches of --batch
    sequences per step (gradient accumulation, loss / micro), staged on the device before the
    timed loop so that host sampling is not timed.

Timing (CUDA): per step a CUDA event before the first forward and one after zero_grad; a
step's time is the time between them; tokens/s of a trial is the median over steps
warmup+1..N of micro x batch x seq / step time.  tokens_per_s_wall (synchronize, wall clock
over the same steps) is the cross-check.  Peak memory is torch.cuda.max_memory_allocated
(and _reserved) over the timed steps.  The first step holds the compilation (first_step_s).

Trials: with --trials N the script is a driver: every trial is a fresh `python3 gpt2_torch.py
--child ...` process in its own session, killed at --timeout-s; a trial that would end past
--budget-s (estimated from the longest so far) is not started.  DIR/gpt2-torch-TAG.json
(TAG = MODEL-bB-mM) holds every trial's report and the median of their tokens/s, rewritten after
every trial; the children's logs go to DIR/logs/.  Inductor's on-disk cache makes later trials
compile faster than the first; the timed steps are not affected.

Runs with no network (nothing is downloaded) and needs only torch.  On a machine without CUDA
it runs on the CPU (--device cpu; no flash, no fused AdamW: a check of the code, not a number).
"""
import argparse
import array
import json
import math
import os
import random
import signal
import statistics
import struct
import subprocess
import sys
import time
import traceback

# name: (layers, hidden, heads) - runtime/model/preset.c; ffn 4 x hidden, seq 1024, vocab 50257
MODELS = {"d12": (12, 768, 12), "d24": (24, 1024, 16), "d36": (36, 1280, 20), "d48": (48, 1600, 25)}
ALIASES = {"gpt2": "d12", "gpt2-medium": "d24", "gpt2-large": "d36", "gpt2-xl": "d48"}
GPT2_VOCAB = 50257
LN_EPS = 1e-5
ADAMW = dict(lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
SHARD_MAGIC = 20240520


def write_json(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def model_shape(a):
    """The model's shape from --model and the overrides: dict(layers, hidden, heads, ffn, vocab, vpad, seq)."""
    name = ALIASES.get(a.model, a.model)
    if name not in MODELS:
        raise ValueError("unknown --model '%s' (known: %s, or %s)" % (a.model, ", ".join(MODELS), ", ".join(ALIASES)))
    layers, hidden, heads = MODELS[name]
    layers = a.layers or layers
    hidden = a.hidden or hidden
    heads = a.heads or heads
    if hidden % heads:
        raise ValueError("--hidden %d is not a multiple of --heads %d" % (hidden, heads))
    vocab = a.vocab or GPT2_VOCAB
    return dict(model=name, layers=layers, hidden=hidden, heads=heads, ffn=4 * hidden, vocab=vocab,
                vpad=(vocab + 127) // 128 * 128, seq=a.seq, tie=bool(a.tie))


# ---------------------------------------------------------------------------------------------
# data: llm.c shards (runtime/job/shard.c writes them; llm.c's dev/data reads them)

def read_shard(path):
    """The tokens of an llm.c shard as array('H'); ValueError naming the file when it is not one."""
    with open(path, "rb") as f:
        head = f.read(1024)
        if len(head) < 1024:
            raise ValueError("data '%s': %d bytes, shorter than the 1024-byte llm.c shard header" % (path, len(head)))
        magic, version, ntok = struct.unpack("<3i", head[:12])
        if magic != SHARD_MAGIC:
            raise ValueError("data '%s': magic %d, not an llm.c token shard (%d)" % (path, magic, SHARD_MAGIC))
        if version != 1:
            raise ValueError("data '%s': shard version %d, this reader knows version 1 (uint16 tokens)" % (path, version))
        toks = array.array("H")
        body = f.read()
    if len(body) != 2 * ntok:
        raise ValueError("data '%s': header says %d tokens, the file holds %d bytes of them" % (path, ntok, len(body)))
    toks.frombytes(body)
    if sys.byteorder != "little":
        toks.byteswap()
    return toks


def sample_windows(tokens, seq, count, seed, vocab, path="data"):
    """count windows of seq+1 tokens at random offsets (random.Random(seed)), flat list of ints;
    ValueError when the shard is too short or holds a token outside the vocabulary."""
    n = len(tokens)
    if n < seq + 2:
        raise ValueError("%s: %d tokens, a window needs %d" % (path, n, seq + 2))
    r = random.Random(seed)
    out = []
    for _ in range(count):
        o = r.randrange(0, n - seq - 1)
        out.extend(tokens[o:o + seq + 1])
    top = max(out)
    if top >= vocab:
        raise ValueError("%s: token %d is outside the vocabulary (%d): a shard of another tokenizer?" % (path, top, vocab))
    if top == 0:
        raise ValueError("%s: the sampled windows are all zero" % path)
    return out


# ---------------------------------------------------------------------------------------------
# the model (torch imported here, so the data code above is usable without it)

def build_model(shape, device):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    L, H, NH, FF, VP, T, V = (shape[k] for k in ("layers", "hidden", "heads", "ffn", "vpad", "seq", "vocab"))
    tie = shape["tie"]
    resid = 0.02 / math.sqrt(2.0 * L)
    sdpa = getattr(F, "scaled_dot_product_attention", None)

    def attention(q, k, v):
        if sdpa is not None:
            return sdpa(q, k, v, is_causal=True)
        # torch < 2.0 (the development machine's Debian torch) only: the same causal softmax
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        return s.masked_fill(~mask, float("-inf")).softmax(-1) @ v

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(H, eps=LN_EPS)
            self.qkv = nn.Linear(H, 3 * H)
            self.proj = nn.Linear(H, H)
            self.ln2 = nn.LayerNorm(H, eps=LN_EPS)
            self.fc1 = nn.Linear(H, FF)
            self.fc2 = nn.Linear(FF, H)

        def forward(self, x):
            B, Tn, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(H, dim=2)
            q = q.view(B, Tn, NH, H // NH).transpose(1, 2)
            k = k.view(B, Tn, NH, H // NH).transpose(1, 2)
            v = v.view(B, Tn, NH, H // NH).transpose(1, 2)
            y = attention(q, k, v).transpose(1, 2).contiguous().view(B, Tn, H)
            x = x + self.proj(y)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(VP, H)
            self.wpe = nn.Embedding(T, H)
            self.blocks = nn.ModuleList([Block() for _ in range(L)])
            self.lnf = nn.LayerNorm(H, eps=LN_EPS)
            self.head = nn.Linear(H, VP, bias=False)
            if tie:  # one Parameter: its gradient is the sum of both uses, updated once
                self.head.weight = self.wte.weight
            self.register_buffer("pos", torch.arange(T), persistent=False)
            with torch.no_grad():
                for n, p in self.named_parameters():
                    if n.endswith("proj.weight") or n.endswith("fc2.weight"):
                        p.normal_(0.0, resid)
                    elif n == "wpe.weight":
                        p.normal_(0.0, 0.01)
                    elif p.dim() == 2:
                        p.normal_(0.0, 0.02)
                    elif n.endswith("bias"):
                        p.zero_()
                    # layernorm weights stay 1

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(self.pos[: idx.shape[1]])[None]
            for b in self.blocks:
                x = b(x)
            logits = self.head(self.lnf(x))[..., :V]  # padded rows out of the loss, as qeffect masks them
            return F.cross_entropy(logits.reshape(-1, V).float(), targets.reshape(-1))

    if hasattr(torch.device, "__enter__"):  # torch >= 2.0: parameters made and initialized on the device
        with torch.device(device):
            m = GPT()
        return m
    return GPT().to(device)


def param_groups(model):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return [dict(params=decay, weight_decay=ADAMW["weight_decay"]), dict(params=no_decay, weight_decay=0.0)]


def run_trial(a, doc):
    import torch

    t_start = time.perf_counter()
    shape = model_shape(a)
    doc.update(shape)
    dev = torch.device(a.device if a.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = dev.type == "cuda"
    doc.update(device=str(dev), torch=torch.__version__, cuda=getattr(torch.version, "cuda", None),
               gpu=torch.cuda.get_device_name(dev) if cuda else None)
    torch.manual_seed(a.seed)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True  # nanoGPT's setting; matmuls run in bf16 under autocast
        torch.backends.cudnn.allow_tf32 = True
    sdpa_note = "math fallback (torch without scaled_dot_product_attention)"
    if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        sdpa_note = "default backend choice"
        if cuda and a.sdpa == "flash":
            # global switches, set before anything is traced: flash or an error, no silent fallback
            for fn in ("enable_mem_efficient_sdp", "enable_math_sdp", "enable_cudnn_sdp"):
                if hasattr(torch.backends.cuda, fn):
                    getattr(torch.backends.cuda, fn)(False)
            torch.backends.cuda.enable_flash_sdp(True)
            sdpa_note = "flash only (mem-efficient, math and cudnn backends off)"
    doc["sdpa"] = sdpa_note

    toks = read_shard(a.data)
    B, M, T = a.batch, a.micro, shape["seq"]
    flat = sample_windows(toks, T, a.steps * M * B, a.seed, shape["vocab"], a.data)
    win = torch.tensor(flat, dtype=torch.int64).view(a.steps, M, B, T + 1)
    x_all = win[..., :-1].contiguous().to(dev)
    y_all = win[..., 1:].contiguous().to(dev)
    doc["data_tokens"] = len(toks)
    del flat, win

    model = build_model(shape, dev)
    nparams = sum(p.numel() for p in model.parameters())
    fused = cuda and a.fused
    kw = dict(lr=ADAMW["lr"], betas=ADAMW["betas"], eps=ADAMW["eps"])
    if fused:
        kw["fused"] = True
    opt = torch.optim.AdamW(param_groups(model), **kw)
    if a.compile == "model":
        fwd = torch.compile(model)
    elif a.compile == "blocks":
        for b in model.blocks:
            b.compile()
        fwd = model
    else:
        fwd = model
    doc.update(params=nparams, optimizer="torch.optim.AdamW(%s), fp32 params" % ("fused=True" if fused else "default"),
               adamw=dict(ADAMW), compile=a.compile, autocast="bf16" if a.amp else "off")
    amp_dev = dev.type
    setup_s = time.perf_counter() - t_start

    tokens = M * B * T
    use_events = cuda
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(a.steps)] if use_events else None
    host_ms, losses = [], []
    t_first = None
    t_wall0 = None
    for i in range(a.steps):
        if i == a.warmup:
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats(dev)
            t_wall0 = time.perf_counter()
        h0 = time.perf_counter()
        if use_events:
            ev[i][0].record()
        for m in range(M):
            if a.amp:
                with torch.autocast(amp_dev, dtype=torch.bfloat16):
                    loss = fwd(x_all[i, m], y_all[i, m])
            else:
                loss = fwd(x_all[i, m], y_all[i, m])
            (loss / M).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if use_events:
            ev[i][1].record()
        losses.append(loss.detach())
        if i == 0:
            if cuda:
                torch.cuda.synchronize()
            t_first = time.perf_counter() - h0
        host_ms.append((time.perf_counter() - h0) * 1e3)
    if cuda:
        torch.cuda.synchronize()
    wall = time.perf_counter() - t_wall0
    step_ms = [s.elapsed_time(e) for s, e in ev] if use_events else host_ms
    tail = step_ms[a.warmup:]
    rates = [tokens / (ms / 1e3) for ms in tail]
    lv = [float(l) for l in losses]
    doc.update(tokens_per_step=tokens, step_ms=step_ms, step_ms_median=statistics.median(tail),
               tokens_per_s=statistics.median(rates), tokens_per_s_wall=tokens * len(tail) / wall,
               timing="cuda events" if use_events else "host clock (cpu)", first_step_s=t_first, setup_s=setup_s,
               loss_first=lv[0], loss_last=lv[-1], losses=lv,
               peak_alloc_bytes=torch.cuda.max_memory_allocated(dev) if cuda else None,
               peak_reserved_bytes=torch.cuda.max_memory_reserved(dev) if cuda else None)
    if not all(math.isfinite(v) for v in lv):
        raise RuntimeError("a loss is not finite: %s" % lv)
    doc["ok"] = True


# ---------------------------------------------------------------------------------------------
# the driver: fresh processes, a budget

def child_args(a, out_json):
    args = [sys.executable, os.path.abspath(__file__), "--child", "--json-out", out_json]
    for k in ("model", "batch", "micro", "seq", "steps", "warmup", "data", "seed", "compile", "sdpa", "device",
              "layers", "hidden", "heads", "vocab"):
        v = getattr(a, k)
        if v is not None:
            args += ["--" + k, str(v)]
    args += ["--amp", str(int(a.amp)), "--fused", str(int(a.fused)), "--tie", str(int(a.tie))]
    return args


def launch(cmd, log, timeout_s):
    """Run cmd in its own session; (exit code, or None when killed at timeout_s; seconds)."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "8")
    t0 = time.time()
    with open(log, "w") as f:
        f.write("$ %s\n" % " ".join(cmd))
        f.flush()
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            rc = None
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    p.wait(timeout=10)
                    break
                except subprocess.TimeoutExpired:
                    pass
    return rc, time.time() - t0


def tag_of(a):
    return "%s-b%d-m%d" % (ALIASES.get(a.model, a.model), a.batch, a.micro)


def drive(a):
    os.makedirs(os.path.join(a.out, "logs"), exist_ok=True)
    tag = tag_of(a)
    path = os.path.join(a.out, "gpt2-torch-%s.json" % tag)
    t0 = time.time()
    doc = dict(system="pytorch", peer="gpt2_torch.py", tag=tag, model=ALIASES.get(a.model, a.model), batch=a.batch,
               micro=a.micro, seq=a.seq, steps=a.steps, warmup=a.warmup, compile=a.compile, trials_asked=a.trials,
               trials=[], truncated=False, truncated_why="",
               definition="tokens_per_s: median over fresh-process trials of (median over steps warmup+1..N of "
                          "micro x batch x seq / the step's CUDA-event time)")
    longest = 0.0
    for t in range(a.trials):
        if a.budget_s > 0 and time.time() - t0 + longest > a.budget_s:
            doc["truncated"] = True
            doc["truncated_why"] = "--budget-s %.0f: stopped before trial %d (%.0f s spent, a trial takes about %.0f s)" % (
                a.budget_s, t + 1, time.time() - t0, longest)
            break
        out_json = os.path.join(a.out, "logs", "%s-%d.json" % (tag, t + 1))
        if os.path.exists(out_json):
            os.remove(out_json)
        log = os.path.join(a.out, "logs", "%s-%d.log" % (tag, t + 1))
        lim = a.timeout_s
        if a.budget_s > 0:  # a trial may overrun the budget by 15 s, not more
            lim = min(lim, max(10.0, a.budget_s - (time.time() - t0) + 15))
        rc, secs = launch(child_args(a, out_json), log, lim)
        longest = max(longest, secs)
        try:
            with open(out_json) as f:
                r = json.load(f)
        except (OSError, ValueError):
            r = dict(ok=False, error="no report (exit %s%s); log %s" % (rc, ", killed at %.0f s" % lim if rc is None else "", log))
        r.update(trial=t + 1, exit=rc, wall_s=secs)
        doc["trials"].append(r)
        if r.get("ok"):
            print("peer gpt2-torch %s trial %d/%d: %10.0f tok/s (wall %.0f), step %.2f ms, first step %.1f s, peak %.2f GiB, loss %.3f -> %.3f" % (
                tag, t + 1, a.trials, r["tokens_per_s"], r["tokens_per_s_wall"], r["step_ms_median"], r["first_step_s"],
                (r.get("peak_alloc_bytes") or 0) / 2**30, r["loss_first"], r["loss_last"]), flush=True)
        else:
            print("peer gpt2-torch %s trial %d/%d failed: %s" % (tag, t + 1, a.trials, str(r.get("error"))[-300:]), flush=True)
        good = [x["tokens_per_s"] for x in doc["trials"] if x.get("ok")]
        doc.update(n=len(good), tokens_per_s=statistics.median(good) if good else None,
                   tokens_per_s_trials=good, wall_s=time.time() - t0)
        write_json(path, doc)
    if doc["truncated"]:
        print("peer gpt2-torch %s: cut short: %s" % (tag, doc["truncated_why"]), flush=True)
    good = [x["tokens_per_s"] for x in doc["trials"] if x.get("ok")]
    doc.update(n=len(good), tokens_per_s=statistics.median(good) if good else None, tokens_per_s_trials=good,
               wall_s=time.time() - t0)
    write_json(path, doc)
    print("peer gpt2-torch %s: %s tok/s, median of %d trial(s); report %s" % (
        tag, "%.0f" % doc["tokens_per_s"] if good else "no", len(good), path), flush=True)
    return 0


def parse(argv=None):
    p = argparse.ArgumentParser(description="PyTorch GPT-2 peer (nanoGPT-style) for qeffect bench step --pp 1; "
                                            "see the file's head for what it measures")
    p.add_argument("--model", default="d12", help="d12|d24|d36|d48 or gpt2|gpt2-medium|gpt2-large|gpt2-xl (default d12)")
    p.add_argument("--batch", type=int, default=16, help="sequences per microbatch (default 16)")
    p.add_argument("--micro", type=int, default=1, help="microbatches per step, gradient accumulation (default 1)")
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=10, help="leading steps left out (compilation is in step 1)")
    p.add_argument("--data", required=True, help="an llm.c token shard (PREFIX_train.bin)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--compile", choices=("model", "blocks", "none"), default="model")
    p.add_argument("--sdpa", choices=("flash", "default"), default="flash",
                   help="flash: every other SDPA backend off on CUDA (default); default: PyTorch's choice")
    p.add_argument("--amp", type=int, choices=(0, 1), default=1, help="bf16 autocast (default 1)")
    p.add_argument("--tie", type=int, choices=(0, 1), default=1,
                   help="the output head is wte, as GPT-2 and qeffect's gpt2 presets (default 1; 0: its own matrix)")
    p.add_argument("--fused", type=int, choices=(0, 1), default=1, help="fused AdamW on CUDA (default 1)")
    p.add_argument("--device", default="auto", help="auto|cuda|cpu (default auto: cuda when available)")
    p.add_argument("--layers", type=int, help="override the model's layers (tests)")
    p.add_argument("--hidden", type=int, help="override hidden (tests); ffn is 4 x hidden")
    p.add_argument("--heads", type=int, help="override heads (tests)")
    p.add_argument("--vocab", type=int, help="override the vocabulary (default 50257; padded to a multiple of 128)")
    p.add_argument("--trials", type=int, default=1, help="fresh-process trials (driver mode)")
    p.add_argument("--budget-s", type=float, default=0.0, help="start no trial that would end past this (0: none)")
    p.add_argument("--timeout-s", type=float, default=300.0, help="time limit of one trial")
    p.add_argument("--out", default="gpt2-torch-out", help="report folder (driver mode)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--json-out", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.batch < 1 or a.micro < 1 or a.seq < 2 or a.trials < 1:
        p.error("--batch, --micro, --trials must be >= 1 and --seq >= 2")
    if a.warmup < 1 or a.steps <= a.warmup:
        p.error("need --warmup >= 1 (the first step compiles) and --steps > --warmup")
    try:
        model_shape(a)
    except ValueError as e:
        p.error(str(e))
    return a


def main():
    a = parse()
    if not a.child:
        return drive(a)
    doc = dict(system="pytorch", peer="gpt2_torch.py", ok=False, error=None, batch=a.batch, micro=a.micro,
               steps=a.steps, warmup=a.warmup, data=a.data)
    rc = 0
    try:
        run_trial(a, doc)
    except BaseException as e:
        doc["ok"] = False
        doc["error"] = "%s: %s" % (type(e).__name__, str(e)[-2000:])
        doc["traceback"] = traceback.format_exc()[-6000:]
        sys.stderr.write(doc["traceback"])
        rc = 1
    line = {k: v for k, v in doc.items() if k not in ("step_ms", "losses", "traceback")}
    print(json.dumps(line), flush=True)
    if a.json_out:
        write_json(a.json_out, doc)
    return rc


if __name__ == "__main__":
    sys.exit(main())
