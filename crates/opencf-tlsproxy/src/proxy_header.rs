//! The PROXY protocol header (HAProxy's specification, versions 1 and 2) that an instance with
//! `proxy_protocol` sends to its clear-text service before the first relayed byte, so that the
//! application learns the client's address and the address the client connected to, as it
//! would behind Solaris KSSL, where the kernel kept the connection's own addresses.
//!
//! * Version 1 is one text line: `PROXY TCP4 SRC DST SPORT DPORT\r\n` (`TCP6` for IPv6).
//! * Version 2 is binary: a 12-byte signature, the version and command (`0x21`: version 2,
//!   `PROXY`), the family and transport (`0x11` TCP over IPv4, `0x21` TCP over IPv6), the
//!   length of the addresses, then source address, destination address, source port and
//!   destination port in network order. Type-length-value fields follow with what the TLS
//!   handshake settled, as HAProxy's `send-proxy-v2-ssl` and hitch send them: the application
//!   protocol chosen (`PP2_TYPE_ALPN`, where one was), the server name the client asked for
//!   (`PP2_TYPE_AUTHORITY`, where it sent one), and `PP2_TYPE_SSL` with the client flags,
//!   the `verify` field, the version (`TLSv1.3`, `TLSv1.2`) and the cipher suite (its IANA
//!   name) as sub-fields. The flags are `PP2_CLIENT_SSL`, and with a client certificate
//!   `PP2_CLIENT_CERT_SESS`, and `PP2_CLIENT_CERT_CONN` when it was presented on this connection
//!   (not in a session resumed); `verify` is 0 when the client's certificate was verified (the
//!   proxy completes no handshake with a certificate that fails) and 1 without one, and the
//!   certificate's subject common name follows as `PP2_SUBTYPE_SSL_CN`. Receivers skip the
//!   types they do not know.
//!
//! An IPv4 client on a dual-stack listener (`::ffff:a.b.c.d`) is written as IPv4; when the two
//! addresses are of different families after that, both are written as IPv6 (the IPv4 one
//! mapped). When the addresses are unknown, version 1 says `PROXY UNKNOWN` and version 2 sends
//! the `LOCAL` command with no address, as the specification asks.

use crate::config::ProxyProtocol;
use std::net::{IpAddr, SocketAddr};

/// The version 2 signature.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// Version 2 field types (the specification's names).
const PP2_TYPE_ALPN: u8 = 0x01;
const PP2_TYPE_AUTHORITY: u8 = 0x02;
const PP2_TYPE_SSL: u8 = 0x20;
const PP2_SUBTYPE_SSL_VERSION: u8 = 0x21;
const PP2_SUBTYPE_SSL_CN: u8 = 0x22;
const PP2_SUBTYPE_SSL_CIPHER: u8 = 0x23;
/// `PP2_TYPE_SSL`'s client flags: the connection was made over TLS; the client presented a
/// certificate on this connection; it did in the TLS session of this connection.
const PP2_CLIENT_SSL: u8 = 0x01;
const PP2_CLIENT_CERT_CONN: u8 = 0x02;
const PP2_CLIENT_CERT_SESS: u8 = 0x04;

/// The longest client certificate common name sent (X.509's upper bound is 64 characters).
const MAX_CN: usize = 1024;

/// The client's certificate, as far as the header tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientCert {
    /// None was presented.
    None,
    /// Presented and verified in this connection's handshake.
    Connection,
    /// Presented and verified when the session this connection resumed was made.
    Session,
}

/// What the TLS handshake of a connection settled, for a version 2 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsFacts<'a> {
    /// `TLSv1.3` or `TLSv1.2`.
    pub version: &'a str,
    /// The cipher suite's IANA name.
    pub cipher: &'a str,
    /// The application protocol chosen by ALPN.
    pub alpn: Option<&'a [u8]>,
    /// The server name the client sent.
    pub sni: Option<&'a str>,
    /// The client's certificate and its subject common name.
    pub client_cert: ClientCert,
    pub client_cn: Option<&'a str>,
}

/// Appends one type-length-value field.
fn tlv(out: &mut Vec<u8>, ty: u8, value: &[u8]) {
    out.push(ty);
    out.extend_from_slice(&(value.len() as u16).to_be_bytes());
    out.extend_from_slice(value);
}

/// The fields that follow the addresses of a version 2 header.
fn tls_tlvs(facts: &TlsFacts) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(p) = facts.alpn {
        tlv(&mut out, PP2_TYPE_ALPN, p);
    }
    if let Some(name) = facts.sni {
        tlv(&mut out, PP2_TYPE_AUTHORITY, name.as_bytes());
    }
    let (flags, verify) = match facts.client_cert {
        ClientCert::None => (PP2_CLIENT_SSL, 1u32),
        ClientCert::Connection => (
            PP2_CLIENT_SSL | PP2_CLIENT_CERT_CONN | PP2_CLIENT_CERT_SESS,
            0,
        ),
        ClientCert::Session => (PP2_CLIENT_SSL | PP2_CLIENT_CERT_SESS, 0),
    };
    let mut ssl = vec![flags];
    ssl.extend_from_slice(&verify.to_be_bytes());
    tlv(&mut ssl, PP2_SUBTYPE_SSL_VERSION, facts.version.as_bytes());
    // A common name longer than X.509's upper bound many times over is left out rather than
    // cut (the field lengths are 16 bits).
    if facts.client_cert != ClientCert::None {
        if let Some(cn) = facts.client_cn.filter(|cn| cn.len() <= MAX_CN) {
            tlv(&mut ssl, PP2_SUBTYPE_SSL_CN, cn.as_bytes());
        }
    }
    tlv(&mut ssl, PP2_SUBTYPE_SSL_CIPHER, facts.cipher.as_bytes());
    tlv(&mut out, PP2_TYPE_SSL, &ssl);
    out
}

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
/// address as the client reached it); `None` when either is unknown. Version 2 carries `tls`
/// after the addresses (a `LOCAL` header carries nothing).
pub fn header(
    version: ProxyProtocol,
    addrs: Option<(SocketAddr, SocketAddr)>,
    tls: Option<&TlsFacts>,
) -> Vec<u8> {
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
            if let Some(facts) = tls {
                body.extend_from_slice(&tls_tlvs(facts));
            }
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
        let v1 = |s, d| {
            String::from_utf8(header(ProxyProtocol::V1, Some((a(s), a(d))), Some(&FACTS))).unwrap()
        };
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
        assert_eq!(header(ProxyProtocol::V1, None, None), b"PROXY UNKNOWN\r\n");
    }

    #[test]
    fn version_2() {
        let h = header(
            ProxyProtocol::V2,
            Some((a("192.0.2.7:50123"), a("198.51.100.1:443"))),
            None,
        );
        let mut want = V2_SIGNATURE.to_vec();
        want.extend_from_slice(&[0x21, 0x11, 0, 12]);
        want.extend_from_slice(&[192, 0, 2, 7, 198, 51, 100, 1]);
        want.extend_from_slice(&[0xc3, 0xcb, 0x01, 0xbb]);
        assert_eq!(h, want);
        let h = header(
            ProxyProtocol::V2,
            Some((a("[2001:db8::7]:1"), a("[::1]:2"))),
            None,
        );
        assert_eq!(&h[12..16], &[0x21, 0x21, 0, 36]);
        assert_eq!(h.len(), 16 + 36);
        assert_eq!(&h[16..18], &[0x20, 0x01]);
        assert_eq!(&h[32 + 15..48], &[1]);
        assert_eq!(&h[48..52], &[0, 1, 0, 2]);
        assert_eq!(
            header(ProxyProtocol::V2, None, Some(&FACTS)),
            [&V2_SIGNATURE[..], &[0x20, 0x00, 0, 0]].concat()
        );
    }

    const FACTS: TlsFacts = TlsFacts {
        version: "TLSv1.3",
        cipher: "TLS_AES_128_GCM_SHA256",
        alpn: Some(b"h2"),
        sni: Some("www.example.org"),
        client_cert: ClientCert::None,
        client_cn: None,
    };

    #[test]
    fn version_2_tls_fields() {
        let addrs = Some((a("192.0.2.7:50123"), a("198.51.100.1:443")));
        let h = header(ProxyProtocol::V2, addrs, Some(&FACTS));
        let mut tlvs = vec![0x01, 0, 2];
        tlvs.extend_from_slice(b"h2");
        tlvs.extend_from_slice(&[0x02, 0, 15]);
        tlvs.extend_from_slice(b"www.example.org");
        // PP2_TYPE_SSL: client, verify, then the version and cipher sub-fields.
        let ssl_len = 1 + 4 + (3 + 7) + (3 + 22);
        tlvs.extend_from_slice(&[0x20, 0, ssl_len as u8, 0x01, 0, 0, 0, 1]);
        tlvs.extend_from_slice(&[0x21, 0, 7]);
        tlvs.extend_from_slice(b"TLSv1.3");
        tlvs.extend_from_slice(&[0x23, 0, 22]);
        tlvs.extend_from_slice(b"TLS_AES_128_GCM_SHA256");
        // The address block's length counts the fields.
        assert_eq!(&h[12..16], &[0x21, 0x11, 0, (12 + tlvs.len()) as u8]);
        assert_eq!(&h[28..], &tlvs[..]);
        // Without ALPN or a server name, only PP2_TYPE_SSL follows the addresses.
        let bare = TlsFacts {
            alpn: None,
            sni: None,
            ..FACTS
        };
        let h = header(ProxyProtocol::V2, addrs, Some(&bare));
        assert_eq!(h[28], 0x20);
        assert_eq!(h.len(), 28 + 3 + ssl_len);
        // A client certificate: its flags, verify 0 and the common name after the version.
        for (cert, flags) in [(ClientCert::Connection, 0x07), (ClientCert::Session, 0x05)] {
            let with = TlsFacts {
                alpn: None,
                sni: None,
                client_cert: cert,
                client_cn: Some("client-7"),
                ..FACTS
            };
            let h = header(ProxyProtocol::V2, addrs, Some(&with));
            let mut ssl = vec![flags, 0, 0, 0, 0];
            ssl.extend_from_slice(&[0x21, 0, 7]);
            ssl.extend_from_slice(b"TLSv1.3");
            ssl.extend_from_slice(&[0x22, 0, 8]);
            ssl.extend_from_slice(b"client-7");
            ssl.extend_from_slice(&[0x23, 0, 22]);
            ssl.extend_from_slice(b"TLS_AES_128_GCM_SHA256");
            assert_eq!(&h[28..31], &[0x20, 0, ssl.len() as u8]);
            assert_eq!(&h[31..], &ssl[..]);
        }
        // An oversized common name is left out.
        let long = "x".repeat(MAX_CN + 1);
        let with = TlsFacts {
            client_cert: ClientCert::Connection,
            client_cn: Some(&long),
            ..bare
        };
        let h = header(ProxyProtocol::V2, addrs, Some(&with));
        assert_eq!(h.len(), 28 + 3 + ssl_len);
        // Version 1 has no room for them.
        assert_eq!(
            header(ProxyProtocol::V1, addrs, Some(&FACTS)),
            header(ProxyProtocol::V1, addrs, None)
        );
    }
}
