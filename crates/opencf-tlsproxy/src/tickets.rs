//! Session tickets whose keys every worker process can derive.
//!
//! The daemon (the supervisor when there are several workers) draws a random
//! [`TicketSecret`] at start and hands it to each worker on its standard input. Ticket keys
//! are derived from it per time epoch of [`ROTATION`] seconds and per instance
//! (HMAC-SHA256 of a label, the instance name and the epoch number), so a ticket issued by one
//! worker is accepted by every other one. A ticket is
//!
//! ```text
//! epoch (8 bytes, big-endian) ‖ nonce (12) ‖ AES-256-GCM(key_epoch, nonce, aad = epoch,
//!                                               issue time (8, big-endian) ‖ rustls state) ‖ tag (16)
//! ```
//!
//! Tickets of the current and the previous epoch are accepted; the issue time sealed inside
//! enforces the configured session timeout. The cryptography is OpenSSL's (HMAC, AES-GCM,
//! random numbers).

use crate::Result;
use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::sign::Signer;
use openssl::symm::{decrypt_aead, encrypt_aead, Cipher};
use rustls::server::ProducesTickets;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Length of the shared secret, in bytes.
pub const SECRET_LEN: usize = 32;
/// Ticket keys change every 6 hours; tickets of the previous epoch are still accepted.
pub const ROTATION: u64 = 6 * 3600;

/// The longest ticket lifetime a server may announce (RFC 8446, 4.6.1: seven days).
pub const MAX_TICKET_LIFETIME: u32 = 7 * 86400;

const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
const LABEL: &[u8] = b"opencf-tlsproxy ticket key v1";

/// The secret every ticket key is derived from (shared by the worker processes).
#[derive(Clone)]
pub struct TicketSecret(Arc<[u8; SECRET_LEN]>);

impl TicketSecret {
    /// A fresh random secret.
    pub fn random() -> Result<TicketSecret> {
        let mut b = [0u8; SECRET_LEN];
        openssl::rand::rand_bytes(&mut b).map_err(|e| format!("random ticket secret: {e}"))?;
        Ok(TicketSecret(Arc::new(b)))
    }

    pub fn from_bytes(b: [u8; SECRET_LEN]) -> TicketSecret {
        TicketSecret(Arc::new(b))
    }

    pub fn bytes(&self) -> &[u8; SECRET_LEN] {
        &self.0
    }
}

impl std::fmt::Debug for TicketSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TicketSecret(..)")
    }
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The ticket producer of an instance (rustls [`ProducesTickets`]).
#[derive(Debug)]
pub struct Tickets {
    secret: TicketSecret,
    context: Vec<u8>,
    ttl: u32,
}

impl Tickets {
    /// Tickets for the instance named `context`, valid `ttl` seconds after their issue.
    pub fn new(secret: &TicketSecret, context: &str, ttl: u64) -> Tickets {
        Tickets {
            secret: secret.clone(),
            context: context.as_bytes().to_vec(),
            ttl: ttl.min(u32::MAX as u64) as u32,
        }
    }

    fn key(&self, epoch: u64) -> Option<Vec<u8>> {
        let pkey = PKey::hmac(self.secret.bytes()).ok()?;
        let mut s = Signer::new(MessageDigest::sha256(), &pkey).ok()?;
        s.update(LABEL).ok()?;
        s.update(&(self.context.len() as u64).to_be_bytes()).ok()?;
        s.update(&self.context).ok()?;
        s.update(&epoch.to_be_bytes()).ok()?;
        s.sign_to_vec().ok()
    }

    /// Seals `plain` at time `now` (seconds since the epoch).
    pub fn encrypt_at(&self, plain: &[u8], now: u64) -> Option<Vec<u8>> {
        let epoch = (now / ROTATION).to_be_bytes();
        let key = self.key(now / ROTATION)?;
        let mut nonce = [0u8; NONCE_LEN];
        openssl::rand::rand_bytes(&mut nonce).ok()?;
        let mut p = Vec::with_capacity(8 + plain.len());
        p.extend_from_slice(&now.to_be_bytes());
        p.extend_from_slice(plain);
        let mut tag = [0u8; TAG_LEN];
        let c = encrypt_aead(
            Cipher::aes_256_gcm(),
            &key,
            Some(&nonce),
            &epoch,
            &p,
            &mut tag,
        )
        .ok()?;
        let mut out = Vec::with_capacity(8 + NONCE_LEN + c.len() + TAG_LEN);
        out.extend_from_slice(&epoch);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&c);
        out.extend_from_slice(&tag);
        Some(out)
    }

    /// Opens a ticket at time `now`: `None` unless it was sealed with this secret and
    /// instance, in the current or the previous epoch, at most the timeout ago.
    pub fn decrypt_at(&self, ticket: &[u8], now: u64) -> Option<Vec<u8>> {
        if ticket.len() < 8 + NONCE_LEN + TAG_LEN {
            return None;
        }
        let (head, rest) = ticket.split_at(8);
        let epoch = u64::from_be_bytes(head.try_into().ok()?);
        let current = now / ROTATION;
        if epoch != current && epoch.checked_add(1) != Some(current) {
            return None;
        }
        let (nonce, rest) = rest.split_at(NONCE_LEN);
        let (c, tag) = rest.split_at(rest.len() - TAG_LEN);
        let key = self.key(epoch)?;
        let p = decrypt_aead(Cipher::aes_256_gcm(), &key, Some(nonce), head, c, tag).ok()?;
        let issued = u64::from_be_bytes(p.get(..8)?.try_into().ok()?);
        if now.saturating_sub(issued) > self.ttl as u64 {
            return None;
        }
        Some(p[8..].to_vec())
    }
}

impl ProducesTickets for Tickets {
    fn enabled(&self) -> bool {
        true
    }
    /// The lifetime announced to clients: the session timeout, at most
    /// [`MAX_TICKET_LIFETIME`] (the timeout sealed inside still applies).
    fn lifetime(&self) -> u32 {
        self.ttl.min(MAX_TICKET_LIFETIME)
    }
    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.encrypt_at(plain, unix_now())
    }
    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.decrypt_at(cipher, unix_now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_000 * ROTATION + 100;

    #[test]
    fn round_trip_and_shared_secret() {
        let s = TicketSecret::random().unwrap();
        let a = Tickets::new(&s, "8443", 86400);
        // Another worker: the same secret handed over as bytes.
        let b = Tickets::new(&TicketSecret::from_bytes(*s.bytes()), "8443", 86400);
        let t = a.encrypt_at(b"session state", T0).unwrap();
        assert_eq!(a.decrypt_at(&t, T0).as_deref(), Some(&b"session state"[..]));
        assert_eq!(
            b.decrypt_at(&t, T0 + 5).as_deref(),
            Some(&b"session state"[..])
        );
        // Fresh nonce per ticket.
        assert_ne!(a.encrypt_at(b"session state", T0).unwrap(), t);
        assert_eq!(
            a.decrypt(&a.encrypt(b"now").unwrap()).as_deref(),
            Some(&b"now"[..])
        );
        assert_eq!(a.lifetime(), 86400);
    }

    #[test]
    fn lifetime_hint_at_most_seven_days() {
        let s = TicketSecret::random().unwrap();
        assert_eq!(Tickets::new(&s, "8443", 604800).lifetime(), 604800);
        assert_eq!(Tickets::new(&s, "8443", 1_000_000).lifetime(), 604800);
        assert_eq!(Tickets::new(&s, "8443", u64::MAX).lifetime(), 604800);
        assert_eq!(Tickets::new(&s, "8443", 0).lifetime(), 0);
    }

    #[test]
    fn foreign_tampered_and_truncated_rejected() {
        let s = TicketSecret::random().unwrap();
        let a = Tickets::new(&s, "8443", 86400);
        let t = a.encrypt_at(b"state", T0).unwrap();
        let other = Tickets::new(&TicketSecret::random().unwrap(), "8443", 86400);
        assert_eq!(other.decrypt_at(&t, T0), None);
        // Another instance of the same daemon derives other keys.
        assert_eq!(Tickets::new(&s, "9443", 86400).decrypt_at(&t, T0), None);
        for i in 0..t.len() {
            let mut bad = t.clone();
            bad[i] ^= 0x01;
            assert_eq!(a.decrypt_at(&bad, T0), None, "byte {i} flipped");
        }
        assert_eq!(a.decrypt_at(&t[..t.len() - 1], T0), None);
        assert_eq!(a.decrypt_at(&t[..20], T0), None);
        assert_eq!(a.decrypt_at(b"", T0), None);
    }

    #[test]
    fn epochs_and_timeout() {
        let s = TicketSecret::random().unwrap();
        let a = Tickets::new(&s, "8443", 3 * ROTATION);
        let t = a.encrypt_at(b"state", T0).unwrap();
        // The next epoch still accepts it (previous key), the one after does not.
        assert!(a.decrypt_at(&t, T0 + ROTATION).is_some());
        assert_eq!(a.decrypt_at(&t, T0 + 2 * ROTATION), None);
        // A ticket from the future epoch is not accepted either.
        let later = a.encrypt_at(b"state", T0 + ROTATION).unwrap();
        assert_eq!(a.decrypt_at(&later, T0), None);
        // The session timeout sealed inside applies within the accepted epochs.
        let short = Tickets::new(&s, "8443", 60);
        let t = short.encrypt_at(b"state", T0).unwrap();
        assert!(short.decrypt_at(&t, T0 + 60).is_some());
        assert_eq!(short.decrypt_at(&t, T0 + 61), None);
    }
}
