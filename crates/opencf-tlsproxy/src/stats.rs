//! Live counters of the proxy, component `tlsproxy` in `cryptoadm stat`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

/// Every counter the proxy keeps (references into the shared segment, looked up once).
pub struct Stats {
    /// Connections accepted.
    pub connections: &'static AtomicU64,
    /// Connections open now (gauge).
    pub active: &'static AtomicU64,
    pub handshakes_full: &'static AtomicU64,
    pub handshakes_resumed: &'static AtomicU64,
    pub handshake_failures: &'static AtomicU64,
    pub handshake_timeouts: &'static AtomicU64,
    /// Relays closed by `idle_timeout`.
    pub idle_timeouts: &'static AtomicU64,
    /// Connections handed to the fallback port.
    pub fallbacks: &'static AtomicU64,
    /// First flights that were not a TLS ClientHello.
    pub malformed: &'static AtomicU64,
    /// Connections closed because of an unknown SNI name (`unknown_sni = "reject"`).
    pub rejected: &'static AtomicU64,
    /// Fatal alerts sent by the proxy (handshake errors on its side).
    pub alerts_sent: &'static AtomicU64,
    /// Fatal alerts received from clients.
    pub alerts_received: &'static AtomicU64,
    /// The clear-text service could not be reached.
    pub backend_errors: &'static AtomicU64,
    /// Failed token signatures.
    pub sign_errors: &'static AtomicU64,
    /// Signatures of a slow token, run off the runtime's threads (`block_in_place`).
    pub signatures_offloaded: &'static AtomicU64,
    /// Times the signature watchdog woke the runtime (a signature holding a runtime thread).
    pub watchdog_wakeups: &'static AtomicU64,
    /// Signatures of a slow token refused (`max_offloaded_signatures` running already).
    pub signatures_refused: &'static AtomicU64,
    /// Clear-text bytes from clients to the service.
    pub bytes_in: &'static AtomicU64,
    /// Clear-text bytes from the service to clients.
    pub bytes_out: &'static AtomicU64,
    /// Bytes relayed to and from fallback servers.
    pub fallback_bytes: &'static AtomicU64,
}

pub const COMPONENT: &str = "tlsproxy";

/// The process's counters.
pub fn get() -> &'static Stats {
    static S: OnceLock<Stats> = OnceLock::new();
    S.get_or_init(|| {
        let c = |n| opencf_stat::counter(COMPONENT, n);
        Stats {
            connections: c("connections"),
            active: opencf_stat::gauge(COMPONENT, "active_connections"),
            handshakes_full: c("handshakes_full"),
            handshakes_resumed: c("handshakes_resumed"),
            handshake_failures: c("handshake_failures"),
            handshake_timeouts: c("handshake_timeouts"),
            idle_timeouts: c("idle_timeouts"),
            fallbacks: c("fallbacks"),
            malformed: c("malformed"),
            rejected: c("rejected"),
            alerts_sent: c("alerts_sent"),
            alerts_received: c("alerts_received"),
            backend_errors: c("backend_errors"),
            sign_errors: c("sign_errors"),
            signatures_offloaded: c("signatures_offloaded"),
            signatures_refused: c("signatures_refused"),
            watchdog_wakeups: c("watchdog_wakeups"),
            bytes_in: c("bytes_in"),
            bytes_out: c("bytes_out"),
            fallback_bytes: c("fallback_bytes"),
        }
    })
}

/// Adds one to a counter.
pub fn inc(c: &AtomicU64) {
    c.fetch_add(1, Relaxed);
}

/// Holds the active-connections gauge up for its lifetime.
pub struct Active;

impl Active {
    pub fn new() -> Active {
        let s = get();
        inc(s.connections);
        inc(s.active);
        Active
    }
}

impl Default for Active {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        get().active.fetch_sub(1, Relaxed);
    }
}
