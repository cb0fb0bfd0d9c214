"""dcp_ckpt.py - PyTorch distributed checkpointing (DCP) of qeffect's checkpoint; torchrun, 2 ranks.

    python3 -m torch.distributed.run --standalone --nproc_per_node 2 bench/peers/dcp_ckpt.py \\
        --preset h4096 --dir /tmp/dcp-bench --out RESULT.json

The state is what qeffect checkpoints for --pp 2 under the zbv placement (rank 0: stages 0
and 3, rank 1: stages 1 and 2), built on each rank's GPU from the preset
(peer_model.stage_param_table, as runtime/model/stage.c): per parameter tensor the fp32
parameter, AdamW exp_avg and exp_avg_sq and a step (as a user's model + optimizer state dict
holds them), plus each stage's FP8 meta (nlinear x 3 roles x (1024 + 2) floats).  Every tensor
is random (never all zero).  --layout flat instead keeps qeffect's layout: one flat params,
adam_m, adam_v tensor per stage.

Variants (each repeated --reps times, a fresh checkpoint directory each time, all on --dir):
  save          dcp.save(sd, checkpoint_id=DIR): the default FileSystemWriter (one file per
                rank, 1 writer thread, fsync).  Training stall = the whole call.
  load          dcp.load(sd, checkpoint_id=DIR) of the last save into the GPU tensors, checked
                against a checksum taken before the save (the tensors are perturbed first).
                --cold 1 (default): the checkpoint's files are dropped from the page cache with
                posix_fadvise(DONTNEED) first (no root needed), so the read comes from disk.
  async         dcp.async_save(sd, checkpoint_id=DIR) with defaults: stall = until it returns
                (GPU -> CPU staging plus planning), then the background write is waited for.
  async_pinned  async_save with FileSystemWriter(cache_staged_state_dict=True): pinned staging
                buffers kept across saves (the first rep allocates them; later reps are the
                steady state).
  async_stager  async_save(async_stager=DefaultStager(StagingOptions(pinned, async staging,
                non-blocking copies))) (torch >= 2.9): stall = until it returns; staging_ms =
                until staging_completion.
  save_t8       dcp.save with FileSystemWriter(thread_count=8).
GB/s = total bytes of all ranks' tensors / the slowest rank's time of the call.  Every
variant runs in try/except: an error is reported in the JSON and the next variant runs.
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import time
import traceback

import peer_model as pm


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="h4096")
    ap.add_argument("--schedule", choices=["zbv", "interleaved"], default="zbv", help="stage placement")
    ap.add_argument("--layout", choices=["params", "flat"], default="params")
    ap.add_argument("--dir", required=True, help="checkpoint directory (created; emptied at the end)")
    ap.add_argument("--variants", default="save,load,async,async_pinned,async_stager,save_t8")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--cold", type=int, default=1)
    ap.add_argument("--budget-s", type=float, default=0, help="start no rep past this many seconds (0: none)")
    ap.add_argument("--keep", action="store_true", help="keep the checkpoint directories")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="where the state lives: cuda (one GPU per rank, NCCL) or cpu (host tensors, gloo; "
                         "any number of ranks on one machine, beside qeffect's cpu backend)")
    ap.add_argument("--layers", type=int, default=0, help="override the preset's layer count (as qeffect --layers)")
    ap.add_argument("--seq", type=int, default=0, help="override the preset's sequence length (as qeffect --seq)")
    return ap.parse_args()


def write(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def drop_cache(path):
    """posix_fadvise(DONTNEED) every file under path: clean pages leave the page cache."""
    n = 0
    for root, _, files in os.walk(path):
        for fn in files:
            p = os.path.join(root, fn)
            try:
                fd = os.open(p, os.O_RDONLY)
                try:
                    os.fsync(fd)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    n += 1
                finally:
                    os.close(fd)
            except OSError:
                pass
    return n


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


def build_state(cfg, stages, nstages, layout, dev):
    import torch

    g = torch.Generator(device=dev)
    g.manual_seed(1234 + stages[0])
    sd = {}
    for s in stages:
        tab = pm.stage_param_table(cfg, s, nstages)
        if layout == "flat":
            n = sum(pm.numel(shape) for _, shape, _ in tab)
            sd["stage%d.params" % s] = torch.randn(n, device=dev, generator=g) * 0.02
            sd["stage%d.adam_m" % s] = torch.randn(n, device=dev, generator=g) * 1e-3
            sd["stage%d.adam_v" % s] = torch.rand(n, device=dev, generator=g) * 1e-6
        else:
            for name, shape, _ in tab:
                k = "stage%d.%s" % (s, name)
                sd["model." + k] = torch.randn(shape, device=dev, generator=g) * 0.02
                sd["optim.%s.exp_avg" % k] = torch.randn(shape, device=dev, generator=g) * 1e-3
                sd["optim.%s.exp_avg_sq" % k] = torch.rand(shape, device=dev, generator=g) * 1e-6
                sd["optim.%s.step" % k] = torch.full((), 10.0, device=dev)
        nl = pm.stage_nlinear(s, nstages)
        sd["fp8.stage%d.meta" % s] = torch.rand(nl, 3, pm.AMAX_HISTORY + 2, device=dev, generator=g)
    return sd


def checksum(sd):
    import torch

    acc = torch.zeros((), dtype=torch.float64, device=next(iter(sd.values())).device)
    for v in sd.values():
        acc += v.double().sum()
    return acc


def run(a, doc):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    if a.device == "cpu":
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        dev = torch.device("cpu")
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    else:
        rank, world, local, dev = pm.torchrun_rank()
        # async_save needs a CPU backend in the group; NCCL for the GPU tensors
        dist.init_process_group("cpu:gloo,cuda:nccl", timeout=datetime.timedelta(seconds=300))

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    doc["torch"] = torch.__version__
    doc["device"] = a.device
    cfg = pm.preset(a.preset)
    if a.layers:
        cfg["layers"] = a.layers
    if a.seq:
        cfg["seq"] = a.seq
    nstages = 2 * world
    mine = pm.stages_of_rank(a.schedule, rank, world, nstages)
    sd = build_state(cfg, mine, nstages, a.layout, dev)
    sync()
    nb = torch.tensor([float(sum(v.numel() * v.element_size() for v in sd.values())), float(len(sd))], device=dev,
                      dtype=torch.float64)
    dist.all_reduce(nb)
    total = nb[0].item()
    doc.update(bytes_total=total, tensors_total=int(nb[1].item()), stages_of_rank0=mine if rank == 0 else None,
               expected_qeffect_bytes=pm.checkpoint_bytes(cfg, range(nstages), nstages))
    t0 = time.perf_counter()

    def tmax(sec):
        t = torch.tensor([sec], device=dev, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    def fresh(name):
        p = os.path.join(a.dir, name)
        if rank == 0 and os.path.exists(p):
            shutil.rmtree(p)
        dist.barrier()
        return p

    def begin():
        sync()
        dist.barrier()
        return time.perf_counter()

    last_save = [None]
    ref = checksum(sd)
    res = doc["variants"]
    writers = {}
    stagers = {}

    def v_save(rep, threads=None):
        p = fresh("save%s-%d" % ("_t%d" % threads if threads else "", rep))
        kw = dict(checkpoint_id=p)
        if threads:
            kw["storage_writer"] = dcp.FileSystemWriter(p, thread_count=threads)
        t = begin()
        dcp.save(sd, **kw)
        dt = tmax(time.perf_counter() - t)
        if last_save[0] and last_save[0] != p and rank == 0 and not a.keep:
            shutil.rmtree(last_save[0], ignore_errors=True)
        last_save[0] = p
        dist.barrier()
        return dict(ms=dt * 1e3, stall_ms=dt * 1e3, gbps=total / dt / 1e9, disk_bytes=dir_bytes(p) if rank == 0 else None)

    def v_load(rep):
        if not last_save[0]:
            raise RuntimeError("no save to load (run 'save' first)")
        for v in sd.values():
            v.mul_(0.5)  # the load must overwrite: the checksum tells
        dropped = drop_cache(last_save[0]) if a.cold else 0
        t = begin()
        dcp.load(sd, checkpoint_id=last_save[0])
        sync()
        dt = tmax(time.perf_counter() - t)
        ok = bool(torch.isclose(checksum(sd), ref, rtol=1e-9, atol=0.0).item())
        okt = torch.tensor([1.0 if ok else 0.0], device=dev)
        dist.all_reduce(okt, op=dist.ReduceOp.MIN)
        return dict(ms=dt * 1e3, gbps=total / dt / 1e9, cold=bool(a.cold), files_dropped=dropped,
                    checksum_ok=bool(okt.item() == 1.0))

    def v_async(rep, kind):
        p = fresh("%s-%d" % (kind, rep))
        kw = dict(checkpoint_id=p)
        if kind == "async_pinned":
            if "w" not in writers:
                writers["w"] = dcp.FileSystemWriter(p, cache_staged_state_dict=True)
            kw["storage_writer"] = writers["w"]
        elif kind == "async_stager":
            from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

            if "s" not in stagers:
                stagers["s"] = DefaultStager(StagingOptions(use_async_staging=True, use_pinned_memory=True,
                                                            use_shared_memory=False, use_non_blocking_copy=True))
            kw["async_stager"] = stagers["s"]
        t = begin()
        fut = dcp.async_save(sd, **kw)
        t_ret = time.perf_counter() - t
        staging = None
        if hasattr(fut, "upload_completion"):  # AsyncSaveResponse (async staging)
            fut.staging_completion.result()
            staging = time.perf_counter() - t
            fut.upload_completion.result()
        else:
            fut.result()
        t_done = time.perf_counter() - t
        stall, done = tmax(t_ret), tmax(t_done)
        staging = tmax(staging) if staging is not None else None
        if rank == 0 and not a.keep:
            shutil.rmtree(p, ignore_errors=True)
        dist.barrier()
        return dict(stall_ms=stall * 1e3, done_ms=done * 1e3, gbps=total / done / 1e9,
                    staging_ms=staging * 1e3 if staging is not None else None)

    table = {"save": lambda r: v_save(r), "save_t8": lambda r: v_save(r, 8), "load": v_load,
             "async": lambda r: v_async(r, "async"), "async_pinned": lambda r: v_async(r, "async_pinned"),
             "async_stager": lambda r: v_async(r, "async_stager")}
    for name in [v for v in a.variants.split(",") if v]:
        entry = res.setdefault(name, dict(reps=[], errors=[], skipped=None))
        if name not in table:
            entry["errors"].append("unknown variant")
            continue
        for rep in range(a.reps):
            if a.budget_s > 0 and time.perf_counter() - t0 > a.budget_s:
                entry["skipped"] = "budget %.0f s reached before rep %d" % (a.budget_s, rep + 1)
                break
            try:
                r = table[name](rep)
                r["rep"] = rep + 1
                entry["reps"].append(r)
                if rank == 0:
                    print("dcp %-13s rep %d: %s" % (name, rep + 1, json.dumps(r)), flush=True)
            except Exception as e:
                entry["errors"].append("rep %d rank %d: %s: %s" % (rep + 1, rank, type(e).__name__, str(e)[-1500:]))
                entry.setdefault("traceback", traceback.format_exc()[-4000:])
                sys.stderr.write(traceback.format_exc())
                try:
                    dist.barrier()
                except Exception:
                    pass
                break
            if rank == 0:
                write(a.out, doc)
    for name, e in res.items():
        reps = e["reps"]
        for key in ("gbps", "stall_ms", "ms", "done_ms", "staging_ms"):
            vals = [r[key] for r in reps if r.get(key) is not None]
            if key == "stall_ms" and name in ("async_pinned", "async_stager") and len(vals) > 1:
                vals = vals[1:]  # the first rep allocates the pinned buffers; later ones are the steady state
            if vals:
                e[key + "_median"] = statistics.median(vals)
        e["n"] = len(reps)
    doc["ok"] = True
    doc["wall_s"] = time.perf_counter() - t0
    if rank == 0 and not a.keep and last_save[0]:
        shutil.rmtree(last_save[0], ignore_errors=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    a = parse()
    rank = int(os.environ.get("RANK", "0"))
    os.makedirs(a.dir, exist_ok=True)
    doc = dict(system="pytorch-dcp", preset=a.preset, placement=a.schedule, layout=a.layout, reps=a.reps,
               cold=bool(a.cold), dir=a.dir, ok=False, error=None, variants={},
               definition="GB/s = bytes of all ranks' tensors / slowest rank's wall time of the call; "
                          "stall = time the training loop is blocked in the call")
    try:
        run(a, doc)
    except BaseException as e:
        doc["error"] = "rank %d: %s: %s" % (rank, type(e).__name__, str(e)[-2000:])
        doc["traceback"] = traceback.format_exc()[-6000:]
        sys.stderr.write(doc["traceback"])
        write(a.out + ".rank%d" % rank, doc)
        os._exit(1)
    if rank == 0:
        write(a.out, doc)


if __name__ == "__main__":
    main()
