//! Symmetric ciphers and secret keys: AES (ECB, CBC, CBC with PKCS#7 padding, CTR, GCM, key
//! wrap RFC 3394 and RFC 5649), ChaCha20-Poly1305, Triple-DES (ECB, CBC, CBC with padding);
//! secret key generation and checks of imported secret keys; `C_WrapKey`/`C_UnwrapKey` with
//! these mechanisms.
//!
//! Every OpenSSL cipher is fetched once per process (`EVP_CIPHER_fetch`, kept in a static).
//! Block modes feed OpenSSL whole blocks only, with OpenSSL's padding off; this module keeps
//! the partial block and applies/checks PKCS#7 padding itself, so that every update knows its
//! exact output length before it touches any state (the two-call protocol). An operation can
//! be restarted on the same key with new parameters ([`CipherOp::reinit`]): only the IV is
//! set again, the key schedule is kept.

use super::{ossl_err, CipherOp, Key, MessageOp};
use crate::attrs::{AttrMap, AttrMapExt};
use opencf_abi::sys::*;
use opencf_abi::{CkResult, Mechanism, MechParam, MessageParams, OutBuf};
use openssl::cipher::{Cipher, CipherRef};
use openssl::cipher_ctx::{CipherCtx, CipherCtxFlags};
use std::sync::OnceLock;
use zeroize::Zeroizing;

/// Largest piece handed to one `EVP_CipherUpdate` (whose length is a C `int`); a multiple of
/// every block size.
const CHUNK: usize = 1 << 30;
/// Largest block size (AES).
const MAX_BLOCK: usize = 16;
/// Largest GCM IV OpenSSL accepts (bytes).
const GCM_MAX_IV: usize = 128;

// ---------------------------------------------------------------------------------------------
// Algorithms
// ---------------------------------------------------------------------------------------------

/// A cipher family; with the key length it names one OpenSSL cipher.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Alg {
    AesEcb,
    AesCbc,
    AesCtr,
    AesGcm,
    AesWrap,
    AesWrapPad,
    ChaChaPoly,
    Des3Ecb,
    Des3Cbc,
}

const AES_NAMES: [[&str; 3]; 6] = [
    ["AES-128-ECB", "AES-192-ECB", "AES-256-ECB"],
    ["AES-128-CBC", "AES-192-CBC", "AES-256-CBC"],
    ["AES-128-CTR", "AES-192-CTR", "AES-256-CTR"],
    ["AES-128-GCM", "AES-192-GCM", "AES-256-GCM"],
    ["AES-128-WRAP", "AES-192-WRAP", "AES-256-WRAP"],
    ["AES-128-WRAP-PAD", "AES-192-WRAP-PAD", "AES-256-WRAP-PAD"],
];

/// The fetched OpenSSL cipher for `alg` with a key of `key_len` bytes (already validated).
fn cipher(alg: Alg, key_len: usize) -> CkResult<&'static CipherRef> {
    const N: usize = 6 * 3 + 3;
    static CELLS: [OnceLock<Option<Cipher>>; N] = [const { OnceLock::new() }; N];
    let size = match key_len {
        16 => 0,
        24 => 1,
        32 => 2,
        _ => 0,
    };
    let (idx, name) = match alg {
        Alg::AesEcb => (size, AES_NAMES[0][size]),
        Alg::AesCbc => (3 + size, AES_NAMES[1][size]),
        Alg::AesCtr => (6 + size, AES_NAMES[2][size]),
        Alg::AesGcm => (9 + size, AES_NAMES[3][size]),
        Alg::AesWrap => (12 + size, AES_NAMES[4][size]),
        Alg::AesWrapPad => (15 + size, AES_NAMES[5][size]),
        Alg::ChaChaPoly => (18, "ChaCha20-Poly1305"),
        Alg::Des3Ecb => (19, "DES-EDE3-ECB"),
        Alg::Des3Cbc => (20, "DES-EDE3-CBC"),
    };
    CELLS[idx]
        .get_or_init(|| Cipher::fetch(None, name, None).ok())
        .as_deref()
        .ok_or(CKR_FUNCTION_FAILED)
}

/// The key value of an AES key (16, 24 or 32 bytes).
fn aes_key<'a>(key: &Key<'a>) -> CkResult<&'a [u8]> {
    if key.key_type()? != CKK_AES {
        return Err(CKR_KEY_TYPE_INCONSISTENT);
    }
    let v = key.attrs.bytes(CKA_VALUE).ok_or(CKR_KEY_HANDLE_INVALID)?;
    match v.len() {
        16 | 24 | 32 => Ok(v),
        _ => Err(CKR_KEY_SIZE_RANGE),
    }
}

/// The key value of a key of `kt` that must be exactly `len` bytes.
fn fixed_key<'a>(key: &Key<'a>, kt: CK_KEY_TYPE, len: usize) -> CkResult<&'a [u8]> {
    if key.key_type()? != kt {
        return Err(CKR_KEY_TYPE_INCONSISTENT);
    }
    let v = key.attrs.bytes(CKA_VALUE).ok_or(CKR_KEY_HANDLE_INVALID)?;
    if v.len() != len {
        return Err(CKR_KEY_SIZE_RANGE);
    }
    Ok(v)
}

/// True when the mechanism takes no parameter (`NULL`, or an empty byte string).
fn no_param(p: &MechParam) -> bool {
    matches!(p, MechParam::None) || matches!(p, MechParam::Bytes(b) if b.is_empty())
}

fn bytes_param(p: &MechParam) -> Option<&[u8]> {
    match p {
        MechParam::Bytes(b) => Some(b),
        _ => None,
    }
}

/// Starts an encryption (`encrypt`) or decryption context; `iv` as given.
fn new_ctx(
    c: &CipherRef,
    key: &[u8],
    iv: Option<&[u8]>,
    encrypt: bool,
) -> CkResult<CipherCtx> {
    let mut ctx = CipherCtx::new().map_err(ossl_err)?;
    // The `openssl` crate asserts the IV is at least the cipher's default IV length; for
    // other lengths the length is set first.
    let default_iv = c.iv_length();
    match iv {
        Some(iv) if iv.len() != default_iv => {
            init_ctx(&mut ctx, Some(c), None, None, encrypt)?;
            ctx.set_iv_length(iv.len()).map_err(|_| CKR_MECHANISM_PARAM_INVALID)?;
            init_ctx(&mut ctx, None, Some(key), Some(iv), encrypt)?;
        }
        _ => init_ctx(&mut ctx, Some(c), Some(key), iv, encrypt)?,
    }
    Ok(ctx)
}

fn init_ctx(
    ctx: &mut CipherCtx,
    c: Option<&CipherRef>,
    key: Option<&[u8]>,
    iv: Option<&[u8]>,
    encrypt: bool,
) -> CkResult<()> {
    if encrypt {
        ctx.encrypt_init(c, key, iv).map_err(ossl_err)
    } else {
        ctx.decrypt_init(c, key, iv).map_err(ossl_err)
    }
}

/// Sets a new IV on a keyed context (of a cipher whose IV length may vary: GCM).
fn set_iv(ctx: &mut CipherCtx, iv: &[u8], encrypt: bool) -> CkResult<()> {
    if ctx.iv_length() != iv.len() {
        ctx.set_iv_length(iv.len()).map_err(|_| CKR_MECHANISM_PARAM_INVALID)?;
    }
    init_ctx(ctx, None, None, Some(iv), encrypt)
}

/// Feeds `input` (whole blocks) through a block cipher without padding: exactly
/// `input.len()` bytes into `out` (same length).
fn run_blocks(ctx: &mut CipherCtx, bs: usize, input: &[u8], out: &mut [u8]) -> CkResult<()> {
    if input.len() % bs != 0 || out.len() != input.len() {
        return Err(CKR_GENERAL_ERROR);
    }
    for (i, o) in input.chunks(CHUNK).zip(out.chunks_mut(CHUNK)) {
        let n = i.len();
        // The `openssl` crate wants room for one more block than the input; the last block
        // goes through a scratch buffer so that `out` can be exact.
        if n > bs {
            let head = n - bs;
            let w = ctx.cipher_update(&i[..head], Some(&mut o[..])).map_err(ossl_err)?;
            if w != head {
                return Err(CKR_FUNCTION_FAILED);
            }
        }
        let mut tmp = Zeroizing::new([0u8; 2 * MAX_BLOCK]);
        let w = ctx.cipher_update(&i[n - bs..], Some(&mut tmp[..])).map_err(ossl_err)?;
        if w != bs {
            return Err(CKR_FUNCTION_FAILED);
        }
        o[n - bs..].copy_from_slice(&tmp[..bs]);
    }
    Ok(())
}

/// Feeds `input` through a stream-like cipher (CTR, GCM, ChaCha20-Poly1305): exactly
/// `input.len()` bytes into `out` (same length).
fn run_stream(ctx: &mut CipherCtx, input: &[u8], out: &mut [u8]) -> CkResult<()> {
    if out.len() != input.len() {
        return Err(CKR_GENERAL_ERROR);
    }
    for (i, o) in input.chunks(CHUNK).zip(out.chunks_mut(CHUNK)) {
        let w = ctx.cipher_update(i, Some(o)).map_err(ossl_err)?;
        if w != i.len() {
            return Err(CKR_FUNCTION_FAILED);
        }
    }
    Ok(())
}

/// Feeds additional authenticated data.
fn run_aad(ctx: &mut CipherCtx, aad: &[u8]) -> CkResult<()> {
    for a in aad.chunks(CHUNK) {
        ctx.cipher_update(a, None).map_err(ossl_err)?;
    }
    Ok(())
}

/// Ends an AEAD computation (encryption: the tag is then available; decryption: checks the
/// tag set before).
fn aead_final(ctx: &mut CipherCtx) -> Result<(), openssl::error::ErrorStack> {
    let mut tmp = [0u8; MAX_BLOCK];
    ctx.cipher_final(&mut tmp).map(|_| ())
}

/// PKCS#7 padding check of the last block, without data-dependent branches: the number of
/// data bytes in it, or `None`.
fn unpad_len(block: &[u8]) -> Option<usize> {
    let bs = block.len();
    let p = usize::from(*block.last()?);
    let mut bad = u8::from(p == 0) | u8::from(p > bs);
    for (i, &b) in block.iter().enumerate() {
        let in_pad = u8::from(bs - 1 - i < p);
        bad |= in_pad & u8::from(b != p as u8);
    }
    if bad == 0 {
        Some(bs - p)
    } else {
        None
    }
}

fn len_err(encrypt: bool) -> CK_RV {
    if encrypt {
        CKR_DATA_LEN_RANGE
    } else {
        CKR_ENCRYPTED_DATA_LEN_RANGE
    }
}

// ---------------------------------------------------------------------------------------------
// C_EncryptInit / C_DecryptInit
// ---------------------------------------------------------------------------------------------

/// `C_EncryptInit` (`encrypt`) / `C_DecryptInit` for the symmetric mechanisms.
pub fn cipher_init(mech: &Mechanism, key: Key, encrypt: bool) -> CkResult<Box<dyn CipherOp>> {
    match mech.mechanism {
        CKM_AES_ECB | CKM_AES_CBC | CKM_AES_CBC_PAD | CKM_DES3_ECB | CKM_DES3_CBC
        | CKM_DES3_CBC_PAD => Ok(Box::new(BlockOp::new(mech, key, encrypt)?)),
        CKM_AES_CTR => Ok(Box::new(CtrOp::new(mech, key, encrypt)?)),
        CKM_AES_GCM | CKM_CHACHA20_POLY1305 => Ok(Box::new(AeadOp::new(mech, key, encrypt)?)),
        CKM_AES_KEY_WRAP | CKM_AES_KEY_WRAP_KWP => {
            Ok(Box::new(WrapOp::new(mech, key, encrypt)?))
        }
        _ => Err(CKR_MECHANISM_INVALID),
    }
}

// ----- ECB / CBC / CBC_PAD -------------------------------------------------------------------

struct BlockSpec {
    alg: Alg,
    bs: usize,
    pad: bool,
    iv: bool,
}

fn block_spec(m: CK_MECHANISM_TYPE) -> CkResult<BlockSpec> {
    let (alg, pad) = match m {
        CKM_AES_ECB => (Alg::AesEcb, false),
        CKM_AES_CBC => (Alg::AesCbc, false),
        CKM_AES_CBC_PAD => (Alg::AesCbc, true),
        CKM_DES3_ECB => (Alg::Des3Ecb, false),
        CKM_DES3_CBC => (Alg::Des3Cbc, false),
        CKM_DES3_CBC_PAD => (Alg::Des3Cbc, true),
        _ => return Err(CKR_MECHANISM_INVALID),
    };
    let bs = if matches!(alg, Alg::Des3Ecb | Alg::Des3Cbc) { 8 } else { 16 };
    let iv = matches!(alg, Alg::AesCbc | Alg::Des3Cbc);
    Ok(BlockSpec { alg, bs, pad, iv })
}

/// The IV of a block mode (`None` for ECB), checked.
fn block_iv<'m>(spec: &BlockSpec, mech: &'m Mechanism) -> CkResult<Option<&'m [u8]>> {
    if spec.iv {
        match bytes_param(&mech.param) {
            Some(iv) if iv.len() == spec.bs => Ok(Some(iv)),
            _ => Err(CKR_MECHANISM_PARAM_INVALID),
        }
    } else if no_param(&mech.param) {
        Ok(None)
    } else {
        Err(CKR_MECHANISM_PARAM_INVALID)
    }
}

/// ECB, CBC and CBC with PKCS#7 padding (AES and Triple-DES).
struct BlockOp {
    mech: CK_MECHANISM_TYPE,
    ctx: CipherCtx,
    encrypt: bool,
    bs: usize,
    pad: bool,
    /// Input not yet processed (less than one block).
    partial: Zeroizing<Vec<u8>>,
    /// Decryption with padding: the plaintext of the last block, held back until the end.
    held: Zeroizing<[u8; MAX_BLOCK]>,
    has_held: bool,
    started: bool,
}

impl BlockOp {
    fn new(mech: &Mechanism, key: Key, encrypt: bool) -> CkResult<Self> {
        let spec = block_spec(mech.mechanism)?;
        let kv = if spec.bs == 8 { fixed_key(&key, CKK_DES3, 24)? } else { aes_key(&key)? };
        let iv = block_iv(&spec, mech)?;
        let mut ctx = new_ctx(cipher(spec.alg, kv.len())?, kv, iv, encrypt)?;
        ctx.set_padding(false);
        Ok(BlockOp {
            mech: mech.mechanism,
            ctx,
            encrypt,
            bs: spec.bs,
            pad: spec.pad,
            partial: Zeroizing::new(Vec::with_capacity(MAX_BLOCK)),
            held: Zeroizing::new([0u8; MAX_BLOCK]),
            has_held: false,
            started: false,
        })
    }

    fn holdback(&self) -> bool {
        self.pad && !self.encrypt
    }

    /// Output length of an update with `inlen` more bytes.
    fn update_len(&self, inlen: usize) -> CkResult<usize> {
        let avail = self.partial.len().checked_add(inlen).ok_or(len_err(self.encrypt))?;
        let nb = avail / self.bs;
        Ok(if self.holdback() {
            if nb == 0 {
                0
            } else {
                (usize::from(self.has_held) + nb - 1) * self.bs
            }
        } else {
            nb * self.bs
        })
    }
}

impl CipherOp for BlockOp {
    fn one_shot(&mut self, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if self.started {
            return Err(CKR_OPERATION_ACTIVE);
        }
        let bs = self.bs;
        let n = input.len();
        match (self.encrypt, self.pad) {
            (_, false) => {
                if n % bs != 0 {
                    return Err(len_err(self.encrypt));
                }
                if let Some(buf) = out.reserve(n)? {
                    run_blocks(&mut self.ctx, bs, input, buf)?;
                }
                Ok(())
            }
            (true, true) => {
                let whole = n - n % bs;
                let Some(buf) = out.reserve(whole + bs)? else { return Ok(()) };
                run_blocks(&mut self.ctx, bs, &input[..whole], &mut buf[..whole])?;
                let mut last = Zeroizing::new([0u8; MAX_BLOCK]);
                let rest = n - whole;
                last[..rest].copy_from_slice(&input[whole..]);
                last[rest..bs].fill((bs - rest) as u8);
                run_blocks(&mut self.ctx, bs, &last[..bs], &mut buf[whole..])
            }
            (false, true) => {
                if n == 0 || n % bs != 0 {
                    return Err(CKR_ENCRYPTED_DATA_LEN_RANGE);
                }
                if out.is_query() {
                    // Upper bound: the exact length is known only after decryption.
                    out.reserve(n)?;
                    return Ok(());
                }
                let body = n - bs;
                if out.capacity() >= n - 1 {
                    let buf = out.reserve(n - 1)?.ok_or(CKR_GENERAL_ERROR)?;
                    run_blocks(&mut self.ctx, bs, &input[..body], &mut buf[..body])?;
                    let mut last = Zeroizing::new([0u8; MAX_BLOCK]);
                    run_blocks(&mut self.ctx, bs, &input[body..], &mut last[..bs])?;
                    let keep = unpad_len(&last[..bs]).ok_or(CKR_ENCRYPTED_DATA_INVALID)?;
                    buf[body..body + keep].copy_from_slice(&last[..keep]);
                    out.set_len(body + keep);
                    return Ok(());
                }
                // A small buffer: decrypt on a copy of the context, so that the operation is
                // unchanged if the result does not fit.
                let mut copy = CipherCtx::new().map_err(ossl_err)?;
                copy.copy(&self.ctx).map_err(ossl_err)?;
                let mut plain = Zeroizing::new(vec![0u8; n]);
                run_blocks(&mut copy, bs, input, &mut plain)?;
                let keep = unpad_len(&plain[body..]).ok_or(CKR_ENCRYPTED_DATA_INVALID)?;
                let len = body + keep;
                let buf = out.reserve(len)?.ok_or(CKR_GENERAL_ERROR)?;
                buf.copy_from_slice(&plain[..len]);
                self.ctx = copy;
                Ok(())
            }
        }
    }

    fn update(&mut self, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        let total = self.update_len(input.len())?;
        let Some(buf) = out.reserve(total)? else { return Ok(()) };
        self.started = true;
        let bs = self.bs;
        let nb = (self.partial.len() + input.len()) / bs;
        if nb == 0 {
            self.partial.extend_from_slice(input);
            return Ok(());
        }
        let hold = self.holdback();
        let mut o = 0;
        if hold && self.has_held {
            buf[..bs].copy_from_slice(&self.held[..bs]);
            o = bs;
            self.has_held = false;
        }
        let mut inp = input;
        let mut done = 0;
        if !self.partial.is_empty() {
            let need = bs - self.partial.len();
            let mut blk = Zeroizing::new([0u8; MAX_BLOCK]);
            blk[..self.partial.len()].copy_from_slice(&self.partial);
            blk[self.partial.len()..bs].copy_from_slice(&inp[..need]);
            inp = &inp[need..];
            self.partial.clear();
            if hold && nb == 1 {
                run_blocks(&mut self.ctx, bs, &blk[..bs], &mut self.held[..bs])?;
                self.has_held = true;
            } else {
                run_blocks(&mut self.ctx, bs, &blk[..bs], &mut buf[o..o + bs])?;
                o += bs;
            }
            done = 1;
        }
        let whole = (nb - done) * bs;
        if whole > 0 {
            let main = &inp[..whole];
            if hold {
                let (a, last) = main.split_at(whole - bs);
                run_blocks(&mut self.ctx, bs, a, &mut buf[o..o + a.len()])?;
                o += a.len();
                run_blocks(&mut self.ctx, bs, last, &mut self.held[..bs])?;
                self.has_held = true;
            } else {
                run_blocks(&mut self.ctx, bs, main, &mut buf[o..o + whole])?;
                o += whole;
            }
        }
        self.partial.extend_from_slice(&inp[whole..]);
        debug_assert_eq!(o, total);
        Ok(())
    }

    fn finalize(&mut self, out: &mut OutBuf) -> CkResult<()> {
        let bs = self.bs;
        match (self.encrypt, self.pad) {
            (_, false) => {
                if !self.partial.is_empty() {
                    return Err(len_err(self.encrypt));
                }
                out.reserve(0)?;
                Ok(())
            }
            (true, true) => {
                let Some(buf) = out.reserve(bs)? else { return Ok(()) };
                let rest = self.partial.len();
                let mut last = Zeroizing::new([0u8; MAX_BLOCK]);
                last[..rest].copy_from_slice(&self.partial);
                last[rest..bs].fill((bs - rest) as u8);
                run_blocks(&mut self.ctx, bs, &last[..bs], buf)?;
                self.partial.clear();
                Ok(())
            }
            (false, true) => {
                if !self.partial.is_empty() || !self.has_held {
                    return Err(CKR_ENCRYPTED_DATA_LEN_RANGE);
                }
                let keep = unpad_len(&self.held[..bs]).ok_or(CKR_ENCRYPTED_DATA_INVALID)?;
                if let Some(buf) = out.reserve(keep)? {
                    buf.copy_from_slice(&self.held[..keep]);
                    self.has_held = false;
                }
                Ok(())
            }
        }
    }

    fn reinit(&mut self, mech: &Mechanism) -> CkResult<()> {
        if mech.mechanism != self.mech {
            return Err(CKR_FUNCTION_NOT_SUPPORTED);
        }
        let spec = block_spec(mech.mechanism)?;
        let iv = block_iv(&spec, mech)?;
        init_ctx(&mut self.ctx, None, None, iv, self.encrypt)?;
        self.ctx.set_padding(false);
        self.partial.clear();
        self.has_held = false;
        self.started = false;
        Ok(())
    }
}

// ----- CTR -----------------------------------------------------------------------------------

/// AES-CTR with a counter of `counter_bits` low-order bits of the counter block.
struct CtrOp {
    ctx: CipherCtx,
    encrypt: bool,
    /// Bytes that may still be processed before the counter would wrap.
    left: u128,
}

fn ctr_params(mech: &Mechanism) -> CkResult<(&[u8; 16], u128)> {
    let MechParam::AesCtr { counter_bits, cb } = &mech.param else {
        return Err(CKR_MECHANISM_PARAM_INVALID);
    };
    let bits = *counter_bits;
    if !(1..=128).contains(&bits) {
        return Err(CKR_MECHANISM_PARAM_INVALID);
    }
    let value = u128::from_be_bytes(*cb);
    let blocks = if bits == 128 {
        (u128::MAX - value).saturating_add(1)
    } else {
        let mask = (1u128 << bits) - 1;
        (1u128 << bits) - (value & mask)
    };
    Ok((cb, blocks.saturating_mul(16)))
}

impl CtrOp {
    fn new(mech: &Mechanism, key: Key, encrypt: bool) -> CkResult<Self> {
        let kv = aes_key(&key)?;
        let (cb, left) = ctr_params(mech)?;
        let ctx = new_ctx(cipher(Alg::AesCtr, kv.len())?, kv, Some(cb), encrypt)?;
        Ok(CtrOp { ctx, encrypt, left })
    }
}

impl CipherOp for CtrOp {
    fn one_shot(&mut self, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        self.update(input, out)
    }

    fn update(&mut self, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        let n = input.len() as u128;
        if n > self.left {
            return Err(len_err(self.encrypt));
        }
        if let Some(buf) = out.reserve(input.len())? {
            run_stream(&mut self.ctx, input, buf)?;
            self.left -= n;
        }
        Ok(())
    }

    fn finalize(&mut self, out: &mut OutBuf) -> CkResult<()> {
        out.reserve(0)?;
        Ok(())
    }

    fn reinit(&mut self, mech: &Mechanism) -> CkResult<()> {
        if mech.mechanism != CKM_AES_CTR {
            return Err(CKR_FUNCTION_NOT_SUPPORTED);
        }
        let (cb, left) = ctr_params(mech)?;
        init_ctx(&mut self.ctx, None, None, Some(cb), self.encrypt)?;
        self.left = left;
        Ok(())
    }
}

// ----- AES-GCM and ChaCha20-Poly1305 ---------------------------------------------------------

/// GCM tag lengths allowed by NIST SP 800-38D (bits).
fn gcm_tag_len(tag_bits: CK_ULONG) -> CkResult<usize> {
    match tag_bits {
        32 | 64 | 96 | 104 | 112 | 120 | 128 => Ok(tag_bits as usize / 8),
        _ => Err(CKR_MECHANISM_PARAM_INVALID),
    }
}

fn gcm_iv_ok(iv: &[u8]) -> CkResult<()> {
    if iv.is_empty() || iv.len() > GCM_MAX_IV {
        return Err(CKR_MECHANISM_PARAM_INVALID);
    }
    Ok(())
}

/// The (IV, AAD, tag length) of a `CK_GCM_PARAMS` / `CK_SALSA20_CHACHA20_POLY1305_PARAMS`.
fn aead_params(mech: &Mechanism) -> CkResult<(&[u8], &[u8], usize)> {
    match (mech.mechanism, &mech.param) {
        (CKM_AES_GCM, MechParam::Gcm { iv, iv_bits, aad, tag_bits }) => {
            gcm_iv_ok(iv)?;
            if *iv_bits != 0 && Some(*iv_bits) != (iv.len() as CK_ULONG).checked_mul(8) {
                return Err(CKR_MECHANISM_PARAM_INVALID);
            }
            Ok((iv, aad, gcm_tag_len(*tag_bits)?))
        }
        (CKM_CHACHA20_POLY1305, MechParam::ChaCha20Poly1305 { nonce, aad }) => {
            if nonce.len() != 12 {
                return Err(CKR_MECHANISM_PARAM_INVALID);
            }
            Ok((nonce, aad, 16))
        }
        _ => Err(CKR_MECHANISM_PARAM_INVALID),
    }
}

/// The keyed cipher of an AEAD mechanism.
fn aead_cipher<'a>(m: CK_MECHANISM_TYPE, key: &Key<'a>) -> CkResult<(&'static CipherRef, &'a [u8])> {
    match m {
        CKM_AES_GCM => {
            let kv = aes_key(key)?;
            Ok((cipher(Alg::AesGcm, kv.len())?, kv))
        }
        CKM_CHACHA20_POLY1305 => {
            let kv = fixed_key(key, CKK_CHACHA20, 32)?;
            Ok((cipher(Alg::ChaChaPoly, 32)?, kv))
        }
        _ => Err(CKR_MECHANISM_INVALID),
    }
}

/// AES-GCM or ChaCha20-Poly1305 through `C_Encrypt*` / `C_Decrypt*`. Encryption streams and
/// appends the tag at the end; decryption buffers everything and releases the plaintext only
/// when the tag has verified.
struct AeadOp {
    mech: CK_MECHANISM_TYPE,
    ctx: CipherCtx,
    encrypt: bool,
    tag_len: usize,
    /// Decryption: ciphertext and tag received so far.
    buffered: Zeroizing<Vec<u8>>,
    started: bool,
}

impl AeadOp {
    fn new(mech: &Mechanism, key: Key, encrypt: bool) -> CkResult<Self> {
        let (c, kv) = aead_cipher(mech.mechanism, &key)?;
        let (iv, aad, tag_len) = aead_params(mech)?;
        let mut ctx = new_ctx(c, kv, Some(iv), encrypt)?;
        run_aad(&mut ctx, aad)?;
        Ok(AeadOp {
            mech: mech.mechanism,
            ctx,
            encrypt,
            tag_len,
            buffered: Zeroizing::new(Vec::new()),
            started: false,
        })
    }

    /// Decrypts `ct_tag` (ciphertext then tag) into `buf` (exactly the ciphertext's length);
    /// on a bad tag the output is wiped.
    fn open(&mut self, ct_tag: &[u8], buf: &mut [u8]) -> CkResult<()> {
        let body = ct_tag.len() - self.tag_len;
        self.ctx.set_tag(&ct_tag[body..]).map_err(ossl_err)?;
        let r = run_stream(&mut self.ctx, &ct_tag[..body], buf)
            .and_then(|_| aead_final(&mut self.ctx).map_err(|_| CKR_ENCRYPTED_DATA_INVALID));
        if r.is_err() {
            buf.fill(0);
        }
        r
    }
}

impl CipherOp for AeadOp {
    fn one_shot(&mut self, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if self.started {
            return Err(CKR_OPERATION_ACTIVE);
        }
        let n = input.len();
        if self.encrypt {
            let total = n.checked_add(self.tag_len).ok_or(CKR_DATA_LEN_RANGE)?;
            let Some(buf) = out.reserve(total)? else { return Ok(()) };
            let (ct, tag) = buf.split_at_mut(n);
            run_stream(&mut self.ctx, input, ct)?;
            aead_final(&mut self.ctx).map_err(ossl_err)?;
            self.ctx.tag(tag).map_err(ossl_err)
        } else {
            if n < self.tag_len {
                return Err(CKR_ENCRYPTED_DATA_LEN_RANGE);
            }
            let Some(buf) = out.reserve(n - self.tag_len)? else { return Ok(()) };
            self.open(input, buf)
        }
    }

    fn update(&mut self, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if self.encrypt {
            if let Some(buf) = out.reserve(input.len())? {
                run_stream(&mut self.ctx, input, buf)?;
                self.started = true;
            }
        } else if out.reserve(0)?.is_some() || !input.is_empty() {
            // Nothing is released before the tag verifies.
            self.buffered.try_reserve(input.len()).map_err(|_| CKR_HOST_MEMORY)?;
            self.buffered.extend_from_slice(input);
            self.started = true;
        }
        Ok(())
    }

    fn finalize(&mut self, out: &mut OutBuf) -> CkResult<()> {
        if self.encrypt {
            let Some(buf) = out.reserve(self.tag_len)? else { return Ok(()) };
            aead_final(&mut self.ctx).map_err(ossl_err)?;
            self.ctx.tag(buf).map_err(ossl_err)
        } else {
            let n = self.buffered.len();
            if n < self.tag_len {
                return Err(CKR_ENCRYPTED_DATA_LEN_RANGE);
            }
            let Some(buf) = out.reserve(n - self.tag_len)? else { return Ok(()) };
            let data = std::mem::take(&mut self.buffered);
            let r = self.open(&data, buf);
            if r.is_err() {
                // Keep nothing around after a failure either.
                drop(data);
            }
            r
        }
    }

    fn reinit(&mut self, mech: &Mechanism) -> CkResult<()> {
        if mech.mechanism != self.mech {
            return Err(CKR_FUNCTION_NOT_SUPPORTED);
        }
        let (iv, aad, tag_len) = aead_params(mech)?;
        set_iv(&mut self.ctx, iv, self.encrypt)?;
        run_aad(&mut self.ctx, aad)?;
        self.tag_len = tag_len;
        self.buffered.clear();
        self.started = false;
        Ok(())
    }
}

// ----- AES key wrap (RFC 3394, RFC 5649) as a cipher -----------------------------------------

/// The IV of `CKM_AES_KEY_WRAP` (8 bytes) or `CKM_AES_KEY_WRAP_KWP` (4 bytes), `None` for the
/// default.
fn wrap_iv(mech: &Mechanism) -> CkResult<Option<Vec<u8>>> {
    let want = if mech.mechanism == CKM_AES_KEY_WRAP_KWP { 4 } else { 8 };
    match &mech.param {
        p if no_param(p) => Ok(None),
        MechParam::Bytes(b) if b.len() == want => Ok(Some(b.clone())),
        _ => Err(CKR_MECHANISM_PARAM_INVALID),
    }
}

/// One AES key wrap / unwrap of `input` into `out`.
fn aes_wrap_run(
    kwp: bool,
    key: &[u8],
    iv: Option<&[u8]>,
    encrypt: bool,
    input: &[u8],
    out: &mut OutBuf,
) -> CkResult<()> {
    let n = input.len();
    // The lengths RFC 3394 / RFC 5649 allow (and an `int` for OpenSSL).
    let max = i32::MAX as usize - 64;
    let exact = match (kwp, encrypt) {
        (false, true) if n >= 16 && n % 8 == 0 && n <= max => Some(n + 8),
        (false, false) if n >= 24 && n % 8 == 0 && n <= max => Some(n - 8),
        (true, true) if n >= 1 && n <= max => Some(n.div_ceil(8) * 8 + 8),
        (true, false) if n >= 16 && n % 8 == 0 && n <= max => None,
        _ => return Err(len_err(encrypt)),
    };
    if out.is_query() {
        out.reserve(exact.unwrap_or(n - 8))?;
        return Ok(());
    }
    if let Some(e) = exact {
        // Fail early on a small buffer, before any work.
        if out.capacity() < e {
            out.reserve(e)?;
        }
    }
    let alg = if kwp { Alg::AesWrapPad } else { Alg::AesWrap };
    let c = cipher(alg, key.len())?;
    let mut ctx = CipherCtx::new().map_err(ossl_err)?;
    ctx.set_flags(CipherCtxFlags::FLAG_WRAP_ALLOW);
    init_ctx(&mut ctx, Some(c), Some(key), iv, encrypt)?;
    let mut tmp = Zeroizing::new(vec![0u8; n + 16]);
    let w = ctx.cipher_update(input, Some(&mut tmp[..])).map_err(|_| {
        if encrypt {
            CKR_FUNCTION_FAILED
        } else {
            CKR_ENCRYPTED_DATA_INVALID
        }
    })?;
    if w > tmp.len() || exact.is_some_and(|e| e != w) {
        return Err(CKR_FUNCTION_FAILED);
    }
    let buf = out.reserve(w)?.ok_or(CKR_GENERAL_ERROR)?;
    buf.copy_from_slice(&tmp[..w]);
    Ok(())
}

/// `CKM_AES_KEY_WRAP` / `CKM_AES_KEY_WRAP_KWP` through `C_Encrypt*` / `C_Decrypt*`: the input
/// of updates is collected and processed at the end (the algorithm is single-pass).
struct WrapOp {
    kwp: bool,
    key: Zeroizing<Vec<u8>>,
    iv: Option<Vec<u8>>,
    encrypt: bool,
    buffered: Zeroizing<Vec<u8>>,
    started: bool,
}

impl WrapOp {
    fn new(mech: &Mechanism, key: Key, encrypt: bool) -> CkResult<Self> {
        let kv = aes_key(&key)?;
        let iv = wrap_iv(mech)?;
        // Make sure the cipher exists before accepting the operation.
        let kwp = mech.mechanism == CKM_AES_KEY_WRAP_KWP;
        cipher(if kwp { Alg::AesWrapPad } else { Alg::AesWrap }, kv.len())?;
        Ok(WrapOp {
            kwp,
            key: Zeroizing::new(kv.to_vec()),
            iv,
            encrypt,
            buffered: Zeroizing::new(Vec::new()),
            started: false,
        })
    }
}

impl CipherOp for WrapOp {
    fn one_shot(&mut self, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if self.started {
            return Err(CKR_OPERATION_ACTIVE);
        }
        aes_wrap_run(self.kwp, &self.key, self.iv.as_deref(), self.encrypt, input, out)
    }

    fn update(&mut self, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if out.reserve(0)?.is_some() || !input.is_empty() {
            self.buffered.try_reserve(input.len()).map_err(|_| CKR_HOST_MEMORY)?;
            self.buffered.extend_from_slice(input);
            self.started = true;
        }
        Ok(())
    }

    fn finalize(&mut self, out: &mut OutBuf) -> CkResult<()> {
        let data = std::mem::take(&mut self.buffered);
        let r = aes_wrap_run(self.kwp, &self.key, self.iv.as_deref(), self.encrypt, &data, out);
        if out.is_query() || r == Err(CKR_BUFFER_TOO_SMALL) {
            // The caller asks again: keep the input.
            self.buffered = data;
        }
        r
    }

    fn reinit(&mut self, mech: &Mechanism) -> CkResult<()> {
        let kwp = mech.mechanism == CKM_AES_KEY_WRAP_KWP;
        if kwp != self.kwp || !matches!(mech.mechanism, CKM_AES_KEY_WRAP | CKM_AES_KEY_WRAP_KWP)
        {
            return Err(CKR_FUNCTION_NOT_SUPPORTED);
        }
        self.iv = wrap_iv(mech)?;
        self.buffered.clear();
        self.started = false;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Message-based AEAD (C_MessageEncryptInit …)
// ---------------------------------------------------------------------------------------------

/// `C_MessageEncryptInit` (`encrypt`) / `C_MessageDecryptInit` with `CKM_AES_GCM` or
/// `CKM_CHACHA20_POLY1305` (the mechanism has no parameter; each message brings its own).
pub fn message_init(mech: &Mechanism, key: Key, encrypt: bool) -> CkResult<Box<dyn MessageOp>> {
    if !no_param(&mech.param) {
        return Err(CKR_MECHANISM_PARAM_INVALID);
    }
    let (c, kv) = aead_cipher(mech.mechanism, &key)?;
    let ctx = new_ctx(c, kv, None, encrypt)?;
    Ok(Box::new(MessageAead { mech: mech.mechanism, ctx, encrypt, counter: 0 }))
}

/// A keyed AEAD context for many messages.
struct MessageAead {
    mech: CK_MECHANISM_TYPE,
    ctx: CipherCtx,
    encrypt: bool,
    /// Next value of a `CKG_GENERATE_COUNTER` IV.
    counter: u128,
}

/// Builds a generated GCM IV in `iv`: its first `fixed_bits` bits are kept, the others come
/// from `fill` (random bytes or the counter, big-endian, in the low-order bits).
fn keep_fixed(iv: &mut [u8], fixed_bits: usize, generated: &[u8]) {
    for (i, b) in iv.iter_mut().enumerate() {
        let bit0 = i * 8;
        let keep_mask: u8 = if bit0 + 8 <= fixed_bits {
            0xff
        } else if bit0 >= fixed_bits {
            0
        } else {
            !(0xffu8 >> (fixed_bits - bit0))
        };
        *b = (*b & keep_mask) | (generated[i] & !keep_mask);
    }
}

impl MessageAead {
    /// The IV of a GCM message, generating it as asked.
    fn gcm_iv(
        &mut self,
        iv: &mut Vec<u8>,
        fixed_bits: CK_ULONG,
        generator: CK_GENERATOR_FUNCTION,
    ) -> CkResult<bool> {
        gcm_iv_ok(iv)?;
        if !self.encrypt || generator == CKG_NO_GENERATE {
            return Ok(false);
        }
        let total_bits = iv.len() * 8;
        let fixed = usize::try_from(fixed_bits).map_err(|_| CKR_MECHANISM_PARAM_INVALID)?;
        if fixed > total_bits {
            return Err(CKR_MECHANISM_PARAM_INVALID);
        }
        let free = total_bits - fixed;
        let mut gen = Zeroizing::new(vec![0u8; iv.len()]);
        match generator {
            CKG_GENERATE_RANDOM => {
                if free == 0 {
                    return Err(CKR_MECHANISM_PARAM_INVALID);
                }
                openssl::rand::rand_bytes(&mut gen).map_err(ossl_err)?;
            }
            CKG_GENERATE | CKG_GENERATE_COUNTER => {
                if free < 128 && self.counter >> free != 0 {
                    // Every IV of this form has been used.
                    return Err(CKR_MECHANISM_PARAM_INVALID);
                }
                let c = self.counter.to_be_bytes();
                let n = c.len().min(gen.len());
                let gl = gen.len();
                gen[gl - n..].copy_from_slice(&c[c.len() - n..]);
                self.counter = self.counter.checked_add(1).ok_or(CKR_MECHANISM_PARAM_INVALID)?;
            }
            _ => return Err(CKR_MECHANISM_PARAM_INVALID),
        }
        keep_fixed(iv, fixed, &gen);
        Ok(true)
    }

    fn seal_or_open(
        &mut self,
        iv: &[u8],
        aad: &[u8],
        data: &[u8],
        tag: &mut Vec<u8>,
        tag_len: usize,
        buf: &mut [u8],
    ) -> CkResult<()> {
        set_iv(&mut self.ctx, iv, self.encrypt)?;
        if !self.encrypt {
            self.ctx.set_tag(&tag[..tag_len]).map_err(ossl_err)?;
        }
        run_aad(&mut self.ctx, aad)?;
        if self.encrypt {
            run_stream(&mut self.ctx, data, buf)?;
            aead_final(&mut self.ctx).map_err(ossl_err)?;
            let mut t = [0u8; 16];
            self.ctx.tag(&mut t[..tag_len]).map_err(ossl_err)?;
            *tag = t[..tag_len].to_vec();
            Ok(())
        } else {
            let r = run_stream(&mut self.ctx, data, buf)
                .and_then(|_| aead_final(&mut self.ctx).map_err(|_| CKR_ENCRYPTED_DATA_INVALID));
            if r.is_err() {
                buf.fill(0);
            }
            r
        }
    }
}

impl MessageOp for MessageAead {
    fn message(
        &mut self,
        params: &mut MessageParams,
        aad: &[u8],
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        match (self.mech, params) {
            (CKM_AES_GCM, MessageParams::Gcm { iv, iv_fixed_bits, iv_generator, tag, tag_bits }) => {
                let tag_len = gcm_tag_len(*tag_bits)?;
                gcm_iv_ok(iv)?;
                if !self.encrypt && tag.len() < tag_len {
                    return Err(CKR_MECHANISM_PARAM_INVALID);
                }
                let Some(buf) = out.reserve(data.len())? else { return Ok(()) };
                let saved_iv = iv.clone();
                let generated = self.gcm_iv(iv, *iv_fixed_bits, *iv_generator)?;
                let r = self.seal_or_open(&iv.clone(), aad, data, tag, tag_len, buf);
                if r.is_err() && generated {
                    // The caller's IV is left as it was; the counter stays spent.
                    *iv = saved_iv;
                }
                r
            }
            (CKM_CHACHA20_POLY1305, MessageParams::ChaCha20Poly1305 { nonce, tag }) => {
                if nonce.len() != 12 || (!self.encrypt && tag.len() < 16) {
                    return Err(CKR_MECHANISM_PARAM_INVALID);
                }
                let Some(buf) = out.reserve(data.len())? else { return Ok(()) };
                let nonce = nonce.clone();
                self.seal_or_open(&nonce, aad, data, tag, 16, buf)
            }
            _ => Err(CKR_MECHANISM_PARAM_INVALID),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Key generation and imported keys
// ---------------------------------------------------------------------------------------------

/// Secret key types whose value may be any length from 1 byte (generic secrets, HMAC keys,
/// HKDF keys).
fn is_any_length_type(kt: CK_KEY_TYPE) -> bool {
    matches!(
        kt,
        CKK_GENERIC_SECRET
            | CKK_HKDF
            | CKK_SHA_1_HMAC
            | CKK_SHA224_HMAC
            | CKK_SHA256_HMAC
            | CKK_SHA384_HMAC
            | CKK_SHA512_HMAC
            | CKK_SHA3_224_HMAC
            | CKK_SHA3_256_HMAC
            | CKK_SHA3_384_HMAC
            | CKK_SHA3_512_HMAC
    )
}

/// Checks that `len` bytes is a valid value length for a secret key of type `kt`
/// (`CKR_ATTRIBUTE_VALUE_INVALID` if not; unknown types are `CKR_ATTRIBUTE_VALUE_INVALID`
/// too).
pub(crate) fn check_secret_len(kt: CK_KEY_TYPE, len: usize) -> CkResult<()> {
    let ok = match kt {
        CKK_AES => matches!(len, 16 | 24 | 32),
        CKK_DES3 => len == 24,
        CKK_CHACHA20 => len == 32,
        t if is_any_length_type(t) => (1..=MAX_SECRET).contains(&len),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(CKR_ATTRIBUTE_VALUE_INVALID)
    }
}

/// Largest generic secret / HMAC / HKDF key (bytes), as the mechanism table says.
const MAX_SECRET: usize = 512;

/// The fixed value length of a key type, if it has one.
pub(crate) fn implied_len(kt: CK_KEY_TYPE) -> Option<usize> {
    match kt {
        CKK_DES3 => Some(24),
        CKK_CHACHA20 => Some(32),
        _ => None,
    }
}

/// The template's `CKA_VALUE_LEN` as a length.
fn template_len(t: &AttrMap) -> CkResult<Option<usize>> {
    match t.ulong(CKA_VALUE_LEN)? {
        None => Ok(None),
        Some(v) => usize::try_from(v).map(Some).map_err(|_| CKR_ATTRIBUTE_VALUE_INVALID),
    }
}

/// The attributes of a new secret key.
pub(crate) fn secret_attrs(kt: CK_KEY_TYPE, value: Vec<u8>) -> AttrMap {
    let mut m = AttrMap::new();
    m.set_ulong(CKA_CLASS, CKO_SECRET_KEY);
    m.set_ulong(CKA_KEY_TYPE, kt);
    m.set_ulong(CKA_VALUE_LEN, value.len() as CK_ULONG);
    m.insert(CKA_VALUE, value);
    m
}

/// `C_GenerateKey` for `CKM_AES_KEY_GEN`, `CKM_GENERIC_SECRET_KEY_GEN`,
/// `CKM_CHACHA20_KEY_GEN`, `CKM_DES3_KEY_GEN` and `CKM_HKDF_KEY_GEN`.
pub fn generate_key(mech: &Mechanism, template: &AttrMap) -> CkResult<AttrMap> {
    if !no_param(&mech.param) {
        return Err(CKR_MECHANISM_PARAM_INVALID);
    }
    let (default_type, fixed_len) = match mech.mechanism {
        CKM_AES_KEY_GEN => (CKK_AES, None),
        CKM_GENERIC_SECRET_KEY_GEN => (CKK_GENERIC_SECRET, None),
        CKM_CHACHA20_KEY_GEN => (CKK_CHACHA20, Some(32)),
        CKM_DES3_KEY_GEN => (CKK_DES3, Some(24)),
        CKM_HKDF_KEY_GEN => (CKK_HKDF, None),
        _ => return Err(CKR_MECHANISM_INVALID),
    };
    if let Some(class) = template.ulong(CKA_CLASS)? {
        if class != CKO_SECRET_KEY {
            return Err(CKR_TEMPLATE_INCONSISTENT);
        }
    }
    let kt = match template.ulong(CKA_KEY_TYPE)? {
        None => default_type,
        Some(t) if t == default_type => t,
        // A generic secret generator may make HMAC keys.
        Some(t) if mech.mechanism == CKM_GENERIC_SECRET_KEY_GEN && is_any_length_type(t) => t,
        Some(_) => return Err(CKR_TEMPLATE_INCONSISTENT),
    };
    let len = match (template_len(template)?, fixed_len) {
        (Some(l), Some(f)) if l != f => return Err(CKR_TEMPLATE_INCONSISTENT),
        (_, Some(f)) => f,
        (Some(l), None) => l,
        (None, None) => return Err(CKR_TEMPLATE_INCOMPLETE),
    };
    check_secret_len(kt, len)?;
    let mut value = Zeroizing::new(vec![0u8; len]);
    if kt == CKK_DES3 {
        // OpenSSL's Triple-DES key generator: random bytes with odd parity.
        let c = cipher(Alg::Des3Cbc, 24)?;
        let mut ctx = CipherCtx::new().map_err(ossl_err)?;
        ctx.encrypt_init(Some(c), None, None).map_err(ossl_err)?;
        ctx.rand_key(&mut value).map_err(ossl_err)?;
    } else {
        openssl::rand::rand_priv_bytes(&mut value).map_err(ossl_err)?;
    }
    Ok(secret_attrs(kt, value.to_vec()))
}

/// Checks the value of an imported secret key of type `key_type` (`C_CreateObject`,
/// `C_UnwrapKey`, `C_DeriveKey`) and sets `CKA_VALUE_LEN`. A missing value is
/// `CKR_TEMPLATE_INCOMPLETE`, a wrong length `CKR_ATTRIBUTE_VALUE_INVALID`, a
/// `CKA_VALUE_LEN` that disagrees with the value `CKR_TEMPLATE_INCONSISTENT`.
pub fn complete_key(key_type: CK_KEY_TYPE, attrs: &mut AttrMap) -> CkResult<()> {
    let len = attrs.need_bytes(CKA_VALUE)?.len();
    if let Some(l) = template_len(attrs)? {
        if l != len {
            return Err(CKR_TEMPLATE_INCONSISTENT);
        }
    }
    check_secret_len(key_type, len)?;
    attrs.set_ulong(CKA_VALUE_LEN, len as CK_ULONG);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// C_WrapKey / C_UnwrapKey
// ---------------------------------------------------------------------------------------------

fn wrapping_mech(m: CK_MECHANISM_TYPE) -> bool {
    matches!(
        m,
        CKM_AES_KEY_WRAP
            | CKM_AES_KEY_WRAP_KWP
            | CKM_AES_ECB
            | CKM_AES_CBC
            | CKM_AES_CBC_PAD
            | CKM_DES3_ECB
            | CKM_DES3_CBC
            | CKM_DES3_CBC_PAD
    )
}

/// Runs a whole encryption or decryption of `data` into a new vector.
fn run_all(mech: &Mechanism, key: Key, encrypt: bool, data: &[u8]) -> CkResult<Zeroizing<Vec<u8>>> {
    let mut op = cipher_init(mech, key, encrypt)?;
    let mut out = Zeroizing::new(vec![0u8; data.len() + 2 * MAX_BLOCK]);
    let mut ob = OutBuf::new(Some(&mut out[..]));
    op.one_shot(data, &mut ob)?;
    let n = ob.len();
    out.truncate(n);
    Ok(out)
}

/// `C_WrapKey`: encrypts `data` (the key's bytes) with the AES or Triple-DES mechanism.
/// ECB and CBC without padding need data that is a whole number of blocks
/// (`CKR_KEY_SIZE_RANGE` otherwise).
pub fn wrap(mech: &Mechanism, wrapping_key: Key, data: &[u8]) -> CkResult<Vec<u8>> {
    if !wrapping_mech(mech.mechanism) {
        return Err(CKR_MECHANISM_INVALID);
    }
    match run_all(mech, wrapping_key, true, data) {
        Ok(v) => Ok(v.to_vec()),
        Err(CKR_KEY_TYPE_INCONSISTENT) => Err(CKR_WRAPPING_KEY_TYPE_INCONSISTENT),
        Err(CKR_KEY_SIZE_RANGE) => Err(CKR_WRAPPING_KEY_SIZE_RANGE),
        Err(CKR_DATA_LEN_RANGE) => Err(CKR_KEY_SIZE_RANGE),
        Err(e) => Err(e),
    }
}

/// `C_UnwrapKey`: decrypts a wrapped key. Integrity or padding failure is
/// `CKR_WRAPPED_KEY_INVALID`, a length the mechanism cannot have produced
/// `CKR_WRAPPED_KEY_LEN_RANGE`.
pub fn unwrap(mech: &Mechanism, key: Key, data: &[u8]) -> CkResult<Zeroizing<Vec<u8>>> {
    if !wrapping_mech(mech.mechanism) {
        return Err(CKR_MECHANISM_INVALID);
    }
    match run_all(mech, key, false, data) {
        Ok(v) => Ok(v),
        Err(CKR_KEY_TYPE_INCONSISTENT) => Err(CKR_UNWRAPPING_KEY_TYPE_INCONSISTENT),
        Err(CKR_KEY_SIZE_RANGE) => Err(CKR_UNWRAPPING_KEY_SIZE_RANGE),
        Err(CKR_ENCRYPTED_DATA_LEN_RANGE) => Err(CKR_WRAPPED_KEY_LEN_RANGE),
        Err(CKR_ENCRYPTED_DATA_INVALID) => Err(CKR_WRAPPED_KEY_INVALID),
        Err(e) => Err(e),
    }
}
