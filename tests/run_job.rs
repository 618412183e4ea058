//! End to end: `gpuwatch run` on the NVML test double. The job is a small shell script that
//! takes GPU memory (it appends itself to the scenario file, which the double reloads), then
//! prints a real-format PyTorch OOM message and exits 1, as a training script would. The
//! report must name what the monitor saw and the diagnosis must pick the right case.

mod common;

use std::process::Output;

use common::{ScenarioFile, Sleeper, gpuwatch_cmd, stderr};

const H200: &str = "memory_total = \"143771MiB\"\nmemory_reserved = \"0\"\n";

/// A job script: joins the GPU the scenario's last `[[gpu]]` describes with `used` bytes,
/// waits for gpuwatch to see it, prints `message` on stderr and exits 1.
fn oom_job(dir: &std::path::Path, used: &str, message: &str) -> std::path::PathBuf {
    let path = dir.join("job.sh");
    std::fs::write(
        &path,
        format!(
            r#"printf '[[gpu.process]]\npid = %s\nused = "{used}"\n' $$ >> "$FAKE_NVML_SCENARIO"
echo "epoch 1: loss 2.31"
sleep 1.5
echo 'Traceback (most recent call last):' >&2
echo '  File "train.py", line 42, in <module>' >&2
echo '    loss = model(batch).sum()' >&2
echo '{message}' >&2
exit 1
"#
        ),
    )
    .expect("job script");
    path
}

fn run(sc: &ScenarioFile, extra: &[&str], job: &std::path::Path, job_args: &[&str]) -> Output {
    gpuwatch_cmd(sc)
        .args(["--interval", "100ms", "run"])
        .args(extra)
        .arg("--")
        .arg("sh")
        .arg(job)
        .args(job_args)
        .output()
        .expect("gpuwatch runs")
}

/// The fixes part of a diagnosis (the quoted error may mention allocator settings itself).
fn fixes(diagnosis: &str) -> &str {
    diagnosis
        .split_once("Fixes, in order:")
        .map_or("", |(_, f)| f)
}

#[test]
fn another_process_took_the_memory() {
    let intruder = Sleeper::spawn();
    let sc = ScenarioFile::new(&format!(
        "[[gpu]]\n{H200}\n[[gpu]]\n{H200}[[gpu.process]]\npid = {}\nused = \"50GiB\"\n",
        intruder.pid()
    ));
    let message = format!(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 30.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which 18.26 GiB is free. Process {} has 50.00 GiB memory in use. Including non-PyTorch memory, this process has 70.51 GiB memory in use. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
        intruder.pid()
    );
    let job = oom_job(sc.dir.path(), "70GiB", &message);
    // The job runs on GPU 1 (where the intruder is): CUDA's device 0 is NVML's GPU 1.
    let out = run(&sc, &["--gpu", "1"], &job, &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "the job's exit code: {err}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("epoch 1: loss 2.31"),
        "output passed through"
    );
    assert!(err.contains("exit code 1"), "{err}");
    // What the monitor saw: the job's peak on GPU 1 and the intruder with its memory.
    assert!(err.contains("GPU 1"), "{err}");
    assert!(err.contains("job peak       70.0GiB"), "{err}");
    assert!(
        err.contains(&format!("pid {} ", intruder.pid())) && err.contains("50.0GiB"),
        "{err}"
    );
    // The diagnosis: external pressure, naming the intruder, and GPU 0 has room.
    let diagnosis = err.split_once("\n\n").map_or("", |(_, d)| d);
    assert!(
        diagnosis.to_lowercase().contains("another process")
            || diagnosis.to_lowercase().contains("other process"),
        "{diagnosis}"
    );
    assert!(
        diagnosis.contains(&intruder.pid().to_string()),
        "{diagnosis}"
    );
    assert!(diagnosis.contains("GPU 0"), "a GPU with room: {diagnosis}");
    assert!(
        diagnosis.contains("gpuwatch run --gpu 0 -- sh "),
        "the fix reruns this very command there: {diagnosis}"
    );
    assert!(fixes(diagnosis).contains("  1. "), "{diagnosis}");
    assert!(
        !fixes(diagnosis).contains("expandable_segments"),
        "{diagnosis}"
    );
}

#[test]
fn fragmentation_gets_the_allocator_setting_first() {
    let sc = ScenarioFile::new(&format!("[[gpu]]\n{H200}"));
    let message = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1024.00 MiB. GPU 0 has a total capacity of 139.80 GiB of which 293.12 MiB is free. Including non-PyTorch memory, this process has 139.51 GiB memory in use. Of the allocated memory 81.45 GiB is allocated by PyTorch, and 57.55 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.";
    let job = oom_job(sc.dir.path(), "139GiB", message);
    let out = run(&sc, &[], &job, &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("job peak       139.0GiB"), "{err}");
    let diagnosis = err.split_once("\n\n").map_or("", |(_, d)| d);
    assert!(diagnosis.to_lowercase().contains("fragment"), "{diagnosis}");
    let first_fix = diagnosis
        .find("  1. ")
        .map_or(diagnosis, |i| &diagnosis[i..]);
    assert!(
        first_fix[..first_fix.len().min(400)].contains("expandable_segments"),
        "the first fix: {diagnosis}"
    );
    assert!(
        diagnosis.contains("PYTORCH_CUDA_ALLOC_CONF"),
        "the older alias: {diagnosis}"
    );
}

#[test]
fn a_batch_too_large_gets_a_smaller_batch_size() {
    let sc = ScenarioFile::new(&format!("[[gpu]]\n{H200}"));
    let message = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 60.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which 39.29 GiB is free. Including non-PyTorch memory, this process has 100.51 GiB memory in use. Of the allocated memory 100.00 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.";
    let job = oom_job(sc.dir.path(), "100GiB", message);
    let svg = sc.dir.path().join("timeline.svg");
    let svg_arg = svg.to_string_lossy().into_owned();
    let out = run(
        &sc,
        &["--timeline", &svg_arg],
        &job,
        &["--batch-size", "64"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let diagnosis = err.split_once("\n\n").map_or("", |(_, d)| d);
    assert!(diagnosis.contains("batch"), "{diagnosis}");
    // 100 GiB in use plus 60 GiB asked on a 139.8 GiB GPU: a batch of 64 needs ~160 GiB, so
    // a smaller one is suggested (and the allocator setting is not: nothing is fragmented).
    let suggested: Vec<u64> = diagnosis
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .filter(|n| (8..64).contains(n))
        .collect();
    assert!(!suggested.is_empty(), "a batch size under 64: {diagnosis}");
    assert!(fixes(diagnosis).contains("  1. "), "{diagnosis}");
    assert!(
        !fixes(diagnosis).contains("expandable_segments"),
        "{diagnosis}"
    );
    // The timeline: written, with the failure marked.
    let text = std::fs::read_to_string(&svg).expect("timeline written");
    assert!(text.starts_with("<svg"));
    assert!(text.contains("failed here"));
    assert!(text.contains("job peak 100 GiB"), "{text}");
}

#[test]
fn gpu_auto_picks_the_emptiest_gpu_by_uuid() {
    let sc = ScenarioFile::new(&format!(
        "[[gpu]]\n{H200}base_used = \"100GiB\"\n[[gpu]]\n{H200}base_used = \"10GiB\"\n"
    ));
    let out = gpuwatch_cmd(&sc)
        .args(["run", "--gpu", "auto", "--", "sh", "-c"])
        .arg("echo \"$CUDA_VISIBLE_DEVICES $CUDA_DEVICE_ORDER\"")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let seen = String::from_utf8_lossy(&out.stdout);
    let snapshot = gpuwatch_cmd(&sc)
        .args(["snapshot", "--json"])
        .output()
        .expect("snapshot");
    let json: serde_json::Value = serde_json::from_slice(&snapshot.stdout).expect("json");
    let uuid1 = json["gpus"][1]["uuid"].as_str().expect("uuid");
    assert_eq!(seen.trim(), format!("{uuid1} PCI_BUS_ID"));
    assert!(stderr(&out).contains("running on GPU 1"));
    // Not enough free anywhere: the job does not start.
    let none = gpuwatch_cmd(&sc)
        .args([
            "run",
            "--min-free",
            "200GiB",
            "--",
            "sh",
            "-c",
            "echo started",
        ])
        .output()
        .expect("runs");
    assert_ne!(none.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&none.stdout).contains("started"));
    assert!(
        stderr(&none).contains("no GPU has 200"),
        "{}",
        stderr(&none)
    );
    let bad = gpuwatch_cmd(&sc)
        .args(["run", "--gpu", "7", "--", "true"])
        .output()
        .expect("runs");
    common::fails_with(&bad, 2, "is not a GPU here");
}

#[test]
fn without_a_driver_the_job_still_runs_and_the_report_says_why() {
    let sc = ScenarioFile::new(&format!("[[gpu]]\n{H200}"));
    let out = gpuwatch_cmd(&sc)
        .env(
            "GPUWATCH_NVML_LIB",
            sc.dir.path().join("no-such-libnvidia-ml.so"),
        )
        .args(["run", "--", "sh", "-c", "echo working; exit 3"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "working\n");
    let err = stderr(&out);
    assert!(err.contains("GPUs not watched"), "{err}");
    assert!(err.contains("exit code 3"), "{err}");
    // --quiet: nothing but the job's own output.
    let quiet = gpuwatch_cmd(&sc)
        .args(["run", "--quiet", "--", "sh", "-c", "echo working"])
        .output()
        .expect("runs");
    assert_eq!(quiet.status.code(), Some(0));
    assert_eq!(stderr(&quiet), "");
}

#[test]
fn a_lost_gpu_is_refused_and_the_job_not_started() {
    // GPU 1 fell off the bus before the first sample: its UUID was never read.
    let sc = ScenarioFile::new(&format!("[[gpu]]\n{H200}\n[[gpu]]\n{H200}lost_at = 0\n"));
    let out = gpuwatch_cmd(&sc)
        .args(["run", "--gpu", "1", "--", "sh", "-c"])
        .arg("echo \"started on [$CUDA_VISIBLE_DEVICES]\"")
        .output()
        .expect("runs");
    assert!(
        !common::stdout(&out).contains("started"),
        "the job must not start: {}",
        common::stdout(&out)
    );
    // A setup error, as a --gpu that names no GPU is.
    common::fails_with(&out, 2, "GPU 1 is lost");
    assert!(
        stderr(&out).contains("fell off the bus"),
        "{}",
        stderr(&out)
    );
    // The healthy GPU still takes the job.
    let ok = gpuwatch_cmd(&sc)
        .args(["run", "--gpu", "0", "--", "sh", "-c", "echo started"])
        .output()
        .expect("runs");
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    assert_eq!(common::stdout(&ok), "started\n");
}

#[test]
fn the_gpu_to_move_to_counts_nvml_free_not_total_minus_used() {
    // GPU 0: 100 GiB, 20 GiB reserved by the driver, 10 GiB used: NVML says 70 GiB free
    // (total minus used would count the reservation: 90 GiB).
    let intruder = Sleeper::spawn();
    let sc = ScenarioFile::new(&format!(
        "[[gpu]]\nmemory_total = \"100GiB\"\nmemory_reserved = \"20GiB\"\nbase_used = \"10GiB\"\n\
         [[gpu]]\n{H200}[[gpu.process]]\npid = {}\nused = \"100GiB\"\n",
        intruder.pid()
    ));
    let message = format!(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 30.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which 19.80 GiB is free. Process {} has 100.00 GiB memory in use. Including non-PyTorch memory, this process has 20.00 GiB memory in use. Of the allocated memory 19.50 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
        intruder.pid()
    );
    let job = oom_job(sc.dir.path(), "20GiB", &message);
    let out = run(&sc, &["--gpu", "1"], &job, &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let diagnosis = err.split_once("\n\n").map_or("", |(_, d)| d);
    assert!(
        diagnosis.contains("Use GPU 0: it has 70.00 GiB free"),
        "{diagnosis}"
    );
    assert!(!diagnosis.contains("90.00 GiB"), "{diagnosis}");
}

/// `gpuwatch run -- sh -c SCRIPT`: its output and the diagnosis part of the report.
fn run_script(sc: &ScenarioFile, script: &str) -> (Output, String) {
    let out = gpuwatch_cmd(sc)
        .args(["--interval", "100ms", "run", "--", "sh", "-c", script])
        .output()
        .expect("gpuwatch runs");
    let err = stderr(&out);
    let diagnosis = err
        .split_once("\n\n")
        .map_or(String::new(), |(_, d)| d.to_string());
    (out, diagnosis)
}

#[test]
fn a_silent_job_gets_its_exit_code_or_signal_not_traceback_advice() {
    let sc = ScenarioFile::new(&format!("[[gpu]]\n{H200}"));
    let (out, diagnosis) = run_script(&sc, "exit 3");
    assert_eq!(
        out.status.code(),
        Some(3),
        "the job's own code: {}",
        stderr(&out)
    );
    assert!(
        diagnosis.starts_with("The job exited with code 3 and printed nothing"),
        "{}",
        stderr(&out)
    );
    assert!(diagnosis.contains("was empty"), "{diagnosis}");
    assert!(!diagnosis.contains("traceback"), "{diagnosis}");

    let (out, diagnosis) = run_script(&sc, "echo loading; kill -9 $$");
    // 128 + 9, as a shell reports it.
    assert_eq!(out.status.code(), Some(137), "{}", stderr(&out));
    assert_eq!(common::stdout(&out), "loading\n");
    assert!(
        diagnosis.starts_with("The job was killed by SIGKILL (signal 9)"),
        "{}",
        stderr(&out)
    );
    assert!(diagnosis.contains("out-of-memory killer"), "{diagnosis}");
    for needle in [
        "dmesg",
        "journalctl -k",
        "oom-kill",
        "memory.max",
        "memory.events",
    ] {
        assert!(diagnosis.contains(needle), "{needle}: {diagnosis}");
    }
    assert!(!diagnosis.contains("logic bug"), "{diagnosis}");

    let (out, diagnosis) = run_script(&sc, "kill -9 $$");
    assert_eq!(out.status.code(), Some(137), "{}", stderr(&out));
    assert!(
        diagnosis.starts_with("The job was killed by SIGKILL (signal 9) and printed nothing"),
        "{}",
        stderr(&out)
    );
}

/// `run`'s report and `explain` read the same text the same way: the same headline and the same
/// reasoning line, whichever front end the user meets.
#[test]
fn run_and_explain_agree_on_the_same_text() {
    let sc = ScenarioFile::new(&format!("[[gpu]]\n{H200}"));
    let dir = tempfile::tempdir().expect("tmp");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/triage");
    for name in [
        "oom-torch-2.11-fragmentation-real.txt",
        "public/tune/jax-jit-incompatible-devices-conv.txt",
        "public/tune/keras-weights-convert-windows.txt",
        "public/tune/cudnn-internal-error-repro-snippet.txt",
        "public/tune/nccl-watchdog-timeout-allreduce-1800000.txt",
        "public/tune/host-cpuallocator-with-cuda-oom-hint.txt",
    ] {
        let raw = std::fs::read_to_string(root.join(name)).expect("fixture");
        let body = raw.split_once("\n---\n").map_or(raw.as_str(), |(_, b)| b);
        let log = dir.path().join("log.txt");
        std::fs::write(&log, body).expect("log");
        let explained = gpuwatch_cmd(&sc)
            .args(["explain"])
            .arg(&log)
            .output()
            .expect("explain runs");
        assert!(explained.status.success(), "{name}: {}", stderr(&explained));
        let explained = common::stdout(&explained);
        let script = format!("cat '{}' >&2; exit 1", log.display());
        let (out, _) = run_script(&sc, &script);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", stderr(&out));
        // The report follows the job's own output (which has blank lines of its own).
        let err = stderr(&out);
        let report = err.rsplit_once("gpuwatch: sh -c").map_or("", |(_, r)| r);
        let diagnosis = report.split_once("\n\n").map_or("", |(_, d)| d);
        // The headline and its "Why (…)" line, wrapped the same way.
        let head = |t: &str| {
            t.split("\nThe error:")
                .next()
                .unwrap_or_default()
                .trim()
                .to_string()
        };
        assert!(
            head(&explained).contains("Why (") || head(&explained).contains("Confidence: "),
            "{name}: {explained}"
        );
        assert_eq!(head(diagnosis), head(&explained), "{name}");
    }
}
