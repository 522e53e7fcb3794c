#!/usr/bin/env python3
"""Tables, JSON and plots of an emulated-cluster run (bench/cluster/cluster.sh).

    report.py --out DIR --hosts H --rates 100mbit,1gbit [--plots DIR]

Reads DIR/<rate>.jsonl (one line per measurement, written by cluster_rank) and writes:
- stdout: per rate, one row per size and method: the best fixed algorithm's median time, its
  fraction of the line rate (the ideal ring time 2(N-1)/N * size / rate over the time), the
  speedup over MPI_Allreduce of the same run, bytes on the wire per call (all ranks) and their
  ratio to the raw ring's 2(N-1) * size, and ZIPCCL_ALGO=auto's time over the best's;
- DIR/results.json (the records and these rows), DIR/results.md (the same tables in markdown);
- with --plots: cluster-time-<rate>.png (time vs size per method, MPI and the line rate) and
  cluster-speedup.png (speedup over MPI vs link rate at 64 MiB, or the largest size measured).
Exit status 1 when a measurement failed its check, is missing its MPI baseline, or moved
uncompressed data faster than the link allows (MPI or the raw ring under 0.9 times the line-rate
time where that is at least 10 ms, beyond the tbf burst of 1 ms): its traffic bypassed the
emulated links (shared memory, loopback).
"""
import argparse
import json
import os
import subprocess
import sys

UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}


def parse_rate(text):
    """tc's rate units (decimal): '100mbit' -> 1e8 bits/s."""
    t = text.strip().lower()
    for unit in sorted(UNITS, key=len, reverse=True):
        if t.endswith(unit):
            return float(t[: -len(unit)]) * UNITS[unit]
    raise ValueError(f"unknown rate '{text}' (use kbit, mbit or gbit)")


def size_label(b):
    for shift, suffix in ((30, "G"), (20, "M"), (10, "K")):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{suffix}"
    return str(b)


def load(path):
    """The records of a run; one of another topology than flat (algorithm "T-X",
    cluster_rank --topologies: T hier, shards, leader or auto) becomes method "M/T" with
    algorithm X, a row of its own."""
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    for r in records:
        for topo in ("hier", "shards", "leader", "auto"):
            if r["algo"].startswith(topo + "-"):
                r["method"] += "/" + topo
                r["algo"] = r["algo"][len(topo) + 1:]
                break
    return records


def rows_of(records, hosts, bps):
    """One row per (size, method): best fixed algorithm, auto, speedups."""
    rows = []
    sizes = sorted({r["bytes"] for r in records})
    order = []
    for r in records:
        if r["method"] not in order:
            order.append(r["method"])
    for size in sizes:
        at = [r for r in records if r["bytes"] == size]
        mpi = next((r for r in at if r["method"] == "mpi"), None)
        line_s = 2.0 * (hosts - 1) / hosts * size * 8 / bps
        for m in order:
            mine = [r for r in at if r["method"] == m]
            if not mine:
                continue
            fixed = [r for r in mine if r["algo"] != "auto"] or mine
            best = min(fixed, key=lambda r: r["median_s"])
            auto = next((r for r in mine if r["algo"] == "auto"), None)
            # the flat raw ring's bytes: 2 (N - 1) / N of the tensor from each of N ranks
            raw_wire = 2.0 * (best.get("ranks", hosts) - 1) * size
            # which fixed algorithm auto's calls were, told by their bytes on the wire (the
            # ring and the scatter send the same for linear codecs): a slower auto on the same
            # algorithm as the best is measurement noise, on another one the policy's choice
            auto_like = None
            if auto and auto is not best and auto["wire_bytes"]:
                like = [r["algo"] for r in fixed if r["wire_bytes"] is not None and
                        abs(r["wire_bytes"] - auto["wire_bytes"]) <= 0.05 * auto["wire_bytes"]]
                auto_like = "/".join(like) if like else "?"
            rows.append({
                "bytes": size,
                "method": m,
                "algo": best["algo"],
                "median_s": best["median_s"],
                "line_s": line_s,
                "line_fraction": line_s / best["median_s"],
                "speedup_vs_mpi": mpi["median_s"] / best["median_s"] if mpi else None,
                "wire_bytes": best["wire_bytes"],
                "wire_ratio": best["wire_bytes"] / raw_wire
                if best["wire_bytes"] is not None else None,
                "auto_s": auto["median_s"] if auto and auto is not best else None,
                "auto_over_best": auto["median_s"] / best["median_s"]
                if auto and auto is not best else None,
                "auto_ran": auto_like,
                "ok": all(not r["failed"] and not r["wrong"] and r["identical"] for r in mine),
                "rel_err": max(r["rel_err"] for r in mine),
            })
    return rows


def fmt(v, spec, none="-"):
    return none if v is None else format(v, spec)


HEADER = ["size", "method", "best algo", "time ms", "line ms", "% line", "x MPI", "wire MB",
          "wire/raw", "auto ms", "auto/best", "auto ran", "check"]


def table_lines(rows):
    out = []
    for r in rows:
        out.append([
            size_label(r["bytes"]), r["method"], r["algo"], fmt(r["median_s"] * 1e3, ".2f"),
            fmt(r["line_s"] * 1e3, ".2f"), fmt(100 * r["line_fraction"], ".0f"),
            fmt(r["speedup_vs_mpi"], ".2f"),
            fmt(r["wire_bytes"] / 1e6 if r["wire_bytes"] is not None else None, ".2f"),
            fmt(r["wire_ratio"], ".3f"),
            fmt(r["auto_s"] * 1e3 if r["auto_s"] is not None else None, ".2f"),
            fmt(r["auto_over_best"], ".2f"), r.get("auto_ran") or "-",
            "ok" if r["ok"] else "FAILED"])
    return out


def print_text(rate, rows):
    lines = table_lines(rows)
    widths = [max(len(h), *(len(l[i]) for l in lines)) if lines else len(h)
              for i, h in enumerate(HEADER)]
    print(f"\n## {rate}")
    print("  ".join(h.rjust(w) for h, w in zip(HEADER, widths)))
    for l in lines:
        print("  ".join(c.rjust(w) for c, w in zip(l, widths)))


def markdown(rate, rows):
    md = [f"### {rate}", "", "| " + " | ".join(HEADER) + " |",
          "|" + "---|" * len(HEADER)]
    md += ["| " + " | ".join(l) + " |" for l in table_lines(rows)]
    return md + [""]


def targets(all_rows, hosts):
    """The issue's targets at 1gbit and 64 MiB, and auto against the best fixed choice."""
    out = []
    rows = all_rows.get("1gbit", [])
    at = {r["method"]: r for r in rows if r["bytes"] == 64 << 20}
    if at:
        out.append(f"Targets ({hosts} hosts, 1gbit, 64 MiB f32), speedup over MPI_Allreduce:")
        # issue 21: top-k >= 15x and QSGD 4-bit >= 10x (raw and GradiVeQ: issue 6's)
        for m, goal in (("raw", 1.3), ("qsgd4", 10), ("gradiveq", 6), ("topk", 15)):
            if m in at and at[m]["speedup_vs_mpi"] is not None:
                s = at[m]["speedup_vs_mpi"]
                out.append(f"- {m} ({at[m]['algo']}): {s:.2f}x (target >= {goal}x: "
                           f"{'met' if s >= goal else 'NOT met'})")
        if "mpi" in at:
            out.append(f"- MPI_Allreduce reached {100 * at['mpi']['line_fraction']:.0f}% of line "
                       f"rate, the raw ring {100 * at.get('raw', at['mpi'])['line_fraction']:.0f}%")
    # the worst case of each kind of auto; "best" is the smallest median of the fixed choices
    worst = {}
    for rate, rows in all_rows.items():
        by = {}
        for r in rows:
            by.setdefault(r["bytes"], {})[r["method"]] = r
        for size, ms in by.items():
            cands = [(r["auto_over_best"], rate, size, m, "algo")
                     for m, r in ms.items() if r["auto_over_best"] is not None and m != "auto"]
            # ZIPCCL_CODEC=auto chooses among raw, bf16 and qsgd (ZIPCCL_QSGD_BITS, 4)
            pool = [ms[m]["median_s"] for m in ("raw", "bf16", "qsgd4") if m in ms]
            if "auto" in ms and pool:
                cands.append((ms["auto"]["median_s"] / min(pool), rate, size, "auto", "codec"))
            if "auto" in ms and "raw" in ms:
                cands.append((ms["auto"]["median_s"] / ms["raw"]["median_s"], rate, size, "auto",
                              "raw"))
            for c in cands:
                if c[4] not in worst or c > worst[c[4]]:
                    worst[c[4]] = c
    what = {"algo": "ZIPCCL_ALGO=auto against the codec's fastest fixed algorithm",
            "codec": "ZIPCCL_CODEC=auto against the fastest of raw, bf16, qsgd4 (those measured)",
            "raw": "ZIPCCL_CODEC=auto against the raw ring"}
    # issue 21: ALGO=auto within 10% of the best fixed, CODEC=auto never 5% slower than raw
    goals = {"algo": 1.10, "codec": None, "raw": 1.05}
    for kind in ("algo", "codec", "raw"):
        if kind in worst:
            w = worst[kind]
            goal = goals[kind]
            verdict = ("no target" if goal is None else
                       f"target <= {goal:.2f}: {'met' if w[0] <= goal else 'NOT met'}")
            out.append(f"- {what[kind]}, worst case over every rate and size: {w[0]:.2f}x "
                       f"({w[3]}, {size_label(w[2])}, {w[1]}; {verdict})")
    return out


def gnuplot(script):
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def plots(all_rows, rates, hosts, pdir, out):
    os.makedirs(pdir, exist_ok=True)
    made = []
    for rate in rates:
        rows = all_rows.get(rate)
        if not rows:
            continue
        methods = []
        for r in rows:
            if r["method"] not in methods:
                methods.append(r["method"])
        dat = os.path.join(out, f"time-{rate}.dat")
        with open(dat, "w") as f:
            for m in methods + ["line rate"]:
                f.write(f'"{m}"\n')
                for r in rows:
                    if m == "line rate" and r["method"] == methods[0]:
                        f.write(f"{r['bytes']} {r['line_s'] * 1e3}\n")
                    elif r["method"] == m:
                        f.write(f"{r['bytes']} {r['median_s'] * 1e3}\n")
                f.write("\n\n")
        png = os.path.join(pdir, f"cluster-time-{rate}.png")
        xtics = ", ".join(f'"{size_label(b)}" {b}' for b in sorted({r["bytes"] for r in rows}))
        n = len(methods) + 1
        gnuplot(f"""set terminal pngcairo size 900,600 noenhanced
set output '{png}'
set title '{hosts} hosts at {rate}: all-reduce time (median, best algorithm) vs size'
set logscale xy
set xlabel 'bytes of f32'
set ylabel 'ms'
set key outside right
set grid
set xtics ({xtics})
plot for [i=0:{n - 2}] '{dat}' index i using 1:2 with linespoints title columnheader(1), \
     '{dat}' index {n - 1} using 1:2 with lines dt 2 lw 2 lc rgb 'black' title columnheader(1)
""")
        made.append(png)
    # speedup vs rate at 64 MiB (or the largest size every rate measured)
    common = None
    for rate in rates:
        s = {r["bytes"] for r in all_rows.get(rate, [])}
        common = s if common is None else common & s
    if common and len(rates) > 0:
        size = (64 << 20) if (64 << 20) in common else max(common)
        methods = []
        for rate in rates:
            for r in all_rows.get(rate, []):
                if r["method"] not in methods and r["method"] != "mpi":
                    methods.append(r["method"])
        dat = os.path.join(out, "speedup.dat")
        with open(dat, "w") as f:
            for m in methods:
                f.write(f'"{m}"\n')
                for rate in rates:
                    r = next((r for r in all_rows.get(rate, [])
                              if r["bytes"] == size and r["method"] == m), None)
                    if r and r["speedup_vs_mpi"]:
                        f.write(f"{parse_rate(rate) / 1e6} {r['speedup_vs_mpi']}\n")
                f.write("\n\n")
        png = os.path.join(pdir, "cluster-speedup.png")
        gnuplot(f"""set terminal pngcairo size 900,600 noenhanced
set output '{png}'
set title '{hosts} hosts, {size_label(size)} f32: speedup over MPI_Allreduce vs link rate'
set logscale x
set logscale y
set offsets graph 0.1, graph 0.1, 0, 0
set xlabel 'link rate, Mbit/s'
set ylabel 'MPI time / method time (best algorithm)'
set key outside right
set grid
set arrow from graph 0, first 1 to graph 1, first 1 nohead dt 2
plot for [i=0:{len(methods) - 1}] '{dat}' index i using 1:2 with linespoints title columnheader(1)
""")
        made.append(png)
    return made


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--hosts", type=int, required=True)
    ap.add_argument("--rates", required=True)
    ap.add_argument("--plots")
    a = ap.parse_args()
    rates = [r for r in a.rates.split(",") if r]
    result = {"hosts": a.hosts, "rates": {}}
    all_rows = {}
    ok = True
    for rate in rates:
        path = os.path.join(a.out, f"{rate}.jsonl")
        if not os.path.exists(path):
            print(f"report.py: no results for {rate} ({path})", file=sys.stderr)
            ok = False
            continue
        records = load(path)
        rows = rows_of(records, a.hosts, parse_rate(rate))
        all_rows[rate] = rows
        result["rates"][rate] = {"bps": parse_rate(rate), "records": records, "rows": rows}
        ok = ok and all(r["ok"] for r in rows) and all(
            r["speedup_vs_mpi"] is not None for r in rows)
        for r in rows:
            if r["method"] in ("mpi", "raw") and r["line_s"] >= 0.01 and \
                    r["median_s"] < 0.9 * r["line_s"]:
                print(f"report.py: {r['method']} moved {size_label(r['bytes'])} in "
                      f"{r['median_s'] * 1e3:.2f} ms, faster than {rate} allows "
                      f"({r['line_s'] * 1e3:.2f} ms): traffic bypassed the emulated links",
                      file=sys.stderr)
                ok = False
        print_text(rate, rows)
    summary = targets(all_rows, a.hosts)
    print()
    print("\n".join(summary))
    result["targets"] = summary
    md = []
    for rate in rates:
        if rate in all_rows:
            md += markdown(rate, all_rows[rate])
    md += summary
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    if a.plots:
        result["plots"] = plots(all_rows, rates, a.hosts, a.plots, a.out)
        print("plots: " + " ".join(result["plots"]))
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(f"results: {a.out}/results.json, {a.out}/results.md")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
