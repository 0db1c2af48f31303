//! AES-CTR and AES-ECB on the bulk engine: one large operation cut into pieces that run on
//! several cores, each piece by OpenSSL's own AES-CTR or AES-ECB (no AES here).
//!
//! * **CTR.** Byte `p` of the stream is encrypted with the counter block `cb + ⌊p/16⌋` (the
//!   caller's `CK_AES_CTR_PARAMS.cb`) at offset `p mod 16` of its keystream block. A piece
//!   that starts at byte `p` runs in a fresh OpenSSL context that starts its keystream at that
//!   counter block, after `p mod 16` bytes of keystream are thrown away; pieces are whole
//!   blocks long, so within one call they all share that offset. The counter is the low
//!   `ulCounterBits` bits of the block; as in the software token, a call that would need more
//!   blocks than are left before those bits wrap answers `CKR_DATA_LEN_RANGE`
//!   (`CKR_ENCRYPTED_DATA_LEN_RANGE` when decrypting) and nothing is processed. So the low
//!   bits never wrap inside an operation, `cb + k` never carries out of them, and the
//!   128-bit addition here is the counter OpenSSL steps to (it carries through all 128 bits).
//! * **CTR through the GCM kernel.** GCM encryption is CTR encryption with the counter blocks
//!   `inc32^i(J0)`, and OpenSSL's fused AES-GCM kernel (VAES) runs about twice as fast per
//!   core as its AES-CTR. Once the key has a GCM form ([`GcmKey`]), a piece therefore runs as
//!   an OpenSSL GCM encryption whose pre-counter block is the block before its first counter
//!   block (reached through the derived IV, as in [`crate::gcm`]); its tag is never computed.
//!   `inc32` steps only the low 32 bits, so a piece is run in stretches that end where those
//!   bits wrap, each restarted at the counter block the 128-bit addition gives. The form costs
//!   an inversion in GF(2¹²⁸) (tens of µs), which pays for itself after about a megabyte, so a
//!   key gets it once it has run [`GCM_FORM_AFTER`] bytes of CTR through OpenSSL's AES-CTR: a
//!   key used once for a short message costs what it cost before. A key whose `H` is zero
//!   stays on OpenSSL's AES-CTR.
//! * **ECB.** Blocks are independent: pieces of whole blocks. Single-part input must be a
//!   multiple of 16 bytes; multi-part calls keep the remainder (less than a block) for the
//!   next call and `C_*Final` refuses a remainder, with the software token's codes.
//!
//! The pieces, threads and admission are the bulk engine's ([`crate::gcm::Bulk`]): below
//! 256 KiB an operation is one OpenSSL call in the caller's thread. Every call, multi-part
//! ones included, is split by its own length (a large `C_EncryptUpdate` runs on several
//! cores too). Answers for lengths, parameters and calls out of order follow the software
//! token's (`crates/opencf-softtoken/src/mech/sym.rs`), so that an application sees the same
//! whichever provider runs the operation.

use crate::gcm::{aes_ciphers, in_pieces, inc32, ossl, piece_size, stream, Bulk, GcmKey, GcmOp};
use crate::mech::no_param;
use opencf_abi::sys::*;
use opencf_abi::{CkResult, Mechanism, OutBuf};
use openssl::cipher::Cipher;
use openssl::cipher_ctx::CipherCtx;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use zeroize::Zeroizing;

/// Bytes of AES-CTR a key runs through OpenSSL's AES-CTR before it gets its GCM form (and its
/// keystream the GCM kernel): about where the form's cost is paid back.
/// `$OPENCF_ACCEL_CTR_GCM_AFTER=N` (read at each call) sets another value, for tests.
pub const GCM_FORM_AFTER: u64 = 1 << 20;

/// An AES key with its CTR and ECB ciphers, built once per key object.
pub struct AesKey {
    key: Zeroizing<Vec<u8>>,
    ctr: Cipher,
    ecb: Cipher,
    /// The GCM form for CTR's keystream, built once the key has run [`GCM_FORM_AFTER`] bytes
    /// of CTR (`None`: the key's `H` is zero).
    gcm: OnceLock<Option<GcmKey>>,
    /// Bytes of CTR run so far without the GCM form.
    ctr_bytes: AtomicU64,
}

impl AesKey {
    /// The form of an AES key of 16, 24 or 32 bytes (`CKR_KEY_SIZE_RANGE` otherwise).
    pub fn new(key: &[u8]) -> CkResult<AesKey> {
        let [ctr, ecb] = aes_ciphers(key, ["CTR", "ECB"])?;
        Ok(AesKey {
            key: Zeroizing::new(key.to_vec()),
            ctr,
            ecb,
            gcm: OnceLock::new(),
            ctr_bytes: AtomicU64::new(0),
        })
    }

    /// The GCM form for a CTR call of `n` bytes: the one built, or a new one when the key has
    /// already run [`GCM_FORM_AFTER`] bytes of CTR (`None` before, and for a key whose `H` is
    /// zero).
    fn ctr_gcm(&self, n: usize) -> Option<&GcmKey> {
        if let Some(g) = self.gcm.get() {
            return g.as_ref();
        }
        let after = std::env::var("OPENCF_ACCEL_CTR_GCM_AFTER")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(GCM_FORM_AFTER);
        if self.ctr_bytes.fetch_add(n as u64, Ordering::Relaxed) < after {
            return None;
        }
        self.gcm
            .get_or_init(|| GcmKey::new(&self.key).ok())
            .as_ref()
    }
}

/// The length error of a direction, as the software token answers it.
fn len_err(encrypt: bool) -> CK_RV {
    if encrypt {
        CKR_DATA_LEN_RANGE
    } else {
        CKR_ENCRYPTED_DATA_LEN_RANGE
    }
}

/// Runs `f(offset, input piece, output piece)` over `input` and `out` (the same length), cut
/// into pieces of whole blocks as the bulk engine admits `input.len()` bytes: one piece runs
/// in the caller's thread, more run on the pool.
fn split(
    bulk: &Bulk,
    input: &[u8],
    out: &mut [u8],
    f: impl Fn(usize, &[u8], &mut [u8]) -> CkResult<()> + Sync,
) -> CkResult<()> {
    let n = input.len();
    let t = bulk.admit(n);
    let size = piece_size(n, t.pieces);
    if size >= n {
        return f(0, input, out);
    }
    in_pieces(bulk, t.threads - 1, size, input, out, |j, i, o| {
        f(j * size, i, o)
    })?;
    Ok(())
}

// ----- CTR -----------------------------------------------------------------------------------

/// The most counter blocks one GCM context runs (OpenSSL's GCM takes at most `2^36 − 32`
/// bytes per message).
const GCM_STRETCH: u64 = 1 << 31;

/// The keystream of one piece XORed into `input`: counter blocks from `counter` on, the first
/// `skip` bytes of keystream (less than a block) thrown away. Runs through the GCM kernel
/// where `gcm` is given, else through OpenSSL's AES-CTR.
fn ctr_piece(
    k: &AesKey,
    gcm: Option<&GcmKey>,
    mut counter: u128,
    mut skip: usize,
    mut input: &[u8],
    mut out: &mut [u8],
) -> CkResult<()> {
    let Some(g) = gcm else {
        if input.is_empty() {
            return Ok(());
        }
        let mut c = CipherCtx::new().map_err(ossl)?;
        c.encrypt_init(Some(&k.ctr), Some(&k.key), Some(&counter.to_be_bytes()))
            .map_err(ossl)?;
        return keystream(c, skip, input, out);
    };
    while !input.is_empty() {
        // Counter blocks left before the low 32 bits wrap (inc32 does not carry).
        let blocks = ((1u64 << 32) - u64::from(counter as u32)).min(GCM_STRETCH);
        let room = usize::try_from(blocks * 16).unwrap_or(usize::MAX) - skip;
        let take = room.min(input.len());
        let (i, rest_in) = input.split_at(take);
        let (o, rest_out) = std::mem::take(&mut out).split_at_mut(take);
        // A GCM encryption's first counter block is inc32 of its pre-counter block.
        let z = inc32(counter, u64::from(u32::MAX));
        keystream(g.ctx(z, true)?, skip, i, o)?;
        (input, out) = (rest_in, rest_out);
        counter = counter.wrapping_add(u128::from(blocks));
        skip = 0;
    }
    Ok(())
}

/// Runs `input` through the keystream context `c` into `out`, after stepping it `skip` bytes
/// (less than a block) on.
fn keystream(mut c: CipherCtx, skip: usize, input: &[u8], out: &mut [u8]) -> CkResult<()> {
    if skip > 0 {
        let mut waste = Zeroizing::new([0u8; 16]);
        c.cipher_update(&[0u8; 16][..skip], Some(&mut waste[..skip]))
            .map_err(ossl)?;
    }
    stream(&mut c, input, out)
}

/// An active `C_Encrypt*` or `C_Decrypt*` operation with `CKM_AES_CTR` (both directions are
/// the same keystream).
pub struct CtrOp {
    key: Arc<AesKey>,
    encrypt: bool,
    /// The caller's counter block.
    cb: u128,
    /// Bytes processed so far.
    done: u128,
    /// Bytes that may still be processed before the counter would wrap.
    left: u128,
    /// An update has run: a single-part call may no longer follow.
    started: bool,
}

impl CtrOp {
    /// `C_EncryptInit` / `C_DecryptInit`.
    pub fn new(m: &Mechanism, key: Arc<AesKey>, encrypt: bool) -> CkResult<CtrOp> {
        // The software token's rule for `ulCounterBits` and the wrap; a missing or short
        // parameter is refused by the ABI layer.
        let (cb, left) = opencf_abi::aes_ctr_params(m)?;
        Ok(CtrOp {
            key,
            encrypt,
            cb: u128::from_be_bytes(*cb),
            done: 0,
            left,
            started: false,
        })
    }

    /// `C_Encrypt` / `C_Decrypt`: not after an update (PKCS#11 3.2 §5.9: "must be called
    /// after C_EncryptInit without intervening C_EncryptUpdate calls"), as in the software
    /// token and for every other mode.
    pub fn one_shot(&mut self, bulk: &Bulk, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if self.started {
            return Err(CKR_OPERATION_ACTIVE);
        }
        self.update(bulk, input, out)
    }

    /// `C_EncryptUpdate` / `C_DecryptUpdate`.
    pub fn update(&mut self, bulk: &Bulk, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        let n = input.len() as u128;
        if n > self.left {
            return Err(len_err(self.encrypt));
        }
        let Some(buf) = out.reserve(input.len())? else {
            return Ok(());
        };
        self.started = true;
        let k = &*self.key;
        let g = k.ctr_gcm(input.len());
        let (start, skip) = (self.done / 16, (self.done % 16) as usize);
        split(bulk, input, buf, |at, i, o| {
            let counter = self.cb.wrapping_add(start + (at / 16) as u128);
            ctr_piece(k, g, counter, skip, i, o)
        })?;
        self.done += n;
        self.left -= n;
        Ok(())
    }
}

// ----- ECB -----------------------------------------------------------------------------------

/// OpenSSL's AES-ECB of whole blocks (the last through a scratch block: the `openssl` crate
/// wants a block of room beyond the input).
fn ecb_piece(k: &AesKey, encrypt: bool, input: &[u8], out: &mut [u8]) -> CkResult<()> {
    let n = input.len();
    if n == 0 {
        return Ok(());
    }
    if !n.is_multiple_of(16) || out.len() != n {
        return Err(CKR_GENERAL_ERROR);
    }
    let mut c = CipherCtx::new().map_err(ossl)?;
    if encrypt {
        c.encrypt_init(Some(&k.ecb), Some(&k.key), None)
    } else {
        c.decrypt_init(Some(&k.ecb), Some(&k.key), None)
    }
    .map_err(ossl)?;
    c.set_padding(false);
    let head = n - 16;
    let mut at = 0;
    while at < head {
        // OpenSSL's lengths are `int`: at most 1 GiB per call.
        let end = head.min(at + (1 << 30));
        if c.cipher_update(&input[at..end], Some(&mut out[at..]))
            .map_err(ossl)?
            != end - at
        {
            return Err(CKR_FUNCTION_FAILED);
        }
        at = end;
    }
    let mut last = Zeroizing::new([0u8; 32]);
    if c.cipher_update(&input[head..], Some(&mut last[..]))
        .map_err(ossl)?
        != 16
    {
        return Err(CKR_FUNCTION_FAILED);
    }
    out[head..].copy_from_slice(&last[..16]);
    Ok(())
}

/// An active `C_Encrypt*` or `C_Decrypt*` operation with `CKM_AES_ECB`.
pub struct EcbOp {
    key: Arc<AesKey>,
    encrypt: bool,
    /// Input not yet processed (less than a block).
    partial: Zeroizing<Vec<u8>>,
    started: bool,
}

impl EcbOp {
    /// `C_EncryptInit` / `C_DecryptInit`: no parameter (`CKR_MECHANISM_PARAM_INVALID`).
    pub fn new(m: &Mechanism, key: Arc<AesKey>, encrypt: bool) -> CkResult<EcbOp> {
        no_param(m)?;
        Ok(EcbOp {
            key,
            encrypt,
            partial: Zeroizing::new(Vec::with_capacity(16)),
            started: false,
        })
    }

    /// The blocks of `input` on the bulk engine.
    fn blocks(&self, bulk: &Bulk, input: &[u8], out: &mut [u8]) -> CkResult<()> {
        let (k, e) = (&*self.key, self.encrypt);
        split(bulk, input, out, |_, i, o| ecb_piece(k, e, i, o))
    }

    /// `C_Encrypt` / `C_Decrypt`: a multiple of 16 bytes, not after an update.
    pub fn one_shot(&mut self, bulk: &Bulk, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if self.started {
            return Err(CKR_OPERATION_ACTIVE);
        }
        if !input.len().is_multiple_of(16) {
            return Err(len_err(self.encrypt));
        }
        match out.reserve(input.len())? {
            Some(buf) => self.blocks(bulk, input, buf),
            None => Ok(()),
        }
    }

    /// `C_EncryptUpdate` / `C_DecryptUpdate`: every whole block so far; the rest is kept.
    pub fn update(&mut self, bulk: &Bulk, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        let have = self.partial.len();
        let avail = have.checked_add(input.len()).ok_or(len_err(self.encrypt))?;
        let total = avail - avail % 16;
        let Some(buf) = out.reserve(total)? else {
            return Ok(());
        };
        self.started = true;
        if total == 0 {
            self.partial.extend_from_slice(input);
            return Ok(());
        }
        let mut rest = input;
        let mut o = 0;
        if have > 0 {
            let mut first = Zeroizing::new([0u8; 16]);
            first[..have].copy_from_slice(&self.partial);
            first[have..].copy_from_slice(&rest[..16 - have]);
            ecb_piece(&self.key, self.encrypt, &first[..], &mut buf[..16])?;
            rest = &rest[16 - have..];
            self.partial.clear();
            o = 16;
        }
        let whole = total - o;
        self.blocks(bulk, &rest[..whole], &mut buf[o..])?;
        self.partial.extend_from_slice(&rest[whole..]);
        Ok(())
    }

    /// `C_EncryptFinal` / `C_DecryptFinal`: nothing more, and no remainder.
    pub fn finalize(&mut self, out: &mut OutBuf) -> CkResult<()> {
        if !self.partial.is_empty() {
            return Err(len_err(self.encrypt));
        }
        out.reserve(0)?;
        Ok(())
    }
}

// ----- The operations of the bulk engine -----------------------------------------------------

/// An active `C_Encrypt*` or `C_Decrypt*` operation on the bulk engine.
pub enum BulkOp {
    /// `CKM_AES_GCM`.
    Gcm(GcmOp),
    /// `CKM_AES_CTR`.
    Ctr(CtrOp),
    /// `CKM_AES_ECB`.
    Ecb(EcbOp),
}

impl BulkOp {
    /// Whether this is an encryption.
    pub fn encrypts(&self) -> bool {
        match self {
            BulkOp::Gcm(op) => op.encrypts(),
            BulkOp::Ctr(op) => op.encrypt,
            BulkOp::Ecb(op) => op.encrypt,
        }
    }

    /// `C_Encrypt` / `C_Decrypt`.
    pub fn one_shot(&mut self, bulk: &Bulk, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        match self {
            BulkOp::Gcm(op) => op.one_shot(bulk, input, out),
            BulkOp::Ctr(op) => op.one_shot(bulk, input, out),
            BulkOp::Ecb(op) => op.one_shot(bulk, input, out),
        }
    }

    /// `C_EncryptUpdate` / `C_DecryptUpdate`.
    pub fn update(&mut self, bulk: &Bulk, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        match self {
            BulkOp::Gcm(op) => op.update(bulk, input, out),
            BulkOp::Ctr(op) => op.update(bulk, input, out),
            BulkOp::Ecb(op) => op.update(bulk, input, out),
        }
    }

    /// `C_EncryptFinal` / `C_DecryptFinal`.
    pub fn finalize(&mut self, bulk: &Bulk, out: &mut OutBuf) -> CkResult<()> {
        match self {
            BulkOp::Gcm(op) => op.finalize(bulk, out),
            BulkOp::Ctr(_) => out.reserve(0).map(|_| ()),
            BulkOp::Ecb(op) => op.finalize(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opencf_abi::MechParam;

    fn key() -> Arc<AesKey> {
        Arc::new(AesKey::new(&[7u8; 16]).unwrap())
    }

    /// The key of [`key`] with its GCM form already built, or with none ever built.
    fn key_with(gcm: bool) -> Arc<AesKey> {
        let k = AesKey::new(&[7u8; 16]).unwrap();
        let form = gcm.then(|| GcmKey::new(&[7u8; 16]).unwrap());
        assert!(k.gcm.set(form).is_ok());
        Arc::new(k)
    }

    fn ctr(cb: [u8; 16]) -> Mechanism {
        Mechanism {
            mechanism: CKM_AES_CTR,
            param: MechParam::AesCtr {
                counter_bits: 128,
                cb,
            },
        }
    }

    /// OpenSSL's AES-CTR of `data` from counter block `cb`.
    fn reference(cb: &[u8; 16], data: &[u8]) -> Vec<u8> {
        let mut c = openssl::symm::Crypter::new(
            openssl::symm::Cipher::aes_128_ctr(),
            openssl::symm::Mode::Encrypt,
            &[7u8; 16],
            Some(cb),
        )
        .unwrap();
        let mut out = vec![0u8; data.len() + 16];
        let n = c.update(data, &mut out).unwrap();
        out.truncate(n);
        out
    }

    /// A single-part call after updates is refused, in AES-CTR as in AES-ECB (as in the
    /// software token); a size query is no update.
    #[test]
    fn one_shot_after_update() {
        let bulk = Bulk::default();
        let cb = [0xab; 16];
        let data: Vec<u8> = (0..100u8).collect();
        let mut op = BulkOp::Ctr(CtrOp::new(&ctr(cb), key(), true).unwrap());
        let mut got = vec![0u8; 100];
        op.update(&bulk, &data[..37], &mut OutBuf::new(None))
            .unwrap();
        op.one_shot(&bulk, &data, &mut OutBuf::new(Some(&mut got)))
            .unwrap();
        assert_eq!(got, reference(&cb, &data));
        let mut op = BulkOp::Ctr(CtrOp::new(&ctr(cb), key(), true).unwrap());
        let (a, b) = got.split_at_mut(37);
        op.update(&bulk, &data[..37], &mut OutBuf::new(Some(a)))
            .unwrap();
        let r = op.one_shot(&bulk, &data[37..], &mut OutBuf::new(Some(b)));
        assert_eq!(r, Err(CKR_OPERATION_ACTIVE));

        let ecb = Mechanism {
            mechanism: CKM_AES_ECB,
            param: MechParam::None,
        };
        let mut op = BulkOp::Ecb(EcbOp::new(&ecb, key(), true).unwrap());
        let mut out = [0u8; 32];
        op.update(&bulk, &[1; 5], &mut OutBuf::new(Some(&mut out)))
            .unwrap();
        let r = op.one_shot(&bulk, &[1; 16], &mut OutBuf::new(Some(&mut out)));
        assert_eq!(r, Err(CKR_OPERATION_ACTIVE));
    }

    /// A size query and a short buffer change nothing: the next call gets the same bytes.
    #[test]
    fn queries_keep_the_state() {
        let bulk = Bulk::default();
        let cb = [0xff; 16];
        let mut op = CtrOp::new(&ctr(cb), key(), false).unwrap();
        let mut q = OutBuf::new(None);
        op.update(&bulk, &[0; 10], &mut q).unwrap();
        assert_eq!(q.len(), 10);
        let mut small = [0u8; 9];
        let r = op.update(&bulk, &[0; 10], &mut OutBuf::new(Some(&mut small)));
        assert_eq!(r, Err(CKR_BUFFER_TOO_SMALL));
        let mut out = [0u8; 10];
        op.update(&bulk, &[0; 10], &mut OutBuf::new(Some(&mut out)))
            .unwrap();
        assert_eq!(out.to_vec(), reference(&cb, &[0; 10]));
        // 6 bytes are left before the 128-bit counter wraps.
        let r = op.update(&bulk, &[0; 7], &mut OutBuf::new(None));
        assert_eq!(r, Err(CKR_ENCRYPTED_DATA_LEN_RANGE));
    }

    /// The GCM kernel's keystream equals OpenSSL's AES-CTR: counter blocks whose low 32 bits
    /// wrap inside a piece, between pieces and right at a call's start, calls that start
    /// mid-block, inputs large enough to be split across cores, and a key without the GCM
    /// form (OpenSSL's AES-CTR) alike.
    #[test]
    fn gcm_kernel_keystream_is_ctr() {
        let bulk = Bulk::default();
        let data: Vec<u8> = (0..(700 << 10) + 5).map(|i| (i * 31 % 251) as u8).collect();
        let starts: [u128; 5] = [
            0,
            0x0011_2233_4455_6677_8899_aabb_ffff_fff0,
            0x0011_2233_4455_6677_8899_aabb_ffff_ffff,
            0x0011_2233_4455_6677_ffff_ffff_ffff_0000,
            0x0011_2233_4455_6677_8899_aabc_0000_0000,
        ];
        for cb in starts.map(u128::to_be_bytes) {
            let want = reference(&cb, &data);
            for gcm in [true, false] {
                // One call, then the same stream in calls of uneven lengths.
                for cuts in [&[][..], &[1, 15, 16, 33, 300 << 10, 17][..]] {
                    let mut op = CtrOp::new(&ctr(cb), key_with(gcm), true).unwrap();
                    let mut got = vec![0u8; data.len()];
                    let mut at: usize = 0;
                    for &n in cuts.iter().chain([&usize::MAX]) {
                        let end = at.saturating_add(n).min(data.len());
                        op.update(
                            &bulk,
                            &data[at..end],
                            &mut OutBuf::new(Some(&mut got[at..end])),
                        )
                        .unwrap();
                        at = end;
                    }
                    assert!(got == want, "cb {cb:02x?}, gcm {gcm}, cuts {cuts:?}");
                }
            }
        }
    }

    /// A key runs OpenSSL's AES-CTR until it has run [`GCM_FORM_AFTER`] bytes, then gets its
    /// GCM form; the stream is the same across the switch.
    #[test]
    fn the_gcm_form_comes_after_a_megabyte() {
        let bulk = Bulk::default();
        let cb = [0x5a; 16];
        let k = key();
        let mut op = CtrOp::new(&ctr(cb), k.clone(), true).unwrap();
        let data = vec![0x33u8; (GCM_FORM_AFTER as usize) + 100];
        let mut got = vec![0u8; data.len()];
        let (a, b) = got.split_at_mut(GCM_FORM_AFTER as usize - 1);
        op.update(&bulk, &data[..a.len()], &mut OutBuf::new(Some(a)))
            .unwrap();
        assert!(k.gcm.get().is_none(), "no form before a megabyte");
        // A size query is not a run.
        op.update(&bulk, &data[a.len()..], &mut OutBuf::new(None))
            .unwrap();
        assert!(k.gcm.get().is_none());
        op.update(
            &bulk,
            &data[a.len()..a.len() + 1],
            &mut OutBuf::new(Some(&mut b[..1])),
        )
        .unwrap();
        assert!(
            k.gcm.get().is_none(),
            "the call that reaches the megabyte still runs without"
        );
        op.update(
            &bulk,
            &data[a.len() + 1..],
            &mut OutBuf::new(Some(&mut b[1..])),
        )
        .unwrap();
        assert!(
            matches!(k.gcm.get(), Some(Some(_))),
            "the form once a megabyte has run"
        );
        assert_eq!(got, reference(&cb, &data));
    }
}
