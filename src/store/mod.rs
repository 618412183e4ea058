//! Local history store: every sample written to a SQLite file, queried afterwards by
//! `gpuwatch history who|peaks`.
//!
//! The daemon calls [`Store::open`] once, [`Store::write`] for every sample (one transaction,
//! cached statements) and [`Store::maintain`] about once a minute with the current time.
//!
//! # File
//!
//! Default path: `$XDG_STATE_HOME/gpuwatch/history.sqlite`, else
//! `~/.local/state/gpuwatch/history.sqlite` ([`default_path`]). WAL journal,
//! `synchronous=NORMAL` (a crash can lose the last transactions, never corrupt the file),
//! `auto_vacuum=INCREMENTAL` so that deleted data gives its pages back to the file system.
//! `PRAGMA application_id` is `0x47505577` ("GPUw"): any other SQLite file is refused without a
//! write, and one daemon at a time writes a file (the lock `<file>.lock`); see `file.rs`.
//! The writer's page cache is 1 MiB (SQLite's default is 2): it appends at the right edge of
//! each table, and the daemon's memory target is 20 MiB.
//!
//! # Schema (version 1)
//!
//! Times are integer **milliseconds** since the Unix epoch, bytes are integers, percentages are
//! integers (rounded), and `NULL` always means "unavailable" (never zero). GPUs and processes
//! are stored once and referred to by a small integer id, which keeps sample rows at about
//! 20 bytes. Sample tables are `WITHOUT ROWID` with the time first in the primary key, so rows
//! append at the end of the B-tree and the key is the only index.
//!
//! ```sql
//! gpu(id INTEGER PRIMARY KEY, uuid TEXT UNIQUE, name TEXT)
//! process(id INTEGER PRIMARY KEY, pid, start_time /* unix s, NULL unknown */, user, command,
//!         container, first_seen /* ms */, last_seen /* ms, refreshed every minute */)
//!   -- indexes: (last_seen), (pid, start_time)
//! -- full resolution, the last hour (`StoreOptions::raw_keep`)
//! gpu_sample(t, gpu, gpu_index, used, total, util, mem_util, temp, power_mw, lost,
//!            PRIMARY KEY (t, gpu)) WITHOUT ROWID
//! proc_sample(t, gpu, proc /* process.id */, used, sm, PRIMARY KEY (t, gpu, proc)) WITHOUT ROWID
//! -- downsampled beyond, one row per step (`StoreOptions::step`, 1 minute); t = step start
//! gpu_step(t, gpu, gpu_index, n, used_min, used_max, used_mean, total, util_min, util_max,
//!          util_mean, temp_max, power_mw_mean, lost, PRIMARY KEY (t, gpu)) WITHOUT ROWID
//! proc_step(t, gpu, proc, n, used_min, used_max, used_mean, sm_min, sm_max, sm_mean,
//!           PRIMARY KEY (t, gpu, proc)) WITHOUT ROWID
//! ```
//!
//! `(pid, start_time)` is a process's identity (PIDs are reused), as in `process`; the pid and
//! start time are not repeated in every sample row.
//!
//! # Retention
//!
//! [`Store::maintain`]: rows older than `raw_keep` are folded into steps (min/max/mean, and
//! `n` samples so a late sample merges correctly), rows older than `max_age` (7 days) are
//! deleted, then whole hours are deleted oldest first until the file is under `max_bytes`
//! (200 MiB).

mod file;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::model::Sample;

pub use file::{APPLICATION_ID, lock_path};

/// Why the store could not do something. Always names the file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("history store '{}': cannot {action}: {}", path.display(), describe(source))]
    Sqlite {
        path: PathBuf,
        action: &'static str,
        source: rusqlite::Error,
    },
    #[error("history store '{}': cannot {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },
    /// Another daemon writes this file.
    #[error(
        "history store '{}' is in use by another gpuwatch daemon ({}; lock file '{}'): stop it, \
         or give this daemon another file with --history PATH, or --no-history",
        path.display(),
        pid.map_or_else(|| "PID unknown".to_string(), |p| format!("PID {p}")),
        lock.display()
    )]
    InUse {
        path: PathBuf,
        lock: PathBuf,
        pid: Option<u32>,
    },
    /// The file is not a gpuwatch history this version can use; nothing was written to it.
    #[error(
        "history store '{}': {reason}; refused, nothing was written to it (pass --history PATH \
         for another file)",
        path.display()
    )]
    NotAHistory { path: PathBuf, reason: String },
}

impl StoreError {
    /// Whether the disk (or a quota) is full.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, StoreError::Sqlite { source: rusqlite::Error::SqliteFailure(e, _), .. }
            if e.code == rusqlite::ErrorCode::DiskFull)
    }

    /// Whether the file or its directory is read-only.
    pub fn is_read_only(&self) -> bool {
        match self {
            StoreError::Sqlite {
                source: rusqlite::Error::SqliteFailure(e, _),
                ..
            } => matches!(
                e.code,
                rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::CannotOpen
            ),
            StoreError::Io { source, .. } => source.kind() == std::io::ErrorKind::PermissionDenied,
            StoreError::Sqlite { .. }
            | StoreError::InUse { .. }
            | StoreError::NotAHistory { .. } => false,
        }
    }

    /// Whether the file is the wrong one to use (another daemon's, another program's, a newer
    /// version's) rather than a file that cannot be used right now: the daemon stops on these.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            StoreError::InUse { .. } | StoreError::NotAHistory { .. }
        )
    }
}

fn describe(e: &rusqlite::Error) -> String {
    if let rusqlite::Error::SqliteFailure(f, _) = e {
        match f.code {
            rusqlite::ErrorCode::DiskFull => return format!("the disk is full ({e})"),
            rusqlite::ErrorCode::ReadOnly => return format!("the file is read-only ({e})"),
            rusqlite::ErrorCode::CannotOpen => {
                return format!("the file cannot be opened or created ({e})");
            }
            _ => {}
        }
    }
    e.to_string()
}

/// How long data is kept, and how.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoreOptions {
    /// Full-resolution data younger than this is kept as is (1 hour).
    pub raw_keep: Duration,
    /// The downsampling step (1 minute).
    pub step: Duration,
    /// Everything older than this is deleted (7 days).
    pub max_age: Duration,
    /// The file is kept under this size (200 MiB).
    pub max_bytes: u64,
    /// `who` accepts the nearest full-resolution sample at most this long before the asked
    /// time (10 s).
    pub tolerance: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            raw_keep: Duration::from_hours(1),
            step: Duration::from_mins(1),
            max_age: Duration::from_hours(7 * 24),
            max_bytes: 200 << 20,
            tolerance: Duration::from_secs(10),
        }
    }
}

/// A GPU named by NVML index or UUID (resolved: [`Store::resolve`] turns a prefix into the
/// full UUID).
pub use crate::gpuref::GpuRef;

/// At most this many GPUs of a file are considered when a name is resolved (a file is from
/// outside: its GPU table is not trusted to be small).
const RESOLVE_MAX: i64 = 256;

/// A process on a GPU at one moment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WhoRow {
    pub pid: u32,
    /// Unix seconds; `None` when unknown.
    pub start_time: Option<u64>,
    pub user: Option<String>,
    pub command: Option<String>,
    pub container: Option<String>,
    /// GPU memory in bytes (for downsampled data: the maximum in the step).
    pub used: Option<u64>,
    /// SM utilisation % (for downsampled data: the mean in the step).
    pub sm: Option<u32>,
}

/// The answer to [`Store::who`]: the sample found and its processes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Who {
    /// The sample's time (for downsampled data: the step's start), unix seconds.
    pub t: f64,
    /// Whether the answer comes from downsampled steps.
    pub downsampled: bool,
    pub gpu_uuid: String,
    pub gpu_index: u32,
    /// Device memory used and total, bytes.
    pub used: Option<u64>,
    pub total: Option<u64>,
    /// Processes, largest memory first.
    pub processes: Vec<WhoRow>,
}

/// The peak GPU memory of one process on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeakRow {
    pub pid: u32,
    pub start_time: Option<u64>,
    pub user: Option<String>,
    pub command: Option<String>,
    pub gpu: u32,
    pub gpu_uuid: String,
    pub peak_used: u64,
    /// When the peak was seen, unix seconds.
    pub at: f64,
}

/// What [`Store::maintain`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaintainReport {
    pub downsampled_rows: u64,
    pub deleted_rows: u64,
    /// The size of the file afterwards, bytes.
    pub bytes: u64,
}

/// The default history file: `$XDG_STATE_HOME/gpuwatch/history.sqlite`, else
/// `~/.local/state/gpuwatch/history.sqlite`; `None` when neither variable is set.
pub fn default_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        })?;
    Some(base.join("gpuwatch").join("history.sqlite"))
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS gpu(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, name TEXT);
CREATE TABLE IF NOT EXISTS process(id INTEGER PRIMARY KEY, pid INTEGER NOT NULL,
  start_time INTEGER, user TEXT, command TEXT, container TEXT,
  first_seen INTEGER NOT NULL, last_seen INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS process_last_seen ON process(last_seen);
CREATE INDEX IF NOT EXISTS process_pid ON process(pid, start_time);
CREATE TABLE IF NOT EXISTS gpu_sample(t INTEGER NOT NULL, gpu INTEGER NOT NULL,
  gpu_index INTEGER NOT NULL, used INTEGER, total INTEGER, util INTEGER, mem_util INTEGER,
  temp INTEGER, power_mw INTEGER, lost INTEGER NOT NULL,
  PRIMARY KEY (t, gpu)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS proc_sample(t INTEGER NOT NULL, gpu INTEGER NOT NULL,
  proc INTEGER NOT NULL, used INTEGER, sm INTEGER,
  PRIMARY KEY (t, gpu, proc)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gpu_step(t INTEGER NOT NULL, gpu INTEGER NOT NULL,
  gpu_index INTEGER NOT NULL, n INTEGER NOT NULL,
  used_min INTEGER, used_max INTEGER, used_mean INTEGER, total INTEGER,
  util_min INTEGER, util_max INTEGER, util_mean INTEGER, temp_max INTEGER,
  power_mw_mean INTEGER, lost INTEGER NOT NULL,
  PRIMARY KEY (t, gpu)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS proc_step(t INTEGER NOT NULL, gpu INTEGER NOT NULL,
  proc INTEGER NOT NULL, n INTEGER NOT NULL,
  used_min INTEGER, used_max INTEGER, used_mean INTEGER,
  sm_min INTEGER, sm_max INTEGER, sm_mean INTEGER,
  PRIMARY KEY (t, gpu, proc)) WITHOUT ROWID;
PRAGMA user_version = 1;
";

/// What [`Store::series`] answers for.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesQuery {
    pub gpu: Option<GpuRef>,
    pub pid: Option<u32>,
    pub since: f64,
    pub until: f64,
    /// Bucket width, seconds.
    pub step: f64,
}

/// Whose series it is.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesKey {
    pub gpu_index: u32,
    pub gpu_uuid: String,
    /// Set for a process's series.
    pub pid: Option<u32>,
    pub start_time: Option<u64>,
    pub user: Option<String>,
    pub command: Option<String>,
}

/// One bucket: memory in bytes (min, max, mean over the samples in it), the GPU's capacity and
/// mean utilisation (GPU series only), and how many samples it summarises.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesPoint {
    /// The bucket's start, unix seconds.
    pub t: f64,
    pub samples: u64,
    pub used_min: Option<u64>,
    pub used_max: Option<u64>,
    pub used_mean: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub util_mean: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    #[serde(flatten)]
    pub key: SeriesKey,
    pub points: Vec<SeriesPoint>,
}

/// Reads columns 6.. of a series row (bucket, min, max, mean, samples, total, util).
fn point(r: &rusqlite::Row<'_>, since: i64, step: i64) -> rusqlite::Result<SeriesPoint> {
    let u = |v: Option<i64>| v.map(|v| v.max(0) as u64);
    Ok(SeriesPoint {
        t: secs(since + r.get::<_, i64>(6)? * step),
        used_min: u(r.get(7)?),
        used_max: u(r.get(8)?),
        used_mean: u(r.get(9)?),
        samples: r.get::<_, i64>(10)?.max(0) as u64,
        total: u(r.get(11)?),
        util_mean: r.get::<_, Option<f64>>(12)?.filter(|v| v.is_finite()),
    })
}

/// A GPU sample row found by `who`: t, gpu id, uuid, index, used, total.
type Found = (i64, i64, String, u32, Option<i64>, Option<i64>);

/// Refresh `process.last_seen` at most this often (ms).
const LAST_SEEN_EVERY_MS: i64 = 60_000;

/// A cached process is forgotten when no sample has had it for this long (ms).
const PROC_CACHE_IDLE_MS: u64 = 120_000;

/// Beyond this many cached processes, only those of the latest sample are kept.
const PROC_CACHE_CAP: usize = 8192;

struct ProcEntry {
    id: i64,
    last_seen: i64,
    has_user: bool,
    /// The time (ms) of the latest sample that had it.
    touched: i64,
}

/// The open history file.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    opts: StoreOptions,
    gpus: HashMap<String, i64>,
    /// Process ids by (pid, start time), for processes seen in the last
    /// [`PROC_CACHE_IDLE_MS`] (at most [`PROC_CACHE_CAP`] entries beyond the current sample).
    procs: HashMap<(u32, Option<u64>), ProcEntry>,
    /// Sample time (ms) of the last sweep of `procs`.
    procs_swept: i64,
    /// The writer's lock (`None` for a reader).
    _lock: Option<file::WriterLock>,
}

fn ms(t: f64) -> i64 {
    (t * 1000.0).round() as i64
}

fn secs(t: i64) -> f64 {
    t as f64 / 1000.0
}

fn opt_i64(v: Option<u64>) -> Option<i64> {
    v.map(|v| i64::try_from(v).unwrap_or(i64::MAX))
}

fn pct(v: Option<f32>) -> Option<i64> {
    v.filter(|v| v.is_finite()).map(|v| v.round() as i64)
}

impl Store {
    /// Opens (creating it and its directory when needed) the history file with default
    /// retention.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Self::open_with(path, StoreOptions::default())
    }

    /// Opens the history file with these retention settings.
    pub fn open_with(path: &Path, opts: StoreOptions) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
                path: path.to_path_buf(),
                action: "create its directory",
                source,
            })?;
        }
        let err = |action| {
            let path = path.to_path_buf();
            move |source| StoreError::Sqlite {
                path,
                action,
                source,
            }
        };
        let conn = Connection::open(path).map_err(err("open the file"))?;
        conn.busy_timeout(Duration::from_secs(5))
            .map_err(err("set the busy timeout"))?;
        // What the file is, before a byte is written to it: another program's database or a
        // newer schema is refused as it is.
        let identity = Self::identity(&conn, path)?;
        if let file::Identity::History { version, .. } = identity
            && version > 1
        {
            return Err(StoreError::NotAHistory {
                path: path.to_path_buf(),
                reason: format!(
                    "its schema version {version} is newer than this gpuwatch understands (1)"
                ),
            });
        }
        // One writer: a second daemon on the same file would double every sample.
        let lock = file::lock(path).map_err(|e| match e {
            file::LockError::Held(pid) => StoreError::InUse {
                path: path.to_path_buf(),
                lock: lock_path(path),
                pid,
            },
            file::LockError::Io(source) => StoreError::Io {
                path: path.to_path_buf(),
                action: "create its lock file",
                source,
            },
        })?;
        // auto_vacuum must be set before the first table exists.
        conn.execute_batch(
            "PRAGMA auto_vacuum = INCREMENTAL;
             PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             PRAGMA journal_size_limit = 16777216;
             PRAGMA cache_size = -1024;",
        )
        .map_err(err("set up the file (is it writable?)"))?;
        match identity {
            file::Identity::History {
                version: 1,
                stamped: true,
            } => {}
            // A history from before the application id: ours, stamped now, and given the
            // index that finds a process the cache forgot.
            file::Identity::History { version: 1, .. } => conn
                .execute_batch(&format!(
                    "PRAGMA application_id = {APPLICATION_ID};
                     CREATE INDEX IF NOT EXISTS process_pid ON process(pid, start_time);"
                ))
                .map_err(err("mark the file as a gpuwatch history"))?,
            _ => conn
                .execute_batch(&format!(
                    "BEGIN; {SCHEMA} PRAGMA application_id = {APPLICATION_ID}; COMMIT;"
                ))
                .map_err(err("create the tables"))?,
        }
        Ok(Store {
            conn,
            path: path.to_path_buf(),
            opts,
            gpus: HashMap::new(),
            procs: HashMap::new(),
            procs_swept: i64::MIN,
            _lock: Some(lock),
        })
    }

    /// The file's identity, or a refusal: not SQLite, damaged, or another program's.
    fn identity(conn: &Connection, path: &Path) -> Result<file::Identity, StoreError> {
        match file::identify(conn) {
            Ok(file::Identity::Foreign(reason)) => Err(StoreError::NotAHistory {
                path: path.to_path_buf(),
                reason,
            }),
            Ok(identity) => Ok(identity),
            Err(source) => {
                let damaged = matches!(&source, rusqlite::Error::SqliteFailure(e, _)
                    if matches!(e.code, rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt));
                match file::sniff(path) {
                    Some(reason) if damaged => Err(StoreError::NotAHistory {
                        path: path.to_path_buf(),
                        reason: format!("{reason}: {source}"),
                    }),
                    _ => Err(StoreError::Sqlite {
                        path: path.to_path_buf(),
                        action: "read it",
                        source,
                    }),
                }
            }
        }
    }

    /// Opens an existing history file for queries only (`who`, `peaks`, `/api/v1/history`):
    /// works for a user who may read but not write the file or its directory, and never writes
    /// to it (no lock, no schema, no WAL recovery).
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        let err = |action| {
            let path = path.to_path_buf();
            move |source| StoreError::Sqlite {
                path,
                action,
                source,
            }
        };
        // Permission first: SQLite would only say "unable to open database file".
        if let Err(e) = std::fs::File::open(path) {
            let detail = match e.kind() {
                std::io::ErrorKind::PermissionDenied => {
                    use std::os::unix::fs::MetadataExt;
                    let owner = std::fs::metadata(path).map_or_else(
                        |_| String::new(),
                        |m| format!(" (owner uid {}, mode {:04o})", m.uid(), m.mode() & 0o7777),
                    );
                    std::io::Error::new(
                        e.kind(),
                        format!("permission denied: this user may not read the file{owner}"),
                    )
                }
                _ => e,
            };
            return Err(StoreError::Io {
                path: path.to_path_buf(),
                action: "read it",
                source: detail,
            });
        }
        let flags =
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let open = |target: &str, flags| {
            let conn = Connection::open_with_flags(target, flags)?;
            conn.busy_timeout(Duration::from_secs(5))?;
            Ok::<_, rusqlite::Error>(conn)
        };
        let target = path.to_string_lossy();
        let mut conn = open(&target, flags).map_err(err("open the file for reading"))?;
        let identity = match Self::identity(&conn, path) {
            // The WAL index cannot be created (the directory is not writable by this user).
            // With no WAL content (the daemon stopped cleanly), the file alone is the whole
            // history: open it immutable, which needs no index and takes no lock.
            Err(StoreError::Sqlite {
                source: rusqlite::Error::SqliteFailure(e, _),
                ..
            }) if matches!(
                e.code,
                rusqlite::ErrorCode::CannotOpen | rusqlite::ErrorCode::ReadOnly
            ) =>
            {
                let wal = file::sidecar(path, "-wal");
                if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
                    return Err(StoreError::Io {
                        path: path.to_path_buf(),
                        action: "read it",
                        source: std::io::Error::new(
                            std::io::ErrorKind::PermissionDenied,
                            format!(
                                "its latest changes are in '{}' and this user cannot create '{}' \
                                 to read them (the directory is not writable): run as the \
                                 daemon's user, or read it after the daemon stopped",
                                wal.display(),
                                file::sidecar(path, "-shm").display()
                            ),
                        ),
                    });
                }
                conn = open(
                    &file::uri(path, "immutable=1"),
                    flags | rusqlite::OpenFlags::SQLITE_OPEN_URI,
                )
                .map_err(err("open the file for reading"))?;
                Self::identity(&conn, path)?
            }
            other => other?,
        };
        match identity {
            file::Identity::History { version: 1, .. } => {}
            file::Identity::History { version, .. } => {
                return Err(StoreError::NotAHistory {
                    path: path.to_path_buf(),
                    reason: format!(
                        "its schema version {version} is not one this gpuwatch understands (1)"
                    ),
                });
            }
            file::Identity::Empty | file::Identity::Foreign(_) => {
                return Err(StoreError::NotAHistory {
                    path: path.to_path_buf(),
                    reason: "it is an empty SQLite database, not a gpuwatch history".to_string(),
                });
            }
        }
        Ok(Store {
            conn,
            path: path.to_path_buf(),
            opts: StoreOptions::default(),
            gpus: HashMap::new(),
            procs: HashMap::new(),
            procs_swept: i64::MIN,
            _lock: None,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, action: &'static str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        move |source| StoreError::Sqlite {
            path: self.path.clone(),
            action,
            source,
        }
    }

    /// Writes one sample (every GPU and process) in one transaction.
    ///
    /// The two statements that run once per GPU and once per process are prepared once per
    /// call rather than looked up in the statement cache per row, and an error's path is copied
    /// only when there is an error: at 8 GPUs x 64 processes this is most of the call's cost
    /// outside `SQLite` itself.
    pub fn write(&mut self, sample: &Sample) -> Result<(), StoreError> {
        let result = self.write_tx(sample);
        if result.is_err() {
            // The transaction was rolled back: ids cached during it may name rows that do not
            // exist, and would be given to other processes later.
            self.procs.clear();
            self.gpus.clear();
        } else {
            self.sweep_procs(ms(sample.taken_at));
        }
        result
    }

    /// Forgets cached processes that no sample has had for [`PROC_CACHE_IDLE_MS`] (and, beyond
    /// [`PROC_CACHE_CAP`], all but the latest sample's), so that the cache holds what the GPUs
    /// run now rather than every PID ever seen. A forgotten process that comes back is found
    /// in the file again. Runs at most every half idle period unless the cap is passed.
    fn sweep_procs(&mut self, t: i64) {
        if self.procs.len() <= PROC_CACHE_CAP
            && t.abs_diff(self.procs_swept) < PROC_CACHE_IDLE_MS / 2
        {
            return;
        }
        self.procs_swept = t;
        self.procs
            .retain(|_, e| t.abs_diff(e.touched) <= PROC_CACHE_IDLE_MS);
        if self.procs.len() > PROC_CACHE_CAP {
            self.procs.retain(|_, e| e.touched == t);
        }
    }

    #[allow(clippy::too_many_lines)]
    fn write_tx(&mut self, sample: &Sample) -> Result<(), StoreError> {
        let path: &Path = &self.path;
        let err = move |action: &'static str| {
            move |source| StoreError::Sqlite {
                path: path.to_path_buf(),
                action,
                source,
            }
        };
        let t = ms(sample.taken_at);
        let tx = self
            .conn
            .transaction()
            .map_err(err("begin a transaction"))?;
        {
            let mut gpu_row = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO gpu_sample(t, gpu, gpu_index, used, total, util, mem_util, temp, power_mw, lost)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                )
                .map_err(err("write a GPU sample"))?;
            let mut proc_row = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO proc_sample(t, gpu, proc, used, sm) VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .map_err(err("write a process sample"))?;
            for g in &sample.gpus {
                let gpu = if let Some(id) = self.gpus.get(&g.uuid) {
                    *id
                } else {
                    tx.prepare_cached("INSERT INTO gpu(uuid, name) VALUES (?1, ?2) ON CONFLICT(uuid) DO UPDATE SET name = coalesce(excluded.name, name)")
                        .and_then(|mut s| s.execute(params![g.uuid, g.name]))
                        .map_err(err("write a GPU"))?;
                    let id: i64 = tx
                        .query_row("SELECT id FROM gpu WHERE uuid = ?1", [&g.uuid], |r| {
                            r.get(0)
                        })
                        .map_err(err("read a GPU"))?;
                    self.gpus.insert(g.uuid.clone(), id);
                    id
                };
                let mem = g.memory;
                gpu_row
                    .execute(params![
                        t,
                        gpu,
                        g.index,
                        mem.map(|m| opt_i64(Some(m.used))),
                        mem.map(|m| opt_i64(Some(m.total))),
                        pct(g.util_gpu),
                        pct(g.util_mem),
                        g.temperature_c,
                        g.power_watts
                            .filter(|w| w.is_finite())
                            .map(|w| (w * 1000.0).round() as i64),
                        g.lost,
                    ])
                    .map_err(err("write a GPU sample"))?;
                for p in &g.processes {
                    let key = (p.pid, p.host.start_time);
                    let has_user = p.host.user.is_some() || p.host.command.is_some();
                    let known = self.procs.get_mut(&key).map(|e| {
                        e.touched = t;
                        (e.id, e.last_seen, e.has_user)
                    });
                    let id = match known {
                        Some((id, last, had))
                            if t - last < LAST_SEEN_EVERY_MS && (had || !has_user) =>
                        {
                            id
                        }
                        Some((id, _, had)) => {
                            tx.prepare_cached(
                                "UPDATE process SET last_seen = max(last_seen, ?2), user = coalesce(user, ?3),
                                 command = coalesce(command, ?4), container = coalesce(container, ?5) WHERE id = ?1",
                            )
                            .and_then(|mut s| {
                                s.execute(params![id, t, p.host.user, p.host.command, p.host.container])
                            })
                            .map_err(err("update a process"))?;
                            self.procs.insert(
                                key,
                                ProcEntry {
                                    id,
                                    last_seen: t,
                                    has_user: had || has_user,
                                    touched: t,
                                },
                            );
                            id
                        }
                        None => {
                            let existing: Option<i64> = tx
                                .prepare_cached(
                                    "SELECT id FROM process WHERE pid = ?1 AND start_time IS ?2 ORDER BY id DESC LIMIT 1",
                                )
                                .and_then(|mut s| {
                                    s.query_row(params![p.pid, opt_i64(p.host.start_time)], |r| r.get(0))
                                        .optional()
                                })
                                .map_err(err("read a process"))?;
                            let id = if let Some(id) = existing {
                                tx.prepare_cached(
                                    "UPDATE process SET last_seen = max(last_seen, ?2), user = coalesce(user, ?3),
                                     command = coalesce(command, ?4), container = coalesce(container, ?5) WHERE id = ?1",
                                )
                                .and_then(|mut s| {
                                    s.execute(params![id, t, p.host.user, p.host.command, p.host.container])
                                })
                                .map_err(err("update a process"))?;
                                id
                            } else {
                                tx.prepare_cached(
                                    "INSERT INTO process(pid, start_time, user, command, container, first_seen, last_seen)
                                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
                                )
                                .and_then(|mut s| {
                                    s.execute(params![
                                        p.pid,
                                        opt_i64(p.host.start_time),
                                        p.host.user,
                                        p.host.command,
                                        p.host.container,
                                        t
                                    ])
                                })
                                .map_err(err("write a process"))?;
                                tx.last_insert_rowid()
                            };
                            self.procs.insert(
                                key,
                                ProcEntry {
                                    id,
                                    last_seen: t,
                                    has_user,
                                    touched: t,
                                },
                            );
                            id
                        }
                    };
                    proc_row
                        .execute(params![
                            t,
                            gpu,
                            id,
                            opt_i64(p.used_bytes),
                            pct(p.sm_percent)
                        ])
                        .map_err(err("write a process sample"))?;
                }
            }
        }
        tx.commit().map_err(err("commit a sample"))
    }

    /// The file's size on disk (database plus WAL), bytes.
    pub fn file_bytes(&self) -> u64 {
        let main = std::fs::metadata(&self.path).map_or(0, |m| m.len());
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        main + std::fs::metadata(PathBuf::from(wal)).map_or(0, |m| m.len())
    }

    /// Bytes of the database that hold data (pages in use, free pages excluded).
    pub fn used_bytes(&self) -> Result<u64, StoreError> {
        let (count, free, size): (i64, i64, i64) = self
            .conn
            .query_row(
                "SELECT (SELECT page_count FROM pragma_page_count()), (SELECT freelist_count FROM pragma_freelist_count()), (SELECT page_size FROM pragma_page_size())",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .map_err(self.err("measure the file"))?;
        Ok(((count - free).max(0) * size) as u64)
    }

    /// `PRAGMA integrity_check`: `"ok"` when the file is sound.
    pub fn integrity_check(&self) -> Result<String, StoreError> {
        self.conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .map_err(self.err("check the file"))
    }

    /// Folds full-resolution rows older than `raw_keep` into steps, deletes rows older than
    /// `max_age`, then deletes the oldest hours until the file is under `max_bytes`.
    /// `now` is unix seconds.
    pub fn maintain(&mut self, now: f64) -> Result<MaintainReport, StoreError> {
        let mut report = MaintainReport::default();
        let step = (self.opts.step.as_millis() as i64).max(1);
        let now_ms = ms(now);
        let raw_cut = (now_ms - self.opts.raw_keep.as_millis() as i64).div_euclid(step) * step;
        let age_cut = now_ms - self.opts.max_age.as_millis() as i64;
        let tx = self
            .conn
            .transaction()
            .map_err(|source| StoreError::Sqlite {
                path: self.path.clone(),
                action: "begin maintenance",
                source,
            })?;
        let e = |action: &'static str| {
            let path = self.path.clone();
            move |source| StoreError::Sqlite {
                path,
                action,
                source,
            }
        };
        let n = tx
            .execute(
                "INSERT INTO gpu_step(t, gpu, gpu_index, n, used_min, used_max, used_mean, total,
                   util_min, util_max, util_mean, temp_max, power_mw_mean, lost)
                 SELECT (t / ?2) * ?2, gpu, max(gpu_index), count(*), min(used), max(used),
                   CAST(round(avg(used)) AS INTEGER), max(total), min(util), max(util),
                   CAST(round(avg(util)) AS INTEGER), max(temp), CAST(round(avg(power_mw)) AS INTEGER), max(lost)
                 FROM gpu_sample WHERE t < ?1 GROUP BY 1, 2
                 ON CONFLICT(t, gpu) DO UPDATE SET
                   used_min = min(coalesce(used_min, excluded.used_min), coalesce(excluded.used_min, used_min)),
                   used_max = max(coalesce(used_max, excluded.used_max), coalesce(excluded.used_max, used_max)),
                   used_mean = coalesce((used_mean * n + excluded.used_mean * excluded.n) / (n + excluded.n), used_mean, excluded.used_mean),
                   util_min = min(coalesce(util_min, excluded.util_min), coalesce(excluded.util_min, util_min)),
                   util_max = max(coalesce(util_max, excluded.util_max), coalesce(excluded.util_max, util_max)),
                   temp_max = max(coalesce(temp_max, excluded.temp_max), coalesce(excluded.temp_max, temp_max)),
                   lost = max(lost, excluded.lost),
                   n = n + excluded.n",
                params![raw_cut, step],
            )
            .map_err(e("downsample GPU samples"))?;
        report.downsampled_rows += n as u64;
        let n = tx
            .execute(
                "INSERT INTO proc_step(t, gpu, proc, n, used_min, used_max, used_mean, sm_min, sm_max, sm_mean)
                 SELECT (t / ?2) * ?2, gpu, proc, count(*), min(used), max(used),
                   CAST(round(avg(used)) AS INTEGER), min(sm), max(sm), CAST(round(avg(sm)) AS INTEGER)
                 FROM proc_sample WHERE t < ?1 GROUP BY 1, 2, 3
                 ON CONFLICT(t, gpu, proc) DO UPDATE SET
                   used_min = min(coalesce(used_min, excluded.used_min), coalesce(excluded.used_min, used_min)),
                   used_max = max(coalesce(used_max, excluded.used_max), coalesce(excluded.used_max, used_max)),
                   used_mean = coalesce((used_mean * n + excluded.used_mean * excluded.n) / (n + excluded.n), used_mean, excluded.used_mean),
                   sm_min = min(coalesce(sm_min, excluded.sm_min), coalesce(excluded.sm_min, sm_min)),
                   sm_max = max(coalesce(sm_max, excluded.sm_max), coalesce(excluded.sm_max, sm_max)),
                   n = n + excluded.n",
                params![raw_cut, step],
            )
            .map_err(e("downsample process samples"))?;
        report.downsampled_rows += n as u64;
        for sql in [
            "DELETE FROM gpu_sample WHERE t < ?1",
            "DELETE FROM proc_sample WHERE t < ?1",
        ] {
            tx.execute(sql, [raw_cut])
                .map_err(e("delete downsampled samples"))?;
        }
        for sql in [
            "DELETE FROM gpu_step WHERE t < ?1",
            "DELETE FROM proc_step WHERE t < ?1",
            "DELETE FROM gpu_sample WHERE t < ?1",
            "DELETE FROM proc_sample WHERE t < ?1",
        ] {
            report.deleted_rows += tx
                .execute(sql, [age_cut])
                .map_err(e("delete old samples"))? as u64;
        }
        tx.commit().map_err(e("commit maintenance"))?;
        self.enforce_size(&mut report)?;
        self.forget_processes()?;
        // Each step of `incremental_vacuum` frees one page: run it to the end.
        self.conn
            .prepare("PRAGMA incremental_vacuum")
            .and_then(|mut s| {
                let mut rows = s.query([])?;
                while rows.next()?.is_some() {}
                Ok(())
            })
            .map_err(self.err("give free pages back"))?;
        self.checkpoint()?;
        report.bytes = self.file_bytes();
        Ok(report)
    }

    /// Deletes the oldest hour of data until the pages in use fit `max_bytes` (with room for
    /// the WAL).
    fn enforce_size(&mut self, report: &mut MaintainReport) -> Result<(), StoreError> {
        let bound = self.opts.max_bytes.saturating_sub(self.opts.max_bytes / 10);
        while self.used_bytes()? > bound {
            let oldest: Option<i64> = self
                .conn
                .query_row(
                    "SELECT min(t) FROM (SELECT min(t) AS t FROM gpu_step UNION ALL SELECT min(t) FROM proc_step
                     UNION ALL SELECT min(t) FROM gpu_sample UNION ALL SELECT min(t) FROM proc_sample)",
                    [],
                    |r| r.get(0),
                )
                .map_err(self.err("find the oldest data"))?;
            let Some(oldest) = oldest else { break };
            let cut = oldest + 3_600_000;
            let tx = self
                .conn
                .transaction()
                .map_err(|source| StoreError::Sqlite {
                    path: self.path.clone(),
                    action: "begin deleting by size",
                    source,
                })?;
            for sql in [
                "DELETE FROM gpu_step WHERE t < ?1",
                "DELETE FROM proc_step WHERE t < ?1",
                "DELETE FROM gpu_sample WHERE t < ?1",
                "DELETE FROM proc_sample WHERE t < ?1",
            ] {
                report.deleted_rows +=
                    tx.execute(sql, [cut])
                        .map_err(|source| StoreError::Sqlite {
                            path: self.path.clone(),
                            action: "delete by size",
                            source,
                        })? as u64;
            }
            tx.commit().map_err(|source| StoreError::Sqlite {
                path: self.path.clone(),
                action: "commit deleting by size",
                source,
            })?;
        }
        Ok(())
    }

    /// Deletes processes no sample refers to any more.
    fn forget_processes(&mut self) -> Result<(), StoreError> {
        let oldest: Option<i64> = self
            .conn
            .query_row(
                "SELECT min(t) FROM (SELECT min(t) AS t FROM proc_step UNION ALL SELECT min(t) FROM proc_sample)",
                [],
                |r| r.get(0),
            )
            .map_err(self.err("find the oldest process sample"))?;
        let cut = oldest.unwrap_or(i64::MAX);
        // `last_seen` lags by up to a minute; keep a margin.
        let n = self
            .conn
            .execute(
                "DELETE FROM process WHERE last_seen < ?1 - 2 * ?2",
                params![cut, LAST_SEEN_EVERY_MS],
            )
            .map_err(self.err("delete old processes"))?;
        if n > 0 {
            self.procs.clear();
        }
        Ok(())
    }

    fn gpu_clause(gpu: &GpuRef) -> (&'static str, rusqlite::types::Value) {
        match gpu {
            GpuRef::Index(i) => ("x.gpu_index = ?3", i64::from(*i).into()),
            GpuRef::Uuid(u) => ("g.uuid = ?3", u.clone().into()),
        }
    }

    /// `wanted` as the store can query it: an index as it is (the GPU that had that index at
    /// the moment asked about), a UUID or a unique prefix of one as the full UUID of a GPU in
    /// the file. `Ok(Err(message))` when the name fits no GPU of the file, or several.
    pub fn resolve(
        &self,
        flag: &str,
        wanted: &GpuRef,
    ) -> Result<std::result::Result<GpuRef, String>, StoreError> {
        let GpuRef::Uuid(text) = wanted else {
            return Ok(Ok(wanted.clone()));
        };
        let pattern: String = text
            .chars()
            .flat_map(|c| match c {
                '%' | '_' | '\\' => vec!['\\', c],
                c => vec![c],
            })
            .chain(['%'])
            .collect();
        let mut gpus = self.gpu_names(Some(&pattern))?;
        if gpus.is_empty() {
            // For the error: the GPUs there are.
            gpus = self.gpu_names(None)?;
        }
        let devices: Vec<crate::gpuref::Device<'_>> = gpus
            .iter()
            .map(|(index, uuid)| crate::gpuref::Device {
                index: *index,
                uuid,
                parent: None,
            })
            .collect();
        let place = format!("in the history '{}'", self.path.display());
        Ok(crate::gpuref::resolve(flag, wanted, &devices, &place)
            .map(|d| GpuRef::Uuid(d.uuid.to_string())))
    }

    /// The GPUs of the file (those whose UUID is `LIKE pattern`, case-insensitive for ASCII),
    /// with the index each was last sampled at; at most [`RESOLVE_MAX`].
    fn gpu_names(&self, pattern: Option<&str>) -> Result<Vec<(Option<u32>, String)>, StoreError> {
        self.conn
            .prepare_cached(
                "SELECT coalesce(
                   (SELECT gpu_index FROM gpu_sample s WHERE s.gpu = g.id ORDER BY t DESC LIMIT 1),
                   (SELECT gpu_index FROM gpu_step s WHERE s.gpu = g.id ORDER BY t DESC LIMIT 1)),
                   g.uuid
                 FROM gpu g WHERE ?1 IS NULL OR g.uuid LIKE ?1 ESCAPE '\\' ORDER BY g.id LIMIT ?2",
            )
            .and_then(|mut s| {
                s.query_map(params![pattern, RESOLVE_MAX], |r| {
                    Ok((
                        r.get::<_, Option<i64>>(0)?
                            .and_then(|i| u32::try_from(i).ok()),
                        r.get::<_, String>(1)?,
                    ))
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(self.err("list the GPUs"))
    }

    /// The processes on `gpu` at `at` (unix seconds): the nearest full-resolution sample at or
    /// before `at` within the tolerance, else the downsampled step containing `at`. `None` when
    /// there is no data for that moment.
    pub fn who(&self, gpu: &GpuRef, at: f64) -> Result<Option<Who>, StoreError> {
        let at_ms = ms(at);
        let (clause, key) = Self::gpu_clause(gpu);
        let tol = self.opts.tolerance.as_millis() as i64;
        let step = (self.opts.step.as_millis() as i64).max(1);
        let raw: Option<Found> = self
            .conn
            .prepare_cached(&format!(
                "SELECT x.t, x.gpu, g.uuid, x.gpu_index, x.used, x.total FROM gpu_sample x JOIN gpu g ON g.id = x.gpu
                 WHERE x.t <= ?1 AND x.t >= ?2 AND {clause} ORDER BY x.t DESC LIMIT 1"
            ))
            .and_then(|mut s| {
                s.query_row(params![at_ms, at_ms - tol, key], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
                })
                .optional()
            })
            .map_err(self.err("query GPU samples"))?;
        let (found, downsampled) = if let Some(found) = raw {
            (found, false)
        } else {
            let stepped = self
                .conn
                .prepare_cached(&format!(
                    "SELECT x.t, x.gpu, g.uuid, x.gpu_index, x.used_max, x.total FROM gpu_step x JOIN gpu g ON g.id = x.gpu
                     WHERE x.t <= ?1 AND x.t > ?2 AND {clause} ORDER BY x.t DESC LIMIT 1"
                ))
                .and_then(|mut s| {
                    s.query_row(params![at_ms, at_ms - step - tol, key], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
                    })
                    .optional()
                })
                .map_err(self.err("query GPU steps"))?;
            match stepped {
                Some(found) => (found, true),
                None => return Ok(None),
            }
        };
        let (t, gpu_id, uuid, index, used, total) = found;
        let sql = if downsampled {
            "SELECT p.pid, p.start_time, p.user, p.command, p.container, x.used_max, x.sm_mean
             FROM proc_step x LEFT JOIN process p ON p.id = x.proc WHERE x.t = ?1 AND x.gpu = ?2
             ORDER BY x.used_max IS NULL, x.used_max DESC, p.pid"
        } else {
            "SELECT p.pid, p.start_time, p.user, p.command, p.container, x.used, x.sm
             FROM proc_sample x LEFT JOIN process p ON p.id = x.proc WHERE x.t = ?1 AND x.gpu = ?2
             ORDER BY x.used IS NULL, x.used DESC, p.pid"
        };
        let processes = self
            .conn
            .prepare_cached(sql)
            .and_then(|mut s| {
                s.query_map(params![t, gpu_id], |r| {
                    Ok(WhoRow {
                        pid: r.get::<_, Option<u32>>(0)?.unwrap_or(0),
                        start_time: r.get::<_, Option<i64>>(1)?.map(|v| v as u64),
                        user: r.get(2)?,
                        command: r.get(3)?,
                        container: r.get(4)?,
                        used: r.get::<_, Option<i64>>(5)?.map(|v| v as u64),
                        sm: r.get::<_, Option<i64>>(6)?.map(|v| v as u32),
                    })
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(self.err("query process samples"))?;
        Ok(Some(Who {
            t: secs(t),
            downsampled,
            gpu_uuid: uuid,
            gpu_index: index,
            used: used.map(|v| v as u64),
            total: total.map(|v| v as u64),
            processes,
        }))
    }

    /// The peak GPU memory of every process on every GPU since `since` (unix seconds), largest
    /// first.
    pub fn peaks(&self, since: f64) -> Result<Vec<PeakRow>, StoreError> {
        let since_ms = ms(since);
        self.conn
            .prepare_cached(
                "WITH u(t, gpu, proc, used) AS (
                   SELECT t, gpu, proc, used FROM proc_sample WHERE t >= ?1 AND used IS NOT NULL
                   UNION ALL
                   SELECT t, gpu, proc, used_max FROM proc_step WHERE t >= (?1 / ?2) * ?2 AND used_max IS NOT NULL),
                 m AS (SELECT gpu, proc, max(used) AS peak, t FROM u GROUP BY gpu, proc)
                 SELECT p.pid, p.start_time, p.user, p.command,
                   (SELECT gpu_index FROM gpu_sample s WHERE s.gpu = m.gpu ORDER BY t DESC LIMIT 1),
                   (SELECT gpu_index FROM gpu_step s WHERE s.gpu = m.gpu ORDER BY t DESC LIMIT 1),
                   g.uuid, m.peak, m.t
                 FROM m JOIN gpu g ON g.id = m.gpu LEFT JOIN process p ON p.id = m.proc
                 ORDER BY m.peak DESC, p.pid",
            )
            .and_then(|mut s| {
                s.query_map(params![since_ms, self.opts.step.as_millis() as i64], |r| {
                    Ok(PeakRow {
                        pid: r.get::<_, Option<u32>>(0)?.unwrap_or(0),
                        start_time: r.get::<_, Option<i64>>(1)?.map(|v| v as u64),
                        user: r.get(2)?,
                        command: r.get(3)?,
                        gpu: r
                            .get::<_, Option<u32>>(4)?
                            .or(r.get::<_, Option<u32>>(5)?)
                            .unwrap_or(0),
                        gpu_uuid: r.get(6)?,
                        peak_used: r.get::<_, i64>(7)? as u64,
                        at: secs(r.get(8)?),
                    })
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(self.err("query peaks"))
    }

    /// Memory (and utilisation) over time for `/api/v1/history`: every GPU, or one GPU, or the
    /// processes with one PID, between `since` and `until` (unix seconds) in buckets of `step`
    /// seconds (min, max and mean per bucket, over full-resolution samples and downsampled
    /// steps alike). The caller bounds the number of buckets.
    pub fn series(&self, q: &SeriesQuery) -> Result<Vec<Series>, StoreError> {
        let since = ms(q.since);
        let until = ms(q.until);
        let step = ms(q.step).max(1);
        let (gpu_clause, gpu_key): (&str, rusqlite::types::Value) = match &q.gpu {
            None => ("?4 IS NULL", rusqlite::types::Value::Null),
            Some(GpuRef::Index(i)) => ("x.gpu_index = ?4", i64::from(*i).into()),
            Some(GpuRef::Uuid(u)) => ("g.uuid = ?4", u.clone().into()),
        };
        let mut out: Vec<Series> = Vec::new();
        let push = |out: &mut Vec<Series>, key: SeriesKey, point: SeriesPoint| match out.last_mut()
        {
            Some(last) if last.key == key => last.points.push(point),
            _ => out.push(Series {
                key,
                points: vec![point],
            }),
        };
        if let Some(pid) = q.pid {
            // The GPU index of a process's series: the latest index its GPU was sampled at.
            let sql = format!(
                "WITH u(t, gpu, proc, umin, umax, umean, n) AS (
                   SELECT t, gpu, proc, used, used, used, 1 FROM proc_sample WHERE t >= ?1 AND t <= ?2
                   UNION ALL
                   SELECT t, gpu, proc, used_min, used_max, used_mean, n FROM proc_step WHERE t >= ?1 AND t <= ?2),
                 x AS (SELECT u.*, coalesce(
                        (SELECT gpu_index FROM gpu_sample s WHERE s.gpu = u.gpu ORDER BY s.t DESC LIMIT 1),
                        (SELECT gpu_index FROM gpu_step s WHERE s.gpu = u.gpu ORDER BY s.t DESC LIMIT 1), 0) AS gpu_index
                       FROM u JOIN process p ON p.id = u.proc WHERE p.pid = ?5)
                 SELECT x.gpu_index, g.uuid, p.pid, p.start_time, p.user, p.command,
                   (x.t - ?1) / ?3 AS b, min(x.umin), max(x.umax), CAST(round(sum(x.umean * x.n) * 1.0 / sum(x.n)) AS INTEGER),
                   sum(x.n), NULL, NULL
                 FROM x JOIN gpu g ON g.id = x.gpu JOIN process p ON p.id = x.proc
                 WHERE {gpu_clause}
                 GROUP BY x.gpu, x.proc, b ORDER BY x.gpu_index, g.uuid, p.id, b"
            );
            self.conn
                .prepare(&sql)
                .and_then(|mut s| {
                    let mut rows = s.query(params![since, until, step, gpu_key, pid])?;
                    while let Some(r) = rows.next()? {
                        let key = SeriesKey {
                            gpu_index: r.get(0)?,
                            gpu_uuid: r.get(1)?,
                            pid: r.get(2)?,
                            start_time: r.get::<_, Option<i64>>(3)?.map(|v| v as u64),
                            user: r.get(4)?,
                            command: r.get(5)?,
                        };
                        push(&mut out, key, point(r, since, step)?);
                    }
                    Ok(())
                })
                .map_err(self.err("query process history"))?;
        } else {
            let sql = format!(
                "WITH x(t, gpu, gpu_index, umin, umax, umean, n, total, util) AS (
                   SELECT t, gpu, gpu_index, used, used, used, 1, total, util FROM gpu_sample WHERE t >= ?1 AND t <= ?2
                   UNION ALL
                   SELECT t, gpu, gpu_index, used_min, used_max, used_mean, n, total, util_mean FROM gpu_step WHERE t >= ?1 AND t <= ?2)
                 SELECT max(x.gpu_index), g.uuid, NULL, NULL, NULL, NULL,
                   (x.t - ?1) / ?3 AS b, min(x.umin), max(x.umax), CAST(round(sum(x.umean * x.n) * 1.0 / sum(x.n)) AS INTEGER),
                   sum(x.n), max(x.total), sum(x.util * x.n) * 1.0 / sum(CASE WHEN x.util IS NULL THEN 0 ELSE x.n END)
                 FROM x JOIN gpu g ON g.id = x.gpu
                 WHERE {gpu_clause} AND ?5 IS NULL
                 GROUP BY x.gpu, b ORDER BY x.gpu, b"
            );
            self.conn
                .prepare(&sql)
                .and_then(|mut s| {
                    let mut rows =
                        s.query(params![since, until, step, gpu_key, rusqlite::types::Null])?;
                    while let Some(r) = rows.next()? {
                        let key = SeriesKey {
                            gpu_index: r.get(0)?,
                            gpu_uuid: r.get(1)?,
                            pid: None,
                            start_time: None,
                            user: None,
                            command: None,
                        };
                        push(&mut out, key, point(r, since, step)?);
                    }
                    Ok(())
                })
                .map_err(self.err("query GPU history"))?;
            out.sort_by(|a, b| {
                (a.key.gpu_index, &a.key.gpu_uuid).cmp(&(b.key.gpu_index, &b.key.gpu_uuid))
            });
        }
        Ok(out)
    }

    /// Checkpoints the WAL into the database file (the daemon calls this on shutdown).
    pub fn checkpoint(&self) -> Result<(), StoreError> {
        self.conn
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
            .map_err(self.err("checkpoint"))
    }
}
