#!/usr/bin/env python3
"""CPU cost of the live dashboard (`gpuwatch` in a terminal), and of nvitop on the same GPUs.

Both run against the NVML test double (crates/fake-nvml) with 8 GPUs x 64 processes whose PIDs
are 512 real `sleep` processes (so /proc enrichment runs for real), on one shared timeline
(FAKE_NVML_EPOCH). Each tool runs in a detached tmux session of 200x60 at a 1 s interval; after
a warm-up the script reads utime+stime of the tool's process from /proc/PID/stat (the main
PID's line covers all its threads) at the start and end of the window and prints the CPU time
as % of one core. One `tmux capture-pane -p` of each goes to target/tui-cpu/*.txt.

    python3 bench/tui_cpu.py [--window 60] [--warmup 5] [--with-nvitop] [--gpus 8] [--procs 64]

--with-nvitop: create target/nvitop-venv and `pip install nvitop` into it when nvitop is not
importable (from that venv or from this interpreter). Without the flag nvitop is measured only
when it is already importable. Needs tmux. Everything started here (tmux server on a private
socket, the sleeps) is killed at the end, also on error or Ctrl-C.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
OUTDIR = os.path.join(TARGET, "tui-cpu")
SOCKET = f"gpuwatch-tuicpu-{os.getpid()}"  # private tmux server: never touches the user's
CLK_TCK = os.sysconf("SC_CLK_TCK")
GPU_NAME = "NVIDIA H200"


def tmux(*args, check=True):
    return subprocess.run(
        ["tmux", "-L", SOCKET, *args], capture_output=True, text=True, check=check
    )


def cpu_ticks(pid):
    """utime + stime of PID (all threads), in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return int(fields[11]) + int(fields[12])


def children(pid):
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def find_tool_pid(pane_pid, marker):
    """The pane's process or its first descendant whose command line contains MARKER."""
    todo = [pane_pid]
    while todo:
        pid = todo.pop(0)
        if marker in cmdline(pid):
            return pid
        todo += children(pid)
    return None


def pane_text(session):
    return tmux("capture-pane", "-p", "-t", session, check=False).stdout


def write_scenario(path, pids, gpus, procs):
    lines = ["version = 1", 'description = "bench/tui_cpu.py: 8 GPUs x 64 sleeps"']
    for g in range(gpus):
        lines += [
            "[[gpu]]",
            f'name = "{GPU_NAME}"',
            f'pci_bus_id = "00000000:{0x18 + g:02X}:00.0"',
            'memory_total = "143771MiB"',
            'memory_reserved = "616MiB"',
            'base_used = "700MiB"',
            # Moving values, so that every refresh has something to redraw.
            "util_gpu = { linear = [[0, 20], [30, 95], [60, 20]], period = 60 }",
            "util_mem = { linear = [[0, 10], [20, 60], [40, 10]], period = 40 }",
            "temperature = { linear = [[0, 40], [30, 70], [60, 40]], period = 60 }",
            "power = { linear = [[0, 150], [30, 650], [60, 150]], period = 60 }",
        ]
        for p in range(procs):
            pid = pids[g * procs + p]
            lines += [
                "[[gpu.process]]",
                f"pid = {pid}",
                f'used = {{ linear = [[0, "{256 + p * 16}MiB"], [60, "{512 + p * 32}MiB"]], period = 60 }}',
                f"sm = {{ linear = [[0, {p % 50 + 1}], [30, {p % 50 + 40}], [60, {p % 50 + 1}]], period = 60 }}",
                f"mem = {p % 30 + 1}",
            ]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def nvitop_python(install):
    """A Python that can `import nvitop`, or (None, reason)."""
    venv_py = os.path.join(TARGET, "nvitop-venv", "bin", "python")
    for py in (venv_py, sys.executable):
        if os.path.exists(py) and subprocess.run(
            [py, "-c", "import nvitop"], capture_output=True
        ).returncode == 0:
            return py, None
    if not install:
        return None, "nvitop is not importable (pass --with-nvitop to install it into target/nvitop-venv)"
    print("installing nvitop into target/nvitop-venv ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", os.path.dirname(os.path.dirname(venv_py))], check=True)
    subprocess.run([venv_py, "-m", "pip", "install", "-q", "nvitop"], check=True)
    return venv_py, None


def measure(name, argv, env, marker, args):
    """Run ARGV in a detached 200x60 tmux session; return (cpu %, tmux server cpu %, pane text)."""
    session = f"tuicpu-{name}"
    tmux(
        "new-session", "-d", "-s", session, "-x", "200", "-y", "60",
        "env", *[f"{k}={v}" for k, v in env.items()], *argv,
    )
    pane_pid = int(tmux("list-panes", "-t", session, "-F", "#{pane_pid}").stdout.split()[0])
    deadline = time.monotonic() + 10
    pid = None
    while pid is None and time.monotonic() < deadline:
        pid = find_tool_pid(pane_pid, marker)
        if pid is None:
            time.sleep(0.1)
    if pid is None:
        raise RuntimeError(f"{name}: no process matching {marker!r} under pane {pane_pid}:\n{pane_text(session)}")
    time.sleep(args.warmup)
    dead = tmux("list-panes", "-t", session, "-F", "#{pane_dead} #{pane_dead_status}").stdout.split()
    if dead and dead[0] == "1":
        raise RuntimeError(f"{name} exited (status {dead[1:]}) during warm-up; its screen:\n{pane_text(session)}")
    server = int(tmux("display-message", "-p", "#{pid}").stdout.strip())
    t0, c0, s0 = time.monotonic(), cpu_ticks(pid), cpu_ticks(server)
    time.sleep(args.window)
    t1, c1, s1 = time.monotonic(), cpu_ticks(pid), cpu_ticks(server)
    text = pane_text(session)
    with open(os.path.join(OUTDIR, f"{name}.txt"), "w") as f:
        f.write(text)
    tmux("kill-session", "-t", session, check=False)
    wall = t1 - t0
    return (c1 - c0) / CLK_TCK / wall * 100, (s1 - s0) / CLK_TCK / wall * 100, text


def machine():
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} CPUs ({len(os.sched_getaffinity(0))} usable), {model}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=float, default=60, help="measurement window, seconds (60)")
    ap.add_argument("--warmup", type=float, default=5, help="warm-up before the window, seconds (5)")
    ap.add_argument("--with-nvitop", action="store_true", help="pip install nvitop into target/nvitop-venv if missing")
    ap.add_argument("--no-nvitop", action="store_true", help="measure gpuwatch only")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--procs", type=int, default=64, help="processes per GPU (64)")
    args = ap.parse_args()
    if not shutil.which("tmux"):
        sys.exit("tmux is required")

    # SIGTERM/SIGHUP run the same clean-up as Ctrl-C.
    def die(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, die)
    signal.signal(signal.SIGHUP, die)

    subprocess.run(
        ["cargo", "build", "--release", "--quiet", "-p", "gpuwatch", "-p", "fake-nvml"], cwd=ROOT, check=True
    )
    binary = os.path.join(TARGET, "release", "gpuwatch")
    lib = os.path.join(TARGET, "release", "libfake_nvml.so")
    os.makedirs(OUTDIR, exist_ok=True)

    py = None
    if not args.no_nvitop:
        py, why_not = nvitop_python(args.with_nvitop)
        if py is None:
            print(f"nvitop: skipped: {why_not}")

    sleepers = []
    tmp = tempfile.mkdtemp(prefix="tuicpu-")
    try:
        life = str(int(args.warmup + args.window) * 2 + 120)  # outlive both runs, but not forever
        sleepers = [subprocess.Popen(["sleep", life]) for _ in range(args.gpus * args.procs)]
        scenario = os.path.join(tmp, "scenario.toml")
        write_scenario(scenario, [s.pid for s in sleepers], args.gpus, args.procs)
        libdir = os.path.join(tmp, "lib")
        os.makedirs(libdir)
        for name in ("libnvidia-ml.so.1", "libnvidia-ml.so"):
            os.symlink(lib, os.path.join(libdir, name))
        with open(os.path.join(tmp, "tmux.conf"), "w") as f:
            f.write('set -g default-terminal "tmux-256color"\nset -g remain-on-exit on\nset -g status off\n')
        tmux("-f", os.path.join(tmp, "tmux.conf"), "start-server", ";", "new-session", "-d", "-s", "keep")
        env = {
            "FAKE_NVML_SCENARIO": scenario,
            "FAKE_NVML_EPOCH": f"{time.time():.3f}",
            "XDG_CONFIG_HOME": tmp,  # no user config
            "TERM": "tmux-256color",
        }

        print(f"machine: {machine()}")
        print(f"load: {args.gpus} GPUs x {args.procs} processes, 1 s interval, 200x60 tmux pane, "
              f"warm-up {args.warmup:g} s, window {args.window:g} s")

        gw_cpu, gw_tmux, gw_text = measure(
            "gpuwatch", [binary, "--interval", "1s"], dict(env, GPUWATCH_NVML_LIB=lib), binary, args
        )
        shown = len(re.findall(r"GPU +\d+ H200", gw_text))
        pids_shown = sum(1 for s in sleepers if re.search(rf"\b{s.pid}\b", gw_text))
        print(f"gpuwatch: {gw_cpu:.2f} % of one core (tmux server {gw_tmux:.2f} %); "
              f"screen: {shown} GPU panels, {pids_shown} sleep PIDs")
        assert shown >= args.gpus, f"gpuwatch shows {shown} GPUs, expected {args.gpus}; see {OUTDIR}/gpuwatch.txt"
        if pids_shown == 0:
            print(f"WARNING: gpuwatch's screen shows no scenario PID; see {OUTDIR}/gpuwatch.txt")

        if py is not None:
            nv_env = dict(env, LD_LIBRARY_PATH=libdir)
            try:
                nv_cpu, nv_tmux, nv_text = measure(
                    "nvitop", [py, "-m", "nvitop", "--monitor", "full", "--interval", "1"], nv_env, "nvitop", args
                )
            except RuntimeError as e:
                print(f"nvitop: could not be measured: {e}")
                probe = subprocess.run([py, "-m", "nvitop", "-1"], env=dict(os.environ, **nv_env),
                                       capture_output=True, text=True)
                print(f"`nvitop -1` on the double (rc {probe.returncode}):\n{probe.stdout}{probe.stderr}")
                raise
            shown = len(re.findall(r"│ +\d+ +H200 ", nv_text))
            pids_shown = sum(1 for s in sleepers if re.search(rf"\b{s.pid}\b", nv_text))
            assert shown >= args.gpus, f"nvitop shows {shown} GPUs, expected {args.gpus}; see {OUTDIR}/nvitop.txt"
            print(f"nvitop:   {nv_cpu:.2f} % of one core (tmux server {nv_tmux:.2f} %); "
                  f"screen: {shown} GPU rows, {pids_shown} sleep PIDs")
        print(f"screens: {OUTDIR}/gpuwatch.txt" + (f", {OUTDIR}/nvitop.txt" if py else ""))
    finally:
        tmux("kill-server", check=False)
        try:  # kill-server leaves the socket file behind
            os.unlink(os.path.join(os.environ.get("TMUX_TMPDIR", "/tmp"), f"tmux-{os.getuid()}", SOCKET))
        except OSError:
            pass
        for s in sleepers:
            s.kill()
        for s in sleepers:
            s.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
