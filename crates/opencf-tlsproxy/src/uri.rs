//! PKCS#11 URIs (RFC 7512), the subset used to name keys and certificates:
//! `pkcs11:token=…;object=…;id=%01%02;type=private|cert?pin-source=file:/path`.

use crate::Result;

/// A parsed PKCS#11 URI.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pkcs11Uri {
    pub token: Option<String>,
    pub object: Option<String>,
    pub id: Option<Vec<u8>>,
    pub kind: Option<String>,
    pub pin_source: Option<String>,
    pub pin_value: Option<String>,
}

fn decode(s: &str) -> Result<Vec<u8>> {
    // "a%20b" splits into "a" and "20b": every piece after the first starts with two hex digits.
    let mut pieces = s.split('%');
    let mut out = pieces.next().unwrap_or("").as_bytes().to_vec();
    for piece in pieces {
        let byte = piece
            .get(..2)
            .filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .ok_or_else(|| format!("bad percent escape in {s:?}"))?;
        out.push(byte);
        out.extend_from_slice(&piece.as_bytes()[2..]);
    }
    Ok(out)
}

fn decode_str(s: &str) -> Result<String> {
    String::from_utf8(decode(s)?).map_err(|_| format!("{s:?} is not UTF-8"))
}

/// Percent-encodes everything but unreserved characters (RFC 3986).
pub fn encode(s: &[u8]) -> String {
    encode_except(s, b"")
}

/// Percent-encodes everything but unreserved characters and those of `keep`.
fn encode_except(s: &[u8], keep: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for &c in s {
        match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(c as char)
            }
            _ if keep.contains(&c) => out.push(c as char),
            _ => out.push_str(&format!("%{c:02X}")),
        }
    }
    out
}

impl Pkcs11Uri {
    pub fn parse(s: &str) -> Result<Self> {
        let rest = s
            .strip_prefix("pkcs11:")
            .ok_or_else(|| format!("{s:?} is not a pkcs11: URI"))?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let mut u = Pkcs11Uri::default();
        for attr in path.split(';').filter(|a| !a.is_empty()) {
            let (k, v) = attr
                .split_once('=')
                .ok_or_else(|| format!("{s:?}: attribute {attr:?} has no value"))?;
            match k {
                "token" => u.token = Some(decode_str(v)?),
                "object" => u.object = Some(decode_str(v)?),
                "id" => u.id = Some(decode(v)?),
                "type" => u.kind = Some(decode_str(v)?),
                // Other path attributes (manufacturer, serial, model, library-*) do not
                // narrow the search here; they are accepted and ignored.
                _ => {}
            }
        }
        for attr in query.split('&').filter(|a| !a.is_empty()) {
            let (k, v) = attr.split_once('=').unwrap_or((attr, ""));
            match k {
                "pin-source" => u.pin_source = Some(decode_str(v)?),
                "pin-value" => u.pin_value = Some(decode_str(v)?),
                _ => {}
            }
        }
        if u.object.is_none() && u.id.is_none() {
            return Err(format!("{s:?}: an object= or id= attribute is needed"));
        }
        Ok(u)
    }

    /// The path attributes as a URI names them (`token=…;object=…`), without the PIN.
    fn path_attributes(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(t) = &self.token {
            out.push(format!("token={}", encode(t.as_bytes())));
        }
        if let Some(o) = &self.object {
            out.push(format!("object={}", encode(o.as_bytes())));
        }
        if let Some(id) = &self.id {
            out.push(format!("id={}", encode_all(id)));
        }
        if let Some(k) = &self.kind {
            out.push(format!("type={}", encode(k.as_bytes())));
        }
        out
    }

    /// The URI of an object by token label, object label and type (its `Display` form).
    pub fn format(token: &str, object: &str, kind: &str) -> String {
        Pkcs11Uri {
            token: Some(token.into()),
            object: Some(object.into()),
            kind: Some(kind.into()),
            ..Pkcs11Uri::default()
        }
        .to_string()
    }
}

/// Percent-encodes every byte, as a URI writes an `id`.
pub fn encode_all(s: &[u8]) -> String {
    s.iter().map(|c| format!("%{c:02X}")).collect()
}

/// The URI in `pkcs11:` form, for messages: the attributes that name the object and the
/// `pin-source`, never a `pin-value`.
impl std::fmt::Display for Pkcs11Uri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pkcs11:{}", self.path_attributes().join(";"))?;
        if let Some(p) = &self.pin_source {
            // ':' and '/' may stand in a query value (RFC 7512's pk11-qchar).
            write!(f, "?pin-source={}", encode_except(p.as_bytes(), b":/"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_format() {
        let u = Pkcs11Uri::parse(
            "pkcs11:token=OpenCF%20Metaslot;object=web;id=%01%ff;type=private?pin-source=file:/p",
        )
        .unwrap();
        assert_eq!(u.token.as_deref(), Some("OpenCF Metaslot"));
        assert_eq!(u.object.as_deref(), Some("web"));
        assert_eq!(u.id.as_deref(), Some(&[1u8, 0xff][..]));
        assert_eq!(u.kind.as_deref(), Some("private"));
        assert_eq!(u.pin_source.as_deref(), Some("file:/p"));
        let s = Pkcs11Uri::format("OpenCF Metaslot", "a b", "cert");
        assert_eq!(s, "pkcs11:token=OpenCF%20Metaslot;object=a%20b;type=cert");
        assert_eq!(Pkcs11Uri::parse(&s).unwrap().object.as_deref(), Some("a b"));
        assert!(Pkcs11Uri::parse("pkcs11:token=x").is_err());
        assert!(Pkcs11Uri::parse("file:x").is_err());
        assert!(Pkcs11Uri::parse("pkcs11:object=%zz").is_err());
        // RFC 3986: '%' and two hex digits, no sign.
        assert!(Pkcs11Uri::parse("pkcs11:object=%+f").is_err());
    }

    #[test]
    fn display_is_the_uri_without_its_pin() {
        let text = "pkcs11:token=OpenCF%20Metaslot;object=web%20key;id=%01%FF;type=private";
        assert_eq!(Pkcs11Uri::parse(text).unwrap().to_string(), text);
        let with_pin = Pkcs11Uri::parse(&format!("{text}?pin-value=secret")).unwrap();
        assert_eq!(with_pin.to_string(), text);
        let sourced = Pkcs11Uri::parse("pkcs11:object=k?pin-source=file:/etc/p%20in").unwrap();
        assert_eq!(
            sourced.to_string(),
            "pkcs11:object=k?pin-source=file:/etc/p%20in"
        );
        assert_eq!(Pkcs11Uri::parse(&sourced.to_string()).unwrap(), sourced);
    }
}
