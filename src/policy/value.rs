//! Parsing one value's text. Every error message quotes the text and says what to write instead;
//! the caller adds the field name. YAML and annotation values go through the same functions.

use super::{
    Enforcement, LogicalVolume, MinAvailable, Mode, NodeExpansion, OfflineExpansion, PoolReserve,
    ResizeThrough, Step,
};
use crate::quantity::{self, QuantityError};

pub fn boolean(text: &str) -> Result<bool, String> {
    match text.trim() {
        "true" | "True" | "TRUE" => Ok(true),
        "false" | "False" | "FALSE" => Ok(false),
        other => Err(format!("'{other}' is not a boolean; write true or false")),
    }
}

pub fn mode(text: &str) -> Result<Mode, String> {
    match text.trim() {
        "threshold" => Ok(Mode::Threshold),
        "convergent" => Ok(Mode::Convergent),
        other => Err(format!(
            "'{other}' is not a mode; write threshold or convergent"
        )),
    }
}

pub fn logical_volume(text: &str) -> Result<LogicalVolume, String> {
    match text.trim() {
        "auto" => Ok(LogicalVolume::Auto),
        "on" => Ok(LogicalVolume::On),
        "off" => Ok(LogicalVolume::Off),
        other => Err(format!(
            "'{other}' is not a logicalVolume setting; write auto, on or off"
        )),
    }
}

pub fn offline_expansion(text: &str) -> Result<OfflineExpansion, String> {
    match text.trim() {
        "off" => Ok(OfflineExpansion::Off),
        "evict" => Ok(OfflineExpansion::Evict),
        other => Err(format!(
            "'{other}' is not an offlineExpansion setting; write off or evict"
        )),
    }
}

pub fn node_expansion(text: &str) -> Result<NodeExpansion, String> {
    match text.trim() {
        "online" => Ok(NodeExpansion::Online),
        "offline" => Ok(NodeExpansion::Offline),
        other => Err(format!(
            "'{other}' is not a nodeExpansion setting; write online or offline"
        )),
    }
}

pub fn enforcement(text: &str) -> Result<Enforcement, String> {
    match text.trim() {
        "act" => Ok(Enforcement::Act),
        "recommend" => Ok(Enforcement::Recommend),
        "approve" => Ok(Enforcement::Approve),
        other => Err(format!(
            "'{other}' is not an enforcement setting; write act, recommend or approve"
        )),
    }
}

pub fn resize_through(text: &str) -> Result<ResizeThrough, String> {
    match text.trim() {
        "claim" => Ok(ResizeThrough::Claim),
        "owner" => Ok(ResizeThrough::Owner),
        other => Err(format!(
            "'{other}' is not a resizeThrough setting; write claim or owner"
        )),
    }
}

/// A whole number in `min..=max`. `what` completes "write ..." (e.g. "a percent from 1 to 99").
pub fn integer(text: &str, min: u64, max: u64, what: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits = t.strip_prefix('+').unwrap_or(t);
    if let Some(n) = digits.strip_suffix('%') {
        return Err(format!(
            "'{t}' has a % sign; write {what} as a plain number, e.g. {}",
            n.trim()
        ));
    }
    if t.starts_with('-') && t[1..].chars().all(|c| c.is_ascii_digit()) && t.len() > 1 {
        return Err(format!("'{t}' is negative; write {what}"));
    }
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!("'{t}' is not a whole number; write {what}"));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{t}' is too large; write {what}"))?;
    if n < min || n > max {
        return Err(format!("{n} is out of range; write {what}"));
    }
    Ok(n)
}

/// A size. A percent is refused: only `step` may be a percent.
pub fn size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.ends_with('%') {
        return Err(format!(
            "'{t}' is a percent, but this key takes a size; write e.g. 2Gi"
        ));
    }
    quantity::parse(t).map_err(|e| quantity_message(&e))
}

/// `minAvailable`: a size, or a percent of the filesystem's size above 0 % and below 100 %
/// (decimals allowed, as pvc-autoresizer's `12.5%`).
pub fn min_available(text: &str) -> Result<MinAvailable, String> {
    let t = text.trim();
    let Some(number) = t.strip_suffix('%') else {
        return size(t).map(MinAvailable::Bytes);
    };
    let p: f64 = number
        .trim()
        .parse()
        .ok()
        .filter(|p: &f64| p.is_finite())
        .ok_or_else(|| format!("'{t}' is not a percent; write e.g. 10% or a size like 5Gi"))?;
    if p <= 0.0 || p >= 100.0 {
        return Err(format!(
            "'{t}' is out of range; write a percent above 0% and below 100% of the volume, or a size like 5Gi (0 turns the check off)"
        ));
    }
    Ok(MinAvailable::Percent(p))
}

/// `poolReserve`: a size, or a percent of the pool's free space (above 0, below 100).
pub fn pool_reserve(text: &str) -> Result<PoolReserve, String> {
    let t = text.trim();
    if t.strip_suffix('%').is_none() {
        return size(t).map(PoolReserve::Bytes);
    }
    match min_available(t) {
        Ok(MinAvailable::Percent(p)) => Ok(PoolReserve::Percent(p)),
        _ => Err(format!(
            "'{t}' is not a percent above 0% and below 100% of the pool's free space; write e.g. 10% or a size like 5Gi (0 keeps nothing aside)"
        )),
    }
}

fn quantity_message(e: &QuantityError) -> String {
    match e {
        QuantityError::Suffix(input, suffix)
            if suffix.len() == 2 && suffix.ends_with(['B', 'b']) =>
        {
            let number = input.trim().trim_end_matches(suffix.as_str());
            let unit = &suffix[..1].to_uppercase();
            let unit = if unit == "K" { "k" } else { unit };
            format!(
                "'{}' is not a Kubernetes quantity; write {number}{unit}i (binary, {unit}iB) or {number}{unit} (decimal)",
                input.trim()
            )
        }
        QuantityError::Empty => "the value is empty; write a size like 10Gi".to_string(),
        other => format!("{other}; write a size like 10Gi"),
    }
}

/// How a step was written, before range checks that need the rest of the policy.
pub fn step(text: &str) -> Result<Step, String> {
    let t = text.trim();
    if let Some(p) = t.strip_suffix('%') {
        let p = p.trim();
        if p.is_empty() || !p.chars().all(|c| c.is_ascii_digit()) {
            return Err(format!("'{t}' is not a whole percent; write e.g. 20%"));
        }
        let n: u32 = p
            .parse()
            .map_err(|_| format!("'{t}' is too large; write a percent from 1% to 1000%"))?;
        return match n {
            0 => Err(format!(
                "'{t}' would never grow the volume; write a step like 20% or 10Gi"
            )),
            1..=1000 => Ok(Step::Percent(n)),
            _ => Err(format!(
                "{n}% is out of range; write a percent from 1% to 1000%"
            )),
        };
    }
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit()) {
        if t.chars().all(|c| c == '0') {
            return Err(format!(
                "'{t}' would never grow the volume; write a step like 20% or 10Gi"
            ));
        }
        return Err(format!("'{t}' has no unit; use '{t}%' or '{t}Gi'"));
    }
    match size(t)? {
        0 => Err(format!(
            "'{t}' would never grow the volume; write a step like 20% or 10Gi"
        )),
        b => Ok(Step::Bytes(b)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::GI;

    #[test]
    fn parses_values() {
        assert_eq!(boolean("true"), Ok(true));
        assert_eq!(boolean("False"), Ok(false));
        assert!(boolean("yes").unwrap_err().contains("write true or false"));
        assert_eq!(mode("convergent"), Ok(Mode::Convergent));
        assert!(mode("thresold").unwrap_err().contains("'thresold'"));
        assert_eq!(integer("80", 1, 99, "x"), Ok(80));
        assert!(
            integer("80%", 1, 99, "x")
                .unwrap_err()
                .contains("plain number")
        );
        assert!(integer("-3", 0, 10, "x").unwrap_err().contains("negative"));
        assert!(
            integer("100", 1, 99, "x")
                .unwrap_err()
                .contains("out of range")
        );
        assert!(
            integer("8.5", 1, 99, "x")
                .unwrap_err()
                .contains("not a whole number")
        );
        assert_eq!(size("10Gi"), Ok(10 * GI));
        assert!(size("20%").unwrap_err().contains("percent"));
        let e = size("10GB").unwrap_err();
        assert!(
            e.contains("'10GB'") && e.contains("10Gi") && e.contains("10G "),
            "{e}"
        );
        assert!(size("-1Gi").unwrap_err().contains("negative"));
    }

    #[test]
    fn parses_steps() {
        assert_eq!(step("20%"), Ok(Step::Percent(20)));
        assert_eq!(step("10Gi"), Ok(Step::Bytes(10 * GI)));
        assert!(step("20").unwrap_err().contains("use '20%' or '20Gi'"));
        assert!(step("0").unwrap_err().contains("never grow"));
        assert!(step("0%").unwrap_err().contains("never grow"));
        assert!(step("0Gi").unwrap_err().contains("never grow"));
        assert!(step("1001%").unwrap_err().contains("1% to 1000%"));
        assert_eq!(step("1000%"), Ok(Step::Percent(1000)));
    }
}
