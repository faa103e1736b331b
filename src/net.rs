//! Network addresses as requests write them.

/// `host:port` as a request or a message names it: an IPv6 address in brackets.
pub fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_ipv6_address_is_bracketed() {
        assert_eq!(super::authority("10.0.0.1", 10250), "10.0.0.1:10250");
        assert_eq!(super::authority("hooks.example", 443), "hooks.example:443");
        assert_eq!(super::authority("fd00::1", 443), "[fd00::1]:443");
    }
}
