//! `opencf-tlsproxy`: the TLS termination daemon. See docs/TLSPROXY.md.
#![forbid(unsafe_code)]

use clap::Parser;
use opencf_tlsproxy::config::{check_workers, Config};
use opencf_tlsproxy::proxy::{self, Options, PidFile};
use opencf_tlsproxy::tickets::TicketSecret;
use opencf_tlsproxy::tls::{InstanceTls, Resumption};
use opencf_tlsproxy::token::{default_module, Module};
use opencf_tlsproxy::workers::{self, SuperviseOptions};
use opencf_tlsproxy::Result;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// How long a stopping daemon waits for its runtime's threads. A thread inside a token call
/// that does not return (a token that stopped answering) is not waited for longer: the process
/// exits and the call with it.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(1);

/// TLS termination proxy whose private keys stay in a PKCS#11 token.
#[derive(Parser)]
#[command(name = "opencf-tlsproxy", version)]
struct Args {
    /// Instance file (default: /etc/opencf/tlsproxy.toml as root, else
    /// $XDG_CONFIG_HOME/opencf/tlsproxy.toml).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Serve only this instance (PORT or ADDRESS-PORT), as the systemd unit does.
    #[arg(long)]
    instance: Option<String>,
    /// Write the process id here while running.
    #[arg(long)]
    pid_file: Option<PathBuf>,
    /// Check the file, keys and certificates, then exit.
    #[arg(long)]
    check: bool,
    /// Runtime threads per process (default: one per CPU).
    #[arg(long)]
    threads: Option<usize>,
    /// Worker processes, 1 to 64 (overrides `workers` in the file; default 1).
    #[arg(long, value_parser = parse_workers)]
    workers: Option<usize>,
    /// Run as worker I of a supervisor (set by the supervisor itself).
    #[arg(long = "worker-index", hide = true)]
    worker_index: Option<usize>,
}

fn parse_workers(s: &str) -> std::result::Result<usize, String> {
    let n = s
        .parse::<usize>()
        .map_err(|_| format!("{s:?} is not a number (1 to 64)"))?;
    check_workers(n)
}

fn check(path: &Path) -> Result<()> {
    let cfg = Config::load(path)?;
    let module = Module::open(&cfg.module.clone().unwrap_or_else(default_module))?;
    let secret = TicketSecret::random()?;
    for i in &cfg.instances {
        InstanceTls::build(&module, i, &Resumption::new(i, &secret)?)?;
        println!("instance {}: ok", i.name());
    }
    Ok(())
}

/// Runs `f` on a multi-thread runtime, then shuts the runtime down within [`SHUTDOWN_WAIT`].
fn run_on_runtime<F: std::future::Future>(threads: Option<usize>, f: F) -> Result<F::Output> {
    let rt = runtime(threads)?;
    let out = rt.block_on(f);
    rt.shutdown_timeout(SHUTDOWN_WAIT);
    Ok(out)
}

fn runtime(threads: Option<usize>) -> Result<tokio::runtime::Runtime> {
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(n) = threads {
        rt.worker_threads(n.max(1));
    }
    rt.build().map_err(|e| format!("runtime: {e}"))
}

fn daemon(args: Args) -> Result<()> {
    let path = args.config.clone().unwrap_or_else(Config::default_path);
    if let Some(p) = args.pid_file.as_deref() {
        opencf_tlsproxy::files::check_beside_config(&path, "pid file", p)?;
    }
    if let Some(i) = args.worker_index {
        let secret = workers::worker_init(i)?;
        let opts = Options {
            config: &path,
            only: args.instance,
            reuseport: true,
            secret,
        };
        return run_on_runtime(args.threads, proxy::run(opts, workers::worker_ready))?;
    }
    let from_file = args.workers.is_none();
    let n = match args.workers {
        Some(n) => n,
        None => Config::load(&path)?.workers.unwrap_or(1),
    };
    if n > 1 {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("runtime: {e}"))?;
        return rt.block_on(workers::supervise(SuperviseOptions {
            workers: n,
            config: &path,
            only: args.instance,
            threads: args.threads,
            pid_file: args.pid_file.as_deref(),
            from_file,
        }));
    }
    let opts = Options {
        config: &path,
        only: args.instance,
        reuseport: false,
        secret: TicketSecret::random()?,
    };
    let mut pid = None;
    let pid_file = args.pid_file.as_deref();
    run_on_runtime(
        args.threads,
        proxy::run(opts, || {
            pid = pid_file.map(PidFile::create).transpose()?;
            Ok(())
        }),
    )?
}

fn main() -> ExitCode {
    let args = Args::parse();
    let r = if args.check {
        check(&args.config.clone().unwrap_or_else(Config::default_path))
    } else {
        daemon(args)
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            opencf_tlsproxy::log_line!("{e}");
            ExitCode::FAILURE
        }
    }
}
