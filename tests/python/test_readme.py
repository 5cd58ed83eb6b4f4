"""README.md says what the code does (issue 22.6): its optional-features
table names exactly the features `chute version` knows (built in or
unavailable), so a feature added, removed or renamed in the binary fails
here until the README says so."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def readme_features():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"<!-- features:.*?-->(.*?)<!-- end features -->", text, re.S)
    assert m, "README.md has no features table between its markers"
    rows = [l for l in m.group(1).splitlines() if l.startswith("| ") and not l.startswith("| feature")]
    return [r.split("|")[1].strip() for r in rows]


def version_features():
    p = subprocess.run([sys.executable, "-m", "chute", "version"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    have, missing = [], []
    for line in p.stdout.splitlines():
        if line.startswith("features:"):
            have = line.split(":", 1)[1].split()
        elif line.startswith("unavailable:"):
            # "name (reason); name (reason);" -- a reason may hold ';' itself
            missing = re.findall(r"(?:^|\);)\s*([a-z0-9_]+) \(", line.split(":", 1)[1].strip())
    assert have, p.stdout
    return have, missing


def test_readme_feature_table_matches_chute_version():
    rows = readme_features()
    have, missing = version_features()
    assert len(rows) == len(set(rows)), "a feature is listed twice: %r" % rows
    assert set(rows) == set(have) | set(missing), (
        "README's features %r vs chute version's %r + unavailable %r"
        % (sorted(rows), sorted(have), sorted(missing)))
