#!/usr/bin/env python3
"""Load on the daemon's HTTP side: RATE `/metrics` scrapes per second for SECONDS (loopback,
bounded: a fixed number of requests), while the daemon samples 8 GPUs x 64 processes on the
NVML test double at 1 s. Reports scrape latency percentiles and the fast sample cadence during
the load (from the `taken_at` of `/api/v1/snapshot`), against the same cadence without load.
Target (issue 5): the cadence is not delayed by more than 10 %.

    python3 bench/metrics_load.py [--rate 200] [--seconds 30]
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def cadence(port, seconds):
    """Gaps between distinct samples seen over `seconds` (polling every 50 ms)."""
    seen, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        status, body = get(port, "/api/v1/snapshot")
        if status == 200:
            t = json.loads(body)["taken_at_unix"]
            if not seen or t != seen[-1]:
                seen.append(t)
        time.sleep(0.05)
    return [b - a for a, b in zip(seen, seen[1:])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=200)
    ap.add_argument("--seconds", type=int, default=30)
    a = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "gpuwatch", "-p", "fake-nvml"], cwd=ROOT, check=True)
    binary = os.path.join(TARGET, "release", "gpuwatch")
    lib = os.path.join(TARGET, "release", "libfake_nvml.so")
    sleepers = [subprocess.Popen(["sleep", "3600"]) for _ in range(512)]
    daemon = None
    try:
        lines = []
        for g in range(8):
            lines += ["[[gpu]]", 'memory_total = "143771MiB"', "util_gpu = 80"]
            for p in range(64):
                lines += ["[[gpu.process]]", f"pid = {sleepers[g * 64 + p].pid}", f'used = "{256 + p * 64}MiB"', f"sm = {p % 100}"]
        with tempfile.TemporaryDirectory() as tmp:
            sc = os.path.join(tmp, "s.toml")
            with open(sc, "w") as f:
                f.write("\n".join(lines) + "\n")
            env = dict(os.environ, GPUWATCH_NVML_LIB=lib, FAKE_NVML_SCENARIO=sc, XDG_CONFIG_HOME=tmp, XDG_STATE_HOME=tmp)
            daemon = subprocess.Popen([binary, "--interval", "1s", "daemon", "--listen", "127.0.0.1:0", "--no-history"],
                                      env=env, stderr=subprocess.PIPE, text=True)
            port = None
            for line in daemon.stderr:
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
                if m:
                    port = int(m.group(1))
                    break
            threading.Thread(target=lambda: [None for _ in daemon.stderr], daemon=True).start()
            time.sleep(5)
            idle = cadence(port, 10)
            latencies, stop = [], threading.Event()

            def load():
                total = a.rate * a.seconds
                start = time.monotonic()
                for i in range(total):
                    due = start + i / a.rate
                    now = time.monotonic()
                    if due > now:
                        time.sleep(due - now)
                    t0 = time.perf_counter()
                    status, _ = get(port, "/metrics")
                    latencies.append((time.perf_counter() - t0) * 1000)
                    assert status == 200
                stop.set()

            loader = threading.Thread(target=load)
            loader.start()
            busy = cadence(port, a.seconds - 2)
            loader.join()
            lat = sorted(latencies)
            pct = lambda q: lat[min(len(lat) - 1, int(len(lat) * q))]
            achieved = len(lat) / a.seconds
            print(f"/metrics under load: {len(lat)} scrapes ({achieved:.0f}/s asked {a.rate}/s), latency "
                  f"p50 {pct(0.5):.2f} ms, p90 {pct(0.9):.2f} ms, p99 {pct(0.99):.2f} ms, max {lat[-1]:.2f} ms")
            mi, mb = statistics.mean(idle), statistics.mean(busy)
            print(f"fast cadence: idle mean {mi:.3f} s (max {max(idle):.3f}), under load mean {mb:.3f} s "
                  f"(max {max(busy):.3f}): {100 * (mb - mi) / mi:+.1f} %")
    finally:
        if daemon:
            daemon.terminate()
            daemon.wait()
        for s in sleepers:
            s.kill()
        for s in sleepers:
            s.wait()


if __name__ == "__main__":
    main()
