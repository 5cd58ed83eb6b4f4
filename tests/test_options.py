#!/usr/bin/env python3
"""The CLI's options against the option tables (src/common/loader_options.def,
dataset_options.def, and infer_options.def for `chute bench --latency`).

The table is read from the docs generator (`gen_options_md --tsv`, the
compiled table).  For `chute bench` and `chute doctor`: --help lists every
CLI-exposed option with the table's default, and each option's min-1 and
max+1 are refused before any file is opened (exit 2) with a message naming
the flag, while min and max themselves pass the parser (the command then
fails on the missing SOURCE instead, exit 1).  No data needed.
"""
import os
import re
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


def read_rows(gen):
    """Every row of both tables (gen_options_md --rows)."""
    out = subprocess.run([gen, "--rows"], check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        table, name, field, kind, d, values, flag, py = line.split("\t")
        rows.append(dict(table=table, name=name, field=field, kind=kind, default=d,
                         values=values, flag=None if flag == "-" else flag,
                         py=None if py == "-" else py))
    return rows


# Where each table's CLI flags are taken: wherever a loader / a dataset is made.
COMMANDS = {"loader": ("bench", "doctor"), "dataset": ("bench", "inspect", "doctor")}
# Float values outside each float row's range (the table's (lo, hi], finite).
BAD_FLOATS = {"mean": ["nan,0,0", "0.5,inf,0.5", "0.5,0.5"], "std": ["0,1,1", "1,-1,1", "1,1,nan"],
              "crop_pct": ["1.5", "-0.5", "x"], "mixup": ["-0.2", "inf", "x"],
              "cutmix": ["-1", "nan", "1001"], "mix_switch": ["1.5", "-0.5", "x"]}
GOOD_FLOATS = {"mean": "0.5,0.5,0.5", "std": "0.25,0.5,1", "crop_pct": "0.9", "mixup": "0.2",
               "cutmix": "1.0", "mix_switch": "0.3"}


def other_rows_cli(ctx):
    """Enums: --help shows the table's choices; every choice passes the
    parser, a bad one exits 2 naming the flag.  Floats: in-range passes,
    out-of-range or malformed exits 2 naming the flag.  Dataset rows: on
    bench, inspect and doctor."""
    rows = [r for r in read_rows(TABLE) if r["table"] != "infer" and (
            r["flag"] and r["kind"] not in ("u32", "u64", "bool")
            or (r["table"] == "dataset" and r["flag"]))]  # infer: infer_cli below
    ctx.check(any(r["kind"] == "enum" for r in rows) and any(r["table"] == "dataset" for r in rows),
              "the table has no CLI enum or dataset rows: %r" % rows)
    missing = "/nonexistent/chute-options-test"
    for r in rows:
        for cmd in COMMANDS[r["table"]]:
            h = ctx.run([ctx.chute, cmd, "--help"]).out
            lines = {ln.split()[0]: ln for ln in h.splitlines() if ln.strip().startswith("--")}
            ln = lines.get(r["flag"])
            if not ctx.check(ln is not None, "%s --help lacks %s" % (cmd, r["flag"])):
                continue
            if r["kind"] == "enum":
                ctx.check(ln.split()[1] == r["values"], "%s --help: %s should offer %s: %r"
                          % (cmd, r["flag"], r["values"], ln))
                ctx.check(("(default %s)" % r["default"]) in ln, "%s --help %s: default %s: %r"
                          % (cmd, r["flag"], r["default"], ln))
                good = r["values"].split("|")
                bad = ["bogus", good[0].upper(), ""]
            elif r["kind"].startswith("float"):
                good = [GOOD_FLOATS[r["name"]]]
                bad = BAD_FLOATS[r["name"]]
            elif r["kind"] == "int32_t" and r["name"] == "csv_no_header":  # a 0..1 row
                good = ["0", "1"]
                bad = ["x", "1.5", "2", "-1"]
            elif r["kind"] == "int32_t":
                good = ["-1", "0", "7"]
                bad = ["x", "1.5", "2147483648"]
            else:
                continue
            for v in good:
                p = ctx.run([ctx.chute, cmd, missing, r["flag"], v], expect=1,
                            what="%s %s %s (valid; SOURCE missing)" % (cmd, r["flag"], v))
                ctx.check(missing in p.err, "%s %s %s: want the missing SOURCE named: %r"
                          % (cmd, r["flag"], v, p.err))
            for v in bad:
                p = ctx.run([ctx.chute, cmd, missing, r["flag"], v], expect=2,
                            what="%s %s %r (invalid)" % (cmd, r["flag"], v))
                ctx.check(r["flag"] in p.err, "%s %s %r: message should name the flag: %r"
                          % (cmd, r["flag"], v, p.err))


def struct_fields(header, struct):
    """Member names of `typedef struct NAME { ... } NAME;` in a C header."""
    import re
    text = re.sub(r"/\*.*?\*/", " ", open(header).read(), flags=re.S)
    m = re.search(r"typedef struct %s \{(.*?)\} %s;" % (struct, struct), text, re.S)
    if not m:
        raise AssertionError("no struct %s in %s" % (struct, header))
    names = []
    for decl in m.group(1).split(";"):
        decl = decl.strip()
        if decl:
            names.append(re.match(r".*?(\w+)\s*(\[[^\]]*\])?$", decl, re.S).group(1))
    return names


def struct_fields_have_rows(ctx):
    """Every member of chute_loader_options and chute_dataset_options (as
    include/chute.h declares them) has a row in the option table, and every
    row names a member: a new field without a row fails here."""
    import os
    header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "include", "chute.h")
    rows = read_rows(TABLE)
    for table, struct in (("loader", "chute_loader_options"), ("dataset", "chute_dataset_options"),
                          ("infer", "chute_infer_options")):
        fields = struct_fields(header, struct)
        ctx.check(len(fields) >= 5, "%s: parsed only %r" % (struct, fields))
        have = {r["field"] for r in rows if r["table"] == table}
        ctx.check(not set(fields) - have, "%s members without a row in the option table: %s"
                  % (struct, sorted(set(fields) - have)))
        ctx.check(not have - set(fields), "option rows naming no %s member: %s"
                  % (struct, sorted(have - set(fields))))
        md = open(os.path.join(os.path.dirname(header), "..", "docs", "OPTIONS.md")).read()
        for f in fields:
            ctx.check(("`%s`" % f) in md, "docs/OPTIONS.md does not list %s.%s" % (struct, f))


LATENCY = ["bench", "--latency"]


def infer_cli(ctx):
    """`chute bench --latency` against the inference session's table
    (infer_options.def): --help lists every CLI row once, with the table's
    default or choices; each integer row's min-1 / max+1 and each bad choice
    or float exit 2 naming the flag, and its min, max, choices, good floats
    and flags pass the parser (the command then fails on the missing SOURCE,
    exit 1).  The rows shared with the loader have the loader's defaults."""
    rows = [r for r in read_rows(TABLE) if r["table"] == "infer"]
    loader = {r["field"]: r for r in read_rows(TABLE) if r["table"] == "loader"}
    ctx.check(len(rows) >= 15 and all(r["py"] for r in rows),
              "infer rows: %r" % [r["name"] for r in rows])
    ints = {t["name"]: t for t in read_table(TABLE)}  # the loader's integer rows
    for r in rows:
        if r["field"] not in loader or r["name"] == "transform":
            continue  # the session's own (its transform has no "train")
        l = dict(loader[r["field"]])
        t = ints.get(l["name"])
        if t and l["kind"] in ("u32", "u64"):
            l.update(kind={"u32": "uint32_t", "u64": "uint64_t"}[t["kind"]],
                     default="computed" if t["auto"] else str(t["default"]))
        ctx.check((r["name"], r["kind"], r["default"], r["values"])
                  == (l["name"], l["kind"], l["default"], l["values"]),
                  "infer %s is not the loader's row: %r vs %r" % (r["name"], r, l))
    cli = [r for r in rows if r["flag"]]
    ctx.check({r["flag"] for r in cli} >= {"--size", "--transform", "--dtype", "--max-batch",
                                           "--max-delay-us", "--workers", "--worker-slice-us",
                                           "--queue-capacity", "--unordered"},
              "bench --latency lost flags: %r" % [r["flag"] for r in cli])
    h = ctx.run([ctx.chute] + LATENCY + ["--help"]).out
    flags = [ln.split()[0] for ln in h.splitlines() if ln.strip().startswith("--")]
    ctx.check(len(flags) == len(set(flags)), "a flag listed twice: %r" % flags)
    lines = {ln.split()[0]: ln for ln in h.splitlines() if ln.strip().startswith("--")}
    missing = "/nonexistent/chute-options-test"
    base = [ctx.chute] + LATENCY + [missing, "--rate", "1"]
    for r in cli:
        ln = lines.get(r["flag"])
        if not ctx.check(ln is not None, "bench --latency --help lacks %s:\n%s" % (r["flag"], h)):
            continue
        good, bad = [], []
        if r["kind"] in ("uint32_t", "uint64_t"):
            lo, hi = (int(x) for x in r["values"].replace("0, or ", "").split(".."))
            if r["default"] != "computed" and not r["values"].startswith("0, or"):
                ctx.check(("(default %s)" % r["default"]) in ln,
                          "--help %s should say (default %s): %r" % (r["flag"], r["default"], ln))
            good = [str(lo), str(hi)] if r["name"] != "resize_size" else [str(hi)]
            bad = ([str(lo - 1)] if lo > 0 else []) + ([str(hi + 1)] if hi < U64_MAX else [])
        elif r["kind"] == "enum":
            choices = r["values"].split(" ")[0]
            ctx.check(ln.split()[1] == choices and ("(default %s)" % r["default"]) in ln,
                      "--help %s should offer %s, default %s: %r"
                      % (r["flag"], choices, r["default"], ln))
            good, bad = choices.split("|"), ["bogus", "train" if r["name"] == "transform" else "X"]
        elif r["kind"].startswith("float"):
            good, bad = [GOOD_FLOATS[r["name"]]], BAD_FLOATS[r["name"]]
        else:  # flags
            p = ctx.run(base + [r["flag"]], expect=1, what="%s (SOURCE missing)" % r["flag"])
            ctx.check(missing in p.err, "%s: want the missing SOURCE named: %r" % (r["flag"], p.err))
        for v in good:
            p = ctx.run(base + [r["flag"], v], expect=1,
                        what="bench --latency %s %s (valid; SOURCE missing)" % (r["flag"], v))
            ctx.check(missing in p.err, "%s %s: want the missing SOURCE named: %r"
                      % (r["flag"], v, p.err))
        for v in bad:
            p = ctx.run(base + [r["flag"], v], expect=2,
                        what="bench --latency %s %r (invalid)" % (r["flag"], v))
            ctx.check(r["flag"] in p.err, "%s %r: message should name the flag: %r"
                      % (r["flag"], v, p.err))


def listed(line):
    """The names of a help line's "a, b, ... or z" list, after its colon and
    before its "(default ...)"."""
    body = line.split(":", 1)[1].split("(default")[0]
    return [w.strip() for w in re.split(r",| or ", body) if w.strip()]


def format_names(ctx):
    """Every registered format is named wherever the format is asked for,
    and nothing else is: the CLI's --format / --source-format help, the
    `format` row of docs/OPTIONS.md, and likewise the writers in pack and
    convert --format.  The registry's own lists come from the library's
    messages for an unknown name (dataset.c and chute_convert walk the
    registries), not from the help code under test."""
    d = ctx.scratch("format_names")
    p = ctx.run([ctx.chute, "inspect", d, "--format", "no-such-format"], expect=1)
    m = re.search(r"known: ([^)]*)\)", p.err)
    if not ctx.check(m, "unknown --format: want the registry's names (known: ...): %r" % p.err):
        return
    known = [w.strip() for w in m.group(1).split(",")]
    ctx.check({"tree", "shards", "tfrecord", "wds"} <= set(known),
              "the registry should hold at least tree, shards, tfrecord, wds: %r" % known)
    p = ctx.run([ctx.chute, "convert", d, d + "-out", "--format", "no-such-writer"],
                expect=1)
    m = re.search(r"chute writes: ([^)]*)\)", p.err)
    if not ctx.check(m, "unknown convert --format: want the writers' names: %r" % p.err):
        return
    writers = [w.strip() for w in m.group(1).split(",")]
    ctx.check("chute" in writers, "the writers should include chute: %r" % writers)

    def check_help(cmd, flag, want):
        p = ctx.run([ctx.chute] + cmd + ["--help"])
        lines = [ln for ln in p.out.splitlines() if ln.strip().startswith(flag + " ")]
        if ctx.check(len(lines) == 1, "%s --help: want one %s line:\n%s"
                     % (" ".join(cmd), flag, p.out)):
            got = listed(lines[0])
            ctx.check(got == want, "%s --help %s lists %r; the registry has %r"
                      % (" ".join(cmd), flag, got, want))

    for cmd in (["bench"], ["inspect"], ["doctor"], ["bench", "--latency"]):
        check_help(cmd, "--format", known)
    check_help(["convert"], "--source-format", known)
    for cmd in (["convert"], ["pack"]):
        check_help(cmd, "--format", writers)
    docs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "OPTIONS.md")
    with open(docs, encoding="utf-8") as f:
        rows = [ln for ln in f if ln.startswith("| `format` |")]
    if ctx.check(len(rows) == 1, "docs/OPTIONS.md: want one `format` row, got %d" % len(rows)):
        meaning = rows[0].rstrip().rstrip("|").split("|")[-1]
        ctx.check(listed(meaning) == known, "docs/OPTIONS.md's format row lists %r; the "
                  "registry has %r" % (listed(meaning), known))


def remote_settings(ctx):
    """Every CHUTE_REMOTE_* variable the code, the docs or the Python package
    names is a row of src/common/remote_options.def (gen_options_md --rows),
    listed in docs/OPTIONS.md; and no C file reads one with getenv: the
    rows' reader (ch_remote_opt_value) is the only one."""
    top = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    rows = {r["name"] for r in read_rows(TABLE) if r["table"] == "remote"}
    ctx.check(len(rows) >= 8, "remote rows: %r" % sorted(rows))
    named, readers = set(), []
    for sub in ("src", "cli", "python", "docs"):
        for dp, _, fns in os.walk(os.path.join(top, sub)):
            for fn in fns:
                if not fn.endswith((".c", ".h", ".py", ".md")):
                    continue
                with open(os.path.join(dp, fn), encoding="utf-8", errors="replace") as f:
                    text = f.read()
                named |= set(re.findall(r"CHUTE_REMOTE_[A-Z0-9_]*[A-Z0-9]", text))
                if re.search(r'getenv\(\s*"CHUTE_REMOTE_', text):
                    readers.append(os.path.join(dp, fn))
    ctx.check(not named - rows, "CHUTE_REMOTE_ variables without a row in "
              "remote_options.def: %s" % sorted(named - rows))
    ctx.check(not readers, "getenv(\"CHUTE_REMOTE_...\") outside the table's reader: %r" % readers)
    with open(os.path.join(top, "docs", "OPTIONS.md"), encoding="utf-8") as f:
        doc = f.read()
    for name in sorted(rows):
        ctx.check("| `%s` |" % name in doc, "docs/OPTIONS.md lacks %s" % name)


if __name__ == "__main__":
    argv = sys.argv[1:]
    if "--table" in argv:
        i = argv.index("--table")
        TABLE = argv[i + 1]
        del argv[i:i + 2]
    sys.exit(T.main({"help_and_bounds": help_and_bounds, "other_rows_cli": other_rows_cli,
                     "struct_fields_have_rows": struct_fields_have_rows,
                     "infer_cli": infer_cli, "format_names": format_names,
                     "remote_settings": remote_settings}, argv))
