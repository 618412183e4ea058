//! Host-side details of one process, and the process forest around the GPU processes, read
//! from this host's `/proc`. They serve the dashboard's process detail view and tree view.
//!
//! Unlike [`super::procinfo`], nothing here is cached: each call reads `/proc` afresh, and
//! every read that fails (the process exited meanwhile, another user's process, another PID
//! namespace) gives less data, never an error or a panic.
//!
//! Costs:
//! - [`read_detail`]: `readlink /proc/PID/cwd`, `/proc/PID/cmdline`, `/proc/PID/environ`, one
//!   `/proc/X/stat` per ancestor (at most [`MAX_DEPTH`]), then the children: one
//!   `/proc/PID/task/*/children` per thread of the process plus one `/proc/C/stat` per child.
//!   Only when the kernel has no `children` files (`CONFIG_PROC_CHILDREN` unset) does it scan
//!   the whole process table (as [`process_forest`] does). Called when the user opens the view,
//!   so the cost is a handful of small reads.
//! - [`process_forest`]: exactly one scan of the process table: one `readdir` of `/proc` and
//!   one read of `/proc/N/stat` per process (threads are not listed), i.e. O(processes on the
//!   host), about 1–5 ms for a thousand processes. Meant to be called at most once per
//!   second.
//!
//! Identity: a process is `(pid, start time)` and PIDs are reused, so what is read here
//! describes whatever process holds the PID *now*; callers that act on it (kill) re-check
//! identity (see [`crate::signal`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::ErrorKind;
use std::path::PathBuf;

use super::procinfo::ppid_from_stat;

/// Environment variables that matter for GPU jobs, in the order [`filter_env`] returns them.
/// Besides these, every `NCCL_*` variable is kept (after these, sorted by name).
pub const INTERESTING_ENV: &[&str] = &[
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "NVIDIA_VISIBLE_DEVICES",
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "CUDA_LAUNCH_BLOCKING",
    "LOCAL_RANK",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "OMP_NUM_THREADS",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "SLURM_JOB_ID",
    "SLURM_PROCID",
];

/// Prefix of the NCCL variables, all of which are kept.
const NCCL_PREFIX: &str = "NCCL_";

/// How far up the parent chain [`read_detail`] and [`process_forest`] climb at most. Real
/// chains are a dozen deep at most; the bound (with a visited set) keeps a corrupt or racing
/// `/proc` from looping.
pub const MAX_DEPTH: usize = 64;

/// What the detail view shows about one process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcDetail {
    pub pid: u32,
    /// Working directory; `None` when not readable (another user's process, gone).
    pub cwd: Option<PathBuf>,
    /// Command line, arguments joined by spaces; `None` when empty (kernel threads, zombies)
    /// or not readable.
    pub command: Option<String>,
    /// The GPU-related variables of the environment the process was started with (see
    /// [`INTERESTING_ENV`]), in that order. Changes the process made to its own environment
    /// after it started are not seen.
    pub env: Vec<(String, String)>,
    /// Why `env` is empty when that is not because none of the variables is set: the
    /// environment could not be read, or the process has none. `None` when it was read.
    pub env_note: Option<String>,
    /// Parent chain, nearest first, ending at PID 1 (or wherever this host's view ends).
    pub ancestors: Vec<ProcLink>,
    /// Direct children, sorted by PID.
    pub children: Vec<ProcLink>,
}

/// A process referred to from another's details.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcLink {
    pub pid: u32,
    /// The short command name (`/proc/PID/comm`); empty when it could not be read.
    pub name: String,
}

/// One row of the tree view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeRow {
    pub pid: u32,
    /// The short command name; empty for a GPU process this host can't see.
    pub name: String,
    /// Indentation level, 0 for the roots.
    pub depth: usize,
    /// Whether the process is one of the GPU processes asked about.
    pub on_gpu: bool,
    /// The owner's name (the numeric uid when no name is known); `None` when not read (a
    /// simulated source, a process gone). The tree shows a GPU process's user from its frame.
    pub user: Option<String>,
    /// The full command line (arguments joined by spaces, at most [`MAX_CMDLINE`] bytes
    /// read); `None` when empty (kernel threads, zombies) or not readable.
    pub command: Option<String>,
}

/// How much of `/proc/PID/cmdline` a tree row reads: a screen line's worth, and far more.
pub const MAX_CMDLINE: u64 = 16 * 1024;

/// One process of the table [`forest_from`] works on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcEntry {
    pub pid: u32,
    /// `None` for PID 1, kernel threads' parent (0) and unreadable entries.
    pub ppid: Option<u32>,
    pub name: String,
}

/// Everything the detail view shows about `pid`, read now. Never fails: what can't be read is
/// left empty, and `env_note` says why the environment is missing.
pub fn read_detail(pid: u32) -> ProcDetail {
    let dir = PathBuf::from(format!("/proc/{pid}"));
    let cwd = std::fs::read_link(dir.join("cwd")).ok();
    let command = std::fs::read(dir.join("cmdline"))
        .ok()
        .and_then(|b| join_cmdline(&b));
    let (env, env_note) = match std::fs::read(dir.join("environ")) {
        Ok(bytes) if bytes.is_empty() => (
            Vec::new(),
            Some(if dir.exists() {
                "no environment (kernel thread or exiting process)".to_owned()
            } else {
                "process gone".to_owned()
            }),
        ),
        Ok(bytes) => (filter_env(parse_environ(&bytes)), None),
        Err(e) => (Vec::new(), Some(environ_error_note(&e, dir.exists()))),
    };
    ProcDetail {
        pid,
        cwd,
        command,
        env,
        env_note,
        ancestors: read_ancestors(pid),
        children: read_children(pid),
    }
}

/// Words for a failed read of `/proc/PID/environ`.
fn environ_error_note(e: &std::io::Error, still_there: bool) -> String {
    if !still_there || e.kind() == ErrorKind::NotFound || e.raw_os_error() == Some(3) {
        // ESRCH (3): the process exited between open and read.
        return "process gone".to_owned();
    }
    match e.kind() {
        ErrorKind::PermissionDenied => {
            "environment not readable: permission denied (another user's process)".to_owned()
        }
        _ => format!("environment not readable: {e}"),
    }
}

/// `/proc/PID/cmdline` as one line: NUL separators become spaces; `None` when empty.
fn join_cmdline(bytes: &[u8]) -> Option<String> {
    let trimmed = bytes.strip_suffix(b"\0").unwrap_or(bytes);
    let text: String = String::from_utf8_lossy(trimmed)
        .chars()
        .map(|c| if c == '\0' { ' ' } else { c })
        .collect();
    (!text.trim().is_empty()).then_some(text)
}

/// The `NAME=value` entries of `/proc/PID/environ` (NUL-separated), in order. Entries
/// without `=` or with an empty name are skipped; invalid UTF-8 is replaced.
pub fn parse_environ(bytes: &[u8]) -> Vec<(String, String)> {
    bytes
        .split(|&b| b == 0)
        .filter_map(|entry| {
            let eq = entry.iter().position(|&b| b == b'=')?;
            (eq > 0).then(|| {
                (
                    String::from_utf8_lossy(&entry[..eq]).into_owned(),
                    String::from_utf8_lossy(&entry[eq + 1..]).into_owned(),
                )
            })
        })
        .collect()
}

/// Whether `name` is one of the variables the detail view shows.
pub fn is_interesting(name: &str) -> bool {
    INTERESTING_ENV.contains(&name) || name.starts_with(NCCL_PREFIX)
}

/// The GPU-related variables of `env`: those of [`INTERESTING_ENV`] in that order, then the
/// `NCCL_*` ones sorted by name. When a name appears twice the first wins, as `getenv` does.
pub fn filter_env(env: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut first: HashMap<String, String> = HashMap::new();
    for (k, v) in env {
        if is_interesting(&k) {
            first.entry(k).or_insert(v);
        }
    }
    let mut out = Vec::with_capacity(first.len());
    for name in INTERESTING_ENV {
        if let Some(v) = first.remove(*name) {
            out.push(((*name).to_owned(), v));
        }
    }
    let mut nccl: Vec<(String, String)> = first.into_iter().collect();
    nccl.sort();
    out.extend(nccl);
    out
}

/// The command name (field 2) from the text of `/proc/PID/stat`: between the first `(` and
/// the last `)`, as the name itself may contain parentheses.
fn name_from_stat(text: &str) -> Option<String> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    (close > open).then(|| text[open + 1..close].to_owned())
}

/// Parent and name of `pid` from one read of `/proc/PID/stat` (the name there is the same as
/// `/proc/PID/comm`); `None` when the process is not visible.
fn read_stat(pid: u32) -> Option<(Option<u32>, String)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some((
        ppid_from_stat(&text),
        name_from_stat(&text).unwrap_or_default(),
    ))
}

fn read_name(pid: u32) -> String {
    read_stat(pid).map(|(_, name)| name).unwrap_or_default()
}

/// Parent chain of `pid`, nearest first, up to PID 1; bounded by [`MAX_DEPTH`], stops on a
/// cycle.
fn read_ancestors(pid: u32) -> Vec<ProcLink> {
    let mut out = Vec::new();
    let mut seen = HashSet::from([pid]);
    let mut next = read_stat(pid).and_then(|(parent, _)| parent);
    while let Some(p) = next {
        if out.len() >= MAX_DEPTH || !seen.insert(p) {
            break;
        }
        let (parent, name) = read_stat(p).unwrap_or((None, String::new()));
        out.push(ProcLink { pid: p, name });
        next = parent;
    }
    out
}

/// Direct children of `pid`, sorted by PID: from `/proc/PID/task/*/children` where the kernel
/// has them, else from one scan of the process table.
fn read_children(pid: u32) -> Vec<ProcLink> {
    let pids = children_from_task_files(pid).unwrap_or_else(|| {
        scan_table()
            .into_iter()
            .filter(|e| e.ppid == Some(pid))
            .map(|e| e.pid)
            .collect()
    });
    let unique: std::collections::BTreeSet<u32> = pids.into_iter().collect();
    unique
        .into_iter()
        .map(|p| ProcLink {
            pid: p,
            name: read_name(p),
        })
        .collect()
}

/// The union of `/proc/PID/task/*/children` (each lists the children a thread created).
/// `None` when the kernel has no such files, so the caller must scan instead; an empty list
/// when the process is gone.
fn children_from_task_files(pid: u32) -> Option<Vec<u32>> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        // Gone (or not visible); a scan would not find children of it either, unless
        // /proc itself is unusable — then the scan finds nothing too.
        return Some(Vec::new());
    };
    let mut out = Vec::new();
    let mut any_file = false;
    for task in tasks.flatten() {
        match std::fs::read_to_string(task.path().join("children")) {
            Ok(text) => {
                any_file = true;
                out.extend(
                    text.split_whitespace()
                        .filter_map(|s| s.parse::<u32>().ok()),
                );
            }
            // A thread that exited meanwhile: its siblings still answer.
            Err(e) if e.kind() == ErrorKind::NotFound && task.path().exists() => return None,
            Err(_) => {}
        }
    }
    any_file.then_some(out)
}

/// One scan of the process table: `readdir /proc` and one `/proc/N/stat` per process.
/// Processes that exit during the scan are skipped.
pub fn scan_table() -> Vec<ProcEntry> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let (ppid, name) = read_stat(pid)?;
            Some(ProcEntry { pid, ppid, name })
        })
        .collect()
}

/// The tree view's rows for `gpu_pids`, from one scan of the process table (see the module
/// docs for the cost). See [`forest_from`] for what is shown.
pub fn process_forest(gpu_pids: &[u32]) -> Vec<TreeRow> {
    let mut rows = forest_from(&scan_table(), gpu_pids);
    let mut user_name = super::procinfo::user_namer();
    for row in &mut rows {
        row.command = read_cmdline(row.pid, MAX_CMDLINE);
        row.user = read_uid(row.pid).map(&mut user_name);
    }
    rows
}

/// The first `limit` bytes of `/proc/PID/cmdline`, as one line ([`join_cmdline`]).
fn read_cmdline(pid: u32, limit: u64) -> Option<String> {
    use std::io::Read as _;
    let file = std::fs::File::open(format!("/proc/{pid}/cmdline")).ok()?;
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes).ok()?;
    join_cmdline(&bytes)
}

/// The real uid of `pid` (the first number of the `Uid:` line of `/proc/PID/status`, the
/// uid the process table's user comes from).
fn read_uid(pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    uid_from_status(&text)
}

fn uid_from_status(text: &str) -> Option<u32> {
    text.lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// PIDs never shown unless they are GPU processes themselves: init and `kthreadd`.
const HIDDEN_ROOTS: [u32; 2] = [1, 2];

/// The tree view's rows for `gpu_pids` over the process table `procs`, in display order
/// (pre-order; roots and siblings sorted by PID).
///
/// Shown:
/// - each GPU process and its ancestors, so that ranks group under their launcher; but the
///   ancestors that *all* GPU processes share are dropped except the nearest one (two ranks
///   of one `torchrun` show under `torchrun`, not under the shell, `sshd` and init; a single
///   GPU process shows under its parent);
/// - PID 1 and `kthreadd` (2) only when they are GPU processes;
/// - each GPU process's direct children (`DataLoader` workers), not their descendants;
/// - GPU processes not in `procs` (another PID namespace, exited) as roots with an empty
///   name, after the others, so no GPU process is missing from the view.
pub fn forest_from(procs: &[ProcEntry], gpu_pids: &[u32]) -> Vec<TreeRow> {
    let table: HashMap<u32, &ProcEntry> = procs.iter().map(|e| (e.pid, e)).collect();
    let gpu: std::collections::BTreeSet<u32> = gpu_pids.iter().copied().collect();
    let parent = |pid: u32| table.get(&pid).and_then(|e| e.ppid);

    // Ancestor chains (root first, without the GPU process itself) of the visible ones.
    let visible: Vec<u32> = gpu
        .iter()
        .copied()
        .filter(|p| table.contains_key(p))
        .collect();
    let chains: Vec<Vec<u32>> = visible
        .iter()
        .map(|&pid| {
            let mut chain = Vec::new();
            let mut seen = HashSet::from([pid]);
            let mut next = parent(pid);
            while let Some(p) = next {
                if chain.len() >= MAX_DEPTH || !seen.insert(p) {
                    break;
                }
                chain.push(p);
                next = parent(p);
            }
            chain.retain(|p| !HIDDEN_ROOTS.contains(p) || gpu.contains(p));
            chain.reverse();
            chain
        })
        .collect();

    // The prefix every chain shares: keep only its last element.
    let common = chains.first().map_or(0, |first| {
        chains.iter().skip(1).fold(first.len(), |n, c| {
            n.min(first.iter().zip(c).take_while(|(a, b)| a == b).count())
        })
    });
    let skip = common.saturating_sub(1);

    let mut shown: HashSet<u32> = HashSet::new();
    for (pid, chain) in visible.iter().zip(&chains) {
        shown.extend(chain.iter().skip(skip).copied());
        shown.insert(*pid);
    }
    for e in procs {
        if e.ppid.is_some_and(|p| gpu.contains(&p)) {
            shown.insert(e.pid);
        }
    }

    // Edges among the shown processes; a shown process whose parent isn't shown is a root.
    let mut kids: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    let mut roots = Vec::new();
    for &pid in &shown {
        match parent(pid).filter(|p| shown.contains(p)) {
            Some(p) => kids.entry(p).or_default().push(pid),
            None => roots.push(pid),
        }
    }
    roots.sort_unstable();
    for list in kids.values_mut() {
        list.sort_unstable();
    }

    let mut rows = Vec::with_capacity(shown.len());
    let mut visited = HashSet::new();
    // Iterative pre-order walk; `visited` guards against cycles in a racing table.
    let mut stack: Vec<(u32, usize)> = roots.iter().rev().map(|&p| (p, 0)).collect();
    while let Some((pid, depth)) = stack.pop() {
        if !visited.insert(pid) {
            continue;
        }
        rows.push(TreeRow {
            pid,
            name: table.get(&pid).map(|e| e.name.clone()).unwrap_or_default(),
            depth,
            on_gpu: gpu.contains(&pid),
            user: None,
            command: None,
        });
        if let Some(children) = kids.get(&pid) {
            stack.extend(children.iter().rev().map(|&c| (c, depth + 1)));
        }
    }
    rows.extend(
        gpu.iter()
            .filter(|p| !table.contains_key(p))
            .map(|&pid| TreeRow {
                pid,
                name: String::new(),
                depth: 0,
                on_gpu: true,
                user: None,
                command: None,
            }),
    );
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(pid: u32, parent: u32, name: &str) -> ProcEntry {
        ProcEntry {
            pid,
            ppid: (parent != 0).then_some(parent),
            name: name.to_owned(),
        }
    }

    fn rows(r: &[TreeRow]) -> Vec<(u32, usize, bool)> {
        r.iter().map(|r| (r.pid, r.depth, r.on_gpu)).collect()
    }

    /// init ─ sshd ─ bash ─┬ torchrun ─┬ rank0 (GPU) ─┬ worker
    ///                     │           │              └ worker
    ///                     │           └ rank1 (GPU)
    ///                     └ python (GPU)
    /// init ─ containerd-shim ─ jax (GPU)
    /// kthreadd ─ kworker
    fn table() -> Vec<ProcEntry> {
        vec![
            e(1, 0, "init"),
            e(2, 0, "kthreadd"),
            e(3, 2, "kworker"),
            e(10, 1, "sshd"),
            e(20, 10, "bash"),
            e(30, 20, "torchrun"),
            e(31, 30, "rank0"),
            e(32, 30, "rank1"),
            e(40, 31, "worker"),
            e(41, 31, "worker"),
            e(50, 20, "python"),
            e(60, 1, "containerd-shim"),
            e(61, 60, "jax"),
        ]
    }

    #[test]
    fn ranks_group_under_their_launcher() {
        let r = forest_from(&table(), &[32, 31]);
        assert_eq!(
            rows(&r),
            vec![
                (30, 0, false),
                (31, 1, true),
                (40, 2, false),
                (41, 2, false),
                (32, 1, true),
            ]
        );
        assert_eq!(r[0].name, "torchrun");
    }

    #[test]
    fn single_gpu_process_shows_under_its_parent() {
        let r = forest_from(&table(), &[50]);
        assert_eq!(rows(&r), vec![(20, 0, false), (50, 1, true)]);
    }

    #[test]
    fn common_shell_is_the_root() {
        let r = forest_from(&table(), &[31, 50]);
        assert_eq!(
            rows(&r),
            vec![
                (20, 0, false),
                (30, 1, false),
                (31, 2, true),
                (40, 3, false),
                (41, 3, false),
                (50, 1, true),
            ]
        );
    }

    #[test]
    fn init_is_hidden_when_chains_only_share_it() {
        let r = forest_from(&table(), &[50, 61]);
        assert_eq!(
            rows(&r),
            vec![
                (10, 0, false),
                (20, 1, false),
                (50, 2, true),
                (60, 0, false),
                (61, 1, true),
            ]
        );
    }

    #[test]
    fn invisible_gpu_processes_are_listed_last() {
        let r = forest_from(&table(), &[9999, 50]);
        assert_eq!(
            rows(&r),
            vec![(20, 0, false), (50, 1, true), (9999, 0, true)]
        );
        assert_eq!(r[2].name, "");
        assert!(forest_from(&table(), &[]).is_empty());
    }

    #[test]
    fn launcher_on_gpu_too() {
        let r = forest_from(&table(), &[30, 31]);
        assert_eq!(
            rows(&r),
            vec![
                (20, 0, false),
                (30, 1, true),
                (31, 2, true),
                (40, 3, false),
                (41, 3, false),
                (32, 2, false),
            ]
        );
    }

    #[test]
    fn tree_rows_read_command_and_user() {
        let me = std::process::id();
        let rows = process_forest(&[me]);
        let row = rows.iter().find(|r| r.pid == me).expect("this process");
        let command = row.command.as_deref().unwrap_or_default();
        assert!(
            command.contains(std::env::args().next().unwrap_or_default().as_str()),
            "{command:?}"
        );
        assert_eq!(row.user, crate::source::procinfo::current_user());
        assert_eq!(
            read_cmdline(me, 4).map(|c| c.len()),
            Some(4),
            "the read is bounded"
        );
        assert_eq!(
            uid_from_status("Name:\tx\nUid:\t1000\t1001\t1000\t1000\n"),
            Some(1000)
        );
        assert_eq!(uid_from_status("Uid:\n"), None);
        assert_eq!(uid_from_status(""), None);
    }

    #[test]
    fn cycles_do_not_hang() {
        let t = vec![e(5, 6, "a"), e(6, 5, "b"), e(7, 5, "c")];
        let r = forest_from(&t, &[7]);
        assert!(r.iter().any(|r| r.pid == 7 && r.on_gpu));
        assert!(r.len() <= 3);
    }

    #[test]
    fn environ_parsing() {
        let bytes = b"A=1\0EMPTY=\0NOEQ\0=x\0EQ=a=b\0\0";
        assert_eq!(
            parse_environ(bytes),
            vec![
                ("A".into(), "1".into()),
                ("EMPTY".into(), String::new()),
                ("EQ".into(), "a=b".into()),
            ]
        );
        assert!(parse_environ(b"").is_empty());
    }

    #[test]
    fn env_filter_order_and_duplicates() {
        let env = parse_environ(
            b"NCCL_P2P_DISABLE=1\0HOME=/root\0RANK=2\0CUDA_VISIBLE_DEVICES=0,1\0\
              NCCL_DEBUG=INFO\0RANK=9\0PATH=/bin\0LOCAL_RANK=0\0",
        );
        assert_eq!(
            filter_env(env),
            vec![
                ("CUDA_VISIBLE_DEVICES".into(), "0,1".into()),
                ("LOCAL_RANK".into(), "0".into()),
                ("RANK".into(), "2".into()),
                ("NCCL_DEBUG".into(), "INFO".into()),
                ("NCCL_P2P_DISABLE".into(), "1".into()),
            ]
        );
    }

    #[test]
    fn cmdline_joining() {
        assert_eq!(
            join_cmdline(b"python\0train.py\0--lr\x001e-3\0").as_deref(),
            Some("python train.py --lr 1e-3")
        );
        assert_eq!(join_cmdline(b""), None);
        assert_eq!(join_cmdline(b"\0"), None);
    }

    #[test]
    fn stat_names() {
        assert_eq!(
            name_from_stat("4242 (a) b (c)) S 77 4242").as_deref(),
            Some("a) b (c)")
        );
        assert_eq!(name_from_stat("garbage"), None);
    }

    #[test]
    fn environ_error_words() {
        let denied = std::io::Error::from(ErrorKind::PermissionDenied);
        assert_eq!(
            environ_error_note(&denied, true),
            "environment not readable: permission denied (another user's process)"
        );
        assert_eq!(environ_error_note(&denied, false), "process gone");
        let srch = std::io::Error::from_raw_os_error(3);
        assert_eq!(environ_error_note(&srch, true), "process gone");
    }

    #[test]
    fn task_files_agree_with_the_scan() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let me = std::process::id();
        let mut scanned: Vec<u32> = scan_table()
            .into_iter()
            .filter(|e| e.ppid == Some(me))
            .map(|e| e.pid)
            .collect();
        scanned.sort_unstable();
        if let Some(mut listed) = children_from_task_files(me) {
            listed.sort_unstable();
            // Other tests spawn children concurrently: compare on this child only.
            assert_eq!(listed.contains(&child.id()), scanned.contains(&child.id()));
        }
        assert!(scanned.contains(&child.id()));
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn gone_process() {
        let d = read_detail(u32::MAX - 1);
        assert_eq!(d.env_note.as_deref(), Some("process gone"));
        assert!(d.cwd.is_none() && d.command.is_none());
        assert!(d.ancestors.is_empty() && d.children.is_empty());
    }
}
