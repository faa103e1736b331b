use super::*;

fn proxies(no_proxy: &str) -> Proxies {
    Proxies::new(
        Some("http://proxy.corp:3128"),
        Some("proxy.corp:8080"),
        Some(no_proxy),
    )
    .expect("valid")
}

#[test]
fn each_scheme_has_its_proxy_and_unset_is_direct() {
    let p = proxies("");
    assert_eq!(
        p.for_target(true, "hooks.slack.com", 443).map(|p| p.port),
        Some(3128)
    );
    assert_eq!(
        p.for_target(false, "hooks.slack.com", 80).map(|p| p.port),
        Some(8080)
    );
    let none = Proxies::new(None, Some("  "), None).expect("valid");
    assert_eq!(none, Proxies::default());
    assert!(none.for_target(true, "hooks.slack.com", 443).is_none());
}

#[test]
fn no_proxy_matches_hosts_domains_ports_addresses_and_networks() {
    let p = proxies(
        "internal.corp, .svc.cluster.local,*.example.org, alerts.ops:8443, 10.0.0.0/8, fd00::/8, 192.168.1.7, [::1]",
    );
    let direct = |host: &str, port: u16| p.for_target(true, host, port).is_none();
    assert!(direct("internal.corp", 443));
    assert!(direct("hooks.internal.corp", 443));
    assert!(direct("HOOKS.Internal.Corp.", 443));
    assert!(!direct("notinternal.corp", 443));
    assert!(direct("am.monitoring.svc.cluster.local", 443));
    assert!(
        !direct("svc.cluster.local", 443),
        ".domain is subdomains only"
    );
    assert!(direct("a.example.org", 443));
    assert!(!direct("example.org", 443));
    assert!(direct("alerts.ops", 8443));
    assert!(!direct("alerts.ops", 443), "the entry names a port");
    assert!(direct("10.1.2.3", 443));
    assert!(!direct("11.1.2.3", 443));
    assert!(direct("fd12::1", 443));
    assert!(direct("192.168.1.7", 443));
    assert!(!direct("192.168.1.8", 443));
    assert!(direct("::1", 443));
    assert!(!direct("hooks.slack.com", 443));
    // An address is not matched as a domain name.
    assert!(proxies("0.0.1").for_target(true, "10.0.0.1", 443).is_some());
    assert!(proxies("*").for_target(false, "anything", 80).is_none());
}

#[test]
fn credentials_become_basic_and_are_never_shown() {
    let p =
        Proxies::new(Some("http://svc%40corp:p%3Ass@proxy.corp:3128"), None, None).expect("valid");
    let proxy = p.for_target(true, "hooks.slack.com", 443).expect("proxied");
    // base64("svc@corp:p:ss")
    assert_eq!(
        proxy.authorization.as_deref(),
        Some("Basic c3ZjQGNvcnA6cDpzcw==")
    );
    assert_eq!((proxy.host.as_str(), proxy.port), ("proxy.corp", 3128));
    assert!(!format!("{p:?}").contains("c3Zj"), "{p:?}");
}

#[test]
fn a_bad_proxy_is_refused_naming_the_variable_not_the_value() {
    for (https, detail) in [
        (
            "https://proxy.corp:3128",
            "only an http:// proxy is supported",
        ),
        (
            "socks5://proxy.corp:1080",
            "only an http:// proxy is supported",
        ),
        ("http://", "not a URL"),
        ("http://u:p%zz@proxy.corp", "bad user or password"),
        ("not a url s3cr3t", "not a URL"),
    ] {
        let e = Proxies::new(Some(https), None, None).expect_err(https);
        assert_eq!(
            e,
            ProxyError {
                variable: "HTTPS_PROXY",
                flag: "https-proxy",
                detail
            },
            "{https}"
        );
        assert!(!e.to_string().contains("s3cr3t"));
    }
    let e = Proxies::new(None, Some("ftp://proxy"), None).expect_err("ftp");
    assert_eq!((e.variable, e.flag), ("HTTP_PROXY", "http-proxy"));
}

#[test]
fn unreadable_no_proxy_entries_are_ignored() {
    let p = proxies("10.0.0.0/99, host:notaport, ., ,hooks.corp");
    assert!(p.for_target(true, "10.0.0.1", 443).is_some());
    assert!(p.for_target(true, "host", 443).is_some());
    assert!(p.for_target(true, "hooks.corp", 443).is_none());
}
