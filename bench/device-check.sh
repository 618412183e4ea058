#!/usr/bin/env bash
# Real-driver check, for a machine with an NVIDIA GPU (one prepared run, a few minutes).
# Expects the release binary at .device/gpuwatch and the benchmark at .device/sample-bench
# (built on the development machine: see the closing note of issue 2), writes to $OUT.
#   OUT=/tmp/out bash bench/device-check.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpuwatch-device}
mkdir -p "$OUT"
BIN=.device/gpuwatch
log() { echo "== $*"; }

log "nvidia-smi"; nvidia-smi | head -20
cat > /tmp/work.py <<'PY'
import sys, time, torch
mode, secs = sys.argv[1], float(sys.argv[2])
print(mode, "pid", __import__("os").getpid(), flush=True)
if mode == "idle":            # holds 8 GiB and does nothing
    x = torch.empty(8 << 30, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize(); time.sleep(secs)
else:                         # trains: matmuls, and keeps 256 MiB more every 0.5 s (a slow leak)
    a = torch.randn(8192, 8192, device="cuda"); keep = []; t0 = time.time()
    while time.time() - t0 < secs:
        for _ in range(10):
            b = a @ a
        torch.cuda.synchronize()
        if len(keep) < 60 and int((time.time() - t0) * 2) > len(keep):
            keep.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
PY
python3 /tmp/work.py idle 150 > "$OUT/work-idle.log" 2>&1 &
python3 /tmp/work.py train 150 > "$OUT/work-train.log" 2>&1 &
sleep 12
log "gpuwatch snapshot --json vs nvidia-smi (back to back)"
$BIN snapshot --json > "$OUT/snapshot.json"; echo "exit $?"
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv > "$OUT/smi-apps.csv"
nvidia-smi --query-gpu=index,uuid,memory.total,memory.reserved,memory.used,memory.free,utilization.gpu,temperature.gpu,power.draw --format=csv > "$OUT/smi-gpu.csv"
cat "$OUT/smi-apps.csv" "$OUT/smi-gpu.csv"
NO_COLOR=1 $BIN snapshot | tee "$OUT/snapshot.txt"
$BIN pick; $BIN pick --min-free 200GiB; echo "pick exit $?"
log "snapshot --json wall time, 20 runs"
python3 - "$BIN" <<'PY' | tee "$OUT/snapshot-wall.txt"
import subprocess, sys, time, statistics
t = []
for _ in range(22):
    s = time.perf_counter(); subprocess.run([sys.argv[1], "snapshot", "--json"], capture_output=True, check=True)
    t.append((time.perf_counter() - s) * 1e3)
t = sorted(t[2:]); print(f"snapshot --json on the real driver: min {t[0]:.1f} ms, median {statistics.median(t):.1f} ms, max {t[-1]:.1f} ms")
PY
log "record 12 s at 250 ms (slow readings included)"
$BIN record --interval 250ms --duration 12s "$OUT/real.recording.jsonl"; echo "exit $?"
log "benchmark: one fast sample on the real driver"
GPUWATCH_BENCH_REAL=1 .device/sample-bench --bench --warm-up-time 1 --measurement-time 5 2>&1 | grep -E "real driver|time:|fast sample" | tee "$OUT/bench-real.txt"
wait
log "done"
