//! The crate's layering, as `src/lib.rs` states it, checked against the `crate::` and `super::`
//! paths in `src/`: a module names only modules in lower layers, and no two files of one folder
//! name each other, directly or around a circle. Test code is left out (`*tests.rs` files and
//! `#[cfg(test)]` items): fixtures may reach upward.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// `src/`-relative path (with `/`) -> text, for every `.rs` file.
fn sources(dir: &Path, rel: &str, out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let rel = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        if path.is_dir() {
            sources(&path, &rel, out);
        } else if rel.ends_with(".rs") {
            out.insert(rel, std::fs::read_to_string(&path).expect("read source"));
        }
    }
}

/// The layers listed in lib.rs's doc, lowest first: lines `//! - `a`, `b`: why`.
fn layers(lib: &str) -> Vec<Vec<String>> {
    lib.lines()
        .filter_map(|l| l.strip_prefix("//! - "))
        .map(|l| {
            let names = l.split(':').next().unwrap_or("");
            names
                .split(',')
                .map(|n| n.trim().trim_matches('`').to_string())
                .collect()
        })
        .collect()
}

/// The module path a file defines: `a/b.rs` -> [a, b], `a/mod.rs` -> [a], `a.rs` -> [a].
fn module_of(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

fn is_test_file(rel: &str) -> bool {
    rel.trim_end_matches(".rs").ends_with("tests")
}

/// The file without comments and `#[cfg(test)]` items. rustfmt closes a block at the
/// indentation that opened it, which is how the end of a skipped item is found.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]" {
            let Some(item) = lines.by_ref().find(|l| !l.trim_start().starts_with("#[")) else {
                break;
            };
            if item.trim_end().ends_with('{') {
                let indent = &item[..item.len() - item.trim_start().len()];
                let close = format!("{indent}}}");
                for l in lines.by_ref() {
                    if l.trim_end() == close {
                        break;
                    }
                }
            }
            continue;
        }
        let line = line.find("//").map_or(line, |i| &line[..i]);
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn ident(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (&s[..end], &s[end..])
}

/// Reads a path or use tree starting after `prefix::`, pushing every path it names (only the
/// first two segments matter here).
fn tree(s: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let s = s.trim_start();
    if let Some(group) = s.strip_prefix('{') {
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    tree(&group[start..i], prefix.clone(), out);
                    return;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    tree(&group[start..i], prefix.clone(), out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        return;
    }
    let (name, rest) = ident(s);
    if name.is_empty() || name == "self" {
        out.push(prefix);
        return;
    }
    let mut path = prefix;
    path.push(name.to_string());
    match rest.trim_start().strip_prefix("::") {
        Some(more) if path.len() < 3 => tree(more, path, out),
        _ => out.push(path),
    }
}

/// Every absolute path (from the crate root) the file's code names through `crate::` or
/// `super::`.
fn paths(rel: &str, text: &str) -> Vec<Vec<String>> {
    let here = module_of(rel);
    let code = code(text);
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let before = code[..i].chars().last();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        tree(&code[i + "crate::".len()..], Vec::new(), &mut out);
    }
    for (i, _) in code.match_indices("super::") {
        if code[..i].ends_with("super::") {
            continue; // counted from the first `super::` of the run
        }
        let before = code[..i].chars().last();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let mut rest = &code[i..];
        let mut base = here.clone();
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        tree(rest, base, &mut out);
    }
    out
}

/// What breaks the layering, one line per import (empty when none does).
fn violations(files: &BTreeMap<String, String>, layers: &[Vec<String>]) -> Vec<String> {
    let rank: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, l)| l.iter().map(move |m| (m.as_str(), i)))
        .collect();
    let mut bad = Vec::new();
    let mut siblings: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (rel, text) in files {
        if rel == "lib.rs" || rel == "main.rs" || is_test_file(rel) {
            continue;
        }
        let here = module_of(rel);
        let top = here[0].as_str();
        let Some(&mine) = rank.get(top) else {
            bad.push(format!("{rel}: module `{top}` is in no layer of lib.rs"));
            continue;
        };
        for path in paths(rel, text) {
            let Some(other) = path.first() else { continue };
            if other == top {
                let folder_file = here.len() == 2 && path.len() >= 2 && path[1] != here[1];
                if folder_file && files.contains_key(&format!("{top}/{}.rs", path[1])) {
                    siblings
                        .entry(top.to_string())
                        .or_default()
                        .entry(here[1].clone())
                        .or_default()
                        .insert(path[1].clone());
                }
                continue;
            }
            match rank.get(other.as_str()) {
                Some(&theirs) if theirs < mine => {}
                Some(_) => bad.push(format!(
                    "{rel}: `{top}` imports `crate::{}` from its own layer or above",
                    path.join("::")
                )),
                None => {}
            }
        }
    }
    for (folder, graph) in &siblings {
        for cycle in cycles(graph) {
            bad.push(format!(
                "{folder}/: files import each other: {}",
                cycle.join(" -> ")
            ));
        }
    }
    bad
}

/// One circle through each file that is on one (as `a -> b -> a`).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    fn walk(
        graph: &BTreeMap<String, BTreeSet<String>>,
        node: &str,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        found: &mut Vec<Vec<String>>,
    ) {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_string());
            found.push(cycle);
            return;
        }
        if !done.insert(node.to_string()) {
            return;
        }
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            walk(graph, next, stack, done, found);
        }
        stack.pop();
    }
    let mut found = Vec::new();
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        walk(graph, node, &mut Vec::new(), &mut done, &mut found);
    }
    found
}

#[test]
fn every_module_imports_only_from_lower_layers() {
    let mut files = BTreeMap::new();
    sources(&Path::new(ROOT).join("src"), "", &mut files);
    let layers = layers(&files["lib.rs"]);
    assert!(layers.len() >= 5, "lib.rs lists the layers: {layers:?}");
    let declared: BTreeSet<String> = files
        .keys()
        .filter(|rel| *rel != "lib.rs" && *rel != "main.rs")
        .map(|rel| module_of(rel)[0].clone())
        .collect();
    let listed: BTreeSet<String> = layers.iter().flatten().cloned().collect();
    assert_eq!(
        declared, listed,
        "every module of src/ in exactly the layers of lib.rs"
    );
    let bad = violations(&files, &layers);
    assert!(bad.is_empty(), "layering broken:\n{}", bad.join("\n"));
}

/// The checker itself catches what it is for, on small sources in the crate's shapes.
#[test]
fn the_checker_sees_upward_imports_and_circles() {
    let layers = layers("//! - `low`: a\n//! - `mid`, `side`: b\n//! - `high`: c\n");
    assert_eq!(layers.len(), 3);
    let check = |files: &[(&str, &str)]| {
        let files: BTreeMap<String, String> = files
            .iter()
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .collect();
        violations(&files, &layers)
    };
    let ok = "use crate::low::X;\nuse crate::{\n    low::{self, Y},\n};\n";
    assert!(check(&[("mid/a.rs", ok), ("high.rs", "use crate::mid::a::X;\n")]).is_empty());
    assert_eq!(
        check(&[("low.rs", "fn f() { crate::high::go() }\n")]).len(),
        1
    );
    assert_eq!(check(&[("mid/mod.rs", "use super::high;\n")]).len(), 1);
    assert_eq!(
        check(&[("mid/a.rs", "use super::super::side::X;\n")]).len(),
        1
    );
    assert_eq!(
        check(&[("mid/a.rs", "use crate::{low, high::X};\n")]).len(),
        1
    );
    assert_eq!(check(&[("nowhere.rs", "")]).len(), 1);
    // Comments and test code may name anything.
    let test_code = "// crate::high\n#[cfg(test)]\nmod tests {\n    use crate::high;\n}\n";
    assert!(
        check(&[
            ("low.rs", test_code),
            ("low/x_tests.rs", "use crate::high;")
        ])
        .is_empty()
    );
    let circle = check(&[
        ("mid/mod.rs", "mod a;\nmod b;\nmod c;\n"),
        ("mid/a.rs", "use super::b::X;\n"),
        ("mid/b.rs", "use crate::mid::{c, low};\n"),
        ("mid/c.rs", "use super::{a::Y, Z};\n"),
    ]);
    assert_eq!(circle, ["mid/: files import each other: a -> b -> c -> a"]);
}

/// The pure core: modules that must do no I/O and read no clock (time is an argument).
const CORE: &[&str] = &["policy", "decide", "resolve", "simulate", "quantity"];

/// What a core module may not name: the API client, the runtime, the filesystem, the network,
/// a clock.
const IMPURE: &[&str] = &[
    "kube::",
    "tokio::",
    "std::fs",
    "std::net",
    "Timestamp::now",
    "SystemTime::now",
    "Instant::now",
];

/// Lines of the non-test code of `files` under `CORE` that name something impure.
fn impurities(files: &BTreeMap<String, String>) -> Vec<String> {
    let mut bad = Vec::new();
    for (rel, text) in files {
        let top = module_of(rel)[0].clone();
        if !CORE.contains(&top.as_str()) || is_test_file(rel) {
            continue;
        }
        for line in code(text).lines() {
            if let Some(word) = IMPURE.iter().find(|w| line.contains(*w)) {
                bad.push(format!("{rel}: names {word}: {}", line.trim()));
            }
        }
    }
    bad
}

#[test]
fn the_core_does_no_io_and_reads_no_clock() {
    let mut files = BTreeMap::new();
    sources(&Path::new(ROOT).join("src"), "", &mut files);
    let bad = impurities(&files);
    assert!(bad.is_empty(), "the core is not pure:\n{}", bad.join("\n"));
    // The check itself sees what it is for.
    let probe: BTreeMap<String, String> = [
        (
            "decide/x.rs",
            "fn f() { let t = jiff::Timestamp::now(); }\n",
        ),
        (
            "policy/y.rs",
            "use std::fs::read;\n#[cfg(test)]\nmod tests {\n    use tokio::x;\n}\n",
        ),
        ("agent/z.rs", "use tokio::net;\n"),
    ]
    .iter()
    .map(|(p, t)| (p.to_string(), t.to_string()))
    .collect();
    assert_eq!(impurities(&probe).len(), 2, "{:?}", impurities(&probe));
}

/// Words a layer must not look for in another layer's text: a decision's notes, a failure's
/// detail, a finding's message are for people; what code acts on is a type.
const READ_AS_TEXT: &[&str] = &["n", "note", "notes", "detail", "message", "reason", "msg"];

fn text_matching(files: &BTreeMap<String, String>) -> Vec<String> {
    let mut bad = Vec::new();
    for (rel, text) in files {
        if is_test_file(rel) {
            continue;
        }
        let code = code(text);
        for call in [".contains(\"", ".starts_with(\"", ".ends_with(\""] {
            for (i, _) in code.match_indices(call) {
                let before = &code[..i];
                let start = before
                    .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .map_or(0, |s| s + 1);
                let receiver = &before[start..];
                if READ_AS_TEXT.contains(&receiver) {
                    let line = code[..i].lines().count();
                    bad.push(format!("{rel}:{line}: {receiver}{call}…"));
                }
            }
        }
    }
    bad
}

#[test]
fn no_layer_matches_another_layers_text() {
    let mut files = BTreeMap::new();
    sources(&Path::new(ROOT).join("src"), "", &mut files);
    let bad = text_matching(&files);
    assert!(
        bad.is_empty(),
        "match a type, not text:\n{}",
        bad.join("\n")
    );
    let probe: BTreeMap<String, String> = [(
        "agent/act.rs".to_string(),
        "fn f(d: &str) -> bool { detail.contains(\"Infeasible\") || n.contains(\"x\") }\n"
            .to_string(),
    )]
    .into();
    assert_eq!(text_matching(&probe).len(), 2);
}
