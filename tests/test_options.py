#!/usr/bin/env python3
"""The CLI's loader options against the option table (src/common/loader_options.def).

The table is read from the docs generator (`gen_options_md --tsv`, the
compiled table).  For `chute bench` and `chute doctor`: --help lists every
CLI-exposed option with the table's default, and each option's min-1 and
max+1 are refused before any file is opened (exit 2) with a message naming
the flag, while min and max themselves pass the parser (the command then
fails on the missing SOURCE instead, exit 1).  No data needed.
"""
import subprocess
import sys

import chute_testlib as T

TABLE = None
U64_MAX = 2 ** 64 - 1


def read_table(gen):
    out = subprocess.run([gen, "--tsv"], check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        name, kind, d, lo, hi, cli, py, auto = line.split("\t")
        rows.append(dict(name=name, kind=kind, default=int(d), min=int(lo), max=int(hi),
                         cli=cli == "1", py=py == "1", auto=auto == "1",
                         flag="--" + name.replace("_", "-")))
    return rows


def help_and_bounds(ctx):
    rows = [r for r in read_table(TABLE) if r["cli"]]
    ctx.check(len(rows) >= 8, "the table exposes only %d options to the CLI" % len(rows))
    missing = "/nonexistent/chute-options-test"
    for cmd in ("bench", "doctor"):
        p = ctx.run([ctx.chute, cmd, "--help"])
        lines = {ln.split()[0]: ln for ln in p.out.splitlines() if ln.strip().startswith("--")}
        for r in rows:
            ln = lines.get(r["flag"])
            if not ctx.check(ln is not None, "%s --help lacks %s:\n%s" % (cmd, r["flag"], p.out)):
                continue
            if r["kind"] != "bool" and not r["auto"]:
                ctx.check(("(default %d)" % r["default"]) in ln,
                          "%s --help: %s should say (default %d): %r"
                          % (cmd, r["flag"], r["default"], ln))
        for r in rows:
            if r["kind"] == "bool":
                continue
            bad = ([r["min"] - 1] if r["min"] > 0 else []) + ([r["max"] + 1] if r["max"] < U64_MAX else [])
            for v in bad:
                p = ctx.run([ctx.chute, cmd, missing, r["flag"], str(v)], expect=2)
                ctx.check(r["flag"] in p.err and str(r["max"]) in p.err,
                          "%s %s %d: message should name the flag and its range: %r"
                          % (cmd, r["flag"], v, p.err))
            for v in (r["min"], r["max"]):
                if r["name"] == "resize_size" and v < 224:
                    continue  # below the default size: refused by the library (exit 1 anyway)
                p = ctx.run([ctx.chute, cmd, missing, r["flag"], str(v)], expect=1,
                            what="%s %s %d (in range; SOURCE missing)" % (cmd, r["flag"], v))
                ctx.check(missing in p.err, "%s %s %d: want the missing SOURCE named: %r"
                          % (cmd, r["flag"], v, p.err))


if __name__ == "__main__":
    argv = sys.argv[1:]
    if "--table" in argv:
        i = argv.index("--table")
        TABLE = argv[i + 1]
        del argv[i:i + 2]
    sys.exit(T.main({"help_and_bounds": help_and_bounds}, argv))
