//! The bulk engine: one large AES-GCM operation split across cores.
//!
//! GCM encrypts block `i` (counted from 0) of the data with the counter block
//! `inc32^(i+1)(J0)` and authenticates with GHASH, which is linear. So the data can be cut into
//! parts ("pieces": whole blocks, except the last) and each part run by OpenSSL's own fused
//! AES-GCM on a thread of its own, provided that:
//!
//! * **its keystream continues where the previous part's ends.** Part `j`, starting at block
//!   `s_j`, must run with `J0' = Z_j = inc32^(s_j)(J0)`. OpenSSL takes an IV, not a counter
//!   block; but for a 16-byte IV `B` it uses `J0' = GHASH_H(B ‖ L) = B·H² ⊕ L·H` with the
//!   constant length block `L = [0]₆₄ ‖ [128]₆₄`, so the IV `B_j = (Z_j ⊕ L·H)·H⁻²` gives
//!   exactly `Z_j` ([`GcmKey::iv_for`]). `H = AES_K(0¹²⁸)` and `H⁻²` are computed once per
//!   key. OpenSSL's counter then steps with `inc32`, wrapping inside the low 32 bits as GCM
//!   requires, so a part may cross the wrap. The original IV may have any length (1 to
//!   64 KiB, as in the software token): `J0` is computed here ([`GcmKey::j0`]).
//! * **the partial authentication values are combined.** OpenSSL's tag of part `j` is
//!   `E(Z_j) ⊕ GHASH_H(Aⱼ ‖ Cⱼ ‖ Lⱼ)` (the AAD `A` only in part 0). With `E(Z_j)` from
//!   AES-ECB and `Lⱼ·H` removed, `Uⱼ = GHASH_H(Aⱼ ‖ Cⱼ)·H`; in the whole message these blocks
//!   are followed by the `r_j` ciphertext blocks of the later parts and the length block, so
//!   `S = ⊕ⱼ Uⱼ·H^(r_j) ⊕ L·H` and the tag is `E(J0) ⊕ S` ([`seal`]).
//! * **decryption** authenticates the ciphertext, which OpenSSL's decryption does not reveal
//!   as a value: each part's GHASH comes from a second OpenSSL call that encrypts nothing
//!   with the part as AAD (`Uⱼ` as above, with the length block `[|Cⱼ|]₆₄ ‖ [0]₆₄`), the AAD's
//!   own share likewise; the part itself is decrypted by OpenSSL's GCM decryption (its own
//!   tag check unused). The combined tag is compared in constant time; on a mismatch the
//!   output is wiped and the call answers `CKR_ENCRYPTED_DATA_INVALID` ([`open`]).
//!
//! The arithmetic is in [`crate::gf128`] (constant time; the exponents are data lengths,
//! public). A key whose `H` is zero (probability 2⁻¹²⁸) has no inverse: such a key answers
//! `CKR_FUNCTION_FAILED` at init and the framework uses the next provider.
//!
//! Pieces and threads: an operation runs on the cores not taken by other bulk operations of
//! the provider (at least one), its data cut into pieces of at least [`MIN_PART`] bytes, one
//! per thread or, for large operations, up to [`PIECES_PER_THREAD`] per thread. The caller's thread and the helpers (a `rayon-core` pool of
//! one thread per core, started at the first split operation and stopped at `C_Finalize`)
//! take the pieces in turn, so a helper that starts late, as a sleeping thread does on a
//! busy or virtual machine, leaves its share to the others; once no piece is left the caller
//! spins briefly for the helpers' last pieces before it sleeps. An operation of one piece is
//! a single OpenSSL call in the caller's thread with the key's derived IV, whose tag is the
//! tag. `$OPENCF_ACCEL_BULK_PARTS=N` (read at each request) forces `N` pieces whatever the
//! size (at most one per block), for tests.

use crate::counters;
use crate::gf128::{self as gf, block};
use crate::sched::Scheduler;
use opencf_abi::sys::*;
use opencf_abi::{gcm_iv_ok, gcm_tag_len, CkResult, MechParam, Mechanism, OutBuf};
use openssl::cipher::Cipher;
use openssl::cipher_ctx::CipherCtx;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use zeroize::{Zeroize, Zeroizing};

/// The smallest piece of an operation (bytes): below twice this, an operation runs in one
/// piece in the caller's thread.
pub const MIN_PART: usize = 128 * 1024;
/// Pieces per thread of a large operation (the threads take them in turn: a thread that
/// starts late or is preempted leaves its share to the others), when each is at least
/// [`BALANCE_PIECE`] bytes; smaller operations get one piece per thread.
pub const PIECES_PER_THREAD: usize = 4;
/// The smallest piece worth the extra pieces of [`PIECES_PER_THREAD`] (each costs a context,
/// an AES block and a few field multiplications, a few µs).
pub const BALANCE_PIECE: usize = 1 << 20;
/// The largest input handed to OpenSSL in one call (its lengths are `int`).
const PIECE: usize = 1 << 30;
/// The largest plaintext GCM allows: `2^32 − 2` blocks (SP 800-38D, 5.2.1.1).
pub const MAX_DATA: u64 = ((1 << 32) - 2) * 16;

pub(crate) fn ossl(_: openssl::error::ErrorStack) -> CK_RV {
    CKR_FUNCTION_FAILED
}

/// Whether the bulk engine is offered here: at least two cores, and `$OPENCF_ACCEL_DISABLE`
/// does not name `bulk`. With one core a split buys nothing and the software token's
/// AES-GCM is as fast.
pub fn available() -> bool {
    let disabled = std::env::var("OPENCF_ACCEL_DISABLE").unwrap_or_default();
    if disabled.split(',').any(|w| w.trim() == "bulk") {
        return false;
    }
    Scheduler::cores() >= 2
}

/// An AES key's GCM form, computed once per key object: the key, `H`, `H⁻²` and `L·H`.
pub struct GcmKey {
    key: Zeroizing<Vec<u8>>,
    /// The ciphers, fetched once (a legacy `EVP_CIPHER` is looked up again at every init).
    gcm: Cipher,
    ecb: Cipher,
    h: u128,
    h_inv2: u128,
    /// `L·H` for the length block of a 16-byte IV.
    liv_h: u128,
    /// `H^(2^i)`: powers of `H` for exponents up to the largest block count.
    powers: gf::Powers<33>,
}

impl Drop for GcmKey {
    fn drop(&mut self) {
        self.h.zeroize();
        self.h_inv2.zeroize();
        self.liv_h.zeroize();
    }
}

/// OpenSSL's AES ciphers in `modes` for a key of 16, 24 or 32 bytes (`CKR_KEY_SIZE_RANGE`
/// otherwise), fetched once per key object (a legacy `EVP_CIPHER` is looked up again at every
/// init).
pub(crate) fn aes_ciphers<const N: usize>(key: &[u8], modes: [&str; N]) -> CkResult<[Cipher; N]> {
    let bits = match key.len() {
        16 => 128,
        24 => 192,
        32 => 256,
        _ => return Err(CKR_KEY_SIZE_RANGE),
    };
    let mut out = Vec::with_capacity(N);
    for mode in modes {
        out.push(Cipher::fetch(None, &format!("AES-{bits}-{mode}"), None).map_err(ossl)?);
    }
    out.try_into().map_err(|_| CKR_GENERAL_ERROR)
}

impl GcmKey {
    /// The GCM form of an AES key of 16, 24 or 32 bytes.
    pub fn new(key: &[u8]) -> CkResult<GcmKey> {
        let [gcm, ecb] = aes_ciphers(key, ["GCM", "ECB"])?;
        let mut k = GcmKey {
            key: Zeroizing::new(key.to_vec()),
            gcm,
            ecb,
            h: 0,
            h_inv2: 0,
            liv_h: 0,
            powers: gf::Powers::new(0),
        };
        let h = k.ecb(&[0])?[0];
        if h == 0 {
            return Err(CKR_FUNCTION_FAILED);
        }
        let inv = gf::inverse(h);
        k.h = h;
        k.h_inv2 = gf::mul(inv, inv);
        k.liv_h = gf::mul(gf::lengths(0, 16), h);
        k.powers = gf::Powers::new(h);
        Ok(k)
    }

    /// `AES_K` of each block (one OpenSSL ECB call).
    fn ecb(&self, blocks: &[u128]) -> CkResult<Vec<u128>> {
        let input: Zeroizing<Vec<u8>> =
            Zeroizing::new(blocks.iter().flat_map(|b| b.to_be_bytes()).collect());
        // OpenSSL's bound on an update's output is the input plus a block.
        let mut out = Zeroizing::new(vec![0u8; input.len() + 16]);
        let mut c = CipherCtx::new().map_err(ossl)?;
        c.encrypt_init(Some(&self.ecb), Some(&self.key), None)
            .map_err(ossl)?;
        c.set_padding(false);
        let n = c.cipher_update(&input, Some(&mut out)).map_err(ossl)?;
        if n != input.len() {
            return Err(CKR_FUNCTION_FAILED);
        }
        Ok(out[..n]
            .chunks_exact(16)
            .map(|b| block(b.try_into().expect("16 bytes")))
            .collect())
    }

    /// The pre-counter block of `iv`: `IV ‖ 0³¹1` for 12 bytes, else
    /// `GHASH_H(IV ‖ 0* ‖ [0]₆₄ ‖ [|IV|]₆₄)`.
    pub fn j0(&self, iv: &[u8]) -> u128 {
        if let Ok(iv12) = <[u8; 12]>::try_from(iv) {
            let mut b = [0u8; 16];
            b[..12].copy_from_slice(&iv12);
            b[15] = 1;
            return block(&b);
        }
        let y = gf::ghash(self.h, 0, iv);
        gf::mul(y ^ gf::lengths(0, iv.len() as u64), self.h)
    }

    /// The 16-byte IV for which OpenSSL's GCM uses the pre-counter block `z`.
    pub fn iv_for(&self, z: u128) -> [u8; 16] {
        gf::mul(z ^ self.liv_h, self.h_inv2).to_be_bytes()
    }

    /// A GCM context keyed and set to the pre-counter block `z`.
    pub(crate) fn ctx(&self, z: u128, encrypt: bool) -> CkResult<CipherCtx> {
        let mut c = CipherCtx::new().map_err(ossl)?;
        let iv = Zeroizing::new(self.iv_for(z));
        if encrypt {
            c.encrypt_init(Some(&self.gcm), Some(&self.key), None)
                .map_err(ossl)?;
            c.set_iv_length(16).map_err(ossl)?;
            c.encrypt_init(None, None, Some(&iv[..])).map_err(ossl)?;
        } else {
            c.decrypt_init(Some(&self.gcm), Some(&self.key), None)
                .map_err(ossl)?;
            c.set_iv_length(16).map_err(ossl)?;
            c.decrypt_init(None, None, Some(&iv[..])).map_err(ossl)?;
        }
        Ok(c)
    }
}

/// `inc32` applied `k` times: the low 32 bits step modulo 2³², the rest stays.
pub(crate) fn inc32(z: u128, k: u64) -> u128 {
    let low = (z as u32).wrapping_add(k as u32);
    (z & !u128::from(u32::MAX)) | u128::from(low)
}

/// Feeds `aad` to `c` in pieces OpenSSL takes.
fn feed_aad(c: &mut CipherCtx, aad: &[u8]) -> CkResult<()> {
    for piece in aad.chunks(PIECE) {
        c.cipher_update(piece, None).map_err(ossl)?;
    }
    Ok(())
}

/// Runs `input` through `c` into `out` (the same length), in pieces OpenSSL takes.
pub(crate) fn stream(c: &mut CipherCtx, input: &[u8], out: &mut [u8]) -> CkResult<()> {
    for (i, o) in input.chunks(PIECE).zip(out.chunks_mut(PIECE)) {
        if c.cipher_update(i, Some(o)).map_err(ossl)? != i.len() {
            return Err(CKR_FUNCTION_FAILED);
        }
    }
    Ok(())
}

/// The full 16-byte tag of a finished encryption context.
fn full_tag(c: &mut CipherCtx) -> CkResult<u128> {
    c.cipher_final(&mut []).map_err(ossl)?;
    let mut t = [0u8; 16];
    c.tag(&mut t).map_err(ossl)?;
    Ok(block(&t))
}

/// OpenSSL's GCM encryption of one part with pre-counter block `z`: `out` gets the
/// ciphertext; returns the full tag.
fn seal_part(k: &GcmKey, z: u128, aad: &[u8], input: &[u8], out: &mut [u8]) -> CkResult<u128> {
    let mut c = k.ctx(z, true)?;
    feed_aad(&mut c, aad)?;
    stream(&mut c, input, out)?;
    full_tag(&mut c)
}

/// The tag of an encryption of nothing with `data` as AAD, pre-counter block `z`:
/// `E(z) ⊕ GHASH_H(data ‖ [|data|]₆₄ ‖ [0]₆₄)`.
fn aad_tag(k: &GcmKey, z: u128, data: &[u8]) -> CkResult<u128> {
    let mut c = k.ctx(z, true)?;
    feed_aad(&mut c, data)?;
    full_tag(&mut c)
}

/// Bytes per piece when `n` bytes are cut into about `pieces` pieces: a multiple of 16, at
/// least 16 (`n` or more: one piece).
pub(crate) fn piece_size(n: usize, pieces: usize) -> usize {
    let pieces = pieces.clamp(1, n.div_ceil(16).max(1));
    n.div_ceil(pieces).next_multiple_of(16).max(16)
}

/// How long the caller spins for the pieces other threads are running once none is left to
/// take, before it sleeps until they end (a sleeping thread takes tens of µs to wake on a
/// virtual machine).
const SPIN: std::time::Duration = std::time::Duration::from_micros(200);

fn unpoison<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An input piece and its output, until a thread takes them.
type Piece<'a> = (&'a [u8], &'a mut [u8]);

/// Runs `f(i, input piece, output piece)` for every piece `i` of `input` and `out` (`size`
/// bytes each) and returns the results in order. The caller and up to `helpers` threads of
/// the pool take the pieces one at a time, in order, until none is left; so a helper that
/// starts late (or never, on a busy machine) leaves its share to the others instead of
/// holding the caller up. A piece that panics answers `CKR_DEVICE_ERROR` (the framework then
/// uses the next provider).
pub(crate) fn in_pieces<T: Send>(
    bulk: &Bulk,
    helpers: usize,
    size: usize,
    input: &[u8],
    out: &mut [u8],
    f: impl Fn(usize, &[u8], &mut [u8]) -> CkResult<T> + Sync,
) -> CkResult<Vec<T>> {
    let pool = bulk.pool()?;
    let pieces: Vec<Mutex<Option<Piece>>> = input
        .chunks(size)
        .zip(out.chunks_mut(size))
        .map(|p| Mutex::new(Some(p)))
        .collect();
    let n = pieces.len();
    let results: Vec<Mutex<Option<CkResult<T>>>> = (0..n).map(|_| Mutex::new(None)).collect();
    let (next, done) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let helped = AtomicUsize::new(0);
    let work = |helper: bool| loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(piece) = pieces.get(i) else {
            return;
        };
        if let Some((inp, o)) = unpoison(piece).take() {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(i, inp, o)));
            *unpoison(&results[i]) = Some(r.unwrap_or(Err(CKR_DEVICE_ERROR)));
        }
        if helper {
            helped.fetch_add(1, Ordering::Relaxed);
        }
        done.fetch_add(1, Ordering::Release);
    };
    pool.in_place_scope(|s| {
        for _ in 0..helpers.min(n.saturating_sub(1)) {
            s.spawn(|_| work(true));
        }
        work(false);
        let start = std::time::Instant::now();
        while done.load(Ordering::Acquire) < n && start.elapsed() < SPIN {
            for _ in 0..64 {
                std::hint::spin_loop();
            }
        }
    });
    if n > 1 {
        let counted = counters::get();
        counters::add(counted.bulk_operations, 1);
        counters::add(counted.bulk_pieces, n);
        counters::add(counted.bulk_pieces_helped, helped.load(Ordering::Relaxed));
    }
    results
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .unwrap_or(Err(CKR_DEVICE_ERROR))
        })
        .collect()
}

/// AES-GCM encryption of `input` into `out` (the same length) with pre-counter block `j0` and
/// AAD `aad`, in `t.pieces` pieces on up to `t.threads` threads; returns the full 16-byte
/// tag.
pub fn seal(
    t: &BulkTicket,
    k: &GcmKey,
    j0: u128,
    aad: &[u8],
    input: &[u8],
    out: &mut [u8],
) -> CkResult<u128> {
    let n = input.len();
    let size = piece_size(n, t.pieces);
    if size >= n {
        return seal_part(k, j0, aad, input, out);
    }
    let (s, ej0) = seal_pieces(t, k, j0, aad, size, input, out, 0)?;
    Ok(ej0 ^ s ^ gf::mul(gf::lengths(aad.len() as u64, n as u64), k.h))
}

/// Encrypts `input` into `out` (the same length) in pieces of `size` bytes (whole blocks,
/// except the last) on up to `t.threads` threads, the keystream from the pre-counter block
/// `first` and `aad` in the first piece, and folds each piece into the GHASH value `s` of the
/// parts before ([`fold`]). Returns the new value and `E(first)`.
#[allow(clippy::too_many_arguments)]
fn seal_pieces(
    t: &BulkTicket,
    k: &GcmKey,
    first: u128,
    aad: &[u8],
    size: usize,
    input: &[u8],
    out: &mut [u8],
    mut s: u128,
) -> CkResult<(u128, u128)> {
    let n = input.len();
    let z = |j: usize| inc32(first, (j * size / 16) as u64);
    let a = |j: usize| if j == 0 { aad } else { &[] };
    let tags = in_pieces(t.bulk, t.threads - 1, size, input, out, |j, i, o| {
        seal_part(k, z(j), a(j), i, o)
    })?;
    let e = k.ecb(&(0..tags.len()).map(z).collect::<Vec<_>>())?;
    for (j, (tag, ez)) in tags.into_iter().zip(&e).enumerate() {
        let clen = size.min(n - j * size) as u64;
        let u = part_value(k, tag, *ez, a(j).len() as u64, clen);
        s = fold(k, s, u, clen.div_ceil(16));
    }
    Ok((s, e[0]))
}

/// AES-GCM decryption of `input` (the ciphertext, without its tag) into `out` (the same
/// length) with pre-counter block `j0` and AAD `aad`, checking `tag` (4 to 16 bytes), in
/// `t.pieces` pieces on up to `t.threads` threads. A bad tag wipes `out` and answers
/// `CKR_ENCRYPTED_DATA_INVALID`.
pub fn open(
    t: &BulkTicket,
    k: &GcmKey,
    j0: u128,
    aad: &[u8],
    input: &[u8],
    tag: &[u8],
    out: &mut [u8],
) -> CkResult<()> {
    let n = input.len();
    let size = piece_size(n, t.pieces);
    let ok = if size >= n {
        let mut c = k.ctx(j0, false)?;
        feed_aad(&mut c, aad)?;
        stream(&mut c, input, out)?;
        c.set_tag(tag).map_err(ossl)?;
        c.cipher_final(&mut []).is_ok()
    } else {
        let z = |j: usize| inc32(j0, (j * size / 16) as u64);
        let hashes = in_pieces(t.bulk, t.threads - 1, size, input, out, |j, i, o| {
            // The AAD's share (in piece 0) and the piece's, as tags of encryptions of
            // nothing; then the piece is decrypted (this context's own tag check is never
            // run: the tag is checked over all pieces below).
            let ga = if j == 0 && !aad.is_empty() {
                aad_tag(k, j0, aad)?
            } else {
                0
            };
            let g = aad_tag(k, z(j), i)?;
            let mut c = k.ctx(z(j), false)?;
            stream(&mut c, i, o)?;
            Ok((ga, g))
        })?;
        let e = k.ecb(&(0..hashes.len()).map(z).collect::<Vec<_>>())?;
        let blocks = n.div_ceil(16) as u64;
        let mut s = gf::mul(gf::lengths(aad.len() as u64, n as u64), k.h);
        if !aad.is_empty() {
            let ua = hashes[0].0 ^ e[0] ^ gf::mul(gf::lengths(aad.len() as u64, 0), k.h);
            s ^= gf::mul(ua, k.powers.pow(blocks));
        }
        let mut after = blocks;
        for (j, ((_, g), ez)) in hashes.into_iter().zip(&e).enumerate() {
            let clen = size.min(n - j * size) as u64;
            after -= clen.div_ceil(16);
            let u = g ^ ez ^ gf::mul(gf::lengths(clen, 0), k.h);
            s ^= gf::mul(u, k.powers.pow(after));
        }
        let t = Zeroizing::new((e[0] ^ s).to_be_bytes());
        openssl::memcmp::eq(&t[..tag.len()], tag)
    };
    if ok {
        Ok(())
    } else {
        out.fill(0);
        Err(CKR_ENCRYPTED_DATA_INVALID)
    }
}

/// The bulk engine of one provider instance: its thread pool and the operations in flight,
/// which decide how many parts a new one gets.
pub struct Bulk {
    in_flight: AtomicUsize,
    cores: usize,
    /// One thread per core, started at the first operation that is split.
    pool: RwLock<Option<Arc<rayon_core::ThreadPool>>>,
    /// Pool threads that have ended (see [`Bulk::shutdown`]).
    exited: Arc<(Mutex<usize>, Condvar)>,
}

/// A bulk operation counted in flight until dropped.
pub struct BulkTicket<'a> {
    bulk: &'a Bulk,
    /// Threads it runs on (the caller's included).
    pub threads: usize,
    /// Pieces its data is cut into.
    pub pieces: usize,
}

impl Drop for BulkTicket<'_> {
    fn drop(&mut self) {
        self.bulk.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Default for Bulk {
    fn default() -> Self {
        Bulk {
            in_flight: AtomicUsize::new(0),
            cores: Scheduler::cores(),
            pool: RwLock::new(None),
            exited: Arc::default(),
        }
    }
}

impl Bulk {
    /// Admits an operation on `n` bytes: it runs on the cores not taken by other bulk
    /// operations of this provider (at least one), no piece below [`MIN_PART`] (fewer threads
    /// when there are fewer pieces), up to [`PIECES_PER_THREAD`] pieces per thread of at
    /// least [`BALANCE_PIECE`].
    /// `$OPENCF_ACCEL_BULK_PARTS=N` forces `N` pieces on every core (tests).
    pub fn admit(&self, n: usize) -> BulkTicket<'_> {
        let others = self.in_flight.fetch_add(1, Ordering::Relaxed);
        let forced = std::env::var("OPENCF_ACCEL_BULK_PARTS")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|p| *p > 0);
        let (threads, pieces) = match forced {
            Some(p) => (self.cores, p),
            None => {
                let most = (n / MIN_PART).max(1);
                let threads = self.cores.saturating_sub(others).clamp(1, most);
                let pieces = (n / BALANCE_PIECE).clamp(threads, threads * PIECES_PER_THREAD);
                (threads, pieces)
            }
        };
        BulkTicket {
            bulk: self,
            threads,
            pieces,
        }
    }

    /// The thread pool, started on first use (`CKR_HOST_MEMORY` if its threads cannot start:
    /// the framework then uses the next provider).
    fn pool(&self) -> CkResult<Arc<rayon_core::ThreadPool>> {
        if let Some(p) = &*self.pool.read().unwrap_or_else(|e| e.into_inner()) {
            return Ok(p.clone());
        }
        let mut slot = self.pool.write().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = &*slot {
            return Ok(p.clone());
        }
        let exited = self.exited.clone();
        let pool = rayon_core::ThreadPoolBuilder::new()
            .num_threads(self.cores)
            .thread_name(|i| format!("opencf-accel-bulk-{i}"))
            .exit_handler(move |_| {
                let (n, cv) = &*exited;
                *n.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                cv.notify_all();
            })
            .build()
            .map_err(|_| CKR_HOST_MEMORY)?;
        let pool = Arc::new(pool);
        *slot = Some(pool.clone());
        Ok(pool)
    }

    /// Stops the pool's threads and waits (up to a second) until they have ended
    /// (`C_Finalize`: the library may be unloaded next).
    pub fn shutdown(&self) {
        let Some(pool) = self.pool.write().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        let threads = pool.current_num_threads();
        // Operations still running hold their own reference; the threads end after the last.
        drop(pool);
        let (n, cv) = &*self.exited;
        let done = n.lock().unwrap_or_else(|e| e.into_inner());
        let _ = cv.wait_timeout_while(done, std::time::Duration::from_secs(1), |n| *n < threads);
    }
}

/// An active `C_Encrypt*` or `C_Decrypt*` operation with `CKM_AES_GCM`. Single-part calls
/// run on the bulk engine. Multi-part encryption runs in stretches of one OpenSSL context in
/// the caller's thread, and updates large enough to split run in pieces on the bulk engine
/// between them, all folded into one GHASH value ([`GcmOp::update`]); multi-part decryption
/// collects the input and runs it on the bulk engine at `C_DecryptFinal`, releasing nothing
/// before the tag has verified (as the software token does).
pub struct GcmOp {
    key: Arc<GcmKey>,
    j0: u128,
    aad: Vec<u8>,
    tag_len: usize,
    encrypt: bool,
    /// Multi-part encryption: the stretch running in one OpenSSL context, if any.
    stretch: Option<Stretch>,
    /// Multi-part encryption: the stretches ended so far, folded ([`fold`]).
    folded: u128,
    /// Multi-part encryption: ciphertext bytes so far.
    done: u64,
    /// Multi-part encryption: the AAD has gone into a stretch or a piece.
    aad_fed: bool,
    buffered: Zeroizing<Vec<u8>>,
    started: bool,
}

/// A run of a multi-part encryption in one OpenSSL GCM context: it starts at a block
/// boundary, with the pre-counter block `z`, and holds the AAD if it is the first.
struct Stretch {
    ctx: CipherCtx,
    z: u128,
    aad_len: u64,
    len: u64,
}

impl Drop for GcmOp {
    fn drop(&mut self) {
        self.j0.zeroize();
        self.folded.zeroize();
    }
}

/// Appends a part to the GHASH value of the parts before it (Horner's rule): `s·H^b ⊕ u`,
/// where `b` is the part's number of ciphertext blocks and `u = GHASH_H(Aⱼ ‖ Cⱼ)·H` its own
/// value. After the last part, `s ⊕ L·H` is the message's GHASH and `E(J0) ⊕` it the tag.
fn fold(k: &GcmKey, s: u128, u: u128, blocks: u64) -> u128 {
    gf::mul(s, k.powers.pow(blocks)) ^ u
}

/// `u = GHASH_H(Aⱼ ‖ Cⱼ)·H` of a part from OpenSSL's full tag of it and `E(Zⱼ)`.
fn part_value(k: &GcmKey, tag: u128, ez: u128, aad_len: u64, clen: u64) -> u128 {
    tag ^ ez ^ gf::mul(gf::lengths(aad_len, clen), k.h)
}

impl GcmOp {
    /// `C_EncryptInit` / `C_DecryptInit`: the `CK_GCM_PARAMS` are checked as the software
    /// token checks them (IV of 1 to 64 KiB, `ulIvBits` ignored, tag of 32 to 128 bits).
    pub fn new(m: &Mechanism, key: Arc<GcmKey>, encrypt: bool) -> CkResult<GcmOp> {
        let MechParam::Gcm {
            iv, aad, tag_bits, ..
        } = &m.param
        else {
            return Err(CKR_MECHANISM_PARAM_INVALID);
        };
        gcm_iv_ok(iv)?;
        let tag_len = gcm_tag_len(*tag_bits)?;
        Ok(GcmOp {
            j0: key.j0(iv),
            key,
            aad: aad.clone(),
            tag_len,
            encrypt,
            stretch: None,
            folded: 0,
            done: 0,
            aad_fed: false,
            buffered: Zeroizing::new(Vec::new()),
            started: false,
        })
    }

    /// Whether this is an encryption.
    pub fn encrypts(&self) -> bool {
        self.encrypt
    }

    /// `C_Encrypt` / `C_Decrypt` (input: plaintext, or ciphertext then tag).
    pub fn one_shot(&mut self, bulk: &Bulk, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if self.started {
            return Err(CKR_OPERATION_ACTIVE);
        }
        self.run(bulk, input, out)
    }

    fn run(&self, bulk: &Bulk, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        let n = input.len();
        if self.encrypt {
            if n as u64 > MAX_DATA {
                return Err(CKR_DATA_LEN_RANGE);
            }
            let Some(buf) = out.reserve(n + self.tag_len)? else {
                return Ok(());
            };
            let (ct, tag) = buf.split_at_mut(n);
            let ticket = bulk.admit(n);
            let t = Zeroizing::new(
                seal(&ticket, &self.key, self.j0, &self.aad, input, ct)?.to_be_bytes(),
            );
            tag.copy_from_slice(&t[..self.tag_len]);
            Ok(())
        } else {
            let Some(body) = n.checked_sub(self.tag_len) else {
                return Err(CKR_ENCRYPTED_DATA_LEN_RANGE);
            };
            if body as u64 > MAX_DATA {
                return Err(CKR_ENCRYPTED_DATA_LEN_RANGE);
            }
            let Some(buf) = out.reserve(body)? else {
                return Ok(());
            };
            let ticket = bulk.admit(body);
            let (ct, tag) = input.split_at(body);
            open(&ticket, &self.key, self.j0, &self.aad, ct, tag, buf)
        }
    }

    /// `C_EncryptUpdate` / `C_DecryptUpdate`.
    pub fn update(&mut self, bulk: &Bulk, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if self.encrypt {
            if self.done + input.len() as u64 > MAX_DATA {
                return Err(CKR_DATA_LEN_RANGE);
            }
            let Some(buf) = out.reserve(input.len())? else {
                return Ok(());
            };
            self.encrypt_part(bulk, input, buf)?;
        } else if out.reserve(0)?.is_some() {
            // Nothing is released before the tag verifies.
            self.buffered
                .try_reserve(input.len())
                .map_err(|_| CKR_HOST_MEMORY)?;
            self.buffered.extend_from_slice(input);
        } else {
            return Ok(());
        }
        self.started = true;
        Ok(())
    }

    /// One update of a multi-part encryption. A short one goes on in the running stretch (one
    /// OpenSSL context, in the caller's thread). One the bulk engine would split is cut into
    /// pieces as a single-part encryption is: the stretch first takes the bytes up to the
    /// next block boundary and ends, the whole blocks run in pieces on several cores, and
    /// what is left of the last block starts the next stretch. Each stretch and piece is
    /// folded into the GHASH value when it ends, so the tag covers the whole message.
    fn encrypt_part(&mut self, bulk: &Bulk, input: &[u8], out: &mut [u8]) -> CkResult<()> {
        let n = input.len();
        let ticket = bulk.admit(n);
        let size = piece_size(n, ticket.pieces);
        if size >= n {
            return self.stretch_feed(input, out);
        }
        // Bytes up to the next block boundary, where the running stretch can end.
        let head = (16 - (self.done % 16) as usize) % 16;
        if head >= n {
            return self.stretch_feed(input, out);
        }
        self.stretch_feed(&input[..head], &mut out[..head])?;
        self.stretch_end()?;
        let whole = (n - head) / 16 * 16;
        let (i, tail_in) = input[head..].split_at(whole);
        let (o, tail_out) = out[head..].split_at_mut(whole);
        if whole > 0 {
            let first = inc32(self.j0, self.done / 16);
            let size = piece_size(whole, ticket.pieces);
            let (k, aad) = (&*self.key, self.aad_left());
            (self.folded, _) = seal_pieces(&ticket, k, first, aad, size, i, o, self.folded)?;
            self.aad_fed = true;
            self.done += whole as u64;
        }
        self.stretch_feed(tail_in, tail_out)
    }

    /// The AAD if it has not gone into a stretch or a piece yet, else nothing.
    fn aad_left(&self) -> &[u8] {
        if self.aad_fed {
            &[]
        } else {
            &self.aad
        }
    }

    /// Runs `input` through the running stretch, starting one (at the next block, with the
    /// AAD if none has gone out yet) if there is none.
    fn stretch_feed(&mut self, input: &[u8], out: &mut [u8]) -> CkResult<()> {
        if self.stretch.is_none() {
            if input.is_empty() {
                return Ok(());
            }
            self.stretch_start()?;
        }
        let st = self.stretch.as_mut().expect("started above");
        stream(&mut st.ctx, input, out)?;
        st.len += input.len() as u64;
        self.done += input.len() as u64;
        Ok(())
    }

    /// Starts a stretch at the current block (the caller keeps `done` at a block boundary
    /// whenever no stretch runs).
    fn stretch_start(&mut self) -> CkResult<()> {
        let z = inc32(self.j0, self.done / 16);
        let mut ctx = self.key.ctx(z, true)?;
        let aad = self.aad_left();
        feed_aad(&mut ctx, aad)?;
        self.stretch = Some(Stretch {
            ctx,
            z,
            aad_len: aad.len() as u64,
            len: 0,
        });
        self.aad_fed = true;
        Ok(())
    }

    /// Ends the running stretch, if any, and folds it in.
    fn stretch_end(&mut self) -> CkResult<()> {
        let Some(mut st) = self.stretch.take() else {
            return Ok(());
        };
        let tag = full_tag(&mut st.ctx)?;
        let ez = self.key.ecb(&[st.z])?[0];
        let u = part_value(&self.key, tag, ez, st.aad_len, st.len);
        self.folded = fold(&self.key, self.folded, u, st.len.div_ceil(16));
        Ok(())
    }

    /// `C_EncryptFinal` / `C_DecryptFinal`.
    pub fn finalize(&mut self, bulk: &Bulk, out: &mut OutBuf) -> CkResult<()> {
        if self.encrypt {
            let tag_len = self.tag_len;
            let Some(buf) = out.reserve(tag_len)? else {
                return Ok(());
            };
            if !self.aad_fed {
                // No data: the tag covers the AAD alone.
                self.stretch_start()?;
            }
            if let Some(st) = self.stretch.as_mut().filter(|st| st.z == self.j0) {
                // One stretch from the first block: the whole message, whose tag OpenSSL has.
                let t = Zeroizing::new(full_tag(&mut st.ctx)?.to_be_bytes());
                self.stretch = None;
                buf.copy_from_slice(&t[..tag_len]);
                return Ok(());
            }
            self.stretch_end()?;
            let k = &*self.key;
            let l = gf::mul(gf::lengths(self.aad.len() as u64, self.done), k.h);
            let t = Zeroizing::new((k.ecb(&[self.j0])?[0] ^ self.folded ^ l).to_be_bytes());
            buf.copy_from_slice(&t[..tag_len]);
            Ok(())
        } else {
            let data = std::mem::take(&mut self.buffered);
            let r = self.run(bulk, &data, out);
            if out.is_query() || r == Err(CKR_BUFFER_TOO_SMALL) {
                // The caller asks again: keep the input.
                self.buffered = data;
            }
            r
        }
    }
}
