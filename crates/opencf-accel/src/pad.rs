//! Signature encodings of PKCS #1 v2.2 (RFC 8017) for requests the engine exponentiates:
//! EMSA-PKCS1-v1_5 (section 9.2) and EMSA-PSS (section 9.1.1), with OpenSSL's hashes and
//! random bytes. Nothing here is secret (the digest of a message, a salt that the signature
//! publishes), so nothing needs to be constant-time.
//!
//! OpenSSL's own padding code could produce the same encoded messages through a key whose
//! private operation is the identity ([`crate::rsa::RsaKey::identity`], which decryption
//! still uses), but a private operation in OpenSSL is a constant-time exponentiation over at
//! least one 64-bit word of exponent: about 64 squarings modulo n, a third of the engine's
//! own cost per request. The tests check every encoding here against OpenSSL's: byte for
//! byte for PKCS #1 v1.5, by OpenSSL's EMSA-PSS verification for PSS (whose salt is random).

use opencf_abi::sys::*;
use opencf_abi::CkResult;
use openssl::md::MdRef;
use openssl::md_ctx::MdCtx;
use openssl::nid::Nid;
use zeroize::Zeroizing;

/// `H(parts[0] ‖ parts[1] ‖ …)`.
fn hash(md: &MdRef, parts: &[&[u8]]) -> CkResult<Vec<u8>> {
    let fail = |_| CKR_FUNCTION_FAILED;
    let mut ctx = MdCtx::new().map_err(fail)?;
    ctx.digest_init(md).map_err(fail)?;
    for p in parts {
        ctx.digest_update(p).map_err(fail)?;
    }
    let mut out = vec![0u8; md.size()];
    ctx.digest_final(&mut out).map_err(fail)?;
    Ok(out)
}

/// The last arc of the SHA-2 object identifiers `2.16.840.1.101.3.4.2.x` (RFC 8017,
/// appendix A.2.4), for the hashes of the `CKM_SHA*_RSA_PKCS` mechanisms.
fn sha2_arc(md: &MdRef) -> Option<u8> {
    Some(match md.type_() {
        Nid::SHA256 => 1,
        Nid::SHA384 => 2,
        Nid::SHA512 => 3,
        Nid::SHA224 => 4,
        _ => return None,
    })
}

/// The DER `DigestInfo` of `digest` made with `md` (RFC 8017, section 9.2, step 2):
/// `SEQUENCE { SEQUENCE { OID, NULL }, OCTET STRING digest }`.
pub fn digest_info(md: &MdRef, digest: &[u8]) -> CkResult<Vec<u8>> {
    let arc = sha2_arc(md).ok_or(CKR_MECHANISM_INVALID)?;
    if digest.len() != md.size() {
        return Err(CKR_DATA_LEN_RANGE);
    }
    let alg = [
        0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, arc, 0x05, 0x00,
    ];
    let mut t = Vec::with_capacity(4 + alg.len() + digest.len());
    t.extend([0x30, (alg.len() + 2 + digest.len()) as u8]);
    t.extend(alg);
    t.extend([0x04, digest.len() as u8]);
    t.extend(digest);
    Ok(t)
}

/// EMSA-PKCS1-v1_5 of `t` (a `DigestInfo`, or what `CKM_RSA_PKCS` was given) for a `k`-byte
/// modulus: `0x00 0x01 0xff… 0x00 ‖ t`, at least eight `0xff` (RFC 8017, section 9.2, steps
/// 3–5).
pub fn pkcs1_v15(t: &[u8], k: usize) -> CkResult<Zeroizing<Vec<u8>>> {
    if t.len() + 11 > k {
        return Err(CKR_DATA_LEN_RANGE);
    }
    let mut em = Zeroizing::new(vec![0xffu8; k]);
    em[0] = 0x00;
    em[1] = 0x01;
    em[k - t.len() - 1] = 0x00;
    em[k - t.len()..].copy_from_slice(t);
    Ok(em)
}

/// `MGF1(seed, out.len())` with `md`, XORed into `out` (RFC 8017, appendix B.2.1).
fn mgf1_xor(md: &MdRef, seed: &[u8], out: &mut [u8]) -> CkResult<()> {
    for (counter, chunk) in out.chunks_mut(md.size()).enumerate() {
        let c = u32::try_from(counter)
            .map_err(|_| CKR_FUNCTION_FAILED)?
            .to_be_bytes();
        let mask = hash(md, &[seed, &c])?;
        chunk.iter_mut().zip(mask).for_each(|(b, m)| *b ^= m);
    }
    Ok(())
}

/// EMSA-PSS of the digest `m_hash` (made with `md`) for a modulus of `mod_bits` bits, with
/// MGF1 over `mgf` and `s_len` random salt bytes (RFC 8017, section 9.1.1), left-padded with
/// zeros to `k` bytes.
pub fn pss(
    md: &MdRef,
    mgf: &MdRef,
    s_len: usize,
    m_hash: &[u8],
    mod_bits: usize,
    k: usize,
) -> CkResult<Zeroizing<Vec<u8>>> {
    let h_len = md.size();
    let em_bits = mod_bits - 1;
    let em_len = em_bits.div_ceil(8);
    if m_hash.len() != h_len {
        return Err(CKR_DATA_LEN_RANGE);
    }
    if em_len < h_len + s_len + 2 || em_len > k {
        return Err(CKR_KEY_SIZE_RANGE);
    }
    let mut salt = vec![0u8; s_len];
    openssl::rand::rand_bytes(&mut salt).map_err(|_| CKR_FUNCTION_FAILED)?;
    // H = Hash(0x00 × 8 ‖ mHash ‖ salt).
    let h = hash(md, &[&[0u8; 8], m_hash, &salt])?;
    // DB = PS ‖ 0x01 ‖ salt, masked with MGF1(H).
    let db_len = em_len - h_len - 1;
    let mut out = Zeroizing::new(vec![0u8; k]);
    let (db, tail) = out[k - em_len..].split_at_mut(db_len);
    db[db_len - s_len - 1] = 0x01;
    db[db_len - s_len..].copy_from_slice(&salt);
    mgf1_xor(mgf, &h, db)?;
    // The leftmost 8·emLen − emBits bits of maskedDB are zero.
    db[0] &= 0xffu8 >> (8 * em_len - em_bits);
    // EM = maskedDB ‖ H ‖ 0xbc.
    tail[..h_len].copy_from_slice(&h);
    tail[h_len] = 0xbc;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rsa::{from_openssl, RsaKey};
    use openssl::md::Md;
    use openssl::pkey_ctx::PkeyCtx;
    use openssl::rsa::{Padding, Rsa};
    use openssl::sign::RsaPssSaltlen;

    fn key(bits: u32) -> RsaKey {
        from_openssl(&Rsa::generate(bits).expect("generate")).expect("engine form")
    }

    /// OpenSSL's EMSA-PKCS1-v1_5 of `input`: a signature with the identity key.
    fn openssl_pkcs1(key: &RsaKey, md: Option<&MdRef>, input: &[u8]) -> Vec<u8> {
        let mut c = PkeyCtx::new(&key.identity).expect("ctx");
        c.sign_init().expect("init");
        if let Some(md) = md {
            c.set_signature_md(md).expect("md");
        }
        c.set_rsa_padding(Padding::PKCS1).expect("padding");
        let mut out = vec![0u8; key.k];
        assert_eq!(c.sign(input, Some(&mut out)).expect("sign"), key.k);
        out
    }

    /// Whether OpenSSL's EMSA-PSS verification accepts `em` for `m_hash` (the identity key's
    /// public operation returns `em` itself).
    fn openssl_pss_ok(
        key: &RsaKey,
        md: &MdRef,
        mgf: &MdRef,
        salt: usize,
        m_hash: &[u8],
        em: &[u8],
    ) -> bool {
        let mut c = PkeyCtx::new(&key.identity).expect("ctx");
        c.verify_init().expect("init");
        c.set_signature_md(md).expect("md");
        c.set_rsa_padding(Padding::PKCS1_PSS).expect("padding");
        c.set_rsa_mgf1_md(mgf).expect("mgf");
        c.set_rsa_pss_saltlen(RsaPssSaltlen::custom(salt as i32))
            .expect("salt");
        c.verify(m_hash, em).unwrap_or(false)
    }

    #[test]
    fn pkcs1_v15_equals_openssl() {
        let key = key(2048);
        for md in [Md::sha224(), Md::sha256(), Md::sha384(), Md::sha512()] {
            for msg in [&b""[..], b"abc", &[0x5a; 1000]] {
                let digest = hash(md, &[msg]).expect("hash");
                let ours = pkcs1_v15(&digest_info(md, &digest).expect("info"), key.k).expect("em");
                assert_eq!(
                    *ours,
                    openssl_pkcs1(&key, Some(md), &digest),
                    "{:?}",
                    md.type_()
                );
            }
        }
        // CKM_RSA_PKCS: the caller's bytes, up to k − 11.
        for len in [0, 1, 35, key.k - 11] {
            let t: Vec<u8> = (0..len).map(|i| i as u8).collect();
            assert_eq!(
                *pkcs1_v15(&t, key.k).expect("em"),
                openssl_pkcs1(&key, None, &t)
            );
        }
        assert_eq!(
            pkcs1_v15(&vec![0; key.k - 10], key.k).err(),
            Some(CKR_DATA_LEN_RANGE)
        );
        assert_eq!(
            digest_info(Md::sha1(), &[0; 20]).err(),
            Some(CKR_MECHANISM_INVALID)
        );
        assert_eq!(
            digest_info(Md::sha256(), &[0; 20]).err(),
            Some(CKR_DATA_LEN_RANGE)
        );
    }

    #[test]
    fn pss_verifies_with_openssl() {
        for bits in [2048, 3072] {
            let key = key(bits);
            for (md, mgf) in [
                (Md::sha256(), Md::sha256()),
                (Md::sha384(), Md::sha1()),
                (Md::sha512(), Md::sha512()),
                (Md::sha224(), Md::sha256()),
            ] {
                let m_hash = hash(md, &[b"message"]).expect("hash");
                let max = key.k - md.size() - 2;
                for salt in [0, 20, md.size(), max] {
                    let em = pss(md, mgf, salt, &m_hash, key.bits, key.k).expect("em");
                    assert_eq!(em.len(), key.k);
                    assert!(
                        openssl_pss_ok(&key, md, mgf, salt, &m_hash, &em),
                        "{bits} {salt}"
                    );
                    // The check can fail: another digest, or one byte changed.
                    let other = hash(md, &[b"messagf"]).expect("hash");
                    assert!(!openssl_pss_ok(&key, md, mgf, salt, &other, &em));
                    let mut bad = em.to_vec();
                    bad[key.k / 2] ^= 1;
                    assert!(!openssl_pss_ok(&key, md, mgf, salt, &m_hash, &bad));
                }
                // Two encodings of the same digest differ (a random salt).
                let a = pss(md, mgf, 20, &m_hash, key.bits, key.k).expect("em");
                let b = pss(md, mgf, 20, &m_hash, key.bits, key.k).expect("em");
                assert_ne!(*a, *b);
                assert_eq!(
                    pss(md, mgf, max + 1, &m_hash, key.bits, key.k).err(),
                    Some(CKR_KEY_SIZE_RANGE)
                );
                assert_eq!(
                    pss(md, mgf, 20, &m_hash[1..], key.bits, key.k).err(),
                    Some(CKR_DATA_LEN_RANGE)
                );
            }
        }
    }
}
