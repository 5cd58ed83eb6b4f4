#!/usr/bin/env python3
"""house_metrics.py — how the source tree reads, in numbers (issue #23).

The redesign of the tree is judged before and after by the same figures:
files and lines per folder, #include arrows that run against the layer
order, folders that include each other in a circle, functions over 80
lines, and the largest files.  This script prints them for the checkout it
runs in (`python3 scripts/house_metrics.py [--json]`), so a closing note
can quote both sides from one tool rather than from counting by hand.

Layers (lower may not include higher): common < {codec, io, ops, parse}
< format < {stats, pipeline, write, cuda}.  Folders not listed are
reported but not ranked.  Function lengths come from universal-ctags
(`end:` field); without ctags that section is left out with a note.
"""
import collections
import json
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RANK = {"common": 0, "codec": 1, "io": 1, "ops": 1, "parse": 1, "format": 2,
        "stats": 3, "pipeline": 3, "write": 3, "cuda": 3}
INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def source_files(top):
    out = []
    for dp, dns, fns in os.walk(os.path.join(ROOT, top)):
        dns.sort()
        for f in sorted(fns):
            if f.endswith((".c", ".h", ".cu", ".def")):
                out.append(os.path.relpath(os.path.join(dp, f), ROOT))
    return out


def folder(path):
    """src/format/readers/x.c -> format/readers; cli/x.c -> cli."""
    parts = path.split(os.sep)
    if parts[0] == "src":
        return "/".join(parts[1:-1]) or "src"
    return "/".join(parts[:-1])


def layer(fold):
    return RANK.get(fold.split("/")[0])


def lines(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return f.read().count(b"\n")


def includes(path):
    with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
        text = f.read()
    out = []
    for inc in INC.findall(text):
        target = os.path.normpath(os.path.join(os.path.dirname(path), inc))
        if os.path.exists(os.path.join(ROOT, target)):
            out.append(target)
    return out


def sccs(graph):
    """Tarjan's strongly connected components of size > 1."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def long_functions(files, limit):
    ctags = shutil.which("ctags")
    if not ctags:
        return None
    cfiles = [f for f in files if f.endswith((".c", ".cu"))]
    p = subprocess.run([ctags, "--c-kinds=f", "--fields=+ne", "--language-force=C", "-f", "-"]
                       + cfiles, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       text=True, check=False)
    out = []
    for line in p.stdout.splitlines():
        cols = line.split("\t")
        fields = dict(c.split(":", 1) for c in cols[3:] if ":" in c)
        if "line" in fields and "end" in fields:
            n = int(fields["end"]) - int(fields["line"]) + 1
            if n > limit:
                out.append((n, cols[1], cols[0]))
    return sorted(out, reverse=True)


def main():
    files = source_files("src") + source_files("cli") + source_files("python/ext")
    per = collections.OrderedDict()
    for f in files:
        d = per.setdefault(folder(f), {"files": 0, "lines": 0})
        d["files"] += 1
        d["lines"] += lines(f)
    upward, fgraph, unit_graph = [], collections.defaultdict(set), collections.defaultdict(set)

    def unit(p):  # a header and its .c are one unit
        return os.path.splitext(p)[0]

    for f in files:
        for t in includes(f):
            a, b = folder(f), folder(t)
            if a != b:
                fgraph[a].add(b)
                unit_graph[unit(f)].add(unit(t))
                la, lb = layer(a), layer(b)
                if la is not None and lb is not None and lb > la:
                    upward.append((f, t))
    cross_unit = [c for c in sccs(unit_graph)
                  if len({folder(u + ".c") for u in c}) > 1]
    longf = long_functions(files, 80)
    biggest = sorted(((lines(f), f) for f in files), reverse=True)[:10]
    r = {
        "folders": per,
        "upward_includes": upward,
        "folder_cycles": sccs(fgraph),
        "cross_folder_unit_cycles": cross_unit,
        "functions_over_80": None if longf is None else [
            {"lines": n, "file": f, "function": fn} for n, f, fn in longf],
        "largest_files": [{"lines": n, "file": f} for n, f in biggest],
    }
    if "--json" in sys.argv[1:]:
        json.dump(r, sys.stdout, indent=1)
        print()
        return
    print("files and lines per folder:")
    for k, v in per.items():
        print("  %-24s %4d files %7d lines" % (k, v["files"], v["lines"]))
    print("#include arrows running up the layers: %d" % len(upward))
    for a, b in upward:
        print("  %s -> %s" % (a, b))
    print("folders including each other in a circle: %d" % len(r["folder_cycles"]))
    for c in r["folder_cycles"]:
        print("  " + " <-> ".join(c))
    print("include circles between files of different folders: %d" % len(cross_unit))
    for c in cross_unit:
        print("  " + " <-> ".join(c))
    if longf is None:
        print("functions over 80 lines: (ctags not found)")
    else:
        print("functions over 80 lines: %d" % len(longf))
        for n, f, fn in longf[:25]:
            print("  %4d  %s  %s" % (n, fn, f))
        if len(longf) > 25:
            print("  ... and %d more (--json lists all)" % (len(longf) - 25))
    print("largest files:")
    for n, f in biggest:
        print("  %6d  %s" % (n, f))


if __name__ == "__main__":
    main()
