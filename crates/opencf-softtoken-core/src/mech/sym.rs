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
use opencf_abi::ossl_sym::{aes_gcm_any_iv, GcmError};
use opencf_abi::sys::*;
use opencf_abi::{gcm_iv_ok, gcm_tag_len, CkResult, MechParam, Mechanism, MessageParams, OutBuf};
use openssl::cipher::{Cipher, CipherRef};
use openssl::cipher_ctx::{CipherCtx, CipherCtxFlags};
use std::sync::OnceLock;
use zeroize::Zeroizing;

/// Largest piece handed to one `EVP_CipherUpdate` (whose length is a C `int`); a multiple of
/// every block size.
const CHUNK: usize = 1 << 30;
/// Largest block size (AES).
const MAX_BLOCK: usize = 16;
/// Largest GCM IV OpenSSL's `EVP` interface accepts (bytes); longer ones go through
/// [`opencf_abi::ossl_sym::aes_gcm_any_iv`].
const EVP_GCM_MAX_IV: usize = 128;

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
fn new_ctx(c: &CipherRef, key: &[u8], iv: Option<&[u8]>, encrypt: bool) -> CkResult<CipherCtx> {
    let mut ctx = CipherCtx::new().map_err(ossl_err)?;
    // The `openssl` crate asserts the IV is at least the cipher's default IV length; for
    // other lengths the length is set first.
    let default_iv = c.iv_length();
    match iv {
        Some(iv) if iv.len() != default_iv => {
            init_ctx(&mut ctx, Some(c), None, None, encrypt)?;
            ctx.set_iv_length(iv.len())
                .map_err(|_| CKR_MECHANISM_PARAM_INVALID)?;
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
        ctx.set_iv_length(iv.len())
            .map_err(|_| CKR_MECHANISM_PARAM_INVALID)?;
    }
    init_ctx(ctx, None, None, Some(iv), encrypt)
}

/// Feeds `input` (whole blocks) through a block cipher without padding: exactly
/// `input.len()` bytes into `out` (same length).
fn run_blocks(ctx: &mut CipherCtx, bs: usize, input: &[u8], out: &mut [u8]) -> CkResult<()> {
    if !input.len().is_multiple_of(bs) || out.len() != input.len() {
        return Err(CKR_GENERAL_ERROR);
    }
    for (i, o) in input.chunks(CHUNK).zip(out.chunks_mut(CHUNK)) {
        let n = i.len();
        // The `openssl` crate wants room for one more block than the input; the last block
        // goes through a scratch buffer so that `out` can be exact.
        if n > bs {
            let head = n - bs;
            let w = ctx
                .cipher_update(&i[..head], Some(&mut o[..]))
                .map_err(ossl_err)?;
            if w != head {
                return Err(CKR_FUNCTION_FAILED);
            }
        }
        let mut tmp = Zeroizing::new([0u8; 2 * MAX_BLOCK]);
        let w = ctx
            .cipher_update(&i[n - bs..], Some(&mut tmp[..]))
            .map_err(ossl_err)?;
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
        CKM_AES_GCM if long_iv(mech) => Ok(Box::new(LongIvGcmOp::new(mech, key, encrypt)?)),
        CKM_AES_GCM | CKM_CHACHA20_POLY1305 => Ok(Box::new(AeadOp::new(mech, key, encrypt)?)),
        CKM_AES_KEY_WRAP | CKM_AES_KEY_WRAP_KWP => Ok(Box::new(WrapOp::new(mech, key, encrypt)?)),
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
    let bs = if matches!(alg, Alg::Des3Ecb | Alg::Des3Cbc) {
        8
    } else {
        16
    };
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
        let kv = if spec.bs == 8 {
            fixed_key(&key, CKK_DES3, 24)?
        } else {
            aes_key(&key)?
        };
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
        let avail = self
            .partial
            .len()
            .checked_add(inlen)
            .ok_or(len_err(self.encrypt))?;
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
                if !n.is_multiple_of(bs) {
                    return Err(len_err(self.encrypt));
                }
                if let Some(buf) = out.reserve(n)? {
                    run_blocks(&mut self.ctx, bs, input, buf)?;
                }
                Ok(())
            }
            (true, true) => {
                let whole = n - n % bs;
                let Some(buf) = out.reserve(whole + bs)? else {
                    return Ok(());
                };
                run_blocks(&mut self.ctx, bs, &input[..whole], &mut buf[..whole])?;
                let mut last = Zeroizing::new([0u8; MAX_BLOCK]);
                let rest = n - whole;
                last[..rest].copy_from_slice(&input[whole..]);
                last[rest..bs].fill((bs - rest) as u8);
                run_blocks(&mut self.ctx, bs, &last[..bs], &mut buf[whole..])
            }
            (false, true) => {
                if n == 0 || !n.is_multiple_of(bs) {
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
                    let Some(keep) = unpad_len(&last[..bs]) else {
                        buf.fill(0);
                        return Err(CKR_ENCRYPTED_DATA_INVALID);
                    };
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
        let Some(buf) = out.reserve(total)? else {
            return Ok(());
        };
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
                let Some(buf) = out.reserve(bs)? else {
                    return Ok(());
                };
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
    /// An update has run: a single-part call may no longer follow.
    started: bool,
}

impl CtrOp {
    fn new(mech: &Mechanism, key: Key, encrypt: bool) -> CkResult<Self> {
        let kv = aes_key(&key)?;
        let (cb, left) = opencf_abi::aes_ctr_params(mech)?;
        let ctx = new_ctx(cipher(Alg::AesCtr, kv.len())?, kv, Some(cb), encrypt)?;
        Ok(CtrOp {
            ctx,
            encrypt,
            left,
            started: false,
        })
    }
}

impl CipherOp for CtrOp {
    /// Not after an update: `C_Encrypt` "must be called after C_EncryptInit without
    /// intervening C_EncryptUpdate calls" (PKCS#11 3.2 §5.9), in CTR as in the other modes.
    fn one_shot(&mut self, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if self.started {
            return Err(CKR_OPERATION_ACTIVE);
        }
        self.update(input, out)
    }

    fn update(&mut self, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        let n = input.len() as u128;
        if n > self.left {
            return Err(len_err(self.encrypt));
        }
        if let Some(buf) = out.reserve(input.len())? {
            self.started = true;
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
        let (cb, left) = opencf_abi::aes_ctr_params(mech)?;
        init_ctx(&mut self.ctx, None, None, Some(cb), self.encrypt)?;
        self.left = left;
        self.started = false;
        Ok(())
    }
}

// ----- AES-GCM and ChaCha20-Poly1305 ---------------------------------------------------------

/// The (IV, AAD, tag length) of a `CK_GCM_PARAMS` / `CK_SALSA20_CHACHA20_POLY1305_PARAMS`.
fn aead_params(mech: &Mechanism) -> CkResult<(&[u8], &[u8], usize)> {
    match (mech.mechanism, &mech.param) {
        (
            CKM_AES_GCM,
            MechParam::Gcm {
                iv, aad, tag_bits, ..
            },
        ) => {
            // `ulIvBits` is ignored: the specification says the IV length is `ulIvLen`, and
            // some callers leave `ulIvBits` uninitialized.
            gcm_iv_ok(iv)?;
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
fn aead_cipher<'a>(
    m: CK_MECHANISM_TYPE,
    key: &Key<'a>,
) -> CkResult<(&'static CipherRef, &'a [u8])> {
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
            let Some(buf) = out.reserve(total)? else {
                return Ok(());
            };
            let (ct, tag) = buf.split_at_mut(n);
            run_stream(&mut self.ctx, input, ct)?;
            aead_final(&mut self.ctx).map_err(ossl_err)?;
            self.ctx.tag(tag).map_err(ossl_err)
        } else {
            if n < self.tag_len {
                return Err(CKR_ENCRYPTED_DATA_LEN_RANGE);
            }
            let Some(buf) = out.reserve(n - self.tag_len)? else {
                return Ok(());
            };
            self.open(input, buf)
        }
    }

    fn update(&mut self, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if self.encrypt {
            if let Some(buf) = out.reserve(input.len())? {
                run_stream(&mut self.ctx, input, buf)?;
                self.started = true;
            }
        } else if out.reserve(0)?.is_some() {
            // Nothing is released before the tag verifies.
            self.buffered
                .try_reserve(input.len())
                .map_err(|_| CKR_HOST_MEMORY)?;
            self.buffered.extend_from_slice(input);
            self.started = true;
        }
        Ok(())
    }

    fn finalize(&mut self, out: &mut OutBuf) -> CkResult<()> {
        if self.encrypt {
            let Some(buf) = out.reserve(self.tag_len)? else {
                return Ok(());
            };
            aead_final(&mut self.ctx).map_err(ossl_err)?;
            self.ctx.tag(buf).map_err(ossl_err)
        } else {
            let n = self.buffered.len();
            if n < self.tag_len {
                return Err(CKR_ENCRYPTED_DATA_LEN_RANGE);
            }
            let Some(buf) = out.reserve(n - self.tag_len)? else {
                return Ok(());
            };
            let data = std::mem::take(&mut self.buffered);
            self.open(&data, buf)
        }
    }

    fn reinit(&mut self, mech: &Mechanism) -> CkResult<()> {
        if mech.mechanism != self.mech {
            return Err(CKR_FUNCTION_NOT_SUPPORTED);
        }
        let (iv, aad, tag_len) = aead_params(mech)?;
        if iv.len() > EVP_GCM_MAX_IV {
            // Another kind of operation: the caller starts a new one.
            return Err(CKR_FUNCTION_NOT_SUPPORTED);
        }
        set_iv(&mut self.ctx, iv, self.encrypt)?;
        run_aad(&mut self.ctx, aad)?;
        self.tag_len = tag_len;
        self.buffered.clear();
        self.started = false;
        Ok(())
    }
}

/// True for an AES-GCM mechanism whose IV is longer than `EVP` takes.
fn long_iv(mech: &Mechanism) -> bool {
    matches!(&mech.param, MechParam::Gcm { iv, .. } if iv.len() > EVP_GCM_MAX_IV)
}

/// Runs [`aes_gcm_any_iv`] on `input` into `out`: encryption writes ciphertext then tag,
/// decryption takes ciphertext then tag.
fn gcm_any_iv_run(
    key: &[u8],
    iv: &[u8],
    aad: &[u8],
    tag_len: usize,
    encrypt: bool,
    input: &[u8],
    out: &mut OutBuf,
) -> CkResult<()> {
    let map = |e| match e {
        GcmError::TagMismatch => CKR_ENCRYPTED_DATA_INVALID,
        GcmError::Failed => CKR_FUNCTION_FAILED,
    };
    let n = input.len();
    if encrypt {
        let total = n.checked_add(tag_len).ok_or(CKR_DATA_LEN_RANGE)?;
        let Some(buf) = out.reserve(total)? else {
            return Ok(());
        };
        let (ct, tag) = buf.split_at_mut(n);
        aes_gcm_any_iv(key, iv, aad, input, ct, tag, true).map_err(map)
    } else {
        if n < tag_len {
            return Err(CKR_ENCRYPTED_DATA_LEN_RANGE);
        }
        let Some(buf) = out.reserve(n - tag_len)? else {
            return Ok(());
        };
        let mut tag = [0u8; 16];
        tag[..tag_len].copy_from_slice(&input[n - tag_len..]);
        aes_gcm_any_iv(
            key,
            iv,
            aad,
            &input[..n - tag_len],
            buf,
            &mut tag[..tag_len],
            false,
        )
        .map_err(map)
    }
}

/// AES-GCM with an IV longer than 128 bytes (129 to 256) through `C_Encrypt*` /
/// `C_Decrypt*`: the data of updates is collected and processed at the end, both ways.
struct LongIvGcmOp {
    key: Zeroizing<Vec<u8>>,
    iv: Vec<u8>,
    aad: Vec<u8>,
    tag_len: usize,
    encrypt: bool,
    buffered: Zeroizing<Vec<u8>>,
    started: bool,
}

impl LongIvGcmOp {
    fn new(mech: &Mechanism, key: Key, encrypt: bool) -> CkResult<Self> {
        let kv = aes_key(&key)?;
        let (iv, aad, tag_len) = aead_params(mech)?;
        Ok(LongIvGcmOp {
            key: Zeroizing::new(kv.to_vec()),
            iv: iv.to_vec(),
            aad: aad.to_vec(),
            tag_len,
            encrypt,
            buffered: Zeroizing::new(Vec::new()),
            started: false,
        })
    }

    fn run(&self, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        gcm_any_iv_run(
            &self.key,
            &self.iv,
            &self.aad,
            self.tag_len,
            self.encrypt,
            input,
            out,
        )
    }
}

impl CipherOp for LongIvGcmOp {
    fn one_shot(&mut self, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if self.started {
            return Err(CKR_OPERATION_ACTIVE);
        }
        self.run(input, out)
    }

    fn update(&mut self, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if out.reserve(0)?.is_some() {
            self.buffered
                .try_reserve(input.len())
                .map_err(|_| CKR_HOST_MEMORY)?;
            self.buffered.extend_from_slice(input);
            self.started = true;
        }
        Ok(())
    }

    fn finalize(&mut self, out: &mut OutBuf) -> CkResult<()> {
        let data = std::mem::take(&mut self.buffered);
        let r = self.run(&data, out);
        if out.is_query() || r == Err(CKR_BUFFER_TOO_SMALL) {
            // The caller asks again: keep the input.
            self.buffered = data;
        }
        r
    }

    fn reinit(&mut self, mech: &Mechanism) -> CkResult<()> {
        if mech.mechanism != CKM_AES_GCM || !long_iv(mech) {
            return Err(CKR_FUNCTION_NOT_SUPPORTED);
        }
        let (iv, aad, tag_len) = aead_params(mech)?;
        self.iv = iv.to_vec();
        self.aad = aad.to_vec();
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
    let want = if mech.mechanism == CKM_AES_KEY_WRAP_KWP {
        4
    } else {
        8
    };
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
        (false, true) if n >= 16 && n.is_multiple_of(8) && n <= max => Some(n + 8),
        (false, false) if n >= 24 && n.is_multiple_of(8) && n <= max => Some(n - 8),
        (true, true) if n >= 1 && n <= max => Some(n.div_ceil(8) * 8 + 8),
        (true, false) if n >= 16 && n.is_multiple_of(8) && n <= max => None,
        _ => return Err(len_err(encrypt)),
    };
    if out.is_query() {
        // Decryption with padding: an upper bound (n ≥ 16 there).
        out.reserve(exact.unwrap_or_else(|| n - 8))?;
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
        aes_wrap_run(
            self.kwp,
            &self.key,
            self.iv.as_deref(),
            self.encrypt,
            input,
            out,
        )
    }

    fn update(&mut self, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if out.reserve(0)?.is_some() {
            self.buffered
                .try_reserve(input.len())
                .map_err(|_| CKR_HOST_MEMORY)?;
            self.buffered.extend_from_slice(input);
            self.started = true;
        }
        Ok(())
    }

    fn finalize(&mut self, out: &mut OutBuf) -> CkResult<()> {
        let data = std::mem::take(&mut self.buffered);
        let r = aes_wrap_run(
            self.kwp,
            &self.key,
            self.iv.as_deref(),
            self.encrypt,
            &data,
            out,
        );
        if out.is_query() || r == Err(CKR_BUFFER_TOO_SMALL) {
            // The caller asks again: keep the input.
            self.buffered = data;
        }
        r
    }

    fn reinit(&mut self, mech: &Mechanism) -> CkResult<()> {
        let kwp = mech.mechanism == CKM_AES_KEY_WRAP_KWP;
        if kwp != self.kwp || !matches!(mech.mechanism, CKM_AES_KEY_WRAP | CKM_AES_KEY_WRAP_KWP) {
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
    Ok(Box::new(MessageAead {
        mech: mech.mechanism,
        ctx,
        encrypt,
        counter: 0,
        key: Zeroizing::new(kv.to_vec()),
    }))
}

/// A keyed AEAD context for many messages.
struct MessageAead {
    mech: CK_MECHANISM_TYPE,
    ctx: CipherCtx,
    encrypt: bool,
    /// Next value of a `CKG_GENERATE_COUNTER` IV.
    counter: u128,
    /// The key, for GCM messages whose IV is longer than `EVP` takes.
    key: Zeroizing<Vec<u8>>,
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
    /// The IV of a GCM message, generating it into `iv` as asked (true when generated).
    fn gcm_iv(
        &mut self,
        iv: &mut [u8],
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
                self.counter = self
                    .counter
                    .checked_add(1)
                    .ok_or(CKR_MECHANISM_PARAM_INVALID)?;
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
        if iv.len() > EVP_GCM_MAX_IV {
            let mut t = [0u8; 16];
            if !self.encrypt {
                t[..tag_len].copy_from_slice(&tag[..tag_len]);
            }
            let r = aes_gcm_any_iv(
                &self.key,
                iv,
                aad,
                data,
                buf,
                &mut t[..tag_len],
                self.encrypt,
            );
            return match r {
                Ok(()) => {
                    if self.encrypt {
                        *tag = t[..tag_len].to_vec();
                    }
                    Ok(())
                }
                Err(GcmError::TagMismatch) => Err(CKR_ENCRYPTED_DATA_INVALID),
                Err(GcmError::Failed) => Err(CKR_FUNCTION_FAILED),
            };
        }
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
            (
                CKM_AES_GCM,
                MessageParams::Gcm {
                    iv,
                    iv_fixed_bits,
                    iv_generator,
                    tag,
                    tag_bits,
                },
            ) => {
                let tag_len = gcm_tag_len(*tag_bits)?;
                gcm_iv_ok(iv)?;
                if !self.encrypt && tag.len() < tag_len {
                    return Err(CKR_MECHANISM_PARAM_INVALID);
                }
                let Some(buf) = out.reserve(data.len())? else {
                    return Ok(());
                };
                // A generated IV is written into `iv`, which the caller gets back on success;
                // a counter value once handed out is never used again.
                self.gcm_iv(iv, *iv_fixed_bits, *iv_generator)?;
                self.seal_or_open(iv, aad, data, tag, tag_len, buf)
            }
            (CKM_CHACHA20_POLY1305, MessageParams::ChaCha20Poly1305 { nonce, tag }) => {
                if nonce.len() != 12 || (!self.encrypt && tag.len() < 16) {
                    return Err(CKR_MECHANISM_PARAM_INVALID);
                }
                let Some(buf) = out.reserve(data.len())? else {
                    return Ok(());
                };
                self.seal_or_open(nonce, aad, data, tag, 16, buf)
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

/// Whether `len` bytes is a valid value length for a secret key of type `kt`; `None` when
/// `kt` is not a secret key type this token knows.
pub fn secret_len_fits(kt: CK_KEY_TYPE, len: usize) -> Option<bool> {
    Some(match kt {
        CKK_AES => matches!(len, 16 | 24 | 32),
        CKK_DES3 => len == 24,
        CKK_CHACHA20 => len == 32,
        t if is_any_length_type(t) => (1..=MAX_SECRET).contains(&len),
        _ => return None,
    })
}

/// Checks that `len` bytes is a valid value length for a secret key of type `kt`
/// (`CKR_ATTRIBUTE_VALUE_INVALID` if not; unknown types are `CKR_ATTRIBUTE_VALUE_INVALID`
/// too).
pub(crate) fn check_secret_len(kt: CK_KEY_TYPE, len: usize) -> CkResult<()> {
    match secret_len_fits(kt, len) {
        Some(true) => Ok(()),
        _ => Err(CKR_ATTRIBUTE_VALUE_INVALID),
    }
}

/// Largest imported or derived generic secret / HMAC / HKDF key (bytes): room for the
/// largest HKDF output (255 × 64 bytes). The mechanism table gives HMAC and HKDF this range.
pub(super) const MAX_SECRET: usize = 64 * 1024;

/// Largest generated generic secret / HMAC / HKDF key (bytes): the key generators' range in
/// the mechanism table.
pub(super) const MAX_GENERATED: usize = 512;

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
        Some(v) => usize::try_from(v)
            .map(Some)
            .map_err(|_| CKR_ATTRIBUTE_VALUE_INVALID),
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
    // Generated secrets stay within the mechanism table's range (1..=512 bytes).
    if len > MAX_GENERATED {
        return Err(CKR_ATTRIBUTE_VALUE_INVALID);
    }
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

/// Whether a wrapping mechanism zero-pads a key to whole blocks (ECB and CBC without padding
/// of their own, as [`wrap`] does); the others' unwrapped content is the key, exactly.
pub fn zero_pads(m: CK_MECHANISM_TYPE) -> bool {
    matches!(m, CKM_AES_ECB | CKM_AES_CBC | CKM_DES3_ECB | CKM_DES3_CBC)
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
/// ECB and CBC without padding pad the value with zero bytes to a whole number of blocks, as
/// the specification says (the unwrapping side truncates to the template's `CKA_VALUE_LEN`).
pub fn wrap(mech: &Mechanism, wrapping_key: Key, data: &[u8]) -> CkResult<Vec<u8>> {
    if !wrapping_mech(mech.mechanism) {
        return Err(CKR_MECHANISM_INVALID);
    }
    let padded;
    let data = match mech.mechanism {
        m if zero_pads(m) => {
            let bs = block_spec(m)?.bs;
            let mut v = Zeroizing::new(data.to_vec());
            v.resize(data.len().div_ceil(bs) * bs, 0);
            padded = v;
            &padded[..]
        }
        _ => data,
    };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mech::KeyCache;

    fn unhex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn secret(kt: CK_KEY_TYPE, v: &[u8]) -> AttrMap {
        let mut m = AttrMap::new();
        m.set_ulong(CKA_CLASS, CKO_SECRET_KEY);
        m.set_ulong(CKA_KEY_TYPE, kt);
        m.insert(CKA_VALUE, v.to_vec());
        m
    }

    fn bytes_mech(m: CK_MECHANISM_TYPE, p: &[u8]) -> Mechanism {
        Mechanism {
            mechanism: m,
            param: MechParam::Bytes(p.to_vec()),
        }
    }

    fn gcm(iv: &[u8], aad: &[u8], tag_bits: CK_ULONG) -> Mechanism {
        Mechanism {
            mechanism: CKM_AES_GCM,
            param: MechParam::Gcm {
                iv: iv.to_vec(),
                iv_bits: (iv.len() * 8) as CK_ULONG,
                aad: aad.to_vec(),
                tag_bits,
            },
        }
    }

    fn chacha(nonce: &[u8], aad: &[u8]) -> Mechanism {
        Mechanism {
            mechanism: CKM_CHACHA20_POLY1305,
            param: MechParam::ChaCha20Poly1305 {
                nonce: nonce.to_vec(),
                aad: aad.to_vec(),
            },
        }
    }

    fn ctr(bits: CK_ULONG, cb: &[u8]) -> Mechanism {
        let mut c = [0u8; 16];
        c.copy_from_slice(cb);
        Mechanism {
            mechanism: CKM_AES_CTR,
            param: MechParam::AesCtr {
                counter_bits: bits,
                cb: c,
            },
        }
    }

    fn op(mech: &Mechanism, attrs: &AttrMap, encrypt: bool) -> CkResult<Box<dyn CipherOp>> {
        let cache = KeyCache::default();
        cipher_init(
            mech,
            Key {
                attrs,
                cache: &cache,
            },
            encrypt,
        )
    }

    /// Single-part, through the two-call protocol (size query first).
    fn one(mech: &Mechanism, attrs: &AttrMap, encrypt: bool, data: &[u8]) -> CkResult<Vec<u8>> {
        let mut o = op(mech, attrs, encrypt)?;
        let mut q = OutBuf::new(None);
        o.one_shot(data, &mut q)?;
        let mut out = vec![0u8; q.len()];
        let mut ob = OutBuf::new(Some(&mut out));
        o.one_shot(data, &mut ob)?;
        let n = ob.len();
        assert!(n <= q.len());
        out.truncate(n);
        Ok(out)
    }

    /// Multi-part in pieces of the given sizes (cycled), each update through a size query
    /// and, where the output is not empty, a too-small buffer first.
    fn multi(
        mech: &Mechanism,
        attrs: &AttrMap,
        encrypt: bool,
        data: &[u8],
        sizes: &[usize],
    ) -> CkResult<Vec<u8>> {
        let mut o = op(mech, attrs, encrypt)?;
        let mut result = Vec::new();
        let mut rest = data;
        let mut i = 0;
        while !rest.is_empty() {
            let n = sizes[i % sizes.len()].min(rest.len());
            i += 1;
            let (piece, r) = rest.split_at(n);
            rest = r;
            let mut q = OutBuf::new(None);
            o.update(piece, &mut q)?;
            let want = q.len();
            if want > 0 {
                let mut small = vec![0u8; want - 1];
                let mut s = OutBuf::new(Some(&mut small));
                assert_eq!(o.update(piece, &mut s), Err(CKR_BUFFER_TOO_SMALL));
            }
            let mut out = vec![0u8; want];
            let mut ob = OutBuf::new(Some(&mut out));
            o.update(piece, &mut ob)?;
            assert_eq!(ob.len(), want, "update length is exact");
            result.extend_from_slice(&out);
        }
        let mut q = OutBuf::new(None);
        o.finalize(&mut q)?;
        let mut out = vec![0u8; q.len()];
        let mut ob = OutBuf::new(Some(&mut out));
        o.finalize(&mut ob)?;
        let n = ob.len();
        result.extend_from_slice(&out[..n]);
        Ok(result)
    }

    const SIZES: [&[usize]; 6] = [&[1], &[7, 0, 9], &[16], &[15, 17, 33], &[100], &[3, 64, 5]];

    fn check_round_trip(mech: &Mechanism, attrs: &AttrMap, data: &[u8]) -> Vec<u8> {
        let ct = one(mech, attrs, true, data).unwrap();
        assert_eq!(
            one(mech, attrs, false, &ct).unwrap(),
            data,
            "{:#x}",
            mech.mechanism
        );
        for sizes in SIZES {
            assert_eq!(
                multi(mech, attrs, true, data, sizes).unwrap(),
                ct,
                "{sizes:?}"
            );
            assert_eq!(
                multi(mech, attrs, false, &ct, sizes).unwrap(),
                data,
                "{sizes:?}"
            );
        }
        ct
    }

    #[test]
    fn every_mode_multi_part_equals_one_shot() {
        let aes = secret(
            CKK_AES,
            &unhex("000102030405060708090a0b0c0d0e0f1011121314151617"),
        );
        let des3 = secret(
            CKK_DES3,
            &unhex("0123456789abcdeffedcba987654321089abcdef01234567"),
        );
        let cc = secret(CKK_CHACHA20, &[7u8; 32]);
        let iv16 = [9u8; 16];
        for len in [0usize, 1, 15, 16, 17, 31, 32, 48, 100, 257] {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 + 5) as u8).collect();
            let aligned16 = len.is_multiple_of(16);
            let aligned8 = len.is_multiple_of(8);
            if aligned16 {
                check_round_trip(&Mechanism::new(CKM_AES_ECB), &aes, &data);
                check_round_trip(&bytes_mech(CKM_AES_CBC, &iv16), &aes, &data);
            }
            if aligned8 {
                check_round_trip(&Mechanism::new(CKM_DES3_ECB), &des3, &data);
                check_round_trip(&bytes_mech(CKM_DES3_CBC, &iv16[..8]), &des3, &data);
            }
            let ct = check_round_trip(&bytes_mech(CKM_AES_CBC_PAD, &iv16), &aes, &data);
            assert_eq!(ct.len(), (len / 16 + 1) * 16);
            check_round_trip(&bytes_mech(CKM_DES3_CBC_PAD, &iv16[..8]), &des3, &data);
            check_round_trip(&ctr(128, &iv16), &aes, &data);
            let ct = check_round_trip(&gcm(&[1u8; 12], b"aad", 128), &aes, &data);
            assert_eq!(ct.len(), len + 16);
            check_round_trip(&gcm(&[1u8; 200], b"aad", 120), &aes, &data);
            check_round_trip(&gcm(&[1u8; 7], b"", 96), &aes, &data);
            check_round_trip(&chacha(&[2u8; 12], b"header"), &cc, &data);
            if len >= 16 && aligned8 {
                check_round_trip(&Mechanism::new(CKM_AES_KEY_WRAP), &aes, &data);
            }
            if len >= 1 {
                check_round_trip(&Mechanism::new(CKM_AES_KEY_WRAP_KWP), &aes, &data);
            }
        }
    }

    #[test]
    fn known_answers() {
        // SP 800-38A F.2.1 (CBC), F.1.1 (ECB), F.5.1 (CTR).
        let k = secret(CKK_AES, &unhex("2b7e151628aed2a6abf7158809cf4f3c"));
        let p = unhex("6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e51");
        let iv = unhex("000102030405060708090a0b0c0d0e0f");
        assert_eq!(
            one(&bytes_mech(CKM_AES_CBC, &iv), &k, true, &p).unwrap(),
            unhex("7649abac8119b246cee98e9b12e9197d5086cb9b507219ee95db113a917678b2")
        );
        assert_eq!(
            one(&Mechanism::new(CKM_AES_ECB), &k, true, &p).unwrap(),
            unhex("3ad77bb40d7a3660a89ecaf32466ef97f5d3d58503b9699de785895a96fdbaaf")
        );
        let cb = unhex("f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff");
        assert_eq!(
            one(&ctr(128, &cb), &k, true, &p).unwrap(),
            unhex("874d6191b620e3261bef6864990db6ce9806f66b7970fdff8617187bb9fffdff")
        );
        // The GCM specification, test case 4 (AES-128, 60-byte plaintext, AAD).
        let k = secret(CKK_AES, &unhex("feffe9928665731c6d6a8f9467308308"));
        let p = unhex(
            "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
        );
        let aad = unhex("feedfacedeadbeeffeedfacedeadbeefabaddad2");
        let m = gcm(&unhex("cafebabefacedbaddecaf888"), &aad, 128);
        let want = unhex(
            "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091
             5bc94fbc3221a5db94fae95ae7121a47",
        );
        assert_eq!(one(&m, &k, true, &p).unwrap(), want);
        assert_eq!(one(&m, &k, false, &want).unwrap(), p);
        // Test case 6 (60-byte IV).
        let iv6 = unhex(
            "9313225df88406e555909c5aff5269aa6a7a9538534f7da1e4c303d2a318a728c3c0c95156809539fcf0e2429a6b525416aedbf5a0de6a57a637b39b",
        );
        let want6 = unhex(
            "8ce24998625615b603a033aca13fb894be9112a5c3a211a8ba262a3cca7e2ca701e4a9a4fba43c90ccdcb281d48c7c6fd62875d2aca417034c34aee5
             619cc5aefffe0bfa462af43c1699d050",
        );
        assert_eq!(one(&gcm(&iv6, &aad, 128), &k, true, &p).unwrap(), want6);
        // RFC 8439 2.8.2 (ChaCha20-Poly1305).
        let k = secret(
            CKK_CHACHA20,
            &unhex("808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"),
        );
        let m = chacha(
            &unhex("070000004041424344454647"),
            &unhex("50515253c0c1c2c3c4c5c6c7"),
        );
        let p = b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.";
        let ct = one(&m, &k, true, p).unwrap();
        assert_eq!(&ct[..16], &unhex("d31a8d34648e60db7b86afbc53ef7ec2")[..]);
        assert_eq!(
            &ct[ct.len() - 16..],
            &unhex("1ae10b594f09e26a7e902ecbd0600691")[..]
        );
        // Triple-DES against OpenSSL's legacy API.
        let dk = unhex("0123456789abcdeffedcba987654321089abcdef01234567");
        let div = unhex("1234567890abcdef");
        let data = b"sixteen byte msg and some more..";
        let want =
            openssl::symm::encrypt(openssl::symm::Cipher::des_ede3_cbc(), &dk, Some(&div), data)
                .unwrap();
        assert_eq!(
            one(
                &bytes_mech(CKM_DES3_CBC_PAD, &div),
                &secret(CKK_DES3, &dk),
                true,
                data
            )
            .unwrap(),
            want
        );
    }

    #[test]
    fn rfc3394_and_rfc5649() {
        let kek = secret(CKK_AES, &unhex("000102030405060708090A0B0C0D0E0F"));
        let m = Mechanism::new(CKM_AES_KEY_WRAP);
        let cache = KeyCache::default();
        let k = Key {
            attrs: &kek,
            cache: &cache,
        };
        let data = unhex("00112233445566778899AABBCCDDEEFF");
        let want = unhex("1FA68B0A8112B447AEF34BD8FB5A7B829D3E862371D2CFE5");
        assert_eq!(wrap(&m, k, &data).unwrap(), want);
        assert_eq!(unwrap(&m, k, &want).unwrap().to_vec(), data);
        let mut bad = want.clone();
        bad[3] ^= 1;
        assert_eq!(unwrap(&m, k, &bad).err(), Some(CKR_WRAPPED_KEY_INVALID));
        assert_eq!(
            unwrap(&m, k, &want[..20]).err(),
            Some(CKR_WRAPPED_KEY_LEN_RANGE)
        );
        assert_eq!(
            unwrap(&m, k, &want[..16]).err(),
            Some(CKR_WRAPPED_KEY_LEN_RANGE)
        );
        assert_eq!(wrap(&m, k, &data[..12]).err(), Some(CKR_KEY_SIZE_RANGE));
        // 256-bit KEK (RFC 3394 4.6).
        let kek256 = secret(
            CKK_AES,
            &unhex("000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F"),
        );
        let k256 = Key {
            attrs: &kek256,
            cache: &cache,
        };
        let data256 = unhex("00112233445566778899AABBCCDDEEFF000102030405060708090A0B0C0D0E0F");
        assert_eq!(
            wrap(&m, k256, &data256).unwrap(),
            unhex(
                "28C9F404C4B810F4CBCCB35CFB87F8263F5786E2D80ED326CBC7F0E71A99F43BFB988B9B7A02DD21"
            )
        );
        // RFC 5649 section 6.
        let kek = secret(
            CKK_AES,
            &unhex("5840df6e29b02af1ab493b705bf16ea1ae8338f4dcc176a8"),
        );
        let k = Key {
            attrs: &kek,
            cache: &cache,
        };
        let kwp = Mechanism::new(CKM_AES_KEY_WRAP_KWP);
        let key20 = unhex("c37b7e6492584340bed12207808941155068f738");
        let want20 = unhex("138bdeaa9b8fa7fc61f97742e72248ee5ae6ae5360d1ae6a5f54f373fa543b6a");
        assert_eq!(wrap(&kwp, k, &key20).unwrap(), want20);
        assert_eq!(unwrap(&kwp, k, &want20).unwrap().to_vec(), key20);
        let key7 = unhex("466f7250617369");
        let want7 = unhex("afbeb0f07dfbf5419200f2ccb50bb24f");
        assert_eq!(wrap(&kwp, k, &key7).unwrap(), want7);
        assert_eq!(unwrap(&kwp, k, &want7).unwrap().to_vec(), key7);
        let mut bad = want7.clone();
        bad[15] ^= 0x80;
        assert_eq!(unwrap(&kwp, k, &bad).err(), Some(CKR_WRAPPED_KEY_INVALID));
        // KWP decryption through C_Decrypt: the size query gives an upper bound.
        let mut o = op(&kwp, &kek, false).unwrap();
        let mut q = OutBuf::new(None);
        o.one_shot(&want7, &mut q).unwrap();
        assert_eq!(q.len(), 8);
        let mut small = [0u8; 6];
        let mut s = OutBuf::new(Some(&mut small));
        assert_eq!(o.one_shot(&want7, &mut s), Err(CKR_BUFFER_TOO_SMALL));
        assert_eq!(s.len(), 7, "the exact length once known");
        let mut out = [0u8; 7];
        let mut ob = OutBuf::new(Some(&mut out));
        o.one_shot(&want7, &mut ob).unwrap();
        assert_eq!(out.to_vec(), key7);
        // Custom IV.
        let iv = bytes_mech(CKM_AES_KEY_WRAP, &[0xa6; 8]);
        assert_eq!(
            wrap(&iv, k256, &data256).unwrap(),
            wrap(&m, k256, &data256).unwrap()
        );
        let other = bytes_mech(CKM_AES_KEY_WRAP, &[1; 8]);
        let w = wrap(&other, k256, &data256).unwrap();
        assert_eq!(unwrap(&m, k256, &w).err(), Some(CKR_WRAPPED_KEY_INVALID));
        assert_eq!(unwrap(&other, k256, &w).unwrap().to_vec(), data256);
        assert_eq!(
            wrap(&bytes_mech(CKM_AES_KEY_WRAP, &[1; 5]), k256, &data256).err(),
            Some(CKR_MECHANISM_PARAM_INVALID)
        );
    }

    #[test]
    fn wrap_with_block_modes() {
        let cache = KeyCache::default();
        let aes = secret(CKK_AES, &[3u8; 32]);
        let des3 = secret(CKK_DES3, &[5u8; 24]);
        let k = Key {
            attrs: &aes,
            cache: &cache,
        };
        let d = Key {
            attrs: &des3,
            cache: &cache,
        };
        let key = [0x42u8; 20];
        for (m, wk) in [
            (bytes_mech(CKM_AES_CBC_PAD, &[1; 16]), k),
            (bytes_mech(CKM_DES3_CBC_PAD, &[1; 8]), d),
        ] {
            let w = wrap(&m, wk, &key).unwrap();
            assert_eq!(unwrap(&m, wk, &w).unwrap().to_vec(), key.to_vec());
            assert_eq!(
                unwrap(&m, wk, &w[1..]).err(),
                Some(CKR_WRAPPED_KEY_LEN_RANGE)
            );
        }
        let w = wrap(&Mechanism::new(CKM_AES_ECB), k, &[1u8; 32]).unwrap();
        assert_eq!(
            unwrap(&Mechanism::new(CKM_AES_ECB), k, &w)
                .unwrap()
                .to_vec(),
            vec![1u8; 32]
        );
        // Unaligned values are padded with zeros.
        let w = wrap(&Mechanism::new(CKM_AES_ECB), k, &key).unwrap();
        assert_eq!(w.len(), 32);
        let mut want = key.to_vec();
        want.resize(32, 0);
        assert_eq!(
            unwrap(&Mechanism::new(CKM_AES_ECB), k, &w)
                .unwrap()
                .to_vec(),
            want
        );
        let w = wrap(&bytes_mech(CKM_DES3_CBC, &[0; 8]), d, &key).unwrap();
        assert_eq!(w.len(), 24);
        assert_eq!(
            wrap(&Mechanism::new(CKM_AES_ECB), k, b"").unwrap(),
            Vec::<u8>::new()
        );
        assert_eq!(
            wrap(&Mechanism::new(CKM_AES_KEY_WRAP), d, &[0; 16]).err(),
            Some(CKR_WRAPPING_KEY_TYPE_INCONSISTENT)
        );
        assert_eq!(
            unwrap(&Mechanism::new(CKM_AES_KEY_WRAP), d, &[0; 24]).err(),
            Some(CKR_UNWRAPPING_KEY_TYPE_INCONSISTENT)
        );
        assert_eq!(
            wrap(&gcm(&[0; 12], b"", 128), k, &key).err(),
            Some(CKR_MECHANISM_INVALID)
        );
        // A bad padding after decryption.
        let m = bytes_mech(CKM_AES_CBC_PAD, &[1; 16]);
        let raw = one(&bytes_mech(CKM_AES_CBC, &[1; 16]), &aes, true, &[0u8; 32]).unwrap();
        assert_eq!(unwrap(&m, k, &raw).err(), Some(CKR_WRAPPED_KEY_INVALID));
    }

    #[test]
    fn tampering_and_bad_input_rejected() {
        let aes = secret(CKK_AES, &[1u8; 16]);
        let data = b"attack at dawn, bring snacks".to_vec();
        for m in [gcm(&[4; 12], b"aad", 128), gcm(&[4; 12], b"aad", 64)] {
            let ct = one(&m, &aes, true, &data).unwrap();
            for i in [0, ct.len() - 1] {
                let mut bad = ct.clone();
                bad[i] ^= 1;
                assert_eq!(
                    one(&m, &aes, false, &bad).err(),
                    Some(CKR_ENCRYPTED_DATA_INVALID)
                );
                assert_eq!(
                    multi(&m, &aes, false, &bad, &[5]).err(),
                    Some(CKR_ENCRYPTED_DATA_INVALID)
                );
            }
            let other_aad = gcm(&[4; 12], b"aaD", 128);
            assert_eq!(
                one(&other_aad, &aes, false, &ct).err(),
                Some(CKR_ENCRYPTED_DATA_INVALID)
            );
            assert_eq!(
                one(&m, &aes, false, &ct[..7]).err(),
                Some(CKR_ENCRYPTED_DATA_LEN_RANGE)
            );
        }
        let cc = secret(CKK_CHACHA20, &[9u8; 32]);
        let m = chacha(&[1; 12], b"");
        let mut ct = one(&m, &cc, true, &data).unwrap();
        ct[3] ^= 4;
        assert_eq!(
            one(&m, &cc, false, &ct).err(),
            Some(CKR_ENCRYPTED_DATA_INVALID)
        );
        // Decryption withholds all plaintext until the tag verifies.
        let m = gcm(&[4; 12], b"", 128);
        let ct = one(&m, &aes, true, &data).unwrap();
        let mut o = op(&m, &aes, false).unwrap();
        let mut out = vec![0u8; 64];
        let mut ob = OutBuf::new(Some(&mut out));
        o.update(&ct, &mut ob).unwrap();
        assert_eq!(ob.len(), 0);
        // CBC_PAD: bad padding and bad lengths.
        let cbc = bytes_mech(CKM_AES_CBC_PAD, &[0; 16]);
        let raw = one(&bytes_mech(CKM_AES_CBC, &[0; 16]), &aes, true, &[0x11; 32]).unwrap();
        assert_eq!(
            one(&cbc, &aes, false, &raw).err(),
            Some(CKR_ENCRYPTED_DATA_INVALID)
        );
        assert_eq!(
            multi(&cbc, &aes, false, &raw, &[3]).err(),
            Some(CKR_ENCRYPTED_DATA_INVALID)
        );
        assert_eq!(
            one(&cbc, &aes, false, &raw[..31]).err(),
            Some(CKR_ENCRYPTED_DATA_LEN_RANGE)
        );
        assert_eq!(
            one(&cbc, &aes, false, b"").err(),
            Some(CKR_ENCRYPTED_DATA_LEN_RANGE)
        );
        assert_eq!(
            multi(&cbc, &aes, false, &raw[..31], &[8]).err(),
            Some(CKR_ENCRYPTED_DATA_LEN_RANGE)
        );
        let ecb = Mechanism::new(CKM_AES_ECB);
        assert_eq!(
            one(&ecb, &aes, true, &[0; 15]).err(),
            Some(CKR_DATA_LEN_RANGE)
        );
        assert_eq!(
            one(&ecb, &aes, false, &[0; 15]).err(),
            Some(CKR_ENCRYPTED_DATA_LEN_RANGE)
        );
        assert_eq!(
            multi(&ecb, &aes, true, &[0; 17], &[4]).err(),
            Some(CKR_DATA_LEN_RANGE)
        );
        assert_eq!(
            multi(&ecb, &aes, false, &[0; 17], &[4]).err(),
            Some(CKR_ENCRYPTED_DATA_LEN_RANGE)
        );
    }

    #[test]
    fn parameter_and_key_checks() {
        let aes = secret(CKK_AES, &[1u8; 16]);
        let p = |m: &Mechanism| op(m, &aes, true).err();
        for bits in [0, 8, 24, 40, 56, 72, 88, 136, 256] {
            assert_eq!(
                p(&gcm(&[0; 12], b"", bits)),
                Some(CKR_MECHANISM_PARAM_INVALID),
                "{bits}"
            );
        }
        for bits in [32, 64, 96, 104, 112, 120, 128] {
            assert!(p(&gcm(&[0; 12], b"", bits)).is_none(), "{bits}");
        }
        assert_eq!(p(&gcm(b"", b"", 128)), Some(CKR_MECHANISM_PARAM_INVALID));
        assert!(p(&gcm(&[0; 128], b"", 128)).is_none());
        assert!(p(&gcm(&[0; 129], b"", 128)).is_none());
        assert!(p(&gcm(&[0; 256], b"", 32)).is_none());
        assert!(p(&gcm(&[0; 257], b"", 128)).is_none());
        assert_eq!(
            p(&gcm(&vec![0; opencf_abi::GCM_MAX_IV + 1], b"", 128)),
            Some(CKR_MECHANISM_PARAM_INVALID)
        );
        // `ulIvBits` is ignored, whatever it holds.
        let mut m = gcm(&[0; 12], b"", 128);
        for bits in [95, 0, 0x20e7_e5fa] {
            if let MechParam::Gcm { iv_bits, .. } = &mut m.param {
                *iv_bits = bits;
            }
            assert!(p(&m).is_none(), "ulIvBits {bits:#x}");
        }
        assert_eq!(
            p(&bytes_mech(CKM_AES_CBC, &[0; 15])),
            Some(CKR_MECHANISM_PARAM_INVALID)
        );
        assert_eq!(
            p(&Mechanism::new(CKM_AES_CBC)),
            Some(CKR_MECHANISM_PARAM_INVALID)
        );
        assert_eq!(
            p(&bytes_mech(CKM_AES_ECB, &[0; 16])),
            Some(CKR_MECHANISM_PARAM_INVALID)
        );
        assert_eq!(p(&ctr(0, &[0; 16])), Some(CKR_MECHANISM_PARAM_INVALID));
        assert_eq!(p(&ctr(129, &[0; 16])), Some(CKR_MECHANISM_PARAM_INVALID));
        assert_eq!(p(&chacha(&[0; 12], b"")), Some(CKR_KEY_TYPE_INCONSISTENT));
        let cc = secret(CKK_CHACHA20, &[0; 32]);
        assert_eq!(
            op(&chacha(&[0; 8], b""), &cc, true).err(),
            Some(CKR_MECHANISM_PARAM_INVALID)
        );
        assert_eq!(
            op(
                &chacha(&[0; 12], b""),
                &secret(CKK_CHACHA20, &[0; 16]),
                true
            )
            .err(),
            Some(CKR_KEY_SIZE_RANGE)
        );
        assert_eq!(
            op(
                &Mechanism::new(CKM_AES_ECB),
                &secret(CKK_AES, &[0; 20]),
                true
            )
            .err(),
            Some(CKR_KEY_SIZE_RANGE)
        );
        assert_eq!(
            op(
                &Mechanism::new(CKM_AES_ECB),
                &secret(CKK_DES3, &[0; 24]),
                true
            )
            .err(),
            Some(CKR_KEY_TYPE_INCONSISTENT)
        );
        assert_eq!(
            op(
                &Mechanism::new(CKM_DES3_ECB),
                &secret(CKK_DES3, &[0; 16]),
                true
            )
            .err(),
            Some(CKR_KEY_SIZE_RANGE)
        );
        assert_eq!(p(&Mechanism::new(CKM_SHA256)), Some(CKR_MECHANISM_INVALID));
    }

    #[test]
    fn gcm_iv_lengths_match_openssl() {
        let key = [0x5au8; 32];
        let aes = secret(CKK_AES, &key);
        let data = b"some plaintext of some length";
        for ivlen in [1usize, 8, 12, 13, 16, 60, 128] {
            let iv: Vec<u8> = (0..ivlen).map(|i| i as u8).collect();
            let mut tag = [0u8; 16];
            let want = openssl::symm::encrypt_aead(
                openssl::symm::Cipher::aes_256_gcm(),
                &key,
                Some(&iv),
                b"A",
                data,
                &mut tag,
            )
            .unwrap();
            let got = one(&gcm(&iv, b"A", 128), &aes, true, data).unwrap();
            assert_eq!(&got[..data.len()], &want[..], "{ivlen}");
            assert_eq!(&got[data.len()..], &tag[..], "{ivlen}");
        }
    }

    #[test]
    fn ctr_counter_width() {
        let aes = secret(CKK_AES, &[1u8; 16]);
        let mut cb = [0u8; 16];
        cb[15] = 0xfe;
        // 8 counter bits from 0xfe: two blocks left.
        let m = ctr(8, &cb);
        assert!(one(&m, &aes, true, &[0; 32]).is_ok());
        assert_eq!(
            one(&m, &aes, true, &[0; 33]).err(),
            Some(CKR_DATA_LEN_RANGE)
        );
        assert_eq!(
            one(&m, &aes, false, &[0; 33]).err(),
            Some(CKR_ENCRYPTED_DATA_LEN_RANGE)
        );
        assert_eq!(
            multi(&m, &aes, true, &[0; 33], &[10]).err(),
            Some(CKR_DATA_LEN_RANGE)
        );
        // Output equals the full-width counter's while no wrap happens.
        assert_eq!(
            one(&m, &aes, true, &[7; 32]).unwrap(),
            one(&ctr(128, &cb), &aes, true, &[7; 32]).unwrap()
        );
        // The 128-bit counter at its last value: one block.
        let m = ctr(128, &[0xff; 16]);
        assert!(one(&m, &aes, true, &[0; 16]).is_ok());
        assert_eq!(
            one(&m, &aes, true, &[0; 17]).err(),
            Some(CKR_DATA_LEN_RANGE)
        );
        // 64-bit counter: plenty.
        assert!(one(&ctr(64, &[0xff; 16]), &aes, true, &[0; 16]).is_ok());
        assert_eq!(
            one(&ctr(64, &[0xff; 16]), &aes, true, &[0; 17]).err(),
            Some(CKR_DATA_LEN_RANGE)
        );
    }

    #[test]
    fn reinit_reuses_the_key() {
        let aes = secret(CKK_AES, &[8u8; 16]);
        let data = [0x33u8; 16];
        let cases = [
            (gcm(&[1; 12], b"x", 128), gcm(&[2; 12], b"y", 96)),
            (gcm(&[1; 12], b"", 128), gcm(&[2; 20], b"", 128)),
            (
                bytes_mech(CKM_AES_CBC_PAD, &[1; 16]),
                bytes_mech(CKM_AES_CBC_PAD, &[2; 16]),
            ),
            (
                bytes_mech(CKM_AES_CBC, &[1; 16]),
                bytes_mech(CKM_AES_CBC, &[2; 16]),
            ),
            (Mechanism::new(CKM_AES_ECB), Mechanism::new(CKM_AES_ECB)),
            (ctr(32, &[1; 16]), ctr(16, &[2; 16])),
            (
                Mechanism::new(CKM_AES_KEY_WRAP),
                Mechanism::new(CKM_AES_KEY_WRAP),
            ),
        ];
        for encrypt in [true, false] {
            for (a, b) in &cases {
                let input = if encrypt {
                    data.to_vec()
                } else {
                    one(a, &aes, true, &data).unwrap()
                };
                let mut o = op(a, &aes, encrypt).unwrap();
                let mut out = vec![0u8; 64];
                let mut ob = OutBuf::new(Some(&mut out));
                o.one_shot(&input, &mut ob).unwrap();
                let n = ob.len();
                assert_eq!(out[..n].to_vec(), one(a, &aes, encrypt, &input).unwrap());
                // Again with new parameters on the same context.
                let input_b = if encrypt {
                    data.to_vec()
                } else {
                    one(b, &aes, true, &data).unwrap()
                };
                o.reinit(b).unwrap();
                let mut ob = OutBuf::new(Some(&mut out));
                o.one_shot(&input_b, &mut ob).unwrap();
                let n = ob.len();
                assert_eq!(
                    out[..n].to_vec(),
                    one(b, &aes, encrypt, &input_b).unwrap(),
                    "{:#x}",
                    b.mechanism
                );
                // Mid-way abandoned multi-part, then reinit.
                let mut ob = OutBuf::new(Some(&mut out));
                o.reinit(a).unwrap();
                o.update(&input[..5], &mut ob).unwrap();
                o.reinit(b).unwrap();
                let mut ob = OutBuf::new(Some(&mut out));
                o.one_shot(&input_b, &mut ob).unwrap();
                let n = ob.len();
                assert_eq!(out[..n].to_vec(), one(b, &aes, encrypt, &input_b).unwrap());
            }
        }
        let mut o = op(&Mechanism::new(CKM_AES_ECB), &aes, true).unwrap();
        assert_eq!(
            o.reinit(&bytes_mech(CKM_AES_CBC, &[0; 16])),
            Err(CKR_FUNCTION_NOT_SUPPORTED)
        );
        // GCM with IVs on both sides of EVP's limit: another kind of operation.
        let mut o = op(&gcm(&[0; 12], b"", 128), &aes, true).unwrap();
        assert_eq!(
            o.reinit(&gcm(&[0; 129], b"", 128)),
            Err(CKR_FUNCTION_NOT_SUPPORTED)
        );
        let mut o = op(&gcm(&[0; 129], b"", 128), &aes, true).unwrap();
        assert_eq!(
            o.reinit(&gcm(&[0; 12], b"", 128)),
            Err(CKR_FUNCTION_NOT_SUPPORTED)
        );
        o.reinit(&gcm(&[1; 200], b"x", 96)).unwrap();
        let mut out = [0u8; 28];
        o.one_shot(&data, &mut OutBuf::new(Some(&mut out))).unwrap();
        assert_eq!(
            out.to_vec(),
            one(&gcm(&[1; 200], b"x", 96), &aes, true, &data).unwrap()
        );
    }

    #[test]
    fn cbc_pad_decrypt_small_buffers() {
        let aes = secret(CKK_AES, &[8u8; 16]);
        let m = bytes_mech(CKM_AES_CBC_PAD, &[1; 16]);
        let ct = one(&m, &aes, true, &[0x61; 20]).unwrap();
        let mut o = op(&m, &aes, false).unwrap();
        let mut q = OutBuf::new(None);
        o.one_shot(&ct, &mut q).unwrap();
        assert_eq!(q.len(), 32);
        let mut small = [0u8; 19];
        let mut s = OutBuf::new(Some(&mut small));
        assert_eq!(o.one_shot(&ct, &mut s), Err(CKR_BUFFER_TOO_SMALL));
        assert_eq!(s.len(), 20);
        let mut exact = [0u8; 20];
        let mut e = OutBuf::new(Some(&mut exact));
        o.one_shot(&ct, &mut e).unwrap();
        assert_eq!(exact, [0x61; 20]);
        // Final of a multi-part decryption reports the exact length.
        let mut o = op(&m, &aes, false).unwrap();
        let mut out = [0u8; 32];
        let mut ob = OutBuf::new(Some(&mut out));
        o.update(&ct, &mut ob).unwrap();
        assert_eq!(ob.len(), 16);
        let mut q = OutBuf::new(None);
        o.finalize(&mut q).unwrap();
        assert_eq!(q.len(), 4);
    }

    fn msg_op(mech: CK_MECHANISM_TYPE, attrs: &AttrMap, encrypt: bool) -> Box<dyn MessageOp> {
        let cache = KeyCache::default();
        message_init(
            &Mechanism::new(mech),
            Key {
                attrs,
                cache: &cache,
            },
            encrypt,
        )
        .unwrap()
    }

    #[test]
    fn message_based_gcm_and_chacha() {
        let key = [0x11u8; 16];
        let aes = secret(CKK_AES, &key);
        let mut enc = msg_op(CKM_AES_GCM, &aes, true);
        let mut dec = msg_op(CKM_AES_GCM, &aes, false);
        let data = b"message number one";
        let mut seen = std::collections::HashSet::new();
        for (generator, fixed) in [
            (CKG_NO_GENERATE, 0),
            (CKG_GENERATE_COUNTER, 32),
            (CKG_GENERATE_COUNTER, 32),
            (CKG_GENERATE, 20),
            (CKG_GENERATE_RANDOM, 64),
            (CKG_GENERATE_RANDOM, 0),
        ] {
            let mut p = MessageParams::Gcm {
                iv: vec![0xab; 12],
                iv_fixed_bits: fixed,
                iv_generator: generator,
                tag: vec![0; 16],
                tag_bits: 128,
            };
            // Size query: nothing generated, nothing changed.
            let before = p.clone();
            let mut q = OutBuf::new(None);
            enc.message(&mut p, b"aad", data, &mut q).unwrap();
            assert_eq!(q.len(), data.len());
            assert_eq!(p, before);
            let mut ct = vec![0u8; data.len()];
            enc.message(&mut p, b"aad", data, &mut OutBuf::new(Some(&mut ct)))
                .unwrap();
            let MessageParams::Gcm { iv, tag, .. } = &p else {
                unreachable!()
            };
            assert_eq!(tag.len(), 16);
            let fixed_bytes = fixed as usize / 8;
            assert_eq!(&iv[..fixed_bytes], &vec![0xab; fixed_bytes][..]);
            if generator != CKG_NO_GENERATE {
                assert!(seen.insert(iv.clone()), "a generated IV repeats");
            }
            // Same as a one-shot C_Encrypt with that IV.
            let mut whole = ct.clone();
            whole.extend_from_slice(tag);
            assert_eq!(one(&gcm(iv, b"aad", 128), &aes, true, data).unwrap(), whole);
            // Decrypt, then tamper.
            let mut dp = MessageParams::Gcm {
                iv: iv.clone(),
                iv_fixed_bits: 0,
                iv_generator: CKG_NO_GENERATE,
                tag: tag.clone(),
                tag_bits: 128,
            };
            let mut pt = vec![0u8; ct.len()];
            dec.message(&mut dp, b"aad", &ct, &mut OutBuf::new(Some(&mut pt)))
                .unwrap();
            assert_eq!(&pt, data);
            let mut bad = ct.clone();
            bad[0] ^= 1;
            assert_eq!(
                dec.message(&mut dp, b"aad", &bad, &mut OutBuf::new(Some(&mut pt))),
                Err(CKR_ENCRYPTED_DATA_INVALID)
            );
            assert_eq!(pt, vec![0u8; ct.len()], "no plaintext after a bad tag");
        }
        // A 200-byte IV (beyond EVP's limit), generated by the counter.
        let mut p = MessageParams::Gcm {
            iv: vec![0xcd; 200],
            iv_fixed_bits: 64,
            iv_generator: CKG_GENERATE_COUNTER,
            tag: vec![],
            tag_bits: 112,
        };
        let mut ct = vec![0u8; data.len()];
        enc.message(&mut p, b"a", data, &mut OutBuf::new(Some(&mut ct)))
            .unwrap();
        let MessageParams::Gcm { iv, tag, .. } = &p else {
            unreachable!()
        };
        assert_eq!(tag.len(), 14);
        let mut whole = ct.clone();
        whole.extend_from_slice(tag);
        assert_eq!(one(&gcm(iv, b"a", 112), &aes, true, data).unwrap(), whole);
        let mut dp = MessageParams::Gcm {
            iv: iv.clone(),
            iv_fixed_bits: 0,
            iv_generator: CKG_NO_GENERATE,
            tag: tag.clone(),
            tag_bits: 112,
        };
        let mut pt = vec![0u8; ct.len()];
        dec.message(&mut dp, b"a", &ct, &mut OutBuf::new(Some(&mut pt)))
            .unwrap();
        assert_eq!(&pt, data);
        assert_eq!(
            dec.message(&mut dp, b"b", &ct, &mut OutBuf::new(Some(&mut pt))),
            Err(CKR_ENCRYPTED_DATA_INVALID)
        );
        // The counter's values are exhausted.
        let mut small = msg_op(CKM_AES_GCM, &aes, true);
        let mut gen = |fixed| {
            let mut p = MessageParams::Gcm {
                iv: vec![0; 12],
                iv_fixed_bits: fixed,
                iv_generator: CKG_GENERATE_COUNTER,
                tag: vec![],
                tag_bits: 96,
            };
            let mut ct = [0u8; 1];
            small.message(&mut p, b"", b"x", &mut OutBuf::new(Some(&mut ct)))
        };
        assert!(gen(94).is_ok());
        assert!(gen(94).is_ok());
        assert!(gen(94).is_ok());
        assert!(gen(94).is_ok());
        assert_eq!(gen(94), Err(CKR_MECHANISM_PARAM_INVALID));
        assert_eq!(gen(97), Err(CKR_MECHANISM_PARAM_INVALID));

        // ChaCha20-Poly1305.
        let cc = secret(CKK_CHACHA20, &[0x22; 32]);
        let mut enc = msg_op(CKM_CHACHA20_POLY1305, &cc, true);
        let mut dec = msg_op(CKM_CHACHA20_POLY1305, &cc, false);
        let mut p = MessageParams::ChaCha20Poly1305 {
            nonce: vec![3; 12],
            tag: vec![0; 16],
        };
        let mut ct = vec![0u8; data.len()];
        enc.message(&mut p, b"hdr", data, &mut OutBuf::new(Some(&mut ct)))
            .unwrap();
        let MessageParams::ChaCha20Poly1305 { tag, .. } = &p else {
            unreachable!()
        };
        let mut whole = ct.clone();
        whole.extend_from_slice(tag);
        assert_eq!(
            one(&chacha(&[3; 12], b"hdr"), &cc, true, data).unwrap(),
            whole
        );
        let mut pt = vec![0u8; ct.len()];
        dec.message(&mut p, b"hdr", &ct, &mut OutBuf::new(Some(&mut pt)))
            .unwrap();
        assert_eq!(&pt, data);
        assert_eq!(
            dec.message(&mut p, b"hdR", &ct, &mut OutBuf::new(Some(&mut pt))),
            Err(CKR_ENCRYPTED_DATA_INVALID)
        );
        let mut wrong = MessageParams::ChaCha20Poly1305 {
            nonce: vec![3; 12],
            tag: vec![0; 16],
        };
        assert_eq!(
            msg_op(CKM_AES_GCM, &aes, true).message(
                &mut wrong,
                b"",
                b"",
                &mut OutBuf::new(Some(&mut []))
            ),
            Err(CKR_MECHANISM_PARAM_INVALID)
        );
    }

    #[test]
    fn key_generation() {
        let mut t = AttrMap::new();
        let gen = |m, t: &AttrMap| generate_key(&Mechanism::new(m), t);
        assert_eq!(
            gen(CKM_AES_KEY_GEN, &t).err(),
            Some(CKR_TEMPLATE_INCOMPLETE)
        );
        t.set_ulong(CKA_VALUE_LEN, 24);
        let k = gen(CKM_AES_KEY_GEN, &t).unwrap();
        assert_eq!(k.bytes(CKA_VALUE).unwrap().len(), 24);
        assert_eq!(k.ulong(CKA_KEY_TYPE).unwrap(), Some(CKK_AES));
        assert_eq!(k.ulong(CKA_CLASS).unwrap(), Some(CKO_SECRET_KEY));
        assert_eq!(k.ulong(CKA_VALUE_LEN).unwrap(), Some(24));
        assert_ne!(
            k.bytes(CKA_VALUE),
            gen(CKM_AES_KEY_GEN, &t).unwrap().bytes(CKA_VALUE)
        );
        t.set_ulong(CKA_VALUE_LEN, 17);
        assert_eq!(
            gen(CKM_AES_KEY_GEN, &t).err(),
            Some(CKR_ATTRIBUTE_VALUE_INVALID)
        );
        let k = gen(CKM_GENERIC_SECRET_KEY_GEN, &t).unwrap();
        assert_eq!(k.bytes(CKA_VALUE).unwrap().len(), 17);
        t.set_ulong(CKA_VALUE_LEN, 513);
        assert_eq!(
            gen(CKM_GENERIC_SECRET_KEY_GEN, &t).err(),
            Some(CKR_ATTRIBUTE_VALUE_INVALID)
        );
        t.set_ulong(CKA_VALUE_LEN, 0);
        assert_eq!(
            gen(CKM_HKDF_KEY_GEN, &t).err(),
            Some(CKR_ATTRIBUTE_VALUE_INVALID)
        );
        t.set_ulong(CKA_VALUE_LEN, 48);
        let k = gen(CKM_HKDF_KEY_GEN, &t).unwrap();
        assert_eq!(k.ulong(CKA_KEY_TYPE).unwrap(), Some(CKK_HKDF));
        let none = AttrMap::new();
        let k = gen(CKM_CHACHA20_KEY_GEN, &none).unwrap();
        assert_eq!(k.bytes(CKA_VALUE).unwrap().len(), 32);
        assert_eq!(
            gen(CKM_CHACHA20_KEY_GEN, &t).err(),
            Some(CKR_TEMPLATE_INCONSISTENT)
        );
        let k = gen(CKM_DES3_KEY_GEN, &none).unwrap();
        let v = k.bytes(CKA_VALUE).unwrap();
        assert_eq!(v.len(), 24);
        assert!(v.iter().all(|b| b.count_ones() % 2 == 1), "odd parity");
        let mut t = AttrMap::new();
        t.set_ulong(CKA_KEY_TYPE, CKK_DES3);
        t.set_ulong(CKA_VALUE_LEN, 16);
        assert_eq!(
            gen(CKM_AES_KEY_GEN, &t).err(),
            Some(CKR_TEMPLATE_INCONSISTENT)
        );
        let mut t = AttrMap::new();
        t.set_ulong(CKA_KEY_TYPE, CKK_SHA256_HMAC);
        t.set_ulong(CKA_VALUE_LEN, 32);
        let k = gen(CKM_GENERIC_SECRET_KEY_GEN, &t).unwrap();
        assert_eq!(k.ulong(CKA_KEY_TYPE).unwrap(), Some(CKK_SHA256_HMAC));
        assert_eq!(gen(CKM_SHA256, &t).err(), Some(CKR_MECHANISM_INVALID));
    }

    #[test]
    fn imported_keys() {
        let mut a = secret(CKK_AES, &[0; 32]);
        complete_key(CKK_AES, &mut a).unwrap();
        assert_eq!(a.ulong(CKA_VALUE_LEN).unwrap(), Some(32));
        let mut a = secret(CKK_AES, &[0; 31]);
        assert_eq!(
            complete_key(CKK_AES, &mut a),
            Err(CKR_ATTRIBUTE_VALUE_INVALID)
        );
        let mut a = secret(CKK_AES, &[0; 16]);
        a.set_ulong(CKA_VALUE_LEN, 32);
        assert_eq!(
            complete_key(CKK_AES, &mut a),
            Err(CKR_TEMPLATE_INCONSISTENT)
        );
        let mut a = AttrMap::new();
        assert_eq!(complete_key(CKK_AES, &mut a), Err(CKR_TEMPLATE_INCOMPLETE));
        for (kt, ok, bad) in [
            (CKK_DES3, 24, 16),
            (CKK_CHACHA20, 32, 16),
            (CKK_GENERIC_SECRET, 1, 0),
            (CKK_SHA256_HMAC, 100, 0),
            (CKK_HKDF, 64, MAX_SECRET + 1),
        ] {
            let mut a = secret(kt, &vec![1; ok]);
            complete_key(kt, &mut a).unwrap();
            let mut a = secret(kt, &vec![1; bad]);
            assert_eq!(
                complete_key(kt, &mut a),
                Err(CKR_ATTRIBUTE_VALUE_INVALID),
                "{kt}"
            );
        }
        let mut a = secret(CKK_DES, &[0; 8]);
        assert_eq!(
            complete_key(CKK_DES, &mut a),
            Err(CKR_ATTRIBUTE_VALUE_INVALID)
        );
    }

    #[test]
    fn padding_check() {
        assert_eq!(unpad_len(&[1, 2, 3, 4, 5, 6, 7, 1]), Some(7));
        assert_eq!(unpad_len(&[8; 8]), Some(0));
        assert_eq!(unpad_len(&[1, 2, 3, 4, 5, 6, 2, 2]), Some(6));
        assert_eq!(unpad_len(&[1, 2, 3, 4, 5, 6, 7, 0]), None);
        assert_eq!(unpad_len(&[9; 8]), None);
        assert_eq!(unpad_len(&[1, 2, 3, 4, 5, 6, 3, 2]), None);
        assert_eq!(unpad_len(&[1, 2, 3, 4, 5, 3, 2, 3]), None);
    }
}
