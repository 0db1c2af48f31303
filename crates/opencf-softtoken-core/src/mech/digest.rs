//! Message digests: SHA-1, SHA-224/256/384/512 and SHA3-224/256/384/512.
//!
//! SHA-1 and SHA-2 run on OpenSSL's `SHA*_Init/Update/Final` through
//! [`opencf_abi::ossl_sym::Sha`], whose running state can be exported: `C_GetOperationState`
//! works for them. SHA-3 runs on an `EVP_MD_CTX` (the algorithm fetched once per process); its
//! state is internal to OpenSSL and `C_GetOperationState` answers `CKR_STATE_UNSAVEABLE`.
//!
//! Saved state layout: the magic `OCFD`, a format version byte (1), the mechanism as a
//! little-endian `CK_ULONG`, then [`Sha::export`]'s bytes. [`restore`] checks every part and
//! answers `CKR_SAVED_STATE_INVALID` for anything else.

use super::{ossl_err, DigestOp};
use opencf_abi::ossl_sym::{Sha, ShaKind};
use opencf_abi::sys::*;
use opencf_abi::{CkResult, MechParam, Mechanism, OutBuf};
use openssl::hash::MessageDigest;
use openssl::md::Md;
use openssl::md_ctx::MdCtx;
use std::ffi::CStr;
use std::sync::OnceLock;

/// The OpenSSL digest of a hash mechanism (`CKM_SHA_1`, `CKM_SHA256`, `CKM_SHA3_256`, …);
/// `None` for anything else.
pub fn md_for(m: CK_MECHANISM_TYPE) -> Option<MessageDigest> {
    Some(match m {
        CKM_SHA_1 => MessageDigest::sha1(),
        CKM_SHA224 => MessageDigest::sha224(),
        CKM_SHA256 => MessageDigest::sha256(),
        CKM_SHA384 => MessageDigest::sha384(),
        CKM_SHA512 => MessageDigest::sha512(),
        CKM_SHA3_224 => MessageDigest::sha3_224(),
        CKM_SHA3_256 => MessageDigest::sha3_256(),
        CKM_SHA3_384 => MessageDigest::sha3_384(),
        CKM_SHA3_512 => MessageDigest::sha3_512(),
        _ => return None,
    })
}

/// OpenSSL's name of a hash mechanism's digest (for `EVP_MAC` and `EVP_KDF` parameters).
pub(crate) fn ossl_name(m: CK_MECHANISM_TYPE) -> Option<&'static CStr> {
    Some(match m {
        CKM_SHA_1 => c"SHA1",
        CKM_SHA224 => c"SHA224",
        CKM_SHA256 => c"SHA256",
        CKM_SHA384 => c"SHA384",
        CKM_SHA512 => c"SHA512",
        CKM_SHA3_224 => c"SHA3-224",
        CKM_SHA3_256 => c"SHA3-256",
        CKM_SHA3_384 => c"SHA3-384",
        CKM_SHA3_512 => c"SHA3-512",
        _ => return None,
    })
}

/// Output length in bytes of a hash mechanism.
pub(crate) fn output_len(m: CK_MECHANISM_TYPE) -> Option<usize> {
    Some(match m {
        CKM_SHA_1 => 20,
        CKM_SHA224 | CKM_SHA3_224 => 28,
        CKM_SHA256 | CKM_SHA3_256 => 32,
        CKM_SHA384 | CKM_SHA3_384 => 48,
        CKM_SHA512 | CKM_SHA3_512 => 64,
        _ => return None,
    })
}

fn sha_kind(m: CK_MECHANISM_TYPE) -> Option<ShaKind> {
    Some(match m {
        CKM_SHA_1 => ShaKind::Sha1,
        CKM_SHA224 => ShaKind::Sha224,
        CKM_SHA256 => ShaKind::Sha256,
        CKM_SHA384 => ShaKind::Sha384,
        CKM_SHA512 => ShaKind::Sha512,
        _ => return None,
    })
}

/// The SHA-3 digests, fetched once.
fn sha3_md(m: CK_MECHANISM_TYPE) -> CkResult<&'static Md> {
    static CELLS: [OnceLock<Option<Md>>; 4] = [
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
    ];
    let (i, name) = match m {
        CKM_SHA3_224 => (0, "SHA3-224"),
        CKM_SHA3_256 => (1, "SHA3-256"),
        CKM_SHA3_384 => (2, "SHA3-384"),
        CKM_SHA3_512 => (3, "SHA3-512"),
        _ => return Err(CKR_MECHANISM_INVALID),
    };
    CELLS[i]
        .get_or_init(|| Md::fetch(None, name, None).ok())
        .as_ref()
        .ok_or(CKR_FUNCTION_FAILED)
}

const STATE_MAGIC: &[u8; 4] = b"OCFD";
const STATE_VERSION: u8 = 1;
const MECH_LEN: usize = std::mem::size_of::<CK_MECHANISM_TYPE>();
const STATE_HEADER: usize = 4 + 1 + MECH_LEN;

/// `C_DigestInit`: a digest of `mech` (which takes no parameter).
pub fn init(mech: &Mechanism) -> CkResult<Box<dyn DigestOp>> {
    match &mech.param {
        MechParam::None => {}
        MechParam::Bytes(b) if b.is_empty() => {}
        _ => return Err(CKR_MECHANISM_PARAM_INVALID),
    }
    if let Some(kind) = sha_kind(mech.mechanism) {
        return Ok(Box::new(ShaOp {
            mech: mech.mechanism,
            sha: Sha::new(kind),
        }));
    }
    let md = sha3_md(mech.mechanism)?;
    let mut ctx = MdCtx::new().map_err(ossl_err)?;
    ctx.digest_init(md).map_err(ossl_err)?;
    Ok(Box::new(Sha3Op {
        ctx,
        len: md.size(),
    }))
}

/// `C_SetOperationState` for a digest: rebuilds what [`DigestOp::state`] saved.
pub fn restore(state: &[u8]) -> CkResult<Box<dyn DigestOp>> {
    let mech = saved_state_mechanism(state).ok_or(CKR_SAVED_STATE_INVALID)?;
    let kind = sha_kind(mech).ok_or(CKR_SAVED_STATE_INVALID)?;
    let sha = Sha::import(kind, &state[STATE_HEADER..]).ok_or(CKR_SAVED_STATE_INVALID)?;
    Ok(Box::new(ShaOp { mech, sha }))
}

/// The mechanism a state [`restore`] would take names, if it is in the layout the token saves
/// (the framework checks it against its policy before it hands the state on); `None`
/// otherwise. The rest of the state is not checked here.
pub fn saved_state_mechanism(state: &[u8]) -> Option<CK_MECHANISM_TYPE> {
    if state.len() < STATE_HEADER || &state[..4] != STATE_MAGIC || state[4] != STATE_VERSION {
        return None;
    }
    let mut m = [0u8; MECH_LEN];
    m.copy_from_slice(&state[5..STATE_HEADER]);
    Some(CK_MECHANISM_TYPE::from_le_bytes(m))
}

/// SHA-1 / SHA-2.
struct ShaOp {
    mech: CK_MECHANISM_TYPE,
    sha: Sha,
}

impl DigestOp for ShaOp {
    fn update(&mut self, data: &[u8]) -> CkResult<()> {
        self.sha.update(data);
        Ok(())
    }

    fn finalize(&mut self, out: &mut OutBuf) -> CkResult<()> {
        let n = self.sha.kind().output_len();
        if let Some(buf) = out.reserve(n)? {
            buf.copy_from_slice(&self.sha.finish()[..n]);
        }
        Ok(())
    }

    fn one_shot(&mut self, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        let n = self.sha.kind().output_len();
        if let Some(buf) = out.reserve(n)? {
            self.sha.update(data);
            buf.copy_from_slice(&self.sha.finish()[..n]);
        }
        Ok(())
    }

    fn state(&self) -> CkResult<Vec<u8>> {
        let body = self.sha.export();
        let mut v = Vec::with_capacity(STATE_HEADER + body.len());
        v.extend_from_slice(STATE_MAGIC);
        v.push(STATE_VERSION);
        v.extend_from_slice(&self.mech.to_le_bytes());
        v.extend_from_slice(&body);
        Ok(v)
    }
}

/// SHA-3 (state not saveable).
struct Sha3Op {
    ctx: MdCtx,
    len: usize,
}

impl Sha3Op {
    fn finish_into(&mut self, buf: &mut [u8]) -> CkResult<()> {
        let mut tmp = [0u8; 64];
        let n = self.ctx.digest_final(&mut tmp).map_err(ossl_err)?;
        if n != self.len || buf.len() != n {
            return Err(CKR_FUNCTION_FAILED);
        }
        buf.copy_from_slice(&tmp[..n]);
        Ok(())
    }
}

impl DigestOp for Sha3Op {
    fn update(&mut self, data: &[u8]) -> CkResult<()> {
        self.ctx.digest_update(data).map_err(ossl_err)
    }

    fn finalize(&mut self, out: &mut OutBuf) -> CkResult<()> {
        match out.reserve(self.len)? {
            Some(buf) => self.finish_into(buf),
            None => Ok(()),
        }
    }

    fn one_shot(&mut self, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        match out.reserve(self.len)? {
            Some(buf) => {
                self.ctx.digest_update(data).map_err(ossl_err)?;
                self.finish_into(buf)
            }
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn digest(m: CK_MECHANISM_TYPE, data: &[u8]) -> Vec<u8> {
        let mut op = init(&Mechanism::new(m)).unwrap();
        let mut out = vec![0u8; 64];
        let mut ob = OutBuf::new(Some(&mut out));
        op.one_shot(data, &mut ob).unwrap();
        let n = ob.len();
        out.truncate(n);
        out
    }

    const ALL: [CK_MECHANISM_TYPE; 9] = [
        CKM_SHA_1,
        CKM_SHA224,
        CKM_SHA256,
        CKM_SHA384,
        CKM_SHA512,
        CKM_SHA3_224,
        CKM_SHA3_256,
        CKM_SHA3_384,
        CKM_SHA3_512,
    ];

    #[test]
    fn known_answers_abc() {
        // FIPS 180-4 / FIPS 202 examples for "abc".
        assert_eq!(
            hex(&digest(CKM_SHA_1, b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(
            hex(&digest(CKM_SHA256, b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hex(&digest(CKM_SHA3_256, b"abc")),
            "3a985da74fe225b2045c172d6bd390bd855f086e3e9d525b46bfe24511431532"
        );
        assert_eq!(
            hex(&digest(CKM_SHA224, b"abc")),
            "23097d223405d8228642a477bda255b32aadbce4bda0b3f7e36c9da7"
        );
        assert!(hex(&digest(CKM_SHA384, b"abc")).starts_with("cb00753f45a35e8bb5a03d699ac65007"));
        assert!(hex(&digest(CKM_SHA512, b"abc")).starts_with("ddaf35a193617abacc417349ae204131"));
    }

    #[test]
    fn multi_part_equals_one_shot_and_matches_openssl() {
        let data: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        for m in ALL {
            let want = openssl::hash::hash(md_for(m).unwrap(), &data).unwrap();
            assert_eq!(digest(m, &data), want.to_vec());
            let mut op = init(&Mechanism::new(m)).unwrap();
            for c in data.chunks(77) {
                op.update(c).unwrap();
            }
            // Size query, then too small, then right.
            let mut q = OutBuf::new(None);
            op.finalize(&mut q).unwrap();
            assert_eq!(q.len(), output_len(m).unwrap());
            let mut small = [0u8; 4];
            let mut s = OutBuf::new(Some(&mut small));
            assert_eq!(op.finalize(&mut s), Err(CKR_BUFFER_TOO_SMALL));
            let mut out = vec![0u8; q.len()];
            let mut ob = OutBuf::new(Some(&mut out));
            op.finalize(&mut ob).unwrap();
            assert_eq!(out, want.to_vec(), "{m:#x}");
        }
    }

    #[test]
    fn state_save_and_restore() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 13) as u8).collect();
        for m in ALL {
            let mut op = init(&Mechanism::new(m)).unwrap();
            op.update(&data[..333]).unwrap();
            let st = match op.state() {
                Ok(s) => s,
                Err(e) => {
                    assert!(sha_kind(m).is_none());
                    assert_eq!(e, CKR_STATE_UNSAVEABLE);
                    continue;
                }
            };
            let mut r = restore(&st).unwrap();
            r.update(&data[333..]).unwrap();
            let mut out = vec![0u8; 64];
            let mut ob = OutBuf::new(Some(&mut out));
            r.finalize(&mut ob).unwrap();
            let n = ob.len();
            assert_eq!(&out[..n], &digest(m, &data)[..], "{m:#x}");
            // The original continues independently.
            op.update(&data[333..]).unwrap();
            let mut out2 = vec![0u8; 64];
            let mut ob2 = OutBuf::new(Some(&mut out2));
            op.finalize(&mut ob2).unwrap();
            assert_eq!(out, out2);
            // Garbage is refused, never trusted.
            assert_eq!(
                restore(&st[..st.len() - 1]).err(),
                Some(CKR_SAVED_STATE_INVALID)
            );
            assert_eq!(restore(b"").err(), Some(CKR_SAVED_STATE_INVALID));
            let mut bad = st.clone();
            bad[0] ^= 1;
            assert_eq!(restore(&bad).err(), Some(CKR_SAVED_STATE_INVALID));
            let mut bad = st.clone();
            bad[5..STATE_HEADER].copy_from_slice(&CKM_SHA3_256.to_le_bytes());
            assert_eq!(restore(&bad).err(), Some(CKR_SAVED_STATE_INVALID));
        }
    }

    #[test]
    fn parameter_refused() {
        let m = Mechanism {
            mechanism: CKM_SHA256,
            param: MechParam::Ulong(3),
        };
        assert_eq!(init(&m).err(), Some(CKR_MECHANISM_PARAM_INVALID));
        assert_eq!(
            init(&Mechanism::new(CKM_AES_ECB)).err(),
            Some(CKR_MECHANISM_INVALID)
        );
    }
}
