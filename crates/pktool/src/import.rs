//! import: every key and certificate of a file, grouped by key, checked and turned into
//! object templates before anything is written, then stored all or nothing.
//!
//! A group is what shares one public key: a private key, the certificates for it and any
//! `PUBLIC KEY` of it in the file. The file's "own" groups are those with a private key, or
//! every group when the file holds no private key. `--label` names the own groups (default:
//! the PKCS#12 `friendlyName` of the group's first certificate, else its CN); other
//! certificates (a chain next to a key, the CA certificates of a PKCS#12 file) are labelled
//! with their `friendlyName`, else their CN. `--id` needs exactly one own group; every other
//! group's CKA_ID is the SHA-1 of its public value.

use crate::error::{Error, Result};
use crate::keys::{self, KeyOpts};
use crate::pin::SecretSource;
use crate::util::der_next;
use cryptoki::object::{Attribute, ObjectHandle};
use cryptoki::session::Session;
use openssl::pkcs12::Pkcs12;
use openssl::pkey::{PKey, Private, Public};
use openssl::x509::X509;
use zeroize::Zeroizing;

/// One object read from the file.
pub enum Piece {
    Private(PKey<Private>),
    Public(PKey<Public>),
    Cert(X509),
}

/// The PEM blocks of a text: (label, the block from its BEGIN line to its END line).
fn pem_blocks<'a>(text: &'a str, name: &str) -> Result<Vec<(&'a str, &'a str)>> {
    const BEGIN: &str = "-----BEGIN ";
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(BEGIN) {
        let after = &rest[start + BEGIN.len()..];
        let label_end = after
            .find("-----")
            .ok_or_else(|| Error::File(format!("{name}: a PEM BEGIN line is cut short")))?;
        let label = &after[..label_end];
        let end_line = format!("-----END {label}-----");
        let end = rest[start..].find(&end_line).ok_or_else(|| {
            Error::File(format!("{name}: the PEM block '{label}' has no END line"))
        })? + start
            + end_line.len();
        out.push((label, &rest[start..end]));
        rest = &rest[end..];
    }
    Ok(out)
}

/// The DER inside a PEM block (its base64 lines, headers such as `Proc-Type` left out), when
/// it decodes.
fn pem_body(block: &str) -> Option<Vec<u8>> {
    let b64: String = block
        .lines()
        .filter(|l| !l.starts_with("-----") && !l.contains(':') && !l.trim().is_empty())
        .map(str::trim)
        .collect();
    openssl::base64::decode_block(&b64).ok()
}

/// Every key and certificate in the file: all PEM blocks, one DER object, or a PKCS#12 file.
pub fn read_pieces(data: &[u8], name: &str, pass: &SecretSource) -> Result<Vec<Piece>> {
    let bad = |what: &str| Error::File(format!("{name}: not a valid {what}"));
    let text = String::from_utf8_lossy(data);
    let blocks = pem_blocks(&text, name)?;
    if blocks.is_empty() {
        return read_der(data, name, pass);
    }
    // One password for every encrypted block, asked once.
    let mut password: Option<Zeroizing<String>> = None;
    let mut pieces = Vec::new();
    for (label, block) in blocks {
        let b = block.as_bytes();
        let piece = match label {
            "CERTIFICATE" => Piece::Cert(X509::from_pem(b).map_err(|_| bad("certificate"))?),
            "PUBLIC KEY" | "RSA PUBLIC KEY" => Piece::Public(
                PKey::public_key_from_pem(b)
                    .or_else(|_| {
                        openssl::rsa::Rsa::public_key_from_pem_pkcs1(b).and_then(PKey::from_rsa)
                    })
                    .map_err(|_| bad("public key"))?,
            ),
            // The parameters of the EC key that follows; the key names its curve itself.
            "EC PARAMETERS" => continue,
            // Encrypted or not: OpenSSL asks for a password only when the block is encrypted
            // (a PKCS#8 or a traditional key, whatever its label and header spacing), and then
            // gets the one pktool reads, never OpenSSL's own prompt.
            l if l.ends_with("PRIVATE KEY") => {
                if let Some(der) = pem_body(block) {
                    check_iterations(&der, name)?;
                }
                let mut asked: Option<Error> = None;
                let mut encrypted = false;
                let key = PKey::private_key_from_pem_callback(b, |buf| {
                    encrypted = true;
                    if password.is_none() {
                        match pass.get(&format!("password of {name}")) {
                            Ok(p) => password = Some(p),
                            Err(e) => {
                                asked = Some(e);
                                return Err(openssl::error::ErrorStack::get());
                            }
                        }
                    }
                    let p = password
                        .as_deref()
                        .map(String::as_bytes)
                        .unwrap_or_default();
                    let room = buf
                        .get_mut(..p.len())
                        .ok_or_else(openssl::error::ErrorStack::get)?;
                    room.copy_from_slice(p);
                    Ok(p.len())
                });
                if let Some(e) = asked {
                    return Err(e);
                }
                Piece::Private(checked(
                    key.map_err(|_| match encrypted {
                        true => Error::Password(format!(
                            "{name}: cannot decrypt the private key (wrong password?)"
                        )),
                        false => bad("private key"),
                    })?,
                    name,
                )?)
            }
            l => return Err(Error::File(format!("{name}: PEM '{l}' is not importable"))),
        };
        pieces.push(piece);
    }
    if pieces.is_empty() {
        return Err(Error::File(format!(
            "{name}: no certificate or key in this PEM file"
        )));
    }
    Ok(pieces)
}

/// A private key read from a file, once OpenSSL's own check passes (`RSA_check_key`,
/// `EC_KEY_check_key`): the primes and the CRT values make the modulus and the private
/// exponent, a public point in the file is the private value's. Otherwise a file could store
/// a private key beside a public key (and certificates, grouped by it) that are not its own,
/// and a token that trusts its caller would take a key that cannot sign.
fn checked(k: PKey<Private>, name: &str) -> Result<PKey<Private>> {
    let why = |e: openssl::error::ErrorStack| {
        Error::File(format!(
            "{name}: the private key is not consistent with itself (OpenSSL's key check: {e}); \
             nothing was imported"
        ))
    };
    match k.id() {
        openssl::pkey::Id::RSA if !k.rsa()?.check_key().map_err(why)? => {
            return Err(Error::File(format!(
                "{name}: the RSA private key is not consistent with itself; nothing was imported"
            )))
        }
        openssl::pkey::Id::EC => k.ec_key()?.check_key().map_err(why)?,
        _ => {}
    }
    Ok(k)
}

fn read_der(data: &[u8], name: &str, pass: &SecretSource) -> Result<Vec<Piece>> {
    check_iterations(data, name)?;
    // One DER object per file: bytes after it (two files joined with cat) would be dropped
    // without a word, as OpenSSL's readers stop at the object's end.
    if let Ok((_, _, rest)) = der_next(data) {
        if !rest.is_empty() {
            return Err(Error::File(format!(
                "{name}: {} bytes follow the first DER object; pktool reads one DER object per \
                 file (PEM holds several); nothing was imported",
                rest.len()
            )));
        }
    }
    if let Ok(c) = X509::from_der(data) {
        return Ok(vec![Piece::Cert(c)]);
    }
    if let Ok(k) = PKey::private_key_from_der(data) {
        return Ok(vec![Piece::Private(checked(k, name)?)]);
    }
    if let Ok(k) = PKey::public_key_from_der(data) {
        return Ok(vec![Piece::Public(k)]);
    }
    let Ok(p12) = Pkcs12::from_der(data) else {
        return Err(Error::File(format!(
            "{name}: not a certificate, key or PKCS#12 file in PEM or DER"
        )));
    };
    // OpenSSL's PKCS12_parse keeps the first key and puts the certificates of any other key
    // among the CA certificates: refuse such a file rather than import part of it.
    // Counted in OpenSSL's DER re-encoding too, for a file whose outer parts are BER; a file
    // whose keys cannot be counted is refused as one with several.
    let keys = p12_key_bags(data)
        .or_else(|| p12.to_der().ok().and_then(|der| p12_key_bags(&der)))
        .ok_or_else(|| {
            Error::File(format!(
                "{name}: pktool cannot count the private keys of this PKCS#12 file (an encoding \
                 it does not follow), and imports a PKCS#12 file only when it holds one; nothing \
                 was imported. Convert it to PEM (openssl pkcs12 -in FILE -out all.pem) and \
                 import that"
            ))
        })?;
    if keys > 1 {
        return Err(Error::File(format!(
            "{name}: the PKCS#12 file holds {keys} private keys and pktool imports one key per \
             PKCS#12 file; nothing was imported. Convert it to PEM (openssl pkcs12 -in FILE \
             -out all.pem) and import that: every key is stored with its certificate"
        )));
    }
    let p = pass.get(&format!("password of {name}"))?;
    no_nul(&p, name)?;
    let parsed = p12.parse2(&p).map_err(|_| {
        Error::Password(format!(
            "{name}: cannot open the PKCS#12 file: wrong password or damaged file (MAC check failed)"
        ))
    })?;
    // A file of certificates alone (`openssl pkcs12 -export -nokeys`) is imported as any file
    // without a private key is: every certificate is its own.
    let mut pieces: Vec<Piece> = match parsed.pkey {
        Some(k) => vec![Piece::Private(checked(k, name)?)],
        None => Vec::new(),
    };
    pieces.extend(parsed.cert.map(Piece::Cert));
    pieces.extend(parsed.ca.into_iter().flatten().map(Piece::Cert));
    if pieces.is_empty() {
        return Err(Error::File(format!(
            "{name}: the PKCS#12 file holds neither a private key nor a certificate"
        )));
    }
    Ok(pieces)
}

/// A password OpenSSL takes as a C string: one with a NUL byte cannot be given to it
/// (`Error::Password`, exit 9), where the `openssl` crate would end the program.
pub fn no_nul(p: &str, name: &str) -> Result<()> {
    if p.contains('\0') {
        return Err(Error::Password(format!(
            "{name}: the password holds a NUL byte, which a PKCS#12 password cannot hold"
        )));
    }
    Ok(())
}

/// The most key-derivation or MAC iterations a file may ask for: ten million, several times
/// what current guidance asks of PBKDF2 (600,000 for SHA-256) and about as many seconds of
/// work. OpenSSL has no bound: a file asking for 2^31 kept pktool busy for many minutes.
pub const MAX_ITERATIONS: u64 = 10_000_000;

/// The OIDs whose parameters begin with (salt, iteration count): PBKDF2
/// (1.2.840.113549.1.5.12), the PKCS#5 PBES1 schemes (…1.5.1 to …1.5.11) and the PKCS#12
/// PBE schemes (1.2.840.113549.1.12.1.1 to .6), as DER without their last arc.
const OID_PKCS5_PREFIX: &[u8] = &[0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x05];
const OID_PKCS12_PBE_PREFIX: &[u8] = &[
    0x06, 0x0a, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x0c, 0x01,
];

/// The largest iteration count a DER structure asks for anywhere: in the parameters of a
/// password-based scheme (`(salt, count, …)` after one of the OIDs above), in a PKCS#12
/// file's `MacData` (`(digest, salt, count)`), and inside OCTET STRINGs that hold DER (a
/// PKCS#12 file's SafeContents). A count too long for 64 bits counts as `u64::MAX`.
pub fn most_iterations(der: &[u8]) -> u64 {
    fn count(int: &[u8]) -> u64 {
        let digits = int.iter().skip_while(|b| **b == 0).count();
        if digits > 8 {
            return u64::MAX;
        }
        int.iter().fold(0u64, |a, b| (a << 8) | u64::from(*b))
    }
    fn is_pbe_oid(e: &[u8]) -> bool {
        [OID_PKCS5_PREFIX, OID_PKCS12_PBE_PREFIX]
            .iter()
            .any(|p| e.starts_with(p) && e.len() == p.len() + 1)
    }
    /// The count of a scheme's parameters `(salt, count, …)`.
    fn params_count(params: &[u8], body: &[u8]) -> Option<u64> {
        let ps = (params[0] == 0x30).then(|| der_items(body)).flatten()?;
        match ps.as_slice() {
            [(salt, _), (it, n), ..] if salt[0] == 0x04 && it[0] == 0x02 => Some(count(n)),
            _ => None,
        }
    }
    fn walk(body: &[u8], depth: u32) -> u64 {
        let Some(kids) = der_items(body).filter(|_| depth < 16) else {
            return 0;
        };
        // (digest, salt, count): a MacData.
        let mut most = match kids.as_slice() {
            [(d, _), (s, _), (c, n), ..] if [d[0], s[0], c[0]] == [0x30, 0x04, 0x02] => count(n),
            _ => 0,
        };
        for (i, (whole, inner)) in kids.iter().enumerate() {
            if is_pbe_oid(whole) {
                if let Some(n) = kids.get(i + 1).and_then(|(p, b)| params_count(p, b)) {
                    most = most.max(n);
                }
            }
            if whole[0] & 0x20 != 0 || whole[0] == 0x04 {
                most = most.max(walk(inner, depth + 1));
            }
        }
        most
    }
    walk(der, 0)
}

/// Refuses a file that asks for more than [`MAX_ITERATIONS`] (exit 4), before OpenSSL works
/// through them.
fn check_iterations(der: &[u8], name: &str) -> Result<()> {
    let n = most_iterations(der);
    if n > MAX_ITERATIONS {
        return Err(Error::File(format!(
            "{name}: the file asks for {} key-derivation or MAC iterations, more than the \
             {MAX_ITERATIONS} pktool works through; nothing was imported",
            if n == u64::MAX {
                "more than 2^64".to_string()
            } else {
                n.to_string()
            }
        )));
    }
    Ok(())
}

const OID_DATA: &[u8] = &[
    0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x07, 0x01,
];
/// 1.2.840.113549.1.12.10.1 (PKCS#12 bag types) without its last arc.
const OID_BAG_PREFIX: &[u8] = &[
    0x06, 0x0b, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x0c, 0x0a, 0x01,
];
const KEY_BAG: u8 = 1;
const SHROUDED_KEY_BAG: u8 = 2;
const SAFE_CONTENTS_BAG: u8 = 6;

/// The content of a ContentInfo of type data (an OCTET STRING's bytes), else None.
fn data_content(content_info: &[u8]) -> Option<&[u8]> {
    let (_, body, _) = der_next(content_info).ok()?;
    let (oid, _, rest) = der_next(body).ok()?;
    if oid != OID_DATA {
        return None;
    }
    let (_, explicit, _) = der_next(rest).ok()?;
    let (octets, content, _) = der_next(explicit).ok()?;
    (octets.first() == Some(&0x04)).then_some(content)
}

/// The elements of a DER body, each whole and as its content; None when one is malformed.
fn der_items(body: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let (whole, inner, next) = der_next(rest).ok()?;
        out.push((whole, inner));
        rest = next;
    }
    Some(out)
}

/// Key bags (plain or shrouded) in a DER SafeContents, nested SafeContents included.
fn key_bags_in(safe_contents: &[u8], depth: u32) -> Option<usize> {
    let (_, bags, _) = der_next(safe_contents).ok()?;
    let mut n = 0;
    for (_, bag) in der_items(bags)? {
        let (oid, _, value) = der_next(bag).ok()?;
        match oid.strip_prefix(OID_BAG_PREFIX) {
            Some([KEY_BAG | SHROUDED_KEY_BAG]) => n += 1,
            Some([SAFE_CONTENTS_BAG]) if depth < 4 => {
                let (_, inner, _) = der_next(value).ok()?;
                n += key_bags_in(inner, depth + 1)?;
            }
            _ => {}
        }
    }
    Some(n)
}

/// How many private keys a DER PKCS#12 file holds in its unencrypted parts, where keys are
/// kept (each key is encrypted in its own shrouded bag). None when the structure cannot be
/// followed (BER encodings).
pub fn p12_key_bags(der: &[u8]) -> Option<usize> {
    let (_, pfx, _) = der_next(der).ok()?;
    let (_, _, rest) = der_next(pfx).ok()?; // version
    let (auth_safe, _, _) = der_next(rest).ok()?;
    let (_, infos, _) = der_next(data_content(auth_safe)?).ok()?;
    let mut n = 0;
    for (info, _) in der_items(infos)? {
        if let Some(sc) = data_content(info) {
            n += key_bags_in(sc, 0)?;
        }
    }
    Some(n)
}

struct Group {
    public: PKey<Public>,
    private: Option<PKey<Private>>,
    has_public: bool,
    certs: Vec<X509>,
}

/// The name a PKCS#12 file gives a certificate (its bag's `friendlyName`, which OpenSSL keeps
/// with the certificate it reads), when it is UTF-8 and not empty.
fn friendly_name(c: &X509) -> Option<String> {
    let name = std::str::from_utf8(c.alias()?).ok()?.trim();
    (!name.is_empty()).then(|| name.to_string())
}

fn common_name(c: &X509) -> Option<String> {
    c.subject_name()
        .entries_by_nid(openssl::nid::Nid::COMMONNAME)
        .next()
        .and_then(|e| e.data().to_string().ok())
}

/// The templates of every object to create, in order: per group the private key, its public
/// key (or a public key alone), then the certificates.
#[cfg(test)]
pub fn plan(pieces: Vec<Piece>, o: &KeyOpts, name: &str) -> Result<Vec<Vec<Attribute>>> {
    Ok(plan_marked(pieces, o, name)?
        .into_iter()
        .map(|(t, _)| t)
        .collect())
}

/// As [`plan`], each template with whether it is a certificate of the file's chain (not one of
/// its own objects): such a certificate may already be in the token, imported with another
/// file of the same issuer.
pub fn plan_marked(
    pieces: Vec<Piece>,
    o: &KeyOpts,
    name: &str,
) -> Result<Vec<(Vec<Attribute>, bool)>> {
    let mut groups: Vec<Group> = Vec::new();
    for piece in pieces {
        let public = match &piece {
            Piece::Private(k) => keys::public_half(k)?,
            Piece::Public(k) => k.clone(),
            Piece::Cert(c) => c.public_key().map_err(|_| {
                Error::File(format!(
                    "{name}: the certificate for {} has a key pktool cannot read",
                    crate::x509::name_string(c.subject_name())
                ))
            })?,
        };
        let i = match groups.iter().position(|g| g.public.public_eq(&public)) {
            Some(i) => i,
            None => {
                groups.push(Group {
                    public,
                    private: None,
                    has_public: false,
                    certs: Vec::new(),
                });
                groups.len() - 1
            }
        };
        let g = &mut groups[i];
        match piece {
            Piece::Private(k) => {
                g.private.get_or_insert(k);
            }
            Piece::Public(_) => g.has_public = true,
            Piece::Cert(c) => {
                let der = c.to_der()?;
                let mut seen = false;
                for have in &g.certs {
                    seen |= have.to_der()? == der;
                }
                if !seen {
                    g.certs.push(c);
                }
            }
        }
    }
    let with_key = groups.iter().filter(|g| g.private.is_some()).count();
    let own = |g: &Group| with_key == 0 || g.private.is_some();
    let owned = groups.iter().filter(|g| own(g)).count();
    if o.id.is_some() && owned > 1 {
        let what = if with_key > 0 {
            "private keys"
        } else {
            "unrelated objects"
        };
        return Err(Error::Usage(format!(
            "{name} holds {owned} {what}: --id would give them all the same CKA_ID; \
             import without --id (each gets the SHA-1 of its public value)"
        )));
    }
    let mut out = Vec::new();
    for g in &groups {
        let named = g
            .certs
            .first()
            .and_then(|c| friendly_name(c).or_else(|| common_name(c)));
        let (label, id) = if own(g) {
            (o.label.clone().or(named), o.id.clone())
        } else {
            (named, None)
        };
        let id = match id {
            Some(id) => id,
            None => keys::pkey_id(&g.public)?,
        };
        let ko = KeyOpts {
            label: label.clone(),
            id: Some(id.clone()),
            ..o.clone()
        };
        if let Some(k) = &g.private {
            let (privt, pubt) = keys::keypair_templates(k, &ko)?;
            out.push((privt, false));
            out.push((pubt, false));
        } else if g.has_public {
            out.push((keys::public_template(&g.public, &ko)?, false));
        }
        for c in &g.certs {
            let t = crate::x509::cert_template(c, label.as_deref().map(str::as_bytes), &id)?;
            out.push((t, !own(g)));
        }
    }
    Ok(out)
}

fn class_words(t: &[Attribute]) -> &'static str {
    t.iter()
        .find_map(|a| match a {
            Attribute::Class(c) => Some(crate::objects::class_noun(*c)),
            _ => None,
        })
        .unwrap_or("object")
}

/// Creates every object, or none: when one fails, those already created are destroyed.
pub fn create_all(s: &Session, templates: &[Vec<Attribute>]) -> Result<Vec<ObjectHandle>> {
    let mut made = Vec::new();
    for (n, t) in templates.iter().enumerate() {
        match s.create_object(t) {
            Ok(h) => made.push(h),
            Err(e) => {
                for h in made.iter().rev() {
                    let _ = s.destroy_object(*h);
                }
                return Err(Error::Token(
                    format!(
                        "storing the {} ({} of {}; nothing was kept)",
                        class_words(t),
                        n + 1,
                        templates.len()
                    ),
                    e,
                ));
            }
        }
    }
    Ok(made)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::der_tlv;
    use openssl::ec::{EcGroup, EcKey};
    use openssl::nid::Nid;

    fn ec_key() -> PKey<Private> {
        let g = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
        PKey::from_ec_key(EcKey::generate(&g).unwrap()).unwrap()
    }

    fn self_signed(k: &PKey<Private>, cn: &str) -> X509 {
        let mut n = openssl::x509::X509Name::builder().unwrap();
        n.append_entry_by_text("CN", cn).unwrap();
        let n = n.build();
        let mut b = X509::builder().unwrap();
        b.set_version(2).unwrap();
        b.set_subject_name(&n).unwrap();
        b.set_issuer_name(&n).unwrap();
        b.set_pubkey(k).unwrap();
        b.set_not_before(&openssl::asn1::Asn1Time::days_from_now(0).unwrap())
            .unwrap();
        b.set_not_after(&openssl::asn1::Asn1Time::days_from_now(1).unwrap())
            .unwrap();
        b.sign(k, openssl::hash::MessageDigest::sha256()).unwrap();
        b.build()
    }

    fn opts(label: Option<&str>, id: Option<&[u8]>) -> KeyOpts {
        KeyOpts {
            label: label.map(str::to_string),
            id: id.map(<[u8]>::to_vec),
            sensitive: true,
            extractable: false,
        }
    }

    fn no_pass() -> SecretSource {
        SecretSource {
            value: Some(String::new()),
            ..Default::default()
        }
    }

    /// (class, label, id) of each template.
    fn summary(ts: &[Vec<Attribute>]) -> Vec<(&'static str, Option<String>, Vec<u8>)> {
        ts.iter()
            .map(|t| {
                let label = t.iter().find_map(|a| match a {
                    Attribute::Label(l) => Some(String::from_utf8(l.clone()).unwrap()),
                    _ => None,
                });
                let id = t
                    .iter()
                    .find_map(|a| match a {
                        Attribute::Id(v) => Some(v.clone()),
                        _ => None,
                    })
                    .unwrap();
                (class_words(t), label, id)
            })
            .collect()
    }

    #[test]
    fn pem_with_certificate_then_key_imports_both_together() {
        let k = ec_key();
        let c = self_signed(&k, "web");
        let mut pem = b"subject=CN = web\n".to_vec();
        pem.extend(c.to_pem().unwrap());
        pem.extend(k.private_key_to_pem_pkcs8().unwrap());
        let pieces = read_pieces(&pem, "combo.pem", &no_pass()).unwrap();
        assert_eq!(pieces.len(), 2);
        let ts = plan(pieces, &opts(Some("combo"), None), "combo.pem").unwrap();
        let s = summary(&ts);
        let classes: Vec<_> = s.iter().map(|x| x.0).collect();
        assert_eq!(classes, ["private key", "public key", "certificate"]);
        assert!(s
            .iter()
            .all(|x| x.1.as_deref() == Some("combo") && x.2 == s[0].2));
    }

    #[test]
    fn pem_with_two_keys_imports_each_with_its_certificate() {
        let (k1, k2, ca) = (ec_key(), ec_key(), ec_key());
        let mut pem = Vec::new();
        pem.extend(k1.private_key_to_pem_pkcs8().unwrap());
        pem.extend(self_signed(&k2, "two").to_pem().unwrap());
        pem.extend(self_signed(&ca, "chain").to_pem().unwrap());
        pem.extend(self_signed(&k1, "one").to_pem().unwrap());
        pem.extend(k2.private_key_to_pem_pkcs8().unwrap());
        pem.extend(k2.public_key_to_pem().unwrap());
        let pieces = read_pieces(&pem, "all.pem", &no_pass()).unwrap();
        let s = summary(&plan(pieces, &opts(None, None), "all.pem").unwrap());
        let want = [
            ("private key", "one", &k1),
            ("public key", "one", &k1),
            ("certificate", "one", &k1),
            ("private key", "two", &k2),
            ("public key", "two", &k2),
            ("certificate", "two", &k2),
            ("certificate", "chain", &ca),
        ];
        assert_eq!(s.len(), want.len(), "{s:?}");
        for (got, (class, label, key)) in s.iter().zip(want) {
            let id = keys::pkey_id(&keys::public_half(key).unwrap()).unwrap();
            assert_eq!(got, &(class, Some(label.to_string()), id));
        }
        let pieces = read_pieces(&pem, "all.pem", &no_pass()).unwrap();
        let e = plan(pieces, &opts(None, Some(&[1])), "all.pem").unwrap_err();
        assert_eq!(e.exit_code(), crate::error::EXIT_USAGE, "{e}");
    }

    #[test]
    fn pem_with_an_unknown_block_is_refused_whole() {
        let k = ec_key();
        let mut pem = k.private_key_to_pem_pkcs8().unwrap();
        pem.extend(b"-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n");
        let e = read_pieces(&pem, "x.pem", &no_pass()).err().unwrap();
        assert_eq!(e.exit_code(), crate::error::EXIT_FILE);
        let mut cut = k.private_key_to_pem_pkcs8().unwrap();
        cut.truncate(cut.len() - 10);
        let e = read_pieces(&cut, "x.pem", &no_pass()).err().unwrap();
        assert!(e.to_string().contains("no END line"), "{e}");
    }

    /// A PKCS#12 file whose unencrypted SafeContents holds these keys in key bags.
    fn p12_with_keys(keys: &[&PKey<Private>]) -> Vec<u8> {
        p12_encoded(keys, false)
    }

    /// [`p12_with_keys`], its outer data content a constructed OCTET STRING (BER) when `ber`.
    fn p12_encoded(keys: &[&PKey<Private>], ber: bool) -> Vec<u8> {
        let data_info = |content: &[u8], ber: bool| {
            let mut b = OID_DATA.to_vec();
            let octets = der_tlv(0x04, content);
            b.extend(der_tlv(
                0xa0,
                &if ber { der_tlv(0x24, &octets) } else { octets },
            ));
            der_tlv(0x30, &b)
        };
        let mut bags = Vec::new();
        for k in keys {
            let mut bag = OID_BAG_PREFIX.to_vec();
            bag.push(KEY_BAG);
            bag.extend(der_tlv(0xa0, &k.private_key_to_pkcs8().unwrap()));
            bags.extend(der_tlv(0x30, &bag));
        }
        let auth_safe = der_tlv(0x30, &data_info(&der_tlv(0x30, &bags), false));
        let mut pfx = der_tlv(0x02, &[3]);
        pfx.extend(data_info(&auth_safe, ber));
        der_tlv(0x30, &pfx)
    }

    /// The same two keys with the file's outer parts in BER: counted in OpenSSL's DER
    /// re-encoding and refused, not imported with one key dropped.
    #[test]
    fn pkcs12_with_two_keys_in_ber_is_refused() {
        let (k1, k2) = (ec_key(), ec_key());
        let ber = p12_encoded(&[&k1, &k2], true);
        assert_eq!(p12_key_bags(&ber), None, "not followed as it is");
        let e = read_pieces(&ber, "two.p12", &no_pass()).err().unwrap();
        assert_eq!(e.exit_code(), crate::error::EXIT_FILE);
        assert!(e.to_string().contains("holds 2 private keys"), "{e}");
    }

    #[test]
    fn pkcs12_with_two_keys_is_refused() {
        let (k1, k2) = (ec_key(), ec_key());
        let two = p12_with_keys(&[&k1, &k2]);
        assert_eq!(p12_key_bags(&two), Some(2));
        let e = read_pieces(&two, "two.p12", &no_pass()).err().unwrap();
        assert_eq!(e.exit_code(), crate::error::EXIT_FILE);
        assert!(e.to_string().contains("holds 2 private keys"), "{e}");
        assert_eq!(p12_key_bags(&p12_with_keys(&[&k1])), Some(1));
    }

    #[test]
    fn openssl_made_pkcs12_counts_one_key_and_imports_key_and_certificate() {
        let (k, ca) = (ec_key(), ec_key());
        let mut chain = openssl::stack::Stack::new().unwrap();
        chain.push(self_signed(&ca, "the ca")).unwrap();
        let mut b = Pkcs12::builder();
        b.pkey(&k).cert(&self_signed(&k, "user")).ca(chain);
        let der = b.build2("pw").unwrap().to_der().unwrap();
        assert_eq!(p12_key_bags(&der), Some(1));
        // OpenSSL's default count, found in the MAC and the key's PBES2 parameters alike.
        assert_eq!(most_iterations(&der), 2048);
        let pass = SecretSource {
            value: Some("pw".into()),
            ..Default::default()
        };
        let pieces = read_pieces(&der, "u.p12", &pass).unwrap();
        let s = summary(&plan(pieces, &opts(None, None), "u.p12").unwrap());
        let got: Vec<_> = s.iter().map(|x| (x.0, x.1.clone().unwrap())).collect();
        let want = [
            ("private key", "user"),
            ("public key", "user"),
            ("certificate", "user"),
            ("certificate", "the ca"),
        ];
        assert_eq!(got, want.map(|(c, l)| (c, l.to_string())));
    }
}
