//! Turning frames into text for one-shot commands: the readable table and the JSON schema.
//! Pure functions of (frame, options): no I/O, no clock reads other than the `now` given.

pub mod json;
pub mod table;

use crate::model::ProcSample;

/// Decides whether a process belongs to the watched set ("mine").
pub type WatchedFn<'a> = &'a dyn Fn(&ProcSample) -> bool;

const MIB: f64 = 1024.0 * 1024.0;
const GIB: f64 = MIB * 1024.0;

/// Bytes as nvidia-smi users read them: `812MiB` below 1 GiB, `13.0GiB` above.
pub fn fmt_bytes(bytes: u64) -> String {
    let b = bytes as f64;
    if b < GIB {
        format!("{:.0}MiB", b / MIB)
    } else {
        format!("{:.1}GiB", b / GIB)
    }
}

/// An optional value, `n/a` when unavailable.
pub fn or_na<T>(value: Option<T>, f: impl FnOnce(T) -> String) -> String {
    value.map_or_else(|| "n/a".to_string(), f)
}

/// Elapsed time like `ps -o etime`: `MM:SS`, `HH:MM:SS`, or `Nd HHh`.
pub fn fmt_elapsed(seconds: u64) -> String {
    let (d, h, m, s) = (
        seconds / 86_400,
        (seconds / 3600) % 24,
        (seconds / 60) % 60,
        seconds % 60,
    );
    if d > 0 {
        format!("{d}d{h:02}h")
    } else if h > 0 {
        format!("{h:02}:{m:02}:{s:02}")
    } else {
        format!("{m:02}:{s:02}")
    }
}

/// A bytes-per-second rate, decimal units as link speeds are quoted.
pub fn fmt_rate(bytes_per_s: u64) -> String {
    let b = bytes_per_s as f64;
    if b >= 1e9 {
        format!("{:.1}GB/s", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.0}MB/s", b / 1e6)
    } else {
        format!("{:.0}kB/s", b / 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_like_nvidia_smi() {
        assert_eq!(fmt_bytes(0), "0MiB");
        assert_eq!(fmt_bytes(812 << 20), "812MiB");
        assert_eq!(fmt_bytes(13 << 30), "13.0GiB");
    }

    #[test]
    fn elapsed_like_ps() {
        assert_eq!(fmt_elapsed(65), "01:05");
        assert_eq!(fmt_elapsed(3 * 3600 + 62), "03:01:02");
        assert_eq!(fmt_elapsed(2 * 86_400 + 5 * 3600), "2d05h");
    }
}
