#!/usr/bin/env python3
"""A/B two builds of smarm-micro on one benchmark, in interleaved pairs.

Usage: ab.py MICRO_A MICRO_B [--filter BM_pingpong_1M] [--counter ns_per_rt]
             [--pairs 12]

Runs A then B, `--pairs` times, each a fresh process running the one
benchmark, and prints both sides' values and the median (min..max) of the
per-pair ratios B/A. Absolute times on these shared machines move by tens of
percent within seconds; the ratio of two runs made back to back is far
steadier, so a runtime change is judged by it (docs/perf-log.md, "Where the time
goes"). Build B in a second tree, e.g.
`git worktree add ../exp && cmake -S ../exp -B ../exp/build -DCMAKE_BUILD_TYPE=Release`.
Nothing else may run meanwhile (no build). Exit status 0 whatever the numbers.
"""
import argparse, json, statistics, subprocess


def run(micro, filt, counter):
    out = subprocess.run([micro, f"--benchmark_filter={filt}", "--benchmark_format=json"],
                         capture_output=True, text=True, check=True, timeout=600).stdout
    rows = [b for b in json.loads(out)["benchmarks"] if counter in b]
    if not rows:
        raise SystemExit(f"ab: {micro} reported no counter {counter!r} for filter {filt!r}")
    return float(rows[0][counter])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--filter", default="BM_pingpong_1M")
    ap.add_argument("--counter", default="ns_per_rt")
    ap.add_argument("--pairs", type=int, default=12)
    o = ap.parse_args()
    pairs = [(run(o.a, o.filter, o.counter), run(o.b, o.filter, o.counter))
             for _ in range(o.pairs)]
    q = [b / a for a, b in pairs]
    print("A", sorted(round(a, 1) for a, _ in pairs))
    print("B", sorted(round(b, 1) for _, b in pairs))
    print(f"{o.counter} B/A per pair: median {statistics.median(q):.3f} "
          f"({min(q):.3f}..{max(q):.3f}), {len(q)} pairs")


if __name__ == "__main__":
    main()
