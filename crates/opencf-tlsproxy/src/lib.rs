//! `opencf-tlsproxy`: TLS termination in front of clear-text services, with private keys that
//! stay in a PKCS#11 token (reached through `libopencf.so`), in the spirit of Solaris KSSL.
//!
//! * [`config`]: the TOML instance file shared by the daemon and `tlsproxycfg`.
//! * [`clienthello`]: a small parser of the first flight (versions, suites, SNI) used to decide
//!   between serving the handshake and handing the raw bytes to the fallback port.
//! * [`token`]: the PKCS#11 module, tokens with a pool of logged-in sessions, and the rustls
//!   signing keys implemented with `C_SignInit`/`C_Sign`.
//! * [`tls`]: rustls server configurations, the session-ID cache and ticketer with a timeout.
//! * [`proxy`]: listeners, the per-connection state machine, reload.
//! * [`stats`]: the live counters (`cryptoadm stat`, component `tlsproxy`).
//! * [`import`]: import of PEM and PKCS#12 keys into the token (used by `tlsproxycfg`).
#![forbid(unsafe_code)]

pub mod clienthello;
pub mod config;
pub mod import;
pub mod proxy;
pub mod stats;
pub mod tls;
pub mod token;
pub mod uri;

/// Errors of this crate are plain messages; every layer adds its context.
pub type Result<T> = std::result::Result<T, String>;
