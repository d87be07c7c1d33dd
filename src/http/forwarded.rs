//! The client's address behind a reverse proxy (`[server] trusted_proxies`): from a trusted
//! peer only, read from `Forwarded` (RFC 7239) or else `X-Forwarded-For`, as nginx's realip
//! module with `real_ip_recursive on` reads it: the hops are walked from the right, and the
//! first address that is not a trusted proxy is the client. A client can put anything on the
//! left of the list, never on its right, so it cannot pass for another address. From any
//! other peer the headers are ignored.

use http::HeaderMap;
use ipnet::IpNet;
use std::net::{IpAddr, Ipv6Addr};

/// The configured reverse proxies.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
}

impl TrustedProxies {
    /// The proxies of `[server] trusted_proxies`.
    pub fn new(nets: Vec<IpNet>) -> Self {
        Self { nets }
    }

    /// Whether `ip` is one of them.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.nets.iter().any(|n| n.contains(&ip))
    }

    /// The address of the client of a request from `peer` with `headers`: `peer` itself
    /// unless it is a trusted proxy. When a hop is not an address (`unknown`, an obfuscated
    /// `_name`), the proxy that wrote it is as far as the chain can be followed.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let mut client = peer.to_canonical();
        if self.nets.is_empty() || !self.trusts(client) {
            return client;
        }
        for hop in hops(headers).into_iter().rev() {
            match hop {
                Some(ip) => client = ip.to_canonical(),
                None => return client,
            }
            if !self.trusts(client) {
                return client;
            }
        }
        client
    }
}

/// The hops a request passed, client first: `Forwarded`'s `for=` values, or without that
/// header `X-Forwarded-For`'s entries; `None` for one that is no address.
fn hops(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    let forwarded: Vec<&str> = headers
        .get_all(http::header::FORWARDED)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    if !forwarded.is_empty() {
        return forwarded
            .iter()
            .flat_map(|line| split_outside_quotes(line, ','))
            .filter_map(|element| {
                split_outside_quotes(element, ';')
                    .into_iter()
                    .find_map(|pair| {
                        let (name, value) = pair.split_once('=')?;
                        name.trim()
                            .eq_ignore_ascii_case("for")
                            .then(|| node(value.trim().trim_matches('"')))
                    })
            })
            .collect();
    }
    headers
        .get_all("x-forwarded-for")
        .iter()
        .map(|v| v.to_str().unwrap_or("?"))
        .flat_map(|line| line.split(','))
        .map(|entry| node(entry.trim()))
        .collect()
}

/// An address as proxies write it: `192.0.2.43`, `192.0.2.43:47011`, `2001:db8::1`,
/// `[2001:db8::1]`, `[2001:db8::1]:4711`.
fn node(text: &str) -> Option<IpAddr> {
    if let Some(rest) = text.strip_prefix('[') {
        let (v6, _port) = rest.split_once(']')?;
        return v6.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    let (host, port) = text.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

/// `text` split at `sep` where it is not inside a quoted string.
fn split_outside_quotes(text: &str, sep: char) -> Vec<&str> {
    let (mut parts, mut start, mut quoted, mut escaped) = (Vec::new(), 0, false, false);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c == sep && !quoted => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxies(nets: &[&str]) -> TrustedProxies {
        TrustedProxies::new(nets.iter().map(|n| n.parse().unwrap()).collect())
    }

    fn client(t: &TrustedProxies, peer: &str, headers: &[(&str, &str)]) -> String {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        t.client(peer.parse().unwrap(), &map).to_string()
    }

    #[test]
    fn only_a_trusted_peer_is_believed() {
        let t = proxies(&["10.0.0.5/32", "192.168.1.0/24"]);
        let xff = [("x-forwarded-for", "203.0.113.7")];
        assert_eq!(client(&t, "10.0.0.5", &xff), "203.0.113.7");
        assert_eq!(client(&t, "192.168.1.77", &xff), "203.0.113.7");
        assert_eq!(client(&t, "10.0.0.6", &xff), "10.0.0.6");
        assert_eq!(
            client(&TrustedProxies::default(), "10.0.0.5", &xff),
            "10.0.0.5"
        );
        // No header: the proxy is the client.
        assert_eq!(client(&t, "10.0.0.5", &[]), "10.0.0.5");
        // IPv4 on a dual-stack socket is the IPv4 address.
        assert_eq!(client(&t, "::ffff:10.0.0.5", &xff), "203.0.113.7");
    }

    #[test]
    fn the_right_most_untrusted_hop_is_the_client() {
        let t = proxies(&["10.0.0.0/8"]);
        // A client that forges the left of the list gains nothing.
        let forged = [("x-forwarded-for", "1.2.3.4, 198.51.100.9, 10.1.1.1")];
        assert_eq!(client(&t, "10.0.0.5", &forged), "198.51.100.9");
        // Two header lines are one list, in order.
        let lines = [
            ("x-forwarded-for", "1.2.3.4"),
            ("x-forwarded-for", "198.51.100.9"),
        ];
        assert_eq!(client(&t, "10.0.0.5", &lines), "198.51.100.9");
        // Every hop trusted: the left-most.
        let inside = [("x-forwarded-for", "10.9.9.9, 10.1.1.1")];
        assert_eq!(client(&t, "10.0.0.5", &inside), "10.9.9.9");
        // A hop that is no address stops the walk at the proxy that wrote it.
        let unknown = [("x-forwarded-for", "198.51.100.9, garbage, 10.1.1.1")];
        assert_eq!(client(&t, "10.0.0.5", &unknown), "10.1.1.1");
    }

    #[test]
    fn forwarded_wins_over_x_forwarded_for_in_all_its_forms() {
        let t = proxies(&["10.0.0.5/32"]);
        for (value, expected) in [
            ("for=192.0.2.60;proto=http;by=203.0.113.43", "192.0.2.60"),
            (r#"for="[2001:db8:cafe::17]:4711""#, "2001:db8:cafe::17"),
            (r#"For="192.0.2.43:47011""#, "192.0.2.43"),
            ("for=192.0.2.43, for=198.51.100.17", "198.51.100.17"),
            (r#"by="a;b,c";for=192.0.2.1"#, "192.0.2.1"),
            ("for=unknown", "10.0.0.5"),
            ("for=_hidden, for=10.0.0.5", "10.0.0.5"),
        ] {
            let headers = [("forwarded", value), ("x-forwarded-for", "1.1.1.1")];
            assert_eq!(client(&t, "10.0.0.5", &headers), expected, "{value}");
        }
    }
}
