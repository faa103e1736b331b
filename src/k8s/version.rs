//! The API server's version, as `GET /version` reports it, judged against the releases headroom
//! is tested on (`scripts/kube-versions.sh` pins them; `tests/docs.rs` holds these constants to
//! it). Pure: the agent reads the version once at start and says what this judges.
//!
//! The fields are the server's to fill, and distributions fill them their own way (GKE's minor
//! is `"34+"`, EKS's gitVersion `v1.34.4-eks-1a2b3c`), so nothing here trusts their shape: an
//! unreadable version is `Unknown`, never an error that stops the agent.

use std::fmt;

/// The oldest minor release of Kubernetes 1.x the tests run on (KEP-1790 and
/// VolumeAttributesClass are GA from here).
pub const OLDEST_TESTED: u32 = 34;
/// The newest minor release the tests run on.
pub const NEWEST_TESTED: u32 = 37;

/// How far a gitVersion is kept: enough for any real one, bounded for a metric label.
const MAX_SHOWN: usize = 64;

/// Where the server's release stands against the tested range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    Tested,
    /// Older than [`OLDEST_TESTED`]: what headroom reads may be missing (KEP-1790 statuses,
    /// VolumeAttributesClass fields) or refused.
    Older,
    /// Newer than [`NEWEST_TESTED`]: expected to work, not yet shown to.
    Newer,
    /// No readable 1.x minor version.
    Unknown,
}

impl Support {
    pub fn as_str(self) -> &'static str {
        match self {
            Support::Tested => "tested",
            Support::Older => "older",
            Support::Newer => "newer",
            Support::Unknown => "unknown",
        }
    }
}

/// The API server's version as headroom shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerVersion {
    /// The reported gitVersion, limited to the characters a version has and to 64 of them.
    pub git_version: String,
    /// The 1.x minor release, when one could be read.
    pub minor: Option<u32>,
    pub support: Support,
}

/// Judges what `GET /version` answered (`major`, `minor`, `gitVersion`).
pub fn judge(major: &str, minor: &str, git_version: &str) -> ServerVersion {
    let minor = from_fields(major, minor).or_else(|| from_git_version(git_version));
    let support = match minor {
        None => Support::Unknown,
        Some(m) if m < OLDEST_TESTED => Support::Older,
        Some(m) if m > NEWEST_TESTED => Support::Newer,
        Some(_) => Support::Tested,
    };
    ServerVersion {
        git_version: shown(git_version),
        minor,
        support,
    }
}

/// The minor from `major: "1"`, `minor: "34"` (or `"34+"`, as GKE writes it).
fn from_fields(major: &str, minor: &str) -> Option<u32> {
    (major.trim() == "1").then_some(())?;
    leading_number(minor.trim())
}

/// The minor from a gitVersion `v1.34.4[-anything]`.
fn from_git_version(v: &str) -> Option<u32> {
    let rest = v.trim().strip_prefix("v1.")?;
    leading_number(rest)
}

/// A number of at most three digits at the start of `s`, followed by anything but a digit.
fn leading_number(s: &str) -> Option<u32> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 3 {
        return None;
    }
    s[..digits].parse().ok()
}

fn shown(v: &str) -> String {
    let kept: String = v
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+' | '_'))
        .take(MAX_SHOWN)
        .collect();
    if kept.is_empty() {
        "unknown".to_string()
    } else {
        kept
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let range = format!("1.{OLDEST_TESTED} to 1.{NEWEST_TESTED}");
        match self.support {
            Support::Tested => write!(
                f,
                "{} (tested: headroom is tested on {range})",
                self.git_version
            ),
            Support::Older => write!(
                f,
                "{}, older than the releases headroom is tested on ({range}): claims' resize statuses and VolumeAttributesClass fields may be missing",
                self.git_version
            ),
            Support::Newer => write!(
                f,
                "{}, newer than the releases headroom is tested on ({range})",
                self.git_version
            ),
            Support::Unknown => write!(
                f,
                "{}, not a Kubernetes 1.x version headroom can read (it is tested on {range})",
                self.git_version
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_are_judged_against_the_tested_range() {
        let s = |major, minor, git| judge(major, minor, git).support;
        assert_eq!(s("1", "34", "v1.34.4"), Support::Tested);
        assert_eq!(s("1", "37", "v1.37.2"), Support::Tested);
        assert_eq!(s("1", "31", "v1.31.9"), Support::Older);
        assert_eq!(s("1", "20", "v1.20.2"), Support::Older);
        assert_eq!(s("1", "38", "v1.38.0-alpha.1"), Support::Newer);
    }

    #[test]
    fn distributions_fields_are_read_as_they_write_them() {
        let gke = judge("1", "34+", "v1.34.1-gke.1829001");
        assert_eq!((gke.minor, gke.support), (Some(34), Support::Tested));
        assert_eq!(gke.git_version, "v1.34.1-gke.1829001");
        // No minor field: the gitVersion says it.
        let bare = judge("", "", "v1.35.0-eks-3025e55");
        assert_eq!((bare.minor, bare.support), (Some(35), Support::Tested));
    }

    #[test]
    fn hostile_versions_are_unknown_and_shown_bounded() {
        for (major, minor, git) in [
            ("", "", ""),
            ("2", "0", "v2.0.0"),
            ("1", "99999999999999999999", "v1.99999999999999999999.0"),
            ("1", "-3", "v1.-3"),
            ("1", "x", "not a version"),
            ("１", "３４", "v１.３４"),
        ] {
            let v = judge(major, minor, git);
            assert_eq!(v.support, Support::Unknown, "{major:?} {minor:?} {git:?}");
            assert!(v.to_string().contains("not a Kubernetes 1.x version"));
        }
        let long = judge(
            "1",
            "34",
            &format!("v1.34.0-{}\"}}\n{}", "x".repeat(500), "\u{202e}"),
        );
        assert!(long.git_version.len() <= MAX_SHOWN);
        assert!(long.git_version.chars().all(|c| c.is_ascii_graphic()));
        assert_eq!(judge("1", "34", "\"\n").git_version, "unknown");
    }

    /// The releases scripts/test.sh runs the tests on are the range said here.
    #[test]
    fn the_range_is_the_one_the_tests_run_on() {
        let pinned = include_str!("../../scripts/kube-versions.sh");
        let minor = |key: &str| {
            let line = pinned
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .unwrap_or_else(|| panic!("no {key} in scripts/kube-versions.sh"));
            from_git_version(line).unwrap_or_else(|| panic!("{key}{line}"))
        };
        assert_eq!(minor("KUBE_OLDEST="), OLDEST_TESTED);
        assert_eq!(minor("KUBE_NEWEST="), NEWEST_TESTED);
    }

    #[test]
    fn each_judgement_says_the_range() {
        for v in [
            judge("1", "34", "v1.34.4"),
            judge("1", "30", "v1.30.0"),
            judge("1", "40", "v1.40.0"),
        ] {
            assert!(v.to_string().contains("1.34 to 1.37"), "{v}");
        }
    }
}
