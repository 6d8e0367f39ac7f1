#!/usr/bin/env python3
"""Names the stacks that bench/gpu/sampler.c recorded and prints where one thread's time went.

For the main thread (or --thread-all), over the samples whose stack passes through FOCUS (a
regular expression on function names; default MLX's eval, the dispatch of a step's graph): the
functions that held the most samples inclusively (anywhere on the stack) and at the leaf, and the
leaf's module. Symbols come from `nm` on each module (its symbol table, else its dynamic one);
modules without symbols are named by file.

Usage: sampler_report.py STACKS_FILE [--focus REGEX] [--top 40] [--thread-all]
"""
import argparse
import bisect
import collections
import os
import re
import subprocess
import sys


def load_segments(path):
    """LOAD segments (offset, vaddr, filesz) of an ELF file, from readelf."""
    out = subprocess.run(["readelf", "-lW", path], capture_output=True, text=True).stdout
    segs = []
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "LOAD":
            segs.append((int(f[1], 16), int(f[2], 16), int(f[4], 16)))
    return segs


def load_symbols(path):
    addrs, names = [], []
    for flags in (["-C", "--defined-only", "-n"], ["-D", "-C", "--defined-only", "-n"]):
        out = subprocess.run(["nm", *flags, path], capture_output=True, text=True).stdout
        for line in out.splitlines():
            f = line.split(" ", 2)
            if len(f) == 3 and f[1] in "tTwWiI":
                addrs.append(int(f[0], 16))
                names.append(f[2])
        if addrs:
            break
    order = sorted(range(len(addrs)), key=addrs.__getitem__)
    return [addrs[i] for i in order], [names[i] for i in order]


class Symbolizer:
    def __init__(self, maps):
        self.maps = maps  # (start, end, offset, path) of executable mappings
        self.starts = [m[0] for m in maps]
        self.modules = {}
        self.cache = {}

    def name(self, addr):
        if addr in self.cache:
            return self.cache[addr]
        i = bisect.bisect_right(self.starts, addr) - 1
        result = ("?", "?")
        if i >= 0 and addr < self.maps[i][1]:
            start, _, offset, path = self.maps[i]
            base = os.path.basename(path)
            result = (base, base)
            if os.path.exists(path):
                if path not in self.modules:
                    self.modules[path] = (load_segments(path), *load_symbols(path))
                segs, addrs, names = self.modules[path]
                file_off = addr - start + offset
                vaddr = next((file_off - o + v for o, v, n in segs if o <= file_off < o + n), file_off)
                j = bisect.bisect_right(addrs, vaddr) - 1
                if j >= 0:
                    result = (base, names[j][:160])
        self.cache[addr] = result
        return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stacks")
    ap.add_argument("--focus", default=r"mlx::core::(eval_impl|async_eval|eval)\(")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--thread-all", action="store_true")
    args = ap.parse_args()

    maps, stacks, main_tid = [], [], None
    with open(args.stacks) as f:
        for line in f:
            if line.startswith("pid "):
                main_tid = int(line.split()[3])
            elif line.startswith("map "):
                f5 = line[4:].split(None, 5)
                if len(f5) == 6 and "x" in f5[1]:
                    lo, hi = (int(v, 16) for v in f5[0].split("-"))
                    maps.append((lo, hi, int(f5[2], 16), f5[5].strip()))
            elif line.startswith("s "):
                f2 = line.split()
                tid, frames = int(f2[1]), [int(v, 16) for v in f2[2:]]
                if args.thread_all or tid == main_tid:
                    stacks.append(frames)
    maps.sort()
    sym = Symbolizer(maps)
    focus = re.compile(args.focus)
    inclusive, leaf, leaf_module = collections.Counter(), collections.Counter(), collections.Counter()
    n_focus = 0
    for frames in stacks:
        # The stack starts in the signal handler: this library's frame, then libc's signal
        # trampoline (__restore_rt, which nm may name by the symbol before it), then the
        # interrupted code. Return addresses (all frames but the interrupted one) - 1.
        named = [sym.name(a - 1) for a in frames]
        for k, (module, fn) in enumerate(named[:4]):
            if module.startswith("libc.so") and ("restore_rt" in fn or "sigaction" in fn):
                named = [sym.name(frames[k + 1])] + named[k + 2:] if k + 1 < len(frames) else []
                break
        if not named or not any(focus.search(fn) for _, fn in named):
            continue
        n_focus += 1
        for fn in {fn for _, fn in named}:
            inclusive[fn] += 1
        leaf[named[0][1]] += 1
        leaf_module[named[0][0]] += 1
    print(f"{args.stacks}: {len(stacks)} samples of the {'process' if args.thread_all else 'main thread'}, "
          f"{n_focus} through /{args.focus}/")
    if not n_focus:
        return 1
    for title, counter, top in (("inclusive", inclusive, args.top), ("leaf", leaf, args.top // 2),
                                ("leaf module", leaf_module, 12)):
        print(f"\n{title}: % of those samples")
        for fn, n in counter.most_common(top):
            print(f"{100 * n / n_focus:6.1f}  {fn}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
