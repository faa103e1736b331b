//! Kubernetes resource quantities for storage: parse, format, round.
//!
//! Storage sizes are whole bytes, so fractional and milli quantities that do not land on a whole
//! byte are refused rather than silently truncated.

use std::fmt;

pub const KI: u64 = 1 << 10;
pub const MI: u64 = 1 << 20;
pub const GI: u64 = 1 << 30;
pub const TI: u64 = 1 << 40;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("empty quantity")]
    Empty,
    #[error("'{0}' is negative; sizes must be zero or more")]
    Negative(String),
    #[error("'{0}' is not a quantity (write e.g. 10Gi, 500Mi, 1G or a plain byte count)")]
    Invalid(String),
    #[error("'{0}' has unknown suffix '{1}' (use Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P, E)")]
    Suffix(String, String),
    #[error("'{0}' is too large")]
    Overflow(String),
    #[error("'{0}' is not a whole number of bytes")]
    Fractional(String),
}

fn multiplier(suffix: &str) -> Option<(u128, u128)> {
    // (numerator, denominator) so that milli can be expressed exactly
    Some(match suffix {
        "" => (1, 1),
        "m" => (1, 1000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        _ => return None,
    })
}

/// Parses a Kubernetes quantity into bytes.
pub fn parse(input: &str) -> Result<u64, QuantityError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(QuantityError::Empty);
    }
    let (sign, body) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let split = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(split);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(QuantityError::Invalid(input.to_string()));
    }
    // Decimal exponent forms (1e3, 1E3) are legal Kubernetes quantities.
    let (suffix, exp) = match suffix.strip_prefix(['e', 'E']) {
        Some(e) if !e.is_empty() && e.chars().all(|c| c.is_ascii_digit()) => {
            let exp: u32 = e
                .parse()
                .map_err(|_| QuantityError::Overflow(input.to_string()))?;
            ("", Some(exp))
        }
        _ => (suffix, None),
    };
    let (num, den) = match exp {
        Some(e) => (
            10u128
                .checked_pow(e)
                .ok_or_else(|| QuantityError::Overflow(input.to_string()))?,
            1,
        ),
        None => multiplier(suffix)
            .ok_or_else(|| QuantityError::Suffix(input.to_string(), suffix.to_string()))?,
    };
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    let digits = format!("{int_part}{frac_part}");
    let scale = 10u128
        .checked_pow(frac_part.len() as u32)
        .ok_or_else(|| QuantityError::Overflow(input.to_string()))?;
    let mantissa: u128 = if digits.is_empty() {
        0
    } else {
        digits
            .parse()
            .map_err(|_| QuantityError::Overflow(input.to_string()))?
    };
    let total = mantissa
        .checked_mul(num)
        .ok_or_else(|| QuantityError::Overflow(input.to_string()))?;
    // 38 fraction digits and a milli suffix exceed u128: too precise to be a byte count.
    let divisor = scale
        .checked_mul(den)
        .ok_or_else(|| QuantityError::Overflow(input.to_string()))?;
    if total % divisor != 0 {
        return Err(QuantityError::Fractional(input.to_string()));
    }
    let bytes = total / divisor;
    if sign && bytes != 0 {
        return Err(QuantityError::Negative(input.to_string()));
    }
    u64::try_from(bytes).map_err(|_| QuantityError::Overflow(input.to_string()))
}

/// Formats bytes the way a human writes a PVC size: the largest binary suffix that divides
/// exactly, else plain bytes. `parse(&format(x)) == x` for every x.
pub fn format(bytes: u64) -> String {
    for (suffix, unit) in [
        ("Ei", 1u64 << 60),
        ("Pi", 1 << 50),
        ("Ti", TI),
        ("Gi", GI),
        ("Mi", MI),
        ("Ki", KI),
    ] {
        if bytes != 0 && bytes.is_multiple_of(unit) {
            return format!("{}{}", bytes / unit, suffix);
        }
    }
    bytes.to_string()
}

/// A human approximation for logs and tables (never parsed back).
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "Ki", "Mi", "Gi", "Ti", "Pi"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes}B")
    } else {
        format!("{v:.1}{}", UNITS[i])
    }
}

/// Rounds up to a whole multiple of `unit` (saturating).
pub fn round_up(bytes: u64, unit: u64) -> u64 {
    if unit == 0 || bytes.is_multiple_of(unit) {
        bytes
    } else {
        (bytes / unit).saturating_add(1).saturating_mul(unit)
    }
}

/// A new size for a volume now `current` bytes: volumes of 1Gi or more go up in whole Gi,
/// smaller ones in whole Mi.
pub fn round_size(bytes: u64, current: u64) -> u64 {
    round_up(bytes, if current >= GI { GI } else { MI })
}

/// A size in bytes that (de)serialises as a Kubernetes quantity string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format(self.0))
    }
}

impl std::str::FromStr for Bytes {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s).map(Bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_kubernetes_forms() {
        assert_eq!(parse("10Gi"), Ok(10 * GI));
        assert_eq!(parse("500Mi"), Ok(500 * MI));
        assert_eq!(parse("1G"), Ok(1_000_000_000));
        assert_eq!(parse("1k"), Ok(1000));
        assert_eq!(parse("1Ki"), Ok(1024));
        assert_eq!(parse("12345"), Ok(12345));
        assert_eq!(parse("1.5Gi"), Ok(3 * GI / 2));
        assert_eq!(parse("1e3"), Ok(1000));
        assert_eq!(parse("2000m"), Ok(2));
        assert_eq!(parse("0"), Ok(0));
        assert_eq!(parse(" 3Ti "), Ok(3 * TI));
    }

    #[test]
    fn refuses_bad_input() {
        assert!(matches!(parse(""), Err(QuantityError::Empty)));
        assert!(matches!(parse("-1Gi"), Err(QuantityError::Negative(_))));
        assert!(matches!(parse("10GB"), Err(QuantityError::Suffix(_, _))));
        assert!(matches!(parse("Gi"), Err(QuantityError::Invalid(_))));
        assert!(matches!(parse("1.2.3"), Err(QuantityError::Invalid(_))));
        assert!(matches!(parse("1500m"), Err(QuantityError::Fractional(_))));
        assert!(matches!(parse("100Ei"), Err(QuantityError::Overflow(_))));
        assert!(matches!(parse("20%"), Err(QuantityError::Suffix(_, _))));
    }

    #[test]
    fn formats_exact_units() {
        assert_eq!(format(10 * GI), "10Gi");
        assert_eq!(format(1536 * MI), "1536Mi");
        assert_eq!(format(1000), "1000");
        assert_eq!(format(0), "0");
        assert_eq!(round_up(GI + 1, GI), 2 * GI);
        assert_eq!(round_up(2 * GI, GI), 2 * GI);
        assert_eq!(round_up(u64::MAX, GI), u64::MAX);
    }

    proptest! {
        #[test]
        fn format_round_trips(x in any::<u64>()) {
            prop_assert_eq!(parse(&format(x)), Ok(x));
        }
    }
}
