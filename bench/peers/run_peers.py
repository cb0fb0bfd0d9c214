"""run_peers.py - drive the PyTorch peers: every trial a fresh torchrun job, under a budget.

    python3 bench/peers/run_peers.py step --preset h4096 --micro 8 --data gpu-data/brown.jsonl \\
        --configs zbv:bf16,interleaved:bf16,zbv:fp8,interleaved:fp8 --trials 2 --out DIR \\
        [--steps 12 --warmup 3 --budget-s 150 --timeout-s 120]
    python3 bench/peers/run_peers.py ckpt --preset h4096 --dir /tmp/dcp --out DIR [--timeout-s 120 ...]

step: runs trial 1 of every configuration (in the given order), then trial 2, ...; each run is
`python3 -m torch.distributed.run --standalone --nproc_per_node 2 pp_step.py ...` in its own
session, killed with its process group at --timeout-s.  A run that would end past --budget-s
(estimated from the longest run so far) is not started; the report says so.  DIR/peers-step.json
is rewritten after every run: per configuration the trials' step times (pp_step.py's median of
the slowest rank), their median, and every failure's message.
ckpt: one dcp_ckpt.py job; DIR/peers-ckpt.json.
Logs of every job: DIR/logs/.  Exit status 0 (failures are in the reports).
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def write(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def launch(script, args, log, timeout_s, nproc=2):
    """Run a torchrun job in its own session; returns (exit code or None when killed, seconds)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
           os.path.join(HERE, script)] + args
    env = dict(os.environ)
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    env.setdefault("OMP_NUM_THREADS", "4")
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
                    continue
    return rc, time.time() - t0


def read_result(path):
    """Rank 0's report, else a failing rank's report, else None."""
    for p in [path, path + ".rank0", path + ".rank1"]:
        if os.path.exists(p):
            try:
                with open(p) as f:
                    return json.load(f)
            except (OSError, ValueError):
                continue
    return None


def tail(path, n=6):
    try:
        with open(path, errors="replace") as f:
            lines = [l.rstrip() for l in f if l.strip()]
        return " | ".join(lines[-n:])[-1500:]
    except OSError:
        return ""


def cmd_step(a):
    os.makedirs(os.path.join(a.out, "logs"), exist_ok=True)
    configs = []
    for c in a.configs.split(","):
        sch, _, prec = c.partition(":")
        configs.append((sch, prec or "bf16"))
    doc = dict(bench="peers-step", preset=a.preset, micro=a.micro, trials=a.trials, steps=a.steps,
               warmup=a.warmup, budget_s=a.budget_s, truncated=None, runs=[], configs={})
    jpath = os.path.join(a.out, "peers-step.json")
    t0 = time.time()
    longest = 0.0
    for t in range(1, a.trials + 1):
        for sch, prec in configs:
            name = "%s_%s" % (sch, prec)
            est = longest or a.first_estimate_s
            if a.budget_s > 0 and time.time() - t0 + est > a.budget_s:
                doc["truncated"] = "budget %.0f s: stopped before %s trial %d (%.0f s spent, a run takes ~%.0f s)" % (
                    a.budget_s, name, t, time.time() - t0, est)
                break
            res = os.path.join(a.out, "logs", "%s-%s-%d.json" % (a.preset, name, t))
            log = os.path.join(a.out, "logs", "%s-%s-%d.log" % (a.preset, name, t))
            limit = a.timeout_s
            if a.budget_s > 0:
                limit = max(10.0, min(limit, a.budget_s - (time.time() - t0)))
            rc, secs = launch("pp_step.py", ["--preset", a.preset, "--micro", str(a.micro), "--schedule", sch,
                                             "--precision", prec, "--data", a.data, "--steps", str(a.steps),
                                             "--warmup", str(a.warmup), "--out", res], log, limit)
            longest = max(longest, secs)
            r = read_result(res) or {}
            ok = rc == 0 and r.get("ok")
            run = dict(config=name, schedule=sch, precision=prec, trial=t, exit=rc, wall_s=secs, ok=bool(ok),
                       step_ms=r.get("step_ms") if ok else None)
            if not ok:
                run["error"] = r.get("error") or ("killed at %.0f s" % limit if rc is None else "exit %s" % rc)
                run["log_tail"] = tail(log)
            else:
                run.update(losses=r.get("losses"), setup_s=r.get("setup_s"), torch=r.get("torch"),
                           peak_alloc_bytes=r.get("peak_alloc_bytes_max_rank"), fp8_split_aware=r.get("fp8_split_aware"),
                           slowest_rank_step_ms=r.get("slowest_rank_step_ms"))
            doc["runs"].append(run)
            c = doc["configs"].setdefault(name, dict(schedule=sch, precision=prec, step_ms_trials=[], errors=[]))
            if ok:
                c["step_ms_trials"].append(r["step_ms"])
            else:
                c["errors"].append("trial %d: %s" % (t, run["error"]))
            c["trials"] = len(c["step_ms_trials"])
            c["step_ms"] = statistics.median(c["step_ms_trials"]) if c["step_ms_trials"] else None
            print("peer %-18s trial %d: %s (%.0f s)" % (name, t, "%.2f ms/step" % r["step_ms"] if ok else
                                                        "FAILED: " + str(run["error"])[:300], secs), flush=True)
            doc["wall_s"] = time.time() - t0
            write(jpath, doc)
        if doc["truncated"]:
            break
    doc["wall_s"] = time.time() - t0
    write(jpath, doc)
    if doc["truncated"]:
        print("peers: cut short: " + doc["truncated"], flush=True)


def cmd_ckpt(a):
    os.makedirs(os.path.join(a.out, "logs"), exist_ok=True)
    res = os.path.join(a.out, "logs", "dcp-%s.json" % a.preset)
    log = os.path.join(a.out, "logs", "dcp-%s.log" % a.preset)
    args = ["--preset", a.preset, "--dir", a.dir, "--out", res, "--reps", str(a.reps), "--variants", a.variants,
            "--cold", str(a.cold), "--budget-s", str(a.budget_s), "--device", a.device, "--schedule", a.schedule,
            "--layers", str(a.layers), "--seq", str(a.seq)]
    rc, secs = launch("dcp_ckpt.py", args, log, a.timeout_s, nproc=a.nproc)
    r = read_result(res) or dict(ok=False, variants={})
    r["exit"] = rc
    r["job_wall_s"] = secs
    if rc != 0 or not r.get("ok"):
        r.setdefault("error", None)
        r["error"] = r["error"] or ("killed at %.0f s" % a.timeout_s if rc is None else "exit %s" % rc)
        r["log_tail"] = tail(log)
    write(os.path.join(a.out, "peers-ckpt.json"), r)
    with open(log, errors="replace") as f:
        for line in f:
            if line.startswith("dcp "):
                print(line.rstrip(), flush=True)
    if r.get("error"):
        print("dcp: " + str(r["error"])[:500], flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("step")
    s.add_argument("--preset", default="h4096")
    s.add_argument("--micro", type=int, default=8)
    s.add_argument("--configs", default="zbv:bf16,interleaved:bf16,zbv:fp8,interleaved:fp8")
    s.add_argument("--trials", type=int, default=2)
    s.add_argument("--steps", type=int, default=12)
    s.add_argument("--warmup", type=int, default=3)
    s.add_argument("--data", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--budget-s", type=float, default=0)
    s.add_argument("--timeout-s", type=float, default=150)
    s.add_argument("--first-estimate-s", type=float, default=40)
    c = sub.add_parser("ckpt")
    c.add_argument("--preset", default="h4096")
    c.add_argument("--dir", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--reps", type=int, default=2)
    c.add_argument("--variants", default="save,load,async,async_pinned,async_stager,save_t8")
    c.add_argument("--cold", type=int, default=1)
    c.add_argument("--budget-s", type=float, default=0)
    c.add_argument("--timeout-s", type=float, default=120)
    c.add_argument("--nproc", type=int, default=2, help="ranks (one per GPU; 1 on a one-GPU machine; any with --device cpu)")
    c.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="state on the GPUs or in host memory (gloo)")
    c.add_argument("--schedule", choices=["zbv", "interleaved"], default="zbv", help="stage placement of the state")
    c.add_argument("--layers", type=int, default=0, help="override the preset's layer count")
    c.add_argument("--seq", type=int, default=0, help="override the preset's sequence length")
    a = ap.parse_args()
    (cmd_step if a.cmd == "step" else cmd_ckpt)(a)


if __name__ == "__main__":
    main()
