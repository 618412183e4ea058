#!/usr/bin/env python3
"""CPU cost of the live dashboard (`gpuwatch` in a terminal), against nvtop's and nvitop's on the same GPUs.

Every tool runs against the NVML test double (crates/fake-nvml) with 8 GPUs x 50 processes whose
PIDs are 400 real `sleep` processes (so /proc enrichment runs for real). Every run starts at the
scenario's time 0 (FAKE_NVML_EPOCH is set when its session starts), so every tool is measured over
the same stretch of the timeline. Each tool runs in a detached tmux session of 200x60 at a 1 s
interval (gpuwatch --interval 1s, nvtop -d 10, nvitop --interval 1); after a warm-up the script
reads utime+stime of the tool's process from /proc/PID/stat (the main PID's line covers all its
threads) at the start and end of the window and prints the CPU time as % of one core. Each tool
is measured --repeats times, the tools taking turns, in reverse order every other round (so a
noisy neighbour or a drift hits all of them alike), and the median is reported. One `tmux capture-pane -p` of each tool's last run goes to
target/tui-cpu/*.txt.

    python3 bench/tui_cpu.py [--window 60] [--warmup 10] [--repeats 3] [--with-nvtop]
                             [--with-nvitop] [--threads] [--gpuwatch PATH] [--compare PATH]
                             [--gpus 8] [--procs 50]

--with-nvtop: measure nvtop (it loads the double as libnvidia-ml.so.1 through LD_LIBRARY_PATH);
nvtop must be installed (Debian/Ubuntu: `apt-get install nvtop`, in Debian's contrib component);
without it the script stops with a message saying so before measuring anything.
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
import statistics
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


def cpu_split(pid):
    """(utime, stime) of PID (all threads), in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return int(fields[11]), int(fields[12])


def cpu_ticks(pid):
    """utime + stime of PID (all threads), in clock ticks."""
    return sum(cpu_split(pid))


def thread_ticks(pid):
    """{thread name: utime + stime} over PID's threads (threads of one name summed)."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                head, tail = f.read().rsplit(")", 1)
        except OSError:
            continue  # the thread ended
        name = head.split("(", 1)[1]
        fields = tail.split()
        out[name] = out.get(name, 0) + int(fields[11]) + int(fields[12])
    return out


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
    lines = ["version = 1", f'description = "bench/tui_cpu.py: {gpus} GPUs x {procs} sleeps"']
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


def nvtop_binary():
    """The nvtop executable and its version line, or (None, reason)."""
    path = shutil.which("nvtop")
    if path is None:
        return None, ("nvtop is not installed (Debian/Ubuntu: `apt-get install nvtop`; on Debian "
                      "the package is in the contrib component)")
    probe = subprocess.run([path, "--version"], capture_output=True, text=True)
    return path, (probe.stdout or probe.stderr).strip()


def start(name, argv, env, marker, epoch):
    """Start ARGV in a detached 200x60 tmux session; return (name, session, pid of the tool)."""
    session = f"tuicpu-{name}"
    env = dict(env, FAKE_NVML_EPOCH=f"{epoch:.3f}")
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
    return name, session, pid


def callgrind_total(path_prefix):
    """Instructions counted in the newest callgrind dump whose name starts with PATH_PREFIX."""
    dumps = sorted(
        (p for p in os.listdir(os.path.dirname(path_prefix))
         if p.startswith(os.path.basename(path_prefix)) and not p.endswith(".0")),
        key=lambda p: os.path.getmtime(os.path.join(os.path.dirname(path_prefix), p)),
    )
    for p in reversed(dumps):
        with open(os.path.join(os.path.dirname(path_prefix), p)) as f:
            for line in f:
                if line.startswith("summary:"):
                    return int(line.split()[1])
    raise RuntimeError(f"no callgrind dump with a summary at {path_prefix}*")


def measure(runs, args, cg_prefix=None):
    """Run each (name, argv, env, marker) of RUNS in its own detached 200x60 tmux session, all
    started together, and measure them over one window. Return {name: (cpu %, tmux server cpu %,
    pane text, instructions per second or None, the kernel's part of the cpu %)}.

    Every measurement starts at the scenario's time 0 (FAKE_NVML_EPOCH is now), so each tool is
    measured over the same stretch of the timeline: the same memory ramps, the same trends for a
    detector to find. Runs measured together (two gpuwatch builds) also share their neighbours'
    noise. CG_PREFIX: the runs are under callgrind, whose counters are zeroed at the start of the
    window and dumped at its end (to files starting with CG_PREFIX + name)."""
    epoch = time.time()
    started = [start(name, argv, env, marker, epoch) for name, argv, env, marker in runs]
    try:
        time.sleep(args.warmup)
        for name, session, _ in started:
            dead = tmux("list-panes", "-t", session, "-F", "#{pane_dead} #{pane_dead_status}").stdout.split()
            if dead and dead[0] == "1":
                raise RuntimeError(f"{name} exited (status {dead[1:]}) during warm-up; its screen:\n{pane_text(session)}")
        server = int(tmux("display-message", "-p", "#{pid}").stdout.strip())
        if cg_prefix:
            for _, _, pid in started:
                subprocess.run(["callgrind_control", "-z", str(pid)], capture_output=True, check=True)
        t0, s0 = time.monotonic(), cpu_ticks(server)
        c0 = {name: (cpu_split(pid), thread_ticks(pid)) for name, _, pid in started}
        time.sleep(args.window)
        t1, s1 = time.monotonic(), cpu_ticks(server)
        c1 = {name: (cpu_split(pid), thread_ticks(pid)) for name, _, pid in started}
        if cg_prefix:
            for _, _, pid in started:
                subprocess.run(["callgrind_control", "-d", str(pid)], capture_output=True, check=True)
        wall = t1 - t0
        out = {}
        for name, session, _ in started:
            text = pane_text(session)
            with open(os.path.join(OUTDIR, f"{name}.txt"), "w") as f:
                f.write(text)
            instr = callgrind_total(cg_prefix + name) / wall if cg_prefix else None
            user, system = ((c1[name][0][k] - c0[name][0][k]) / CLK_TCK / wall * 100 for k in (0, 1))
            out[name] = (user + system, (s1 - s0) / CLK_TCK / wall * 100, text, instr, system)
            if args.threads:
                # Threads that ended during the window are missing: the total above is authoritative.
                th0, th1 = c0[name][1], c1[name][1]
                per = {n: (th1[n] - th0.get(n, 0)) / CLK_TCK / wall * 100 for n in th1}
                busy = sorted(per.items(), key=lambda kv: -kv[1])
                print(f"  {name} threads: " + ", ".join(f"{n} {c:.2f} %" for n, c in busy if c > 0), flush=True)
        return out
    finally:
        for _, session, _ in started:
            tmux("kill-session", "-t", session, check=False)


def machine():
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} CPUs ({len(os.sched_getaffinity(0))} usable), {model}"


def median_line(name, runs):
    cpus = [c for c, _ in runs]
    servers = [t for _, t in runs]
    return (f"{name:<12} {statistics.median(cpus):6.2f} % of one core, median of {len(cpus)} "
            f"(runs: {', '.join(f'{c:.2f}' for c in cpus)}; tmux server median "
            f"{statistics.median(servers):.2f} %)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=float, default=60, help="measurement window, seconds (60)")
    ap.add_argument("--warmup", type=float, default=10, help="warm-up before the window, seconds (10)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each tool; the median is reported (3)")
    ap.add_argument("--with-nvtop", action="store_true", help="also measure nvtop (must be installed)")
    ap.add_argument("--with-nvitop", action="store_true", help="pip install nvitop into target/nvitop-venv if missing")
    ap.add_argument("--no-nvitop", action="store_true", help="do not measure nvitop even when importable")
    ap.add_argument("--gpuwatch", metavar="PATH",
                    help="measure this gpuwatch binary (e.g. an older build) instead of building target/release")
    ap.add_argument("--compare", metavar="PATH",
                    help="also measure this other gpuwatch build (e.g. the one before a change) in the same rotation")
    ap.add_argument("--threads", action="store_true", help="also print each tool's CPU per thread name")
    ap.add_argument("--callgrind", action="store_true",
                    help="then count each gpuwatch build's user-space instructions under valgrind's callgrind")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--procs", type=int, default=50, help="processes per GPU (50)")
    args = ap.parse_args()
    if args.repeats < 1 or args.window <= 0 or args.warmup < 0 or args.gpus < 1 or args.procs < 1:
        sys.exit("--repeats, --window, --gpus and --procs must be positive, --warmup not negative")
    if args.gpus > 200:
        sys.exit("--gpus: at most 200 (PCI bus ids 0x18..0xDF)")
    if not shutil.which("tmux"):
        sys.exit("tmux is required")
    if args.callgrind and not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        sys.exit("--callgrind: valgrind is not installed (Debian/Ubuntu: `apt-get install valgrind`)")
    nvtop = None
    if args.with_nvtop:
        nvtop, about = nvtop_binary()
        if nvtop is None:
            sys.exit(f"--with-nvtop: {about}")

    # SIGTERM/SIGHUP run the same clean-up as Ctrl-C.
    def die(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, die)
    signal.signal(signal.SIGHUP, die)

    if args.gpuwatch:
        binary = os.path.abspath(args.gpuwatch)
        if not os.access(binary, os.X_OK):
            sys.exit(f"--gpuwatch: {binary} is not an executable file")
        # This tree's double, for every tool (an older one may lack what nvtop needs).
        subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "fake-nvml"], cwd=ROOT, check=True)
        lib = os.path.join(TARGET, "release", "libfake_nvml.so")
    else:
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
        windows = args.repeats * (1 + (nvtop is not None) + (py is not None)) + args.callgrind
        # Outlive every run, but not forever.
        life = str(int((args.warmup + args.window + 15) * windows) + 120)
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
            "XDG_CONFIG_HOME": tmp,  # no user config
            "TERM": "tmux-256color",
        }
        # The other tools find the double by its library name.
        peer_env = dict(env, LD_LIBRARY_PATH=libdir)

        print(f"machine: {machine()}")
        print(f"load: {args.gpus} GPUs x {args.procs} processes, 1 s interval, 200x60 tmux pane, "
              f"warm-up {args.warmup:g} s, window {args.window:g} s, {args.repeats} run(s) each")
        if nvtop is not None:
            print(f"nvtop: {nvtop} ({about})")

        gw_env = dict(env, GPUWATCH_NVML_LIB=lib)

        def check_gpuwatch(name, text):
            shown = len(re.findall(r"GPU +\d+ H200", text))
            pids_shown = sum(1 for s in sleepers if re.search(rf"\b{s.pid}\b", text))
            assert shown >= args.gpus, f"{name} shows {shown} GPUs, expected {args.gpus}; see {OUTDIR}/{name}.txt"
            if pids_shown == 0:
                print(f"WARNING: {name}'s screen shows no scenario PID; see {OUTDIR}/{name}.txt")
            return f"{shown} GPU panels, {pids_shown} sleep PIDs"

        def check_nvtop(name, text):
            shown = len(re.findall(r"Device +\d+ \[NVIDIA H200\]", text))
            pids_shown = sum(1 for s in sleepers if re.search(rf"\b{s.pid}\b", text))
            assert shown >= args.gpus, (f"nvtop shows {shown} GPUs, expected {args.gpus} (does the double "
                                        f"export every symbol nvtop needs?); see {OUTDIR}/nvtop.txt")
            if pids_shown == 0:
                print(f"WARNING: nvtop's screen shows no scenario PID; see {OUTDIR}/nvtop.txt")
            return f"{shown} GPU headers, {pids_shown} sleep PIDs"

        def check_nvitop(name, text):
            shown = len(re.findall(r"│ +\d+ +H200 ", text))
            pids_shown = sum(1 for s in sleepers if re.search(rf"\b{s.pid}\b", text))
            assert shown >= args.gpus, f"nvitop shows {shown} GPUs, expected {args.gpus}; see {OUTDIR}/nvitop.txt"
            return f"{shown} GPU rows, {pids_shown} sleep PIDs"

        def run_nvitop_group():
            try:
                return measure([("nvitop", [py, "-m", "nvitop", "--monitor", "full", "--interval", "1"],
                                 peer_env, "nvitop")], args)
            except RuntimeError as e:
                print(f"nvitop: could not be measured: {e}")
                probe = subprocess.run([py, "-m", "nvitop", "-1"], env=dict(os.environ, **peer_env),
                                       capture_output=True, text=True)
                print(f"`nvitop -1` on the double (rc {probe.returncode}):\n{probe.stdout}{probe.stderr}")
                raise

        # The builds of gpuwatch (this one, and the --compare one) are measured together, in one
        # window: the same timeline, the same neighbours. The peers each have a window of their own.
        builds = [("gpuwatch", binary)]
        if args.compare:
            other = os.path.abspath(args.compare)
            if not os.access(other, os.X_OK):
                sys.exit(f"--compare: {other} is not an executable file")
            if other == binary:
                sys.exit("--compare: the same binary as the one measured")
            print(f"compare: {other} as gpuwatch-cmp, measured in the same windows as gpuwatch")
            builds.append(("gpuwatch-cmp", other))
        checks = {name: check_gpuwatch for name, _ in builds}
        plan = [lambda i: measure([(name, [path, "--interval", "1s"], gw_env, path)
                                   for name, path in (builds if i % 2 == 0 else builds[::-1])], args)]
        if nvtop is not None:
            checks["nvtop"] = check_nvtop
            plan.append(lambda i: measure([("nvtop", [nvtop, "-d", "10"], peer_env, "nvtop")], args))
        if py is not None:
            checks["nvitop"] = check_nvitop
            plan.append(lambda i: run_nvitop_group())
        runs = {name: [] for name in checks}
        for i in range(args.repeats):
            for group in (plan if i % 2 == 0 else plan[::-1]):
                for name, (cpu, srv, text, _, system) in sorted(group(i).items()):
                    screen = checks[name](name, text)
                    runs[name].append((cpu, srv))
                    print(f"  run {i + 1}/{args.repeats} {name}: {cpu:.2f} % of one core, {system:.2f} in the "
                          f"kernel (tmux server {srv:.2f} %); screen: {screen}", flush=True)
        if len(builds) > 1:
            print("  (the tmux server's figure for gpuwatch and gpuwatch-cmp is the one server drawing both)")
        print("steady CPU, % of one core:")
        for name in checks:
            print("  " + median_line(name, runs[name]))
        if len(builds) > 1:
            ratios = [a / b for (a, _), (b, _) in zip(runs["gpuwatch"], runs["gpuwatch-cmp"]) if b > 0]
            if ratios:
                print(f"  gpuwatch / gpuwatch-cmp, window by window: median {statistics.median(ratios):.2f} "
                      f"({', '.join(f'{r:.2f}' for r in ratios)})")
        if nvtop is not None:
            gw = statistics.median(c for c, _ in runs["gpuwatch"])
            nv = statistics.median(c for c, _ in runs["nvtop"])
            print(f"  gpuwatch / nvtop = {gw / nv:.2f}" if nv > 0 else "  nvtop used no measurable CPU")
        if args.callgrind:
            # Instructions are a count, not a sample: the same work gives the same figure on a busy
            # machine. Kernel time (the /proc reads, the terminal writes) is not in it.
            prefix = os.path.join(tmp, "callgrind-")
            out = measure([(name, ["valgrind", "--tool=callgrind", "--dump-instr=no",
                                   f"--callgrind-out-file={prefix}{name}.%p", path, "--interval", "1s"],
                            gw_env, path) for name, path in builds], args, cg_prefix=prefix)
            print("user-space instructions under callgrind, one window of all builds together:")
            for name, _ in builds:
                print(f"  {name:<12} {out[name][3] / 1e6:8.1f} M instructions/s; screen: "
                      f"{check_gpuwatch(name, out[name][2])}")
            if len(builds) > 1 and out["gpuwatch-cmp"][3]:
                print(f"  gpuwatch / gpuwatch-cmp = {out['gpuwatch'][3] / out['gpuwatch-cmp'][3]:.3f}")
        print("screens: " + ", ".join(f"{OUTDIR}/{name}.txt" for name in checks))
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
