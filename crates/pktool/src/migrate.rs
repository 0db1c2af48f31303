//! migrate: copy the objects of another module's token into this token.
//!
//! Certificates, public keys, data objects and keys that are not sensitive are copied by
//! reading their attributes. Keys that are sensitive but extractable are wrapped in the source
//! token under a one-off AES-256 session key (CKM_AES_KEY_WRAP_PAD), unwrapped by pktool with
//! OpenSSL and created in this token with the source's attributes. Keys that are not
//! extractable stay where they are and are reported.

use crate::cmd::{attr_present, label_id, Env};
use crate::error::{Ctx, Error, Result};
use crate::objects::{self, class_name, Selector};
use crate::pin::SecretSource;
use crate::token::{Token, TokenChoice};
use crate::util::hex;
use clap::Args;
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, AttributeType as T, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::Session;
use serde_json::json;
use std::path::PathBuf;
use zeroize::Zeroizing;

#[derive(Args, Debug)]
pub struct MigrateArgs {
    /// The module to copy from, e.g. /usr/lib/softhsm/libsofthsm2.so
    #[arg(long, value_name = "PATH")]
    pub from_module: PathBuf,
    /// Source token by label
    #[arg(long, value_name = "LABEL", conflicts_with = "from_slot")]
    pub from_token: Option<String>,
    /// Source token by slot ID [default: the first slot]
    #[arg(long, value_name = "ID")]
    pub from_slot: Option<u64>,
    /// Source user PIN from the first line of FILE
    #[arg(long, value_name = "FILE")]
    pub from_pin_file: Option<PathBuf>,
    /// Source user PIN from environment variable VAR
    #[arg(long, value_name = "VAR")]
    pub from_pin_env: Option<String>,
    /// Source user PIN itself (unsafe)
    #[arg(long, value_name = "PIN")]
    pub from_pin: Option<String>,
    /// Only report what would be copied
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub labels: crate::LabelArgs,
}

const COMMON: &[T] = &[
    T::Class,
    T::Token,
    T::Private,
    T::Label,
    T::Id,
    T::Modifiable,
];
const CERT: &[T] = &[
    T::CertificateType,
    T::Subject,
    T::Issuer,
    T::SerialNumber,
    T::Value,
];
const DATA: &[T] = &[T::Application, T::ObjectId, T::Value];
const PUBLIC: &[T] = &[
    T::KeyType,
    T::Subject,
    T::Encrypt,
    T::Verify,
    T::VerifyRecover,
    T::Wrap,
    T::Derive,
    T::Encapsulate,
    T::Modulus,
    T::PublicExponent,
    T::EcParams,
    T::EcPoint,
    T::ParameterSet,
    T::Value,
];
/// Private and secret key attributes that are not secret.
const KEY_FLAGS: &[T] = &[
    T::KeyType,
    T::Subject,
    T::Sensitive,
    T::Extractable,
    T::Encrypt,
    T::Decrypt,
    T::Sign,
    T::SignRecover,
    T::Verify,
    T::Wrap,
    T::Unwrap,
    T::Derive,
    T::Decapsulate,
];
/// Key material (read only when the key is not sensitive).
const MATERIAL: &[T] = crate::keys::KEY_MATERIAL;

enum Outcome {
    Copied(&'static str),
    Present,
    NotCopied(String),
}

pub fn run(env: &Env, a: &MigrateArgs) -> Result<()> {
    let src = Token::open(
        &a.from_module,
        &TokenChoice {
            label: a.from_token.clone(),
            slot: a.from_slot,
        },
    )?;
    let src_pin = SecretSource {
        file: a.from_pin_file.clone(),
        env: a.from_pin_env.clone(),
        value: a.from_pin.clone(),
        options: "--from-pin-file, --from-pin-env or --from-pin",
    };
    let ss = src.login(&src_pin)?;
    let (dst, ds) = env.login(None)?;
    let handles = ss
        .find_objects(&[Attribute::Token(true)])
        .ctx(|| format!("listing the objects of '{}'", src.label))?;
    // What would be copied is worked out first, so that a label already taken in this token
    // (or shared by two copies) is refused, as for the other commands, before anything is
    // written.
    let mut plan = Vec::new();
    // An object whose attributes cannot be read (damaged in the source's store) is reported as
    // not copied, by its handle, rather than passed over or stopping the migration.
    let mut unreadable = Vec::new();
    for h in handles {
        let class = match objects::read(&ss, h, &[T::Token]).and_then(|a| {
            let token = objects::bool_attr(&a, T::Token).unwrap_or(false);
            Ok(if token {
                Some(objects::class_of(&ss, h)?)
            } else {
                None
            })
        }) {
            Ok(Some(class)) => class,
            Ok(None) => continue,
            Err(e) => {
                unreadable.push(json!({
                    "handle": h.handle(),
                    "class": null,
                    "label": null,
                    "id": "",
                    "key_type": null,
                    "status": "not copied",
                    "reason": format!("object handle {h}: {e}"),
                }));
                continue;
            }
        };
        let (label, id) = label_id(&ss, h);
        let outcome = copy_one(&ss, &ds, h, class, &label, &id, true)
            .unwrap_or_else(|e| Outcome::NotCopied(e.to_string()));
        plan.push((h, class, label, id, outcome));
    }
    if !a.labels.allow_duplicate_label {
        let new: Vec<(ObjectClass, Vec<u8>)> = plan
            .iter()
            .filter(|p| matches!(p.4, Outcome::Copied(_)))
            .filter_map(|(_, c, l, _, _)| Some((*c, l.clone()?)))
            .collect();
        objects::refuse_taken_labels(
            &ds,
            &new,
            "nothing was copied; relabel or delete one of them first, or add \
             --allow-duplicate-label",
        )?;
    }
    let mut not_copied = unreadable.len();
    let mut rows = unreadable;
    for (h, class, label, id, planned) in plan {
        let outcome = match planned {
            Outcome::Copied(_) if !a.dry_run => copy_one(&ss, &ds, h, class, &label, &id, false)
                .unwrap_or_else(|e| Outcome::NotCopied(e.to_string())),
            o => o,
        };
        let (status, reason) = match outcome {
            Outcome::Copied(how) => (
                if a.dry_run { "would copy" } else { "copied" },
                how.to_string(),
            ),
            Outcome::Present => (
                "present",
                "an object with this class, label and id exists".into(),
            ),
            Outcome::NotCopied(why) => {
                not_copied += 1;
                ("not copied", why)
            }
        };
        rows.push(json!({
            "class": class_name(class),
            "label": label.as_ref().map(|l| String::from_utf8_lossy(l)),
            "id": hex(&id),
            "key_type": objects::key_type_raw(&ss, h).map(objects::key_type_name),
            "status": status,
            "reason": reason,
        }));
    }
    let v = json!({"from": src.label, "to": dst.label, "objects": rows, "not_copied": not_copied});
    env.out(&v, || {
        let mut out = format!("migrate '{}' -> '{}'", src.label, dst.label);
        for r in &rows {
            out += &format!(
                "\n{:<10} {:<10} label={:?} id={}: {} ({})",
                r["status"].as_str().unwrap_or(""),
                r["class"].as_str().unwrap_or(""),
                r["label"].as_str().unwrap_or(""),
                r["id"].as_str().unwrap_or(""),
                r["status"].as_str().unwrap_or(""),
                r["reason"].as_str().unwrap_or("")
            );
        }
        out
    });
    if not_copied > 0 {
        return Err(Error::Reported(format!(
            "{not_copied} object(s) could not be copied (listed above)"
        )));
    }
    Ok(())
}

fn already_there(
    ds: &Session,
    class: ObjectClass,
    label: &Option<Vec<u8>>,
    id: &[u8],
) -> Result<bool> {
    // A data object has no CKA_ID (PKCS#11 gives that attribute to keys and certificates
    // only): it is known by its class and label, or a search for an id would never find the
    // copy an earlier run made.
    let sel = Selector {
        label: label.clone(),
        id: (class != ObjectClass::DATA).then(|| id.to_vec()),
        class: Some(class),
    };
    Ok(!objects::find(ds, &sel)?.is_empty())
}

fn read_all(ss: &Session, h: ObjectHandle, groups: &[&[T]]) -> Result<Vec<Attribute>> {
    let types: Vec<T> = groups.iter().flat_map(|g| g.iter().copied()).collect();
    let mut t = objects::read(ss, h, &types)?;
    t.retain(|a| a.attribute_type() != T::Token);
    t.push(Attribute::Token(true));
    Ok(t)
}

fn create(ds: &Session, t: &[Attribute], dry: bool, how: &'static str) -> Result<Outcome> {
    if !dry {
        ds.create_object(t).ctx(|| "creating the copy".into())?;
    }
    Ok(Outcome::Copied(how))
}

fn copy_one(
    ss: &Session,
    ds: &Session,
    h: ObjectHandle,
    class: ObjectClass,
    label: &Option<Vec<u8>>,
    id: &[u8],
    dry: bool,
) -> Result<Outcome> {
    if already_there(ds, class, label, id)? {
        return Ok(Outcome::Present);
    }
    match class {
        ObjectClass::CERTIFICATE => {
            create(ds, &read_all(ss, h, &[COMMON, CERT])?, dry, "attributes")
        }
        ObjectClass::DATA => create(ds, &read_all(ss, h, &[COMMON, DATA])?, dry, "attributes"),
        ObjectClass::PUBLIC_KEY => {
            create(ds, &read_all(ss, h, &[COMMON, PUBLIC])?, dry, "attributes")
        }
        ObjectClass::PRIVATE_KEY | ObjectClass::SECRET_KEY => {
            let flags = read_all(ss, h, &[COMMON, KEY_FLAGS])?;
            let extractable = objects::bool_attr(&flags, T::Extractable).unwrap_or(false);
            let sensitive = objects::bool_attr(&flags, T::Sensitive).unwrap_or(true);
            if !attr_present(&flags, T::KeyType) {
                return Ok(Outcome::NotCopied("key type unknown to pktool".into()));
            }
            if !extractable {
                return Ok(Outcome::NotCopied(
                    "not extractable (CKA_EXTRACTABLE=false): the source token will not release it"
                        .into(),
                ));
            }
            if !sensitive {
                let mut t = flags;
                t.extend(objects::read(ss, h, MATERIAL)?);
                return create(ds, &t, dry, "attributes");
            }
            if dry {
                return Ok(Outcome::Copied("wrapped"));
            }
            let mut t = flags;
            t.extend(unwrapped_material(ss, h, class)?);
            create(ds, &t, false, "wrapped under a one-off AES key")
        }
        _ => Ok(Outcome::NotCopied("object class not supported".into())),
    }
}

/// Wraps a sensitive, extractable key in the source under a one-off AES key and returns its
/// material as attributes.
fn unwrapped_material(ss: &Session, h: ObjectHandle, class: ObjectClass) -> Result<Vec<Attribute>> {
    let kek = ss
        .generate_key(
            &Mechanism::AesKeyGen,
            &[
                Attribute::Class(ObjectClass::SECRET_KEY),
                Attribute::KeyType(KeyType::AES),
                Attribute::ValueLen(32.into()),
                Attribute::Token(false),
                Attribute::Sensitive(false),
                Attribute::Extractable(true),
                Attribute::Wrap(true),
                Attribute::Encrypt(true),
            ],
        )
        .ctx(|| "making the one-off wrapping key in the source token".into())?;
    let result = (|| {
        let kv = objects::read(ss, kek, &[T::Value])?;
        let kek_value = Zeroizing::new(
            objects::bytes_attr(&kv, T::Value)
                .ok_or_else(|| Error::TokenState("the wrapping key's value is hidden".into()))?,
        );
        let wrapped = ss
            .wrap_key(&Mechanism::AesKeyWrapPad, kek, h)
            .ctx(|| "wrapping the key in the source token".into())?;
        let plain = Zeroizing::new(aes_unwrap_pad(&kek_value, &wrapped)?);
        if class == ObjectClass::SECRET_KEY {
            return Ok(vec![Attribute::Value(plain.to_vec())]);
        }
        let pkey = openssl::pkey::PKey::private_key_from_pkcs8(&plain)
            .map_err(|e| Error::TokenState(format!("the wrapped key is not PKCS#8: {e}")))?;
        let mut attrs = crate::keys::private_attrs(&pkey)?;
        attrs.retain(|a| MATERIAL.contains(&a.attribute_type()));
        Ok(attrs)
    })();
    let _ = ss.destroy_object(kek);
    result
}

/// RFC 5649 key unwrap with OpenSSL.
fn aes_unwrap_pad(key: &[u8], wrapped: &[u8]) -> Result<Vec<u8>> {
    use openssl::cipher::Cipher;
    use openssl::cipher_ctx::CipherCtx;
    let mut ctx = CipherCtx::new()?;
    ctx.decrypt_init(Some(Cipher::aes_256_wrap_pad()), Some(key), None)?;
    let mut out = Vec::new();
    ctx.cipher_update_vec(wrapped, &mut out)?;
    ctx.cipher_final_vec(&mut out)?;
    Ok(out)
}
