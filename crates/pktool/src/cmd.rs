//! The subcommands.

use crate::error::{Ctx, Error, Result};
use crate::keys::{self, KeyOpts};
use crate::objects::{self, Selector};
use crate::pin::SecretSource;
use crate::token::{self, Token, TokenChoice};
use crate::uri::Pkcs11Uri;
use crate::util::{hex, read_file, unhex, write_file, write_private_file};
use crate::{Cli, Cmd, LabelArgs, NewKeyArgs, ObjArgs};
use cryptoki::object::{Attribute, AttributeType, ObjectClass, ObjectHandle};
use cryptoki::session::{Session, UserType};
use cryptoki::types::AuthPin;
use openssl::pkcs12::Pkcs12;
use openssl::x509::{X509Req, X509};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

pub struct Env<'a> {
    pub cli: &'a Cli,
}

impl Env<'_> {
    pub fn module(&self) -> Result<PathBuf> {
        match &self.cli.module {
            Some(m) => Ok(m.clone()),
            None => token::default_module(),
        }
    }

    /// The token from --token/--slot, else from a URI's token= attribute, else slot 0.
    pub fn choice(&self, obj: Option<&ObjArgs>) -> Result<TokenChoice> {
        let mut c = TokenChoice {
            label: self.cli.token.clone(),
            slot: self.cli.slot,
        };
        if c.label.is_none() && c.slot.is_none() {
            if let Some(u) = obj.and_then(|o| o.uri.as_deref()) {
                let u = Pkcs11Uri::parse(u)?;
                c.label = u.token;
                c.slot = u.slot_id;
            }
        }
        Ok(c)
    }

    pub fn open(&self, obj: Option<&ObjArgs>) -> Result<Token> {
        Token::open(&self.module()?, &self.choice(obj)?)
    }

    /// Opens the token and logs in. The object options are checked first: a usage error in
    /// them (`--id`, `--type`, `--uri`) must not cost a try of the PIN.
    pub fn login(&self, obj: Option<&ObjArgs>) -> Result<(Token, Session)> {
        if let Some(o) = obj {
            selector(o)?;
        }
        let t = self.open(obj)?;
        let s = t.login(&self.cli.pin.source())?;
        Ok((t, s))
    }

    /// Prints JSON, or the human text.
    pub fn out(&self, v: &Value, human: impl FnOnce() -> String) {
        use std::io::Write;
        let text = if self.cli.json {
            serde_json::to_string_pretty(v).unwrap_or_default()
        } else {
            human()
        };
        if !text.is_empty() {
            // A closed pipe (pktool list | head) is not an error worth a panic.
            let _ = writeln!(std::io::stdout(), "{text}");
        }
    }
}

fn selector(o: &ObjArgs) -> Result<Selector> {
    Selector::new(
        o.uri.as_deref(),
        o.label.as_deref(),
        o.id.as_deref(),
        o.kind.as_deref(),
    )
}

/// Refuses labels already taken (see [`objects::refuse_taken_labels`]) unless the user allows
/// them.
/// Labels are bytes, as stored (a key's label need not be UTF-8).
fn check_labels<'a>(
    s: &Session,
    allow: &LabelArgs,
    new: impl IntoIterator<Item = (ObjectClass, Option<&'a [u8]>)>,
) -> Result<()> {
    if allow.allow_duplicate_label {
        return Ok(());
    }
    let new: Vec<(ObjectClass, Vec<u8>)> = new
        .into_iter()
        .filter_map(|(c, l)| Some((c, l?.to_vec())))
        .collect();
    objects::refuse_taken_labels(
        s,
        &new,
        "choose another --label, delete the old object first, or add --allow-duplicate-label",
    )
}

fn key_opts(n: &NewKeyArgs) -> Result<KeyOpts> {
    Ok(KeyOpts {
        label: n.label.clone(),
        id: n.id.as_deref().map(unhex).transpose()?,
        sensitive: n.sensitive.unwrap_or(true),
        extractable: n.extractable.unwrap_or(false),
    })
}

pub fn run(cli: &Cli) -> Result<()> {
    let env = Env { cli };
    match &cli.cmd {
        Cmd::Tokens => tokens(&env),
        Cmd::Inittoken {
            label,
            user_pin_file,
        } => inittoken(&env, label, user_pin_file.as_deref()),
        Cmd::Setpin {
            so,
            new_pin_file,
            new_pin_env,
            new_pin,
        } => {
            let new = SecretSource {
                file: new_pin_file.clone(),
                env: new_pin_env.clone(),
                value: new_pin.clone(),
                options: crate::pin::NEW_PIN_OPTIONS,
            };
            setpin(&env, *so, &new)
        }
        Cmd::Genkey { keytype, size, new } => {
            let plan = keys::secret_key_plan(keytype, *size, &key_opts(new)?)?;
            let (t, s) = env.login(None)?;
            let label = new.label.as_deref().map(str::as_bytes);
            check_labels(&s, &new.labels, [(ObjectClass::SECRET_KEY, label)])?;
            let h = keys::genkey(&s, plan)?;
            let v = objects::describe(&s, h, &t.label, false)?;
            env.out(&json!({"created": [v]}), || {
                format!("created {}", objects::human_line(&v))
            });
            Ok(())
        }
        Cmd::Genkeypair {
            keytype,
            size,
            curve,
            new,
        } => {
            let plan = keys::key_pair_plan(keytype, *size, curve.as_deref(), &key_opts(new)?)?;
            let (t, s) = env.login(None)?;
            let label = new.label.as_deref().map(str::as_bytes);
            let pair = [ObjectClass::PRIVATE_KEY, ObjectClass::PUBLIC_KEY];
            check_labels(&s, &new.labels, pair.map(|c| (c, label)))?;
            let (pubh, privh) = keys::genkeypair(&s, plan)?;
            let v: Vec<Value> = [privh, pubh]
                .iter()
                .map(|h| objects::describe(&s, *h, &t.label, false))
                .collect::<Result<_>>()?;
            env.out(&json!({"created": v}), || {
                v.iter()
                    .map(|o| format!("created {}", objects::human_line(o)))
                    .collect::<Vec<_>>()
                    .join("\n")
            });
            Ok(())
        }
        Cmd::List {
            objtype,
            obj,
            values,
        } => list(&env, objtype, obj, *values),
        Cmd::Delete { obj, yes } => delete(&env, obj, *yes),
        Cmd::Import { input, new, pass } => import(&env, input, new, &pass.source()),
        Cmd::Export {
            obj,
            output,
            format,
            pass,
        } => export(&env, obj, output, format, &pass.source()),
        Cmd::Gencsr {
            obj,
            subject,
            san,
            output,
            format,
        } => {
            file_for_json(&env, output)?;
            crate::x509::check_names(subject, san.as_deref())?;
            check_format(format)?;
            let (_, s) = env.login(Some(obj))?;
            let key = private_key(&s, obj)?;
            let req = crate::x509::gencsr(
                &s,
                key,
                &crate::x509::CsrOpts {
                    subject,
                    san: san.as_deref(),
                },
            )?;
            let data = match format.as_str() {
                "der" => req.to_der()?,
                "pem" => req.to_pem()?,
                f => return Err(Error::Usage(format!("--format {f}: use pem or der"))),
            };
            write_file(output, &data)?;
            note(&env, output, json!({"request": output}), "request");
            Ok(())
        }
        Cmd::Gencert {
            obj,
            subject,
            san,
            days,
            serial,
            ca,
            cert_label,
            no_store,
            labels,
            output,
            format,
        } => {
            if let Some(out) = output {
                file_for_json(&env, out)?;
            }
            crate::x509::check_names(subject, san.as_deref())?;
            check_format(format)?;
            crate::x509::check_validity(*days, serial.as_deref())?;
            let (t, s) = env.login(Some(obj))?;
            let key = private_key(&s, obj)?;
            let a = objects::read(&s, key, &[AttributeType::Label, AttributeType::Id])?;
            let id = objects::bytes_attr(&a, AttributeType::Id).unwrap_or_default();
            // The key's label as it is stored (bytes, which need not be UTF-8).
            let label: Option<Vec<u8>> = cert_label
                .as_ref()
                .map(|l| l.as_bytes().to_vec())
                .or_else(|| objects::bytes_attr(&a, AttributeType::Label));
            if !no_store {
                check_labels(&s, labels, [(ObjectClass::CERTIFICATE, label.as_deref())])?;
            }
            let cert = crate::x509::gencert(
                &s,
                key,
                &crate::x509::CertOpts {
                    subject,
                    san: san.as_deref(),
                    days: *days,
                    serial: serial.as_deref(),
                    ca: *ca,
                },
            )?;
            // The file first: a command that fails leaves the token as it was.
            if let Some(out) = output {
                write_file(out, &cert_bytes(&cert, format)?)?;
            }
            let mut stored = Value::Null;
            if !no_store {
                let h = crate::x509::store_cert(&s, &cert, label.as_deref(), &id)?;
                stored = objects::describe(&s, h, &t.label, false)?;
            }
            let subject = crate::x509::name_string(cert.subject_name());
            env.out(
                &json!({"subject": subject, "stored": stored, "output": output}),
                || {
                    let mut t = format!("certificate for {subject}");
                    if !stored.is_null() {
                        t += &format!("\nstored {}", objects::human_line(&stored));
                    }
                    t
                },
            );
            Ok(())
        }
        Cmd::Signcsr {
            obj,
            csr,
            ca_cert,
            days,
            serial,
            ca,
            output,
            format,
        } => {
            file_for_json(&env, output)?;
            check_format(format)?;
            crate::x509::check_validity(*days, serial.as_deref())?;
            // The files are read before the login: a wrong path costs no try of the PIN.
            let data = read_file(csr)?;
            let req = X509Req::from_pem(&data)
                .or_else(|_| X509Req::from_der(&data))
                .map_err(|_| Error::File(format!("{} is not a PKCS#10 request", csr.display())))?;
            crate::x509::check_request(&req)?;
            let given_ca = ca_cert.as_deref().map(load_cert).transpose()?;
            let (_, s) = env.login(Some(obj))?;
            let key = private_key(&s, obj)?;
            let ca_x509 = match given_ca {
                Some(c) => c,
                None => cert_of_key(&s, key)?,
            };
            let cert = crate::x509::signcsr(
                &s,
                key,
                &ca_x509,
                &req,
                &crate::x509::SignOpts {
                    days: *days,
                    serial: serial.as_deref(),
                    ca: *ca,
                },
            )?;
            write_file(output, &cert_bytes(&cert, format)?)?;
            note(&env, output, json!({"certificate": output}), "certificate");
            Ok(())
        }
        Cmd::Migrate(args) => crate::migrate::run(&env, args),
    }
}

/// Each object of `handles` described ([`objects::describe`]), with those that cannot be: each
/// of these is named by its handle on stderr (`then` added) and listed as
/// `{"handle", "error"}`.
fn describe_each(
    s: &Session,
    handles: &[ObjectHandle],
    token: &str,
    values: bool,
    then: &str,
) -> (Vec<(ObjectHandle, Value)>, Vec<Value>) {
    let mut described = Vec::new();
    let mut unreadable = Vec::new();
    for h in handles {
        match objects::describe(s, *h, token, values) {
            Ok(v) => described.push((*h, v)),
            Err(e) => {
                eprintln!("pktool: object handle {h}: {e}{then}");
                unreadable.push(json!({"handle": h.handle(), "error": e.to_string()}));
            }
        }
    }
    (described, unreadable)
}

/// With --json, stdout carries the JSON report, so a certificate, key or request cannot go
/// there too: it needs `-o FILE`. Checked before the token is touched.
fn file_for_json(env: &Env, output: &Path) -> Result<()> {
    if env.cli.json && output.as_os_str() == "-" {
        return Err(Error::Usage(
            "--json prints its report on standard output: write the data to a file with -o FILE"
                .into(),
        ));
    }
    Ok(())
}

/// Tells where the output went, unless it went to stdout.
fn note(env: &Env, output: &Path, v: Value, what: &str) {
    if output.as_os_str() != "-" {
        env.out(&v, || format!("{what} written to {}", output.display()));
    }
}

/// `--format` of a certificate or request: pem or der (a usage error before the login).
fn check_format(format: &str) -> Result<()> {
    if !matches!(format, "der" | "pem") {
        return Err(Error::Usage(format!("--format {format}: use pem or der")));
    }
    Ok(())
}

fn cert_bytes(cert: &X509, format: &str) -> Result<Vec<u8>> {
    Ok(match format {
        "der" => cert.to_der()?,
        "pem" => cert.to_pem()?,
        f => return Err(Error::Usage(format!("--format {f}: use pem or der"))),
    })
}

fn load_cert(path: &Path) -> Result<X509> {
    let data = read_file(path)?;
    X509::from_pem(&data)
        .or_else(|_| X509::from_der(&data))
        .map_err(|_| Error::File(format!("{} is not an X.509 certificate", path.display())))
}

/// The private key an ObjArgs names (the class is forced to private).
fn private_key(s: &Session, obj: &ObjArgs) -> Result<ObjectHandle> {
    let mut sel = selector(obj)?;
    sel.class = Some(ObjectClass::PRIVATE_KEY);
    objects::find_one(s, &sel)
}

/// The token certificate with a key's CKA_ID.
fn cert_of_key(s: &Session, key: ObjectHandle) -> Result<X509> {
    let a = objects::read(s, key, &[AttributeType::Id])?;
    let id = objects::bytes_attr(&a, AttributeType::Id).unwrap_or_default();
    let sel = Selector {
        label: None,
        id: Some(id.clone()),
        class: Some(ObjectClass::CERTIFICATE),
    };
    let found = objects::find(s, &sel)?;
    let h = match found.len() {
        1 => found[0],
        0 => {
            return Err(Error::NotFound(format!(
                "no certificate with the key's id {} in the token; give --ca-cert FILE",
                hex(&id)
            )))
        }
        n => {
            return Err(Error::Ambiguous(format!(
                "{n} certificates have id {}",
                hex(&id)
            )))
        }
    };
    let a = objects::read(s, h, &[AttributeType::Value])?;
    let der = objects::bytes_attr(&a, AttributeType::Value)
        .ok_or_else(|| Error::TokenState("the certificate object has no value".into()))?;
    Ok(X509::from_der(&der)?)
}

fn tokens(env: &Env) -> Result<()> {
    let p11 = token::load(&env.module()?)?;
    let slots = p11.get_all_slots().ctx(|| "listing slots".into())?;
    let mut out = Vec::new();
    for slot in slots {
        let si = p11
            .get_slot_info(slot)
            .ctx(|| format!("reading slot {}", slot.id()))?;
        let mut v = json!({
            "slot": slot.id(),
            "description": si.slot_description().trim_end(),
            "token_present": si.token_present(),
        });
        if si.token_present() {
            let ti = p11
                .get_token_info(slot)
                .ctx(|| format!("reading the token in slot {}", slot.id()))?;
            let pin_state = |to_change: bool, locked: bool, low: bool, final_try: bool| {
                if locked {
                    "locked"
                } else if to_change {
                    "expired (default PIN, must be changed)"
                } else if final_try {
                    "final try"
                } else if low {
                    "count low"
                } else {
                    "ok"
                }
            };
            let mut flags = Vec::new();
            for (on, name) in [
                (ti.token_initialized(), "TOKEN_INITIALIZED"),
                (ti.login_required(), "LOGIN_REQUIRED"),
                (ti.user_pin_initialized(), "USER_PIN_INITIALIZED"),
                (ti.user_pin_to_be_changed(), "USER_PIN_TO_BE_CHANGED"),
                (ti.user_pin_locked(), "USER_PIN_LOCKED"),
                (ti.user_pin_count_low(), "USER_PIN_COUNT_LOW"),
                (ti.user_pin_final_try(), "USER_PIN_FINAL_TRY"),
                (ti.so_pin_to_be_changed(), "SO_PIN_TO_BE_CHANGED"),
                (ti.so_pin_locked(), "SO_PIN_LOCKED"),
                (ti.write_protected(), "WRITE_PROTECTED"),
            ] {
                if on {
                    flags.push(name);
                }
            }
            v["token"] = json!({
                "label": ti.label().trim_end(),
                "manufacturer": ti.manufacturer_id().trim_end(),
                "model": ti.model().trim_end(),
                "serial": ti.serial_number().trim_end(),
                "flags": flags,
                "user_pin": pin_state(ti.user_pin_to_be_changed(), ti.user_pin_locked(),
                    ti.user_pin_count_low(), ti.user_pin_final_try()),
                "so_pin": pin_state(ti.so_pin_to_be_changed(), ti.so_pin_locked(),
                    ti.so_pin_count_low(), ti.so_pin_final_try()),
            });
        }
        out.push(v);
    }
    env.out(&json!({ "slots": out }), || {
        out.iter()
            .map(|v| {
                let mut l = format!("slot {}: {}", v["slot"], v["description"].as_str().unwrap_or(""));
                match v.get("token") {
                    Some(t) if t["flags"].as_array().is_some_and(|f| {
                        f.iter().any(|x| x == "TOKEN_INITIALIZED")
                    }) =>
                    {
                        l += &format!(
                            "\n  token: {}  ({} {}, serial {})\n  user PIN: {}  SO PIN: {}\n  flags: {}",
                            t["label"].as_str().unwrap_or(""),
                            t["manufacturer"].as_str().unwrap_or(""),
                            t["model"].as_str().unwrap_or(""),
                            t["serial"].as_str().unwrap_or(""),
                            t["user_pin"].as_str().unwrap_or(""),
                            t["so_pin"].as_str().unwrap_or(""),
                            t["flags"]
                                .as_array()
                                .map(|f| f.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","))
                                .unwrap_or_default()
                        );
                    }
                    Some(_) => l += "\n  token: not initialized (pktool --slot N inittoken)",
                    None => l += "\n  no token",
                }
                l
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    Ok(())
}

fn inittoken(env: &Env, label: &str, user_pin_file: Option<&Path>) -> Result<()> {
    let slot_id = env.cli.slot.ok_or_else(|| {
        Error::Usage("inittoken needs --slot ID (pktool tokens lists them)".into())
    })?;
    // A token label is 32 bytes; a longer one would be cut (inside a character, even), and
    // the token then named by a label nobody gave.
    if label.len() > 32 {
        return Err(Error::Usage(format!(
            "the token label '{}' is {} bytes; a token label holds at most 32",
            crate::util::shorten(label),
            label.len()
        )));
    }
    // Everything that can fail on this side comes before C_InitToken, which destroys every
    // object of the token: the user PIN file is read first.
    let upin = user_pin_file
        .map(|f| {
            SecretSource {
                file: Some(f.to_path_buf()),
                options: "--user-pin-file",
                ..Default::default()
            }
            .get("user PIN")
        })
        .transpose()?;
    let p11 = token::load(&env.module()?)?;
    let slot = token::find_slot(
        &p11,
        &TokenChoice {
            label: None,
            slot: Some(slot_id),
        },
    )?;
    let so = env.cli.pin.source().get("new SO PIN")?;
    p11.init_token(slot, &AuthPin::from(so.to_string()), label)
        .ctx(|| format!("initializing the token in slot {slot_id}"))?;
    let mut user = false;
    if let Some(upin) = upin {
        let s = p11
            .open_rw_session(slot)
            .ctx(|| format!("opening a session on slot {slot_id}"))?;
        s.login(UserType::So, Some(&AuthPin::from(so.to_string())))
            .ctx(|| "logging in as SO".into())?;
        s.init_pin(&AuthPin::from(upin.to_string()))
            .ctx(|| "setting the user PIN".into())?;
        user = true;
    }
    env.out(
        &json!({"slot": slot_id, "label": label, "user_pin_set": user}),
        || format!("token '{label}' initialized in slot {slot_id}"),
    );
    Ok(())
}

/// The default PIN of a fresh OpenCF softtoken, which must be changed before use.
const FRESH_PIN: &str = "changeme";

fn setpin(env: &Env, so: bool, new: &SecretSource) -> Result<()> {
    let t = env.open(None)?;
    let info = t
        .p11
        .get_token_info(t.slot)
        .ctx(|| "reading the token info".into())?;
    let who = if so { "SO" } else { "user" };
    let expired = if so {
        info.so_pin_to_be_changed()
    } else {
        info.user_pin_to_be_changed()
    };
    let old = match env.cli.pin.source().given("PIN")? {
        Some(p) => p,
        None if expired => {
            if !env.cli.json {
                eprintln!("pktool: the {who} PIN is the expired default; using '{FRESH_PIN}' as the old PIN");
            }
            zeroize::Zeroizing::new(FRESH_PIN.to_string())
        }
        None => crate::pin::prompt(
            &format!("current {who} PIN of '{}': ", t.label),
            crate::pin::PIN_OPTIONS,
        )?,
    };
    let newpin = match new.given("new PIN")? {
        Some(p) => p,
        None => {
            let a = crate::pin::prompt(&format!("new {who} PIN: "), new.options)?;
            let b = crate::pin::prompt(&format!("new {who} PIN again: "), new.options)?;
            if *a != *b {
                return Err(Error::Usage("the two new PINs differ".into()));
            }
            a
        }
    };
    let s = t.session()?;
    let ut = if so { UserType::So } else { UserType::User };
    match s.login(ut, Some(&AuthPin::from(old.to_string()))) {
        Err(cryptoki::error::Error::Pkcs11(cryptoki::error::RvError::UserAlreadyLoggedIn, _)) => {}
        r => r.ctx(|| format!("logging in as {who} to '{}'", t.label))?,
    }
    s.set_pin(
        &AuthPin::from(old.to_string()),
        &AuthPin::from(newpin.to_string()),
    )
    .ctx(|| format!("changing the {who} PIN of '{}'", t.label))?;
    env.out(&json!({"token": t.label, "changed": who}), || {
        format!("{who} PIN of '{}' changed", t.label)
    });
    Ok(())
}

fn list(env: &Env, objtype: &str, obj: &ObjArgs, values: bool) -> Result<()> {
    let classes = objects::objtype_classes(objtype)?;
    let (t, s) = env.login(Some(obj))?;
    let mut sel = selector(obj)?;
    let mut handles = Vec::new();
    if classes.is_empty() || sel.class.is_some() {
        handles = objects::find(&s, &sel)?;
    } else {
        for c in classes.iter() {
            sel.class = Some(*c);
            handles.extend(objects::find(&s, &sel)?);
        }
    }
    // An object that cannot be described (damaged in the keystore) is reported by its handle
    // and the others are still listed; the command then fails.
    let (described, unreadable) = describe_each(&s, &handles, &t.label, values, "");
    let items: Vec<Value> = described.into_iter().map(|(_, v)| v).collect();
    let v = json!({"token": t.label, "objects": items, "unreadable": unreadable});
    env.out(&v, || {
        let mut out = format!("token '{}': {} object(s)", t.label, items.len());
        for i in &items {
            out += "\n";
            out += &objects::human_line(i);
        }
        out
    });
    if !unreadable.is_empty() {
        return Err(Error::Reported(format!(
            "{} of {} objects could not be read (each named above by its handle)",
            unreadable.len(),
            handles.len()
        )));
    }
    Ok(())
}

fn confirm(question: &str) -> Result<bool> {
    use std::io::{BufRead, Write};
    let mut tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .map_err(|_| Error::Usage("no terminal to confirm on; add -y to delete".into()))?;
    write!(tty, "{question} [y/N] ").map_err(|e| Error::io("/dev/tty", e))?;
    let mut line = String::new();
    std::io::BufReader::new(&tty)
        .read_line(&mut line)
        .map_err(|e| Error::io("/dev/tty", e))?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes"))
}

fn delete(env: &Env, obj: &ObjArgs, yes: bool) -> Result<()> {
    let sel = selector(obj)?;
    if sel.is_empty() {
        return Err(Error::Usage(
            "name what to delete with --label, --id or --uri".into(),
        ));
    }
    let (t, s) = env.login(Some(obj))?;
    let found = objects::find(&s, &sel)?;
    if found.is_empty() {
        return Err(Error::NotFound(format!(
            "no object matches {}",
            sel.describe()
        )));
    }
    // An object that matches but whose attributes cannot be read (damaged in the keystore) is
    // named by its handle and left alone, as list does: what it is cannot be shown, so it is
    // not deleted unseen. The others are deleted and the command then fails.
    let (described, unreadable) = describe_each(&s, &found, &t.label, false, "; not deleted");
    let (readable, items): (Vec<ObjectHandle>, Vec<Value>) = described.into_iter().unzip();
    if !yes && !items.is_empty() {
        for i in &items {
            eprintln!("{}", objects::human_line(i));
        }
        if !confirm(&format!("Delete these {} object(s)?", items.len()))? {
            env.out(&json!({"deleted": [], "unreadable": unreadable}), || {
                "nothing deleted".into()
            });
            return Ok(());
        }
    }
    for (h, i) in readable.iter().zip(&items) {
        s.destroy_object(*h)
            .ctx(|| format!("deleting {}", i["uri"].as_str().unwrap_or("")))?;
    }
    env.out(&json!({"deleted": items, "unreadable": unreadable}), || {
        let mut lines: Vec<String> = items
            .iter()
            .map(|i| format!("deleted {}", i["uri"].as_str().unwrap_or("")))
            .collect();
        if items.is_empty() {
            lines.push("nothing deleted".into());
        }
        lines.join("\n")
    });
    if !unreadable.is_empty() {
        return Err(Error::Reported(format!(
            "{} of {} matching objects could not be read and were not deleted \
             (each named above by its handle)",
            unreadable.len(),
            found.len()
        )));
    }
    Ok(())
}

fn import(env: &Env, input: &Path, new: &NewKeyArgs, pass: &SecretSource) -> Result<()> {
    let data = read_file(input)?;
    let name = input.display().to_string();
    let o = key_opts(new)?;
    // Everything that can fail on the file's side comes before the token is touched.
    let pieces = crate::import::read_pieces(&data, &name, pass)?;
    let planned = crate::import::plan_marked(pieces, &o, &name)?;
    let (t, s) = env.login(None)?;
    // A chain certificate the token already holds (the same certificate under the same label
    // and id, e.g. the CA of an earlier import) is not stored again.
    let mut templates = Vec::new();
    let mut present = Vec::new();
    for (tpl, chain) in planned {
        match chain
            .then(|| identical_object(&s, &tpl))
            .transpose()?
            .flatten()
        {
            Some(h) => present.push(objects::describe(&s, h, &t.label, false)?),
            None => templates.push(tpl),
        }
    }
    let labels = templates.iter().filter_map(|t| objects::class_and_label(t));
    let labels: Vec<(ObjectClass, String)> = labels.collect();
    check_labels(
        &s,
        &new.labels,
        labels.iter().map(|(c, l)| (*c, Some(l.as_bytes()))),
    )?;
    let created = crate::import::create_all(&s, &templates)?;
    let shown: Vec<Value> = created
        .iter()
        .map(|h| objects::describe(&s, *h, &t.label, false))
        .collect::<Result<_>>()?;
    env.out(&json!({"created": shown, "present": present}), || {
        let imported = shown
            .iter()
            .map(|o| format!("imported {}", objects::human_line(o)));
        let kept = present
            .iter()
            .map(|o| format!("present  {}", objects::human_line(o)));
        imported.chain(kept).collect::<Vec<_>>().join("\n")
    });
    Ok(())
}

/// An object of the token with the template's class, label, id and value, if there is one.
fn identical_object(s: &Session, tpl: &[Attribute]) -> Result<Option<ObjectHandle>> {
    let wanted = [
        AttributeType::Class,
        AttributeType::Label,
        AttributeType::Id,
        AttributeType::Value,
    ];
    let find: Vec<Attribute> = tpl
        .iter()
        .filter(|a| wanted.contains(&a.attribute_type()))
        .cloned()
        .collect();
    let found = s
        .find_objects(&find)
        .ctx(|| "searching for objects already present".into())?;
    Ok(found.first().copied())
}

fn export(
    env: &Env,
    obj: &ObjArgs,
    output: &Path,
    format: &str,
    pass: &SecretSource,
) -> Result<()> {
    file_for_json(env, output)?;
    // A format no class takes is a usage error before the login; which formats the object's
    // class takes is known once it is found.
    if !matches!(format, "pem" | "der" | "pkcs8" | "pkcs12" | "p12") {
        return Err(Error::Usage(format!(
            "--format {format}: use pem or der (pkcs8 or pkcs12 for a private key)"
        )));
    }
    let (_, s) = env.login(Some(obj))?;
    let sel = selector(obj)?;
    let h = objects::find_one(&s, &sel)?;
    let class = objects::class_of(&s, h)?;
    let data = match class {
        ObjectClass::CERTIFICATE => {
            let a = objects::read(&s, h, &[AttributeType::Value])?;
            let der = objects::bytes_attr(&a, AttributeType::Value)
                .ok_or_else(|| Error::TokenState("the certificate has no value".into()))?;
            cert_bytes(&X509::from_der(&der)?, format)?
        }
        ObjectClass::PUBLIC_KEY => {
            let k = keys::public_pkey(&s, h)?;
            match format {
                "pem" => k.public_key_to_pem()?,
                "der" => k.public_key_to_der()?,
                f => {
                    return Err(Error::Usage(format!(
                        "--format {f}: a public key is pem or der"
                    )))
                }
            }
        }
        ObjectClass::PRIVATE_KEY => {
            let a = objects::read(
                &s,
                h,
                &[AttributeType::Sensitive, AttributeType::Extractable],
            )?;
            let sensitive = objects::bool_attr(&a, AttributeType::Sensitive).unwrap_or(true);
            let extractable = objects::bool_attr(&a, AttributeType::Extractable).unwrap_or(false);
            if sensitive || !extractable {
                return Err(Error::TokenState(format!(
                    "the private key ({}) cannot be exported: CKA_SENSITIVE={sensitive}, \
                     CKA_EXTRACTABLE={extractable} (export needs a key that is extractable and not sensitive)",
                    sel.describe()
                )));
            }
            let k = keys::private_pkey(&s, h)?;
            match format {
                "pem" | "pkcs8" => k.private_key_to_pem_pkcs8()?,
                "der" => k.private_key_to_pkcs8()?,
                "pkcs12" | "p12" => {
                    // The key's certificate when the token has one; two or more with its
                    // id (a renewal) are refused rather than one left out without a word.
                    let cert = match cert_of_key(&s, h) {
                        Ok(c) => Some(c),
                        Err(Error::NotFound(_)) => None,
                        Err(Error::Ambiguous(m)) => {
                            return Err(Error::Ambiguous(format!(
                                "{m}: the PKCS#12 file would hold one of them; delete the one \
                                 that is not wanted, or export the key as PEM and the \
                                 certificate on its own; nothing was written"
                            )))
                        }
                        Err(e) => return Err(e),
                    };
                    if let Some(c) = &cert {
                        if !c.public_key()?.public_eq(&k) {
                            return Err(Error::TokenState(format!(
                                "the token's certificate with the key's id ({}) is not the \
                                 key's: its public key differs; nothing was written",
                                sel.describe()
                            )));
                        }
                    }
                    let p = pass.get("password for the PKCS#12 file")?;
                    crate::import::no_nul(&p, "the PKCS#12 file")?;
                    let mut b = Pkcs12::builder();
                    b.pkey(&k);
                    if let Some(c) = &cert {
                        b.cert(c);
                    }
                    // The label as friendlyName, but one OpenSSL cannot take (a NUL byte).
                    if let Some(l) = sel.label.as_ref().filter(|l| !l.contains(&0)) {
                        b.name(&String::from_utf8_lossy(l));
                    }
                    b.build2(&p)?.to_der()?
                }
                f => {
                    return Err(Error::Usage(format!(
                        "--format {f}: a private key is pem/pkcs8, der or pkcs12"
                    )))
                }
            }
        }
        _ => {
            return Err(Error::Usage(
                "only certificates, public keys and private keys can be exported".into(),
            ))
        }
    };
    if class == ObjectClass::PRIVATE_KEY {
        // A private key (in the clear, or under the file's password) is readable by its owner
        // only, as openssl writes one.
        write_private_file(output, &data)?;
    } else {
        write_file(output, &data)?;
    }
    note(env, output, json!({"output": output}), "export");
    Ok(())
}

/// Attribute helpers for migrate.
///
/// CKA_LABEL as stored (bytes, which need not be UTF-8) and CKA_ID.
pub fn label_id(s: &Session, h: ObjectHandle) -> (Option<Vec<u8>>, Vec<u8>) {
    let a = objects::read(s, h, &[AttributeType::Label, AttributeType::Id]).unwrap_or_default();
    (
        objects::bytes_attr(&a, AttributeType::Label),
        objects::bytes_attr(&a, AttributeType::Id).unwrap_or_default(),
    )
}

pub fn attr_present(t: &[Attribute], ty: AttributeType) -> bool {
    t.iter().any(|a| a.attribute_type() == ty)
}
