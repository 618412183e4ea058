#!/usr/bin/env python3
"""CPU and memory of `gpuwatch daemon` at 1 Hz on 8 GPUs x 64 processes (the NVML test double,
512 real `sleep` PIDs), measured over a window after a warm-up: CPU % of one core (utime+stime
of the daemon from /proc/PID/stat, all threads) and RSS (VmRSS, max over the window).
Targets (issue 5): <= 0.3 % of one core, <= 20 MiB RSS.

    python3 bench/daemon_cost.py [--window 60] [--warmup 10] [--gpus 8] [--procs 64]
"""
import argparse
import os
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def rss_kib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=float, default=60)
    ap.add_argument("--warmup", type=float, default=10)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--procs", type=int, default=64)
    ap.add_argument("--trace", type=float, default=0, help="print CPU and RSS every N seconds")
    a = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "gpuwatch", "-p", "fake-nvml"], cwd=ROOT, check=True)
    binary = os.path.join(TARGET, "release", "gpuwatch")
    lib = os.path.join(TARGET, "release", "libfake_nvml.so")
    sleepers = [subprocess.Popen(["sleep", "3600"]) for _ in range(a.gpus * a.procs)]
    daemon = None
    try:
        lines = []
        for g in range(a.gpus):
            lines += ["[[gpu]]", 'memory_total = "143771MiB"', 'base_used = "700MiB"', "util_gpu = 80"]
            for p in range(a.procs):
                pid = sleepers[g * a.procs + p].pid
                lines += ["[[gpu.process]]", f"pid = {pid}", f'used = "{256 + p * 64}MiB"', f"sm = {p % 100}"]
        with tempfile.TemporaryDirectory() as tmp:
            scenario = os.path.join(tmp, "scenario.toml")
            with open(scenario, "w") as f:
                f.write("\n".join(lines) + "\n")
            env = dict(os.environ, GPUWATCH_NVML_LIB=lib, FAKE_NVML_SCENARIO=scenario,
                       FAKE_NVML_EPOCH=str(time.time()), XDG_CONFIG_HOME=tmp, XDG_STATE_HOME=tmp)
            daemon = subprocess.Popen([binary, "--interval", "1s", "daemon", "--listen", "127.0.0.1:0"], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(a.warmup)
            t0, c0 = time.monotonic(), cpu_ticks(daemon.pid)
            peak = 0
            last_trace, last_ticks = t0, c0
            while time.monotonic() - t0 < a.window:
                peak = max(peak, rss_kib(daemon.pid))
                now = time.monotonic()
                if a.trace and now - last_trace >= a.trace:
                    ticks = cpu_ticks(daemon.pid)
                    print(f"  +{now - t0:4.0f} s  CPU {(ticks - last_ticks) / CLK_TCK / (now - last_trace) * 100:.2f} %"
                          f"  RSS {rss_kib(daemon.pid) / 1024:.1f} MiB", flush=True)
                    last_trace, last_ticks = now, ticks
                time.sleep(1)
            t1, c1 = time.monotonic(), cpu_ticks(daemon.pid)
            anon, file = rss_kib(daemon.pid, "RssAnon"), rss_kib(daemon.pid, "RssFile")
            cpu = (c1 - c0) / CLK_TCK / (t1 - t0) * 100
            print(f"gpuwatch daemon, {a.gpus} GPUs x {a.procs} processes at 1 s, window {a.window:.0f} s: "
                  f"CPU {cpu:.2f} % of one core ({cpu * 36:.1f} CPU-seconds per hour), peak RSS {peak / 1024:.1f} MiB "
                  f"(at the end: {anon / 1024:.1f} MiB anonymous, {file / 1024:.1f} MiB file-backed: code and libraries)")
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait()
        for s in sleepers:
            s.kill()
        for s in sleepers:
            s.wait()


if __name__ == "__main__":
    main()
