//! Sizes as error messages print them, converted to exact bytes.
//!
//! PyTorch prints binary units with two decimals (`20.00 MiB`, `139.80 GiB`), so the figure in
//! the text is already rounded by PyTorch; we store what the text says, converted exactly:
//! `round(decimal value × unit)`, computed in integers (no floating point). TensorFlow and JAX
//! print `1.00GiB`, `16.00MiB`, `4.0KiB` or `8.00G`. The single-letter and `KB`/`MB`/`GB`/`TB`
//! units are taken as binary (1024-based) because the tools that print them in these messages
//! (PyTorch's MPS backend, TensorFlow's `3.77G (4046333952 bytes)`, XLA) compute them with 1024.
//! Thousands separators (`1,073,741,824 bytes`, `CuPy`) are accepted.

/// The pattern of one size inside a larger regex (no capture groups of its own).
pub(crate) const SIZE: &str = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?\s?(?:TiB|GiB|MiB|KiB|TB|GB|MB|KB|kB|bytes|byte|B|T|G|M|K|k)\b";

/// Parses `"20.00 MiB"`, `"1.00GiB"`, `"0 bytes"`, `"3221225472B"`, `"1,024 bytes"`.
/// `None` when the text is not a size or the value does not fit in `u64`.
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit: u128 = match unit.trim() {
        "" | "B" | "byte" | "bytes" => 1,
        "KiB" | "KB" | "kB" | "K" | "k" => 1 << 10,
        "MiB" | "MB" | "M" => 1 << 20,
        "GiB" | "GB" | "G" => 1 << 30,
        "TiB" | "TB" | "T" => 1 << 40,
        _ => return None,
    };
    let number: String = number.chars().filter(|c| *c != ',').collect();
    let (int_part, frac_part) = number.split_once('.').unwrap_or((&number, ""));
    if int_part.is_empty() || int_part.len() > 24 || frac_part.len() > 12 {
        return None;
    }
    let int: u128 = int_part.parse().ok()?;
    let frac: u128 = if frac_part.is_empty() {
        0
    } else {
        frac_part.parse().ok()?
    };
    let scale = 10u128.checked_pow(u32::try_from(frac_part.len()).ok()?)?;
    let whole = int.checked_mul(unit)?;
    // round half up: (frac × unit + scale/2) / scale
    let part = (frac.checked_mul(unit)? + scale / 2) / scale;
    u64::try_from(whole.checked_add(part)?).ok()
}

/// Formats bytes as PyTorch does (binary units, two decimals): `57.55 GiB`.
pub fn fmt_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.2} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_conversions() {
        assert_eq!(parse_size("20.00 MiB"), Some(20 * 1024 * 1024));
        assert_eq!(parse_size("57.55 GiB"), Some(61_793_841_971)); // 57.55 × 2^30 = 61793841971.2
        assert_eq!(parse_size("0 bytes"), Some(0));
        assert_eq!(parse_size("1.00GiB"), Some(1 << 30));
        assert_eq!(parse_size("4.0KiB"), Some(4096));
        assert_eq!(parse_size("3221225472B"), Some(3_221_225_472));
        assert_eq!(parse_size("1,073,741,824 bytes"), Some(1_073_741_824));
        assert_eq!(parse_size("8.00G"), Some(8 << 30));
        assert_eq!(parse_size("5.94 MiB"), Some(6_228_541)); // 6228541.44
        assert_eq!(parse_size("1 parsec"), None);
        assert_eq!(parse_size("99999999999999999999 TiB"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size(".5 GiB"), None);
    }

    #[test]
    fn formats_like_pytorch() {
        assert_eq!(fmt_size(0), "0 bytes");
        assert_eq!(fmt_size(61_793_841_971), "57.55 GiB");
        assert_eq!(fmt_size(20 << 20), "20.00 MiB");
    }
}
