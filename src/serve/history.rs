//! `GET /api/v1/history?gpu=&pid=&since=&until=&step=`: memory over time from the local
//! history store, in buckets (min, max, mean per bucket).
//!
//! - `gpu`: NVML index, UUID or a unique prefix of one (default: every GPU); a name that fits
//!   no GPU of the file, or several, gets 400 listing them;
//! - `pid`: one process's series (on every GPU it used, or on `gpu`);
//! - `since`, `until`: unix seconds, RFC 3339, `10m ago`, `now`; `since` also takes a bare
//!   duration back from now (`1h`). Defaults: the last hour, until now;
//! - `step`: bucket width, a duration (`30s`, `5m`) or seconds (default: the range over 300,
//!   at least 1 s).
//!
//! Bounded: at most [`MAX_POINTS`] buckets per series and a range of at most [`MAX_RANGE`];
//! at most two queries run at once (429 beyond). Bad input gets 400 with a JSON error naming
//! the parameter and what was expected.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Serialize;

use super::{Shared, error, json_response, reject};
use crate::store::{GpuRef, Series, SeriesQuery, Store};

/// Buckets per series, at most (Prometheus's own limit for a range query).
pub const MAX_POINTS: f64 = 11_000.0;
/// The longest range one query may cover (the store keeps 7 days by default).
pub const MAX_RANGE: f64 = 31.0 * 86_400.0;
/// Buckets when `step` is not given.
const DEFAULT_POINTS: f64 = 300.0;

#[derive(Debug, Serialize)]
struct Answer {
    since: f64,
    until: f64,
    step: f64,
    series: Vec<Series>,
}

/// The query string, checked: every way it can be wrong is a sentence naming the parameter.
pub fn parse(params: &[(String, String)], now: f64) -> Result<SeriesQuery, String> {
    let mut gpu = None;
    let mut pid = None;
    let mut since = None;
    let mut until = None;
    let mut step = None;
    for (key, value) in params {
        let slot = match key.as_str() {
            "gpu" => &mut gpu,
            "pid" => &mut pid,
            "since" => &mut since,
            "until" => &mut until,
            "step" => &mut step,
            other => {
                return Err(format!(
                    "unknown parameter '{}' (expected gpu, pid, since, until, step)",
                    textlimit::excerpt(other, textlimit::QUOTE_MAX)
                ));
            }
        };
        if slot.replace(value.as_str()).is_some() {
            return Err(format!("'{key}' is given more than once"));
        }
    }
    let gpu = gpu
        .map(|g| g.parse::<GpuRef>().map_err(|e| format!("'gpu': {e}")))
        .transpose()?;
    let pid = pid
        .map(|p| {
            p.trim().parse::<u32>().map_err(|_| {
                format!(
                    "'pid' is '{}' (expected a process ID, a whole number)",
                    textlimit::excerpt(p, textlimit::QUOTE_MAX)
                )
            })
        })
        .transpose()?;
    let until = match until {
        Some(u) => crate::times::parse_time("'until'", u, now)?,
        None => now,
    };
    let since = match since {
        Some(s) => crate::times::parse_since("'since'", s, now)?,
        None => until - 3600.0,
    };
    if since >= until {
        return Err(format!(
            "'since' ({since:.0}) is not before 'until' ({until:.0}): the range is empty"
        ));
    }
    let range = until - since;
    if range > MAX_RANGE {
        return Err(format!(
            "the range is {}, longer than the {} one query may cover: narrow 'since'/'until'",
            humantime::format_duration(Duration::from_secs(range.round() as u64)),
            humantime::format_duration(Duration::from_secs(MAX_RANGE as u64))
        ));
    }
    let step = match step {
        Some(s) => parse_step(s)?,
        None => (range / DEFAULT_POINTS).ceil().max(1.0),
    };
    let points = (range / step).ceil();
    if points > MAX_POINTS {
        return Err(format!(
            "'step' {step}s over a range of {range:.0}s gives {points:.0} points, more than \
             {MAX_POINTS:.0}: use a step of at least {:.0}s",
            (range / MAX_POINTS).ceil()
        ));
    }
    Ok(SeriesQuery {
        gpu,
        pid,
        since,
        until,
        step,
    })
}

fn parse_step(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let max = Duration::from_secs(MAX_RANGE as u64);
    let step = if let Ok(v) = t.parse::<f64>() {
        crate::times::duration("'step'", v, max)?
    } else {
        crate::times::parse_duration("'step'", t, max)?
    };
    if step < Duration::from_secs(1) {
        return Err(format!(
            "'step' is '{}' (expected at least 1 second)",
            textlimit::excerpt(text, textlimit::QUOTE_MAX)
        ));
    }
    Ok(step.as_secs_f64())
}

pub async fn handler(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    query: Result<Query<Vec<(String, String)>>, axum::extract::rejection::QueryRejection>,
) -> Response {
    if let Some(r) = reject(&shared, &headers) {
        return r;
    }
    let Ok(Query(params)) = query else {
        return error(StatusCode::BAD_REQUEST, "the query string is not valid");
    };
    let Some(path) = shared.options.history.clone() else {
        return error(
            StatusCode::NOT_FOUND,
            "this daemon records no history (it runs with --no-history, or on a simulated \
             source without --history PATH, or its history file could not be opened)",
        );
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let q = match parse(&params, now) {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e),
    };
    // Owned and moved into the query: a request that times out gives up its answer, not the
    // slot, so queries still running stay counted.
    let Ok(slot) = std::sync::Arc::clone(&shared.history_slots).try_acquire_owned() else {
        return error(
            StatusCode::TOO_MANY_REQUESTS,
            "too many history queries at once; try again",
        );
    };
    let answer = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        let internal =
            |e: crate::store::StoreError| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
        let store = Store::open_read_only(&path).map_err(internal)?;
        let mut q = q;
        if let Some(gpu) = &q.gpu {
            // A UUID prefix names the one GPU of the file it starts.
            q.gpu = Some(
                store
                    .resolve("'gpu'", gpu)
                    .map_err(internal)?
                    .map_err(|e| (StatusCode::BAD_REQUEST, e))?,
            );
        }
        store.series(&q).map_err(internal).map(|series| Answer {
            since: q.since,
            until: q.until,
            step: q.step,
            series,
        })
    })
    .await;
    match answer {
        Ok(Ok(answer)) => json_response(
            StatusCode::OK,
            serde_json::to_string(&answer).unwrap_or_else(|_| "{}".into()),
        ),
        Ok(Err((status, e))) => error(status, &e),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("the history query failed: {e}"),
        ),
    }
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // whole seconds, exact in f64
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Result<SeriesQuery, String> {
        let v: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        parse(&v, 1_764_000_000.0)
    }

    #[test]
    fn defaults_are_the_last_hour_in_300_buckets() {
        let d = q(&[]).unwrap();
        assert_eq!(d.until, 1_764_000_000.0);
        assert_eq!(d.since, 1_764_000_000.0 - 3600.0);
        assert_eq!(d.step, 12.0);
        assert_eq!((d.gpu, d.pid), (None, None));
    }

    #[test]
    fn parameters_parse() {
        let d = q(&[
            ("gpu", "GPU-abc"),
            ("pid", "4242"),
            ("since", "2h"),
            ("until", "10m ago"),
            ("step", "1m"),
        ])
        .unwrap();
        assert_eq!(d.gpu, Some(GpuRef::Uuid("GPU-abc".into())));
        assert_eq!(d.pid, Some(4242));
        assert_eq!(d.since, 1_764_000_000.0 - 7200.0);
        assert_eq!(d.until, 1_764_000_000.0 - 600.0);
        assert_eq!(d.step, 60.0);
        assert_eq!(
            q(&[("gpu", "3"), ("step", "30")]).unwrap().gpu,
            Some(GpuRef::Index(3))
        );
    }

    #[test]
    fn bad_input_names_the_parameter() {
        let err = |pairs: &[(&str, &str)]| q(pairs).unwrap_err();
        assert!(err(&[("pid", "abc")]).contains("'pid'"));
        assert!(err(&[("gpu", " ")]).contains("'gpu'"));
        assert!(err(&[("since", "yesterday-ish")]).contains("'since'"));
        assert!(err(&[("until", "soon")]).contains("'until'"));
        assert!(err(&[("step", "0.5")]).contains("at least 1 second"));
        assert!(err(&[("step", "fast")]).contains("'step'"));
        assert!(err(&[("since", "now")]).contains("not before"));
        assert!(err(&[("colour", "red")]).contains("unknown parameter 'colour'"));
        assert!(err(&[("pid", "1"), ("pid", "2")]).contains("more than once"));
        // Bounded: a week at one second is too many points; a year is too long a range.
        let many = err(&[("since", "7d"), ("step", "1s")]);
        assert!(
            many.contains("more than 11000") && many.contains("at least 55s"),
            "{many}"
        );
        assert!(err(&[("since", "365d")]).contains("longer than"));
    }

    proptest::proptest! {
        /// Any query: a bounded query or a short error naming a parameter, never a panic.
        #[test]
        fn any_query_parses_or_is_refused(
            pairs in proptest::collection::vec(("since|until|step|pid|gpu|\\PC{0,5}", "\\PC{0,30}|-?[0-9]{1,25}(e[0-9]{1,3})?|[0-9]{1,20}[smhdy]( ago)?"), 0..4),
        ) {
            let pairs: Vec<(String, String)> = pairs;
            match parse(&pairs, 1_764_000_000.0) {
                Ok(q) => {
                    proptest::prop_assert!(q.since < q.until && q.until - q.since <= MAX_RANGE);
                    proptest::prop_assert!(q.step >= 1.0 && (q.until - q.since) / q.step <= MAX_POINTS);
                }
                Err(e) => proptest::prop_assert!(e.len() < 600, "{}", e),
            }
        }
    }

    #[test]
    fn crafted_times_are_refused_not_panics() {
        let err = |pairs: &[(&str, &str)]| q(pairs).unwrap_err();
        let e = err(&[("since", "0"), ("until", "1e20")]);
        assert!(e.starts_with("'until': 1e20 is out of range"), "{e}");
        assert!(err(&[("since", "€a€")]).starts_with("'since': '€a€' is not a time"));
        assert!(err(&[("since", "1e19")]).contains("out of range"));
        assert!(err(&[("since", "-1e300")]).contains("out of range"));
        assert!(err(&[("step", "1e300")]).starts_with("'step': "));
        assert!(err(&[("step", "100000000000y")]).starts_with("'step': "));
        let long = "9".repeat(100_000);
        for key in ["since", "until", "step", "pid", &long] {
            let e = err(&[(key, &long)]);
            assert!(e.len() < 600, "{key}: {} bytes", e.len());
        }
    }
}
