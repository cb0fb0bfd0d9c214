"""peer_model.py - qeffect's GPT stage, presets, data and checkpoint shapes, in PyTorch.

What the peer benchmarks (pp_step.py, dcp_ckpt.py) share, so that they run the model qeffect
runs (runtime/model/preset.c, stage.c, stage_forward.c) on the data it reads
(runtime/job/data.c):

  - presets: vocab, hidden, ffn, heads, seq, layers; four layers, one per virtual stage,
    micro-batch size 1;
  - a stage: pre-norm GPT block x + Proj(Attn(QKV(LN1 x))), x + FC2(GELU(FC1(LN2 x))),
    layernorm eps 1e-5, GELU tanh approximation, causal attention, biases on the four block
    linears; stage 0 adds the token and learned position embeddings (wte, wpe); the last stage
    adds the final layernorm and an untied output head without bias, and the loss is the mean
    token cross-entropy of a microbatch (the schedule averages over microbatches);
  - initialization as qeffect's (normal 0.02, 0.01 for wpe, 0.02/sqrt(2 layers) for proj and
    fc2, layernorm weights 1, biases 0), so no number is timed on all-zero data;
  - data: JSONL "text" records as bytes (tokens 0..255 of the 32768 vocabulary), a '\\n'
    after each record, every fifth record held out, windows of seq+1 tokens at random offsets;
  - the FP8 linear (torch._scaled_mm, per-tensor current scaling, E4M3 forward, E5M2
    gradients) and its split-backward awareness (see FP8Linear);
  - the persistent state of a stage as qeffect checkpoints it (parameters, AdamW m and v, step,
    FP8 meta), for the DCP benchmark.

torch is imported lazily by the functions that need it, so the shapes and the data code can be
checked where torch is not installed.
"""
import json
import math
import random

# name: (vocab, hidden, ffn, heads, seq, layers) - runtime/model/preset.c
PRESETS = {
    "tiny": (256, 64, 256, 4, 32, 4),
    "small": (256, 128, 512, 4, 64, 4),
    "h2048": (32768, 2048, 8192, 16, 256, 4),
    "h4096": (32768, 4096, 11008, 32, 256, 4),
}

# qeffect's AdamW defaults (runtime/optim: lr 1e-3, betas 0.9/0.95, eps 1e-8, wd 0.1); the
# benchmarks train at lr 3e-4 like bench/step.
ADAMW = dict(lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
AMAX_HISTORY = 1024  # qeffect's default --amax-history: the size of its FP8 meta per role
LN_EPS = 1e-5


def torchrun_rank():
    """(rank, world, local rank, device) of this torchrun process; selects its GPU."""
    import os

    import torch

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    return rank, world, local, torch.device("cuda", local)


def preset(name):
    if name not in PRESETS:
        raise ValueError("unknown preset '%s' (known: %s)" % (name, ", ".join(PRESETS)))
    v, h, f, nh, t, l = PRESETS[name]
    return dict(name=name, vocab=v, hidden=h, ffn=f, heads=nh, seq=t, layers=l)


def stages_of_rank(schedule, rank, pp, nstages):
    """Global stages of a rank, ascending: interleaved (loop) r, r+P, ...; zbv (V) r, 2P-1-r."""
    if schedule == "zbv":
        return sorted({rank, nstages - 1 - rank})
    return list(range(rank, nstages, pp))


def stage_param_table(cfg, stage, nstages):
    """qeffect's parameter table of a global stage (runtime/model/stage.c build_param_table):
    [(name, shape, decay)], in its order.  Matrices are [out, in]."""
    H, F, V, T = cfg["hidden"], cfg["ffn"], cfg["vocab"], cfg["seq"]
    t = []
    if stage == 0:
        t += [("wte", (V, H), True), ("wpe", (T, H), True)]
    t += [("ln1.w", (H,), False), ("ln1.b", (H,), False),
          ("qkv.w", (3 * H, H), True), ("qkv.b", (3 * H,), False),
          ("proj.w", (H, H), True), ("proj.b", (H,), False),
          ("ln2.w", (H,), False), ("ln2.b", (H,), False),
          ("fc1.w", (F, H), True), ("fc1.b", (F,), False),
          ("fc2.w", (H, F), True), ("fc2.b", (H,), False)]
    if stage == nstages - 1:
        t += [("lnf.w", (H,), False), ("lnf.b", (H,), False), ("head.w", (V, H), True)]
    return t


def stage_nlinear(stage, nstages):
    return 5 if stage == nstages - 1 else 4


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def checkpoint_bytes(cfg, stages, nstages, history=AMAX_HISTORY):
    """Bytes of the persistent state of these stages: fp32 params, AdamW m and v (3 x params),
    a 4-byte step per parameter tensor, and the FP8 meta (nlinear x 3 roles x (L + 2) floats)."""
    b = 0
    for s in stages:
        tab = stage_param_table(cfg, s, nstages)
        b += sum(3 * 4 * numel(shape) + 4 for _, shape, _ in tab)
        b += 4 * stage_nlinear(s, nstages) * 3 * (history + 2)
    return b


# ---------------------------------------------------------------------------------------------
# data: the same bytes qeffect trains on (runtime/job/data.c load_jsonl)

def load_train_bytes(path):
    """The training split as bytes: every record's UTF-8 text plus '\\n', records with index
    % 5 == 4 held out, blank lines skipped."""
    train = bytearray()
    records = 0
    with open(path, "rb") as f:
        for line in f:
            if len(line) <= 1:
                continue
            text = json.loads(line)["text"].encode("utf-8")
            if records % 5 != 4:
                train += text
                train += b"\n"
            records += 1
    if records < 5:
        raise ValueError("data '%s': needs at least 5 records (has %d)" % (path, records))
    return bytes(train)


def sample_offsets(ntokens, seq, seed, step, micro):
    """Random window starts, one per microbatch, a pure function of (seed, step); every rank
    computes the same ones."""
    r = random.Random((seed * 1000003) ^ (step * 7919))
    return [r.randrange(0, ntokens - seq - 1) for _ in range(micro)]


def make_batches(data, seq, seed, steps, micro, device):
    """[(tokens [M, seq] int64, targets [M, seq] int64)] for each step, on device."""
    import torch

    src = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    out = []
    ar = torch.arange(seq + 1)
    for s in range(steps):
        offs = torch.tensor(sample_offsets(len(data), seq, seed, s, micro))
        win = src[(offs[:, None] + ar[None, :])].to(torch.int64)
        out.append((win[:, :-1].contiguous().to(device), win[:, 1:].contiguous().to(device)))
    return out


# ---------------------------------------------------------------------------------------------
# the model (torch)

E4M3_MAX = 448.0
E5M2_MAX = 57344.0


def _will_run(node):
    """Will the running backward execute this autograd node?  Custom autograd Functions compute
    every gradient whose input requires grad, even in a partial backward (pytorch issue 174017);
    the zero-bubble schedules run backward twice per microbatch (I: input gradients only, W:
    weight gradients only from the retained graph), so without this check an FP8 linear would
    do its dgrad and wgrad GEMMs twice.  torch._C._will_engine_execute_node answers from the
    graph task's exec info; it refuses a leaf captured by autograd.grad (the W pass asking for a
    weight), which means 'needed'.  Unknown: assume needed (correct, maybe slower)."""
    if node is None:
        return True
    import torch

    fn = getattr(torch._C, "_will_engine_execute_node", None)
    if fn is None:
        return True
    try:
        return bool(fn(node))
    except Exception:  # RuntimeError for a captured leaf; anything else: be safe
        return True


def _grad_node(t):
    """The autograd node a gradient for t flows into (its grad_fn, or its AccumulateGrad)."""
    if not t.requires_grad:
        return None
    if t.grad_fn is not None:
        return t.grad_fn
    v = t.view_as(t)
    return v.grad_fn.next_functions[0][0] if v.grad_fn is not None else None


def _quantize(t, dtype, fmax):
    """Per-tensor current scaling: scale = fmax / amax(t); returns (q, 1/scale) with the
    inverse scale as a 0-dim fp32 tensor (what torch._scaled_mm takes); no host sync."""
    import torch

    amax = t.detach().abs().amax().float()
    scale = fmax / torch.clamp(amax, min=1e-12)
    q = (t.float() * scale).clamp(-fmax, fmax).to(dtype)
    return q, scale.reciprocal()


def make_fp8_function():
    import torch

    class FP8Matmul(torch.autograd.Function):
        """y[N, out] = x[N, in] . w[out, in]^T with torch._scaled_mm: x and w in E4M3, the output
        gradient in E5M2 (HYBRID, as qeffect), fp32 accumulation, per-tensor current scaling
        (amax of the tensor itself at every call: no scaling state across calls).
        Forward: bf16 out, fast accumulation (torchao's default); dgrad: dY(e5m2) . W, bf16 out;
        wgrad: dY^T(e5m2) . X, fp32 out, straight into the fp32 parameter's gradient.
        _scaled_mm wants mat1 row-major and mat2 column-major: W^T, X^T and dY^T are
        materialized with .t().contiguous() in backward."""

        @staticmethod
        def forward(ctx, x, w, x_node, w_node):
            with torch.autocast("cuda", enabled=False):  # explicit dtypes here
                xq, xs = _quantize(x, torch.float8_e4m3fn, E4M3_MAX)
                wq, ws = _quantize(w, torch.float8_e4m3fn, E4M3_MAX)
                y = torch._scaled_mm(xq, wq.t(), xs, ws, out_dtype=torch.bfloat16, use_fast_accum=True)
            ctx.save_for_backward(xq, xs, wq, ws)
            ctx.x_dtype = x.dtype
            ctx.nodes = (x_node, w_node)
            return y

        @staticmethod
        def backward(ctx, dy):
            xq, xs, wq, ws = ctx.saved_tensors
            need_dx = ctx.needs_input_grad[0] and _will_run(ctx.nodes[0])
            need_dw = ctx.needs_input_grad[1] and _will_run(ctx.nodes[1])
            dx = dw = None
            if need_dx or need_dw:
                dyq, dys = _quantize(dy.contiguous(), torch.float8_e5m2, E5M2_MAX)
                if need_dx:
                    wt = wq.t().contiguous()  # [in, out] row-major; .t() is [out, in] column-major
                    dx = torch._scaled_mm(dyq, wt.t(), dys, ws, out_dtype=torch.bfloat16, use_fast_accum=False)
                    dx = dx.to(ctx.x_dtype)
                if need_dw:
                    dyt = dyq.t().contiguous()  # [out, N]
                    xt = xq.t().contiguous()  # [in, N]; .t() is [N, in] column-major
                    dw = torch._scaled_mm(dyt, xt.t(), dys, xs, out_dtype=torch.float32, use_fast_accum=False)
            return dx, dw, None, None

    return FP8Matmul


def build_stage_module(cfg, stage, nstages, fp8, device, amp=True):
    """One virtual stage as an nn.Module, parameters fp32 on device, initialized like qeffect.
    amp: the forward runs under torch.autocast(bf16) - inside the module, so that only the
    forward is autocast and each backward runs in the dtypes its forward recorded (the
    schedule runs forward and backward inside one step() call)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    fp8fn = make_fp8_function() if fp8 else None
    H, FF, V, T, NH = cfg["hidden"], cfg["ffn"], cfg["vocab"], cfg["seq"], cfg["heads"]
    resid = 1.0 / math.sqrt(2.0 * cfg["layers"])

    class Linear(nn.Module):
        def __init__(self, fin, fout, bias, std):
            super().__init__()
            self.weight = nn.Parameter(torch.empty(fout, fin))
            self.bias = nn.Parameter(torch.zeros(fout)) if bias else None
            with torch.no_grad():
                self.weight.normal_(0.0, std)

        def forward(self, x):
            if fp8fn is None:
                return F.linear(x, self.weight, self.bias)  # bf16 under autocast
            shp = x.shape
            x2 = x.reshape(-1, shp[-1])
            y = fp8fn.apply(x2, self.weight, _grad_node(x2), _grad_node(self.weight))
            if self.bias is not None:
                y = y + self.bias.to(y.dtype)
            return y.reshape(*shp[:-1], y.shape[-1])

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(H, eps=LN_EPS)
            self.qkv = Linear(H, 3 * H, True, 0.02)
            self.proj = Linear(H, H, True, 0.02 * resid)
            self.ln2 = nn.LayerNorm(H, eps=LN_EPS)
            self.fc1 = Linear(H, FF, True, 0.02)
            self.fc2 = Linear(FF, H, True, 0.02 * resid)

        def forward(self, x):
            B, Tn, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(H, dim=-1)
            q = q.reshape(B, Tn, NH, H // NH).transpose(1, 2)
            k = k.reshape(B, Tn, NH, H // NH).transpose(1, 2)
            v = v.reshape(B, Tn, NH, H // NH).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            a = a.transpose(1, 2).reshape(B, Tn, H)
            x = x + self.proj(a)  # fp32 residual stream (x is fp32, the linear's output bf16)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class Stage(nn.Module):
        def __init__(self):
            super().__init__()
            self.first = stage == 0
            self.last = stage == nstages - 1
            if self.first:
                self.wte = nn.Embedding(V, H)
                self.wpe = nn.Embedding(T, H)
                with torch.no_grad():
                    self.wte.weight.normal_(0.0, 0.02)
                    self.wpe.weight.normal_(0.0, 0.01)
            self.block = Block()
            if self.last:
                self.lnf = nn.LayerNorm(H, eps=LN_EPS)
                self.head = Linear(H, V, False, 0.02)

        def forward(self, x):
            with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=amp):
                if self.first:
                    pos = torch.arange(x.shape[1], device=x.device)
                    x = self.wte(x) + self.wpe(pos)[None]
                x = self.block(x.float())
                if self.last:
                    # fp32 logits: the same dtype whether or not autocast or FP8 ran the head, so
                    # the stage's shape inference and its outputs agree
                    return self.head(self.lnf(x)).float()
                return x.float()

    with torch.device(device):
        m = Stage()
    return m


def param_groups(modules):
    """AdamW groups as qeffect's decay flags: matrices and embeddings decay; layernorm
    weights/shifts and biases do not."""
    decay, no_decay = [], []
    for m in modules:
        for n, p in m.named_parameters():
            (decay if p.dim() == 2 else no_decay).append(p)
    return [dict(params=decay, weight_decay=ADAMW["weight_decay"]), dict(params=no_decay, weight_decay=0.0)]


def loss_fn(logits, target):
    import torch.nn.functional as F

    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1))
