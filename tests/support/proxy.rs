//! A real forward proxy: tinyproxy (Debian package `tinyproxy-bin`), on loopback, optionally
//! asking for a user and password, its log read to see what went through it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::ports::free_port;

pub struct Proxy {
    pub port: u16,
    log: PathBuf,
    child: Child,
    _dir: tempfile::TempDir,
}

/// The tinyproxy binary, or `None` with a printed reason; panics under `CI`.
pub fn require_tinyproxy() -> Option<PathBuf> {
    let found = ["/usr/bin/tinyproxy", "/usr/sbin/tinyproxy"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file());
    if found.is_none() {
        let why = "tinyproxy is not installed (Debian package `tinyproxy-bin`; ./scripts/test.sh installs it)";
        if std::env::var_os("CI").is_some() {
            panic!("CI is set and the proxy tests cannot run: {why}");
        }
        eprintln!("skipping proxy test: {why}");
    }
    found
}

impl Proxy {
    /// A proxy on 127.0.0.1 for clients on 127.0.0.1, CONNECT to any port, asking for
    /// `user:password` when given.
    pub fn start(bin: &std::path::Path, credentials: Option<(&str, &str)>) -> Proxy {
        let dir = tempfile::tempdir().expect("proxy dir");
        let port = free_port();
        let log = dir.path().join("tinyproxy.log");
        let mut conf = format!(
            "Port {port}\nListen 127.0.0.1\nAllow 127.0.0.1\nTimeout 30\nMaxClients 20\n\
             LogFile \"{}\"\nLogLevel Connect\n",
            log.display()
        );
        if let Some((user, password)) = credentials {
            conf.push_str(&format!("BasicAuth {user} {password}\n"));
        }
        let conf_path = dir.path().join("tinyproxy.conf");
        std::fs::write(&conf_path, conf).expect("proxy config");
        let child = Command::new(bin)
            .arg("-d")
            .arg("-c")
            .arg(&conf_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tinyproxy");
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "tinyproxy did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Proxy {
            port,
            log,
            child,
            _dir: dir,
        }
    }

    pub fn url(&self, credentials: Option<(&str, &str)>) -> String {
        match credentials {
            Some((u, p)) => format!("http://{u}:{p}@127.0.0.1:{}", self.port),
            None => format!("http://127.0.0.1:{}", self.port),
        }
    }

    /// The request lines the proxy logged (`CONNECT localhost:1234 HTTP/1.1`, `POST http://...`).
    pub fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once("Request (file descriptor ").map(|(_, r)| r))
            .filter_map(|r| r.split_once("): ").map(|(_, line)| line.to_string()))
            .collect()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
