//! Naming objects (label, ID, class, URI), finding them and describing them.

use crate::error::{Ctx, Error, Result};
use crate::uri::{object_uri, Pkcs11Uri};
use crate::util::{hex, shown_label, unhex};
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::Session;
use serde_json::{json, Map, Value};

/// CKK_CHACHA20, which cryptoki 0.12 has no name for.
pub const CKK_CHACHA20: u64 = 0x33;
pub const CKA_KEY_TYPE: u64 = 0x100;

/// Which objects a command acts on.
#[derive(Debug, Clone, Default)]
pub struct Selector {
    /// CKA_LABEL as stored: bytes, which need not be UTF-8.
    pub label: Option<Vec<u8>>,
    pub id: Option<Vec<u8>>,
    pub class: Option<ObjectClass>,
}

pub fn class_from_name(name: &str) -> Result<ObjectClass> {
    Ok(match name {
        "private" | "private-key" => ObjectClass::PRIVATE_KEY,
        "public" | "public-key" => ObjectClass::PUBLIC_KEY,
        "cert" | "certificate" => ObjectClass::CERTIFICATE,
        "secret-key" | "secret" => ObjectClass::SECRET_KEY,
        "data" => ObjectClass::DATA,
        other => {
            return Err(Error::Usage(format!(
                "unknown object type '{other}' (private, public, cert, secret-key, data)"
            )))
        }
    })
}

/// The classes `list --objtype` names: `all` (no restriction), `keys` or one class.
pub fn objtype_classes(name: &str) -> Result<Vec<ObjectClass>> {
    Ok(match name {
        "all" => vec![],
        "keys" => vec![
            ObjectClass::PRIVATE_KEY,
            ObjectClass::PUBLIC_KEY,
            ObjectClass::SECRET_KEY,
        ],
        other => vec![class_from_name(other).map_err(|_| {
            Error::Usage(format!(
                "unknown object type '{other}' (keys, private, public, cert, secret-key, data, all)"
            ))
        })?],
    })
}

pub fn class_name(c: ObjectClass) -> &'static str {
    match c {
        ObjectClass::PRIVATE_KEY => "private",
        ObjectClass::PUBLIC_KEY => "public",
        ObjectClass::CERTIFICATE => "cert",
        ObjectClass::SECRET_KEY => "secret-key",
        ObjectClass::DATA => "data",
        _ => "other",
    }
}

/// The class in words, for messages: "private key", "certificate", ...
pub fn class_noun(c: ObjectClass) -> &'static str {
    match c {
        ObjectClass::PRIVATE_KEY => "private key",
        ObjectClass::PUBLIC_KEY => "public key",
        ObjectClass::CERTIFICATE => "certificate",
        ObjectClass::SECRET_KEY => "secret key",
        ObjectClass::DATA => "data object",
        _ => "object",
    }
}

impl Selector {
    /// From the --uri, --label, --id and --type options; the URI wins where both name a field.
    pub fn new(
        uri: Option<&str>,
        label: Option<&str>,
        id: Option<&str>,
        kind: Option<&str>,
    ) -> Result<Selector> {
        let mut sel = Selector {
            label: label.map(|l| l.as_bytes().to_vec()),
            id: id.map(unhex).transpose()?,
            class: kind.map(class_from_name).transpose()?,
        };
        if let Some(u) = uri {
            let u = Pkcs11Uri::parse(u)?;
            if u.object.is_some() {
                sel.label = u.object;
            }
            if u.id.is_some() {
                sel.id = u.id;
            }
            if let Some(k) = u.kind {
                sel.class = Some(class_from_name(&k)?);
            }
        }
        Ok(sel)
    }

    pub fn is_empty(&self) -> bool {
        self.label.is_none() && self.id.is_none()
    }

    pub fn template(&self) -> Vec<Attribute> {
        let mut t = Vec::new();
        if let Some(l) = &self.label {
            t.push(Attribute::Label(l.clone()));
        }
        if let Some(id) = &self.id {
            t.push(Attribute::Id(id.clone()));
        }
        if let Some(c) = self.class {
            t.push(Attribute::Class(c));
        }
        t
    }

    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(c) = self.class {
            parts.push(format!("type={}", class_name(c)));
        }
        if let Some(l) = &self.label {
            parts.push(format!("label='{}'", shown_label(l)));
        }
        if let Some(id) = &self.id {
            parts.push(format!("id={}", hex(id)));
        }
        if parts.is_empty() {
            "any object".into()
        } else {
            parts.join(" ")
        }
    }
}

/// The class and label a template gives its object, where it gives both.
pub fn class_and_label(t: &[Attribute]) -> Option<(ObjectClass, String)> {
    let class = t.iter().find_map(|a| match a {
        Attribute::Class(c) => Some(*c),
        _ => None,
    })?;
    let label = t.iter().find_map(|a| match a {
        Attribute::Label(l) => Some(String::from_utf8_lossy(l).into_owned()),
        _ => None,
    })?;
    Some((class, label))
}

/// Refuses new objects whose label an object of the same class on the token already has, or
/// that two of them would share: a label is how URIs, `tlsproxycfg` and these commands name
/// a key or certificate, and one that names two objects of a class breaks them all.
/// `ways` says how to go on.
/// Labels are bytes, compared as stored (CKA_LABEL need not be UTF-8).
pub fn refuse_taken_labels(s: &Session, new: &[(ObjectClass, Vec<u8>)], ways: &str) -> Result<()> {
    for (i, (class, raw)) in new.iter().enumerate() {
        let what = class_noun(*class);
        let label = shown_label(raw);
        if new[..i].contains(&(*class, raw.clone())) {
            return Err(Error::LabelTaken(format!(
                "two new {what}s would both be labelled '{label}': {ways}"
            )));
        }
        let sel = Selector {
            label: Some(raw.clone()),
            id: None,
            class: Some(*class),
        };
        if let Some(h) = find(s, &sel)?.first() {
            let a = read(s, *h, &[AttributeType::Id])?;
            let id = match bytes_attr(&a, AttributeType::Id) {
                Some(id) if !id.is_empty() => format!(" (id {})", hex(&id)),
                _ => String::new(),
            };
            return Err(Error::LabelTaken(format!(
                "the token already has a {what} labelled '{label}'{id}; \
                 a second one would make the label name both: {ways}"
            )));
        }
    }
    Ok(())
}

pub fn find(s: &Session, sel: &Selector) -> Result<Vec<ObjectHandle>> {
    s.find_objects(&sel.template())
        .ctx(|| format!("searching for {}", sel.describe()))
}

/// Exactly one object, else NotFound or Ambiguous naming the selector.
pub fn find_one(s: &Session, sel: &Selector) -> Result<ObjectHandle> {
    if sel.is_empty() {
        return Err(Error::Usage(
            "name the object with --label, --id or --uri".into(),
        ));
    }
    let found = find(s, sel)?;
    match found.len() {
        0 => Err(Error::NotFound(format!(
            "no object matches {}",
            sel.describe()
        ))),
        1 => Ok(found[0]),
        n => Err(Error::Ambiguous(format!(
            "{n} objects match {}; narrow it with --type or --id",
            sel.describe()
        ))),
    }
}

/// Reads attributes; those the object lacks or hides are left out. When cryptoki cannot
/// represent a value (a key type it has no name for), the others are read one by one.
pub fn read(s: &Session, h: ObjectHandle, types: &[AttributeType]) -> Result<Vec<Attribute>> {
    match s.get_attributes(h, types) {
        Ok(v) => Ok(v),
        Err(cryptoki::error::Error::Pkcs11(rv, f)) => Err(Error::Token(
            "reading attributes".into(),
            cryptoki::error::Error::Pkcs11(rv, f),
        )),
        Err(_) => Ok(types
            .iter()
            .filter_map(|t| s.get_attributes(h, &[*t]).ok())
            .flatten()
            .collect()),
    }
}

pub fn bytes_attr(attrs: &[Attribute], t: AttributeType) -> Option<Vec<u8>> {
    attrs.iter().find_map(|a| match (a, t) {
        (Attribute::Label(v), AttributeType::Label)
        | (Attribute::Id(v), AttributeType::Id)
        | (Attribute::Value(v), AttributeType::Value)
        | (Attribute::Modulus(v), AttributeType::Modulus)
        | (Attribute::PublicExponent(v), AttributeType::PublicExponent)
        | (Attribute::EcParams(v), AttributeType::EcParams)
        | (Attribute::EcPoint(v), AttributeType::EcPoint)
        | (Attribute::PublicKeyInfo(v), AttributeType::PublicKeyInfo)
        | (Attribute::Subject(v), AttributeType::Subject) => Some(v.clone()),
        _ => None,
    })
}

pub fn bool_attr(attrs: &[Attribute], t: AttributeType) -> Option<bool> {
    attrs.iter().find_map(|a| {
        if a.attribute_type() != t {
            return None;
        }
        match a {
            Attribute::Token(b)
            | Attribute::Private(b)
            | Attribute::Modifiable(b)
            | Attribute::Local(b)
            | Attribute::Sensitive(b)
            | Attribute::Extractable(b)
            | Attribute::AlwaysSensitive(b)
            | Attribute::NeverExtractable(b)
            | Attribute::Encrypt(b)
            | Attribute::Decrypt(b)
            | Attribute::Sign(b)
            | Attribute::Verify(b)
            | Attribute::SignRecover(b)
            | Attribute::VerifyRecover(b)
            | Attribute::Wrap(b)
            | Attribute::Unwrap(b)
            | Attribute::Derive(b)
            | Attribute::Encapsulate(b)
            | Attribute::Decapsulate(b)
            | Attribute::Trusted(b)
            | Attribute::Copyable(b)
            | Attribute::Destroyable(b) => Some(*b),
            _ => None,
        }
    })
}

pub fn class_of(s: &Session, h: ObjectHandle) -> Result<ObjectClass> {
    read(s, h, &[AttributeType::Class])?
        .into_iter()
        .find_map(|a| match a {
            Attribute::Class(c) => Some(c),
            _ => None,
        })
        .ok_or_else(|| {
            Error::TokenState("its CKA_CLASS cannot be read (missing or malformed)".into())
        })
}

/// CKA_KEY_TYPE as a number, also for types cryptoki cannot name (ChaCha20).
pub fn key_type_raw(s: &Session, h: ObjectHandle) -> Option<u64> {
    match s.get_attributes(h, &[AttributeType::KeyType]) {
        Ok(v) => v.into_iter().find_map(|a| match a {
            Attribute::KeyType(k) => Some(*k),
            _ => None,
        }),
        Err(_) => {
            // cryptoki rejects the value when reading it, not when searching with it.
            let probe = [Attribute::VendorDefined((
                AttributeType::VendorDefined(CKA_KEY_TYPE),
                CKK_CHACHA20.to_ne_bytes().to_vec(),
            ))];
            s.find_objects(&probe)
                .ok()
                .filter(|v| v.contains(&h))
                .map(|_| CKK_CHACHA20)
        }
    }
}

pub fn key_type_name(k: u64) -> String {
    let known = [
        (KeyType::RSA, "RSA"),
        (KeyType::EC, "EC"),
        (KeyType::EC_EDWARDS, "EC_EDWARDS"),
        (KeyType::EC_MONTGOMERY, "EC_MONTGOMERY"),
        (KeyType::AES, "AES"),
        (KeyType::DES3, "DES3"),
        (KeyType::GENERIC_SECRET, "GENERIC_SECRET"),
        (KeyType::ML_DSA, "ML_DSA"),
        (KeyType::ML_KEM, "ML_KEM"),
        (KeyType::DSA, "DSA"),
        (KeyType::DH, "DH"),
    ];
    if k == CKK_CHACHA20 {
        return "CHACHA20".into();
    }
    known
        .iter()
        .find(|(t, _)| **t == k)
        .map(|(_, n)| n.to_string())
        .unwrap_or_else(|| format!("0x{k:x}"))
}

/// The curve an EC_PARAMS value names.
pub fn curve_name(params: &[u8]) -> String {
    const CURVES: &[(&[u8], &str)] = &[
        (
            &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07],
            "P-256",
        ),
        (&[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22], "P-384"),
        (&[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23], "P-521"),
        (&[0x06, 0x03, 0x2b, 0x65, 0x70], "Ed25519"),
        (&[0x06, 0x03, 0x2b, 0x65, 0x71], "Ed448"),
        (&[0x06, 0x03, 0x2b, 0x65, 0x6e], "X25519"),
        (&[0x06, 0x03, 0x2b, 0x65, 0x6f], "X448"),
    ];
    if let Some((_, n)) = CURVES.iter().find(|(d, _)| *d == params) {
        return n.to_string();
    }
    if params.first() == Some(&0x13) && params.len() > 2 {
        let name = String::from_utf8_lossy(&params[2..]).to_string();
        return match name.as_str() {
            "edwards25519" => "Ed25519".into(),
            "edwards448" => "Ed448".into(),
            "curve25519" => "X25519".into(),
            "curve448" => "X448".into(),
            _ => name,
        };
    }
    format!("params {}", hex(params))
}

const FLAGS: &[(AttributeType, &str)] = &[
    (AttributeType::Token, "token"),
    (AttributeType::Private, "private"),
    (AttributeType::Modifiable, "modifiable"),
    (AttributeType::Local, "local"),
    (AttributeType::Sensitive, "sensitive"),
    (AttributeType::Extractable, "extractable"),
    (AttributeType::AlwaysSensitive, "always_sensitive"),
    (AttributeType::NeverExtractable, "never_extractable"),
    (AttributeType::Encrypt, "encrypt"),
    (AttributeType::Decrypt, "decrypt"),
    (AttributeType::Sign, "sign"),
    (AttributeType::Verify, "verify"),
    (AttributeType::SignRecover, "sign_recover"),
    (AttributeType::VerifyRecover, "verify_recover"),
    (AttributeType::Wrap, "wrap"),
    (AttributeType::Unwrap, "unwrap"),
    (AttributeType::Derive, "derive"),
    (AttributeType::Encapsulate, "encapsulate"),
    (AttributeType::Decapsulate, "decapsulate"),
];

/// Everything `list` shows about one object, as JSON (the human form is made from it).
pub fn describe(s: &Session, h: ObjectHandle, token: &str, values: bool) -> Result<Value> {
    let class = class_of(s, h)?;
    let mut types = vec![AttributeType::Label, AttributeType::Id];
    let is_key = matches!(
        class,
        ObjectClass::PRIVATE_KEY | ObjectClass::PUBLIC_KEY | ObjectClass::SECRET_KEY
    );
    types.extend(FLAGS.iter().map(|(t, _)| *t));
    if is_key {
        types.extend([
            AttributeType::Modulus,
            AttributeType::PublicExponent,
            AttributeType::EcParams,
            AttributeType::ValueLen,
            AttributeType::ParameterSet,
        ]);
        if class == ObjectClass::PUBLIC_KEY {
            types.push(AttributeType::EcPoint);
        }
    }
    if class == ObjectClass::CERTIFICATE || (values && class == ObjectClass::SECRET_KEY) {
        types.push(AttributeType::Value);
    }
    let attrs = read(s, h, &types)?;
    let raw_label = bytes_attr(&attrs, AttributeType::Label);
    let label = raw_label
        .as_ref()
        .map(|l| String::from_utf8_lossy(l).to_string());
    let id = bytes_attr(&attrs, AttributeType::Id).unwrap_or_default();
    let mut m = Map::new();
    m.insert("class".into(), json!(class_name(class)));
    m.insert("label".into(), json!(label));
    m.insert("id".into(), json!(hex(&id)));
    m.insert(
        "uri".into(),
        json!(object_uri(
            token,
            raw_label.as_deref(),
            &id,
            class_name(class)
        )),
    );
    let mut flags = Map::new();
    for (t, name) in FLAGS {
        if let Some(b) = bool_attr(&attrs, *t) {
            flags.insert(name.to_string(), json!(b));
        }
    }
    m.insert("flags".into(), Value::Object(flags));
    if is_key {
        let kt = key_type_raw(s, h);
        m.insert("key_type".into(), json!(kt.map(key_type_name)));
        let modulus = bytes_attr(&attrs, AttributeType::Modulus);
        if let Some(n) = &modulus {
            m.insert("bits".into(), json!(bits(n)));
            m.insert("modulus".into(), json!(hex(n)));
        }
        if let Some(e) = bytes_attr(&attrs, AttributeType::PublicExponent) {
            m.insert("public_exponent".into(), json!(hex(&e)));
        }
        if let Some(p) = bytes_attr(&attrs, AttributeType::EcParams) {
            m.insert("curve".into(), json!(curve_name(&p)));
        }
        if let Some(p) = bytes_attr(&attrs, AttributeType::EcPoint) {
            m.insert("ec_point".into(), json!(hex(&p)));
        }
        for a in &attrs {
            match a {
                Attribute::ValueLen(l) => {
                    let l: u64 = (*l).into();
                    m.insert("bits".into(), json!(l * 8));
                }
                Attribute::ParameterSet(p) => {
                    let v: u64 = u64::from(**p);
                    let name = match (kt.map(key_type_name).as_deref(), v) {
                        (Some("ML_DSA"), 1) => "ML-DSA-44",
                        (Some("ML_DSA"), 2) => "ML-DSA-65",
                        (Some("ML_DSA"), 3) => "ML-DSA-87",
                        (Some("ML_KEM"), 1) => "ML-KEM-512",
                        (Some("ML_KEM"), 2) => "ML-KEM-768",
                        (Some("ML_KEM"), 3) => "ML-KEM-1024",
                        _ => "",
                    };
                    m.insert("parameter_set".into(), json!(name));
                }
                _ => {}
            }
        }
        if values && class == ObjectClass::SECRET_KEY {
            if let Some(v) = bytes_attr(&attrs, AttributeType::Value) {
                m.insert("value".into(), json!(hex(&v)));
            }
        }
    }
    if class == ObjectClass::CERTIFICATE {
        if let Some(der) = bytes_attr(&attrs, AttributeType::Value) {
            if let Ok(c) = openssl::x509::X509::from_der(&der) {
                m.insert(
                    "subject".into(),
                    json!(crate::x509::name_string(c.subject_name())),
                );
                m.insert(
                    "issuer".into(),
                    json!(crate::x509::name_string(c.issuer_name())),
                );
                let serial = c.serial_number().to_bn().and_then(|b| b.to_hex_str());
                if let Ok(sn) = serial {
                    m.insert("serial".into(), json!(sn.to_string()));
                }
                m.insert("not_after".into(), json!(c.not_after().to_string()));
            }
        }
    }
    Ok(Value::Object(m))
}

fn bits(n: &[u8]) -> usize {
    let n: Vec<u8> = n.iter().copied().skip_while(|b| *b == 0).collect();
    match n.first() {
        Some(b) => n.len() * 8 - b.leading_zeros() as usize,
        None => 0,
    }
}

/// One line per object for humans.
pub fn human_line(v: &Value) -> String {
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("");
    let mut line = format!("{:<10} label={:?} id={}", s("class"), s("label"), s("id"));
    if let Some(kt) = v.get("key_type").and_then(Value::as_str) {
        line += &format!(" type={kt}");
    }
    if let Some(b) = v.get("bits").and_then(Value::as_u64) {
        line += &format!(" bits={b}");
    }
    for k in ["curve", "parameter_set", "subject", "issuer", "not_after"] {
        if let Some(x) = v.get(k).and_then(Value::as_str) {
            line += &format!(" {k}={x:?}");
        }
    }
    // Present only when `list --values` asked for it and the key is not sensitive.
    if let Some(x) = v.get("value").and_then(Value::as_str) {
        line += &format!(" value={x}");
    }
    if let Some(f) = v.get("flags").and_then(Value::as_object) {
        let on: Vec<&str> = f
            .iter()
            .filter(|(_, b)| b.as_bool() == Some(true))
            .map(|(k, _)| k.as_str())
            .collect();
        line += &format!("\n           flags: {}", on.join(","));
    }
    line += &format!("\n           uri: {}", s("uri"));
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_line_shows_a_revealed_value() {
        let v = json!({"class": "secret-key", "label": "sk", "id": "", "key_type": "AES",
            "bits": 128, "value": "00112233445566778899aabbccddeeff", "flags": {}, "uri": "pkcs11:"});
        assert!(
            human_line(&v).contains(" value=00112233445566778899aabbccddeeff"),
            "{}",
            human_line(&v)
        );
        let mut hidden = v.clone();
        hidden.as_object_mut().unwrap().remove("value");
        assert!(!human_line(&hidden).contains("value="));
    }

    #[test]
    fn objtype_error_lists_every_choice() {
        assert_eq!(objtype_classes("all").unwrap(), vec![]);
        assert_eq!(objtype_classes("keys").unwrap().len(), 3);
        assert_eq!(
            objtype_classes("cert").unwrap(),
            vec![ObjectClass::CERTIFICATE]
        );
        let e = objtype_classes("bogus").unwrap_err();
        assert_eq!(e.exit_code(), crate::error::EXIT_USAGE);
        assert!(
            e.to_string()
                .ends_with("(keys, private, public, cert, secret-key, data, all)"),
            "{e}"
        );
    }
}
