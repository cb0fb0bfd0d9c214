#!/usr/bin/env python3
"""Sum an ncu --csv log per kernel over the last training step.

usage: ncu_sum.py NCU_CSV
The log has one row per (kernel, metric) with gpu__time_duration.sum and, when asked for,
dram__bytes_read.sum / dram__bytes_write.sum.  The last step is every kernel after the
first run of adamw_kernel launches (the end of step 1).  Prints per kernel: total us, share,
launches, us each, achieved DRAM GB/s, then the total.
"""
import csv, sys, collections

UNIT = {"ns": 1e-3, "nsecond": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
        "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}

def rows(path):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    return csv.DictReader(lines)

def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    kern = collections.OrderedDict()
    for r in rows(sys.argv[1]):
        k = kern.setdefault(r["ID"], {"name": r["Kernel Name"], "grid": r.get("Grid Size", ""),
                                      "us": 0.0, "bytes": 0.0})
        v = float(r["Metric Value"].replace(",", "") or 0) * UNIT.get(r["Metric Unit"], 1.0)
        if r["Metric Name"] == "gpu__time_duration.sum":
            k["us"] = v
        elif r["Metric Name"].startswith("dram__bytes"):
            k["bytes"] += v
    ks = list(kern.values())
    if not ks:
        sys.exit("no kernels in " + sys.argv[1])
    # "adamw_kernel", "adamw_many_kernel", "void adamw_many_kernel<1>" (a template shows its return type)
    is_adamw = lambda k: k["name"].split("(")[0].replace("void ", "").startswith("adamw")
    first = next((i for i, k in enumerate(ks) if is_adamw(k)), None)
    start = 0
    if first is not None:
        start = first
        while start < len(ks) and is_adamw(ks[start]):
            start += 1
    last = ks[start:]
    tot = sum(k["us"] for k in last)
    agg = collections.defaultdict(lambda: [0.0, 0, 0.0, ""])
    for k in last:
        name = k["name"].split("(")[0][:70]
        a = agg[name]
        a[0] += k["us"]; a[1] += 1; a[2] += k["bytes"]; a[3] = k["grid"]
    print("last step: %d kernels (of %d), %.1f us kernel time" % (len(last), len(ks), tot))
    print("%10s %6s %5s %9s %8s  %s" % ("us", "share", "n", "us each", "GB/s", "kernel"))
    for name, (us, n, b, grid) in sorted(agg.items(), key=lambda kv: -kv[1][0]):
        gbs = b / (us * 1e3) if us > 0 else 0.0
        print("%10.1f %5.1f%% %5d %9.2f %8.0f  %s %s" % (us, 100 * us / tot, n, us / n, gbs, name, grid))

main()
