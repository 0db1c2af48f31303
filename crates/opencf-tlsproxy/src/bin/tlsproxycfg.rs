//! `tlsproxycfg`: creates, deletes and lists opencf-tlsproxy instances, like Solaris `ksslcfg`.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand, ValueEnum};
use opencf_tlsproxy::config::{
    ClientAuth, Config, Instance, ProxyProtocol, UnknownSni, DEFAULT_DRAIN_TIMEOUT,
};
use opencf_tlsproxy::import::{load_pem, load_pkcs12, Imported};
use opencf_tlsproxy::tickets::TicketSecret;
use opencf_tlsproxy::tls::{
    check_key_fits, client_verifier, load_ocsp, select_suites, InstanceTls, Resumption,
};
use opencf_tlsproxy::token::{default_module, read_pin_file, Module};
use opencf_tlsproxy::uri::Pkcs11Uri;
use rustls::pki_types::CertificateDer;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Manage opencf-tlsproxy instances (TLS termination with keys held in a PKCS#11 token).
#[derive(Parser)]
#[command(name = "tlsproxycfg", version)]
struct Args {
    /// Instance file (default: /etc/opencf/tlsproxy.toml as root, else
    /// $XDG_CONFIG_HOME/opencf/tlsproxy.toml).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// The daemon's pid file (default: the instance file with the extension .pid).
    #[arg(long, global = true)]
    pid_file: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Pem,
    Pkcs12,
    Pkcs11,
}

// Parsed once at start-up; the size of the create variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Create an instance: TLS on [ADDRESS] PORT, clear text to 127.0.0.1:PROXY_PORT.
    // -h is the CA chain file, as in ksslcfg; help is --help only.
    #[command(disable_help_flag = true)]
    Create {
        /// Where the key and certificate come from.
        #[arg(short = 'f', value_enum)]
        format: Format,
        /// PEM file (key and chain) or PKCS#12 file to import (-f pem|pkcs12).
        #[arg(short = 'i')]
        input: Option<PathBuf>,
        /// Token label (default "OpenCF Metaslot"; objects made there live in the softtoken).
        #[arg(short = 'T')]
        token: Option<String>,
        /// Label of the key and certificate in the token (-f pkcs11), or the label given to
        /// the imported ones (default tlsproxy-NAME).
        #[arg(short = 'C')]
        cert_label: Option<String>,
        /// PEM file of the CA certificates sent after the token's certificate (-f pkcs11; a
        /// PEM or PKCS#12 file carries its own chain).
        #[arg(short = 'h', long = "chain")]
        chain: Option<PathBuf>,
        /// Clear-text port of the application on 127.0.0.1.
        #[arg(short = 'x', value_parser = clap::value_parser!(u16).range(1..))]
        proxy_port: u16,
        /// Cipher suites, comma-separated IANA names.
        #[arg(short = 'c')]
        suites: Option<String>,
        /// Session timeout in seconds (session IDs and tickets).
        #[arg(short = 't')]
        timeout: Option<u64>,
        /// Session cache size in entries (0: no session-ID resumption).
        #[arg(short = 'z')]
        cache: Option<usize>,
        /// File holding the token's user PIN.
        #[arg(short = 'p')]
        pin_file: Option<PathBuf>,
        /// File holding the password of the PKCS#12 or encrypted PEM file.
        #[arg(short = 'P', long = "import-pass")]
        import_pass: Option<PathBuf>,
        /// Fallback port on 127.0.0.1 for ClientHellos the proxy cannot serve.
        #[arg(short = 'F', value_parser = clap::value_parser!(u16).range(1..))]
        fallback: Option<u16>,
        /// TLS versions, comma-separated (1.2,1.3).
        #[arg(long)]
        versions: Option<String>,
        /// Handshake timeout in seconds.
        #[arg(long)]
        handshake_timeout: Option<u64>,
        /// Close a relayed connection after this many seconds without a byte either way
        /// (default 0: never).
        #[arg(long)]
        idle_timeout: Option<u64>,
        /// Send a PROXY protocol header (v1 or v2) with the client's address to the
        /// clear-text service before the relayed bytes.
        #[arg(long, value_enum)]
        proxy_protocol: Option<ProxyProtocol>,
        /// Application protocols to negotiate (ALPN), comma-separated, preferred first
        /// (e.g. h2,http/1.1).
        #[arg(long)]
        alpn: Option<String>,
        /// PEM file of the CA certificates whose client certificates are accepted: clients
        /// are asked for a certificate (mutual TLS).
        #[arg(long, value_name = "FILE")]
        client_ca: Option<PathBuf>,
        /// With --client-ca: whether a client certificate is required (default) or optional.
        #[arg(long, value_enum)]
        client_auth: Option<ClientAuth>,
        /// With --client-ca: PEM file of the certificate revocation lists of the client
        /// certificates and their issuers.
        #[arg(long, value_name = "FILE")]
        client_crl: Option<PathBuf>,
        /// DER file of an OCSP response for the certificate, stapled for clients that ask
        /// (replace the file and reload to renew it).
        #[arg(long, value_name = "FILE")]
        ocsp: Option<PathBuf>,
        /// Disable session tickets.
        #[arg(long)]
        no_tickets: bool,
        /// What to do with an unknown SNI name: default, fallback or reject.
        #[arg(long)]
        unknown_sni: Option<String>,
        /// Start the daemon if it is not running (where systemd does not manage it).
        #[arg(long)]
        start: bool,
        /// [ADDRESS] PORT
        #[arg(num_args = 1..=2, required = true)]
        target: Vec<String>,
        /// Print help.
        #[arg(long, action = clap::ArgAction::Help)]
        help: Option<bool>,
    },
    /// Delete an instance (its key stays in the token).
    Delete {
        /// [ADDRESS] PORT
        #[arg(num_args = 1..=2, required = true)]
        target: Vec<String>,
    },
    /// List the instances.
    List,
    /// Start the daemon for every instance (where systemd does not manage it).
    Start,
    /// Stop the daemon started with --start or start.
    Stop {
        /// Stop gracefully (SIGQUIT): new connections are refused and the open ones may end,
        /// for up to drain_timeout, before the daemon exits.
        #[arg(long)]
        graceful: bool,
    },
}

fn target(t: &[String]) -> Result<(Option<String>, u16), String> {
    let (addr, port) = match t {
        [p] => (None, p),
        [a, p] => (Some(a.clone()), p),
        _ => return Err("expected [ADDRESS] PORT".into()),
    };
    let port = port
        .parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("bad port {port:?} (1 to 65535)"))?;
    Ok((addr, port))
}

fn list_arg(s: &str) -> Vec<String> {
    s.split(',')
        .map(|x| x.trim().to_string())
        .filter(|x| !x.is_empty())
        .collect()
}

fn absolute(p: &Path) -> Result<PathBuf, String> {
    std::path::absolute(p).map_err(|e| format!("{}: {e}", p.display()))
}

/// Writes one line on standard output. A closed pipe (`tlsproxycfg list | head -1`) or another
/// write error does not stop the command (a `create` goes on to write the instance file once
/// its key is imported): lines that cannot be written are dropped, instead of a panic.
fn out_line(args: std::fmt::Arguments) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{args}").and_then(|()| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("tlsproxycfg: cannot write to standard output: {e}");
        }
    }
}

macro_rules! say {
    ($($arg:tt)*) => {
        out_line(format_args!($($arg)*))
    };
}

const DEFAULT_TOKEN: &str = "OpenCF Metaslot";
/// The daemon's executable, beside this one, and its process name.
const DAEMON: &str = "opencf-tlsproxy";

struct Ctx {
    config: PathBuf,
    pid_file: PathBuf,
}

/// The last `n` lines of the log at `path`, from at most its last 64 KiB: the daemon appends
/// to the same log at every start, so the file may be large.
fn last_lines(path: &Path, n: usize) -> String {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 64 * 1024;
    let mut buf = Vec::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let len = f.metadata().map_or(0, |m| m.len());
        if f.seek(SeekFrom::Start(len.saturating_sub(TAIL))).is_ok() {
            let _ = f.take(TAIL).read_to_end(&mut buf);
        }
    }
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Ctx {
    /// The daemon's log, beside the instance file.
    fn log_path(&self) -> PathBuf {
        self.config.with_extension("log")
    }

    /// Neither the pid file nor the log may be the instance file (`--config x.pid`).
    fn check_paths(&self) -> Result<(), String> {
        use opencf_tlsproxy::files::check_beside_config;
        check_beside_config(&self.config, "pid file", &self.pid_file)?;
        check_beside_config(&self.config, "log", &self.log_path())
    }

    /// The daemon the pid file names, if it runs. A pid file left by a daemon that was
    /// killed may name a pid the system has given to another process since: only an
    /// `opencf-tlsproxy` process is taken (its name in `/proc/PID/comm`), so that no other
    /// process is signalled.
    fn running_pid(&self) -> Option<i32> {
        let pid = self.pid_in_file()?;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        (comm.trim_end() == DAEMON).then_some(pid)
    }

    /// The pid the pid file holds: a positive number and a line end; anything longer is not
    /// one (and is not read whole).
    fn pid_in_file(&self) -> Option<i32> {
        let text = opencf_tlsproxy::files::read_bounded(&self.pid_file, 64).ok()?;
        let pid: i32 = std::str::from_utf8(&text).ok()?.trim().parse().ok()?;
        (pid > 0).then_some(pid)
    }

    fn signal(&self, sig: rustix::process::Signal) -> Option<i32> {
        let pid = self.running_pid()?;
        let p = rustix::process::Pid::from_raw(pid)?;
        rustix::process::kill_process(p, sig).ok().map(|_| pid)
    }

    /// Tells a running daemon to reload; starts one when asked to.
    fn reload_or_start(&self, start: bool) -> Result<(), String> {
        if let Some(pid) = self.signal(rustix::process::Signal::HUP) {
            say!("tlsproxycfg: daemon {pid} reloading");
            return Ok(());
        }
        if start {
            return self.start();
        }
        say!(
            "tlsproxycfg: no daemon running; start it with `systemctl start opencf-tlsproxy@NAME` or `tlsproxycfg start`"
        );
        Ok(())
    }

    fn start(&self) -> Result<(), String> {
        if let Some(pid) = self.running_pid() {
            return Err(format!("daemon already running (pid {pid})"));
        }
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let daemon = exe.with_file_name(DAEMON);
        let log_path = self.log_path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("{}: {e}", log_path.display()))?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let _ = std::fs::remove_file(&self.pid_file);
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new(&daemon)
            .arg("--config")
            .arg(&self.config)
            .arg("--pid-file")
            .arg(&self.pid_file)
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("{}: {e}", daemon.display()))?;
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "daemon exited ({status}); {}:\n{}",
                    log_path.display(),
                    last_lines(&log_path, 5)
                ));
            }
            if self.running_pid() == Some(child.id() as i32) {
                say!(
                    "tlsproxycfg: daemon started, pid {} (log {})",
                    child.id(),
                    log_path.display()
                );
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err("daemon did not start within 30 s".into())
    }

    fn stop(&self, graceful: bool) -> Result<(), String> {
        use rustix::process::Signal;
        let wait = if graceful {
            let cfg = Config::load(&self.config)?;
            Duration::from_secs(cfg.drain_timeout.unwrap_or(DEFAULT_DRAIN_TIMEOUT) + 10)
        } else {
            Duration::from_secs(10)
        };
        let pid = self
            .signal(if graceful { Signal::QUIT } else { Signal::TERM })
            .ok_or("no daemon running")?;
        if graceful {
            say!(
                "tlsproxycfg: daemon {pid} stopping gracefully (up to {} s)",
                wait.as_secs()
            );
        }
        let until = Instant::now() + wait;
        while Instant::now() < until && Path::new(&format!("/proc/{pid}")).exists() {
            std::thread::sleep(Duration::from_millis(50));
        }
        if Path::new(&format!("/proc/{pid}")).exists() {
            return Err(format!(
                "daemon {pid} still running after {} s",
                wait.as_secs()
            ));
        }
        say!("tlsproxycfg: daemon {pid} stopped");
        Ok(())
    }
}

fn create(ctx: &Ctx, cmd: Cmd) -> Result<(), String> {
    let Cmd::Create {
        format,
        input,
        token,
        cert_label,
        chain,
        proxy_port,
        suites,
        timeout,
        cache,
        pin_file,
        import_pass,
        fallback,
        versions,
        handshake_timeout,
        idle_timeout,
        proxy_protocol,
        alpn,
        client_ca,
        client_auth,
        client_crl,
        ocsp,
        no_tickets,
        unknown_sni,
        start,
        target: t,
        help: _,
    } = cmd
    else {
        unreachable!()
    };
    let (address, port) = target(&t)?;
    let mut cfg = Config::load(&ctx.config)?;
    if cfg.instances.iter().any(|i| i.is(address.as_deref(), port)) {
        return Err(format!("instance {} exists; delete it first", t.join(" ")));
    }
    let pin_file = pin_file.as_deref().map(absolute).transpose()?;
    let pin = pin_file.as_deref().map(read_pin_file).transpose()?;
    let token = token.unwrap_or_else(|| DEFAULT_TOKEN.to_string());
    let mut inst = Instance::new(address, port, proxy_port, String::new());
    let label = cert_label.unwrap_or_else(|| format!("tlsproxy-{}", inst.name()));
    inst.key_uri = Pkcs11Uri::format(&token, &label, "private");
    inst.pin_file = pin_file;
    inst.fallback_port = fallback;
    if let Some(s) = suites {
        let names = list_arg(&s);
        select_suites(Some(&names))?;
        inst.cipher_suites = Some(names);
    }
    if let Some(v) = versions {
        inst.versions = list_arg(&v);
    }
    if let Some(t) = timeout {
        inst.session_timeout = t;
    }
    if let Some(z) = cache {
        inst.session_cache = z;
    }
    if let Some(h) = handshake_timeout {
        inst.handshake_timeout = h;
    }
    if let Some(i) = idle_timeout {
        inst.idle_timeout = i;
    }
    inst.proxy_protocol = proxy_protocol;
    if let Some(a) = alpn {
        inst.alpn = list_arg(&a);
    }
    inst.client_ca_file = client_ca.as_deref().map(absolute).transpose()?;
    inst.client_auth = client_auth;
    inst.client_crl_file = client_crl.as_deref().map(absolute).transpose()?;
    inst.ocsp_file = ocsp.as_deref().map(absolute).transpose()?;
    if let Some(u) = unknown_sni {
        inst.unknown_sni = toml::Value::String(u.clone())
            .try_into()
            .map_err(|_| format!("--unknown-sni {u:?}: default, fallback or reject"))?;
    }
    inst.tickets = !no_tickets;
    // Every option is checked, with the whole file, before anything is imported: a refused
    // option must not leave a key behind in the token.
    let chain_path = absolute(&ctx.config)?
        .with_extension("d")
        .join(format!("{}.pem", inst.name()));
    match format {
        Format::Pkcs11 => {
            inst.cert_uri = Some(Pkcs11Uri::format(&token, &label, "cert"));
            inst.chain_file = chain.as_deref().map(absolute).transpose()?;
        }
        Format::Pem | Format::Pkcs12 if chain.is_some() => {
            return Err("-h is for -f pkcs11; a PEM or PKCS#12 file carries its own chain".into())
        }
        Format::Pem | Format::Pkcs12 => inst.cert_file = Some(chain_path.clone()),
    }
    cfg.instances.push(inst.clone());
    Config::parse(&toml::to_string(&cfg).map_err(|e| e.to_string())?)?;
    // The client CA and CRL files too, before a key is imported.
    client_verifier(&inst).map_err(|e| format!("instance {}: {e}", inst.name()))?;
    let module = Module::open(&cfg.module.clone().unwrap_or_else(default_module))?;
    let mut wrote = None;
    let mut imported = None;
    match format {
        Format::Pkcs11 => {
            if input.is_some() {
                return Err("-i is for -f pem|pkcs12; -f pkcs11 takes -T and -C".into());
            }
        }
        Format::Pem | Format::Pkcs12 => {
            let input = input.ok_or("-f pem|pkcs12 needs -i FILE")?;
            let pass = import_pass.as_deref().map(read_pin_file).transpose()?;
            let kc = match format {
                Format::Pem => load_pem(&input, pass.as_deref())?,
                _ => load_pkcs12(&input, pass.as_deref())?,
            };
            // The suites must fit the key, and the OCSP response answer for this chain,
            // before the key is imported.
            check_key_fits(&inst, kc.algorithm()?)?;
            if let Some(f) = &inst.ocsp_file {
                let certs = kc
                    .chain
                    .iter()
                    .map(|c| c.to_der().map(CertificateDer::from))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| e.to_string())?;
                load_ocsp(f, &certs)?;
            }
            let dir = chain_path.parent().expect("a file in a directory");
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let chain_pem = kc.chain_pem()?;
            let objects = kc.import(&module, Some(&token), pin.clone(), &label)?;
            imported = Some(objects);
            wrote = Some(chain_path.clone());
            std::fs::write(&chain_path, chain_pem)
                .map_err(|e| format!("{}: {e}", chain_path.display()))
                .map_err(|e| undo(e, imported.take(), wrote.take()))?;
            say!("tlsproxycfg: key imported into token {token:?} as {label:?} (sensitive, not extractable)");
        }
    }
    // This instance's key and certificate must load.
    let checked = TicketSecret::random().and_then(|secret| {
        let res = Resumption::new(&inst, &secret)?;
        InstanceTls::build(&module, &inst, &res).map(|_| ())
    });
    if let Err(e) = checked.and_then(|()| cfg.save(&ctx.config)) {
        return Err(undo(e, imported, wrote));
    }
    say!(
        "tlsproxycfg: instance {} created in {}",
        inst.name(),
        ctx.config.display()
    );
    ctx.reload_or_start(start)
}

/// A `create` that failed after its import: the key and certificate it created in the token
/// and the chain file it wrote are removed again. Returns the error, with what could not be
/// removed.
fn undo(e: String, imported: Option<Imported>, wrote: Option<PathBuf>) -> String {
    if let Some(w) = wrote {
        let _ = std::fs::remove_file(w);
    }
    match imported.map(Imported::remove) {
        Some(Err(r)) => format!("{e} (and the imported key could not be removed: {r})"),
        _ => e,
    }
}

fn delete(ctx: &Ctx, t: &[String]) -> Result<(), String> {
    let (address, port) = target(t)?;
    let mut cfg = Config::load(&ctx.config)?;
    let before = cfg.instances.len();
    let mut removed = Vec::new();
    cfg.instances.retain(|i| {
        let hit = i.is(address.as_deref(), port);
        if hit {
            removed.push(i.clone());
        }
        !hit
    });
    if cfg.instances.len() == before {
        return Err(format!("no instance {}", t.join(" ")));
    }
    cfg.save(&ctx.config)?;
    let ours = absolute(&ctx.config)?.with_extension("d");
    for i in removed {
        // The certificate file `create` wrote, unless an instance left in the file (or one of
        // its SNI entries) names it too: removed, it failed every later reload.
        let shared = |f: &Path| cfg.instances.iter().any(|o| o.files().any(|g| g == f));
        if let Some(f) = i
            .cert_file
            .as_ref()
            .filter(|f| f.starts_with(&ours) && !shared(f))
        {
            let _ = std::fs::remove_file(f);
        }
        say!(
            "tlsproxycfg: instance {} deleted (its key stays in the token)",
            i.name()
        );
    }
    ctx.reload_or_start(false)
}

fn list(ctx: &Ctx) -> Result<(), String> {
    let cfg = Config::load(&ctx.config)?;
    say!(
        "{:<22} {:<6} {:<8} {:<8} {:<8} {:<8} KEY",
        "INSTANCE",
        "PORT",
        "PROXY",
        "FALLBACK",
        "VERSIONS",
        "CACHE"
    );
    for i in &cfg.instances {
        say!(
            "{:<22} {:<6} {:<8} {:<8} {:<8} {:<8} {}",
            i.name(),
            i.port,
            match i.proxy_protocol {
                None => i.proxy_port.to_string(),
                Some(v) => format!("{}/{}", i.proxy_port, v.name()),
            },
            i.fallback_port.map_or("-".to_string(), |p| p.to_string()),
            i.versions.join(","),
            format!("{}/{}s", i.session_cache, i.session_timeout),
            i.key_uri
        );
        let more = options(i);
        if !more.is_empty() {
            say!("{:<22} {}", "", more.join("; "));
        }
    }
    match ctx.running_pid() {
        Some(pid) => match children(pid).as_slice() {
            [] => say!("daemon: running, pid {pid}"),
            w => say!(
                "daemon: running, pid {pid}, {} workers (pids {})",
                w.len(),
                w.join(", ")
            ),
        },
        None => say!("daemon: not running (from {})", ctx.pid_file.display()),
    }
    Ok(())
}

/// What `list` shows of an instance below its line: the settings away from their defaults
/// that the columns do not show.
fn options(i: &Instance) -> Vec<String> {
    let file = |p: &Path| {
        p.file_name().map_or_else(
            || p.display().to_string(),
            |f| f.to_string_lossy().into_owned(),
        )
    };
    let mut v = Vec::new();
    if !i.alpn.is_empty() {
        v.push(format!("alpn {}", i.alpn.join(",")));
    }
    if let Some(ca) = &i.client_ca_file {
        let how = match i.client_auth.unwrap_or_default() {
            ClientAuth::Required => "required",
            ClientAuth::Optional => "optional",
        };
        let crl = i
            .client_crl_file
            .as_deref()
            .map_or(String::new(), |c| format!(", CRL {}", file(c)));
        v.push(format!("client certificates {how} (CA {}{crl})", file(ca)));
    }
    if let Some(o) = &i.ocsp_file {
        v.push(format!("OCSP {}", file(o)));
    }
    if i.idle_timeout > 0 {
        v.push(format!("idle timeout {} s", i.idle_timeout));
    }
    if i.unknown_sni != UnknownSni::Default {
        v.push(format!("unknown SNI: {:?}", i.unknown_sni).to_lowercase());
    }
    if !i.tickets {
        v.push("no tickets".into());
    }
    if !i.sni.is_empty() {
        v.push(format!("{} SNI sites", i.sni.len()));
    }
    v
}

/// The child processes of `pid` (the workers of a supervisor), from
/// `/proc/PID/task/*/children`.
fn children(pid: i32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut v: Vec<String> = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| c.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .collect();
    v.sort_by_key(|p| p.parse::<u32>().unwrap_or(0));
    v
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = args.config.unwrap_or_else(Config::default_path);
    let pid_file = args
        .pid_file
        .unwrap_or_else(|| config.with_extension("pid"));
    let ctx = Ctx { config, pid_file };
    let r = ctx.check_paths().and_then(|()| match args.cmd {
        c @ Cmd::Create { .. } => create(&ctx, c),
        Cmd::Delete { target } => delete(&ctx, &target),
        Cmd::List => list(&ctx),
        Cmd::Start => ctx.start(),
        Cmd::Stop { graceful } => ctx.stop(graceful),
    });
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tlsproxycfg: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The log's last lines come from its end only, however long it is; a missing log gives
    /// none.
    #[test]
    fn last_lines_reads_the_end_of_a_long_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("proxy.log");
        let text: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
        assert!(text.len() > 64 * 1024);
        std::fs::write(&log, &text).unwrap();
        assert_eq!(last_lines(&log, 3), "line 19997\nline 19998\nline 19999");
        assert_eq!(last_lines(&dir.path().join("none.log"), 3), "");
    }

    /// A pid file that is not a short regular file names no pid (and is not read whole); a
    /// pid of a live process that is not `opencf-tlsproxy` (this test's) names no daemon.
    #[test]
    fn a_pid_file_that_is_not_one_names_no_daemon() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = |pid_file: &Path| Ctx {
            config: dir.path().join("c.toml"),
            pid_file: pid_file.to_path_buf(),
        };
        let own = dir.path().join("own.pid");
        std::fs::write(&own, format!("{}\n", std::process::id())).unwrap();
        assert_eq!(ctx(&own).pid_in_file(), Some(std::process::id() as i32));
        assert_eq!(ctx(&own).running_pid(), None, "not the daemon");
        assert_eq!(ctx(Path::new("/dev/zero")).pid_in_file(), None);
        let long = dir.path().join("long.pid");
        std::fs::write(
            &long,
            format!("{}\n{}", std::process::id(), " ".repeat(100)),
        )
        .unwrap();
        assert_eq!(ctx(&long).pid_in_file(), None);
        let zero = dir.path().join("zero.pid");
        std::fs::write(&zero, "0\n").unwrap();
        assert_eq!(
            ctx(&zero).pid_in_file(),
            None,
            "pid 0 would signal the group"
        );
    }
}
