//! cryptoadm: administers the OpenCF framework configuration, in the style of Solaris
//! cryptoadm(1M).
//!
//! Exit status: 0 success, 1 provider or load problem, 2 configuration that cannot be parsed
//! (or written), 64 usage error.
#![forbid(unsafe_code)]

/// `println!` that ends the program quietly (status 0) when standard output is a closed pipe
/// (`cryptoadm list | head -1`), and with status 1 on another write error.
macro_rules! outln {
    () => {
        $crate::out_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::out_line(format_args!($($arg)*))
    };
}

mod probe;
mod rv_names;
mod stat;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use opencf_abi::sys::CK_MECHANISM_TYPE;
use opencf_config::{
    self as config, mechanism_from_name, mechanism_name, Config, ConfigError, ProviderConfig,
};
use serde::Serialize;
use serde_json::json;

const EXIT_PROBLEM: u8 = 1;
const EXIT_CONFIG: u8 = 2;
const EXIT_USAGE: u8 = 64;

#[derive(Parser, Debug)]
#[command(
    name = "cryptoadm",
    version,
    about = "Administer the OpenCF cryptographic framework"
)]
struct Cli {
    /// Configuration file to read and edit (default: /etc/opencf/opencf.toml for root,
    /// $XDG_CONFIG_HOME/opencf/opencf.toml otherwise; $OPENCF_CONF overrides both).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Machine-readable output for listings.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// List providers; `list metaslot`, `list [provider=NAME]`.
    List {
        /// Mechanisms of each provider (loads the modules).
        #[arg(short = 'm')]
        mechanisms: bool,
        /// Mechanism policy of each provider.
        #[arg(short = 'p')]
        policy: bool,
        /// Verbose: slots, tokens and mechanism details (loads the modules).
        #[arg(short = 'v')]
        verbose: bool,
        /// `metaslot` or `provider=NAME`.
        words: Vec<String>,
    },
    /// install provider=PATH [name=NAME] [before=NAME]
    Install { words: Vec<String> },
    /// uninstall provider=NAME
    Uninstall { words: Vec<String> },
    /// enable provider=NAME mechanism=CKM_A,CKM_B|all [random] | enable metaslot [token=LABEL] [auto-key-migrate]
    Enable { words: Vec<String> },
    /// disable provider=NAME mechanism=CKM_A,CKM_B|all [random] | disable metaslot [auto-key-migrate]
    Disable { words: Vec<String> },
    /// Check the configuration and load every provider module.
    Refresh,
    /// Live counters per provider × mechanism (see docs/STAT.md).
    Stat(stat::StatArgs),
}

enum Fail {
    Usage(String),
    Config(ConfigError),
    Problem(String),
}

impl From<ConfigError> for Fail {
    fn from(e: ConfigError) -> Self {
        Fail::Config(e)
    }
}

fn usage(msg: impl Into<String>) -> Fail {
    Fail::Usage(msg.into())
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(Fail::Usage(m)) => {
            eprintln!("cryptoadm: {m}");
            ExitCode::from(EXIT_USAGE)
        }
        Err(Fail::Config(e)) => {
            eprintln!("cryptoadm: {e}");
            ExitCode::from(EXIT_CONFIG)
        }
        Err(Fail::Problem(m)) => {
            eprintln!("cryptoadm: {m}");
            ExitCode::from(EXIT_PROBLEM)
        }
    }
}

fn out_line(args: std::fmt::Arguments) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{args}").and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("cryptoadm: cannot write to standard output: {e}");
        std::process::exit(i32::from(EXIT_PROBLEM));
    }
}

// ---------------------------------------------------------------------------------------------
// Environment
// ---------------------------------------------------------------------------------------------

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

fn config_path(cli: &Cli) -> Result<PathBuf, Fail> {
    if let Some(p) = &cli.config {
        return Ok(p.clone());
    }
    if let Some(p) = std::env::var_os(config::ENV_CONF).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    if is_root() {
        return Ok(PathBuf::from(config::SYSTEM_CONFIG_PATH));
    }
    config::user_config_path().ok_or_else(|| {
        usage("cannot find the user configuration: set XDG_CONFIG_HOME or HOME, or use --config")
    })
}

/// Where bare module names are looked up: $OPENCF_LIB_DIR, else beside this executable.
fn lib_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("OPENCF_LIB_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The administered file, or the built-in default when it does not exist yet.
fn read_config(path: &Path, lib: &Path) -> Result<Config, Fail> {
    if path.exists() {
        Ok(config::load_from(path)?)
    } else {
        Ok(config::default_config_in(lib))
    }
}

// ---------------------------------------------------------------------------------------------
// key=value words
// ---------------------------------------------------------------------------------------------

struct Words {
    kv: Vec<(String, String)>,
    flags: Vec<String>,
}

impl Words {
    fn parse(words: &[String], keys: &[&str], flags: &[&str]) -> Result<Words, Fail> {
        let mut w = Words {
            kv: Vec::new(),
            flags: Vec::new(),
        };
        for word in words {
            if let Some((k, v)) = word.split_once('=') {
                if !keys.contains(&k) {
                    return Err(usage(format!("unknown keyword \"{k}=\"")));
                }
                if w.kv.iter().any(|(x, _)| x == k) {
                    return Err(usage(format!("\"{k}=\" given twice")));
                }
                if v.is_empty() {
                    return Err(usage(format!("\"{k}=\" needs a value")));
                }
                w.kv.push((k.to_string(), v.to_string()));
            } else if flags.contains(&word.as_str()) {
                if !w.flags.contains(word) {
                    w.flags.push(word.clone());
                }
            } else {
                return Err(usage(format!("unexpected argument \"{word}\"")));
            }
        }
        Ok(w)
    }
    fn get(&self, k: &str) -> Option<&str> {
        self.kv
            .iter()
            .find(|(x, _)| x == k)
            .map(|(_, v)| v.as_str())
    }
    fn has(&self, f: &str) -> bool {
        self.flags.iter().any(|x| x == f)
    }
}

fn parse_mechs(list: &str) -> Result<Option<Vec<CK_MECHANISM_TYPE>>, Fail> {
    if list == "all" {
        return Ok(None);
    }
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let m = mechanism_from_name(name)
            .ok_or_else(|| usage(format!("unknown mechanism \"{name}\"")))?;
        if !out.contains(&m) {
            out.push(m);
        }
    }
    if out.is_empty() {
        return Err(usage("mechanism= needs a list of mechanisms or \"all\""));
    }
    Ok(Some(out))
}

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

fn run(cli: Cli) -> Result<u8, Fail> {
    if let Cmd::Stat(args) = &cli.cmd {
        return stat::run(args, cli.json);
    }
    let path = config_path(&cli)?;
    let lib = lib_dir();
    match &cli.cmd {
        Cmd::List {
            mechanisms,
            policy,
            verbose,
            words,
        } => {
            let w = Words::parse(words, &["provider"], &["metaslot"])?;
            let cfg = read_config(&path, &lib)?;
            if w.has("metaslot") {
                if w.get("provider").is_some() || *mechanisms || *policy || *verbose {
                    return Err(usage("list metaslot takes no other options"));
                }
                let source = describe_source(&cfg, &cli, &path);
                return Ok(list_metaslot(&cfg, &source, cli.json));
            }
            let providers: Vec<&ProviderConfig> = match w.get("provider") {
                None => cfg.providers.iter().collect(),
                Some(n) => vec![cfg
                    .providers
                    .iter()
                    .find(|p| p.name == n)
                    .ok_or_else(|| Fail::Problem(format!("no provider named \"{n}\"")))?],
            };
            if *verbose || *mechanisms {
                Ok(list_probe(&cfg, &providers, &lib, *verbose, cli.json))
            } else if *policy {
                Ok(list_policy(&cfg, &providers, cli.json))
            } else {
                Ok(list_plain(&cfg, &providers, &lib, cli.json))
            }
        }
        Cmd::Install { words } => {
            let w = Words::parse(words, &["provider", "name", "before"], &[])?;
            let module = w
                .get("provider")
                .ok_or_else(|| usage("install needs provider=PATH"))?
                .to_string();
            let name = match w.get("name") {
                Some(n) => n.to_string(),
                None => default_name(&module)
                    .ok_or_else(|| usage("cannot derive a name from the module; give name=NAME"))?,
            };
            let before = w.get("before").map(str::to_string);
            config::update(&path, &lib, |cfg| {
                if cfg.providers.iter().any(|p| p.name == name) {
                    return Err(Fail::Problem(format!(
                        "provider \"{name}\" is already installed"
                    )));
                }
                let at = match &before {
                    None => cfg.providers.len(),
                    Some(b) => cfg
                        .providers
                        .iter()
                        .position(|p| &p.name == b)
                        .ok_or_else(|| Fail::Problem(format!("no provider named \"{b}\"")))?,
                };
                cfg.providers
                    .insert(at, ProviderConfig::new(name.clone(), module.clone()));
                Ok(())
            })?;
            Ok(0)
        }
        Cmd::Uninstall { words } => {
            let w = Words::parse(words, &["provider"], &[])?;
            let name = w
                .get("provider")
                .ok_or_else(|| usage("uninstall needs provider=NAME"))?
                .to_string();
            config::update(&path, &lib, |cfg| {
                let i = cfg
                    .providers
                    .iter()
                    .position(|p| p.name == name)
                    .ok_or_else(|| Fail::Problem(format!("no provider named \"{name}\"")))?;
                cfg.providers.remove(i);
                Ok::<_, Fail>(())
            })?;
            Ok(0)
        }
        Cmd::Enable { words } => set_state(&path, &lib, words, true),
        Cmd::Disable { words } => set_state(&path, &lib, words, false),
        Cmd::Refresh => refresh(&path, &lib, cli.json),
        Cmd::Stat(_) => unreachable!("handled above"),
    }
}

/// "/usr/lib/softhsm/libsofthsm2.so" → "softhsm2".
fn default_name(module: &str) -> Option<String> {
    let file = Path::new(module).file_name()?.to_str()?;
    let stem = file.split(".so").next().unwrap_or(file);
    let stem = stem.strip_prefix("lib").unwrap_or(stem);
    (!stem.is_empty()).then(|| stem.to_string())
}

fn set_state(path: &Path, lib: &Path, words: &[String], enable: bool) -> Result<u8, Fail> {
    let verb = if enable { "enable" } else { "disable" };
    if words.first().map(String::as_str) == Some("metaslot") {
        let keys: &[&str] = if enable { &["token"] } else { &[] };
        let w = Words::parse(&words[1..], keys, &["auto-key-migrate"])?;
        let token = w.get("token").map(str::to_string);
        let akm = w.has("auto-key-migrate");
        config::update(path, lib, |cfg| {
            if let Some(t) = &token {
                cfg.metaslot.keystore = t.clone();
            }
            if akm {
                cfg.metaslot.auto_key_migrate = enable;
            }
            if token.is_none() && !akm {
                cfg.metaslot.enabled = enable;
            }
            Ok::<_, Fail>(())
        })?;
        return Ok(0);
    }
    let w = Words::parse(words, &["provider", "mechanism"], &["random"])?;
    let name = w
        .get("provider")
        .ok_or_else(|| usage(format!("{verb} needs provider=NAME or metaslot")))?
        .to_string();
    let mechs = match w.get("mechanism") {
        Some(list) => Some(parse_mechs(list)?),
        None => None,
    };
    let random = w.has("random");
    if mechs.is_none() && !random {
        return Err(usage(format!(
            "{verb} provider={name} needs mechanism=LIST|all and/or random"
        )));
    }
    config::update(path, lib, |cfg| {
        let p = cfg
            .providers
            .iter_mut()
            .find(|p| p.name == name)
            .ok_or_else(|| Fail::Problem(format!("no provider named \"{name}\"")))?;
        if random {
            p.random = enable;
        }
        match mechs {
            None => {}
            Some(None) => {
                // all
                p.disabled_mechanisms.clear();
                p.enabled_mechanisms = if enable { None } else { Some(Vec::new()) };
            }
            Some(Some(list)) => {
                if enable {
                    p.disabled_mechanisms.retain(|m| !list.contains(m));
                    if let Some(only) = &mut p.enabled_mechanisms {
                        for m in list {
                            if !only.contains(&m) {
                                only.push(m);
                            }
                        }
                    }
                } else if let Some(only) = &mut p.enabled_mechanisms {
                    only.retain(|m| !list.contains(m));
                } else {
                    for m in list {
                        if !p.disabled_mechanisms.contains(&m) {
                            p.disabled_mechanisms.push(m);
                        }
                    }
                }
            }
        }
        Ok::<_, Fail>(())
    })?;
    Ok(0)
}

fn print_json(v: &impl Serialize) {
    outln!("{}", serde_json::to_string_pretty(v).expect("JSON"));
}

fn state(p: &ProviderConfig) -> &'static str {
    if p.all_disabled() {
        "disabled"
    } else if p.all_enabled() {
        "enabled"
    } else {
        "partially enabled"
    }
}

fn list_plain(cfg: &Config, providers: &[&ProviderConfig], lib: &Path, json: bool) -> u8 {
    if json {
        let list: Vec<_> = providers
            .iter()
            .map(|p| {
                json!({
                    "name": p.name,
                    "module": p.module,
                    "path": config::resolve_module(&p.module, lib).display().to_string(),
                    "state": state(p),
                })
            })
            .collect();
        print_json(&json!({ "config": cfg.source.to_string(), "providers": list }));
        return 0;
    }
    outln!("Configuration: {}", cfg.source);
    outln!("Providers (in order of preference):");
    for p in providers {
        outln!(
            "  {:<16} {}  ({})",
            p.name,
            config::resolve_module(&p.module, lib).display(),
            state(p)
        );
    }
    0
}

fn names(v: &[CK_MECHANISM_TYPE]) -> Vec<String> {
    v.iter().map(|&m| mechanism_name(m)).collect()
}

fn policy_sentence(p: &ProviderConfig) -> String {
    let mut s = format!("{}: ", p.name);
    match &p.enabled_mechanisms {
        None if p.disabled_mechanisms.is_empty() => s.push_str("all mechanisms are enabled."),
        None => s.push_str(&format!(
            "all mechanisms are enabled, except {}.",
            names(&p.disabled_mechanisms).join(", ")
        )),
        Some(_) if p.all_disabled() => s.push_str("all mechanisms are disabled."),
        Some(only) => {
            let on: Vec<_> = only
                .iter()
                .copied()
                .filter(|m| !p.disabled_mechanisms.contains(m))
                .collect();
            s.push_str(&format!(
                "only these mechanisms are enabled: {}.",
                names(&on).join(", ")
            ));
        }
    }
    s.push_str(if p.random {
        " random is enabled."
    } else {
        " random is disabled."
    });
    for (&m, pol) in &p.policy {
        if let Some(n) = pol.min_bytes {
            s.push_str(&format!(
                " {} is used for data of at least {n} bytes.",
                mechanism_name(m)
            ));
        }
    }
    s
}

fn policy_json(p: &ProviderConfig) -> serde_json::Value {
    let policy: serde_json::Map<String, serde_json::Value> = p
        .policy
        .iter()
        .map(|(&m, pol)| (mechanism_name(m), json!({ "min_bytes": pol.min_bytes })))
        .collect();
    json!({
        "name": p.name,
        "all_enabled": p.all_enabled(),
        "enabled": p.enabled_mechanisms.as_deref().map(names),
        "disabled": names(&p.disabled_mechanisms),
        "random": p.random,
        "policy": policy,
    })
}

fn metaslot_json(cfg: &Config) -> serde_json::Value {
    json!({
        "enabled": cfg.metaslot.enabled,
        "keystore": cfg.metaslot.keystore,
        "auto_key_migrate": cfg.metaslot.auto_key_migrate,
    })
}

fn list_policy(cfg: &Config, providers: &[&ProviderConfig], json: bool) -> u8 {
    if json {
        let list: Vec<_> = providers.iter().map(|p| policy_json(p)).collect();
        print_json(
            &json!({ "config": cfg.source.to_string(), "providers": list, "metaslot": metaslot_json(cfg) }),
        );
        return 0;
    }
    for p in providers {
        outln!("{}", policy_sentence(p));
    }
    0
}

/// Where the configuration came from: a short kind (for JSON) and words.
fn describe_source(cfg: &Config, cli: &Cli, path: &Path) -> (&'static str, String) {
    match &cfg.source {
        config::Source::BuiltIn => (
            "built-in",
            format!("built-in default (no file at {})", path.display()),
        ),
        config::Source::File(p) => {
            let (kind, words) = if cli.config.is_some() {
                ("option", "file given with --config")
            } else if std::env::var_os(config::ENV_CONF).is_some_and(|v| !v.is_empty()) {
                ("environment", "file named by OPENCF_CONF")
            } else if p == Path::new(config::SYSTEM_CONFIG_PATH) {
                ("system", "system-wide file")
            } else {
                ("user", "user file")
            };
            (kind, format!("{words} {}", p.display()))
        }
    }
}

fn list_metaslot(cfg: &Config, source: &(&str, String), json: bool) -> u8 {
    if json {
        let mut v = metaslot_json(cfg);
        v["config"] = json!(cfg.source.to_string());
        v["source"] = json!(source.0);
        print_json(&v);
        return 0;
    }
    let m = &cfg.metaslot;
    outln!("Meta Slot Configuration:");
    outln!("------------------------");
    outln!("Source: {}", source.1);
    outln!("Status: {}", if m.enabled { "enabled" } else { "disabled" });
    outln!("Keystore token: {}", m.keystore);
    outln!(
        "Auto-key-migrate: {}",
        if m.auto_key_migrate {
            "enabled"
        } else {
            "disabled"
        }
    );
    0
}

fn list_probe(
    cfg: &Config,
    providers: &[&ProviderConfig],
    lib: &Path,
    verbose: bool,
    json: bool,
) -> u8 {
    let reports: Vec<probe::ProviderReport> = providers
        .iter()
        .map(|p| probe::probe(p, &config::resolve_module(&p.module, lib), true))
        .collect();
    let failed = reports.iter().any(|r| !r.errors.is_empty());
    if json {
        print_json(&json!({ "config": cfg.source.to_string(), "providers": reports }));
    } else {
        for r in &reports {
            outln!("Provider: {} ({})", r.name, r.path);
            for e in &r.errors {
                outln!("  error: {e}");
            }
            if verbose {
                if let Some(i) = &r.info {
                    outln!(
                        "  library: {} {} ({}), cryptoki {}",
                        i.description,
                        i.library_version,
                        i.manufacturer,
                        i.cryptoki_version
                    );
                }
            }
            for s in &r.slots {
                let label = s
                    .token
                    .as_ref()
                    .map(|t| t.label.as_str())
                    .unwrap_or("no token");
                if verbose {
                    outln!("  Slot {}: {} [{}]", s.id, s.description, s.flags.join(" "));
                    match &s.token {
                        Some(t) => {
                            outln!(
                                "    Token: \"{}\" ({} {}, serial {})",
                                t.label,
                                t.manufacturer,
                                t.model,
                                t.serial
                            );
                            outln!("    Token flags: {}", t.flags.join(" "));
                        }
                        None => outln!("    Token: none"),
                    }
                } else {
                    outln!("  Slot {} ({label}):", s.id);
                }
                for e in &s.errors {
                    outln!("    error: {e}");
                }
                for m in &s.mechanisms {
                    let mut line = format!("    {:<32}", m.name);
                    if verbose {
                        let ks = match (m.min_key_size, m.max_key_size) {
                            (Some(a), Some(b)) => format!("{a}-{b}"),
                            _ => "?".into(),
                        };
                        line.push_str(&format!(" {ks:>12}  {}", m.flags.join(",")));
                    }
                    if !m.enabled {
                        line.push_str("  (disabled by policy)");
                    }
                    if let Some(n) = m.min_bytes {
                        line.push_str(&format!("  (min_bytes {n})"));
                    }
                    outln!("{}", line.trim_end());
                }
            }
        }
    }
    if failed {
        EXIT_PROBLEM
    } else {
        0
    }
}

fn refresh(path: &Path, lib: &Path, json: bool) -> Result<u8, Fail> {
    let cfg = read_config(path, lib)?;
    let mut problems: Vec<String> = Vec::new();
    if cfg.providers.is_empty() {
        problems.push(format!("{}: no providers configured", cfg.source));
    }
    let mut checked = Vec::new();
    for p in &cfg.providers {
        let r = probe::probe(p, &config::resolve_module(&p.module, lib), false);
        for e in &r.errors {
            problems.push(format!("provider \"{}\": {e}", p.name));
        }
        checked.push(json!({ "name": r.name, "path": r.path, "ok": r.errors.is_empty(), "errors": r.errors }));
    }
    if json {
        print_json(
            &json!({ "config": cfg.source.to_string(), "providers": checked, "problems": problems }),
        );
    } else {
        for p in &problems {
            outln!("{p}");
        }
        if problems.is_empty() {
            outln!("{}: {} provider(s) OK", cfg.source, cfg.providers.len());
        }
    }
    Ok(if problems.is_empty() { 0 } else { EXIT_PROBLEM })
}
