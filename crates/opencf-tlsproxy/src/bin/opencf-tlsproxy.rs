//! `opencf-tlsproxy`: the TLS termination daemon. See docs/TLSPROXY.md.
#![forbid(unsafe_code)]

use clap::Parser;
use opencf_tlsproxy::config::Config;
use opencf_tlsproxy::proxy;
use opencf_tlsproxy::tls::{InstanceTls, Resumption};
use opencf_tlsproxy::token::{default_module, Module};
use std::path::PathBuf;
use std::process::ExitCode;

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
    /// Worker threads (default: one per CPU).
    #[arg(long)]
    threads: Option<usize>,
}

fn check(path: &std::path::Path) -> Result<(), String> {
    let cfg = Config::load(path)?;
    let module = Module::open(&cfg.module.clone().unwrap_or_else(default_module))?;
    for i in &cfg.instances {
        InstanceTls::build(&module, i, &Resumption::new(i)?)?;
        println!("instance {}: ok", i.name());
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let path = args.config.clone().unwrap_or_else(Config::default_path);
    if args.check {
        return match check(&path) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("opencf-tlsproxy: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(n) = args.threads {
        rt.worker_threads(n.max(1));
    }
    let rt = match rt.build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("opencf-tlsproxy: runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(proxy::run(&path, args.instance, args.pid_file.as_deref())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("opencf-tlsproxy: {e}");
            ExitCode::FAILURE
        }
    }
}
