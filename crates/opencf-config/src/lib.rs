//! The OpenCF framework configuration (`opencf.toml`).
//!
//! ```toml
//! [metaslot]
//! enabled = true
//! keystore = "OpenCF Softtoken"      # token label
//! auto_key_migrate = true
//!
//! [[provider]]                       # order = preference
//! name = "accel"
//! module = "libopencf_accel.so"      # bare name: looked up beside libopencf.so
//! [provider.policy.CKM_AES_GCM]
//! min_bytes = 4096
//!
//! [[provider]]
//! name = "softhsm"
//! module = "/usr/lib/softhsm/libsofthsm2.so"
//! disabled = ["CKM_RSA_PKCS_KEY_PAIR_GEN"]
//! random = false
//! ```
//!
//! [`load`] finds the file (search order below), parses and validates it and applies the
//! environment overrides. [`load_from`] parses one file without overrides (what an editor such
//! as cryptoadm uses), [`save`] and [`update`] write it back atomically under a lock;
//! [`edit_target`] says which file an editor writes and [`update_target`] edits it.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use opencf_abi::sys::CK_MECHANISM_TYPE;
use serde::{Deserialize, Serialize};
use toml::Spanned;

mod names;
pub use names::MECHANISMS;

/// Default label of the token that keeps the metaslot's token objects.
pub const DEFAULT_KEYSTORE: &str = "OpenCF Softtoken";
/// Module file name of the accelerator provider (used by the built-in default when present).
pub const ACCEL_MODULE: &str = "libopencf_accel.so";
/// `min_bytes` of `CKM_AES_GCM` on the accelerator provider in the built-in default: the
/// smallest single-part AES-GCM operation its bulk engine (one operation split across cores)
/// runs faster than the softtoken, measured with `cfspeed --break-even` (docs/PERFORMANCE.md,
/// "Bulk AES-GCM through the accelerator provider"); smaller ones go to the softtoken.
pub const ACCEL_GCM_MIN_BYTES: u64 = 256 * 1024;
/// `min_bytes` of `CKM_AES_CTR` on the accelerator provider in the built-in default: the
/// smallest single-part AES-CTR operation that runs faster through slot 0 on the accelerator
/// (its keystream from OpenSSL's GCM kernel, split across cores from 256 KiB) than on the
/// softtoken, measured with `cfspeed --break-even` (docs/PERFORMANCE.md, "AES-CTR through the
/// GCM kernel"); smaller ones go to the softtoken.
pub const ACCEL_CTR_MIN_BYTES: u64 = 32 * 1024;
/// `min_bytes` of `CKM_AES_ECB` on the accelerator provider in the built-in default: the
/// smallest single-part AES-ECB operation its bulk engine runs faster than the softtoken,
/// measured with `cfspeed --break-even` (docs/ACCEL.md, "AES-CTR and AES-ECB").
pub const ACCEL_ECB_MIN_BYTES: u64 = 256 * 1024;
/// Module file name of the softtoken provider.
pub const SOFTTOKEN_MODULE: &str = "libopencf_softtoken.so";
/// System-wide configuration file.
pub const SYSTEM_CONFIG_PATH: &str = "/etc/opencf/opencf.toml";

/// Environment variables read by [`load`].
pub const ENV_CONF: &str = "OPENCF_CONF";
pub const ENV_METASLOT_ENABLED: &str = "OPENCF_METASLOT_ENABLED";
pub const ENV_METASLOT_KEYSTORE: &str = "OPENCF_METASLOT_KEYSTORE";

// ---------------------------------------------------------------------------------------------
// Public model
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub metaslot: MetaslotConfig,
    /// In order of preference.
    pub providers: Vec<ProviderConfig>,
    pub source: Source,
}

/// Where a [`Config`] came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    File(PathBuf),
    BuiltIn,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File(p) => write!(f, "{}", p.display()),
            Source::BuiltIn => f.write_str("built-in default"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaslotConfig {
    /// Default true.
    pub enabled: bool,
    /// Label of the keystore token; default "OpenCF Softtoken".
    pub keystore: String,
    /// Default true.
    pub auto_key_migrate: bool,
}

impl Default for MetaslotConfig {
    fn default() -> Self {
        MetaslotConfig {
            enabled: true,
            keystore: DEFAULT_KEYSTORE.to_string(),
            auto_key_migrate: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    pub name: String,
    /// As written in the file; see [`resolve_module`].
    pub module: String,
    /// TOML `enabled = [...]`: when present, only these mechanisms are used.
    pub enabled_mechanisms: Option<Vec<CK_MECHANISM_TYPE>>,
    /// TOML `disabled = [...]`.
    pub disabled_mechanisms: Vec<CK_MECHANISM_TYPE>,
    /// Whether the provider serves `C_GenerateRandom`/`C_SeedRandom` for the metaslot; default true.
    pub random: bool,
    /// `[provider.policy.CKM_X]` tables.
    pub policy: BTreeMap<CK_MECHANISM_TYPE, MechPolicy>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MechPolicy {
    /// Single-part operations on less data than this go to the next candidate provider.
    pub min_bytes: Option<u64>,
}

impl ProviderConfig {
    /// A provider with everything enabled and no policy.
    pub fn new(name: impl Into<String>, module: impl Into<String>) -> Self {
        ProviderConfig {
            name: name.into(),
            module: module.into(),
            enabled_mechanisms: None,
            disabled_mechanisms: Vec::new(),
            random: true,
            policy: BTreeMap::new(),
        }
    }

    /// Whether the metaslot may use mechanism `m` of this provider.
    pub fn allows(&self, m: CK_MECHANISM_TYPE) -> bool {
        if let Some(only) = &self.enabled_mechanisms {
            if !only.contains(&m) {
                return false;
            }
        }
        !self.disabled_mechanisms.contains(&m)
    }

    /// The `min_bytes` threshold for mechanism `m`, if any.
    pub fn min_bytes(&self, m: CK_MECHANISM_TYPE) -> Option<u64> {
        self.policy.get(&m).and_then(|p| p.min_bytes)
    }

    /// True when no mechanism at all is allowed (`enabled = []`).
    pub fn all_disabled(&self) -> bool {
        matches!(&self.enabled_mechanisms, Some(v) if v.iter().all(|m| self.disabled_mechanisms.contains(m)))
    }

    /// True when no mechanism restriction is configured.
    pub fn all_enabled(&self) -> bool {
        self.enabled_mechanisms.is_none() && self.disabled_mechanisms.is_empty()
    }
}

/// A configuration problem, naming the file and line where known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: Option<PathBuf>,
    pub line: Option<usize>,
    pub message: String,
}

impl ConfigError {
    pub fn new(file: Option<&Path>, line: Option<usize>, message: impl Into<String>) -> Self {
        ConfigError {
            file: file.map(Path::to_path_buf),
            line,
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.file, self.line) {
            (Some(file), Some(line)) => write!(f, "{}:{}: {}", file.display(), line, self.message),
            (Some(file), None) => write!(f, "{}: {}", file.display(), self.message),
            (None, Some(line)) => write!(f, "line {}: {}", line, self.message),
            (None, None) => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

// ---------------------------------------------------------------------------------------------
// Mechanism names
// ---------------------------------------------------------------------------------------------

/// Names preferred over their aliases when a value has several (current PKCS#11 spelling).
const PREFERRED: &[&str] = &[
    "CKM_EC_KEY_PAIR_GEN",
    "CKM_DSA_PROBABILISTIC_PARAMETER_GEN",
    "CKM_SHA3_224_KEY_DERIVE",
    "CKM_SHA3_256_KEY_DERIVE",
    "CKM_SHA3_384_KEY_DERIVE",
    "CKM_SHA3_512_KEY_DERIVE",
    "CKM_SHAKE_128_KEY_DERIVE",
    "CKM_SHAKE_256_KEY_DERIVE",
];

fn by_name() -> &'static HashMap<&'static str, CK_MECHANISM_TYPE> {
    static MAP: OnceLock<HashMap<&'static str, CK_MECHANISM_TYPE>> = OnceLock::new();
    MAP.get_or_init(|| MECHANISMS.iter().copied().collect())
}

fn by_value() -> &'static HashMap<CK_MECHANISM_TYPE, &'static str> {
    static MAP: OnceLock<HashMap<CK_MECHANISM_TYPE, &'static str>> = OnceLock::new();
    MAP.get_or_init(|| {
        let mut m = HashMap::new();
        for &(name, value) in MECHANISMS {
            m.entry(value).or_insert(name);
        }
        for &name in PREFERRED {
            if let Some(&v) = by_name().get(name) {
                m.insert(v, name);
            }
        }
        m
    })
}

/// "CKM_AES_GCM" → its value; also accepts numbers ("0x1087", "4231").
pub fn mechanism_from_name(name: &str) -> Option<CK_MECHANISM_TYPE> {
    let name = name.trim();
    if let Some(&v) = by_name().get(name) {
        return Some(v);
    }
    if let Some(hex) = name.strip_prefix("0x").or_else(|| name.strip_prefix("0X")) {
        // Digits only: from_str_radix would also take a leading '+'.
        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        return CK_MECHANISM_TYPE::from_str_radix(hex, 16).ok();
    }
    if !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit()) {
        return name.parse().ok();
    }
    None
}

/// Value → "CKM_AES_GCM", or "0x…" for values without a name (vendor mechanisms).
pub fn mechanism_name(m: CK_MECHANISM_TYPE) -> String {
    match by_value().get(&m) {
        Some(n) => (*n).to_string(),
        None => format!("{m:#x}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Paths and defaults
// ---------------------------------------------------------------------------------------------

/// A bare file name is looked up in `lib_dir` (beside libopencf.so); anything else is used as given.
pub fn resolve_module(module: &str, lib_dir: &Path) -> PathBuf {
    let p = Path::new(module);
    if p.components().count() == 1 && !p.is_absolute() && !module.contains('/') {
        lib_dir.join(p)
    } else {
        p.to_path_buf()
    }
}

/// `$XDG_CONFIG_HOME/opencf/opencf.toml`, with `$HOME/.config` when XDG_CONFIG_HOME is unset
/// or empty. None when neither is set.
pub fn user_config_path() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME") {
        Some(x) if !x.is_empty() && Path::new(&x).is_absolute() => PathBuf::from(x),
        _ => {
            let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
            PathBuf::from(home).join(".config")
        }
    };
    Some(base.join("opencf").join("opencf.toml"))
}

/// Built-in default with modules looked up in `lib_dir`: "accel" (only if
/// `libopencf_accel.so` exists there; AES-GCM below [`ACCEL_GCM_MIN_BYTES`], AES-CTR below
/// [`ACCEL_CTR_MIN_BYTES`] and AES-ECB below [`ACCEL_ECB_MIN_BYTES`] pass it over), then
/// "softtoken".
pub fn default_config_in(lib_dir: &Path) -> Config {
    let mut providers = Vec::new();
    if lib_dir.join(ACCEL_MODULE).exists() {
        let mut accel = ProviderConfig::new("accel", ACCEL_MODULE);
        for (mech, min) in [
            (opencf_abi::sys::CKM_AES_GCM, ACCEL_GCM_MIN_BYTES),
            (opencf_abi::sys::CKM_AES_CTR, ACCEL_CTR_MIN_BYTES),
            (opencf_abi::sys::CKM_AES_ECB, ACCEL_ECB_MIN_BYTES),
        ] {
            accel.policy.insert(
                mech,
                MechPolicy {
                    min_bytes: Some(min),
                },
            );
        }
        providers.push(accel);
    }
    providers.push(ProviderConfig::new("softtoken", SOFTTOKEN_MODULE));
    Config {
        metaslot: MetaslotConfig::default(),
        providers,
        source: Source::BuiltIn,
    }
}

/// The config file [`load`] would read (None: the built-in default), without reading it.
pub fn find_config_file() -> Option<PathBuf> {
    find_config_file_with(Path::new(SYSTEM_CONFIG_PATH))
}

fn find_config_file_with(system: &Path) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(ENV_CONF).filter(|p| !p.is_empty()) {
        // Named explicitly: used even if missing, so that the error names it.
        return Some(PathBuf::from(p));
    }
    if let Some(user) = user_config_path() {
        if user.exists() {
            return Some(user);
        }
    }
    if system.exists() {
        return Some(system.to_path_buf());
    }
    None
}

/// Where an editor such as cryptoadm writes, and what an edit starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditTarget {
    /// The file the edit is written to.
    pub path: PathBuf,
    /// The file the edit starts from while `path` does not exist yet; the built-in default
    /// when None or missing too.
    pub seed: Option<PathBuf>,
}

/// Where an edit goes, the counterpart of [`find_config_file`]: `explicit` (cryptoadm
/// `--config`), else `$OPENCF_CONF`, else for root the system file
/// ([`SYSTEM_CONFIG_PATH`]), else the user file ([`user_config_path`]). A user's first edit
/// starts from the system file when there is one, so that the new user file, which takes
/// precedence from then on, keeps the system's providers and settings. None when the user
/// file has no place (neither `XDG_CONFIG_HOME` nor `HOME` set).
pub fn edit_target(explicit: Option<&Path>, root: bool) -> Option<EditTarget> {
    edit_target_with(explicit, root, Path::new(SYSTEM_CONFIG_PATH))
}

fn edit_target_with(explicit: Option<&Path>, root: bool, system: &Path) -> Option<EditTarget> {
    let named = explicit.map(Path::to_path_buf).or_else(|| {
        std::env::var_os(ENV_CONF)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
    });
    if let Some(path) = named {
        return Some(EditTarget { path, seed: None });
    }
    if root {
        return Some(EditTarget {
            path: system.to_path_buf(),
            seed: None,
        });
    }
    Some(EditTarget {
        path: user_config_path()?,
        seed: Some(system.to_path_buf()),
    })
}

/// Finds, parses and validates the configuration, then applies the environment overrides.
///
/// Search order: `$OPENCF_CONF` (must exist), `$XDG_CONFIG_HOME/opencf/opencf.toml`
/// (`~/.config` by default), `/etc/opencf/opencf.toml`, the built-in default
/// ([`default_config_in`]`(lib_dir)`). Overrides: `OPENCF_METASLOT_ENABLED`
/// (true/false/1/0/yes/no) and `OPENCF_METASLOT_KEYSTORE`. A file that exists but cannot be
/// parsed is an error; there is no silent fallback.
pub fn load(lib_dir: &Path) -> Result<Config, ConfigError> {
    load_with(lib_dir, Path::new(SYSTEM_CONFIG_PATH))
}

fn load_with(lib_dir: &Path, system: &Path) -> Result<Config, ConfigError> {
    let mut cfg = match find_config_file_with(system) {
        Some(p) => load_from(&p)?,
        None => default_config_in(lib_dir),
    };
    apply_env_overrides(&mut cfg)?;
    Ok(cfg)
}

/// Applies `OPENCF_METASLOT_ENABLED` and `OPENCF_METASLOT_KEYSTORE` (done by [`load`]).
pub fn apply_env_overrides(cfg: &mut Config) -> Result<(), ConfigError> {
    if let Some(v) = std::env::var_os(ENV_METASLOT_ENABLED) {
        let s = v.to_string_lossy();
        cfg.metaslot.enabled = parse_bool(&s).ok_or_else(|| {
            ConfigError::new(
                None,
                None,
                format!("{ENV_METASLOT_ENABLED}: invalid value \"{s}\" (expected true, false, 1, 0, yes or no)"),
            )
        })?;
    }
    if let Some(v) = std::env::var_os(ENV_METASLOT_KEYSTORE) {
        let s = v.to_string_lossy().into_owned();
        if s.is_empty() {
            return Err(ConfigError::new(
                None,
                None,
                format!("{ENV_METASLOT_KEYSTORE}: empty token label"),
            ));
        }
        cfg.metaslot.keystore = s;
    }
    Ok(())
}

fn parse_bool(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    metaslot: Option<RawMetaslot>,
    #[serde(default)]
    provider: Vec<Spanned<RawProvider>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetaslot {
    enabled: Option<bool>,
    keystore: Option<Spanned<String>>,
    auto_key_migrate: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProvider {
    name: Option<Spanned<String>>,
    module: Option<Spanned<String>>,
    enabled: Option<Vec<Spanned<String>>>,
    disabled: Option<Vec<Spanned<String>>>,
    random: Option<bool>,
    policy: Option<BTreeMap<Spanned<String>, Spanned<RawPolicy>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    min_bytes: Option<u64>,
}

fn line_of(text: &str, offset: usize) -> usize {
    let offset = offset.min(text.len());
    text.as_bytes()[..offset]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Reads and validates one file. Environment overrides are not applied.
pub fn load_from(path: &Path) -> Result<Config, ConfigError> {
    let fail = |msg: String| ConfigError::new(Some(path), None, msg);
    // Every application reads this file at `C_Initialize`: a path that leads to a FIFO (whose
    // open waits for a writer) or a device must be an error at once, not a wait without end,
    // and a file is read through a bound, not until memory runs out. The open does not wait
    // (`O_NONBLOCK`); only a regular file is read.
    let mut data = Vec::new();
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| fail(format!("cannot read: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| fail(format!("cannot read: {e}")))?;
    if !meta.is_file() {
        return Err(fail(
            "cannot read: not a regular file (a device, FIFO, socket or directory is not read)"
                .into(),
        ));
    }
    file.take(MAX_CONFIG_FILE + 1)
        .read_to_end(&mut data)
        .map_err(|e| fail(format!("cannot read: {e}")))?;
    if data.len() as u64 > MAX_CONFIG_FILE {
        return Err(fail(format!(
            "cannot read: larger than {MAX_CONFIG_FILE} bytes"
        )));
    }
    let text = String::from_utf8(data).map_err(|_| fail("cannot read: not UTF-8".into()))?;
    parse_str(&text, Some(path))
}

/// The most a configuration file may hold (1 MiB: a thousand providers take some 100 KiB).
pub const MAX_CONFIG_FILE: u64 = 1 << 20;

/// Parses and validates TOML text; `file` is used in errors and as the [`Source`].
pub fn parse_str(text: &str, file: Option<&Path>) -> Result<Config, ConfigError> {
    let raw: RawConfig = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| line_of(text, s.start));
        ConfigError::new(file, line, e.message().trim_end().replace('\n', "; "))
    })?;
    let err = |span: std::ops::Range<usize>, msg: String| {
        ConfigError::new(file, Some(line_of(text, span.start)), msg)
    };

    let metaslot = match raw.metaslot {
        None => MetaslotConfig::default(),
        Some(m) => {
            let keystore = match m.keystore {
                None => DEFAULT_KEYSTORE.to_string(),
                Some(k) if k.get_ref().trim().is_empty() => {
                    return Err(err(k.span(), "metaslot.keystore: empty token label".into()))
                }
                Some(k) => k.into_inner(),
            };
            MetaslotConfig {
                enabled: m.enabled.unwrap_or(true),
                keystore,
                auto_key_migrate: m.auto_key_migrate.unwrap_or(true),
            }
        }
    };

    let mechs =
        |list: Vec<Spanned<String>>, key: &str| -> Result<Vec<CK_MECHANISM_TYPE>, ConfigError> {
            let mut out = Vec::with_capacity(list.len());
            for s in list {
                match mechanism_from_name(s.get_ref()) {
                    Some(m) => {
                        if !out.contains(&m) {
                            out.push(m)
                        }
                    }
                    None => {
                        return Err(err(
                            s.span(),
                            format!("{key}: unknown mechanism \"{}\"", s.get_ref()),
                        ))
                    }
                }
            }
            Ok(out)
        };

    let mut providers: Vec<ProviderConfig> = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut seen_cut: HashMap<String, (String, usize)> = HashMap::new();
    for p in raw.provider {
        let pspan = p.span();
        let p = p.into_inner();
        let name = match p.name {
            None => return Err(err(pspan, "provider: missing \"name\"".into())),
            Some(n) if n.get_ref().trim().is_empty() => {
                return Err(err(n.span(), "provider: empty name".into()))
            }
            Some(n) => n,
        };
        let line = line_of(text, name.span().start);
        if let Some(first) = seen.get(name.get_ref()) {
            return Err(err(
                name.span(),
                format!(
                    "duplicate provider name \"{}\" (first defined at line {first})",
                    name.get_ref()
                ),
            ));
        }
        // The live counters keep the first bytes of a name: two names that agree there would
        // be counted as one provider (`cryptoadm stat`).
        let cut = opencf_stat::truncate_name(name.get_ref());
        if let Some((other, first)) = seen_cut.get(cut) {
            return Err(err(
                name.span(),
                format!(
                    "provider name \"{}\" agrees with \"{other}\" (line {first}) in its first \
                     {} bytes, all the live counters keep of a name: the two \
                     would be counted as one",
                    name.get_ref(),
                    opencf_stat::NAME_MAX
                ),
            ));
        }
        seen_cut.insert(cut.to_string(), (name.get_ref().clone(), line));
        seen.insert(name.get_ref().clone(), line);
        let pname = name.into_inner();
        let module = match p.module {
            None => {
                return Err(err(
                    pspan,
                    format!("provider \"{pname}\": missing \"module\""),
                ))
            }
            Some(m) if m.get_ref().trim().is_empty() => {
                return Err(err(m.span(), format!("provider \"{pname}\": empty module")))
            }
            Some(m) => m.into_inner(),
        };
        let enabled_mechanisms = match p.enabled {
            None => None,
            Some(l) => Some(mechs(l, &format!("provider \"{pname}\": enabled"))?),
        };
        let disabled_mechanisms = mechs(
            p.disabled.unwrap_or_default(),
            &format!("provider \"{pname}\": disabled"),
        )?;
        let mut policy = BTreeMap::new();
        for (k, v) in p.policy.unwrap_or_default() {
            let m = mechanism_from_name(k.get_ref()).ok_or_else(|| {
                err(
                    k.span(),
                    format!(
                        "provider \"{pname}\": policy: unknown mechanism \"{}\"",
                        k.get_ref()
                    ),
                )
            })?;
            if policy
                .insert(
                    m,
                    MechPolicy {
                        min_bytes: v.get_ref().min_bytes,
                    },
                )
                .is_some()
            {
                return Err(err(
                    k.span(),
                    format!(
                        "provider \"{pname}\": policy for {} given twice",
                        mechanism_name(m)
                    ),
                ));
            }
        }
        providers.push(ProviderConfig {
            name: pname,
            module,
            enabled_mechanisms,
            disabled_mechanisms,
            random: p.random.unwrap_or(true),
            policy,
        });
    }

    Ok(Config {
        metaslot,
        providers,
        source: match file {
            Some(f) => Source::File(f.to_path_buf()),
            None => Source::BuiltIn,
        },
    })
}

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

#[derive(Serialize)]
struct OutConfig {
    metaslot: OutMetaslot,
    provider: Vec<OutProvider>,
}

#[derive(Serialize)]
struct OutMetaslot {
    enabled: bool,
    keystore: String,
    auto_key_migrate: bool,
}

#[derive(Serialize)]
struct OutProvider {
    name: String,
    module: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    enabled: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    disabled: Vec<String>,
    random: bool,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    policy: BTreeMap<String, OutPolicy>,
}

#[derive(Serialize)]
struct OutPolicy {
    #[serde(skip_serializing_if = "Option::is_none")]
    min_bytes: Option<u64>,
}

/// The config as TOML text (what [`save`] writes).
pub fn to_toml_string(cfg: &Config) -> String {
    let names = |v: &[CK_MECHANISM_TYPE]| v.iter().map(|&m| mechanism_name(m)).collect::<Vec<_>>();
    let out = OutConfig {
        metaslot: OutMetaslot {
            enabled: cfg.metaslot.enabled,
            keystore: cfg.metaslot.keystore.clone(),
            auto_key_migrate: cfg.metaslot.auto_key_migrate,
        },
        provider: cfg
            .providers
            .iter()
            .map(|p| OutProvider {
                name: p.name.clone(),
                module: p.module.clone(),
                enabled: p.enabled_mechanisms.as_deref().map(names),
                disabled: names(&p.disabled_mechanisms),
                random: p.random,
                policy: p
                    .policy
                    .iter()
                    .map(|(&m, pol)| {
                        (
                            mechanism_name(m),
                            OutPolicy {
                                min_bytes: pol.min_bytes,
                            },
                        )
                    })
                    .collect(),
            })
            .collect(),
    };
    let body = toml::to_string(&out).expect("config serializes to TOML");
    format!("{}\n{body}", HEADER.join("\n") + "\n")
}

/// The comment lines [`to_toml_string`] writes at the top of the file.
pub const HEADER: [&str; 3] = [
    "# OpenCF configuration; edit with cryptoadm(1) or by hand.",
    "# Providers are listed in order of preference.",
    "# cryptoadm rewrites the file: it keeps no other comment (the file before is saved as .bak).",
];

/// The comment lines of a configuration text that are not [`HEADER`]'s (nor its older
/// two-line form): what an edit by `cryptoadm`, which writes the file anew, does not keep.
pub fn own_comment_lines(text: &str) -> usize {
    text.lines()
        .map(str::trim)
        .filter(|l| l.starts_with('#') && !HEADER.contains(l))
        .count()
}

/// An exclusive lock on `path` + ".lock" (flock), held until dropped.
pub struct ConfigLock {
    _file: File,
    /// The file an edit under this lock writes ([`file_written`]).
    target: PathBuf,
}

fn lock_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(".lock");
    PathBuf::from(s)
}

/// Takes the exclusive writer lock of `path` (creating its directory if needed).
pub fn lock(path: &Path) -> Result<ConfigLock, ConfigError> {
    let ioerr =
        |what: &str, e: io::Error| ConfigError::new(Some(path), None, format!("{what}: {e}"));
    // The lock of the file an edit writes: an edit through a link and one of the file itself
    // take the same lock, and nothing is made beside a device.
    let target = file_written(path).map_err(|e| ioerr("cannot write", e))?;
    if let Some(dir) = target.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).map_err(|e| ioerr("cannot create directory", e))?;
    }
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path(&target))
        .map_err(|e| ioerr("cannot open lock file", e))?;
    file.lock().map_err(|e| ioerr("cannot lock", e))?;
    Ok(ConfigLock {
        _file: file,
        target,
    })
}

/// The file an edit of `path` writes: `path` itself, or, where `path` is a symbolic link, the
/// file the link leads to (the edit changes the file the path names, and the link stays a
/// link). What is there must be a regular file, or nothing yet: a device, FIFO or directory
/// is refused, never replaced.
fn file_written(path: &Path) -> io::Result<PathBuf> {
    let target = match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => match fs::canonicalize(path) {
            Ok(t) => t,
            // A dangling link: the file it names is made.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let mut t = path.to_path_buf();
                for _ in 0..40 {
                    let next = fs::read_link(&t)?;
                    t = match t.parent() {
                        Some(dir) if next.is_relative() => dir.join(next),
                        _ => next,
                    };
                    if !fs::symlink_metadata(&t).is_ok_and(|m| m.file_type().is_symlink()) {
                        return Ok(t);
                    }
                }
                return Err(io::Error::other("too many levels of symbolic links"));
            }
            Err(e) => return Err(e),
        },
        _ => path.to_path_buf(),
    };
    match fs::metadata(&target) {
        Ok(m) if !m.is_file() => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is not a regular file (a device, FIFO, socket or directory is not replaced)",
                target.display()
            ),
        )),
        _ => Ok(target),
    }
}

/// Writes `text` to the file `lock` is for, atomically; errors name `path`, the path given.
fn write_atomic(text: &str, path: &Path, lock: &ConfigLock) -> Result<(), ConfigError> {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let ioerr =
        |what: &str, e: io::Error| ConfigError::new(Some(path), None, format!("{what}: {e}"));
    let path = &lock.target;
    let dir = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(d) => d.to_path_buf(),
        None => PathBuf::from("."),
    };
    let fname = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| "opencf.toml".into());
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{fname}.tmp.{}.{n}", std::process::id()));
    let result = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        if let Ok(meta) = fs::metadata(path) {
            let _ = f.set_permissions(meta.permissions());
        }
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        if let Ok(d) = File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    result.map_err(|e: io::Error| {
        let _ = fs::remove_file(&tmp);
        ioerr("cannot write", e)
    })
}

/// Writes `cfg` to `path` as TOML, atomically (temp file in the same directory, fsync,
/// rename) under the lock of [`lock`].
pub fn save(cfg: &Config, path: &Path) -> Result<(), ConfigError> {
    let lock = lock(path)?;
    write_atomic(&to_toml_string(cfg), path, &lock)
}

/// Read-modify-write under the lock: loads `path` (or the built-in default for `lib_dir` when
/// it does not exist yet), runs `f`, and saves the result if `f` succeeds.
pub fn update<T, E: From<ConfigError>>(
    path: &Path,
    lib_dir: &Path,
    f: impl FnOnce(&mut Config) -> Result<T, E>,
) -> Result<T, E> {
    let target = EditTarget {
        path: path.to_path_buf(),
        seed: None,
    };
    update_target(&target, lib_dir, f)
}

/// [`update`] of `target.path`, starting from `target.seed` (else the built-in default) while
/// `target.path` does not exist yet.
pub fn update_target<T, E: From<ConfigError>>(
    target: &EditTarget,
    lib_dir: &Path,
    f: impl FnOnce(&mut Config) -> Result<T, E>,
) -> Result<T, E> {
    let path = target.path.as_path();
    let lock = lock(path)?;
    let mut cfg = match &target.seed {
        _ if path.exists() => load_from(path)?,
        Some(seed) if seed.exists() => load_from(seed)?,
        _ => default_config_in(lib_dir),
    };
    let out = f(&mut cfg)?;
    cfg.source = Source::File(path.to_path_buf());
    // Never write what would not be read back: an edit the parser would refuse fails every
    // application's `C_Initialize` and every later edit.
    let text = to_toml_string(&cfg);
    parse_str(&text, Some(path)).map_err(|e| {
        ConfigError::new(
            Some(path),
            None,
            format!("the edit is refused: {}", e.message),
        )
    })?;
    write_atomic(&text, path, &lock)?;
    Ok(out)
}

#[cfg(test)]
mod tests;
