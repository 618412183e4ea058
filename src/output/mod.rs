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

/// A memory growth rate (bytes per second), always per minute: `812 MiB/min` below 1 GiB a
/// minute, `2.6 GiB/min` above. The one formatting of growth for every rule and front end.
pub fn fmt_growth(bytes_per_s: f64) -> String {
    if !bytes_per_s.is_finite() {
        return "n/a".to_string();
    }
    let per_min = bytes_per_s * 60.0;
    if per_min.abs() < GIB {
        format!("{:.0} MiB/min", per_min / MIB)
    } else {
        format!("{:.1} GiB/min", per_min / GIB)
    }
}

/// A time to full (seconds): `45 s` under 90 s, `12 min` under 90 min, `3.5 h` under two
/// days, `4 d` beyond. Never negative; `n/a` when not finite.
pub fn fmt_eta(seconds: f64) -> String {
    if !seconds.is_finite() {
        return "n/a".to_string();
    }
    let s = seconds.max(0.0);
    if s < 90.0 {
        format!("{s:.0} s")
    } else if s < 5400.0 {
        format!("{:.0} min", s / 60.0)
    } else if s < 172_800.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{:.0} d", s / 86_400.0)
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
    fn growth_is_always_per_minute_and_eta_never_negative() {
        assert_eq!(fmt_growth(1024.0 * 1024.0), "60 MiB/min");
        assert_eq!(fmt_growth(45.0 * 1024.0 * 1024.0), "2.6 GiB/min");
        assert_eq!(fmt_growth(2.2 * GIB), "132.0 GiB/min");
        assert_eq!(fmt_growth(-1024.0 * 1024.0), "-60 MiB/min");
        assert_eq!(fmt_growth(f64::NAN), "n/a");
        assert_eq!(fmt_eta(-3.0), "0 s");
        assert_eq!(fmt_eta(55.4), "55 s");
        assert_eq!(fmt_eta(960.0), "16 min");
        assert_eq!(fmt_eta(4.0 * 3600.0), "4.0 h");
        assert_eq!(fmt_eta(5.0 * 86_400.0), "5 d");
        assert_eq!(fmt_eta(f64::INFINITY), "n/a");
    }

    #[test]
    fn elapsed_like_ps() {
        assert_eq!(fmt_elapsed(65), "01:05");
        assert_eq!(fmt_elapsed(3 * 3600 + 62), "03:01:02");
        assert_eq!(fmt_elapsed(2 * 86_400 + 5 * 3600), "2d05h");
    }
}
