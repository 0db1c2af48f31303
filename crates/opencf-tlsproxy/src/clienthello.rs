//! Reads the first flight of a TLS connection without consuming it: the record layer is
//! reassembled until the whole ClientHello handshake message is present, then the parts the
//! proxy decides on (offered versions, cipher suites, signature schemes, key-exchange groups,
//! SNI, application protocols) are extracted.
//! The bytes themselves are kept by the caller and replayed either into rustls or, untouched,
//! to the fallback port.

/// Largest ClientHello accepted (a post-quantum key share makes them a few KiB).
pub const MAX_HELLO: usize = 64 * 1024;
/// The most bytes of records, headers included, that may carry the ClientHello: rustls holds
/// no more of a handshake message it is joining (65,535 bytes).
pub const MAX_FIRST_FLIGHT: usize = 0xffff;

const CONTENT_HANDSHAKE: u8 = 22;
const HS_CLIENT_HELLO: u8 = 1;
const EXT_SERVER_NAME: u16 = 0;
const EXT_SUPPORTED_GROUPS: u16 = 10;
const EXT_SIGNATURE_ALGORITHMS: u16 = 13;
const EXT_ALPN: u16 = 16;
const EXT_SUPPORTED_VERSIONS: u16 = 43;

/// What a ClientHello offers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hello {
    /// Protocol versions the client offers (0x0303 = TLS 1.2, 0x0304 = TLS 1.3), GREASE removed.
    pub versions: Vec<u16>,
    pub suites: Vec<u16>,
    pub sig_schemes: Vec<u16>,
    /// Key-exchange groups offered (`supported_groups`), GREASE removed; empty without the
    /// extension.
    pub groups: Vec<u16>,
    pub sni: Option<String>,
    /// The application protocols offered (ALPN), in the client's order; `None` without the
    /// extension.
    pub alpn: Option<Vec<Vec<u8>>>,
}

/// Result of looking at the bytes received so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Peek {
    /// More bytes are needed.
    Incomplete,
    /// The ClientHello is complete.
    Hello(Hello),
    /// Not a TLS ClientHello.
    Invalid(&'static str),
}

fn is_grease(v: u16) -> bool {
    v & 0x0f0f == 0x0a0a && (v >> 8) == (v & 0xff)
}

/// Big-endian reader over a slice; every read fails cleanly past the end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()? as usize;
        self.take(n)
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()? as usize;
        self.take(n)
    }
}

fn u16_list(b: &[u8]) -> Option<Vec<u16>> {
    if !b.len().is_multiple_of(2) {
        return None;
    }
    Some(
        b.chunks(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .filter(|v| !is_grease(*v))
            .collect(),
    )
}

/// Looks at the bytes read so far from a new connection.
pub fn peek(buf: &[u8]) -> Peek {
    // Reassemble handshake bytes from consecutive handshake records.
    let mut hs = Vec::new();
    let mut rest = buf;
    loop {
        if rest.len() < 5 {
            break;
        }
        if rest[0] != CONTENT_HANDSHAKE {
            return Peek::Invalid("first record is not a handshake record");
        }
        if rest[1] != 3 {
            return Peek::Invalid("record version is not 3.x");
        }
        let len = u16::from_be_bytes([rest[3], rest[4]]) as usize;
        if len == 0 || len > 16384 + 2048 {
            return Peek::Invalid("bad record length");
        }
        if rest.len() < 5 + len {
            hs.extend_from_slice(&rest[5..]);
            break;
        }
        hs.extend_from_slice(&rest[5..5 + len]);
        rest = &rest[5 + len..];
        if hs.len() >= 4 && hs.len() >= 4 + hello_len(&hs) {
            break;
        }
    }
    if hs.is_empty() {
        return Peek::Incomplete;
    }
    if hs[0] != HS_CLIENT_HELLO {
        return Peek::Invalid("first handshake message is not a ClientHello");
    }
    if hs.len() < 4 {
        return Peek::Incomplete;
    }
    let need = hello_len(&hs);
    if need > MAX_HELLO {
        return Peek::Invalid("ClientHello too long");
    }
    if hs.len() < 4 + need {
        return Peek::Incomplete;
    }
    match parse_body(&hs[4..4 + need]) {
        Some(h) => Peek::Hello(h),
        None => Peek::Invalid("malformed ClientHello"),
    }
}

fn hello_len(hs: &[u8]) -> usize {
    u32::from_be_bytes([0, hs[1], hs[2], hs[3]]) as usize
}

fn parse_body(body: &[u8]) -> Option<Hello> {
    let mut r = Reader(body);
    let legacy = r.u16()?;
    r.take(32)?; // random
    let sid = r.vec8()?;
    if sid.len() > 32 {
        return None;
    }
    let suites = u16_list(r.vec16()?)?;
    if suites.is_empty() {
        return None;
    }
    r.vec8()?; // compression methods
    let mut h = Hello {
        suites,
        ..Hello::default()
    };
    let mut supported_versions = None;
    if !r.0.is_empty() {
        let mut exts = Reader(r.vec16()?);
        if !r.0.is_empty() {
            return None;
        }
        while !exts.0.is_empty() {
            let ty = exts.u16()?;
            let data = exts.vec16()?;
            let mut d = Reader(data);
            match ty {
                EXT_SERVER_NAME => {
                    let mut list = Reader(d.vec16()?);
                    while !list.0.is_empty() {
                        let kind = list.u8()?;
                        let name = list.vec16()?;
                        if kind == 0 && h.sni.is_none() {
                            let s = std::str::from_utf8(name).ok()?;
                            h.sni = Some(s.trim_end_matches('.').to_ascii_lowercase());
                        }
                    }
                }
                EXT_SIGNATURE_ALGORITHMS => h.sig_schemes = u16_list(d.vec16()?)?,
                EXT_SUPPORTED_GROUPS => h.groups = u16_list(d.vec16()?)?,
                EXT_SUPPORTED_VERSIONS => supported_versions = Some(u16_list(d.vec8()?)?),
                EXT_ALPN => {
                    // ProtocolNameList: at least one name, none empty (RFC 7301, 3.1).
                    let mut list = Reader(d.vec16()?);
                    let mut names = Vec::new();
                    while !list.0.is_empty() {
                        let name = list.vec8()?;
                        if name.is_empty() {
                            return None;
                        }
                        names.push(name.to_vec());
                    }
                    if names.is_empty() {
                        return None;
                    }
                    h.alpn = Some(names);
                }
                _ => {}
            }
        }
    }
    h.versions = match supported_versions {
        Some(v) => v,
        // Without the extension the client offers every version up to legacy_version.
        None => (0x0300..=legacy.min(0x0303)).rev().collect(),
    };
    Some(h)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds a ClientHello record: versions via supported_versions when `sv` is set.
    pub fn build(suites: &[u16], sni: Option<&str>, sv: Option<&[u16]>, sigs: &[u16]) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7u8; 32]);
        body.push(0);
        body.extend_from_slice(&((suites.len() * 2) as u16).to_be_bytes());
        for s in suites {
            body.extend_from_slice(&s.to_be_bytes());
        }
        body.extend_from_slice(&[1, 0]);
        let mut exts = Vec::new();
        if let Some(name) = sni {
            let n = name.as_bytes();
            exts.extend_from_slice(&0u16.to_be_bytes());
            exts.extend_from_slice(&((n.len() + 5) as u16).to_be_bytes());
            exts.extend_from_slice(&((n.len() + 3) as u16).to_be_bytes());
            exts.push(0);
            exts.extend_from_slice(&(n.len() as u16).to_be_bytes());
            exts.extend_from_slice(n);
        }
        if let Some(v) = sv {
            exts.extend_from_slice(&43u16.to_be_bytes());
            exts.extend_from_slice(&((v.len() * 2 + 1) as u16).to_be_bytes());
            exts.push((v.len() * 2) as u8);
            for x in v {
                exts.extend_from_slice(&x.to_be_bytes());
            }
        }
        exts.extend_from_slice(&13u16.to_be_bytes());
        exts.extend_from_slice(&((sigs.len() * 2 + 2) as u16).to_be_bytes());
        exts.extend_from_slice(&((sigs.len() * 2) as u16).to_be_bytes());
        for x in sigs {
            exts.extend_from_slice(&x.to_be_bytes());
        }
        body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        body.extend_from_slice(&exts);
        let mut hs = vec![1];
        hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend_from_slice(&body);
        let mut rec = vec![22, 3, 1];
        rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    #[test]
    fn parses_hello() {
        let rec = build(
            &[0x1301, 0x0a0a, 0xc02f],
            Some("Www.Example.com."),
            Some(&[0x3a3a, 0x0304, 0x0303]),
            &[0x0804],
        );
        let Peek::Hello(h) = peek(&rec) else {
            panic!("not parsed")
        };
        assert_eq!(h.suites, vec![0x1301, 0xc02f]);
        assert_eq!(h.versions, vec![0x0304, 0x0303]);
        assert_eq!(h.sni.as_deref(), Some("www.example.com"));
        assert_eq!(h.sig_schemes, vec![0x0804]);
        // Every strict prefix is incomplete, never invalid.
        for n in 0..rec.len() {
            assert_eq!(peek(&rec[..n]), Peek::Incomplete, "prefix {n}");
        }
    }

    /// `build`'s record with an ALPN extension (`names`, in this order) added.
    pub fn with_alpn(rec: &[u8], names: &[&[u8]]) -> Vec<u8> {
        let mut list = Vec::new();
        for n in names {
            list.push(n.len() as u8);
            list.extend_from_slice(n);
        }
        let mut body = (list.len() as u16).to_be_bytes().to_vec();
        body.extend_from_slice(&list);
        with_extension(rec, EXT_ALPN, &body)
    }

    /// `build`'s record with an extension of type `ty` added at the end. The record length
    /// is only right while the record stays under 64 KiB; the handshake message is.
    pub fn with_extension(rec: &[u8], ty: u16, body: &[u8]) -> Vec<u8> {
        let mut ext = ty.to_be_bytes().to_vec();
        ext.extend_from_slice(&(body.len() as u16).to_be_bytes());
        ext.extend_from_slice(body);
        // The record, handshake and extensions lengths each grow by the extension's size.
        let mut out = rec.to_vec();
        let grow = |at: usize, bytes: usize, out: &mut Vec<u8>| {
            let mut v = 0usize;
            for b in &out[at..at + bytes] {
                v = v << 8 | *b as usize;
            }
            v += ext.len();
            for i in 0..bytes {
                out[at + i] = (v >> (8 * (bytes - 1 - i))) as u8;
            }
        };
        grow(3, 2, &mut out);
        grow(6, 3, &mut out);
        // legacy_version, random, an empty session ID, then the suites and compression.
        let suites = u16::from_be_bytes([out[44], out[45]]) as usize;
        let exts_at = 46 + suites + 2;
        grow(exts_at, 2, &mut out);
        out.extend_from_slice(&ext);
        out
    }

    #[test]
    fn parses_groups() {
        let rec = build(&[0x1301], None, Some(&[0x0304]), &[0x0403]);
        let Peek::Hello(h) = peek(&rec) else {
            panic!("not parsed")
        };
        assert!(h.groups.is_empty());
        let rec = with_extension(
            &rec,
            EXT_SUPPORTED_GROUPS,
            &[0, 6, 0x2a, 0x2a, 0, 0x1d, 0, 0x17],
        );
        let Peek::Hello(h) = peek(&rec) else {
            panic!("not parsed")
        };
        assert_eq!(h.groups, vec![0x001d, 0x0017]);
        let odd = with_extension(&rec, EXT_SUPPORTED_GROUPS, &[0, 1, 0]);
        assert!(matches!(peek(&odd), Peek::Invalid(_)));
    }

    #[test]
    fn parses_alpn() {
        let rec = build(&[0x1301], None, Some(&[0x0304]), &[0x0403]);
        let Peek::Hello(h) = peek(&rec) else {
            panic!("not parsed")
        };
        assert_eq!(h.alpn, None);
        let rec = with_alpn(&rec, &[b"h2", b"http/1.1"]);
        let Peek::Hello(h) = peek(&rec) else {
            panic!("not parsed")
        };
        assert_eq!(h.alpn, Some(vec![b"h2".to_vec(), b"http/1.1".to_vec()]));
        assert_eq!(h.suites, vec![0x1301]);
        for n in 0..rec.len() {
            assert_eq!(peek(&rec[..n]), Peek::Incomplete, "prefix {n}");
        }
        // An empty list or an empty name is malformed (RFC 7301).
        let base = build(&[0x1301], None, Some(&[0x0304]), &[0x0403]);
        assert!(matches!(peek(&with_alpn(&base, &[])), Peek::Invalid(_)));
        assert!(matches!(
            peek(&with_alpn(&base, &[b"h2", b""])),
            Peek::Invalid(_)
        ));
    }

    #[test]
    fn split_records_and_legacy_versions() {
        let rec = build(&[0x002f], None, None, &[]);
        let hs = &rec[5..];
        let mut two = vec![22, 3, 1, 0, 10];
        two.extend_from_slice(&hs[..10]);
        two.extend_from_slice(&[22, 3, 1]);
        two.extend_from_slice(&((hs.len() - 10) as u16).to_be_bytes());
        two.extend_from_slice(&hs[10..]);
        let Peek::Hello(h) = peek(&two) else {
            panic!("not parsed")
        };
        assert_eq!(h.versions, vec![0x0303, 0x0302, 0x0301, 0x0300]);
        assert_eq!(h.suites, vec![0x002f]);
    }

    #[test]
    fn rejects_garbage() {
        assert!(matches!(peek(b"GET / HTTP/1.1\r\n"), Peek::Invalid(_)));
        assert!(matches!(peek(&[22, 3, 1, 0, 0]), Peek::Invalid(_)));
        assert!(matches!(
            peek(&[22, 3, 1, 0, 4, 2, 0, 0, 0]),
            Peek::Invalid(_)
        ));
        assert!(matches!(
            peek(&[22, 3, 1, 0, 4, 1, 0, 0, 0]),
            Peek::Invalid(_)
        ));
        // Mutations never panic, with and without an ALPN extension.
        let rec = build(&[0x1301], Some("a"), Some(&[0x0304]), &[0x0403]);
        for rec in [rec.clone(), with_alpn(&rec, &[b"h2", b"http/1.1"])] {
            for i in 0..rec.len() {
                for v in [0u8, 1, 0xff, 0x80] {
                    let mut m = rec.clone();
                    m[i] = v;
                    let _ = peek(&m);
                }
                let _ = peek(&rec[..i]);
            }
        }
    }
}
