#!/usr/bin/env python3
"""Where a served request's first token waited, from `mlxrt server --log-level DEBUG` logs: each
"first token of request N: T ms after it was queued (W waiting to join, B in the batch)" line, as
percentiles of the three parts per log (T = W + B: W from the request's queueing to its insertion
into the batch generator, B from there to its first token).

Usage: bench/ttft_breakdown.py LOG [LOG ...] [--skip N]   (--skip: leave out each log's first N lines
of that kind, e.g. the warm-up's and the solo round's)
"""
import argparse
import re
import statistics
import sys

LINE = re.compile(r"first token of request (\d+): ([0-9.]+) ms after it was queued "
                  r"\(([0-9.]+) waiting to join, ([0-9.]+) in the batch\)")


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--skip", type=int, default=0)
    args = ap.parse_args()
    print("| log | part | n | p50 (ms) | p90 | p99 | max | mean |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    found = False
    for path in args.logs:
        try:
            with open(path, errors="replace") as f:
                rows = [tuple(float(x) for x in m.groups()[1:]) for m in map(LINE.search, f) if m][args.skip:]
        except OSError as e:
            print(f"{path}: {e.strerror}", file=sys.stderr)
            continue
        if not rows:
            print(f"{path}: no first-token lines (was the server run with --log-level DEBUG?)", file=sys.stderr)
            continue
        found = True
        for i, part in enumerate(("queued to first token", "waiting to join", "in the batch")):
            v = [r[i] for r in rows]
            print(f"| {path} | {part} | {len(v)} | {pct(v, 50):.1f} | {pct(v, 90):.1f} | {pct(v, 99):.1f} | "
                  f"{max(v):.1f} | {statistics.fmean(v):.1f} |")
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
