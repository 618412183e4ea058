//! A value that follows a timeline: a constant, keyframes joined by straight lines, or steps;
//! optionally repeating with a period and carrying deterministic noise.

use serde::Deserialize;
use serde::de::{self, Deserializer};

/// A value over time (seconds since the scenario's origin).
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    shape: Shape,
    /// When set, time wraps around modulo this many seconds.
    period: Option<f64>,
    /// Half-width of a deterministic jitter added to the value (changes once a second).
    noise: f64,
}

#[derive(Debug, Clone, PartialEq)]
enum Shape {
    Constant(f64),
    /// Linear interpolation between keyframes; held flat before the first and after the last.
    Linear(Vec<(f64, f64)>),
    /// The value of the last keyframe at or before `t`; the first value before the first keyframe.
    Step(Vec<(f64, f64)>),
}

impl Timeline {
    /// A timeline that is always `value`.
    pub fn constant(value: f64) -> Self {
        Self {
            shape: Shape::Constant(value),
            period: None,
            noise: 0.0,
        }
    }

    /// Keyframes joined by straight lines.
    ///
    /// # Panics
    /// When `points` is empty: a timeline needs at least one keyframe.
    pub fn linear(points: Vec<(f64, f64)>) -> Self {
        assert!(!points.is_empty(), "a linear timeline needs a keyframe");
        Self {
            shape: Shape::Linear(points),
            period: None,
            noise: 0.0,
        }
    }

    /// Keyframes held until the next one.
    ///
    /// # Panics
    /// When `points` is empty: a timeline needs at least one keyframe.
    pub fn step(points: Vec<(f64, f64)>) -> Self {
        assert!(!points.is_empty(), "a step timeline needs a keyframe");
        Self {
            shape: Shape::Step(points),
            period: None,
            noise: 0.0,
        }
    }

    /// The value at `t` seconds.
    pub fn at(&self, t: f64) -> f64 {
        let local = self.local_time(t);
        let base = match &self.shape {
            Shape::Constant(v) => *v,
            Shape::Linear(points) => linear_at(points, local),
            Shape::Step(points) => step_at(points, local),
        };
        if self.noise > 0.0 {
            base + self.noise * jitter(t)
        } else {
            base
        }
    }

    /// The value at `t`, rounded and clamped into `u64` (bytes, counters).
    pub fn at_u64(&self, t: f64) -> u64 {
        let v = self.at(t).round();
        if v <= 0.0 { 0 } else { v as u64 }
    }

    /// The value at `t`, clamped to `[0, 100]` (percentages).
    pub fn percent_at(&self, t: f64) -> u32 {
        self.at(t).round().clamp(0.0, 100.0) as u32
    }

    /// ∫ value dt from 0 to `t` (noise ignored): energy from power, for instance.
    pub fn integral(&self, t: f64) -> f64 {
        if t <= 0.0 {
            return 0.0;
        }
        match self.period {
            Some(p) if p > 0.0 => {
                let cycles = (t / p).floor();
                cycles * self.integral_plain(p) + self.integral_plain(t - cycles * p)
            }
            _ => self.integral_plain(t),
        }
    }

    fn integral_plain(&self, t: f64) -> f64 {
        match &self.shape {
            Shape::Constant(v) => v * t,
            Shape::Linear(points) => integrate_piecewise(points, t, true),
            Shape::Step(points) => integrate_piecewise(points, t, false),
        }
    }

    fn local_time(&self, t: f64) -> f64 {
        match self.period {
            Some(p) if p > 0.0 => t.rem_euclid(p),
            _ => t,
        }
    }
}

impl Default for Timeline {
    fn default() -> Self {
        Self::constant(0.0)
    }
}

fn linear_at(points: &[(f64, f64)], t: f64) -> f64 {
    let first = points[0];
    if t <= first.0 {
        return first.1;
    }
    for pair in points.windows(2) {
        let (t0, v0) = pair[0];
        let (t1, v1) = pair[1];
        if t <= t1 {
            if t1 <= t0 {
                return v1;
            }
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0);
        }
    }
    points[points.len() - 1].1
}

fn step_at(points: &[(f64, f64)], t: f64) -> f64 {
    let mut value = points[0].1;
    for &(tk, v) in points {
        if tk <= t {
            value = v;
        } else {
            break;
        }
    }
    value
}

/// Integral over [0, t] of a piecewise function given by keyframes.
fn integrate_piecewise(points: &[(f64, f64)], t: f64, linear: bool) -> f64 {
    // Build the segment boundaries: [0, k0, k1, ..., t] and integrate each piece exactly.
    let mut total = 0.0;
    let mut cursor = 0.0_f64;
    let mut knots: Vec<f64> = points
        .iter()
        .map(|p| p.0)
        .filter(|k| *k > 0.0 && *k < t)
        .collect();
    knots.push(t);
    for knot in knots {
        if knot <= cursor {
            continue;
        }
        let a = if linear {
            linear_at(points, cursor)
        } else {
            step_at(points, cursor)
        };
        let b = if linear { linear_at(points, knot) } else { a };
        total += f64::midpoint(a, b) * (knot - cursor);
        cursor = knot;
    }
    total
}

/// A deterministic value in [-1, 1] that changes once a second.
fn jitter(t: f64) -> f64 {
    let second = t.floor() as i64 as u64;
    // SplitMix64 finaliser: cheap and well spread.
    let mut z = second.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z as f64 / u64::MAX as f64) * 2.0 - 1.0
}

/// A number or a size with a unit ("6.5GiB", "512 MiB", "0").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quantity(pub f64);

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(i64),
            Float(f64),
            Text(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Int(i) => Ok(Quantity(i as f64)),
            Raw::Float(f) => Ok(Quantity(f)),
            Raw::Text(s) => parse_size(&s).map(|b| Quantity(b as f64)).map_err(|e| {
                de::Error::custom(format!(
                    "invalid size '{s}': {e} (expected a number or a size such as \"6.5GiB\")"
                ))
            }),
        }
    }
}

/// Parses a size such as `6.5GiB`, `512 MiB`, `1000000` into bytes (binary units as nvidia-smi
/// uses them; decimal `GB`/`MB` are accepted too).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("empty size".to_string());
    }
    t.parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|e| e.clone())
}

impl<'de> Deserialize<'de> for Timeline {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            linear: Option<Vec<(f64, Quantity)>>,
            step: Option<Vec<(f64, Quantity)>>,
            period: Option<f64>,
            noise: Option<Quantity>,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Value(Quantity),
            Table(Table),
        }
        let raw = Raw::deserialize(deserializer).map_err(|_| {
            de::Error::custom(
                "expected a value (number or size like \"4GiB\") or a table \
                 { linear = [[t, v], ...] } / { step = [[t, v], ...] } with optional period and noise",
            )
        })?;
        match raw {
            Raw::Value(q) => Ok(Timeline::constant(q.0)),
            Raw::Table(table) => {
                let (points, linear) = match (table.linear, table.step) {
                    (Some(p), None) => (p, true),
                    (None, Some(p)) => (p, false),
                    _ => {
                        return Err(de::Error::custom(
                            "a timeline table needs exactly one of 'linear' or 'step'",
                        ));
                    }
                };
                if points.is_empty() {
                    return Err(de::Error::custom("a timeline needs at least one keyframe"));
                }
                if points.windows(2).any(|w| w[1].0 < w[0].0) {
                    return Err(de::Error::custom(
                        "timeline keyframes must be in increasing time order",
                    ));
                }
                if let Some(p) = table.period
                    && p <= 0.0
                {
                    return Err(de::Error::custom(
                        "'period' must be a positive number of seconds",
                    ));
                }
                let points: Vec<(f64, f64)> = points.into_iter().map(|(t, q)| (t, q.0)).collect();
                let mut timeline = if linear {
                    Timeline::linear(points)
                } else {
                    Timeline::step(points)
                };
                timeline.period = table.period;
                timeline.noise = table.noise.map_or(0.0, |q| q.0.abs());
                Ok(timeline)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_interpolates_and_holds_at_ends() {
        let t = Timeline::linear(vec![(10.0, 0.0), (20.0, 100.0)]);
        assert!((t.at(0.0) - 0.0).abs() < 1e-9);
        assert!((t.at(15.0) - 50.0).abs() < 1e-9);
        assert!((t.at(25.0) - 100.0).abs() < 1e-9);
    }

    #[test]
    fn step_holds_until_next_keyframe() {
        let t = Timeline::step(vec![(0.0, 1.0), (24.0, 4.0)]);
        assert!((t.at(23.9) - 1.0).abs() < 1e-9);
        assert!((t.at(24.0) - 4.0).abs() < 1e-9);
    }

    #[test]
    fn period_repeats() {
        let mut t = Timeline::step(vec![(0.0, 1.0), (5.0, 2.0)]);
        t.period = Some(10.0);
        assert!((t.at(16.0) - 2.0).abs() < 1e-9);
        assert!((t.at(12.0) - 1.0).abs() < 1e-9);
        // integral over two periods: 2 * (5*1 + 5*2)
        assert!((t.integral(20.0) - 30.0).abs() < 1e-9);
    }

    #[test]
    fn integral_of_linear_ramp() {
        let t = Timeline::linear(vec![(0.0, 0.0), (10.0, 10.0)]);
        assert!((t.integral(10.0) - 50.0).abs() < 1e-9);
        assert!((t.integral(20.0) - 150.0).abs() < 1e-9);
    }

    #[test]
    fn noise_is_deterministic_and_bounded() {
        let mut t = Timeline::constant(100.0);
        t.noise = 5.0;
        for i in 0..100 {
            let v = t.at(f64::from(i) * 0.37);
            assert!((95.0..=105.0).contains(&v));
            assert!((v - t.at(f64::from(i) * 0.37)).abs() < 1e-12);
        }
    }

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("6.5 GiB"), Ok(6_979_321_856));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert!(parse_size("lots").is_err());
    }
}
