"""`chute` and `python -m chute`: run the chute command bundled in the package.

The CLI is the C program built with libchute (chute/bin/chute), not a
Python re-implementation, so `chute bench` measures what the library does
and `pip install chute` gives the same pack/bench/inspect/doctor/iobench as
a CMake build.  This wrapper only finds it and replaces the Python process
with it (exec), so signals, exit codes and the terminal behave as if the
program had been started directly, and Python's start-up is the only cost.
`--prefix` prints the package directory (include/, lib/, lib/pkgconfig/)
for C users.
"""
import os
import sys


def cli_path() -> str:
    """Path of the bundled `chute` executable (it may be absent in a build
    that did not include it)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "chute")


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--prefix"]:
        print(os.path.dirname(os.path.abspath(__file__)))
        return 0
    exe = cli_path()
    if not os.access(exe, os.X_OK):
        sys.stderr.write("chute: the command-line tool is not part of this installation "
                         "(%s is missing); reinstall the package\n" % exe)
        return 127
    # `chute inspect/bench FILE.parquet` hands Parquet back to this package
    # (cli/parquet.c) through $CHUTE_PYTHON: this interpreter has it.
    os.environ.setdefault("CHUTE_PYTHON", sys.executable)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, ["chute"] + args)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
