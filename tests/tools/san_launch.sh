#!/bin/sh
# san_launch.sh PROBE COMMAND... — run COMMAND in a sanitizer build.
#
# Sanitizer runtimes (TSan above all) refuse to start on kernels whose
# address-space randomisation leaves them no room ("FATAL: ThreadSanitizer:
# unexpected memory mapping", typically vm.mmap_rnd_bits > 28).  Run the
# probe plainly; if it cannot start, retry without ASLR (setarch -R, which
# child processes inherit); if that fails too, skip the test (exit 77).
probe="$1"
shift
if "$probe" >/dev/null 2>&1; then
    exec "$@"
fi
arch=$(uname -m)
if command -v setarch >/dev/null 2>&1 && setarch "$arch" -R "$probe" >/dev/null 2>&1; then
    exec setarch "$arch" -R "$@"
fi
echo "skipped: sanitizer runtime cannot start on this kernel" \
     "(vm.mmap_rnd_bits=$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo '?'));" \
     "try: sudo sysctl vm.mmap_rnd_bits=28" >&2
"$probe" 2>&1 | head -3 >&2
exit 77
