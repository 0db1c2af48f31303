//! The PROXY protocol header (HAProxy's specification, versions 1 and 2) that an instance with
//! `proxy_protocol` sends to its clear-text service before the first relayed byte, so that the
//! application learns the client's address and the address the client connected to, as it
//! would behind Solaris KSSL, where the kernel kept the connection's own addresses.
//!
//! * Version 1 is one text line: `PROXY TCP4 SRC DST SPORT DPORT\r\n` (`TCP6` for IPv6).
//! * Version 2 is binary: a 12-byte signature, the version and command (`0x21`: version 2,
//!   `PROXY`), the family and transport (`0x11` TCP over IPv4, `0x21` TCP over IPv6), the
//!   length of the addresses, then source address, destination address, source port and
//!   destination port in network order.
//!
//! An IPv4 client on a dual-stack listener (`::ffff:a.b.c.d`) is written as IPv4; when the two
//! addresses are of different families after that, both are written as IPv6 (the IPv4 one
//! mapped). When the addresses are unknown, version 1 says `PROXY UNKNOWN` and version 2 sends
//! the `LOCAL` command with no address, as the specification asks.

use crate::config::ProxyProtocol;
use std::net::{IpAddr, SocketAddr};

/// The version 2 signature.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// Both addresses in one family: IPv4 when both are (or map to) IPv4, else IPv6.
fn same_family(src: SocketAddr, dst: SocketAddr) -> (SocketAddr, SocketAddr) {
    let canon = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
    let (s, d) = (canon(src), canon(dst));
    if s.is_ipv4() == d.is_ipv4() {
        return (s, d);
    }
    let six = |a: SocketAddr| match a.ip() {
        IpAddr::V4(v4) => SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), a.port()),
        IpAddr::V6(_) => a,
    };
    (six(s), six(d))
}

/// The header for a connection from `src` (the client) to `dst` (the proxy's listening
/// address as the client reached it); `None` when either is unknown.
pub fn header(version: ProxyProtocol, addrs: Option<(SocketAddr, SocketAddr)>) -> Vec<u8> {
    let addrs = addrs.map(|(s, d)| same_family(s, d));
    match version {
        ProxyProtocol::V1 => match addrs {
            None => b"PROXY UNKNOWN\r\n".to_vec(),
            Some((s, d)) => format!(
                "PROXY {} {} {} {} {}\r\n",
                if s.is_ipv4() { "TCP4" } else { "TCP6" },
                s.ip(),
                d.ip(),
                s.port(),
                d.port()
            )
            .into_bytes(),
        },
        ProxyProtocol::V2 => {
            let mut h = V2_SIGNATURE.to_vec();
            let Some((s, d)) = addrs else {
                // LOCAL, AF_UNSPEC, no address block.
                h.extend_from_slice(&[0x20, 0x00, 0, 0]);
                return h;
            };
            let mut body = Vec::with_capacity(36);
            let family = match (s.ip(), d.ip()) {
                (IpAddr::V4(a), IpAddr::V4(b)) => {
                    body.extend_from_slice(&a.octets());
                    body.extend_from_slice(&b.octets());
                    0x11
                }
                (IpAddr::V6(a), IpAddr::V6(b)) => {
                    body.extend_from_slice(&a.octets());
                    body.extend_from_slice(&b.octets());
                    0x21
                }
                _ => unreachable!("same_family gives one family"),
            };
            body.extend_from_slice(&s.port().to_be_bytes());
            body.extend_from_slice(&d.port().to_be_bytes());
            h.extend_from_slice(&[0x21, family]);
            h.extend_from_slice(&(body.len() as u16).to_be_bytes());
            h.extend_from_slice(&body);
            h
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn version_1() {
        let v1 = |s, d| String::from_utf8(header(ProxyProtocol::V1, Some((a(s), a(d))))).unwrap();
        assert_eq!(
            v1("192.0.2.7:50123", "198.51.100.1:443"),
            "PROXY TCP4 192.0.2.7 198.51.100.1 50123 443\r\n"
        );
        assert_eq!(
            v1("[2001:db8::7]:50123", "[2001:db8::1]:8443"),
            "PROXY TCP6 2001:db8::7 2001:db8::1 50123 8443\r\n"
        );
        // A dual-stack listener's IPv4 client is IPv4.
        assert_eq!(
            v1("[::ffff:192.0.2.7]:1", "[::ffff:127.0.0.1]:2"),
            "PROXY TCP4 192.0.2.7 127.0.0.1 1 2\r\n"
        );
        // Mixed families: both IPv6.
        assert_eq!(
            v1("192.0.2.7:1", "[2001:db8::1]:2"),
            "PROXY TCP6 ::ffff:192.0.2.7 2001:db8::1 1 2\r\n"
        );
        assert_eq!(header(ProxyProtocol::V1, None), b"PROXY UNKNOWN\r\n");
    }

    #[test]
    fn version_2() {
        let h = header(
            ProxyProtocol::V2,
            Some((a("192.0.2.7:50123"), a("198.51.100.1:443"))),
        );
        let mut want = V2_SIGNATURE.to_vec();
        want.extend_from_slice(&[0x21, 0x11, 0, 12]);
        want.extend_from_slice(&[192, 0, 2, 7, 198, 51, 100, 1]);
        want.extend_from_slice(&[0xc3, 0xcb, 0x01, 0xbb]);
        assert_eq!(h, want);
        let h = header(
            ProxyProtocol::V2,
            Some((a("[2001:db8::7]:1"), a("[::1]:2"))),
        );
        assert_eq!(&h[12..16], &[0x21, 0x21, 0, 36]);
        assert_eq!(h.len(), 16 + 36);
        assert_eq!(&h[16..18], &[0x20, 0x01]);
        assert_eq!(&h[32 + 15..48], &[1]);
        assert_eq!(&h[48..52], &[0, 1, 0, 2]);
        assert_eq!(
            header(ProxyProtocol::V2, None),
            [&V2_SIGNATURE[..], &[0x20, 0x00, 0, 0]].concat()
        );
    }
}
