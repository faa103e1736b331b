//! The forward proxy notifications go through (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`), for
//! clusters whose nodes reach the outside only through one. Only sinks use it: in a pod, the API
//! server (the in-cluster configuration has no proxy) and the kubelet are reached directly. The proxy's URL may hold a user and password (sent to
//! the proxy only, as `Proxy-Authorization: Basic`): no message quotes it.

use std::net::IpAddr;

use base64::Engine;

/// One proxy: `http://[user:password@]host[:port]`.
#[derive(Clone, PartialEq, Eq)]
pub struct Proxy {
    pub host: String,
    pub port: u16,
    /// `Basic ...`, from the URL's user and password.
    pub authorization: Option<String>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("authorization", &self.authorization.as_ref().map(|_| "…"))
            .finish()
    }
}

/// Why a proxy setting was refused; it names the variable, never the value (it may hold a
/// password).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{variable}: {detail}")]
pub struct ProxyError {
    /// The environment variable (`HTTPS_PROXY`).
    pub variable: &'static str,
    /// The agent's flag that the variable sets (`https-proxy`).
    pub flag: &'static str,
    pub detail: &'static str,
}

/// The proxies by the sink's scheme, and the hosts reached directly.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Proxies {
    https: Option<Proxy>,
    http: Option<Proxy>,
    direct: Vec<Direct>,
}

/// One `NO_PROXY` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Direct {
    All,
    /// `example.com` (the host and its subdomains) or `.example.com` (subdomains only), with
    /// the port when the entry names one.
    Domain {
        name: String,
        subdomains_only: bool,
        port: Option<u16>,
    },
    Ip(IpAddr, Option<u16>),
    Net(IpAddr, u8),
}

impl Proxies {
    /// From the three variables' values; empty or unset ones are off.
    pub fn new(
        https: Option<&str>,
        http: Option<&str>,
        no_proxy: Option<&str>,
    ) -> Result<Proxies, ProxyError> {
        Ok(Proxies {
            https: proxy(("https-proxy", "HTTPS_PROXY"), https)?,
            http: proxy(("http-proxy", "HTTP_PROXY"), http)?,
            direct: no_proxy.map(directs).unwrap_or_default(),
        })
    }

    /// The proxy a request to `host:port` goes through, if any.
    pub fn for_target(&self, https: bool, host: &str, port: u16) -> Option<&Proxy> {
        let proxy = if https { &self.https } else { &self.http };
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let ip = ip_of(&host);
        let direct = self.direct.iter().any(|d| d.matches(&host, ip, port));
        proxy.as_ref().filter(|_| !direct)
    }
}

fn proxy(
    (flag, variable): (&'static str, &'static str),
    value: Option<&str>,
) -> Result<Option<Proxy>, ProxyError> {
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let bad = |detail| ProxyError {
        variable,
        flag,
        detail,
    };
    // A bare `host:port` is taken as http://, as curl and Go do.
    let value = if value.contains("://") {
        value.to_string()
    } else {
        format!("http://{value}")
    };
    let uri: http::Uri = value.parse().map_err(|_| bad("not a URL"))?;
    if uri.scheme_str() != Some("http") {
        return Err(bad("only an http:// proxy is supported"));
    }
    let authority = uri.authority().ok_or_else(|| bad("no host"))?;
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    if host.is_empty() {
        return Err(bad("no host"));
    }
    let authorization = match authority.as_str().rsplit_once('@') {
        None => None,
        Some((userinfo, _)) => Some(basic(userinfo).ok_or_else(|| bad("bad user or password"))?),
    };
    Ok(Some(Proxy {
        host,
        port: authority.port_u16().unwrap_or(80),
        authorization,
    }))
}

/// `user:password`, percent-decoded, as a Basic credential.
fn basic(userinfo: &str) -> Option<String> {
    let decoded = percent_decode(userinfo)?;
    Some(format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(decoded)
    ))
}

fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        if b != b'%' {
            out.push(b);
            continue;
        }
        let hex = [bytes.next()?, bytes.next()?];
        let hex = std::str::from_utf8(&hex).ok()?;
        out.push(u8::from_str_radix(hex, 16).ok()?);
    }
    Some(out)
}

/// `NO_PROXY`'s comma-separated entries; one that cannot be read is ignored, as by curl and Go.
fn directs(text: &str) -> Vec<Direct> {
    text.split(',')
        .map(|e| e.trim().to_ascii_lowercase())
        .filter(|e| !e.is_empty())
        .filter_map(|e| direct(&e))
        .collect()
}

fn direct(entry: &str) -> Option<Direct> {
    if entry == "*" {
        return Some(Direct::All);
    }
    if let Some((ip, bits)) = entry.split_once('/') {
        let ip: IpAddr = ip.parse().ok()?;
        let bits: u8 = bits.parse().ok()?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        return (bits <= max).then_some(Direct::Net(ip, bits));
    }
    if let Some(ip) = ip_of(entry) {
        return Some(Direct::Ip(ip, None));
    }
    let (name, port) = match entry.rsplit_once(':') {
        Some((n, p)) => (n, Some(p.parse().ok()?)),
        None => (entry, None),
    };
    if let Some(ip) = ip_of(name) {
        return Some(Direct::Ip(ip, port));
    }
    // `*.example.com` is `.example.com`, as in Go's net/http.
    let name = name.strip_prefix('*').unwrap_or(name);
    let subdomains_only = name.starts_with('.');
    let name = name.trim_matches('.').to_string();
    (!name.is_empty()).then_some(Direct::Domain {
        name,
        subdomains_only,
        port,
    })
}

impl Direct {
    /// `host` lowercased, `ip` the address it is (if it is one).
    fn matches(&self, host: &str, ip: Option<IpAddr>, port: u16) -> bool {
        match self {
            Direct::All => true,
            Direct::Ip(want, p) => ip == Some(*want) && p.is_none_or(|p| p == port),
            Direct::Net(net, bits) => ip.is_some_and(|ip| in_net(ip, *net, *bits)),
            Direct::Domain {
                name,
                subdomains_only,
                port: p,
            } => {
                let sub = host
                    .strip_suffix(name.as_str())
                    .is_some_and(|rest| rest.ends_with('.'));
                let hit = sub || (!subdomains_only && host == name);
                ip.is_none() && hit && p.is_none_or(|p| p == port)
            }
        }
    }
}

/// The address `text` writes, bare or in brackets.
fn ip_of(text: &str) -> Option<IpAddr> {
    text.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

fn in_net(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            prefix(u128::from(a.to_bits()), u128::from(n.to_bits()), 32, bits)
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => prefix(a.to_bits(), n.to_bits(), 128, bits),
        _ => false,
    }
}

fn prefix(a: u128, n: u128, width: u8, bits: u8) -> bool {
    let shift = u32::from(width.saturating_sub(bits));
    a.checked_shr(shift).unwrap_or(0) == n.checked_shr(shift).unwrap_or(0)
}

#[cfg(test)]
#[path = "proxy_tests.rs"]
mod tests;
