#!/usr/bin/env bash
# Instructions per byte of `gpuwatch explain` over two generated logs (8 MiB of 80-byte step
# lines; 8 MiB of a training log with tqdm bars, ANSI warnings and handled tracebacks, an OOM
# at the end), counted by valgrind's callgrind: a count, not a timing, so two builds compare
# on a busy machine. Kernel time (the reads) is not in it. The fixed cost (start-up, compiling the
# regexes a log's final OOM needs, the diagnosis) is counted on that OOM line alone and taken
# out of the per-byte figure.
#
#   bench/triage_instructions.sh [OTHER_GPUWATCH]   # this tree's release build, and another
#
# Needs valgrind (Debian/Ubuntu: apt-get install valgrind). Builds target/release/gpuwatch.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
cargo build --release --quiet -p gpuwatch --manifest-path "$root/Cargo.toml"
bins=("${CARGO_TARGET_DIR:-$root/target}/release/gpuwatch")
if [ $# -ge 1 ]; then
  [ -x "$1" ] || { echo "$1: not an executable file" >&2; exit 2; }
  bins+=("$1")
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp" <<'PY'
import sys
d = sys.argv[1]; n = 8 << 20
oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 0 has a total capacity of 139.80 GiB of which 5.94 MiB is free.\n"
with open(f"{d}/short.log", "w") as f:
    i = 0; size = 0
    while size < n:
        i += 1
        f.write(f"step {i} loss={1.0/i:.4f} lr=3.0e-4 tokens/s=48211 alloc=61.22GiB reserved=64GiB".ljust(79)[:79] + "\n"); size += 80
    f.write(oom)
with open(f"{d}/train.log", "w") as f:
    size = 0; step = 0
    while size < n:
        step += 1
        s = f"2026-11-29 18:44:{step%60:02d} | INFO | train.py:88 | epoch 3 step {step} loss={1.0/step:.4f} lr=3.0e-4 grad_norm=0.91 tokens/s=48211 mem alloc=61.22GiB reserved=64.00GiB\n"
        if step % 7 == 0:
            s += "\r 45%|\u2588\u2588\u2588\u2588\u258c     | 450/1000 [00:12<00:15, 36.1it/s]\r 46%|\u2588\u2588\u2588\u2588\u258b     | 460/1000 [00:12<00:14, 36.2it/s]\n"
        if step % 11 == 0:
            s += "\x1b[33mWARNING\x1b[0m torch/utils/data/dataloader.py:557: UserWarning: This DataLoader will create 8 worker processes in total.\n"
        if step % 97 == 0:
            s += "Traceback (most recent call last):\n  File \"/opt/venv/lib/python3.12/site-packages/datasets/load.py\", line 10, in load\n    raise KeyError(k)\nKeyError: 'label'\n"
        f.write(s); size += len(s.encode())
    f.write(oom)
with open(f"{d}/oom.log", "w") as f:
    f.write(oom)
PY
count() { valgrind --tool=callgrind --callgrind-out-file=/dev/null "$1" explain "$2" 2>&1 >/dev/null | awk '/Collected/ {print $4}'; }
for b in "${bins[@]}"; do
  fixed=$(count "$b" "$tmp/oom.log")
  printf '%-40s fixed cost %12s instructions\n' "$b" "$fixed"
  for log in short train; do
    bytes=$(stat -c %s "$tmp/$log.log")
    n=$(count "$b" "$tmp/$log.log")
    printf '  %-6s %12s instructions, %6.2f per byte beyond the fixed cost\n' "$log" "$n" \
      "$(echo "($n - $fixed) / $bytes" | bc -l)"
  done
done
