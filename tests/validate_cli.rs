//! `headroom validate` as a user runs it: the built binary on real files.

use std::path::{Path, PathBuf};
use std::process::Command;

struct Run {
    code: Option<i32>,
    lines: Vec<String>,
    stderr: String,
}

fn validate(files: &[&Path]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .arg("validate")
        .args(files)
        .output()
        .expect("run headroom");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    Run {
        code: out.status.code(),
        lines: String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect(),
        stderr,
    }
}

fn write(dir: &tempfile::TempDir, name: &str, text: &[u8]) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, text).expect("write");
    p
}

#[test]
fn clean_file_prints_ok_and_exits_0() {
    let dir = tempfile::tempdir().expect("tmp");
    let f = write(&dir, "p.yaml", b"enabled: true\nlimit: 100Gi\nstep: 10%\n");
    let r = validate(&[&f]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.lines, [format!("{}: ok", f.display())]);
}

#[test]
fn warnings_print_and_exit_0() {
    let dir = tempfile::tempdir().expect("tmp");
    let f = write(&dir, "w.yaml", b"limit: 100Gi\nstep: 150%\nrequest: 10Gi\n");
    let r = validate(&[&f]);
    assert_eq!(r.code, Some(0));
    let prefix = format!("{}: warning: ", f.display());
    assert_eq!(r.lines.len(), 2, "{:?}", r.lines);
    assert!(
        r.lines[0].starts_with(&format!("{prefix}step: 150%")),
        "{:?}",
        r.lines
    );
    assert!(
        r.lines[1].starts_with(&format!("{prefix}request: ")),
        "{:?}",
        r.lines
    );
}

#[test]
fn every_error_prints_one_line_and_exits_1() {
    let dir = tempfile::tempdir().expect("tmp");
    let f = write(&dir, "e.yaml", b"usageThreshold: 0\nstep: 20\nlimit: 10GB\nusageTreshhold: 3\nmaxActionsPerDay: 0\nenabled: true\n");
    let r = validate(&[&f]);
    assert_eq!(r.code, Some(1));
    let name = f.display().to_string();
    let fields: Vec<(&str, &str)> = r
        .lines
        .iter()
        .map(|l| {
            let rest = l
                .strip_prefix(&format!("{name}: "))
                .expect("line starts with the file");
            let (level, rest) = rest.split_once(": ").expect("level");
            (level, rest.split_once(": ").expect("field").0)
        })
        .collect();
    assert_eq!(
        fields,
        [
            ("error", "usageTreshhold"),
            ("error", "limit"),
            ("error", "usageThreshold"),
            ("error", "step"),
            ("warning", "maxActionsPerDay"),
        ]
    );
    assert!(r.lines[0].contains("did you mean usageThreshold?"));
    assert!(r.lines[1].contains("'10GB'"));
    assert!(r.lines[3].contains("use '20%' or '20Gi'"));
}

#[test]
fn unreadable_and_broken_files_are_error_lines() {
    let dir = tempfile::tempdir().expect("tmp");
    let missing = dir.path().join("missing.yaml");
    let binary = write(&dir, "bin.yaml", &[0xff, 0xfe, 0x00, 0x41]);
    let syntax = write(&dir, "syntax.yaml", b"limit: [100Gi\n");
    let good = write(&dir, "good.yaml", b"limit: 1Ti\n");
    let r = validate(&[&missing, dir.path(), &binary, &syntax, &good]);
    assert_eq!(r.code, Some(1));
    assert_eq!(r.lines.len(), 5, "{:?}", r.lines);
    assert!(r.lines[0].starts_with(&format!(
        "{}: error: (file): cannot read",
        missing.display()
    )));
    assert!(r.lines[1].starts_with(&format!(
        "{}: error: (file): cannot read",
        dir.path().display()
    )));
    assert!(r.lines[2].starts_with(&format!("{}: error: (file): cannot read", binary.display())));
    assert!(
        r.lines[3].starts_with(&format!("{}: error: (yaml): YAML syntax", syntax.display())),
        "{}",
        r.lines[3]
    );
    assert_eq!(r.lines[4], format!("{}: ok", good.display()));
}

#[test]
fn shipped_examples_validate_clean() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let files = [root.join("policy.yaml"), root.join("convergent.yaml")];
    let r = validate(&[&files[0], &files[1]]);
    assert_eq!(r.code, Some(0));
    assert_eq!(
        r.lines,
        files
            .iter()
            .map(|f| format!("{}: ok", f.display()))
            .collect::<Vec<_>>()
    );
}

/// Issue 24: the RFC's minimal convergent policy is valid, and the one thing said about it is the
/// default window it grows in (which a policy written before, for "emergencies only", would miss).
#[test]
fn the_minimal_convergent_example_names_its_default_window() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/convergent-minimal.yaml");
    let r = validate(&[&file]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.lines.len(), 1, "{:?}", r.lines);
    assert!(
        r.lines[0].starts_with(&format!("{}: warning: maintenanceWindow: ", file.display()))
            && r.lines[0].contains("daily at 03:00 UTC for 2h"),
        "{}",
        r.lines[0]
    );
}

#[test]
fn trigger_keys_are_checked_like_the_others() {
    let dir = tempfile::tempdir().expect("tmp");
    let ok = write(
        &dir,
        "ok.yaml",
        b"limit: 100Gi\ntrigger:\n  predictive: true\n  resizeLeadTime: 90s\n  margin: 15s\n",
    );
    let r = validate(&[&ok]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.lines, [format!("{}: ok", ok.display())]);

    let bad = write(
        &dir,
        "bad.yaml",
        b"limit: 100Gi\ntrigger:\n  predictive: yes please\n  resizeLeadTime: soon\n  margin: 48h\n  resizeLeadTme: 1m\n",
    );
    let r = validate(&[&bad]);
    assert_eq!(r.code, Some(1));
    let text = r.lines.join("\n");
    for want in [
        "error: trigger.resizeLeadTme: unknown key; did you mean trigger.resizeLeadTime?",
        "error: trigger.predictive: 'yes please' is not a boolean",
        "error: trigger.resizeLeadTime: 'soon' is not a duration; write a duration from 1s to 24h, e.g. 2m",
        "error: trigger.margin: 48h is out of range",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    assert_eq!(r.lines.len(), 4, "{text}");

    // Lead time with the trigger turned off (it is on by default), and the trigger in
    // convergent mode, are warnings.
    let off = write(
        &dir,
        "off.yaml",
        b"limit: 100Gi\nmode: convergent\nmaintenanceWindow:\n  schedule: '0 3 * * 0'\ntrigger:\n  predictive: false\n  resizeLeadTime: 1m\n",
    );
    let r = validate(&[&off]);
    assert_eq!(r.code, Some(0), "{:?}", r.lines);
    let text = r.lines.join("\n");
    assert!(
        text.contains(
            "warning: trigger.resizeLeadTime: has effect only with trigger.predictive: true"
        ),
        "{text}"
    );
    assert!(
        text.contains("warning: trigger.resizeLeadTime: is used only in threshold mode"),
        "{text}"
    );
}

/// Issue 24: with the claim's size, validate says when a floor can never be met at it (and what
/// headroom does instead); an invalid minAvailable is a warning with the fallback, exit 0.
/// Issue 36: a policy file could be a claim's or inherited, so both are said: written on the
/// claim, how many steps it grows by; inherited, that it is not applied.
#[test]
fn a_floor_the_claim_cannot_meet_and_an_invalid_floor_are_warnings() {
    let dir = tempfile::tempdir().expect("tmp");
    let f = write(
        &dir,
        "p.yaml",
        b"enabled: true\nlimit: 100Gi\nusageThreshold: 80\nminAvailable: 5Gi\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(["validate", "--size", "1Gi"])
        .arg(&f)
        .output()
        .expect("run headroom");
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("warning: minAvailable:"))
        .unwrap_or_else(|| panic!("no minAvailable warning: {text}"));
    assert!(
        line.contains("Written on the claim itself it is applied as written")
            && line.contains("5 step(s) (1Gi -> 2Gi -> 3Gi -> 4Gi -> 5Gi -> 6Gi)")
            && line.contains("Inherited from a StorageClass or the ConfigMap it is not applied")
            && line.contains("usageThreshold 80"),
        "{line}"
    );
    // Without a size nothing is known about the claim: ok.
    let r = validate(&[&f]);
    assert_eq!(r.lines, [format!("{}: ok", f.display())]);
    // A bad --size is refused.
    let out = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(["validate", "--size", "lots"])
        .arg(&f)
        .output()
        .expect("run headroom");
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--size"));

    let f = write(
        &dir,
        "q.yaml",
        b"enabled: true\nlimit: 100Gi\nminAvailable: 5GB\n",
    );
    let r = validate(&[&f]);
    assert_eq!(r.code, Some(0), "{:?}", r.lines);
    assert_eq!(r.lines.len(), 1, "{:?}", r.lines);
    assert!(
        r.lines[0].contains("warning: minAvailable: '5GB'")
            && r.lines[0].contains("usageThreshold 80"),
        "{:?}",
        r.lines
    );
}

/// Issue 42, as a new user wrote it: a small claim's `maxStep: 16Mi` beside the default
/// `minStep` is fine; a written `minStep` over it names maxStep as the key to raise.
#[test]
fn step_bounds_say_what_to_change() {
    let dir = tempfile::tempdir().expect("tmp");
    let small = write(
        &dir,
        "small.yaml",
        b"limit: 1Gi\nstep: 8Mi\nmaxStep: 16Mi\n",
    );
    let r = validate(&[&small]);
    assert_eq!(r.code, Some(0), "{:?}", r.lines);
    assert_eq!(r.lines, [format!("{}: ok", small.display())]);
    let both = write(
        &dir,
        "both.yaml",
        b"limit: 1Gi\nminStep: 1Gi\nmaxStep: 16Mi\n",
    );
    let r = validate(&[&both]);
    assert_eq!(r.code, Some(1));
    assert_eq!(
        r.lines,
        [format!(
            "{}: error: minStep: minStep (1Gi) is larger than maxStep (16Mi); make minStep at most 16Mi or raise maxStep to at least 1Gi",
            both.display()
        )]
    );
}

/// Issue 42: the ConfigMap as it is deployed (`kind: ConfigMap`, every data key), beside a bare
/// policy file; a finding names the data key and section before its field.
#[test]
fn a_configmap_manifest_is_read_key_by_key() {
    let dir = tempfile::tempdir().expect("tmp");
    let cm = write(
        &dir,
        "cm.yaml",
        b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: headroom\n  namespace: headroom\ndata:\n  policy.yaml: |\n    limit: 500Gi\n  storageClasses.yaml: |\n    fast:\n      usageThreshold: 150\n  reclaimSpace.yaml: |\n    timeout: soon\n",
    );
    let policy = write(&dir, "p.yaml", b"limit: 500Gi\nusageThreshold: 150\n");
    let r = validate(&[&cm, &policy]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    let (c, p) = (cm.display(), policy.display());
    assert_eq!(r.lines.len(), 3, "{:?}", r.lines);
    assert!(
        r.lines[0].starts_with(&format!("{c}: error: reclaimSpace.yaml timeout: 'soon'")),
        "{:?}",
        r.lines
    );
    assert!(
        r.lines[1].starts_with(&format!(
            "{c}: error: storageClasses.yaml[fast]: usageThreshold: "
        )),
        "{:?}",
        r.lines
    );
    assert!(
        r.lines[2].starts_with(&format!("{p}: error: usageThreshold: ")),
        "{:?}",
        r.lines
    );
    // The shipped ConfigMap manifest reads clean.
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("daemonset/configmap.yaml");
    let r = validate(&[&shipped]);
    assert_eq!(r.lines, [format!("{}: ok", shipped.display())]);
}

/// Issue 49: the ConfigMap's selector sections kept in a file of their own (a YAML list, as in
/// Git beside policy.yaml) are checked as the ConfigMap's key is; a file of no form is told
/// every form validate reads.
#[test]
fn a_file_of_selector_sections_is_checked_as_the_configmaps_key() {
    let dir = tempfile::tempdir().expect("tmp");
    let good = write(
        &dir,
        "selectors.yaml",
        b"- namespaces: [db]\n  matchLabels: {cnpg.io/cluster: pg-main}\n  policy: {enabled: true, limit: 2Ti}\n- matchExpressions: [{key: team, operator: In, values: [a]}]\n  policy: {limit: 500Gi}\n",
    );
    let bad = write(
        &dir,
        "prod-selectors.yaml",
        b"- matchLabels: {app: a}\n  policy: {limit: 1Gi}\n- matchLabel: {app: b}\n  policy: {limit: 1Gi}\n",
    );
    let wrong = write(&dir, "notes.yaml", b"remember to grow pg-main\n");
    let r = validate(&[&good, &bad, &wrong]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(r.lines.len(), 3, "{:?}", r.lines);
    assert_eq!(r.lines[0], format!("{}: ok", good.display()));
    assert_eq!(
        r.lines[1],
        format!(
            "{}: error: selectors.yaml[1].matchLabel: selector sections file prod-selectors.yaml, section 1, matchLabel: unknown key; a section has namespaces, matchLabels, matchExpressions and policy",
            bad.display()
        )
    );
    let line = &r.lines[2];
    assert!(
        line.starts_with(&format!("{}: error: (document): ", wrong.display())),
        "{line}"
    );
    for form in [
        "a policy file",
        "a file of selector sections (a list",
        "the central ConfigMap's manifest (kind: ConfigMap)",
        "a Namespace's",
    ] {
        assert!(line.contains(form), "{form}: {line}");
    }
}
