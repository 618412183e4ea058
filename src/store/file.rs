//! What a history file is before anything is written to it, who may write it, and how to read
//! it without write access.
//!
//! - **Identity.** A gpuwatch history carries `PRAGMA application_id` [`APPLICATION_ID`]
//!   (`"GPUw"`). Files written before the id existed are recognised by their schema (user
//!   version 1 and the six gpuwatch tables) and stamped when the daemon next opens them. Any
//!   other SQLite file, and anything that is not SQLite, is refused before a byte is written.
//! - **One writer.** The daemon holds an advisory lock (`flock(2)`, through
//!   [`std::fs::File::try_lock`]) on `<file>.lock` beside the history while it runs, with its
//!   PID written in it. A second daemon is refused and told the holder's PID. The kernel drops
//!   the lock when the holder dies, even by `kill -9`, so a stale lock file never blocks a
//!   start. Readers (`history who|peaks`, `/api/v1/history`) take no lock.
//! - **Read-only access.** A reader that may not write the directory cannot create the WAL
//!   index (`-shm`) `SQLite` needs; when the WAL is empty (the daemon stopped cleanly) the file
//!   is opened `immutable`, which needs neither.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use rusqlite::Connection;

/// `PRAGMA application_id` of a gpuwatch history: `"GPUw"` in ASCII.
pub const APPLICATION_ID: i32 = 0x4750_5577;

/// The tables a version-1 history has (sorted).
const TABLES: [&str; 6] = [
    "gpu",
    "gpu_sample",
    "gpu_step",
    "proc_sample",
    "proc_step",
    "process",
];

/// What an opened SQLite file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// No tables, no ids: a new file.
    Empty,
    /// A gpuwatch history of this schema version; `stamped` is false for files written before
    /// the application id existed.
    History { version: i64, stamped: bool },
    /// Something else, described.
    Foreign(String),
}

/// Reads the file's identity (reads only).
pub fn identify(conn: &Connection) -> rusqlite::Result<Identity> {
    let app: i32 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    if app == APPLICATION_ID {
        return Ok(Identity::History {
            version,
            stamped: true,
        });
    }
    if app != 0 {
        return Ok(Identity::Foreign(format!(
            "it is another program's SQLite database (application_id {app:#010x}, not gpuwatch's {APPLICATION_ID:#010x})"
        )));
    }
    if tables.is_empty() && version == 0 {
        return Ok(Identity::Empty);
    }
    if version == 1 && TABLES.iter().all(|t| tables.iter().any(|n| n == t)) {
        return Ok(Identity::History {
            version,
            stamped: false,
        });
    }
    let mut list = tables
        .iter()
        .take(5)
        // Names from another program's file: bounded here, escaped where they are shown.
        .map(|t| textlimit::excerpt(t, 64).into_owned())
        .collect::<Vec<_>>()
        .join(", ");
    if tables.len() > 5 {
        let _ = write!(list, " and {} more", tables.len() - 5);
    }
    Ok(Identity::Foreign(format!(
        "it is a SQLite database but not a gpuwatch history (user_version {version}, tables: {})",
        if list.is_empty() { "none" } else { &list }
    )))
}

/// Why a file that `SQLite` refused to read is not readable, from its first bytes: not a
/// database at all, or a damaged one. `None` when the header cannot be read.
pub fn sniff(path: &Path) -> Option<String> {
    let mut head = [0u8; 16];
    let mut f = std::fs::File::open(path).ok()?;
    let n = f.read(&mut head).ok()?;
    Some(if n == 0 {
        "the file is empty: not a gpuwatch history".to_string()
    } else if n < 16 || &head != b"SQLite format 3\0" {
        "it is not a SQLite database (it does not start with the SQLite header)".to_string()
    } else {
        "it is a damaged SQLite database (its header is SQLite's, its contents are not readable)"
            .to_string()
    })
}

/// The daemon's hold on a history file: released when dropped or when the process dies.
#[derive(Debug)]
pub struct WriterLock {
    _file: std::fs::File,
}

/// Why the lock was not taken.
pub enum LockError {
    /// Another process holds it; its PID when the lock file names one.
    Held(Option<u32>),
    Io(std::io::Error),
}

/// The lock file of a history file: `<file>.lock`.
pub fn lock_path(path: &Path) -> PathBuf {
    sidecar(path, ".lock")
}

/// Takes the writer's lock on `path` without waiting, and writes this process's PID in it.
pub fn lock(path: &Path) -> Result<WriterLock, LockError> {
    let lock = lock_path(path);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock)
        .map_err(LockError::Io)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            // The holder's PID: a short decimal number, or unknown.
            let mut text = String::new();
            let _ = (&file).take(32).read_to_string(&mut text);
            return Err(LockError::Held(text.trim().parse().ok()));
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(LockError::Io(e)),
    }
    // Informational only: the lock, not the PID, decides.
    let _ = file
        .set_len(0)
        .and_then(|()| writeln!(file, "{}", std::process::id()));
    Ok(WriterLock { _file: file })
}

/// A `file:` URI for `path` with `query`, for `SQLite`'s URI open (every byte outside the
/// unreserved set and `/` percent-encoded).
pub fn uri(path: &Path, query: &str) -> String {
    use std::os::unix::ffi::OsStrExt;
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut s = String::from("file:");
    for &b in abs.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            s.push(char::from(b));
        } else {
            let _ = write!(s, "%{b:02X}");
        }
    }
    s.push('?');
    s.push_str(query);
    s
}

/// The file next to `path` with this suffix (`-wal`, `-shm`).
pub fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}
