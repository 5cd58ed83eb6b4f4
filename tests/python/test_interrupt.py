"""The GIL is released while waiting, Ctrl-C interrupts promptly, timeouts work."""
import _thread
import signal
import subprocess
import sys
import threading
import time

import pytest

import chute

SLOW = dict(batch_size=50, size=16, workers=1, read_delay_us=20000,
            readahead=0)  # ~1 s per batch: the worker waits for each read itself


def test_ctrl_c_interrupts_a_wait(tree):
    ld = chute.Loader(tree, **SLOW)
    timer = threading.Timer(0.3, _thread.interrupt_main)
    t0 = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            next(iter(ld))  # the first batch needs ~1 s
        elapsed = time.monotonic() - t0
    finally:
        timer.cancel()
    assert elapsed < 0.3 + 1.0  # generous: the wait polls every 100 ms
    # The loader is still usable afterwards.
    b = ld.next_batch(timeout=30)
    assert b is not None and b.count == 50


def test_sigint_in_a_subprocess(tree):
    code = ("import chute, sys\n"
            "ld = chute.Loader(sys.argv[1], batch_size=50, size=16, workers=1, "
            "read_delay_us=200000, readahead=0, as_torch=False)\n"
            "print('ready', flush=True)\n"
            "for _ in ld: pass\n")
    p = subprocess.Popen([sys.executable, "-c", code, tree], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=10)
        elapsed = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
    assert "KeyboardInterrupt" in err
    assert elapsed < 2.0


def test_other_threads_run_while_waiting(tree):
    ld = chute.Loader(tree, **SLOW)
    ticks = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    th = threading.Thread(target=spin)
    th.start()
    try:
        next(iter(ld))
    finally:
        stop.set()
        th.join()
    assert len(ticks) > 100  # the GIL was free during the ~1 s wait


def test_timeout(tree):
    ld = chute.Loader(tree, timeout=0.05, **SLOW)
    with pytest.raises(TimeoutError):
        next(iter(ld))


def test_concurrent_use_is_refused(tree):
    ld = chute.Loader(tree, **SLOW)
    errors = []
    it = iter(ld)

    def consume():
        try:
            next(it)
        except Exception as e:  # pragma: no cover
            errors.append(e)

    th = threading.Thread(target=consume)
    th.start()
    time.sleep(0.2)
    with pytest.raises(RuntimeError, match="another thread"):
        ld.next_batch()
    th.join()
    assert not errors
