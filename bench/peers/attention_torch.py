"""attention_torch.py - PyTorch's scaled_dot_product_attention as the peer of `qeffect bench attention`
(issue 34): the same shapes, causal, bf16, forward and backward timed apart.

    python3 bench/peers/attention_torch.py [--shapes 16:12:1024:64,...] [--min-ms 300] [--backend default|flash]

Per shape B:NH:T:D, q, k, v are bf16 [B, NH, T, D] normal(0, 1) tensors that require grad, and dout
is one more; the forward is F.scaled_dot_product_attention(q, k, v, is_causal=True) (PyTorch picks
its backend unless --backend flash allows only flash), the backward torch.autograd.grad of the output
against (q, k, v) with dout, on an output kept from one forward.  Each pass runs twice to warm up,
then is repeated until --min-ms have passed; its time is the mean over the repetitions between two
CUDA events.  FLOPs are counted causal as `qeffect bench attention` counts them: forward
2 B NH T^2 D, backward 2.5 times that.  One JSON object a shape on stdout, with "impl": "sdpa".
The layout [B, NH, T, D] is what SDPA wants; qeffect's pass starts from [B*T, 3H] and copies into
its own head-major layout inside the timed op, which this peer does not pay for.
"""
import argparse
import json
import sys

SHAPES = "16:12:1024:64,8:25:1024:64,4:16:4096:64,2:16:4096:128"


def timed(torch, fn, min_ms):
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    reps = 1
    while True:
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(reps):
            fn()
        e1.record()
        e1.synchronize()
        ms = e0.elapsed_time(e1)
        if ms >= min_ms or reps >= (1 << 20):
            return ms / reps, reps
        reps = int(reps * 1.2 * min_ms / ms) + 1 if ms > 0 else reps * 16


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", default=SHAPES, help="B:NH:T:D items (default: %s)" % SHAPES)
    p.add_argument("--min-ms", type=float, default=300.0)
    p.add_argument("--backend", choices=("default", "flash"), default="default",
                   help="SDPA's own choice of kernel (default), or flash attention only")
    a = p.parse_args(argv)
    import torch
    import torch.nn.functional as F
    if not torch.cuda.is_available():
        print("attention_torch.py: no CUDA device", file=sys.stderr)
        return 2
    gpu = torch.cuda.get_device_name(0)
    for item in a.shapes.split(","):
        B, NH, T, D = (int(x) for x in item.split(":"))
        fl = 2.0 * B * NH * T * T * D
        doc = dict(bench="attention", impl="sdpa", backend=a.backend, torch=torch.__version__, gpu=gpu, shape=item,
                   batch=B, heads=NH, seq=T, head_dim=D, fwd_flop=fl)
        try:
            g = torch.Generator(device="cuda").manual_seed(34)
            q, k, v, do = (torch.randn(B, NH, T, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
            for t in (q, k, v):
                t.requires_grad_(True)
            ctx = torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.FLASH_ATTENTION]) \
                if a.backend == "flash" else torch.enable_grad()
            with ctx:
                fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
                fms, freps = timed(torch, fwd, a.min_ms)
                out = fwd()
                bwd = lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
                bms, breps = timed(torch, bwd, a.min_ms)
            doc.update(fwd_ms=fms, bwd_ms=bms, fwd_reps=freps, bwd_reps=breps,
                       fwd_tflops=fl / (fms / 1e3) / 1e12, bwd_tflops=2.5 * fl / (bms / 1e3) / 1e12)
        except Exception as e:  # a shape SDPA refuses, or out of memory: said, and the others still run
            doc.update(error="%s: %s" % (type(e).__name__, e))
        print(json.dumps(doc), flush=True)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
