//! cryptoadm: administers the OpenCF framework configuration, in the style of Solaris
//! cryptoadm(1M).
//!
//! Exit status: 0 success, 1 provider or load problem (`refresh`: also a missing keystore
//! token or a missing `$OPENCF_CONF` file), 2 configuration that cannot be parsed (or written),
//! 64 usage error.
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
mod stat;

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use opencf_abi::sys::CK_MECHANISM_TYPE;
use opencf_config::{
    self as config, mechanism_from_name, mechanism_name, Config, ConfigError, EditTarget,
    ProviderConfig,
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
    about = "Administer the OpenCF cryptographic framework",
    after_help = "A change takes effect in each application at its next C_Initialize: a running \
                  application keeps the providers and the policy it started with until it \
                  initializes the library again (docs/METASLOT.md, \"Start-up\")."
)]
struct Cli {
    /// Configuration file to read and edit. Default: listings read the file the framework
    /// reads ($OPENCF_CONF, else $XDG_CONFIG_HOME/opencf/opencf.toml if it exists, else
    /// /etc/opencf/opencf.toml); edits go to $OPENCF_CONF, else to /etc/opencf/opencf.toml
    /// for root and to the user file otherwise (a user's first edit copies the system file).
    /// A file that does not exist is listed as the built-in default, which the first edit
    /// starts from; when $OPENCF_CONF names it, the framework refuses to start, and listings
    /// and `refresh` say so.
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
    /// uninstall provider=NAME [--force]
    Uninstall {
        /// Uninstall the only provider with the metaslot's keystore token (every
        /// application's C_Initialize then fails while the metaslot is enabled).
        #[arg(long)]
        force: bool,
        words: Vec<String>,
    },
    /// enable provider=NAME mechanism=CKM_A,CKM_B|all [random] | enable metaslot [token=LABEL] [auto-key-migrate]
    Enable { words: Vec<String> },
    /// disable provider=NAME mechanism=CKM_A,CKM_B|all [random] | disable metaslot [auto-key-migrate]
    Disable { words: Vec<String> },
    /// Check the configuration and load every provider module, as the next application to
    /// start will (a running application keeps what it loaded at its C_Initialize).
    Refresh,
    /// Live counters per provider × mechanism (see docs/STAT.md).
    Stat(stat::StatArgs),
    /// Internal: loads one module in this process and prints its report (`probe::probe`
    /// runs every module this way, in a process of its own).
    #[command(name = "probe-module", hide = true)]
    ProbeModule {
        /// Walk the slots (token info, mechanisms).
        #[arg(long)]
        walk: bool,
        path: PathBuf,
    },
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

/// The file listings read: `--config`, else the one the framework reads (None: the built-in
/// default).
fn read_path(cli: &Cli) -> Option<PathBuf> {
    cli.config.clone().or_else(config::find_config_file)
}

/// Where edits go.
struct Target {
    /// The file written, and what a first edit starts from (see [`config::edit_target`]).
    edit: EditTarget,
    /// Chosen by the search rule rather than named with `--config`.
    searched: bool,
}

fn edit_target(cli: &Cli) -> Result<Target, Fail> {
    let edit = config::edit_target(cli.config.as_deref(), is_root()).ok_or_else(|| {
        usage("cannot find the user configuration: set XDG_CONFIG_HOME or HOME, or use --config")
    })?;
    Ok(Target {
        edit,
        searched: cli.config.is_none(),
    })
}

/// Read-modify-write of the edited file ([`config::update_target`]). Without `--config`, a
/// note on stderr tells when the edit created a user file from the system file, or wrote a
/// file this user's processes do not read (root with a user file of its own).
fn edit<T>(
    target: &Target,
    lib: &Path,
    f: impl FnOnce(&mut Config) -> Result<T, Fail>,
) -> Result<T, Fail> {
    let target_path = &target.edit.path;
    let created = !target_path.exists();
    let before = std::fs::read_to_string(target_path).ok();
    let out = config::update_target(&target.edit, lib, f)?;
    // The file is written anew: comments of its own are not kept. The file as it was goes to
    // FILE.bak, and a note says so.
    let own = before.as_deref().map_or(0, config::own_comment_lines);
    if let (Some(old), true) = (&before, own > 0) {
        let mut bak = target_path.as_os_str().to_os_string();
        bak.push(".bak");
        let bak = PathBuf::from(bak);
        let _ = std::fs::remove_file(&bak);
        let saved = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&bak)
            .and_then(|mut f| std::io::Write::write_all(&mut f, old.as_bytes()));
        let kept = match saved {
            Ok(()) => format!("; the file as it was is {}", bak.display()),
            Err(e) => format!(
                ", and could not save the file as it was to {}: {e}",
                bak.display()
            ),
        };
        eprintln!(
            "cryptoadm: note: the edit rewrote {} without its {own} comment line(s){kept}",
            target_path.display()
        );
    }
    if !target.searched {
        return Ok(out);
    }
    let target = &target.edit;
    let seed = target.seed.as_deref().filter(|s| s.exists());
    match (config::find_config_file(), seed) {
        (_, Some(seed)) if created => eprintln!(
            "cryptoadm: created {} from {}; for this user it takes precedence over {}",
            target.path.display(),
            seed.display(),
            seed.display()
        ),
        (Some(in_effect), _) if in_effect != target.path => eprintln!(
            "cryptoadm: note: this user's processes read {}, not the edited {}",
            in_effect.display(),
            target.path.display()
        ),
        _ => {}
    }
    Ok(out)
}

/// Where bare module names are looked up: $OPENCF_LIB_DIR, else the directory holding
/// libopencf.so: this executable's own (the build tree), else `../lib` (an installed
/// `PREFIX/bin`, `PREFIX/lib` layout); without libopencf.so in either, the executable's.
fn lib_dir() -> PathBuf {
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf));
    lib_dir_from(std::env::var_os("OPENCF_LIB_DIR"), exe_dir.as_deref())
}

/// [`lib_dir`] for a given `$OPENCF_LIB_DIR` and executable directory.
fn lib_dir_from(env: Option<std::ffi::OsString>, exe_dir: Option<&Path>) -> PathBuf {
    if let Some(d) = env.filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let Some(dir) = exe_dir else {
        return PathBuf::from(".");
    };
    let installed = dir.parent().map(|p| p.join("lib"));
    std::iter::once(dir.to_path_buf())
        .chain(installed)
        .find(|d| d.join("libopencf.so").exists())
        .unwrap_or_else(|| dir.to_path_buf())
}

/// What listings read: the configuration, and the file that does not exist when the built-in
/// default stands in for it.
struct Reading {
    cfg: Config,
    missing: Option<Missing>,
}

/// A configuration file to read that does not exist.
struct Missing {
    path: PathBuf,
    /// `$OPENCF_CONF` names it: the framework requires it and refuses to start without it
    /// (otherwise only `--config` names it, and the built-in default is what a first edit
    /// starts from).
    framework: bool,
}

impl Missing {
    /// What the framework does without the file, and what stands in its place.
    fn words(&self) -> String {
        if self.framework {
            format!(
                "{}; shown: the built-in default, which the first edit starts from",
                self.refusal()
            )
        } else {
            format!("built-in default (no file at {})", self.path.display())
        }
    }

    fn refusal(&self) -> String {
        format!(
            "{} (named by {}) does not exist: the framework refuses to start",
            self.path.display(),
            config::ENV_CONF
        )
    }

    fn json(&self) -> serde_json::Value {
        json!({ "path": self.path.display().to_string(), "framework_refuses": self.framework })
    }
}

/// Whether `p` is the file `$OPENCF_CONF` names.
fn names_framework_file(p: &Path) -> bool {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    std::env::var_os(config::ENV_CONF)
        .filter(|v| !v.is_empty())
        .is_some_and(|v| absolute(Path::new(&v)) == absolute(p))
}

/// The file listings read, or the built-in default when there is none (yet). A file that
/// exists but cannot be read is an error, as for the framework.
fn read_config(path: Option<&Path>, lib: &Path) -> Result<Reading, Fail> {
    let missing =
        path.filter(|p| std::fs::metadata(p).is_err_and(|e| e.kind() == ErrorKind::NotFound));
    match (path, missing) {
        (Some(p), None) => Ok(Reading {
            cfg: config::load_from(p)?,
            missing: None,
        }),
        (_, missing) => Ok(Reading {
            cfg: config::default_config_in(lib),
            missing: missing.map(|p| Missing {
                path: p.to_path_buf(),
                framework: names_framework_file(p),
            }),
        }),
    }
}

/// Where the configuration shown came from, in words.
fn source_words(r: &Reading) -> String {
    match &r.missing {
        Some(m) => m.words(),
        None => r.cfg.source.to_string(),
    }
}

/// Prints a listing's JSON with the configuration it shows (and the missing file, if any).
fn print_listing(r: &Reading, mut v: serde_json::Value) {
    v["config"] = json!(r.cfg.source.to_string());
    if let Some(m) = &r.missing {
        v["missing"] = m.json();
    }
    print_json(&v);
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
                // Blank is empty: the configuration refuses a blank label or name.
                if v.trim().is_empty() {
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
    if list.trim() == "all" {
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
    if let Cmd::ProbeModule { walk, path } = &cli.cmd {
        probe::print_report(path, *walk);
        return Ok(0);
    }
    let read = read_path(&cli);
    let read = read.as_deref();
    // Needed by edits only: a listing works without a place for the user file.
    let target = edit_target(&cli);
    let lib = lib_dir();
    match &cli.cmd {
        Cmd::List {
            mechanisms,
            policy,
            verbose,
            words,
        } => {
            let w = Words::parse(words, &["provider"], &["metaslot"])?;
            let r = read_config(read, &lib)?;
            if let Some(m) = r.missing.as_ref().filter(|m| m.framework) {
                eprintln!(
                    "cryptoadm: warning: {} names {}, which does not exist: the framework \
                     refuses to start (every application's C_Initialize fails) until it is \
                     created; shown: the built-in default, which the first edit starts from",
                    config::ENV_CONF,
                    m.path.display()
                );
            }
            let cfg = &r.cfg;
            if w.has("metaslot") {
                if w.get("provider").is_some() || *mechanisms || *policy || *verbose {
                    return Err(usage("list metaslot takes no other options"));
                }
                let edited = target.as_ref().ok().map(|t| t.edit.path.as_path());
                let source = describe_source(&r, &cli, edited);
                return Ok(list_metaslot(&r, &source, cli.json));
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
                Ok(list_probe(&r, &providers, &lib, *verbose, cli.json))
            } else if *policy {
                Ok(list_policy(&r, &providers, cli.json))
            } else {
                Ok(list_plain(&r, &providers, &lib, cli.json))
            }
        }
        Cmd::Install { words } => {
            let w = Words::parse(words, &["provider", "name", "before"], &[])?;
            let given = w
                .get("provider")
                .ok_or_else(|| usage("install needs provider=PATH"))?;
            let name = match w.get("name") {
                Some(n) => n.to_string(),
                None => default_name(given)
                    .ok_or_else(|| usage("cannot derive a name from the module; give name=NAME"))?,
            };
            let before = w.get("before").map(str::to_string);
            edit(&target?, &lib, |cfg| {
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
                let module = module_to_install(given)?;
                // What `refresh` checks: a module that does not load and initialize would fail
                // every application's C_Initialize.
                let r = probe::probe(
                    &ProviderConfig::new(name.clone(), module.clone()),
                    &config::resolve_module(&module, &lib),
                    false,
                );
                if !r.errors.is_empty() {
                    return Err(Fail::Problem(format!(
                        "{given} not installed: {}",
                        r.errors.join("; ")
                    )));
                }
                cfg.providers
                    .insert(at, ProviderConfig::new(name.clone(), module.clone()));
                Ok(())
            })?;
            Ok(0)
        }
        Cmd::Uninstall { force, words } => {
            let w = Words::parse(words, &["provider"], &[])?;
            let name = w
                .get("provider")
                .ok_or_else(|| usage("uninstall needs provider=NAME"))?
                .to_string();
            let keystore_gone = edit(&target?, &lib, |cfg| {
                let i = cfg
                    .providers
                    .iter()
                    .position(|p| p.name == name)
                    .ok_or_else(|| Fail::Problem(format!("no provider named \"{name}\"")))?;
                let removed = cfg.providers.remove(i);
                let label = &cfg.metaslot.keystore;
                if !cfg.metaslot.enabled || any_has_token(cfg, label, &lib) {
                    return Ok(None);
                }
                // What `refresh` checks: without the keystore token every application's
                // C_Initialize fails while the metaslot is enabled.
                if !force && has_token(&removed, label, &lib) {
                    return Err(Fail::Problem(format!(
                        "provider \"{name}\" has the metaslot's keystore token \"{label}\", \
                         which no other provider has: without it every application's \
                         C_Initialize fails; name another keystore first (enable metaslot \
                         token=LABEL), or disable the metaslot, or uninstall with --force"
                    )));
                }
                Ok(Some(label.clone()))
            })?;
            if let Some(label) = keystore_gone {
                warn_no_token(&label);
            }
            Ok(0)
        }
        Cmd::Enable { words } => set_state(&target?, &lib, words, true),
        Cmd::Disable { words } => set_state(&target?, &lib, words, false),
        Cmd::Refresh => refresh(read, &lib, cli.json),
        Cmd::Stat(_) | Cmd::ProbeModule { .. } => unreachable!("handled above"),
    }
}

/// The module as stored by `install`: a bare file name as given (the framework looks it up
/// beside libopencf.so), any other path made absolute, its directory canonical (`./libx.so`
/// would otherwise resolve against each application's working directory). The file name is
/// kept, so that a symbolic link such as `libx.so` → `libx.so.2.6` still follows upgrades.
fn module_to_install(module: &str) -> Result<String, Fail> {
    if !module.contains('/') {
        return Ok(module.to_string());
    }
    let p = Path::new(module);
    let file = p
        .file_name()
        .ok_or_else(|| usage(format!("provider={module} does not name a file")))?;
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let dir = std::fs::canonicalize(dir)
        .map_err(|e| Fail::Problem(format!("{module} not installed: {}: {e}", dir.display())))?;
    dir.join(file)
        .into_os_string()
        .into_string()
        .map_err(|_| usage(format!("provider={module}: the path is not UTF-8")))
}

/// "/usr/lib/softhsm/libsofthsm2.so" → "softhsm2".
fn default_name(module: &str) -> Option<String> {
    let file = Path::new(module).file_name()?.to_str()?;
    let stem = file.split(".so").next().unwrap_or(file);
    let stem = stem.strip_prefix("lib").unwrap_or(stem);
    (!stem.is_empty()).then(|| stem.to_string())
}

fn set_state(target: &Target, lib: &Path, words: &[String], enable: bool) -> Result<u8, Fail> {
    let verb = if enable { "enable" } else { "disable" };
    if words.first().map(String::as_str) == Some("metaslot") {
        let keys: &[&str] = if enable { &["token"] } else { &[] };
        let w = Words::parse(&words[1..], keys, &["auto-key-migrate"])?;
        let token = w.get("token").map(str::to_string);
        let akm = w.has("auto-key-migrate");
        let cfg = edit(target, lib, |cfg| {
            if let Some(t) = &token {
                cfg.metaslot.keystore = t.clone();
            }
            if akm {
                cfg.metaslot.auto_key_migrate = enable;
            }
            if token.is_none() && !akm {
                cfg.metaslot.enabled = enable;
            }
            Ok(cfg.clone())
        })?;
        // A keystore named, or the metaslot turned on: warn when it has no keystore token now.
        let turned_on = enable && token.is_none() && !akm;
        if token.is_some() || (turned_on && cfg.metaslot.enabled) {
            warn_if_no_token(&cfg, &cfg.metaslot.keystore, lib);
        }
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
    edit(target, lib, |cfg| {
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

fn list_plain(r: &Reading, providers: &[&ProviderConfig], lib: &Path, json: bool) -> u8 {
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
        print_listing(r, json!({ "providers": list }));
        return 0;
    }
    outln!("Configuration: {}", source_words(r));
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

fn list_policy(r: &Reading, providers: &[&ProviderConfig], json: bool) -> u8 {
    if json {
        let list: Vec<_> = providers.iter().map(|p| policy_json(p)).collect();
        print_listing(
            r,
            json!({ "providers": list, "metaslot": metaslot_json(&r.cfg) }),
        );
        return 0;
    }
    for p in providers {
        outln!("{}", policy_sentence(p));
    }
    0
}

/// Where the configuration came from: a short kind (for JSON) and words.
/// `edited`: the file an edit would create.
fn describe_source(r: &Reading, cli: &Cli, edited: Option<&Path>) -> (&'static str, String) {
    match &r.cfg.source {
        config::Source::BuiltIn => (
            "built-in",
            match (&r.missing, edited) {
                (Some(m), _) => m.words(),
                (None, Some(p)) => format!("built-in default (no file at {})", p.display()),
                (None, None) => "built-in default (no configuration file)".to_string(),
            },
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

fn list_metaslot(r: &Reading, source: &(&str, String), json: bool) -> u8 {
    if json {
        let mut v = metaslot_json(&r.cfg);
        v["source"] = json!(source.0);
        print_listing(r, v);
        return 0;
    }
    let m = &r.cfg.metaslot;
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
    r: &Reading,
    providers: &[&ProviderConfig],
    lib: &Path,
    verbose: bool,
    json: bool,
) -> u8 {
    let reports: Vec<probe::ProviderReport> = providers
        .iter()
        .map(|p| probe::probe(p, &config::resolve_module(&p.module, lib), true))
        .collect();
    let failed = any_problem(&reports);
    if json {
        print_listing(r, json!({ "providers": reports }));
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

/// Whether a probe met a problem, with the module or with one of its slots (status 1).
fn any_problem(reports: &[probe::ProviderReport]) -> bool {
    reports
        .iter()
        .any(|r| !r.errors.is_empty() || r.slots.iter().any(|s| !s.errors.is_empty()))
}

/// The label of the token the framework takes from a provider, as the keystore candidate:
/// that of its first slot with a token.
fn first_token(r: &probe::ProviderReport) -> Option<&str> {
    r.slots
        .iter()
        .find_map(|s| s.token.as_ref())
        .map(|t| t.label.as_str())
}

/// Whether provider `p` has a token labelled `label` now (loads the module).
fn has_token(p: &ProviderConfig, label: &str, lib: &Path) -> bool {
    let r = probe::probe(p, &config::resolve_module(&p.module, lib), true);
    first_token(&r) == Some(label)
}

/// Whether any configured provider has a token labelled `label` now.
fn any_has_token(cfg: &Config, label: &str, lib: &Path) -> bool {
    cfg.providers.iter().any(|p| has_token(p, label, lib))
}

/// Warns when no configured provider has a token labelled `label` now: the framework takes
/// the keystore from the first slot with a token of each provider, and while the metaslot is
/// enabled C_Initialize fails without it. The setting is kept (the token may be initialized
/// or inserted later).
fn warn_if_no_token(cfg: &Config, label: &str, lib: &Path) {
    if !any_has_token(cfg, label, lib) {
        warn_no_token(label);
    }
}

fn warn_no_token(label: &str) {
    eprintln!(
        "cryptoadm: warning: no configured provider has a token labelled \"{label}\" now; \
         while the metaslot is enabled, applications fail C_Initialize until one has"
    );
}

/// Checks the configuration as the framework loads it: the file `$OPENCF_CONF` names exists,
/// every provider module loads and initializes, and while the metaslot is enabled a provider
/// has its keystore token.
fn refresh(path: Option<&Path>, lib: &Path, json: bool) -> Result<u8, Fail> {
    let r = read_config(path, lib)?;
    let mut problems: Vec<String> = Vec::new();
    let mut checked = Vec::new();
    // The metaslot as an application started from this environment has it: the framework
    // applies `OPENCF_METASLOT_ENABLED` and `OPENCF_METASLOT_KEYSTORE` over the file.
    let mut with_env = r.cfg.clone();
    if let Err(e) = config::apply_env_overrides(&mut with_env) {
        problems.push(format!(
            "{e}: applications started with this environment fail C_Initialize"
        ));
    }
    let overridden = overrides_words(&r.cfg.metaslot, &with_env.metaslot);
    let cfg = &with_env;
    match &r.missing {
        Some(m) if m.framework => problems.push(m.refusal()),
        _ => {
            if cfg.providers.is_empty() {
                problems.push(format!("{}: no providers configured", cfg.source));
            }
            // The slots are walked only to find the keystore token.
            let keystore = cfg
                .metaslot
                .enabled
                .then_some(cfg.metaslot.keystore.as_str());
            let mut found = false;
            for p in &cfg.providers {
                let rep = probe::probe(
                    p,
                    &config::resolve_module(&p.module, lib),
                    keystore.is_some(),
                );
                for e in &rep.errors {
                    problems.push(format!("provider \"{}\": {e}", p.name));
                }
                found |= keystore.is_some() && first_token(&rep) == keystore;
                checked.push(json!({ "name": rep.name, "path": rep.path, "ok": rep.errors.is_empty(), "errors": rep.errors }));
            }
            if let Some(label) = keystore.filter(|_| !found && !cfg.providers.is_empty()) {
                problems.push(format!(
                    "metaslot keystore token \"{label}\" not found in any provider: \
                     applications fail C_Initialize while the metaslot is enabled"
                ));
            }
        }
    }
    if json {
        print_listing(
            &r,
            json!({ "providers": checked, "problems": problems, "environment": overridden }),
        );
    } else {
        for o in &overridden {
            outln!("environment: {o}");
        }
        for p in &problems {
            outln!("{p}");
        }
        if problems.is_empty() {
            outln!(
                "{}: {} provider(s) OK",
                source_words(&r),
                cfg.providers.len()
            );
        }
    }
    Ok(if problems.is_empty() { 0 } else { EXIT_PROBLEM })
}

/// What the environment's overrides change in the file's metaslot section, in words.
fn overrides_words(file: &config::MetaslotConfig, env: &config::MetaslotConfig) -> Vec<String> {
    let mut out = Vec::new();
    if file.enabled != env.enabled {
        out.push(format!(
            "{} turns the metaslot {}",
            config::ENV_METASLOT_ENABLED,
            if env.enabled { "on" } else { "off" }
        ));
    }
    if file.keystore != env.keystore {
        out.push(format!(
            "{} makes \"{}\" the keystore token (the file names \"{}\")",
            config::ENV_METASLOT_KEYSTORE,
            env.keystore,
            file.keystore
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(provider_error: bool, slot_error: bool) -> probe::ProviderReport {
        let errors = |on: bool| {
            if on {
                vec!["C_GetSlotInfo failed: CKR_DEVICE_ERROR".to_string()]
            } else {
                Vec::new()
            }
        };
        probe::ProviderReport {
            name: "p".into(),
            module: "/m.so".into(),
            path: "/m.so".into(),
            info: None,
            slots: vec![probe::SlotReport {
                id: 0,
                description: String::new(),
                manufacturer: String::new(),
                flags: Vec::new(),
                token: None,
                mechanisms: Vec::new(),
                errors: errors(slot_error),
            }],
            errors: errors(provider_error),
        }
    }

    /// An error listed under a slot is a provider problem too (status 1).
    #[test]
    fn slot_errors_are_problems() {
        assert!(!any_problem(&[report(false, false)]));
        assert!(any_problem(&[report(true, false)]));
        assert!(any_problem(&[report(false, false), report(false, true)]));
    }

    /// $OPENCF_LIB_DIR first, then libopencf.so beside the executable, then in ../lib.
    #[test]
    fn lib_dir_beside_then_installed_layout() {
        let root = tempfile::tempdir().unwrap();
        let (bin, lib) = (root.path().join("bin"), root.path().join("lib"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&lib).unwrap();
        // Neither: the executable's directory.
        assert_eq!(lib_dir_from(None, Some(&bin)), bin);
        // PREFIX/bin + PREFIX/lib.
        std::fs::write(lib.join("libopencf.so"), b"").unwrap();
        assert_eq!(lib_dir_from(None, Some(&bin)), lib);
        assert_eq!(lib_dir_from(Some("".into()), Some(&bin)), lib);
        // The build tree: beside the executable wins.
        std::fs::write(bin.join("libopencf.so"), b"").unwrap();
        assert_eq!(lib_dir_from(None, Some(&bin)), bin);
        // The variable overrides both.
        assert_eq!(
            lib_dir_from(Some("/elsewhere".into()), Some(&bin)),
            PathBuf::from("/elsewhere")
        );
        assert_eq!(lib_dir_from(None, None), PathBuf::from("."));
    }

    #[test]
    fn installed_modules_are_absolute_or_bare() {
        let cwd = std::fs::canonicalize(".").unwrap();
        let ok = |m: &str| module_to_install(m).ok().unwrap();
        assert_eq!(ok("libx.so"), "libx.so");
        assert_eq!(ok("./libx.so"), cwd.join("libx.so").to_str().unwrap());
        assert_eq!(ok("src/../libx.so"), cwd.join("libx.so").to_str().unwrap());
        assert_eq!(ok("/usr/lib/../lib/libx.so.1"), "/usr/lib/libx.so.1");
        assert!(matches!(module_to_install("/x/.."), Err(Fail::Usage(_))));
        assert!(matches!(
            module_to_install("/nonexistent-dir/libx.so"),
            Err(Fail::Problem(_))
        ));
    }
}
