//! Times on the `history` command line.
//!
//! Accepted (all in UTC):
//! - RFC 3339: `2026-11-29T03:12:00Z`, `2026-11-29T03:12:00+01:00`, `2026-11-29 03:12:00`;
//! - `HH:MM` or `HH:MM:SS`: that time today, or yesterday when it is still in the future;
//! - relative: `10m ago`, `2h30m ago`, `now`;
//! - unix seconds: `1764386000`.
//!
//! `--since` also takes a bare duration (`24h` = 24 hours ago).

const DAY: f64 = 86_400.0;

/// A point in time (unix seconds) from `text`, relative to `now` (unix seconds).
pub fn parse_time(text: &str, now: f64) -> Result<f64, String> {
    let s = text.trim();
    let expected = "expected RFC 3339 (2026-11-29T03:12:00Z), HH:MM (UTC, today), '10m ago', 'now' or unix seconds";
    if s.eq_ignore_ascii_case("now") {
        return Ok(now);
    }
    if let Some(rel) = s.strip_suffix("ago") {
        let d = humantime::parse_duration(rel.trim())
            .map_err(|e| format!("'{text}' is not a time ({e}; {expected})"))?;
        return Ok(now - d.as_secs_f64());
    }
    if let Some(t) = clock(s) {
        let day = (now / DAY).floor() * DAY;
        let t = day + t;
        return Ok(if t > now { t - DAY } else { t });
    }
    if let Ok(v) = s.parse::<f64>()
        && v.is_finite()
        && v >= 0.0
    {
        return Ok(v);
    }
    if let Ok(t) = humantime::parse_rfc3339_weak(s) {
        return Ok(unix(t));
    }
    if let Some(t) = with_offset(s) {
        return Ok(t);
    }
    Err(format!("'{text}' is not a time ({expected})"))
}

/// `--since`: a bare duration (`24h`, meaning that long before `now`) or any [`parse_time`].
pub fn parse_since(text: &str, now: f64) -> Result<f64, String> {
    if let Ok(d) = humantime::parse_duration(text.trim()) {
        return Ok(now - d.as_secs_f64());
    }
    parse_time(text, now).map_err(|e| format!("{e}, or a duration such as 24h"))
}

fn unix(t: std::time::SystemTime) -> f64 {
    match t.duration_since(std::time::UNIX_EPOCH) {
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
    if s.len() < 6 {
        return None;
    }
    let (base, off) = s.split_at(s.len() - 6);
    let sign = match off.as_bytes()[0] {
        b'+' => 1.0,
        b'-' => -1.0,
        _ => return None,
    };
    let off = clock(&off[1..])?;
    let t = humantime::parse_rfc3339_weak(base).ok()?;
    Some(unix(t) - sign * off)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: f64 = 1_764_388_800.0; // 2025-11-29T04:00:00Z

    #[test]
    fn forms() {
        assert_eq!(parse_time("now", NOW), Ok(NOW));
        assert_eq!(parse_time("10m ago", NOW), Ok(NOW - 600.0));
        assert_eq!(parse_time("03:12", NOW), Ok(NOW - 48.0 * 60.0));
        assert_eq!(parse_time("05:00", NOW), Ok(NOW + 3600.0 - DAY));
        assert_eq!(parse_time("2025-11-29T03:00:00Z", NOW), Ok(NOW - 3600.0));
        assert_eq!(
            parse_time("2025-11-29T04:00:00+01:00", NOW),
            Ok(NOW - 3600.0)
        );
        assert_eq!(parse_time("1764388800", NOW), Ok(NOW));
        assert_eq!(parse_since("24h", NOW), Ok(NOW - DAY));
        assert!(
            parse_time("yesterday-ish", NOW)
                .unwrap_err()
                .contains("RFC 3339")
        );
        assert!(parse_time("25:00", NOW).is_err());
    }
}
