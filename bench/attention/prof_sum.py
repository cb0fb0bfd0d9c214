#!/usr/bin/env python3
"""Short summary of ncu raw-page CSVs (ncu -i REP --page raw --csv), one line per kernel:
duration, SM and tensor-pipe activity, L2 hit rate, DRAM bytes, and the top warp stall reasons
(average warps stalled per issued instruction).  Used by bench/attention/profile.sh.
  python3 prof_sum.py RAW.csv..."""
import csv
import sys


def rows(path):
    with open(path, newline="") as f:
        r = [x for x in csv.reader(f) if x]
    head = next((i for i, x in enumerate(r) if "Kernel Name" in x), None)
    if head is None:
        return []
    names, units = r[head], r[head + 1]
    return [(names, units, x) for x in r[head + 2:]]


def num(s):
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return None


def pick(d, *subs):
    """The first metric whose name holds every one of subs."""
    for k, v in d.items():
        if all(s in k for s in subs):
            return k, v
    return None, None


def main(paths):
    for p in paths:
        try:
            got = rows(p)
        except OSError as e:
            print("%s: %s" % (p, e))
            continue
        if not got:
            print("%s: no kernel rows" % p)
            continue
        for names, units, x in got:
            d = {n: num(v) for n, v in zip(names, x)}
            u = dict(zip(names, units))
            kname = x[names.index("Kernel Name")][:40]
            out = [kname]
            k, v = pick(d, "gpu__time_duration.sum")
            if v is not None:
                out.append("%.1f %s" % (v, u.get(k, "")))
            for label, subs in (("sm", ("sm__throughput.avg.pct_of_peak_sustained_elapsed",)),
                                ("tensor", ("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",)),
                                ("L2hit", ("lts__t_sector_hit_rate.pct",)),
                                ("dram", ("dram__throughput.avg.pct_of_peak_sustained_elapsed",)),
                                ("regs", ("launch__registers_per_thread",))):
                k, v = pick(d, *subs)
                if v is not None:
                    out.append("%s %.1f" % (label, v))
            stalls = sorted(((v, k) for k, v in d.items()
                             if v is not None and k.startswith("smsp__average_warps_issue_stalled_")
                             and k.endswith("_per_issue_active.ratio")), reverse=True)[:6]
            out.append("stalls: " + ", ".join("%s %.2f" % (k[len("smsp__average_warps_issue_stalled_"):
                                                              -len("_per_issue_active.ratio")], v)
                                              for v, k in stalls))
            print(" | ".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
