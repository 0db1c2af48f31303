//! Loads provider modules and collects what `list -m`, `list -v` and `refresh` show.
//!
//! Each module is loaded in a process of its own (this program run again with the hidden
//! `probe-module` command), so that a module that crashes or hangs in its `C_GetFunctionList`,
//! `C_Initialize` or a query is reported as a problem of that provider instead of taking
//! `cryptoadm` down with it; one that has not answered within [`PROBE_TIMEOUT`] (or
//! `$CRYPTOADM_PROBE_TIMEOUT` seconds) is killed and reported.
// CK_ULONG is u64 here but u32 on some targets: the u64::from conversions are for those.
#![allow(clippy::useless_conversion)]

use std::path::Path;

use opencf_abi::provider::Provider;
use opencf_abi::sys::{self, CK_FLAGS, CK_MECHANISM_TYPE, CK_VERSION};
use opencf_config::{mechanism_name, ProviderConfig};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

pub use opencf_abi::rv_names::rv_name;

#[derive(Serialize, Deserialize, Debug)]
pub struct LibInfo {
    pub cryptoki_version: String,
    pub manufacturer: String,
    pub description: String,
    pub library_version: String,
}

#[derive(Serialize, Deserialize, Debug)]
pub struct TokenReport {
    pub label: String,
    pub manufacturer: String,
    pub model: String,
    pub serial: String,
    pub flags: Vec<String>,
}

#[derive(Serialize, Deserialize, Debug)]
pub struct MechReport {
    pub name: String,
    pub value: CK_MECHANISM_TYPE,
    /// False when the provider's policy in the config disables it.
    pub enabled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_bytes: Option<u64>,
    pub min_key_size: Option<u64>,
    pub max_key_size: Option<u64>,
    pub flags: Vec<String>,
}

#[derive(Serialize, Deserialize, Debug)]
pub struct SlotReport {
    pub id: u64,
    pub description: String,
    pub manufacturer: String,
    pub flags: Vec<String>,
    pub token: Option<TokenReport>,
    pub mechanisms: Vec<MechReport>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

#[derive(Serialize, Deserialize, Debug)]
pub struct ProviderReport {
    pub name: String,
    pub module: String,
    pub path: String,
    pub info: Option<LibInfo>,
    pub slots: Vec<SlotReport>,
    /// Problems met while loading or querying the module; empty when all went well.
    pub errors: Vec<String>,
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .trim_end_matches([' ', '\0'])
        .to_string()
}

fn version(v: CK_VERSION) -> String {
    format!("{}.{}", v.major, v.minor)
}

fn flag_names(flags: CK_FLAGS, table: &[(CK_FLAGS, &str)]) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = flags;
    for &(bit, name) in table {
        if flags & bit != 0 {
            out.push(name.to_string());
            rest &= !bit;
        }
    }
    if rest != 0 {
        out.push(format!("{rest:#x}"));
    }
    out
}

const SLOT_FLAGS: &[(CK_FLAGS, &str)] = &[
    (sys::CKF_TOKEN_PRESENT, "TOKEN_PRESENT"),
    (sys::CKF_REMOVABLE_DEVICE, "REMOVABLE_DEVICE"),
    (sys::CKF_HW_SLOT, "HW_SLOT"),
];

const TOKEN_FLAGS: &[(CK_FLAGS, &str)] = &[
    (sys::CKF_RNG, "RNG"),
    (sys::CKF_WRITE_PROTECTED, "WRITE_PROTECTED"),
    (sys::CKF_LOGIN_REQUIRED, "LOGIN_REQUIRED"),
    (sys::CKF_USER_PIN_INITIALIZED, "USER_PIN_INITIALIZED"),
    (sys::CKF_RESTORE_KEY_NOT_NEEDED, "RESTORE_KEY_NOT_NEEDED"),
    (sys::CKF_CLOCK_ON_TOKEN, "CLOCK_ON_TOKEN"),
    (
        sys::CKF_PROTECTED_AUTHENTICATION_PATH,
        "PROTECTED_AUTHENTICATION_PATH",
    ),
    (sys::CKF_DUAL_CRYPTO_OPERATIONS, "DUAL_CRYPTO_OPERATIONS"),
    (sys::CKF_TOKEN_INITIALIZED, "TOKEN_INITIALIZED"),
    (
        sys::CKF_SECONDARY_AUTHENTICATION,
        "SECONDARY_AUTHENTICATION",
    ),
    (sys::CKF_USER_PIN_COUNT_LOW, "USER_PIN_COUNT_LOW"),
    (sys::CKF_USER_PIN_FINAL_TRY, "USER_PIN_FINAL_TRY"),
    (sys::CKF_USER_PIN_LOCKED, "USER_PIN_LOCKED"),
    (sys::CKF_USER_PIN_TO_BE_CHANGED, "USER_PIN_TO_BE_CHANGED"),
    (sys::CKF_SO_PIN_COUNT_LOW, "SO_PIN_COUNT_LOW"),
    (sys::CKF_SO_PIN_FINAL_TRY, "SO_PIN_FINAL_TRY"),
    (sys::CKF_SO_PIN_LOCKED, "SO_PIN_LOCKED"),
    (sys::CKF_SO_PIN_TO_BE_CHANGED, "SO_PIN_TO_BE_CHANGED"),
    (sys::CKF_ERROR_STATE, "ERROR_STATE"),
    (sys::CKF_SEED_RANDOM_REQUIRED, "SEED_RANDOM_REQUIRED"),
    (sys::CKF_ASYNC_SESSION_SUPPORTED, "ASYNC_SESSION_SUPPORTED"),
];

const MECH_FLAGS: &[(CK_FLAGS, &str)] = &[
    (0x1, "HW"),
    (0x2, "MESSAGE_ENCRYPT"),
    (0x4, "MESSAGE_DECRYPT"),
    (0x8, "MESSAGE_SIGN"),
    (0x10, "MESSAGE_VERIFY"),
    (0x20, "MULTI_MESSAGE"),
    (0x40, "FIND_OBJECTS"),
    (0x100, "ENCRYPT"),
    (0x200, "DECRYPT"),
    (0x400, "DIGEST"),
    (0x800, "SIGN"),
    (0x1000, "SIGN_RECOVER"),
    (0x2000, "VERIFY"),
    (0x4000, "VERIFY_RECOVER"),
    (0x8000, "GENERATE"),
    (0x10000, "GENERATE_KEY_PAIR"),
    (0x20000, "WRAP"),
    (0x40000, "UNWRAP"),
    (0x80000, "DERIVE"),
    (0x100000, "EC_F_P"),
    (0x200000, "EC_F_2M"),
    (0x400000, "EC_ECPARAMETERS"),
    (0x800000, "EC_OID"),
    (0x1000000, "EC_UNCOMPRESS"),
    (0x2000000, "EC_COMPRESS"),
    (0x4000000, "EC_CURVENAME"),
    (0x10000000, "ENCAPSULATE"),
    (0x20000000, "DECAPSULATE"),
    (0x80000000, "EXTENSION"),
];

/// How long a module may take to load, initialize and answer the queries.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// The line before the report a `probe-module` process prints (a module may print too).
const REPORT_MARK: &str = "@@cryptoadm-probe-report@@";

/// Loads `path`, runs C_Initialize and C_GetInfo, optionally walks every slot (token info,
/// mechanism list and info), then C_Finalize, in a process of its own. Problems are
/// collected in `errors`, including the module crashing or hanging that process.
pub fn probe(cfg: &ProviderConfig, path: &Path, walk_slots: bool) -> ProviderReport {
    let mut rep = match probe_elsewhere(path, walk_slots) {
        Ok(rep) => rep,
        Err(problem) => ProviderReport {
            name: String::new(),
            module: String::new(),
            path: path.display().to_string(),
            info: None,
            slots: Vec::new(),
            errors: vec![problem],
        },
    };
    // The configuration's view: the provider's names and its mechanism policy.
    rep.name = cfg.name.clone();
    rep.module = cfg.module.clone();
    for m in rep.slots.iter_mut().flat_map(|s| s.mechanisms.iter_mut()) {
        m.enabled = cfg.allows(m.value);
        m.min_bytes = cfg.min_bytes(m.value);
    }
    rep
}

/// The report of `path` from a `probe-module` process, or the problem that process met.
fn probe_elsewhere(path: &Path, walk_slots: bool) -> Result<ProviderReport, String> {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};
    let exe = std::env::current_exe().map_err(|e| format!("cannot find cryptoadm itself: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("probe-module");
    if walk_slots {
        cmd.arg("--walk");
    }
    let mut child = cmd
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start a process to load the module: {e}"))?;
    // The report is read while the process runs, so a large one cannot fill the pipe.
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.read_to_end(&mut out);
        out
    });
    let limit = timeout();
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() >= limit => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the module did not answer within {} s (loading, C_Initialize or a query \
                     hung; every application would hang there too): stopped",
                    limit.as_secs_f64()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(format!("waiting for the module's process: {e}")),
        }
    };
    let out = reader.join().unwrap_or_default();
    if let Some(sig) = status.signal() {
        return Err(format!(
            "the module crashed the process that loaded it ({}): every application that \
             loads it would crash too",
            signal_name(sig)
        ));
    }
    let text = String::from_utf8_lossy(&out);
    text.rsplit_once(REPORT_MARK)
        .and_then(|(_, json)| serde_json::from_str(json.trim()).ok())
        .ok_or_else(|| {
            format!("the process that loaded the module ended with {status} and no report")
        })
}

/// The longest `$CRYPTOADM_PROBE_TIMEOUT` taken (a day); a longer one is cut to it.
const MAX_PROBE_TIMEOUT: f64 = 86_400.0;

/// `$CRYPTOADM_PROBE_TIMEOUT` seconds (cut to a day; a value past what a timer holds, such as
/// `1e300`, was a panic), else [`PROBE_TIMEOUT`].
fn timeout() -> Duration {
    std::env::var("CRYPTOADM_PROBE_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(PROBE_TIMEOUT, |s| {
            Duration::from_secs_f64(s.min(MAX_PROBE_TIMEOUT))
        })
}

fn signal_name(sig: i32) -> String {
    let name = match sig {
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        _ => return format!("signal {sig}"),
    };
    format!("signal {sig}, {name}")
}

/// The `probe-module` command: the report of `path`, loaded in this process, after
/// [`REPORT_MARK`] on standard output.
pub fn print_report(path: &Path, walk_slots: bool) {
    let rep = probe_here(path, walk_slots);
    let json = serde_json::to_string(&rep).expect("a report serializes");
    println!("\n{REPORT_MARK}\n{json}");
}

/// [`probe`] in this process, with every mechanism enabled (the caller applies the policy).
fn probe_here(path: &Path, walk_slots: bool) -> ProviderReport {
    let mut rep = ProviderReport {
        name: String::new(),
        module: String::new(),
        path: path.display().to_string(),
        info: None,
        slots: Vec::new(),
        errors: Vec::new(),
    };
    if !path.exists() {
        rep.errors
            .push(format!("module {} does not exist", path.display()));
        return rep;
    }
    let prov = match Provider::load(path) {
        Ok(p) => p,
        Err(e) => {
            rep.errors
                .push(format!("cannot load {}: {e}", path.display()));
            return rep;
        }
    };
    if let Err(rv) = prov.initialize() {
        rep.errors
            .push(format!("C_Initialize failed: {}", rv_name(rv)));
        return rep;
    }
    match prov.get_info() {
        Ok(i) => {
            rep.info = Some(LibInfo {
                cryptoki_version: version(i.cryptokiVersion),
                manufacturer: text(&i.manufacturerID),
                description: text(&i.libraryDescription),
                library_version: version(i.libraryVersion),
            })
        }
        Err(rv) => rep
            .errors
            .push(format!("C_GetInfo failed: {}", rv_name(rv))),
    }
    if walk_slots {
        match prov.get_slot_list(false) {
            Ok(slots) => {
                for slot in slots {
                    rep.slots.push(probe_slot(&prov, slot));
                }
            }
            Err(rv) => rep
                .errors
                .push(format!("C_GetSlotList failed: {}", rv_name(rv))),
        }
    }
    if let Err(rv) = prov.finalize() {
        rep.errors
            .push(format!("C_Finalize failed: {}", rv_name(rv)));
    }
    rep
}

fn probe_slot(prov: &Provider, slot: sys::CK_SLOT_ID) -> SlotReport {
    let mut s = SlotReport {
        id: u64::from(slot),
        description: String::new(),
        manufacturer: String::new(),
        flags: Vec::new(),
        token: None,
        mechanisms: Vec::new(),
        errors: Vec::new(),
    };
    let mut present = true;
    match prov.get_slot_info(slot) {
        Ok(i) => {
            s.description = text(&i.slotDescription);
            s.manufacturer = text(&i.manufacturerID);
            s.flags = flag_names(i.flags, SLOT_FLAGS);
            present = i.flags & sys::CKF_TOKEN_PRESENT != 0;
        }
        Err(rv) => s
            .errors
            .push(format!("C_GetSlotInfo failed: {}", rv_name(rv))),
    }
    if present {
        match prov.get_token_info(slot) {
            Ok(t) => {
                s.token = Some(TokenReport {
                    label: text(&t.label),
                    manufacturer: text(&t.manufacturerID),
                    model: text(&t.model),
                    serial: text(&t.serialNumber),
                    flags: flag_names(t.flags, TOKEN_FLAGS),
                })
            }
            Err(rv) => s
                .errors
                .push(format!("C_GetTokenInfo failed: {}", rv_name(rv))),
        }
    }
    match prov.get_mechanism_list(slot) {
        Ok(list) => {
            for m in list {
                let (min, max, flags) = match prov.get_mechanism_info(slot, m) {
                    Ok(i) => (
                        Some(u64::from(i.ulMinKeySize)),
                        Some(u64::from(i.ulMaxKeySize)),
                        flag_names(i.flags, MECH_FLAGS),
                    ),
                    Err(rv) => {
                        s.errors.push(format!(
                            "C_GetMechanismInfo({}) failed: {}",
                            mechanism_name(m),
                            rv_name(rv)
                        ));
                        (None, None, Vec::new())
                    }
                };
                s.mechanisms.push(MechReport {
                    name: mechanism_name(m),
                    value: m,
                    // The policy is the configuration's, applied by [`probe`].
                    enabled: true,
                    min_bytes: None,
                    min_key_size: min,
                    max_key_size: max,
                    flags,
                });
            }
        }
        Err(rv) => s
            .errors
            .push(format!("C_GetMechanismList failed: {}", rv_name(rv))),
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The token flags of PKCS#11 3.2 have names; a bit without one is still shown, in hex.
    #[test]
    fn token_flags_of_version_3_2_are_named() {
        let flags = sys::CKF_RNG
            | sys::CKF_TOKEN_INITIALIZED
            | sys::CKF_SEED_RANDOM_REQUIRED
            | sys::CKF_ASYNC_SESSION_SUPPORTED
            | 0x8000_0000;
        assert_eq!(
            flag_names(flags, TOKEN_FLAGS),
            [
                "RNG",
                "TOKEN_INITIALIZED",
                "SEED_RANDOM_REQUIRED",
                "ASYNC_SESSION_SUPPORTED",
                "0x80000000"
            ]
        );
    }
}
