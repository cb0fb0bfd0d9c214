"""pp_step.py - one PyTorch pipelining configuration, timed; run under torchrun, 2 ranks.

    python3 -m torch.distributed.run --standalone --nproc_per_node 2 bench/peers/pp_step.py \\
        --preset h4096 --micro 8 --schedule zbv --precision bf16 --data gpu-data/brown.jsonl \\
        --steps 12 --warmup 3 --out RESULT.json

What a user of torch.distributed.pipelining would write for qeffect's model (peer_model.py):
PP=2 ranks, two virtual stages per rank (4 stages, one GPT block each), M microbatches of one
256-token sequence, one PipelineStage per virtual stage with runtime shape inference, and
  --schedule interleaved  ScheduleInterleaved1F1B, loop placement (rank r: stages r, r+2)
  --schedule zbv          ScheduleZBVZeroBubble, V placement (rank 0: stages 0 and 3, rank 1: 1, 2)
  --schedule izb          ScheduleInterleavedZeroBubble, loop placement
  --precision bf16   fp32 parameters, torch.autocast(bf16) inside each stage's forward (not
                     around schedule.step, which also runs the backward)
  --precision fp8    the same, with every linear (the four block linears and the head) through
                     torch._scaled_mm (peer_model.FP8Matmul: per-tensor current scaling, E4M3
                     forward, E5M2 gradients)
An optimizer step is torch.optim.AdamW(fused=True) over the rank's two stages (qeffect's
betas, eps, weight decay groups).  Every step ends, as qeffect's, with an all-reduce of the loss.

Timing: per step, torch.cuda.synchronize() then perf_counter around schedule.step + optimizer
step + zero_grad + the loss all-reduce + synchronize; after the run the per-step times are
all-reduced with MAX (the slowest rank's step); the result is the median over steps
warmup+1..N.  Rank 0 writes the JSON (also when the run failed: "error" says why, and the
process exits non-zero so torchrun stops the other rank).
"""
import argparse
import datetime
import inspect
import json
import os
import statistics
import sys
import time
import traceback

import peer_model as pm


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="h4096")
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--schedule", choices=["interleaved", "zbv", "izb"], default="zbv")
    ap.add_argument("--precision", choices=["bf16", "fp8"], default="bf16")
    ap.add_argument("--data", required=True)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    ap.add_argument("--nccl-timeout-s", type=float, default=120)
    return ap.parse_args()


SCHEDULE_CLASS = {"interleaved": "ScheduleInterleaved1F1B", "zbv": "ScheduleZBVZeroBubble",
                  "izb": "ScheduleInterleavedZeroBubble"}


def write(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def run(a, doc):
    import torch
    import torch.distributed as dist
    from torch.distributed import pipelining as ppl

    rank, world, local, dev = pm.torchrun_rank()
    t_start = time.perf_counter()
    dist.init_process_group("nccl", device_id=dev, timeout=datetime.timedelta(seconds=a.nccl_timeout_s))
    doc["torch"] = torch.__version__
    try:
        v = torch.cuda.nccl.version()
        doc["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        doc["nccl"] = None
    doc["device"] = torch.cuda.get_device_name(dev)
    cfg = pm.preset(a.preset)
    nstages = 2 * world
    mine = pm.stages_of_rank(a.schedule, rank, world, nstages)
    doc["stages_of_rank"] = {str(rank): mine}

    data = pm.load_train_bytes(a.data)
    batches = pm.make_batches(data, cfg["seq"], a.seed, a.steps, a.micro, dev)

    mods = [pm.build_stage_module(cfg, s, nstages, a.precision == "fp8", dev) for s in mine]
    stages = [ppl.PipelineStage(m, s, nstages, dev) for m, s in zip(mods, mine)]
    sched_cls = getattr(ppl, SCHEDULE_CLASS[a.schedule])
    sched = sched_cls(stages, a.micro, loss_fn=pm.loss_fn)
    opt = torch.optim.AdamW(pm.param_groups(mods), lr=pm.ADAMW["lr"], betas=pm.ADAMW["betas"],
                            eps=pm.ADAMW["eps"], fused=True)
    nparams = sum(p.numel() for m in mods for p in m.parameters())
    has_first = 0 in mine
    has_last = (nstages - 1) in mine
    step_kw = {}
    if "return_outputs" in inspect.signature(sched.step).parameters:
        step_kw["return_outputs"] = False  # the logits are not needed back
    torch.cuda.synchronize()
    setup_s = time.perf_counter() - t_start

    times, losses_seen = [], []
    for i in range(a.steps):
        x, y = batches[i]
        args = (x,) if has_first else ()
        kw = dict(step_kw)
        losses = []
        if has_last:
            kw["target"] = y
            kw["losses"] = losses
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        sched.step(*args, **kw)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss = torch.stack([l.detach().float() for l in losses]).mean() if losses else torch.zeros((), device=dev)
        dist.all_reduce(loss)  # one rank holds the loss: the sum is it
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        losses_seen.append(float(loss))

    t = torch.tensor(times, dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    slowest = t.tolist()
    mem = torch.tensor([torch.cuda.max_memory_allocated(dev)], dtype=torch.float64, device=dev)
    dist.all_reduce(mem, op=dist.ReduceOp.MAX)
    tail = slowest[a.warmup:] or slowest
    doc.update(ok=True, step_ms=statistics.median(tail), step_ms_mean=statistics.mean(tail),
               step_ms_min=min(tail), step_ms_max=max(tail), slowest_rank_step_ms=slowest,
               rank0_step_ms=times if rank == 0 else None, losses=losses_seen, setup_s=setup_s,
               params_on_rank0=nparams if rank == 0 else None, peak_alloc_bytes_max_rank=float(mem.item()),
               schedule_class=SCHEDULE_CLASS[a.schedule], return_outputs_flag=bool(step_kw),
               fp8_split_aware=hasattr(torch._C, "_will_engine_execute_node") if a.precision == "fp8" else None)
    dist.barrier()
    dist.destroy_process_group()


def main():
    a = parse()
    rank = int(os.environ.get("RANK", "0"))
    doc = dict(system="pytorch", preset=a.preset, micro=a.micro, schedule=a.schedule, precision=a.precision,
               steps=a.steps, warmup=a.warmup, ok=False, error=None,
               optimizer="torch.optim.AdamW(fused=True), fp32 params",
               autocast="torch.autocast(cuda, bf16) inside each stage's forward",
               fp8="torch._scaled_mm, per-tensor current scaling, E4M3 fwd / E5M2 grad" if a.precision == "fp8" else None,
               definition="median over steps warmup+1..N of the per-step max over ranks of (sync; schedule.step; "
                          "AdamW step; zero_grad; loss all-reduce; sync)")
    try:
        run(a, doc)
    except BaseException as e:  # report, then fail so that torchrun tears the other rank down
        doc["ok"] = False
        doc["error"] = "rank %d: %s: %s" % (rank, type(e).__name__, str(e)[-2000:])
        doc["traceback"] = traceback.format_exc()[-6000:]
        sys.stderr.write(doc["traceback"])
        write(a.out + ".rank%d" % rank, doc)
        sys.stderr.flush()
        os._exit(1)
    if rank == 0:
        write(a.out, doc)


if __name__ == "__main__":
    main()
