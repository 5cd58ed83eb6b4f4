#!/usr/bin/env python3
"""test_summary.py LOGDIR NAME:KIND... — the last lines of scripts/test.sh.

Reads each tier's kept output (LOGDIR/NAME.log, exit status in NAME.rc) and
prints one line per tier (passed, failed, skipped, and the names of the
failed tests), then the total as "N passed, N failed, N skipped" alone on
a line.  KIND says how the tier reports: ctest ("N tests failed out of M",
the "The following tests FAILED" list, "***Skipped" lines) or pytest (its
closing "N passed, N failed, N skipped" line and its "FAILED name" short
summary).  A tier that exited non-zero without a failed test it could
name counts as one failure named "<tier> (exit N)", so a broken build or a
crashed runner is never summarised as green.  Exit status 1 when anything
failed."""
import os
import re
import sys


def count_ctest(text):
    passed = failed = skipped = 0
    m = re.findall(r"(\d+)% tests passed, (\d+) tests? failed out of (\d+)", text)
    if m:
        _, f, total = m[-1]
        failed, total = int(f), int(total)
        skipped = len(re.findall(r"\*\*\*Skipped|\*\*\*Not Run \(Disabled\)", text))
        passed = total - failed - skipped
    names = []
    block = text.split("The following tests FAILED:")
    if len(block) > 1:
        for line in block[-1].splitlines()[1:]:
            mm = re.match(r"\s+\d+ - (\S+) \((.+)\)", line)
            if not mm:
                break
            names.append("%s (%s)" % mm.groups())
    return passed, failed, skipped, names


def count_pytest(text):
    passed = failed = skipped = 0
    for line in text.splitlines()[::-1]:
        if re.search(r"\d+ (passed|failed)", line) and (" in " in line or line.startswith("=")):
            for n, what in re.findall(r"(\d+) (passed|failed|skipped|errors?)", line):
                n = int(n)
                if what == "passed":
                    passed += n
                elif what == "skipped":
                    skipped += n
                else:
                    failed += n
            break
    names = [l.split(" ", 1)[1].split(" - ")[0] for l in text.splitlines()
             if l.startswith(("FAILED ", "ERROR "))]
    return passed, failed, skipped, names


def main():
    logdir, tiers = sys.argv[1], sys.argv[2:]
    tp = tf = ts = 0
    lines = []
    for t in tiers:
        name, kind = t.split(":", 1)
        try:
            with open(os.path.join(logdir, name + ".log"), encoding="utf-8", errors="replace") as f:
                text = f.read()
            with open(os.path.join(logdir, name + ".rc")) as f:
                rc = int(f.read().strip() or "1")
        except OSError as e:
            text, rc = "", 1
            print("test_summary: %s: %s" % (name, e), file=sys.stderr)
        p, fl, s, names = (count_ctest if kind == "ctest" else count_pytest)(text)
        if rc != 0 and fl == 0:
            fl, names = 1, ["%s (exit %d)" % (name, rc)]
        tp, tf, ts = tp + p, tf + fl, ts + s
        lines.append("  %-8s %s  %d passed, %d failed, %d skipped%s"
                     % (name, "ok  " if rc == 0 and fl == 0 else "FAIL", p, fl, s,
                        (": " + ", ".join(names)) if names else ""))
    print("\n== summary of every tier (logs in %s/)" % logdir)
    print("\n".join(lines))
    print("%d passed, %d failed, %d skipped" % (tp, tf, ts))
    return 1 if tf else 0


if __name__ == "__main__":
    sys.exit(main())
