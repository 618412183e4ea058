#!/usr/bin/env python3
"""Convert an H200 reference trace (the probe's JSON lines) into a gpuwatch recording.

Usage: h200-trace-to-recording.py TRACE.jsonl [OUT.recording.jsonl]
       h200-trace-to-recording.py --all TRACE_DIR OUT_DIR

The recording format is documented in docs/recording-format.md; the trace format in the
reference data's README. Python 3 standard library only.

Mapping, per trace line (one sample):
  taken_at        = unix_us / 1e6
  collect_seconds = sample_cost_us / 1e6
  per GPU: index; uuid (the trace has none: GPU-h200-reference-<index>); name "NVIDIA H200";
  memory {total, reserved, used, free}; util_gpu/util_mem; temperature_c; power_watts =
  power_mw / 1000; sm_clock_mhz; everything the trace does not record is null.
  processes: `procs` (compute, "C") and `gprocs` (graphics, "G") merged by pid ("C+G" when in
  both); used_bytes = bytes, or null for "unavailable"; gpu_instance/compute_instance from gi/ci
  (null when absent or 0xFFFFFFFF); sm_percent/mem_percent from the newest `putil` sample of that
  pid, 0 when the pid has none or putil is {"err": "NotFound"} (no samples in the window: the
  feature works), null when putil is any other error (which is also recorded in the GPU's errors);
  host = {"visible": false, everything else null}; sorted by used bytes (largest first,
  unavailable last), then pid.
"""

import json
import os
import sys

FORMAT = "gpuwatch-recording"
VERSION = 1
NOT_AVAILABLE_ID = 0xFFFFFFFF
HOST_UNKNOWN = {
    "visible": False,
    "name": None,
    "command": None,
    "user": None,
    "uid": None,
    "cpu_percent": None,
    "rss_bytes": None,
    "start_time": None,
    "ppid": None,
    "container": None,
}


def instance_id(value):
    if value is None or value == NOT_AVAILABLE_ID:
        return None
    return int(value)


def used_bytes(value):
    if value == "unavailable" or value is None:
        return None
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"unexpected process memory value {value!r}")
    return value


def merge_kind(old, new):
    return old if old == new else "C+G"


def convert_gpu(gpu):
    index = gpu["index"]
    uuid = gpu.get("uuid") or f"GPU-h200-reference-{index}"
    errors = []

    putil = gpu.get("putil")
    # pid -> (ts, sm, mem), newest sample per pid
    util_by_pid = {}
    util_default = 0.0
    if isinstance(putil, dict):
        err = putil.get("err")
        if err != "NotFound":
            util_default = None
            errors.append({"call": "process_utilization_stats", "error": str(err)})
    elif isinstance(putil, list):
        for s in putil:
            prev = util_by_pid.get(s["pid"])
            if prev is None or s["ts"] >= prev[0]:
                util_by_pid[s["pid"]] = (s["ts"], s["sm"], s["mem"])
    else:
        raise ValueError(f"unexpected putil {putil!r}")

    procs = {}
    for key, kind in (("procs", "C"), ("gprocs", "G")):
        for p in gpu.get(key, []):
            pid = p["pid"]
            if pid in procs:
                q = procs[pid]
                q["kind"] = merge_kind(q["kind"], kind)
                # the same context seen twice: keep a known value
                if q["used_bytes"] is None:
                    q["used_bytes"] = used_bytes(p["used"])
                continue
            u = util_by_pid.get(pid)
            if util_default is None:
                sm = mem = None
            elif u is None:
                sm = mem = 0.0
            else:
                sm, mem = float(u[1]), float(u[2])
            procs[pid] = {
                "pid": pid,
                "kind": kind,
                "used_bytes": used_bytes(p["used"]),
                "sm_percent": sm,
                "mem_percent": mem,
                "gpu_instance": instance_id(p.get("gi")),
                "compute_instance": instance_id(p.get("ci")),
                "host": dict(HOST_UNKNOWN),
            }
    processes = sorted(
        procs.values(),
        key=lambda p: (-(p["used_bytes"] if p["used_bytes"] is not None else -1), p["pid"]),
    )

    mem = gpu["mem"]
    util = gpu.get("util") or {}
    power_mw = gpu.get("power_mw")
    return {
        "index": index,
        "uuid": uuid,
        "name": "NVIDIA H200",
        "pci_bus_id": None,
        "memory": {
            "total": mem["total"],
            "reserved": mem.get("reserved"),
            "used": mem["used"],
            "free": mem["free"],
        },
        "util_gpu": None if util.get("gpu") is None else float(util["gpu"]),
        "util_mem": None if util.get("mem") is None else float(util["mem"]),
        "temperature_c": gpu.get("temp"),
        "temp_slowdown_c": None,
        "power_watts": None if power_mw is None else power_mw / 1000,
        "power_limit_watts": None,
        "sm_clock_mhz": gpu.get("clock_sm"),
        "slow": {
            "pcie_rx_bytes_per_s": None,
            "pcie_tx_bytes_per_s": None,
            "energy_joules": None,
            "ecc_uncorrected": None,
            "mem_clock_mhz": None,
            "taken_at": None,
        },
        "mig_mode": None,
        "mig_devices": [],
        "lost": False,
        "processes": processes,
        "errors": errors,
    }


def convert_line(obj):
    return {
        "taken_at": obj["unix_us"] / 1e6,
        "gpus": [convert_gpu(g) for g in obj["gpus"]],
        "errors": [],
        "collect_seconds": obj["sample_cost_us"] / 1e6,
    }


def dumps(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def convert(trace_path, out_path):
    with open(trace_path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    if not lines:
        raise ValueError(f"{trace_path}: empty trace")
    first = lines[0]
    header = {
        "format": FORMAT,
        "version": VERSION,
        "source": {
            "kind": "live",
            "host": "h200-reference",
            "driver_version": "580.159.04",
            "cuda_version": "13.0",
            "nvml_version": None,
            "detail": f"converted from {os.path.basename(trace_path)} "
            "(H200 reference trace, tools/h200-trace-to-recording.py)",
        },
        "interval_ms": 250,
        # the probe's `t` counts from its start
        "started_at": round((first["unix_us"] - first["t"] * 1e6) / 1e6, 6),
    }
    previous = None
    with open(out_path, "w", encoding="utf-8", newline="\n") as out:
        out.write(dumps(header) + "\n")
        for n, obj in enumerate(lines, start=1):
            if previous is not None and obj["unix_us"] < previous:
                raise ValueError(f"{trace_path}:{n}: time goes backwards")
            previous = obj["unix_us"]
            out.write(dumps(convert_line(obj)) + "\n")
    return len(lines)


def recording_name(trace_path):
    base = os.path.basename(trace_path)
    if base.startswith("trace-"):
        base = base[len("trace-"):]
    if base.endswith(".jsonl"):
        base = base[: -len(".jsonl")]
    return base + ".recording.jsonl"


def main(argv):
    if len(argv) == 3 and argv[0] == "--all":
        src, dst = argv[1], argv[2]
        os.makedirs(dst, exist_ok=True)
        for name in sorted(os.listdir(src)):
            if name.startswith("trace-") and name.endswith(".jsonl"):
                out = os.path.join(dst, recording_name(name))
                n = convert(os.path.join(src, name), out)
                print(f"{name} -> {out} ({n} samples)")
        return 0
    if len(argv) in (1, 2) and not argv[0].startswith("-"):
        out = argv[1] if len(argv) == 2 else recording_name(argv[0])
        n = convert(argv[0], out)
        print(f"{argv[0]} -> {out} ({n} samples)")
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
