"""Streams from Python (issue #13): chute.Loader("pipe:COMMAND").

The reference is the same webdataset-written tars read as files through the
"wds" format (tests/fixtures/fields/wds, ShardWriter output with real
JPEGs); a stream must give exactly those samples, in a seeded order.
"""
import os
import subprocess

import numpy as np
import pytest

import chute

FIX = os.path.join(os.path.dirname(__file__), "..", "fixtures", "fields", "wds")
TARS = [os.path.join(FIX, n) for n in ("fields-000000.tar", "fields-000001.tar")]
CMD = "pipe:cat " + " ".join(TARS)


def collect(path, **kw):
    kw.setdefault("batch_size", 2)
    kw.setdefault("size", 24)
    kw.setdefault("dtype", "uint8")
    kw.setdefault("transform", "eval")
    out = []
    with chute.Loader(path, return_indices=True, **kw) as ld:
        for x, y, i in ld:
            for k in range(len(i)):
                out.append((int(i[k]), int(y[k]), np.asarray(x[k]).copy()))
    return out


def test_pipe_stream_yields_the_wds_samples_and_has_no_len():
    got = collect(CMD, seed=3, shuffle_buffer=4)
    ref = {i: (y, x) for i, y, x in collect(FIX, shuffle=False)}
    assert sorted(i for i, _, _ in got) == list(range(6))
    for i, y, x in got:
        assert y == ref[i][0]
        assert np.array_equal(x, ref[i][1])
    ld = chute.Loader(CMD, batch_size=2, size=24)
    try:
        assert ld.dataset.is_stream
        with pytest.raises(TypeError):
            len(ld)
    finally:
        ld.close()


def test_stream_state_dict_resumes_by_skipping_batches():
    kw = dict(seed=9, shuffle_buffer=3, batch_size=2, size=24, dtype="uint8",
              transform="eval", return_indices=True)
    with chute.Loader(CMD, **kw) as ld:
        it = iter(ld)
        first = [int(v) for v in next(it)[2]]
        state = ld.state_dict()
        rest = [int(v) for b in it for v in b[2]]
    assert state["batches_consumed"] == 1 and state["num_batches"] is None
    with chute.Loader(CMD, **kw) as ld:
        ld.load_state_dict(state)
        resumed = [int(v) for b in ld for v in b[2]]
    assert resumed == rest
    assert sorted(first + rest) == list(range(6))


def test_failing_command_raises_with_status_and_stderr():
    cmd = "pipe:head -c 30000 %s; echo 'upstream gone' >&2; exit 3" % TARS[0]
    seen = []
    with pytest.raises(Exception) as e:
        with chute.Loader(cmd, batch_size=1, size=24, shuffle=False,
                          return_indices=True) as ld:
            for _, _, i in ld:
                seen.extend(int(v) for v in i)
    assert seen == [0, 1]
    assert "exited with status 3" in str(e.value) and "upstream gone" in str(e.value)


def test_stdin_stream_in_a_subprocess():
    code = ("import chute\n"
            "n = sum(len(y) for _, y in chute.Loader('-', batch_size=2, size=24))\n"
            "print(n)\n")
    env = dict(os.environ)
    import chute as c
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(c.__file__)) + os.pathsep + \
        env.get("PYTHONPATH", "")
    with open(TARS[0], "rb") as f:
        r = subprocess.run([os.sys.executable, "-c", code], stdin=f, capture_output=True,
                           text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "4"


def test_stream_timeout_and_samples_options_reach_the_loader():
    with chute.Loader(CMD + "; sleep 30", batch_size=2, size=24, stream_samples=3) as ld:
        assert sum(len(y) for _, y in ld) == 3  # the command is stopped, no error
    with pytest.raises(Exception) as e:
        with chute.Loader("pipe:sleep 30", batch_size=2, size=24,
                          stream_timeout_ms=200) as ld:
            list(ld)
    assert "no data for 200 ms" in str(e.value)
