//! PKCS#11 URIs (RFC 7512), the subset that names tokens and objects.

use crate::error::{Error, Result};
use crate::util::shown_label;

#[derive(Debug, Default, Clone)]
pub struct Pkcs11Uri {
    pub token: Option<String>,
    /// The label, percent-decoded: bytes, as CKA_LABEL need not be UTF-8.
    pub object: Option<Vec<u8>>,
    pub id: Option<Vec<u8>>,
    pub kind: Option<String>,
    pub slot_id: Option<u64>,
}

pub fn percent_decode(s: &str) -> Result<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = s
                .get(i + 1..i + 3)
                .filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    Error::Usage(format!("bad percent escape in '{}'", shown_label(b)))
                })?;
            out.push(h);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// Escapes everything but RFC 3986 unreserved characters.
pub fn percent_encode(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&c| {
            if c.is_ascii_alphanumeric() || b"-._~".contains(&c) {
                (c as char).to_string()
            } else {
                format!("%{c:02X}")
            }
        })
        .collect()
}

fn text(v: &str) -> Result<String> {
    String::from_utf8(percent_decode(v)?).map_err(|_| {
        Error::Usage(format!(
            "'{}' is not UTF-8 after percent-decoding",
            shown_label(v.as_bytes())
        ))
    })
}

impl Pkcs11Uri {
    pub fn parse(given: &str) -> Result<Pkcs11Uri> {
        // The URI as messages show it (on one line, cut).
        let uri = &shown_label(given.as_bytes());
        let rest = given
            .strip_prefix("pkcs11:")
            .ok_or_else(|| Error::Usage(format!("'{uri}' is not a PKCS#11 URI (pkcs11:…)")))?;
        // The query part (pin-source, module-path, ...) is not used.
        let path = rest.split('?').next().unwrap_or("");
        let mut u = Pkcs11Uri::default();
        for attr in path.split(';').filter(|a| !a.is_empty()) {
            let (k, v) = attr.split_once('=').ok_or_else(|| {
                Error::Usage(format!(
                    "'{}' in '{uri}' has no '='",
                    shown_label(attr.as_bytes())
                ))
            })?;
            match k {
                "token" => u.token = Some(text(v)?),
                "object" => u.object = Some(percent_decode(v)?),
                "id" => u.id = Some(percent_decode(v)?),
                "type" => {
                    let t = text(v)?;
                    if !["private", "public", "cert", "secret-key", "data"].contains(&t.as_str()) {
                        return Err(Error::Usage(format!(
                            "unknown object type '{}' in '{uri}'",
                            shown_label(t.as_bytes())
                        )));
                    }
                    u.kind = Some(t);
                }
                "slot-id" => {
                    u.slot_id = Some(
                        text(v)?
                            .parse()
                            .map_err(|_| Error::Usage(format!("bad slot-id in '{uri}'")))?,
                    )
                }
                // Attributes that only narrow the token or library are accepted and ignored.
                "manufacturer"
                | "model"
                | "serial"
                | "library-manufacturer"
                | "library-description"
                | "library-version"
                | "slot-description"
                | "slot-manufacturer" => {}
                k if k.starts_with("x-") => {}
                k => {
                    return Err(Error::Usage(format!(
                        "unknown attribute '{}' in '{uri}'",
                        shown_label(k.as_bytes())
                    )))
                }
            }
        }
        Ok(u)
    }
}

/// The URI naming one object.
pub fn object_uri(token: &str, label: Option<&[u8]>, id: &[u8], kind: &str) -> String {
    let mut s = format!("pkcs11:token={}", percent_encode(token.as_bytes()));
    if let Some(l) = label {
        s += &format!(";object={}", percent_encode(l));
    }
    if !id.is_empty() {
        s += ";id=";
        s += &id.iter().map(|b| format!("%{b:02X}")).collect::<String>();
    }
    s + ";type=" + kind
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rfc7512_examples() {
        let u = Pkcs11Uri::parse("pkcs11:token=The%20Software%20PKCS%2311%20Softtoken;object=my-key;id=%01%02;type=private").unwrap();
        assert_eq!(u.token.as_deref(), Some("The Software PKCS#11 Softtoken"));
        assert_eq!(u.object.as_deref(), Some(b"my-key".as_slice()));
        assert_eq!(u.id, Some(vec![1, 2]));
        assert_eq!(u.kind.as_deref(), Some("private"));
        assert!(Pkcs11Uri::parse("pkcs11:type=bogus").is_err());
        assert!(Pkcs11Uri::parse("file:x").is_err());
        assert!(Pkcs11Uri::parse("pkcs11:id=%0").is_err());
        // RFC 3986: '%' and two hex digits, no sign.
        assert!(Pkcs11Uri::parse("pkcs11:id=%+f").is_err());
    }

    #[test]
    fn round_trip() {
        let s = object_uri("A b;c", Some(b"k=1".as_slice()), &[0xab], "cert");
        let u = Pkcs11Uri::parse(&s).unwrap();
        assert_eq!(u.token.as_deref(), Some("A b;c"));
        assert_eq!(u.object.as_deref(), Some(b"k=1".as_slice()));
        assert_eq!(u.id, Some(vec![0xab]));
    }
}
