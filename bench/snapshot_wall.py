#!/usr/bin/env python3
"""Wall time of `gpuwatch snapshot --json` against the NVML test double, 8 GPUs x 64 processes.

Target (issue 2): <= 50 ms. Builds the release binary and the double, starts 512 real `sleep`
processes (so /proc enrichment runs for real), writes a scenario naming their PIDs, then runs
the command RUNS times and prints min / median / p90 / max.

    python3 bench/snapshot_wall.py [RUNS] [GPUS] [PROCS]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 30
GPUS = int(sys.argv[2]) if len(sys.argv) > 2 else 8
PROCS = int(sys.argv[3]) if len(sys.argv) > 3 else 64
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    subprocess.run(
        ["cargo", "build", "--release", "--quiet", "-p", "gpuwatch", "-p", "fake-nvml"],
        cwd=ROOT,
        check=True,
    )
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    binary = os.path.join(target, "release", "gpuwatch")
    lib = os.path.join(target, "release", "libfake_nvml.so")
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(GPUS * PROCS)]
    try:
        lines = ["[clock]", "freeze = 30.0"]
        for g in range(GPUS):
            lines += ["[[gpu]]", 'memory_total = "143771MiB"', 'base_used = "700MiB"', "util_gpu = 80"]
            for p in range(PROCS):
                pid = sleepers[g * PROCS + p].pid
                lines += ["[[gpu.process]]", f"pid = {pid}", f'used = "{256 + p * 64}MiB"', f"sm = {p % 100}"]
        with tempfile.TemporaryDirectory() as tmp:
            scenario = os.path.join(tmp, "scenario.toml")
            with open(scenario, "w") as f:
                f.write("\n".join(lines) + "\n")
            env = dict(os.environ, GPUWATCH_NVML_LIB=lib, FAKE_NVML_SCENARIO=scenario, XDG_CONFIG_HOME=tmp)
            times = []
            for _ in range(RUNS + 2):
                start = time.perf_counter()
                out = subprocess.run([binary, "snapshot", "--json"], env=env, capture_output=True, check=True)
                times.append((time.perf_counter() - start) * 1e3)
            doc = json.loads(out.stdout)
            shown = sum(len(g["processes"]) for g in doc["gpus"])
            assert shown == GPUS * PROCS, f"expected {GPUS * PROCS} processes, got {shown}"
            assert all(p["visible"] for g in doc["gpus"] for p in g["processes"])
            times = sorted(times[2:])  # the first two runs warm the page cache
            p90 = times[int(len(times) * 0.9) - 1]
            print(
                f"snapshot --json, {GPUS} GPUs x {PROCS} processes, {RUNS} runs: "
                f"min {times[0]:.1f} ms, median {statistics.median(times):.1f} ms, "
                f"p90 {p90:.1f} ms, max {times[-1]:.1f} ms"
            )
    finally:
        for s in sleepers:
            s.kill()
        for s in sleepers:
            s.wait()


if __name__ == "__main__":
    main()
