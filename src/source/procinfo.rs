//! Host-side enrichment of GPU processes: name, command line, user, CPU %, RSS, start time,
//! parent and container, read from this host's `/proc` (through `sysinfo`).
//!
//! [`ProcInfo::enrich`] refreshes **only the PIDs it is given** (NVML's process list): it never
//! scans the `/proc` directory. Its `sysinfo::System` holds exactly the PIDs of the last call;
//! PIDs that were not asked again are dropped (see [`ProcInfo::enrich`]).
//!
//! Semantics:
//! - A PID that `/proc` does not show and never showed (another PID namespace, a container)
//!   is `HostProc { visible: false, ..Default::default() }`: the caller keeps the row and its
//!   GPU data.
//! - Identity is `(pid, start_time)`. When a PID's start time changes (PID reuse), its cached
//!   state (CPU baseline, container) is dropped and it is treated as first seen.
//! - CPU % is in percent of one core (may exceed 100). It is computed here from the process's
//!   accumulated CPU time between two calls and the wall time between them, so it does not
//!   depend on how often the whole system's CPU times are refreshed. On the first sight of a
//!   `(pid, start_time)` it is `None` (unknown yet), never a made-up 0.
//! - The container is read once per `(pid, start_time)` from `/proc/PID/cgroup` and parsed by
//!   [`container_from_cgroup`]; see there for the format.
//! - User names come from `sysinfo::Users` (refreshed at most every 60 s, or once when an
//!   unknown uid shows up), then `/etc/passwd` directly (sysinfo skips users whose shell is
//!   `/bin/false`, such as `gdm`), then — for the invoking user only — `$USER`/`$LOGNAME`. When
//!   all fail the numeric uid is used as the name, by [`current_user`] too, so comparing the
//!   two stays consistent.
//! - A process that was seen in `/proc` and is gone while the driver still lists its PID is
//!   *exited*: `HostProc { visible: false, exited: true, .. }` with its last known name,
//!   command, user, start time, parent and container, and when it was first found gone. These
//!   identities are kept for the PIDs still asked about only (forgotten when the driver stops
//!   listing the PID), at most [`MAX_EXITED`] of them (the oldest exit forgotten first: that PID
//!   is then "not visible here"). An exited PID that `/proc` shows again is another process
//!   (PID reuse; its start time differs): it is read as a first sighting and the old identity
//!   dropped. A PID never seen in `/proc` stays not visible.
//! - Only "no such file" and "no such process" (`ENOENT`, `ESRCH`) mean a known process is
//!   gone. Any other failure reading its `/proc` files (out of file descriptors, `EACCES`,
//!   `EIO`) keeps what is known of it — name, command, user, start time — with CPU % and RSS
//!   unknown for that call, so a passing fault never turns a known process into an unnamed
//!   stranger. Such failures are counted ([`read_errors`]) and the last one kept
//!   ([`last_read_error`]) for the daemon to log.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System, Uid, UpdateKind, Users};

use crate::model::HostProc;

/// How often the users list is re-read at most (besides once for an unknown uid).
const USERS_REFRESH: Duration = Duration::from_mins(1);
/// Minimum gap between two users-list reads triggered by unknown uids.
const USERS_MIN_GAP: Duration = Duration::from_secs(1);
/// How many exited processes' identities a [`ProcInfo`] keeps at most.
pub const MAX_EXITED: usize = 1024;
/// Below this wall-time gap between two calls the CPU baseline is kept and the previous value
/// repeated: clock ticks are 10 ms, so a shorter window would be mostly quantisation noise.
const MIN_CPU_WINDOW: Duration = Duration::from_millis(100);

/// `/proc` reads of known processes that failed for a reason other than the process being
/// gone, since start (all `ProcInfo`s of this process together).
static READ_ERRORS: AtomicU64 = AtomicU64::new(0);
static LAST_READ_ERROR: Mutex<Option<String>> = Mutex::new(None);

/// How many `/proc` reads of known processes failed for a reason other than the process
/// being gone (see the module's semantics), since start.
pub fn read_errors() -> u64 {
    READ_ERRORS.load(Ordering::Relaxed)
}

/// The last such failure, as "PATH: error".
pub fn last_read_error() -> Option<String> {
    LAST_READ_ERROR
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// Whether a failed `/proc` read means the process is gone: only `ENOENT` and `ESRCH` do.
fn is_gone(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound
        || e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error())
}

fn note_read_error(pid: u32, e: &std::io::Error) {
    let n = READ_ERRORS.fetch_add(1, Ordering::Relaxed);
    if n == 0 {
        tracing::warn!(pid, error = %e, "cannot read /proc; the process's known facts are kept");
    }
    *LAST_READ_ERROR
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(format!("/proc/{pid}: {e}"));
}

/// Reads a one-line `/proc` file through its cached descriptor when `slot` holds one, else by
/// path (caching the descriptor in `slot` when the budget allows); a seam for tests, which
/// inject failures.
type LineReader = fn(&mut Option<CachedFile>, &str) -> std::io::Result<String>;

/// Descriptors kept open across refreshes, all `ProcInfo`s of this process together.
static CACHED_FILES: AtomicU64 = AtomicU64::new(0);

/// How many `/proc` descriptors may stay open: a quarter of the soft `RLIMIT_NOFILE` (the rest
/// is the daemon's sockets, the history database, the terminal), at most 4096.
fn cached_files_budget() -> u64 {
    static BUDGET: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *BUDGET.get_or_init(|| {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        (soft / 4).min(4096)
    })
}

/// An open `/proc/PID/{stat,statm}` kept for the next refresh: reading it again from offset 0
/// makes the kernel generate it anew, which saves the path walk of `open` and the `close` (two
/// thirds of the system-call cost of a refresh). The descriptor belongs to the process that was
/// there at open time: once that process is reaped, reads answer `ESRCH`, even if its PID was
/// reused. Counted in [`CACHED_FILES`] while open.
#[derive(Debug)]
pub struct CachedFile(std::fs::File);

impl CachedFile {
    /// Keeps `file` when the budget allows; gives it back otherwise.
    fn keep(file: std::fs::File) -> Result<Self, std::fs::File> {
        let budget = cached_files_budget();
        match CACHED_FILES.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            (n < budget).then_some(n + 1)
        }) {
            Ok(_) => Ok(CachedFile(file)),
            Err(_) => Err(file),
        }
    }
}

impl Drop for CachedFile {
    fn drop(&mut self) {
        CACHED_FILES.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How many `/proc` descriptors are kept open now (for tests and diagnostics).
pub fn cached_files() -> u64 {
    CACHED_FILES.load(Ordering::Relaxed)
}

/// The descriptors a known process's refresh reads.
#[derive(Debug, Default)]
struct ProcFiles {
    stat: Option<CachedFile>,
    statm: Option<CachedFile>,
}

/// Cached state of one `(pid, start_time)`.
#[derive(Debug)]
struct Tracked {
    /// Open `stat`/`statm` of this process, for the next refresh.
    files: ProcFiles,
    start_time: u64,
    /// Accumulated CPU time (ms) and when it was read: the baseline of the next CPU %.
    cpu_ms: u64,
    cpu_at: Instant,
    /// The last CPU % computed, `None` until a second sighting.
    cpu_percent: Option<f32>,
    container: Option<String>,
    ppid: Option<u32>,
    /// What does not change while the process lives, as `sysinfo` first read it.
    name: String,
    command: String,
    uid: Option<u32>,
    /// Whether the facts above are all known (a command line and a uid), so that a refresh
    /// needs only `/proc/PID/stat`; otherwise `sysinfo` reads the process again, which fills
    /// what was missing.
    complete: bool,
}

/// What one [`ProcInfo`] learnt about its PIDs, for another to take over.
#[derive(Debug, Default)]
pub struct Handover(HashMap<u32, Tracked>);

impl Handover {
    /// Adds a later hand-over: its PIDs replace the same PIDs of this one.
    pub fn merge(&mut self, later: Handover) {
        self.0.extend(later.0);
    }
}

/// Reads host facts about GPU processes. Owned by the sampler thread; every call does work
/// proportional to the number of PIDs asked, never to the size of the process table.
///
/// A process seen for the first time (or whose facts are incomplete) is read through
/// `sysinfo` (`stat`, `status`, `statm`, `cmdline`); a known one is refreshed from
/// `/proc/PID/stat` (CPU time, parent, and its start time, which tells a reused PID) and
/// `/proc/PID/statm` (RSS, as `sysinfo` reads it), half the system calls and without the costly
/// `status`. `sysinfo` itself reads no more than that on a refresh: it keeps the name, command
/// line and uid it read first. Both files stay open between refreshes ([`CachedFile`], within a
/// budget of descriptors), so a refresh is one `pread` per file instead of open, read, close.
pub struct ProcInfo {
    system: System,
    users: UserNames,
    tracked: HashMap<u32, Tracked>,
    /// The last known facts of PIDs that left `/proc` while still asked about (`exited`).
    exited: HashMap<u32, HostProc>,
    /// At most this many entries in `exited` ([`MAX_EXITED`]; smaller in tests).
    exited_cap: usize,
    /// Boot time (unix s), clock ticks per second and page size: what turns `/proc/PID/stat`
    /// into `sysinfo`'s units.
    boot_time: u64,
    ticks_per_s: u64,
    page_size: u64,
    read_line: LineReader,
}

impl std::fmt::Debug for ProcInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcInfo")
            .field("tracked", &self.tracked.len())
            .field("exited", &self.exited.len())
            .finish_non_exhaustive()
    }
}

impl ProcInfo {
    /// An enricher with nothing loaded yet (no `/proc` scan). Fails only where `sysinfo` does
    /// not support the platform.
    pub fn new() -> Result<Self, sysinfo::Error> {
        Ok(Self {
            system: System::new()?,
            users: UserNames::new()?,
            tracked: HashMap::new(),
            exited: HashMap::new(),
            exited_cap: MAX_EXITED,
            boot_time: System::boot_time()?,
            ticks_per_s: rustix::param::clock_ticks_per_second().max(1),
            page_size: rustix::param::page_size() as u64,
            read_line: read_proc_line,
        })
    }

    /// Host facts for each PID in `pids`, keyed by PID (duplicates are fine). Every PID asked
    /// gets an entry; PIDs this host can't see get `visible: false`.
    ///
    /// Refreshes only those PIDs. State kept for PIDs that are not in `pids` (CPU baseline,
    /// container, the `sysinfo` entry) is dropped, so a PID that comes back later starts over
    /// (its CPU % is `None` again on that call).
    ///
    /// Returns a map rather than filling `ProcSample`s so that the sampler can enrich the
    /// union of all GPUs' PIDs in one call and copy each entry into every GPU's rows.
    pub fn enrich(&mut self, pids: &[u32]) -> HashMap<u32, HostProc> {
        self.enrich_due(pids, |_| true)
    }

    /// [`Self::enrich`], refreshing only the known PIDs that are `due` (and every PID seen for
    /// the first time, reused or incomplete): the others keep their state here and are left
    /// out of the map, so that the caller keeps their previous facts.
    pub fn enrich_due(
        &mut self,
        pids: &[u32],
        due: impl Fn(u32) -> bool,
    ) -> HashMap<u32, HostProc> {
        let asked: HashSet<u32> = pids.iter().copied().collect();
        self.tracked.retain(|pid, _| asked.contains(pid));
        self.exited.retain(|pid, _| asked.contains(pid));
        let now = Instant::now();
        let mut out = HashMap::with_capacity(asked.len());
        let mut full = Vec::new();
        for &pid in &asked {
            if let Some(gone) = self.exited.get(&pid) {
                if !due(pid) {
                    continue;
                }
                // Still gone (or unreadable): its last known facts. Back in `/proc`: another
                // process took the PID, read it as a first sighting (`read_full` drops the old
                // identity once it has read the new one).
                match (self.read_line)(&mut None, &format!("/proc/{pid}/stat")) {
                    Ok(_) => full.push(Pid::from_u32(pid)),
                    Err(_) => {
                        out.insert(pid, gone.clone());
                    }
                }
                continue;
            }
            let Some(t) = self.tracked.get_mut(&pid).filter(|t| t.complete) else {
                full.push(Pid::from_u32(pid));
                continue;
            };
            if !due(pid) {
                continue;
            }
            let read = self.read_line;
            let files = &mut t.files;
            let (stat, rss_pages) = match read_stat_with(read, &mut files.stat, pid)
                .and_then(|stat| Ok((stat, read_statm_rss_with(read, &mut files.statm, pid)?)))
            {
                Ok(v) => v,
                Err(e) if is_gone(&e) => {
                    let facts = self.exit(pid);
                    out.insert(pid, facts);
                    continue;
                }
                Err(e) => {
                    note_read_error(pid, &e);
                    out.insert(pid, t.last_known(&mut self.users));
                    continue;
                }
            };
            if stat.start_ticks / self.ticks_per_s + self.boot_time != t.start_time {
                // The PID was reused by another process: read it in full (and never read the
                // new process through the old one's descriptors).
                t.files = ProcFiles::default();
                full.push(Pid::from_u32(pid));
                continue;
            }
            t.observe_cpu(stat.cpu_ticks * 1000 / self.ticks_per_s, now);
            t.ppid = stat.ppid;
            let user = t.uid.map(|u| self.users.name(u));
            out.insert(
                pid,
                HostProc {
                    visible: true,
                    name: Some(t.name.clone()),
                    command: Some(t.command.clone()),
                    user,
                    uid: t.uid,
                    cpu_percent: t.cpu_percent,
                    rss_bytes: Some(rss_pages * self.page_size),
                    start_time: Some(t.start_time),
                    ppid: t.ppid,
                    container: t.container.clone(),
                    exited: false,
                    exited_at: None,
                },
            );
        }
        if !full.is_empty() {
            full.sort_unstable();
            self.read_full(&full, now, &mut out);
        }
        out
    }

    /// Reads `pids` through `sysinfo`: first sightings, reused PIDs, incomplete facts.
    fn read_full(&mut self, list: &[Pid], now: Instant, out: &mut HashMap<u32, HostProc>) {
        // `sysinfo` has no way to forget a process it was not asked about; rebuilding the
        // (unrefreshed) `System` is cheap and keeps it holding exactly the PIDs of this read.
        if self
            .system
            .processes()
            .keys()
            .any(|p| list.binary_search(p).is_err())
            && let Ok(fresh) = System::new()
        {
            self.system = fresh;
        }

        self.system.refresh_processes_specifics(
            ProcessesToUpdate::Some(list),
            true,
            ProcessRefreshKind::nothing()
                .without_tasks()
                .with_cpu()
                .with_memory()
                .with_cmd(UpdateKind::OnlyIfNotSet)
                .with_user(UpdateKind::OnlyIfNotSet),
        );

        for pid in list.iter().map(|p| p.as_u32()) {
            let Some(proc_) = self.system.process(Pid::from_u32(pid)) else {
                // `sysinfo` drops a process whatever the failure: ask why, and keep a known
                // process that is only unreadable now.
                let why = (self.read_line)(&mut None, &format!("/proc/{pid}/stat")).err();
                match (self.tracked.get(&pid), why) {
                    (Some(t), Some(e)) if !is_gone(&e) => {
                        note_read_error(pid, &e);
                        out.insert(pid, t.last_known(&mut self.users));
                    }
                    _ => {
                        let facts = self.exit(pid);
                        out.insert(pid, facts);
                    }
                }
                continue;
            };
            // In `/proc`: whatever exited at this PID before is another process.
            self.exited.remove(&pid);
            let start_time = proc_.start_time();
            let cpu_ms = proc_.accumulated_cpu_time();
            let ppid = proc_.parent().map(Pid::as_u32);
            let name = proc_.name().to_string_lossy().into_owned();
            let cmd = join_cmd(proc_.cmd());
            let uid = proc_.user_id().map(|u| **u);

            let tracked = match self.tracked.get_mut(&pid) {
                Some(t) if t.start_time == start_time => {
                    t.observe_cpu(cpu_ms, now);
                    t.ppid = ppid;
                    t
                }
                // First sight, or the PID was reused by another process.
                _ => {
                    let t = Tracked {
                        files: ProcFiles::default(),
                        start_time,
                        cpu_ms,
                        cpu_at: now,
                        cpu_percent: None,
                        container: read_container(pid),
                        ppid,
                        name: String::new(),
                        command: String::new(),
                        uid: None,
                        complete: false,
                    };
                    self.tracked.entry(pid).insert_entry(t).into_mut()
                }
            };
            tracked.complete = cmd.is_some() && uid.is_some();
            tracked.command = cmd.unwrap_or_else(|| name.clone());
            tracked.name = name;
            tracked.uid = uid;
            let user = uid.map(|u| self.users.name(u));

            out.insert(
                pid,
                HostProc {
                    visible: true,
                    name: Some(tracked.name.clone()),
                    command: Some(tracked.command.clone()),
                    user,
                    uid,
                    cpu_percent: tracked.cpu_percent,
                    rss_bytes: Some(proc_.memory()),
                    start_time: Some(start_time),
                    ppid: tracked.ppid,
                    container: tracked.container.clone(),
                    exited: false,
                    exited_at: None,
                },
            );
        }
    }

    /// A PID found gone from `/proc`: a tracked one becomes exited with its last known facts
    /// (kept while it is asked about, within [`MAX_EXITED`]); one exited before keeps its
    /// facts; one never seen is not visible.
    fn exit(&mut self, pid: u32) -> HostProc {
        let Some(t) = self.tracked.remove(&pid) else {
            return self.exited.get(&pid).cloned().unwrap_or_default();
        };
        let mut facts = t.last_known(&mut self.users);
        facts.visible = false;
        facts.exited = true;
        facts.exited_at = Some(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        );
        while self.exited.len() >= self.exited_cap.max(1) {
            // Full: the oldest exit goes (its PID is "not visible here" from now on).
            let oldest = self
                .exited
                .iter()
                .min_by(|a, b| {
                    let at = |h: &HostProc| h.exited_at.unwrap_or(0.0);
                    at(a.1).total_cmp(&at(b.1)).then(a.0.cmp(b.0))
                })
                .map(|(&p, _)| p);
            match oldest {
                Some(p) => self.exited.remove(&p),
                None => break,
            };
        }
        self.exited.insert(pid, facts.clone());
        facts
    }

    /// The PIDs kept as exited, sorted (for tests and diagnostics).
    pub fn exited_pids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.exited.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// Hands what the last [`enrich`](Self::enrich) call learnt (identity, CPU baseline, the
    /// facts read in full) to another `ProcInfo`, through [`adopt`](Self::adopt): the sampler
    /// enriches first-seen PIDs on its fast thread and the host thread then refreshes them
    /// without reading them in full a second time. Leaves this one empty.
    pub fn hand_over(&mut self) -> Handover {
        Handover(std::mem::take(&mut self.tracked))
    }

    /// Takes over the state of PIDs this one does not track yet (see
    /// [`hand_over`](Self::hand_over)); what it tracks already wins. The next
    /// [`enrich`](Self::enrich) still drops whatever it is not asked about.
    pub fn adopt(&mut self, handover: Handover) {
        for (pid, t) in handover.0 {
            self.tracked.entry(pid).or_insert(t);
        }
    }

    /// The parent of `pid`: from the last [`enrich`](Self::enrich) call when it covered `pid`,
    /// otherwise read from `/proc/PID/stat` (for ancestors that hold no GPU context).
    pub fn parent_of(&self, pid: u32) -> Option<u32> {
        match self.tracked.get(&pid) {
            Some(t) => t.ppid,
            None => read_ppid(pid),
        }
    }

    /// The PIDs whose state is kept, sorted: exactly the PIDs of the last
    /// [`enrich`](Self::enrich) call that `/proc` showed. For tests and diagnostics (proves
    /// that no process-table scan happened).
    pub fn loaded_pids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.tracked.keys().copied().collect();
        v.sort_unstable();
        v
    }
}

impl Tracked {
    /// What is known of the process when its `/proc` files cannot be read now (but it is not
    /// gone): its identity and facts; CPU % and RSS unknown.
    fn last_known(&self, users: &mut UserNames) -> HostProc {
        HostProc {
            visible: true,
            name: Some(self.name.clone()),
            command: Some(self.command.clone()),
            user: self.uid.map(|u| users.name(u)),
            uid: self.uid,
            cpu_percent: None,
            rss_bytes: None,
            start_time: Some(self.start_time),
            ppid: self.ppid,
            container: self.container.clone(),
            exited: false,
            exited_at: None,
        }
    }

    /// Takes a new reading of the accumulated CPU time: a new CPU % when the window since the
    /// baseline is long enough, else the baseline (and the last value) stays.
    fn observe_cpu(&mut self, cpu_ms: u64, now: Instant) {
        let window = now.saturating_duration_since(self.cpu_at);
        if window >= MIN_CPU_WINDOW {
            let used = cpu_ms.saturating_sub(self.cpu_ms) as f64;
            let pct = used / (window.as_secs_f64() * 1000.0) * 100.0;
            self.cpu_percent = Some(pct as f32);
            self.cpu_ms = cpu_ms;
            self.cpu_at = now;
        }
    }
}

/// What a refresh reads from `/proc/PID/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    ppid: Option<u32>,
    /// utime + stime, clock ticks.
    cpu_ticks: u64,
    /// Start time after boot, clock ticks.
    start_ticks: u64,
}

/// A file that reads but does not parse is a failure, not a gone process.
fn unparsable(path: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("{path}: unexpected format"),
    )
}

fn read_stat_with(
    read: LineReader,
    slot: &mut Option<CachedFile>,
    pid: u32,
) -> std::io::Result<Stat> {
    let path = format!("/proc/{pid}/stat");
    parse_stat(&read(slot, &path)?).ok_or_else(|| unparsable(&path))
}

/// Resident pages from `/proc/PID/statm` (its second field), where `sysinfo` reads them: the
/// `rss` of `/proc/PID/stat` may lag by the kernel's per-CPU counter batches.
fn read_statm_rss_with(
    read: LineReader,
    slot: &mut Option<CachedFile>,
    pid: u32,
) -> std::io::Result<u64> {
    let path = format!("/proc/{pid}/statm");
    read(slot, &path)?
        .split_ascii_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| unparsable(&path))
}

/// A one-line `/proc` file in three system calls (open, read, close): the kernel hands such a
/// file over in one read, ending with a newline, so there is no need for the size query and
/// the read that finds the end which `read_to_string` adds (the daemon reads 1 024 of these
/// per refresh). Keeps reading until a newline or the end all the same. Bytes that are not
/// UTF-8 (a command name can be anything) are replaced rather than losing the process.
///
/// With a descriptor cached in `slot` (see [`CachedFile`]) it is one system call (`pread` at
/// offset 0). When that read fails the descriptor is dropped and the file opened again by
/// path, so a process that was reaped and whose PID came back is read as today's process
/// (whose start time then tells the reuse), and any other failure is the path's answer.
fn read_proc_line(slot: &mut Option<CachedFile>, path: &str) -> std::io::Result<String> {
    if let Some(cached) = slot.as_ref() {
        match read_from_start(&cached.0) {
            Ok(text) => return Ok(text),
            Err(_) => *slot = None,
        }
    }
    let file = std::fs::File::open(path)?;
    let text = read_from_start(&file)?;
    if let Ok(kept) = CachedFile::keep(file) {
        *slot = Some(kept);
    }
    Ok(text)
}

/// The whole file from offset 0 (`pread`, so a kept descriptor needs no seek).
fn read_from_start(file: &std::fs::File) -> std::io::Result<String> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 512];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(len * 2, 0);
        }
        let n = file.read_at(&mut buf[len..], len as u64)?;
        len += n;
        if n == 0 || buf[..len].ends_with(b"\n") {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&buf[..len]).into_owned())
}

/// Fields of `/proc/PID/stat` (see proc(5)); the command name (field 2) may contain spaces and
/// parentheses, so the fields after it are counted from the *last* `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let mut fields = text[text.rfind(')')? + 1..].split_ascii_whitespace();
    let num = |f: Option<&str>| f?.parse::<u64>().ok();
    // Fields 3 (state) and 4 (ppid)…
    let ppid = num(fields.nth(1))?;
    // …14 (utime), 15 (stime)…
    let utime = num(fields.nth(9))?;
    let stime = num(fields.next())?;
    // …22 (starttime).
    let start_ticks = num(fields.nth(6))?;
    Some(Stat {
        ppid: u32::try_from(ppid).ok().filter(|&p| p != 0),
        cpu_ticks: utime.saturating_add(stime),
        start_ticks,
    })
}

/// Arguments joined by spaces; `None` when the command line is empty (kernel threads,
/// zombies).
fn join_cmd(cmd: &[std::ffi::OsString]) -> Option<String> {
    let parts: Vec<_> = cmd.iter().map(|a| a.to_string_lossy()).collect();
    let joined = parts.join(" ");
    (!joined.trim().is_empty()).then_some(joined)
}

fn read_container(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    container_from_cgroup(&text)
}

/// Resolves uids to user names, with a rarely refreshed users list.
struct UserNames {
    users: Users,
    refreshed_at: Option<Instant>,
    /// Uids not in the users list at its last read, with what the fallbacks found.
    fallback: HashMap<u32, Option<String>>,
}

impl UserNames {
    fn new() -> Result<Self, sysinfo::Error> {
        Ok(Self {
            users: Users::new()?,
            refreshed_at: None,
            fallback: HashMap::new(),
        })
    }

    fn refresh(&mut self) {
        self.users.refresh();
        self.refreshed_at = Some(Instant::now());
        self.fallback.clear();
    }

    /// The user name of `uid`, or the uid as a string when nothing knows it.
    fn name(&mut self, uid: u32) -> String {
        if self
            .refreshed_at
            .is_none_or(|at| at.elapsed() >= USERS_REFRESH)
        {
            self.refresh();
        }
        if let Some(name) = lookup_users(&self.users, uid) {
            return name;
        }
        if let Some(known) = self.fallback.get(&uid) {
            return known.clone().unwrap_or_else(|| uid.to_string());
        }
        // A uid not seen before: re-read the list once (a user added since), then fall back.
        if self
            .refreshed_at
            .is_none_or(|at| at.elapsed() >= USERS_MIN_GAP)
        {
            let fallback = std::mem::take(&mut self.fallback);
            self.users.refresh();
            self.refreshed_at = Some(Instant::now());
            self.fallback = fallback;
            if let Some(name) = lookup_users(&self.users, uid) {
                return name;
            }
        }
        let found = fallback_name(uid);
        self.fallback.insert(uid, found.clone());
        found.unwrap_or_else(|| uid.to_string())
    }
}

fn lookup_users(users: &Users, uid: u32) -> Option<String> {
    let uid = Uid::try_from(uid as usize).ok()?;
    users.get_user_by_id(&uid).map(|u| u.name().to_owned())
}

/// Name sources besides `sysinfo::Users`: `/etc/passwd` without sysinfo's shell filter, then
/// the login environment when `uid` is the invoking user's.
fn fallback_name(uid: u32) -> Option<String> {
    if let Ok(text) = std::fs::read_to_string("/etc/passwd")
        && let Some(name) = passwd_name(&text, uid)
    {
        return Some(name);
    }
    if current_uid() == Some(uid) {
        for var in ["USER", "LOGNAME"] {
            if let Ok(name) = std::env::var(var)
                && !name.is_empty()
            {
                return Some(name);
            }
        }
    }
    None
}

/// The name of `uid` in `/etc/passwd`-formatted text.
fn passwd_name(text: &str, uid: u32) -> Option<String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?;
            let id: u32 = fields.nth(1)?.trim().parse().ok()?;
            (id == uid && !name.is_empty()).then(|| name.to_owned())
        })
}

/// The real uid of this process (from `/proc/self/status`).
pub fn current_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The invoking user's name, resolved like [`ProcInfo::enrich`] resolves `HostProc::user`
/// (so the two compare equal for this user's processes): the numeric uid when no name is
/// known; `None` only when the uid itself can't be read.
pub fn current_user() -> Option<String> {
    current_uid().map(user_name)
}

/// The name of `uid`, resolved like [`ProcInfo::enrich`] resolves `HostProc::user`: the
/// numeric uid when no name is known. Reads the users list afresh: for one-off uses.
pub fn user_name(uid: u32) -> String {
    user_namer()(uid)
}

/// Names many uids as [`user_name`] does, reading the users list once (the tree view's rows).
pub fn user_namer() -> impl FnMut(u32) -> String {
    let users = Users::new_with_refreshed_list().ok();
    let mut known: HashMap<u32, String> = HashMap::new();
    move |uid| {
        known
            .entry(uid)
            .or_insert_with(|| {
                users
                    .as_ref()
                    .and_then(|users| lookup_users(users, uid))
                    .or_else(|| fallback_name(uid))
                    .unwrap_or_else(|| uid.to_string())
            })
            .clone()
    }
}

/// The parent PID of `pid`, read from `/proc/PID/stat`; `None` when the process is not visible
/// or has no parent (PID 1, kernel threads' parent 0 included).
pub fn read_ppid(pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    ppid_from_stat(&text)
}

/// The parent PID from the text of `/proc/PID/stat`. The command name (field 2) may contain
/// spaces and parentheses, so the fields after it are found after the *last* `)`.
pub fn ppid_from_stat(text: &str) -> Option<u32> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let _state = fields.next()?;
    let ppid: u32 = fields.next()?.parse().ok()?;
    (ppid != 0).then_some(ppid)
}

/// Length of the short container id, as `docker ps` prints it.
const SHORT_ID: usize = 12;

/// The container (or Kubernetes pod) a process runs in, from the text of `/proc/PID/cgroup`
/// (cgroup v1 or v2).
///
/// Format:
/// - a container: its short id, the first 12 hex digits, as `docker ps` / `crictl ps` /
///   `podman ps` print it, e.g. `3f4e5d6c7b8a`;
/// - a Kubernetes pod: `pod:<pod-uid>/<short container id>`, the pod UID with dashes as
///   `kubectl get pod -o jsonpath='{.metadata.uid}'` prints it, e.g.
///   `pod:1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901/3f4e5d6c7b8a`; `pod:<pod-uid>` alone when the
///   process sits in the pod's cgroup but not in a container's.
///
/// Recognised: docker (`/docker/<id>`, `docker-<id>.scope`), containerd/CRI
/// (`cri-containerd-<id>.scope`, nerdctl `nerdctl-<id>.scope`, bare `/<namespace>/<id>`),
/// cri-o (`crio-<id>.scope`, `crio-<id>`), podman (`libpod-<id>.scope`, `libpod-<id>`), and
/// kubepods under the systemd driver (`kubepods-…-pod<uid_with_underscores>.slice`) and the
/// cgroupfs driver (`/kubepods/<qos>/pod<uid>/<id>`). Nested containers (docker in docker)
/// give the innermost id. Container monitors (`crio-conmon-…`, `libpod-conmon-…`), systemd
/// user/session slices and services give `None`.
pub fn container_from_cgroup(text: &str) -> Option<String> {
    let mut best: Option<(Option<String>, Option<String>)> = None;
    for line in text.lines() {
        // hierarchy-ID:controller-list:path; the path may itself contain ':'.
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(_), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let (pod, id) = parse_cgroup_path(path);
        if pod.is_none() && id.is_none() {
            continue;
        }
        // Prefer the most informative line (v1 lists one path per controller).
        let score = |p: &Option<String>, i: &Option<String>| {
            usize::from(p.is_some()) + usize::from(i.is_some())
        };
        if best
            .as_ref()
            .is_none_or(|(bp, bi)| score(&pod, &id) > score(bp, bi))
        {
            best = Some((pod, id));
        }
    }
    match best? {
        (Some(pod), Some(id)) => Some(format!("pod:{pod}/{id}")),
        (Some(pod), None) => Some(format!("pod:{pod}")),
        (None, Some(id)) => Some(id),
        (None, None) => None,
    }
}

/// Pod UID and short container id found in one cgroup path.
fn parse_cgroup_path(path: &str) -> (Option<String>, Option<String>) {
    let mut pod = None;
    let mut id = None;
    let mut in_kubepods = false;
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        if segment == "kubepods" || segment.starts_with("kubepods.") {
            in_kubepods = true;
        }
        if in_kubepods && let Some(uid) = pod_uid(segment) {
            pod = Some(uid);
            continue;
        }
        if let Some(found) = container_id(segment) {
            id = Some(found);
        }
    }
    (pod, id)
}

/// The pod UID (with dashes) of a kubepods path segment: `pod<uid>` (cgroupfs) or
/// `kubepods[-<qos>]-pod<uid_with_underscores>.slice` (systemd).
fn pod_uid(segment: &str) -> Option<String> {
    let raw = if let Some(s) = segment.strip_suffix(".slice") {
        &s[s.rfind("-pod")? + 4..]
    } else {
        segment.strip_prefix("pod")?
    };
    let uid = raw.replace('_', "-");
    let ok = uid.len() >= 8 && uid.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    ok.then_some(uid)
}

/// The short id of a container path segment: `<runtime>-<id>.scope`, `<runtime>-<id>`, or a
/// bare 64-hex id.
fn container_id(segment: &str) -> Option<String> {
    const PREFIXES: [&str; 5] = ["docker-", "cri-containerd-", "crio-", "libpod-", "nerdctl-"];
    let base = segment.strip_suffix(".scope").unwrap_or(segment);
    let id = PREFIXES
        .iter()
        .find_map(|p| base.strip_prefix(p))
        .filter(|id| id.len() >= SHORT_ID && is_hex(id))
        .or_else(|| (base.len() == 64 && is_hex(base)).then_some(base))?;
    Some(id[..SHORT_ID].to_ascii_lowercase())
}

fn is_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const ID: &str = "3f4e5d6c7b8a99aabbccddeeff00112233445566778899aabbccddeeff001122";
    const SHORT: &str = "3f4e5d6c7b8a";
    const POD: &str = "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901";
    const POD_US: &str = "1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901";

    fn v1(path: &str) -> String {
        format!(
            "12:pids:{path}\n11:memory:{path}\n10:cpu,cpuacct:{path}\n\
             9:devices:{path}\n1:name=systemd:{path}\n0::/\n"
        )
    }

    fn v2(path: &str) -> String {
        format!("0::{path}\n")
    }

    #[test]
    fn docker_v1_cgroupfs() {
        assert_eq!(
            container_from_cgroup(&v1(&format!("/docker/{ID}"))).as_deref(),
            Some(SHORT)
        );
    }

    #[test]
    fn docker_v2_systemd_scope() {
        let text = v2(&format!("/system.slice/docker-{ID}.scope"));
        assert_eq!(container_from_cgroup(&text).as_deref(), Some(SHORT));
    }

    #[test]
    fn docker_v1_systemd_scope() {
        let text = v1(&format!("/system.slice/docker-{ID}.scope"));
        assert_eq!(container_from_cgroup(&text).as_deref(), Some(SHORT));
    }

    #[test]
    fn docker_in_docker_gives_innermost() {
        let inner = "aaaabbbbccccddddeeeeffff00001111222233334444555566667777888899990";
        let inner = &inner[..64];
        let text = v1(&format!("/docker/{ID}/docker/{inner}"));
        assert_eq!(container_from_cgroup(&text).as_deref(), Some(&inner[..12]));
    }

    #[test]
    fn containerd_cri_plain() {
        let text = v2(&format!("/system.slice/cri-containerd-{ID}.scope"));
        assert_eq!(container_from_cgroup(&text).as_deref(), Some(SHORT));
    }

    #[test]
    fn containerd_namespace_dir() {
        assert_eq!(
            container_from_cgroup(&v1(&format!("/default/{ID}"))).as_deref(),
            Some(SHORT)
        );
        let text = v2(&format!("/system.slice/nerdctl-{ID}.scope"));
        assert_eq!(container_from_cgroup(&text).as_deref(), Some(SHORT));
    }

    #[test]
    fn crio_scope_and_conmon() {
        let text = v2(&format!(
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{POD_US}.slice/crio-{ID}.scope"
        ));
        assert_eq!(
            container_from_cgroup(&text),
            Some(format!("pod:{POD}/{SHORT}"))
        );
        // conmon monitors the container from outside it.
        let text = v2(&format!("/machine.slice/crio-conmon-{ID}.scope"));
        assert_eq!(container_from_cgroup(&text), None);
    }

    #[test]
    fn podman_root_and_rootless() {
        let text = v2(&format!("/machine.slice/libpod-{ID}.scope/container"));
        assert_eq!(container_from_cgroup(&text).as_deref(), Some(SHORT));
        let text = v2(&format!(
            "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container"
        ));
        assert_eq!(container_from_cgroup(&text).as_deref(), Some(SHORT));
        let text = v1(&format!("/libpod_parent/libpod-{ID}"));
        assert_eq!(container_from_cgroup(&text).as_deref(), Some(SHORT));
        let text = v2(&format!(
            "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-conmon-{ID}.scope"
        ));
        assert_eq!(container_from_cgroup(&text), None);
    }

    #[test]
    fn kubepods_v2_systemd_containerd() {
        let text = v2(&format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_US}.slice/cri-containerd-{ID}.scope"
        ));
        assert_eq!(
            container_from_cgroup(&text),
            Some(format!("pod:{POD}/{SHORT}"))
        );
    }

    #[test]
    fn kubepods_guaranteed_systemd() {
        let text = v2(&format!(
            "/kubepods.slice/kubepods-pod{POD_US}.slice/cri-containerd-{ID}.scope"
        ));
        assert_eq!(
            container_from_cgroup(&text),
            Some(format!("pod:{POD}/{SHORT}"))
        );
    }

    #[test]
    fn kubepods_v1_cgroupfs() {
        let text = v1(&format!("/kubepods/burstable/pod{POD}/{ID}"));
        assert_eq!(
            container_from_cgroup(&text),
            Some(format!("pod:{POD}/{SHORT}"))
        );
        let text = v1(&format!("/kubepods/pod{POD}/{ID}"));
        assert_eq!(
            container_from_cgroup(&text),
            Some(format!("pod:{POD}/{SHORT}"))
        );
    }

    #[test]
    fn kubepods_v1_systemd_docker() {
        let text = v1(&format!(
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{POD_US}.slice/docker-{ID}.scope"
        ));
        assert_eq!(
            container_from_cgroup(&text),
            Some(format!("pod:{POD}/{SHORT}"))
        );
    }

    #[test]
    fn kubepods_pod_without_container() {
        let text = v2(&format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_US}.slice"
        ));
        assert_eq!(container_from_cgroup(&text), Some(format!("pod:{POD}")));
    }

    #[test]
    fn v1_prefers_the_most_informative_line() {
        let text = format!(
            "12:pids:/kubepods/burstable/pod{POD}\n11:memory:/kubepods/burstable/pod{POD}/{ID}\n0::/\n"
        );
        assert_eq!(
            container_from_cgroup(&text),
            Some(format!("pod:{POD}/{SHORT}"))
        );
    }

    #[test]
    fn plain_host_processes_have_no_container() {
        for path in [
            "/",
            "/user.slice/user-1000.slice/session-3.scope",
            "/user.slice/user-1000.slice/user@1000.service/app.slice/app-gnome-firefox-1234.scope",
            "/system.slice/sshd.service",
            "/system.slice/docker.service",
            "/init.scope",
        ] {
            assert_eq!(container_from_cgroup(&v2(path)), None, "{path}");
            assert_eq!(container_from_cgroup(&v1(path)), None, "{path}");
        }
        // A 32-hex job id is not a container id.
        let text = "4:memory:/process_api/b2778ec4825329207a0c144a11d73e79\n0::/\n";
        assert_eq!(container_from_cgroup(text), None);
        assert_eq!(container_from_cgroup(""), None);
        assert_eq!(container_from_cgroup("garbage"), None);
    }

    #[test]
    fn ppid_parses_hostile_comm() {
        let stat = "4242 (a) b (c)) S 77 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123 0 0";
        assert_eq!(ppid_from_stat(stat), Some(77));
        let stat = "12 (with space) R 3 12 12 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0\n";
        assert_eq!(ppid_from_stat(stat), Some(3));
        // PID 1 has parent 0: no parent.
        assert_eq!(ppid_from_stat("1 (systemd) S 0 1 1 0"), None);
        assert_eq!(ppid_from_stat("1 (systemd"), None);
        assert_eq!(ppid_from_stat("1 (x) S"), None);
        assert_eq!(ppid_from_stat(""), None);
    }

    #[test]
    fn read_ppid_of_self() {
        let me = std::process::id();
        let parent = read_ppid(me);
        assert!(parent.is_some());
        assert_ne!(parent, Some(me));
    }

    #[test]
    fn passwd_lookup() {
        let text = "root:x:0:0:root:/root:/bin/bash\n# comment\ngdm:x:120:125:Gnome:/var/lib/gdm3:/bin/false\nbad line\n";
        assert_eq!(passwd_name(text, 0).as_deref(), Some("root"));
        assert_eq!(passwd_name(text, 120).as_deref(), Some("gdm"));
        assert_eq!(passwd_name(text, 5), None);
    }

    #[test]
    fn current_user_is_known() {
        let uid = current_uid().expect("uid of this process");
        let name = current_user().expect("a name or the numeric uid");
        assert!(!name.is_empty());
        if uid == 0 {
            assert_eq!(name, "root");
        }
    }

    #[test]
    fn stat_fields_are_counted_after_the_last_paren() {
        let stat = "4242 (a) b (c)) S 77 4242 4242 0 -1 4194560 100 0 0 0 11 22 0 0 20 0 1 0 123 456 789 18446744073709551615";
        assert_eq!(
            parse_stat(stat),
            Some(Stat {
                ppid: Some(77),
                cpu_ticks: 33,
                start_ticks: 123,
            })
        );
        let stat = "1 (systemd) S 0 1 1 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 9 10 11\n";
        assert_eq!(
            parse_stat(stat).map(|s| (s.ppid, s.start_ticks)),
            Some((None, 9))
        );
        assert_eq!(parse_stat("1 (x) S 0 1 1 0"), None);
        assert_eq!(parse_stat(""), None);
    }

    /// A `sleep 30` child, once it runs `sleep` (before exec its command line is empty, and
    /// its facts are incomplete).
    pub(crate) fn running_sleep() -> (std::process::Child, u32) {
        let child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        for _ in 0..200 {
            if std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.starts_with(b"sleep\0"))
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        (child, pid)
    }

    /// A by-path read that keeps no descriptor.
    fn read_once(path: &str) -> std::io::Result<String> {
        read_proc_line(&mut None, path)
    }

    #[test]
    fn a_proc_line_is_read_whole() {
        let stat = read_once("/proc/self/stat").expect("own stat");
        assert!(
            stat.starts_with(&format!("{} (", std::process::id())),
            "{stat}"
        );
        assert!(stat.ends_with('\n'), "{stat}");
        // Every field is there: as many as a plain read gives.
        let plain = std::fs::read_to_string("/proc/self/stat").expect("read");
        assert_eq!(
            stat.split_ascii_whitespace().count(),
            plain.split_ascii_whitespace().count()
        );
        // Longer than the first buffer, and without a final newline: read to the end.
        let dir = tempfile::tempdir().expect("tempdir");
        let long = "x".repeat(5000);
        std::fs::write(dir.path().join("f"), &long).expect("write");
        let path = dir.path().join("f");
        // Read through a kept descriptor too (pread from 0 each time).
        let mut slot = None;
        for _ in 0..2 {
            assert_eq!(
                read_proc_line(&mut slot, path.to_str().expect("utf-8")).ok(),
                Some(long.clone())
            );
            assert!(slot.is_some());
        }
        assert!(read_once("/proc/0/stat").is_err_and(|e| is_gone(&e)));
        let me = std::process::id();
        assert!(read_stat_with(read_proc_line, &mut None, me).is_ok());
        assert!(read_statm_rss_with(read_proc_line, &mut None, me).is_ok_and(|pages| pages > 0));
    }

    /// A known process is refreshed through descriptors kept from the previous refresh, which
    /// the kernel regenerates on each read: new CPU time and RSS, one system call per file.
    #[test]
    fn a_refresh_reads_kept_descriptors_anew() {
        /// Kills the busy loop however the test ends.
        struct Busy(std::process::Child);
        impl Drop for Busy {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let mut child = Busy(
            std::process::Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .expect("spawn a busy shell"),
        );
        let pid = child.0.id();
        // Past exec: a command line read mid-exec is empty, and the facts stay incomplete.
        for _ in 0..200 {
            if std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.starts_with(b"sh\0")) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut info = ProcInfo::new().expect("sysinfo supported");
        info.enrich(&[pid]);
        std::thread::sleep(MIN_CPU_WINDOW);
        info.enrich(&[pid]); // opens and keeps stat and statm
        let files = &info.tracked[&pid].files;
        assert!(files.stat.is_some() && files.statm.is_some(), "{files:?}");
        let kept_stat = std::ptr::from_ref(files.stat.as_ref().expect("kept"));
        let before = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        std::thread::sleep(Duration::from_millis(300));
        let after = info.enrich(&[pid])[&pid].clone();
        // The same descriptor, yet the CPU time moved: the busy loop ran for 300 ms.
        let files = &info.tracked[&pid].files;
        assert!(std::ptr::eq(kept_stat, files.stat.as_ref().expect("kept")));
        assert!(after.cpu_percent.is_some_and(|c| c > 5.0), "{after:?}");
        let fresh = read_stat_with(read_proc_line, &mut None, pid).expect("stat");
        let old = parse_stat(&before).expect("parse");
        assert!(fresh.cpu_ticks > old.cpu_ticks, "{old:?} -> {fresh:?}");
        assert!(after.rss_bytes.is_some_and(|b| b > 0));
        let _ = child.0.kill();
        let _ = child.0.wait();
        // Reaped: the kept descriptors answer ESRCH, the path ENOENT: gone (exited, with what
        // was known of it), descriptors closed.
        assert_exited_as(&info.enrich(&[pid])[&pid], &after);
        assert!(info.loaded_pids().is_empty());
    }

    /// A kept descriptor whose process was reaped (as when the PID is reused) is dropped and
    /// the file read by path: the process living at the PID now is what is reported.
    #[test]
    fn a_dead_descriptor_falls_back_to_the_path() {
        let (mut child, pid) = running_sleep();
        let (mut other, other_pid) = running_sleep();
        let dead = std::fs::File::open(format!("/proc/{other_pid}/stat")).expect("open");
        let _ = other.kill();
        let _ = other.wait();
        let mut info = ProcInfo::new().expect("sysinfo supported");
        let seen = info.enrich(&[pid])[&pid].clone();
        let t = info.tracked.get_mut(&pid).expect("tracked");
        t.files.stat = Some(CachedFile::keep(dead).expect("within the budget"));
        let now = info.enrich(&[pid])[&pid].clone();
        assert!(now.visible && now.rss_bytes.is_some(), "{now:?}");
        assert_eq!((now.start_time, &now.name), (seen.start_time, &seen.name));
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn the_descriptor_budget_leaves_most_of_the_limit() {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        assert!(cached_files_budget() <= soft / 4 && cached_files_budget() <= 4096);
    }

    #[test]
    fn refresh_from_stat_agrees_with_sysinfo() {
        let (mut child, pid) = running_sleep();
        let mut info = ProcInfo::new().expect("sysinfo supported");
        let full = info.enrich(&[pid])[&pid].clone();
        assert!(info.tracked[&pid].complete, "{full:?}");
        std::thread::sleep(MIN_CPU_WINDOW);
        // Known and complete: refreshed from /proc/PID/stat alone.
        let quick = info.enrich(&[pid])[&pid].clone();
        assert_eq!(quick.start_time, full.start_time);
        assert_eq!(quick.ppid, full.ppid);
        assert_eq!((&quick.name, &quick.command), (&full.name, &full.command));
        assert_eq!((&quick.user, quick.uid), (&full.user, full.uid));
        assert_eq!(quick.container, full.container);
        assert!(quick.cpu_percent.is_some());
        // RSS in the same unit as sysinfo's (read again in full: the first read may have been
        // before `sleep` finished loading).
        let fresh = ProcInfo::new().expect("sysinfo").enrich(&[pid])[&pid].clone();
        let rss = |h: &HostProc| h.rss_bytes.expect("rss");
        assert!(
            rss(&quick).abs_diff(rss(&fresh)) <= 16 * 1024,
            "{quick:?} vs {fresh:?}"
        );
        let _ = child.kill();
        let _ = child.wait();
        // Gone: exited with its last known facts, no longer tracked.
        assert_exited_as(&info.enrich(&[pid])[&pid], &quick);
        assert!(info.loaded_pids().is_empty());
    }

    #[test]
    fn a_handed_over_pid_is_refreshed_not_read_again() {
        let (mut child, pid) = running_sleep();
        let mut first = ProcInfo::new().expect("sysinfo supported");
        let seen = first.enrich(&[pid])[&pid].clone();
        let mut handover = Handover::default();
        handover.merge(first.hand_over());
        assert!(first.loaded_pids().is_empty());
        let mut host = ProcInfo::new().expect("sysinfo supported");
        host.adopt(handover);
        std::thread::sleep(MIN_CPU_WINDOW);
        let refreshed = host.enrich(&[pid])[&pid].clone();
        // The CPU baseline came along: a second sighting, not a first one.
        assert!(refreshed.cpu_percent.is_some(), "{refreshed:?}");
        assert_eq!(
            (
                &refreshed.command,
                refreshed.start_time,
                &refreshed.container
            ),
            (&seen.command, seen.start_time, &seen.container)
        );
        // sysinfo was not asked: the refresh came from /proc/PID/stat and statm.
        assert!(host.system.processes().is_empty());
        let _ = child.kill();
        let _ = child.wait();
    }

    /// A known PID that is not due is neither read nor forgotten: it is left out of the map
    /// (the caller keeps its facts) and keeps its CPU baseline for the next refresh; a PID
    /// seen for the first time is read whether due or not.
    #[test]
    fn enrich_due_skips_known_pids_that_are_not_due_and_keeps_their_state() {
        let (mut a, pa) = running_sleep();
        let (mut b, pb) = running_sleep();
        let mut info = ProcInfo::new().expect("sysinfo supported");
        let first = info.enrich_due(&[pa, pb], |pid| pid == pa);
        assert!(
            first.contains_key(&pa) && first.contains_key(&pb),
            "{first:?}"
        );
        std::thread::sleep(MIN_CPU_WINDOW);
        let second = info.enrich_due(&[pa, pb], |pid| pid == pa);
        assert!(second.contains_key(&pa), "{second:?}");
        assert!(!second.contains_key(&pb), "{second:?}");
        assert_eq!(
            info.loaded_pids().len(),
            2,
            "the skipped PID is still tracked"
        );
        // When it is due again, its CPU % comes from the baseline kept: no second first read.
        let third = info.enrich(&[pa, pb]);
        assert!(third[&pb].cpu_percent.is_some(), "{:?}", third[&pb]);
        for c in [&mut a, &mut b] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    #[test]
    fn pid_reuse_drops_cached_state() {
        let (mut child, pid) = running_sleep();
        let mut info = ProcInfo::new().expect("sysinfo supported");
        info.enrich(&[pid]);
        std::thread::sleep(MIN_CPU_WINDOW);
        assert!(info.enrich(&[pid])[&pid].cpu_percent.is_some());

        // Pretend the cached entry belonged to an earlier process with this PID.
        let t = info.tracked.get_mut(&pid).expect("tracked");
        t.start_time -= 1;
        t.container = Some("stale".into());
        std::thread::sleep(MIN_CPU_WINDOW);
        let h = &info.enrich(&[pid])[&pid];
        assert_eq!(h.cpu_percent, None, "new identity: CPU unknown again");
        assert_ne!(h.container.as_deref(), Some("stale"));
        assert_eq!(info.tracked[&pid].start_time, h.start_time.expect("start"));

        let _ = child.kill();
        let _ = child.wait();
    }

    fn out_of_descriptors(_: &mut Option<CachedFile>, _: &str) -> std::io::Result<String> {
        Err(std::io::Error::from_raw_os_error(
            rustix::io::Errno::MFILE.raw_os_error(),
        ))
    }

    fn no_such_process(_: &mut Option<CachedFile>, _: &str) -> std::io::Result<String> {
        Err(std::io::Error::from_raw_os_error(
            rustix::io::Errno::SRCH.raw_os_error(),
        ))
    }

    #[test]
    fn an_unreadable_proc_keeps_a_known_process_and_only_gone_forgets_it() {
        let (mut child, pid) = running_sleep();
        let mut info = ProcInfo::new().expect("sysinfo supported");
        let seen = info.enrich(&[pid])[&pid].clone();
        assert!(seen.visible && seen.name.is_some(), "{seen:?}");
        let errors = read_errors();
        // EMFILE (and EACCES, EIO…): the process is still there, only unreadable now.
        info.read_line = out_of_descriptors;
        let kept = info.enrich(&[pid])[&pid].clone();
        assert!(kept.visible, "{kept:?}");
        assert_eq!(
            (&kept.name, &kept.command, kept.start_time, &kept.user),
            (&seen.name, &seen.command, seen.start_time, &seen.user)
        );
        assert_eq!((kept.cpu_percent, kept.rss_bytes), (None, None));
        assert!(read_errors() > errors);
        assert!(last_read_error().is_some_and(|e| e.contains(&pid.to_string())));
        assert_eq!(info.loaded_pids(), vec![pid], "still tracked");
        // Readable again: refreshed as before, same identity.
        info.read_line = read_proc_line;
        std::thread::sleep(MIN_CPU_WINDOW);
        let back = info.enrich(&[pid])[&pid].clone();
        assert_eq!((back.start_time, &back.name), (seen.start_time, &seen.name));
        assert!(back.rss_bytes.is_some());
        // ESRCH: gone.
        info.read_line = no_such_process;
        assert_exited_as(&info.enrich(&[pid])[&pid], &seen);
        assert!(info.loaded_pids().is_empty());
        let _ = child.kill();
        let _ = child.wait();
    }

    /// `h` is the exited form of `seen`: not visible, marked exited (just now), with its
    /// identity and facts, CPU % and RSS unknown.
    fn assert_exited_as(h: &HostProc, seen: &HostProc) {
        assert!(!h.visible && h.exited, "{h:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs_f64();
        assert!(
            h.exited_at.is_some_and(|at| (now - at).abs() < 60.0),
            "{h:?}"
        );
        assert_eq!(
            (&h.name, &h.command, &h.user, h.uid),
            (&seen.name, &seen.command, &seen.user, seen.uid)
        );
        assert_eq!(
            (h.start_time, h.ppid, &h.container),
            (seen.start_time, seen.ppid, &seen.container)
        );
        assert_eq!((h.cpu_percent, h.rss_bytes), (None, None));
    }

    /// A process seen in `/proc` that exits while still asked about is exited, with its last
    /// known facts, on every later call, whether found gone by the refresh of a known process
    /// or by a full read; it is forgotten once it is not asked about; a PID never seen stays
    /// not visible.
    #[test]
    fn an_exited_process_keeps_its_identity_until_it_is_no_longer_asked() {
        let (mut a, pa) = running_sleep();
        let (mut b, pb) = running_sleep();
        let mut info = ProcInfo::new().expect("sysinfo supported");
        let seen = info.enrich(&[pa, pb]);
        assert!(info.tracked[&pa].complete, "{seen:?}");
        // b's facts incomplete: the next read of it is a full one (through sysinfo).
        info.tracked.get_mut(&pb).expect("tracked").complete = false;
        for c in [&mut a, &mut b] {
            let _ = c.kill();
            let _ = c.wait();
        }
        let never = u32::try_from(rustix::process::getpid().as_raw_nonzero().get())
            .expect("pid")
            .saturating_add(4_000_000);
        let first = info.enrich(&[pa, pb, never]);
        assert_exited_as(&first[&pa], &seen[&pa]);
        assert_exited_as(&first[&pb], &seen[&pb]);
        assert_eq!(
            first[&never],
            HostProc::default(),
            "never seen: not visible"
        );
        assert_eq!(info.exited_pids(), sorted(vec![pa, pb]));
        // Still listed: the same facts, the same time of exit.
        let again = info.enrich(&[pa, pb, never]);
        assert_eq!(again[&pa], first[&pa]);
        assert_eq!(again[&pb], first[&pb]);
        // A PID not due is left out (the caller keeps its facts) and not forgotten.
        let skipped = info.enrich_due(&[pa, pb], |pid| pid == pb);
        assert!(!skipped.contains_key(&pa) && skipped.contains_key(&pb));
        assert_eq!(info.exited_pids(), sorted(vec![pa, pb]));
        // The driver stops listing a: forgotten; asked again later, it is not visible.
        info.enrich(&[pb]);
        assert_eq!(info.exited_pids(), vec![pb]);
        assert_eq!(info.enrich(&[pa, pb])[&pa], HostProc::default());
    }

    fn sorted(mut v: Vec<u32>) -> Vec<u32> {
        v.sort_unstable();
        v
    }

    /// PID reuse: a PID kept as exited that `/proc` shows again is another process (another
    /// start time): it is reported as that process, and the old identity is dropped.
    #[test]
    fn an_exited_pid_that_comes_back_is_another_process() {
        let (mut child, pid) = running_sleep();
        let mut info = ProcInfo::new().expect("sysinfo supported");
        let live = info.enrich(&[pid])[&pid].clone();
        // Pretend an earlier process with this PID exited: a stale identity.
        let stale = HostProc {
            visible: false,
            exited: true,
            exited_at: Some(1.0),
            name: Some("python".into()),
            command: Some("python old.py".into()),
            user: Some("mallory".into()),
            start_time: live.start_time.map(|s| s - 100),
            ..HostProc::default()
        };
        info.tracked.clear();
        info.exited.insert(pid, stale);
        let now = info.enrich(&[pid])[&pid].clone();
        assert!(now.visible && !now.exited, "{now:?}");
        assert_eq!(
            (&now.command, now.start_time, &now.user),
            (&live.command, live.start_time, &live.user)
        );
        assert!(info.exited_pids().is_empty(), "the old identity is dropped");
        assert_eq!(info.loaded_pids(), vec![pid]);
        let _ = child.kill();
        let _ = child.wait();
    }

    /// At most `exited_cap` exited identities are kept: the oldest exit is forgotten first.
    #[test]
    fn exited_identities_are_bounded_and_the_oldest_goes_first() {
        assert_eq!(MAX_EXITED, ProcInfo::new().expect("sysinfo").exited_cap);
        let children: Vec<_> = (0..3).map(|_| running_sleep()).collect();
        let pids: Vec<u32> = children.iter().map(|c| c.1).collect();
        let mut info = ProcInfo::new().expect("sysinfo supported");
        info.exited_cap = 2;
        info.enrich(&pids);
        for (mut c, pid) in children {
            let _ = c.kill();
            let _ = c.wait();
            // One exit at a time, in this order (exits are timed by the wall clock).
            std::thread::sleep(Duration::from_millis(5));
            assert!(info.enrich(&pids)[&pid].exited);
        }
        assert_eq!(info.exited_pids(), sorted(pids[1..].to_vec()));
        let out = info.enrich(&pids);
        assert_eq!(
            out[&pids[0]],
            HostProc::default(),
            "the oldest exit is forgotten"
        );
        assert!(out[&pids[1]].exited && out[&pids[2]].exited, "{out:?}");
    }

    #[test]
    fn join_cmd_falls_back_on_empty() {
        assert_eq!(join_cmd(&[]), None);
        let cmd = ["sleep".into(), "30".into()];
        assert_eq!(join_cmd(&cmd).as_deref(), Some("sleep 30"));
    }
}
