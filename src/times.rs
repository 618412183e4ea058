//! Times from outside: one place that turns a time someone else wrote (a command-line flag, a
//! query parameter, a recording, a daemon's stream) into a checked number, and a checked number
//! into a `SystemTime` or a `Duration`, without ever panicking.
//!
//! Every time is unix seconds (`f64`) between [`MIN_UNIX`] (1970-01-01) and [`MAX_UNIX`]
//! (9999-12-31T23:59:59Z, the last second RFC 3339 can write); anything else is refused with a
//! message that names the parameter and the accepted range. Conversions to `SystemTime` and
//! `Duration` go through [`system_time`] and [`duration`], which clamp or refuse instead of
//! overflowing (`UNIX_EPOCH + Duration::from_secs_f64(1e300)` panics).
//!
//! Accepted time forms (all in UTC):
//! - RFC 3339: `2026-11-29T03:12:00Z`, `2026-11-29T03:12:00+01:00`, `2026-11-29 03:12:00`;
//! - `HH:MM` or `HH:MM:SS`: that time today, or yesterday when it is still in the future;
//! - relative: `10m ago`, `2h30m ago`, `now`;
//! - unix seconds: `1764386000`.
//!
//! `--since` also takes a bare duration (`24h` = 24 hours ago).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

const DAY: f64 = 86_400.0;

/// The earliest time accepted: the Unix epoch.
pub const MIN_UNIX: f64 = 0.0;
/// The latest time accepted: 9999-12-31T23:59:59Z (later years have no RFC 3339 form).
pub const MAX_UNIX: f64 = 253_402_300_799.0;
/// The accepted range, as messages say it.
pub const RANGE: &str = "a time between 1970-01-01 and 9999-12-31";

/// The longest duration read from outside (a `since` of `10000y` is refused, not wrapped):
/// longer than the whole accepted time range.
pub const MAX_DURATION: Duration = Duration::from_hours(70_389_528);

/// Whether `unix` is a time this program accepts (finite, 1970-01-01 to 9999-12-31).
pub fn in_range(unix: f64) -> bool {
    unix.is_finite() && (MIN_UNIX..MAX_UNIX + 1.0).contains(&unix)
}

/// `unix` when it is in range; else a sentence naming `what` (a parameter, a field) and the
/// accepted range.
pub fn check(what: &str, unix: f64) -> Result<f64, String> {
    if in_range(unix) {
        Ok(unix)
    } else {
        Err(format!(
            "{what}: {} is out of range: expected {RANGE}, as Unix seconds or RFC 3339",
            show(unix)
        ))
    }
}

/// A number as messages write it: `1e300`, not three hundred digits.
fn show(v: f64) -> String {
    if v.is_finite() && v.abs() < 1e15 {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

/// `unix` as a `SystemTime`, clamped into the accepted range (NaN: the epoch). For display of a
/// time that was already checked, or that only this process produced.
pub fn system_time(unix: f64) -> SystemTime {
    let secs = if unix.is_nan() {
        0.0
    } else {
        unix.clamp(MIN_UNIX, MAX_UNIX)
    };
    UNIX_EPOCH + Duration::from_secs_f64(secs)
}

/// `unix` as RFC 3339 to the second (`2026-11-29T03:12:00Z`), clamped like [`system_time`].
pub fn format_rfc3339(unix: f64) -> String {
    humantime::format_rfc3339_seconds(system_time(unix)).to_string()
}

/// `seconds` as a `Duration` when it is finite, not negative and at most `max`; else a sentence
/// naming `what`.
pub fn duration(what: &str, seconds: f64, max: Duration) -> Result<Duration, String> {
    match Duration::try_from_secs_f64(seconds) {
        Ok(d) if d <= max => Ok(d),
        _ => Err(format!(
            "{what}: {} s is out of range: expected 0 to {} seconds",
            show(seconds),
            max.as_secs()
        )),
    }
}

/// A duration as humantime reads it (`250ms`, `2s`, `1h 30m`), at most `max`.
pub fn parse_duration(what: &str, text: &str, max: Duration) -> Result<Duration, String> {
    let quoted = textlimit::excerpt(text, textlimit::QUOTE_MAX);
    let d = humantime::parse_duration(text.trim()).map_err(|e| {
        format!("{what}: '{quoted}' is not a duration ({e}; expected e.g. 500ms, 2s, 1m)")
    })?;
    if d > max {
        return Err(format!(
            "{what}: '{quoted}' is out of range: expected at most {}",
            humantime::format_duration(max)
        ));
    }
    Ok(d)
}

/// A point in time (unix seconds) from `text`, relative to `now` (unix seconds); `what` names
/// the parameter in errors (`--at`, `'until'`).
pub fn parse_time(what: &str, text: &str, now: f64) -> Result<f64, String> {
    let t = parse_unchecked(what, text, now)?;
    if in_range(t) {
        Ok(t)
    } else {
        Err(format!(
            "{what}: {} is out of range: expected {RANGE}, as Unix seconds or RFC 3339",
            textlimit::excerpt(text.trim(), textlimit::QUOTE_MAX)
        ))
    }
}

/// `--since`: a bare duration (`24h`, meaning that long before `now`) or any [`parse_time`].
pub fn parse_since(what: &str, text: &str, now: f64) -> Result<f64, String> {
    let t = match humantime::parse_duration(text.trim()) {
        Ok(d) => now - d.as_secs_f64(),
        Err(_) => parse_unchecked(what, text, now)
            .map_err(|e| format!("{e}, or a duration such as 24h"))?,
    };
    if in_range(t) {
        Ok(t)
    } else {
        Err(format!(
            "{what}: {} is out of range: expected {RANGE} (a duration back from now, Unix \
             seconds or RFC 3339)",
            textlimit::excerpt(text.trim(), textlimit::QUOTE_MAX)
        ))
    }
}

fn parse_unchecked(what: &str, text: &str, now: f64) -> Result<f64, String> {
    let s = text.trim();
    let expected = "expected RFC 3339 (2026-11-29T03:12:00Z), HH:MM (UTC, today), '10m ago', 'now' or unix seconds";
    let quoted = textlimit::excerpt(text, textlimit::QUOTE_MAX);
    if s.eq_ignore_ascii_case("now") {
        return Ok(now);
    }
    if let Some(rel) = s.strip_suffix("ago") {
        let d = humantime::parse_duration(rel.trim())
            .map_err(|e| format!("{what}: '{quoted}' is not a time ({e}; {expected})"))?;
        return Ok(now - d.as_secs_f64());
    }
    if let Some(t) = clock(s) {
        let day = (now / DAY).floor() * DAY;
        let t = day + t;
        return Ok(if t > now { t - DAY } else { t });
    }
    if let Ok(v) = s.parse::<f64>()
        && !v.is_nan()
    {
        return Ok(v);
    }
    if let Ok(t) = humantime::parse_rfc3339_weak(s) {
        return Ok(unix(t));
    }
    if let Some(t) = with_offset(s) {
        return Ok(t);
    }
    Err(format!("{what}: '{quoted}' is not a time ({expected})"))
}

fn unix(t: SystemTime) -> f64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// `HH:MM[:SS]` → seconds into the day.
fn clock(s: &str) -> Option<f64> {
    let parts: Vec<&str> = s.split(':').collect();
    if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.is_empty() || p.len() > 2) {
        return None;
    }
    let nums: Option<Vec<u32>> = parts.iter().map(|p| p.parse().ok()).collect();
    let nums = nums?;
    let (h, m, sec) = (nums[0], nums[1], nums.get(2).copied().unwrap_or(0));
    (h < 24 && m < 60 && sec < 60).then(|| f64::from(h * 3600 + m * 60 + sec))
}

/// RFC 3339 with a `+HH:MM` / `-HH:MM` offset.
fn with_offset(s: &str) -> Option<f64> {
    // Byte arithmetic on text from outside: `get` refuses a cut inside a character.
    let cut = s.len().checked_sub(6)?;
    let (base, off) = (s.get(..cut)?, s.get(cut..)?);
    let sign = match off.as_bytes().first()? {
        b'+' => 1.0,
        b'-' => -1.0,
        _ => return None,
    };
    let off = clock(off.get(1..)?)?;
    let t = humantime::parse_rfc3339_weak(base).ok()?;
    Some(unix(t) - sign * off)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NOW: f64 = 1_764_388_800.0; // 2025-11-29T04:00:00Z

    #[test]
    fn forms() {
        let t = |s| parse_time("--at", s, NOW);
        assert_eq!(t("now"), Ok(NOW));
        assert_eq!(t("10m ago"), Ok(NOW - 600.0));
        assert_eq!(t("03:12"), Ok(NOW - 48.0 * 60.0));
        assert_eq!(t("05:00"), Ok(NOW + 3600.0 - DAY));
        assert_eq!(t("2025-11-29T03:00:00Z"), Ok(NOW - 3600.0));
        assert_eq!(t("2025-11-29T04:00:00+01:00"), Ok(NOW - 3600.0));
        assert_eq!(t("1764388800"), Ok(NOW));
        assert_eq!(t("9999-12-31T23:59:59Z"), Ok(MAX_UNIX));
        assert_eq!(parse_since("--since", "24h", NOW), Ok(NOW - DAY));
        assert!(t("yesterday-ish").unwrap_err().contains("RFC 3339"));
        assert!(t("25:00").is_err());
    }

    #[test]
    fn out_of_range_names_the_parameter_and_the_range() {
        assert_eq!(
            parse_time("--at", "253402300800", NOW).unwrap_err(),
            "--at: 253402300800 is out of range: expected a time between 1970-01-01 and \
             9999-12-31, as Unix seconds or RFC 3339"
        );
        for bad in ["1e19", "1e20", "-1", "inf", "-inf", "1e300", "1000000y ago"] {
            let e = parse_time("'until'", bad, NOW).unwrap_err();
            assert!(e.starts_with("'until': "), "{e}");
            assert!(e.contains("1970-01-01 and 9999-12-31"), "{bad}: {e}");
        }
        let e = parse_since("--since", "1e19", NOW).unwrap_err();
        assert!(e.contains("out of range"), "{e}");
        assert!(parse_since("--since", "100000y", NOW).is_err());
        assert!(parse_time("x", "NaN", NOW).is_err());
    }

    #[test]
    fn multibyte_text_is_refused_not_cut() {
        for s in ["€a€", "2026-11-29T03:12:00+01:0€", "€€€€€€", "ü+01:00"] {
            let e = parse_time("'since'", s, NOW).unwrap_err();
            assert!(e.contains("is not a time"), "{e}");
            assert!(parse_since("'since'", s, NOW).is_err());
        }
    }

    #[test]
    fn conversions_clamp_or_refuse() {
        assert_eq!(
            system_time(1e300),
            UNIX_EPOCH + Duration::from_secs(253_402_300_799)
        );
        assert_eq!(system_time(f64::NAN), UNIX_EPOCH);
        assert_eq!(system_time(-5.0), UNIX_EPOCH);
        assert_eq!(format_rfc3339(1e300), "9999-12-31T23:59:59Z");
        assert!(duration("step", 1e20, MAX_DURATION).is_err());
        assert!(duration("step", -1.0, MAX_DURATION).is_err());
        assert!(duration("step", f64::NAN, MAX_DURATION).is_err());
        assert_eq!(
            duration("step", 1.5, MAX_DURATION),
            Ok(Duration::from_millis(1500))
        );
        let e = parse_duration("--duration", "600000000y", Duration::from_secs(10)).unwrap_err();
        assert!(
            e.starts_with("--duration: '600000000y' is out of range"),
            "{e}"
        );
    }

    #[test]
    fn a_long_input_is_quoted_short() {
        let long = "x".repeat(1 << 20);
        for e in [
            parse_time("--at", &long, NOW).unwrap_err(),
            parse_since("--since", &long, NOW).unwrap_err(),
            parse_duration("--duration", &long, MAX_DURATION).unwrap_err(),
        ] {
            assert!(e.len() < 600, "{} bytes", e.len());
        }
    }

    proptest! {
        /// Any text: a checked time or an error, never a panic.
        #[test]
        fn any_text_parses_or_is_refused(s in "\\PC{0,40}", now in 0.0..MAX_UNIX) {
            for t in [parse_time("t", &s, now), parse_since("t", &s, now)].into_iter().flatten() {
                prop_assert!(in_range(t));
                let _ = format_rfc3339(t);
            }
            let _ = parse_duration("d", &s, MAX_DURATION);
        }

        /// Time-like text near the edges of what the parsers read.
        #[test]
        fn time_like_text_never_panics(
            s in "[0-9]{1,25}(\\.[0-9]{0,5})?(e[0-9]{1,3})?|[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(:[0-9]{2})?(Z|[+-][0-9]{2}:[0-9]{2})?|[0-9]{1,20}[smhdwy] ?ago|[0-9]{1,2}:[0-9]{1,2}(:[0-9]{1,2})?",
            now in -1e20f64..1e20,
        ) {
            for t in [parse_time("t", &s, now), parse_since("t", &s, now)].into_iter().flatten() {
                prop_assert!(in_range(t));
            }
        }

        #[test]
        fn any_float_converts(v in proptest::num::f64::ANY) {
            let _ = system_time(v);
            let _ = format_rfc3339(v);
            let _ = duration("d", v, MAX_DURATION);
            prop_assert_eq!(check("t", v).is_ok(), in_range(v));
        }
    }
}
