//! `opencf-tlsproxy`: TLS termination in front of clear-text services, with private keys that
//! stay in a PKCS#11 token (reached through `libopencf.so`), in the spirit of Solaris KSSL.
//!
//! * [`config`]: the TOML instance file shared by the daemon and `tlsproxycfg`.
//! * [`files`]: bounded reads of the files the proxy is configured with.
//! * [`clienthello`]: a small parser of the first flight (versions, suites, SNI) used to decide
//!   between serving the handshake and handing the raw bytes to the fallback port.
//! * [`token`]: the PKCS#11 module, tokens with a pool of logged-in sessions, and the rustls
//!   signing keys implemented with `C_SignInit`/`C_Sign`.
//! * [`tls`]: rustls server configurations and the session-ID cache with a timeout.
//! * [`tickets`]: the session-ticket producer, whose keys derive from a secret shared by the
//!   worker processes.
//! * [`proxy`]: listeners, the per-connection state machine, reload.
//! * [`proxy_header`]: the PROXY protocol header (versions 1 and 2) for the clear-text service.
//! * [`workers`]: the supervisor of several worker processes (`workers = N`).
//! * [`stats`]: the live counters (`cryptoadm stat`, component `tlsproxy`).
//! * [`import`]: import of PEM and PKCS#12 keys into the token (used by `tlsproxycfg`).
#![forbid(unsafe_code)]

pub mod clienthello;
pub mod config;
pub mod files;
pub mod import;
pub mod proxy;
pub mod proxy_header;
pub mod stats;
pub mod tickets;
pub mod tls;
pub mod token;
pub mod uri;
pub mod workers;

/// Errors of this crate are plain messages; every layer adds its context.
pub type Result<T> = std::result::Result<T, String>;

static LOG_NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The prefix of the daemon's messages: `opencf-tlsproxy`, or `opencf-tlsproxy[worker I]` in
/// a worker process.
pub fn log_name() -> &'static str {
    LOG_NAME.get().map_or("opencf-tlsproxy", String::as_str)
}

/// Prints one line of the daemon's log on stderr, `<log_name()>: ` and the message, with a
/// single `write`: stderr is unbuffered, so `eprintln!` writes each piece of its format apart,
/// and the lines of worker processes that share the supervisor's stderr would interleave piece
/// by piece.
#[macro_export]
macro_rules! log_line {
    ($($arg:tt)*) => {{
        let mut line = format!("{}: ", $crate::log_name());
        let _ = std::fmt::Write::write_fmt(&mut line, format_args!($($arg)*));
        line.push('\n');
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    }};
}

/// Sets [`log_name`] (once, at the start of a worker process).
pub fn set_log_name(name: String) {
    let _ = LOG_NAME.set(name);
}
