#!/usr/bin/env python3
"""test_parse_fixtures.py — the format parsers against files written by the
real tools (TensorFlow's TFRecordWriter, webdataset's TarWriter/ShardWriter,
Python's tarfile in GNU and PAX formats; see tests/fixtures/make_fixtures.py).

Expected values come from tests/fixtures/expected.json, which the fixture
script wrote from the tools' own inputs; what chute reads comes from
tests/tools/parsedump.  Needs only the standard library.

    test_parse_fixtures.py --parsedump BUILD/tests/parsedump --fixtures tests/fixtures
"""
import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys


def run(pd, *args, ok=True):
    p = subprocess.run([pd, *args], capture_output=True, text=True,
                       timeout=float(os.environ.get("CHUTE_TEST_RUN_TIMEOUT", "45")))
    if p.returncode not in (0, 1) or p.stderr:
        sys.exit("parsedump %s: exit %d\n%s" % (" ".join(args), p.returncode, p.stderr))
    out = json.loads(p.stdout)
    if ok and "error" in out:
        sys.exit("parsedump %s: %s" % (" ".join(args), out))
    return out


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def check_features(where, got, want):
    for key, w in want.items():
        g = got[key]
        assert g["kind"] == w["kind"], (where, key, g, w)
        assert g["count"] == len(w["values"]), (where, key)
        if w["kind"] == "float":
            assert [f32(v) for v in g["values"]] == [f32(v) for v in w["values"]], (where, key)
        else:
            assert g["values"] == w["values"], (where, key, g["values"], w["values"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parsedump", required=True)
    ap.add_argument("--fixtures", required=True)
    a, _ = ap.parse_known_args()
    fx = a.fixtures
    exp = json.load(open(os.path.join(fx, "expected.json")))
    checked = 0
    specs = {"image": "bytes", "names": "bytes", "label": "int64", "ints": "int64",
             "floats": "float", "empty_f": "float"}
    for fname, e in sorted(exp["tfrecord"].items()):
        if "dali_index_of" in e:
            got = run(a.parsedump, "dali", os.path.join(fx, fname),
                      os.path.join(fx, e["dali_index_of"]))
            want = exp["tfrecord"][e["dali_index_of"]]["records"]
            assert [(r["offset"], r["length"]) for r in got["records"]] == \
                [(r["offset"], r["length"]) for r in want], fname
            checked += 1
            continue
        recs = e.get("records") or exp["tfrecord"][e["records_as"]]["records"]
        keys = sorted(recs[0]["features"])
        comp = e["compression"].lower()
        got = run(a.parsedump, "tfr", os.path.join(fx, fname), comp, *keys)
        assert len(got["records"]) == len(recs), (fname, len(got["records"]), len(recs))
        for i, (g, w) in enumerate(zip(got["records"], recs)):
            assert (g["offset"], g["length"]) == (w["offset"], w["length"]), (fname, i, g, w)
            check_features("%s#%d" % (fname, i), g["features"], w["features"])
        # A key that is not there is reported missing, not an error.
        got = run(a.parsedump, "tfr", os.path.join(fx, fname), comp, "no-such-key")
        assert all(r["features"]["no-such-key"]["kind"] == "missing" for r in got["records"])
        checked += 1
        print("ok %s: %d records" % (fname, len(recs)))
    for fname, e in sorted(exp["tar"].items()):
        path = os.path.join(fx, fname)
        got = run(a.parsedump, "tar", path)
        gm = [(m["name"], m["data_offset"], m["size"],
               hashlib.sha256(bytes.fromhex(m["data"])).hexdigest()) for m in got["members"]]
        wm = [(m["name"], m["data_offset"], m["size"], m["sha256"]) for m in e["members"]]
        assert gm == wm, (fname, gm, wm)
        strict = run(a.parsedump, "wds", path, "strict", ok=False)
        lenient = run(a.parsedump, "wds", path, "lenient")
        def samples(out):
            return [{"key": s["key"], "fields": {k.lower(): hashlib.sha256(bytes.fromhex(v)).hexdigest()
                                                  for k, v in s["fields"].items()}}
                    for s in out["samples"]]
        if e["policy_strict"] == "ok":
            assert "error" not in strict, (fname, strict)
            assert samples(strict) == e["samples"], (fname, samples(strict), e["samples"])
        else:
            assert strict.get("error") == "CHUTE_ECORRUPT", (fname, strict)
            assert fname in strict["message"], strict
        want_lenient = e.get("samples") or e.get("lenient_samples")
        assert samples(lenient) == want_lenient, (fname, samples(lenient), want_lenient)
        assert lenient["split"] == e.get("split", 0), (fname, lenient)
        assert lenient["duplicates"] == e.get("duplicates", 0), (fname, lenient)
        checked += 1
        print("ok %s: %d members, %d samples" % (fname, len(gm), len(lenient["samples"])))
    names = exp["names"]
    got = run(a.parsedump, "split", "-", *[n["name"] for n in names])
    for n, g in zip(names, got):
        assert g == [n["key"], n["ext"], n["meta"]], (n, g)
    assert len(got) == len(names)
    print("ok base_plus_ext and the meta rule on %d awkward names" % len(names))
    if checked < 10:
        sys.exit("only %d fixtures checked" % checked)
    print("%d fixture files match what the tools wrote" % checked)


if __name__ == "__main__":
    main()
