//! Parsing and formatting of single setting values: durations, sizes, counts and the small
//! enums. These are the functions the command line uses as clap value parsers, so a flag and a
//! config file key accept exactly the same text and give the same complaint.

use std::fmt;
use std::time::Duration;

use bytesize::ByteSize;

use crate::watch::WatchSpecProblem;

/// An inclusive range of accepted durations, e.g. 100ms…60s for `sampling.interval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationRange {
    pub min: Duration,
    pub max: Duration,
}

impl DurationRange {
    /// A range from `min` to `max`, both inclusive.
    pub const fn new(min: Duration, max: Duration) -> Self {
        Self { min, max }
    }

    /// Whether `d` lies in the range.
    pub fn contains(&self, d: Duration) -> bool {
        self.min <= d && d <= self.max
    }
}

impl fmt::Display for DurationRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "from {} to {}",
            format_duration(self.min),
            format_duration(self.max)
        )
    }
}

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// `sampling.interval` / `--interval`: the fast cadence.
pub const INTERVAL_RANGE: DurationRange = DurationRange::new(ms(100), secs(60));
/// `sampling.slow-interval` / `--slow-interval`: the slow cadence (also at least the interval).
pub const SLOW_INTERVAL_RANGE: DurationRange = DurationRange::new(ms(100), secs(600));
/// `sampling.hang-timeout` / `--hang-timeout`.
pub const HANG_TIMEOUT_RANGE: DurationRange = DurationRange::new(secs(1), secs(600));
/// `nvml.reinit-backoff-max`.
pub const REINIT_BACKOFF_MAX_RANGE: DurationRange = DurationRange::new(secs(1), secs(600));
/// `history.window`.
pub const HISTORY_WINDOW_RANGE: DurationRange = DurationRange::new(secs(10), secs(24 * 3600));

/// The smallest accepted `pick.count` / `--count`.
pub const MIN_PICK_COUNT: u32 = 1;

/// `detect.near-capacity-min-duration`.
pub const NEAR_CAPACITY_MIN_DURATION_RANGE: DurationRange = DurationRange::new(secs(0), secs(600));
/// `detect.filling-window`.
pub const FILLING_WINDOW_RANGE: DurationRange = DurationRange::new(secs(5), secs(600));
/// `detect.filling-horizon`.
pub const FILLING_HORIZON_RANGE: DurationRange = DurationRange::new(secs(60), secs(24 * 3600));
/// `detect.leak-warmup`.
pub const LEAK_WARMUP_RANGE: DurationRange = DurationRange::new(secs(0), secs(3600));
/// `detect.leak-sustain`.
pub const LEAK_SUSTAIN_RANGE: DurationRange = DurationRange::new(secs(30), secs(24 * 3600));
/// `detect.external-window`.
pub const EXTERNAL_WINDOW_RANGE: DurationRange = DurationRange::new(secs(10), secs(3600));
/// `detect.external-horizon`.
pub const EXTERNAL_HORIZON_RANGE: DurationRange = DurationRange::new(secs(60), secs(24 * 3600));
/// `detect.idle-duration`.
pub const IDLE_DURATION_RANGE: DurationRange = DurationRange::new(secs(60), secs(24 * 3600));
/// `detect.exited-grace`.
pub const EXITED_GRACE_RANGE: DurationRange = DurationRange::new(secs(0), secs(3600));
/// `alerts.webhook-timeout`.
pub const WEBHOOK_TIMEOUT_RANGE: DurationRange = DurationRange::new(ms(100), secs(300));
/// `daemon.idle-timeout`, `daemon.request-timeout`.
pub const HTTP_TIMEOUT_RANGE: DurationRange = DurationRange::new(secs(1), secs(600));
/// `alerts.rate-limit`.
pub const RATE_LIMIT_RANGE: DurationRange = DurationRange::new(secs(0), secs(24 * 3600));

/// An inclusive range of accepted numbers (integers or not), described for messages, e.g.
/// "a percentage from 50 to 100".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NumberRange {
    /// What the number is, with its article: "a percentage".
    pub what: &'static str,
    pub min: u32,
    /// `None`: no upper bound.
    pub max: Option<u32>,
}

impl NumberRange {
    /// Whether `x` lies in the range; never for NaN or an infinity.
    pub fn contains(&self, x: f64) -> bool {
        x.is_finite() && f64::from(self.min) <= x && self.max.is_none_or(|max| x <= f64::from(max))
    }
}

impl fmt::Display for NumberRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.max {
            Some(max) => write!(f, "{} from {} to {max}", self.what, self.min),
            None => write!(f, "{} of at least {}", self.what, self.min),
        }
    }
}

/// `detect.near-capacity-warn` and `detect.near-capacity-critical`, in percent.
pub const NEAR_CAPACITY_PERCENT_RANGE: NumberRange = NumberRange {
    what: "a percentage",
    min: 50,
    max: Some(100),
};
/// `detect.filling-critical-used`, in percent.
pub const FILLING_CRITICAL_USED_RANGE: NumberRange = NumberRange {
    what: "a percentage",
    min: 0,
    max: Some(100),
};
/// `detect.near-capacity-hysteresis`, in percentage points.
pub const HYSTERESIS_RANGE: NumberRange = NumberRange {
    what: "a number of percentage points",
    min: 0,
    max: Some(20),
};
/// `detect.filling-min-rate` and `detect.leak-min-rate`, in MiB per minute.
pub const GROWTH_RATE_RANGE: NumberRange = NumberRange {
    what: "a rate in MiB per minute",
    min: 0,
    max: None,
};

/// An inclusive range of accepted whole numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntRange {
    pub min: i64,
    pub max: i64,
}

/// `alerts.webhook-retries`.
pub const WEBHOOK_RETRIES_RANGE: IntRange = IntRange { min: 0, max: 10 };
/// `daemon.metrics-top-n`.
pub const METRICS_TOP_N_RANGE: IntRange = IntRange {
    min: 0,
    max: 10_000,
};
/// `daemon.max-connections`.
pub const MAX_CONNECTIONS_RANGE: IntRange = IntRange {
    min: 4,
    max: 100_000,
};
/// `daemon.max-event-streams`.
pub const MAX_EVENT_STREAMS_RANGE: IntRange = IntRange {
    min: 1,
    max: 100_000,
};
/// `alerts.queue`.
pub const ALERT_QUEUE_RANGE: IntRange = IntRange {
    min: 1,
    max: 10_000,
};

/// Why a value was refused. Displays as a phrase that reads after "is", e.g.
/// `out of range (expected a duration from 100ms to 60s)`, which is also what clap prints
/// after `invalid value '5ms' for '--interval <DURATION>': `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("not a duration (expected a duration like 250ms, 1s or 2m: {reason})")]
    NotDuration { reason: String },
    #[error("out of range (expected a duration {range})")]
    DurationOutOfRange { range: DurationRange },
    #[error("not a size (expected a size like 0, 512MiB or 8GiB: {reason})")]
    NotSize { reason: String },
    #[error(
        "ambiguous (the unit '{unit}' could mean {unit}iB or {unit}B: write {number}{unit}iB for \
         binary or {number}{unit}B for decimal units)"
    )]
    AmbiguousSizeUnit { number: String, unit: String },
    #[error("out of range (expected a whole number of at least {min})")]
    CountOutOfRange { min: i64 },
    #[error("not one of {}", expected.join(", "))]
    NotOneOf { expected: &'static [&'static str] },
    #[error("not a valid watch spec: {0}")]
    WatchSpec(WatchSpecProblem),
    #[error("empty (expected a path to the NVML library)")]
    EmptyPath,
    #[error("out of range (expected {range})")]
    NumberOutOfRange { range: NumberRange },
    #[error("out of range (expected a whole number from {min} to {max})")]
    IntegerOutOfRange { min: i64, max: i64 },
    #[error("empty (expected {expected})")]
    Empty { expected: &'static str },
    #[error("not a webhook URL (expected a URL starting with http:// or https://)")]
    NotWebhookUrl,
    #[error("not an address (expected an address and port like 127.0.0.1:9400)")]
    NotAddress,
}

/// Parses a duration ("100ms", "1s", "2m", "1m 30s") and checks it lies in `range`.
///
/// Usable as a clap value parser:
/// `value_parser = |s: &str| parse_duration_in(INTERVAL_RANGE, s)`.
pub fn parse_duration_in(range: DurationRange, text: &str) -> Result<Duration, ValueError> {
    let d = humantime::parse_duration(text.trim()).map_err(|e| ValueError::NotDuration {
        reason: e.to_string(),
    })?;
    check_duration(range, d)?;
    Ok(d)
}

/// Checks an already parsed duration against `range`.
pub fn check_duration(range: DurationRange, d: Duration) -> Result<(), ValueError> {
    if range.contains(d) {
        Ok(())
    } else {
        Err(ValueError::DurationOutOfRange { range })
    }
}

/// Parses a size in bytes: a plain number of bytes ("0", "1048576"), binary units ("512MiB",
/// "8GiB", "8 GiB") or decimal units ("8GB"). Units are case-insensitive; a bare "G"/"M"/"K" is
/// refused as ambiguous, since GPU tools print binary units and users often mean them.
pub fn parse_size(text: &str) -> Result<u64, ValueError> {
    let text = text.trim();
    let number_len = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(number_len);
    let unit = unit.trim_start();
    if number.is_empty() {
        return Err(ValueError::NotSize {
            reason: format!("'{text}' does not start with a number"),
        });
    }
    if unit.len() == 1 && "kmgtpe".contains(unit.to_ascii_lowercase().as_str()) {
        return Err(ValueError::AmbiguousSizeUnit {
            number: number.to_owned(),
            unit: unit.to_ascii_uppercase(),
        });
    }
    text.parse::<ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|reason| ValueError::NotSize { reason })
}

/// Checks a count (`pick.count`, `--count`): at least [`MIN_PICK_COUNT`].
pub fn check_count(n: i64) -> Result<u32, ValueError> {
    u32::try_from(n)
        .ok()
        .filter(|&n| n >= MIN_PICK_COUNT)
        .ok_or(ValueError::CountOutOfRange {
            min: i64::from(MIN_PICK_COUNT),
        })
}

/// Parses a count for the command line (`--count 2`).
pub fn parse_count(text: &str) -> Result<u32, ValueError> {
    let n: i64 = text
        .trim()
        .parse()
        .map_err(|_| ValueError::CountOutOfRange {
            min: i64::from(MIN_PICK_COUNT),
        })?;
    check_count(n)
}

/// Checks a number against `range`.
pub fn check_number(range: NumberRange, x: f64) -> Result<f64, ValueError> {
    if range.contains(x) {
        Ok(x)
    } else {
        Err(ValueError::NumberOutOfRange { range })
    }
}

/// Checks a whole number against `range`.
pub fn check_integer(range: IntRange, n: i64) -> Result<i64, ValueError> {
    if (range.min..=range.max).contains(&n) {
        Ok(n)
    } else {
        Err(ValueError::IntegerOutOfRange {
            min: range.min,
            max: range.max,
        })
    }
}

/// Checks a webhook URL: `http://` or `https://` (any case) followed by something, no spaces.
/// Gives it back without surrounding whitespace.
pub fn parse_webhook_url(text: &str) -> Result<String, ValueError> {
    let url = text.trim();
    let lower = url.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.contains(char::is_whitespace) => Ok(url.to_owned()),
        _ => Err(ValueError::NotWebhookUrl),
    }
}

const BYTES_PER_MIB: f64 = 1_048_576.0;

/// A percentage as written in the file (`90`) to the fraction the detector uses (`0.9`).
/// One correctly rounded division, so `90` gives exactly the literal `0.90`.
pub fn percent_to_fraction(percent: f64) -> f64 {
    percent / 100.0
}

/// The inverse of [`percent_to_fraction`]: the shortest decimal that converts back to exactly
/// `fraction` (`0.97` gives `97`, not `97.00000000000001`).
pub fn fraction_to_percent(fraction: f64) -> f64 {
    shortest_preimage(fraction * 100.0, fraction, percent_to_fraction)
}

/// A growth rate as written in the file (MiB per minute) to bytes per second.
/// `60` gives exactly 1 MiB/s; `10` gives exactly `1024.0 * 1024.0 / 6.0`.
pub fn mib_per_min_to_bytes_per_s(mib_per_min: f64) -> f64 {
    mib_per_min * BYTES_PER_MIB / 60.0
}

/// The inverse of [`mib_per_min_to_bytes_per_s`]: the shortest decimal that converts back to
/// exactly `bytes_per_s`.
pub fn bytes_per_s_to_mib_per_min(bytes_per_s: f64) -> f64 {
    shortest_preimage(
        bytes_per_s * 60.0 / BYTES_PER_MIB,
        bytes_per_s,
        mib_per_min_to_bytes_per_s,
    )
}

/// The number with the fewest decimals, rounded from `approx`, that `convert` maps to exactly
/// `target`; `approx` itself when there is none. So a value read from a file and converted is
/// written back as the number that was read (or an equally short one that reads back the same).
fn shortest_preimage(approx: f64, target: f64, convert: fn(f64) -> f64) -> f64 {
    if !approx.is_finite() {
        return approx;
    }
    for decimals in 0..=17 {
        if let Ok(x) = format!("{approx:.decimals$}").parse::<f64>()
            && convert(x).to_bits() == target.to_bits()
        {
            return x;
        }
    }
    approx
}

/// A number the way TOML writes it: whole numbers without a fraction (`90`), others as the
/// shortest text that reads back the same (`92.5`), `nan` and `inf` as TOML spells them.
pub fn format_number(x: f64) -> String {
    if x.is_nan() {
        "nan".to_owned()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.to_owned()
    } else {
        format!("{x}")
    }
}

/// Formats a duration the way a person writes it and [`parse_duration_in`] reads it back:
/// `100ms`, `60s`, `10m`, `24h`; anything else as humantime writes it (`1m 30s`).
pub fn format_duration(d: Duration) -> String {
    const NS_PER_MS: u128 = 1_000_000;
    const NS_PER_S: u128 = 1_000_000_000;
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    if !nanos.is_multiple_of(NS_PER_S) {
        if nanos.is_multiple_of(NS_PER_MS) && nanos < NS_PER_S {
            return format!("{}ms", nanos / NS_PER_MS);
        }
        return humantime::format_duration(d).to_string();
    }
    let s = d.as_secs();
    if s <= 60 {
        format!("{s}s")
    } else if s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        humantime::format_duration(d).to_string()
    }
}

/// Formats a size exactly, in the unit that gives the shortest text: `0`, `1MiB`, `8GiB`,
/// `8GB`, `1234567B`. [`parse_size`] reads it back to the same number of bytes.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 12] = [
        ("EiB", 1 << 60),
        ("PiB", 1 << 50),
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
        ("EB", 1_000_000_000_000_000_000),
        ("PB", 1_000_000_000_000_000),
        ("TB", 1_000_000_000_000),
        ("GB", 1_000_000_000),
        ("MB", 1_000_000),
        ("KB", 1_000),
    ];
    if bytes == 0 {
        return "0".to_owned();
    }
    let mut best = format!("{bytes}B");
    for (unit, factor) in UNITS {
        if bytes.is_multiple_of(factor) {
            let candidate = format!("{}{unit}", bytes / factor);
            if candidate.len() < best.len() {
                best = candidate;
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_check_range() {
        assert_eq!(parse_duration_in(INTERVAL_RANGE, "250ms"), Ok(ms(250)));
        assert_eq!(parse_duration_in(INTERVAL_RANGE, " 2s "), Ok(secs(2)));
        assert_eq!(parse_duration_in(INTERVAL_RANGE, "100ms"), Ok(ms(100)));
        assert_eq!(parse_duration_in(INTERVAL_RANGE, "1m"), Ok(secs(60)));
        let err = parse_duration_in(INTERVAL_RANGE, "5ms").unwrap_err();
        assert_eq!(
            err.to_string(),
            "out of range (expected a duration from 100ms to 60s)"
        );
        assert!(parse_duration_in(INTERVAL_RANGE, "61s").is_err());
        let err = parse_duration_in(INTERVAL_RANGE, "fast").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("not a duration (expected a duration like 250ms, 1s or 2m"),
            "{err}"
        );
        assert!(parse_duration_in(INTERVAL_RANGE, "5").is_err());
    }

    #[test]
    fn range_texts_read_as_written() {
        assert_eq!(HANG_TIMEOUT_RANGE.to_string(), "from 1s to 10m");
        assert_eq!(HISTORY_WINDOW_RANGE.to_string(), "from 10s to 24h");
        assert_eq!(SLOW_INTERVAL_RANGE.to_string(), "from 100ms to 10m");
    }

    #[test]
    fn sizes_accept_binary_decimal_and_spaces() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("8GiB"), Ok(8 << 30));
        assert_eq!(parse_size("8 GiB"), Ok(8 << 30));
        assert_eq!(parse_size("8gib"), Ok(8 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("8GB"), Ok(8_000_000_000));
        assert_eq!(parse_size("1234B"), Ok(1234));
    }

    #[test]
    fn sizes_refuse_garbage_and_ambiguous_units() {
        let err = parse_size("8G").unwrap_err();
        assert_eq!(
            err.to_string(),
            "ambiguous (the unit 'G' could mean GiB or GB: write 8GiB for binary or 8GB for decimal units)"
        );
        assert!(matches!(
            parse_size("lots"),
            Err(ValueError::NotSize { .. })
        ));
        assert!(matches!(
            parse_size("8 bananas"),
            Err(ValueError::NotSize { .. })
        ));
        assert!(matches!(parse_size("-1"), Err(ValueError::NotSize { .. })));
        assert!(matches!(parse_size(""), Err(ValueError::NotSize { .. })));
    }

    #[test]
    fn counts() {
        assert_eq!(check_count(1), Ok(1));
        assert_eq!(parse_count("3"), Ok(3));
        assert!(check_count(0).is_err());
        assert!(check_count(-2).is_err());
        assert!(parse_count("two").is_err());
    }

    #[test]
    fn percentages_convert_exactly_both_ways() {
        assert_eq!(percent_to_fraction(90.0).to_bits(), 0.90_f64.to_bits());
        assert_eq!(percent_to_fraction(97.0).to_bits(), 0.97_f64.to_bits());
        assert_eq!(percent_to_fraction(5.0).to_bits(), 0.05_f64.to_bits());
        assert_eq!(format_number(fraction_to_percent(0.97)), "97");
        assert_eq!(format_number(fraction_to_percent(0.9)), "90");
        assert_eq!(format_number(fraction_to_percent(0.925)), "92.5");
        // Every percentage with up to two decimals comes back as written.
        for hundredths in 0..=10_000_u32 {
            let text = format!("{}.{:02}", hundredths / 100, hundredths % 100);
            let p: f64 = text.parse().unwrap();
            let back = fraction_to_percent(percent_to_fraction(p));
            assert_eq!(back.to_bits(), p.to_bits(), "{text}");
        }
    }

    #[test]
    fn growth_rates_convert_exactly_both_ways() {
        assert_eq!(
            mib_per_min_to_bytes_per_s(60.0).to_bits(),
            1_048_576_f64.to_bits()
        );
        assert_eq!(
            mib_per_min_to_bytes_per_s(10.0).to_bits(),
            (1024.0_f64 * 1024.0 / 6.0).to_bits()
        );
        assert_eq!(
            format_number(bytes_per_s_to_mib_per_min(1024.0 * 1024.0 / 6.0)),
            "10"
        );
        assert_eq!(format_number(bytes_per_s_to_mib_per_min(1_048_576.0)), "60");
        for tenths in 0..=100_000_u32 {
            let text = format!("{}.{}", tenths / 10, tenths % 10);
            let r: f64 = text.parse().unwrap();
            let back = bytes_per_s_to_mib_per_min(mib_per_min_to_bytes_per_s(r));
            assert_eq!(back.to_bits(), r.to_bits(), "{text}");
        }
    }

    #[test]
    fn numbers_and_integers_check_their_ranges() {
        assert_eq!(check_number(NEAR_CAPACITY_PERCENT_RANGE, 50.0), Ok(50.0));
        assert_eq!(check_number(NEAR_CAPACITY_PERCENT_RANGE, 100.0), Ok(100.0));
        let err = check_number(NEAR_CAPACITY_PERCENT_RANGE, 49.9).unwrap_err();
        assert_eq!(
            err.to_string(),
            "out of range (expected a percentage from 50 to 100)"
        );
        assert!(check_number(NEAR_CAPACITY_PERCENT_RANGE, f64::NAN).is_err());
        assert!(check_number(GROWTH_RATE_RANGE, f64::INFINITY).is_err());
        assert_eq!(
            check_number(GROWTH_RATE_RANGE, -1.0)
                .unwrap_err()
                .to_string(),
            "out of range (expected a rate in MiB per minute of at least 0)"
        );
        assert_eq!(check_integer(WEBHOOK_RETRIES_RANGE, 0), Ok(0));
        assert_eq!(
            check_integer(ALERT_QUEUE_RANGE, 0).unwrap_err().to_string(),
            "out of range (expected a whole number from 1 to 10000)"
        );
    }

    #[test]
    fn webhook_urls_need_a_scheme() {
        assert_eq!(
            parse_webhook_url(" https://hooks.example/x "),
            Ok("https://hooks.example/x".to_owned())
        );
        assert!(parse_webhook_url("HTTP://h").is_ok());
        for bad in ["hooks.example/x", "ftp://h", "https://", "http://a b", ""] {
            assert_eq!(
                parse_webhook_url(bad),
                Err(ValueError::NotWebhookUrl),
                "{bad}"
            );
        }
    }

    #[test]
    fn durations_format_and_round_trip() {
        for (d, text) in [
            (ms(100), "100ms"),
            (secs(1), "1s"),
            (secs(60), "60s"),
            (secs(600), "10m"),
            (secs(86400), "24h"),
            (secs(90), "1m 30s"),
            (ms(1500), "1s 500ms"),
        ] {
            assert_eq!(format_duration(d), text);
            assert_eq!(humantime::parse_duration(text), Ok(d));
        }
    }

    #[test]
    fn sizes_format_exactly_and_round_trip() {
        for (b, text) in [
            (0, "0"),
            (1 << 20, "1MiB"),
            (8 << 30, "8GiB"),
            (8_000_000_000, "8GB"),
            (1_234_567, "1234567B"),
            (3 << 29, "1536MiB"),
        ] {
            assert_eq!(format_size(b), text);
            assert_eq!(parse_size(text), Ok(b));
        }
    }
}
