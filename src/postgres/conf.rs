//! PostgreSQL's configuration files (`postgresql.conf`, what it includes, then
//! `postgresql.auto.conf`), parsed as the server parses them: no I/O here, the caller's
//! [`Files`] reads.
//!
//! Syntax (guc-file.l): `name = value` or `name value`, `#` to the end of the line, values bare
//! or in single quotes (`''` and `\'` escape a quote), names case-insensitive, the last setting
//! wins. `include`, `include_if_exists` and `include_dir` are followed relative to the including
//! file, at most [`MAX_DEPTH`] deep; a path that leaves the data directory (absolute, or through
//! `..`) is not followed: nothing is read from outside a volume. A file that could not be read
//! makes every setting made before it uncertain (it may have changed them), which
//! [`Settings::get`] reports.

use std::collections::BTreeMap;

/// Nesting of includes Postgres allows (`CONF_FILE_MAX_DEPTH`).
pub const MAX_DEPTH: usize = 10;
/// Files read at most for one data directory.
pub const MAX_FILES: usize = 64;

/// Reads the data directory's files for the parser; paths are relative to the data directory,
/// `/`-separated, already checked to stay inside it.
pub trait Files {
    fn read(&mut self, path: &str) -> Result<Vec<u8>, FileError>;
    /// The names in a directory.
    fn list(&mut self, dir: &str) -> Result<Vec<String>, FileError>;
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    #[error("no such file")]
    Missing,
    #[error("{0}")]
    Unreadable(String),
}

/// One setting's value and the file that set it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub value: String,
    pub file: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup<'a> {
    Set(&'a Setting),
    /// Not set in any file that was read, and no file went unread: the server's default holds.
    Default,
    /// A file that was not read may set it.
    Unknown,
}

#[derive(Debug, Default, Clone)]
pub struct Settings {
    values: BTreeMap<String, (Setting, bool)>,
    /// Files that could not be read, each with the reason.
    pub unread: Vec<String>,
    /// Every file read, in order.
    pub read: Vec<String>,
}

impl Settings {
    pub fn get(&self, name: &str) -> Lookup<'_> {
        match self.values.get(&name.to_ascii_lowercase()) {
            Some((s, true)) => Lookup::Set(s),
            Some((_, false)) => Lookup::Unknown,
            None if self.unread.is_empty() => Lookup::Default,
            None => Lookup::Unknown,
        }
    }

    fn set(&mut self, name: &str, value: String, file: &str) {
        let setting = Setting {
            value,
            file: file.to_string(),
        };
        self.values
            .insert(name.to_ascii_lowercase(), (setting, true));
    }

    /// A source that could not be read and may set anything: every value so far is uncertain.
    pub fn lost(&mut self, what: String) {
        for (_, certain) in self.values.values_mut() {
            *certain = false;
        }
        self.unread.push(what);
    }
}

/// Reads `postgresql.conf` and what it includes, then `postgresql.auto.conf`, as the server does
/// at start.
pub fn load(files: &mut impl Files) -> Settings {
    let mut s = Settings::default();
    read_file(files, "postgresql.conf", 0, true, &mut s);
    read_file(files, "postgresql.auto.conf", 0, false, &mut s);
    s
}

fn read_file(files: &mut impl Files, path: &str, depth: usize, required: bool, s: &mut Settings) {
    if depth > MAX_DEPTH {
        s.lost(format!("{path}: includes nested deeper than {MAX_DEPTH}"));
        return;
    }
    if s.read.len() >= MAX_FILES {
        s.lost(format!("{path}: more than {MAX_FILES} configuration files"));
        return;
    }
    let bytes = match files.read(path) {
        Ok(b) => b,
        Err(FileError::Missing) if !required => return,
        Err(e) => return s.lost(format!("{path}: {e}")),
    };
    s.read.push(path.to_string());
    let text = String::from_utf8_lossy(&bytes);
    for line in text.lines() {
        let Some((name, value)) = parse_line(line) else {
            continue;
        };
        match name.to_ascii_lowercase().as_str() {
            "include" => include(files, path, &value, depth, true, s),
            "include_if_exists" => include(files, path, &value, depth, false, s),
            "include_dir" => include_dir(files, path, &value, depth, s),
            _ => s.set(&name, value, path),
        }
    }
}

fn include(
    files: &mut impl Files,
    from: &str,
    target: &str,
    depth: usize,
    required: bool,
    s: &mut Settings,
) {
    match resolve(from, target) {
        Some(p) => read_file(files, &p, depth + 1, required, s),
        None => s.lost(format!(
            "{target} (included by {from}): outside the data directory, not read"
        )),
    }
}

fn include_dir(files: &mut impl Files, from: &str, target: &str, depth: usize, s: &mut Settings) {
    let Some(dir) = resolve(from, target) else {
        return s.lost(format!(
            "{target} (included by {from}): outside the data directory, not read"
        ));
    };
    let mut names = match files.list(&dir) {
        Ok(n) => n,
        Err(e) => return s.lost(format!("{dir}: {e}")),
    };
    // As the server does: `.conf` files not starting with a dot, in name order.
    names.retain(|file| file.ends_with(".conf") && !file.starts_with('.'));
    names.sort();
    for n in names {
        read_file(files, &format!("{dir}/{n}"), depth + 1, true, s);
    }
}

/// The file that records the server's command line at its last start: `-c name=value` and
/// `--name=value` there override every configuration file.
pub const COMMAND_LINE: &str = "postmaster.opts";

/// Applies the settings of `postmaster.opts` (`/path/postgres "-D" "/data" "-c" "name=value"`,
/// each argument in double quotes) over those of the files, as the server ranks them.
pub fn apply_command_line(s: &mut Settings, opts: &str) {
    let args: Vec<&str> = opts.split('"').skip(1).step_by(2).collect();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let setting = match arg {
            "-c" => args.next(),
            a => a.strip_prefix("--"),
        };
        let Some((name, value)) = setting.and_then(|s| s.split_once('=')) else {
            continue;
        };
        // `--data-directory` style names use dashes where the setting has underscores.
        s.set(&name.replace('-', "_"), value.to_string(), COMMAND_LINE);
    }
}

/// `target` relative to the directory of `from`, both inside the data directory; `None` when
/// it is absolute or climbs out.
pub fn resolve(from: &str, target: &str) -> Option<String> {
    if target.starts_with('/') || target.is_empty() {
        return None;
    }
    let mut parts: Vec<&str> = from.split('/').collect();
    parts.pop();
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// `name [=] value [# comment]`; `None` for a blank, comment or malformed line (the server
/// would refuse to start on a malformed one, so it has no effect either way).
fn parse_line(line: &str) -> Option<(String, String)> {
    let line = line.trim_start();
    let name_len = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '$'))
        .unwrap_or(line.len());
    let name = &line[..name_len];
    if name.is_empty() || !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        return None;
    }
    let mut rest = line[name_len..].trim_start();
    if let Some(r) = rest.strip_prefix('=') {
        rest = r.trim_start();
    }
    let value = match rest.strip_prefix('\'') {
        Some(quoted) => unquote(quoted)?,
        None => {
            let end = rest
                .find(|c: char| c.is_whitespace() || c == '#')
                .unwrap_or(rest.len());
            if end == 0 {
                return None;
            }
            rest[..end].to_string()
        }
    };
    Some((name.to_string(), value))
}

/// The body of a single-quoted value (after the opening quote) up to its closing quote.
fn unquote(s: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' if chars.peek() == Some(&'\'') => {
                chars.next();
                out.push('\'');
            }
            '\'' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                'b' => out.push('\u{8}'),
                'f' => out.push('\u{c}'),
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

/// A time setting as the server reads it (`30s`, `5min`, `300`: seconds when no unit is given),
/// for `checkpoint_timeout`: `None` for what the server would refuse, and held to the range it
/// accepts (30 s to 1 day).
pub fn seconds(value: &str) -> Option<jiff::SignedDuration> {
    let v = value.trim();
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let n: f64 = v[..split].parse().ok()?;
    let unit = match v[split..].trim() {
        "us" => 1e-6,
        "ms" => 1e-3,
        "" | "s" => 1.0,
        "min" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => return None,
    };
    let secs = (n * unit).round();
    secs.is_finite()
        .then(|| jiff::SignedDuration::from_secs(secs.clamp(30.0, 86400.0) as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_settings_read_as_the_server_reads_them() {
        let s = |v| seconds(v).map(|d| d.as_secs());
        assert_eq!(s("30s"), Some(30));
        assert_eq!(s("5min"), Some(300));
        assert_eq!(s(" 300 "), Some(300));
        assert_eq!(s("1h"), Some(3600));
        assert_eq!(s("1 h"), Some(3600));
        assert_eq!(s("1.5min"), Some(90));
        // Held to the server's range (30 s to 1 day).
        assert_eq!(s("10s"), Some(30));
        assert_eq!(s("3d"), Some(86400));
        for bad in ["", "soon", "5 minutes", "-5min", "1e999", "5m"] {
            assert_eq!(s(bad), None, "{bad}");
        }
    }

    #[derive(Default)]
    struct Mem(BTreeMap<String, String>);

    impl Files for Mem {
        fn read(&mut self, path: &str) -> Result<Vec<u8>, FileError> {
            self.0
                .get(path)
                .map(|t| t.as_bytes().to_vec())
                .ok_or(FileError::Missing)
        }
        fn list(&mut self, dir: &str) -> Result<Vec<String>, FileError> {
            let prefix = format!("{dir}/");
            Ok(self
                .0
                .keys()
                .filter_map(|k| k.strip_prefix(&prefix))
                .filter(|k| !k.contains('/'))
                .map(String::from)
                .collect())
        }
    }

    fn mem(files: &[(&str, &str)]) -> Mem {
        Mem(files
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect())
    }

    fn value(s: &Settings, name: &str) -> Option<String> {
        match s.get(name) {
            Lookup::Set(v) => Some(v.value.clone()),
            _ => None,
        }
    }

    #[test]
    fn cloudnativepg_layout_includes_and_auto_conf_wins() {
        let mut f = mem(&[
            (
                "postgresql.conf",
                "# CloudNativePG\ninclude 'custom.conf'\ninclude 'override.conf'\n",
            ),
            (
                "custom.conf",
                "archive_mode = 'on'\narchive_command = '/controller/manager wal-archive --log-destination /controller/log/postgres.json %p'\nwal_level = 'logical'\n",
            ),
            ("override.conf", "# nothing\n"),
            ("postgresql.auto.conf", "ARCHIVE_COMMAND = 'cp %p /x/%f'\n"),
        ]);
        let s = load(&mut f);
        assert_eq!(value(&s, "archive_mode").as_deref(), Some("on"));
        match s.get("archive_command") {
            Lookup::Set(v) => {
                assert_eq!(v.value, "cp %p /x/%f");
                assert_eq!(v.file, "postgresql.auto.conf");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(s.get("archive_library"), Lookup::Default);
        assert!(s.unread.is_empty());
    }

    #[test]
    fn syntax_as_the_server_reads_it() {
        let mut f = mem(&[(
            "postgresql.conf",
            "archive_mode on   # trailing\n  archive_command='it''s \\'quoted\\' # not a comment'\nbad line =\n=x\n#archive_library = 'x'\nmax_wal_size=1GB#c\n",
        )]);
        let s = load(&mut f);
        assert_eq!(value(&s, "archive_mode").as_deref(), Some("on"));
        assert_eq!(
            value(&s, "archive_command").as_deref(),
            Some("it's 'quoted' # not a comment")
        );
        assert_eq!(value(&s, "max_wal_size").as_deref(), Some("1GB"));
        assert_eq!(s.get("archive_library"), Lookup::Default);
        // An unterminated quote is malformed: no value.
        let s = load(&mut mem(&[("postgresql.conf", "archive_mode = 'on\n")]));
        assert_eq!(s.get("archive_mode"), Lookup::Default);
    }

    #[test]
    fn includes_outside_the_data_directory_are_not_read_and_make_earlier_values_unknown() {
        let mut f = mem(&[(
            "postgresql.conf",
            "archive_mode = on\ninclude '/etc/postgresql/extra.conf'\narchive_command = 'x'\n",
        )]);
        let s = load(&mut f);
        assert_eq!(s.get("archive_mode"), Lookup::Unknown);
        assert_eq!(value(&s, "archive_command").as_deref(), Some("x"));
        assert_eq!(s.get("archive_library"), Lookup::Unknown);
        assert!(
            s.unread[0].contains("/etc/postgresql/extra.conf"),
            "{:?}",
            s.unread
        );
        assert_eq!(resolve("conf.d/a.conf", "../../etc/passwd"), None);
        assert_eq!(
            resolve("conf.d/a.conf", "../b.conf").as_deref(),
            Some("b.conf")
        );
        assert_eq!(
            resolve("postgresql.conf", "./x/y.conf").as_deref(),
            Some("x/y.conf")
        );
    }

    #[test]
    fn the_command_line_wins_over_every_file() {
        let mut s = load(&mut mem(&[
            ("postgresql.conf", "archive_mode = off\n"),
            ("postgresql.auto.conf", "archive_command = 'cp %p /a/%f'\n"),
        ]));
        apply_command_line(
            &mut s,
            "/usr/lib/postgresql/15/bin/postgres \"-D\" \"/data\" \"-c\" \"archive_mode=on\" \"--archive-command=true\" \"-c\" \"noequals\"\n",
        );
        assert_eq!(value(&s, "archive_mode").as_deref(), Some("on"));
        assert_eq!(value(&s, "archive_command").as_deref(), Some("true"));
        match s.get("archive_mode") {
            Lookup::Set(v) => assert_eq!(v.file, COMMAND_LINE),
            other => panic!("{other:?}"),
        }
        // Garbage is no setting and no panic.
        apply_command_line(&mut s, "\"\"\"-c\"");
        apply_command_line(&mut s, "no quotes at all -c archive_mode=always");
        assert_eq!(value(&s, "archive_mode").as_deref(), Some("on"));
    }

    #[test]
    fn include_dir_and_if_exists_and_loops_are_bounded() {
        let mut f = mem(&[
            (
                "postgresql.conf",
                "include_dir 'conf.d'\ninclude_if_exists 'missing.conf'\n",
            ),
            ("conf.d/01.conf", "archive_mode = always\n"),
            ("conf.d/02.conf", "archive_mode = on\n"),
            ("conf.d/.hidden.conf", "archive_mode = off\n"),
            ("conf.d/notes.txt", "archive_mode = off\n"),
        ]);
        let s = load(&mut f);
        assert_eq!(value(&s, "archive_mode").as_deref(), Some("on"));
        assert!(s.unread.is_empty(), "{:?}", s.unread);

        // A file including itself stops at the depth limit, with a reason.
        let s = load(&mut mem(&[(
            "postgresql.conf",
            "archive_mode = on\ninclude 'postgresql.conf'\n",
        )]));
        assert!(s.read.len() <= MAX_DEPTH + 2);
        assert_eq!(s.get("archive_mode"), Lookup::Unknown);
        assert!(!s.unread.is_empty());

        // No postgresql.conf at all: nothing is known.
        let s = load(&mut mem(&[]));
        assert_eq!(s.get("archive_mode"), Lookup::Unknown);
    }
}
