//! The bulk AES-GCM engine of `libopencf_accel.so` through its C ABI (`cryptoki` as the
//! consumer), cross-checked against OpenSSL's single-threaded AES-GCM and, for IVs longer than
//! OpenSSL's `EVP` takes, against a plain reference implementation of SP 800-38D written here
//! (AES from OpenSSL's ECB, counters and GHASH by the book).
//!
//! `OPENCF_ACCEL_BULK_PARTS` forces the number of parts (threads) per operation, so that
//! small inputs exercise many part boundaries; the large cases also run with the provider's
//! own choice. Every encryption is decrypted back, and a corrupted ciphertext or tag must
//! answer `CKR_ENCRYPTED_DATA_INVALID`. `OPENCF_ACCEL_GCM_CASES` sets the number of random
//! cases (default 400).
//!
//! Build first: `cargo build --release -p opencf-accel` (cargo test builds the library too).

mod common;

use common::data::{aes_key, below, force_parts, pick, random};
use common::{module, start};
use cryptoki::error::{Error, RvError};
use cryptoki::mechanism::aead::GcmParams;
use cryptoki::mechanism::{Mechanism, MechanismType};
use cryptoki::object::{Attribute, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::Session;
use opencf_accel::gf128;
use openssl::cipher::{Cipher, CipherRef};
use openssl::cipher_ctx::CipherCtx;

const TAG_BITS: [u64; 7] = [32, 64, 96, 104, 112, 120, 128];

/// Whether the provider offers `CKM_AES_GCM` here; prints why not.
fn bulk_here() -> bool {
    let p = module();
    let slot = p.get_slots_with_token().unwrap()[0];
    let listed = p
        .get_mechanism_list(slot)
        .unwrap()
        .contains(&MechanismType::AES_GCM);
    assert_eq!(
        listed,
        opencf_accel::gcm::available(),
        "CKM_AES_GCM is listed exactly when the bulk engine is offered"
    );
    if !listed {
        eprintln!("SKIP: no bulk engine here (one core, or OPENCF_ACCEL_DISABLE=bulk)");
    }
    listed
}

fn gcm_cipher(key: &[u8]) -> &'static CipherRef {
    match key.len() {
        16 => Cipher::aes_128_gcm(),
        24 => Cipher::aes_192_gcm(),
        _ => Cipher::aes_256_gcm(),
    }
}

/// OpenSSL's single-threaded AES-GCM: ciphertext then tag (IV up to 128 bytes).
fn openssl_seal(key: &[u8], iv: &[u8], aad: &[u8], pt: &[u8], tag_len: usize) -> Vec<u8> {
    let mut c = CipherCtx::new().unwrap();
    c.encrypt_init(Some(gcm_cipher(key)), Some(key), None)
        .unwrap();
    c.set_iv_length(iv.len()).unwrap();
    c.encrypt_init(None, None, Some(iv)).unwrap();
    c.cipher_update(aad, None).unwrap();
    let mut out = vec![0u8; pt.len() + tag_len];
    let mut done = 0;
    for piece in pt.chunks(1 << 20) {
        done += c
            .cipher_update(piece, Some(&mut out[done..done + piece.len()]))
            .unwrap();
    }
    c.cipher_final(&mut []).unwrap();
    c.tag(&mut out[done..]).unwrap();
    out
}

/// AES-ECB of each block with `key` (the reference's block cipher).
fn ecb(key: &[u8], blocks: &[u128]) -> Vec<u128> {
    let cipher = match key.len() {
        16 => Cipher::aes_128_ecb(),
        24 => Cipher::aes_192_ecb(),
        _ => Cipher::aes_256_ecb(),
    };
    let input: Vec<u8> = blocks.iter().flat_map(|b| b.to_be_bytes()).collect();
    let mut c = CipherCtx::new().unwrap();
    c.encrypt_init(Some(cipher), Some(key), None).unwrap();
    c.set_padding(false);
    let mut out = vec![0u8; input.len() + 16];
    let n = c.cipher_update(&input, Some(&mut out)).unwrap();
    out[..n]
        .chunks(16)
        .map(|b| u128::from_be_bytes(b.try_into().unwrap()))
        .collect()
}

/// The reference's field multiplication: SP 800-38D Algorithm 1, with branches.
fn ref_mul(x: u128, y: u128) -> u128 {
    let mut z = 0;
    let mut v = y;
    for i in 0..128 {
        if x & (1 << (127 - i)) != 0 {
            z ^= v;
        }
        v = if v & 1 == 1 {
            (v >> 1) ^ (0xe1 << 120)
        } else {
            v >> 1
        };
    }
    z
}

fn ref_ghash(h: u128, mut y: u128, data: &[u8]) -> u128 {
    for c in data.chunks(16) {
        let mut b = [0u8; 16];
        b[..c.len()].copy_from_slice(c);
        y = ref_mul(y ^ u128::from_be_bytes(b), h);
    }
    y
}

/// The reference's pre-counter block of `iv` under `key`.
fn ref_j0(key: &[u8], iv: &[u8]) -> u128 {
    if iv.len() == 12 {
        let mut b = [0u8; 16];
        b[..12].copy_from_slice(iv);
        b[15] = 1;
        return u128::from_be_bytes(b);
    }
    let h = ecb(key, &[0])[0];
    ref_mul(ref_ghash(h, 0, iv) ^ (iv.len() as u128 * 8), h)
}

/// AES-GCM by the book (SP 800-38D, 7.1), any IV length: ciphertext then tag.
fn reference_seal(key: &[u8], iv: &[u8], aad: &[u8], pt: &[u8], tag_len: usize) -> Vec<u8> {
    let h = ecb(key, &[0])[0];
    let j0 = ref_j0(key, iv);
    let inc32 =
        |x: u128, k: usize| (x & !0xffff_ffff) | u128::from((x as u32).wrapping_add(k as u32));
    let counters: Vec<u128> = (0..pt.len().div_ceil(16))
        .map(|i| inc32(j0, i + 1))
        .collect();
    let stream = ecb(key, &counters);
    let mut out: Vec<u8> = pt
        .iter()
        .enumerate()
        .map(|(i, b)| b ^ stream[i / 16].to_be_bytes()[i % 16])
        .collect();
    let y = ref_ghash(h, ref_ghash(h, 0, aad), &out);
    let lengths = ((aad.len() as u128 * 8) << 64) | (pt.len() as u128 * 8);
    let s = ref_mul(y ^ lengths, h);
    let tag = (ecb(key, &[j0])[0] ^ s).to_be_bytes();
    out.extend_from_slice(&tag[..tag_len]);
    out
}

fn mech<'a>(iv: &'a mut [u8], aad: &'a [u8], tag_bits: u64) -> Mechanism<'a> {
    Mechanism::AesGcm(GcmParams::new(iv, aad, tag_bits.into()).unwrap())
}

fn rv(r: Result<Vec<u8>, Error>) -> RvError {
    match r {
        Err(Error::Pkcs11(e, _)) => e,
        other => panic!("expected a PKCS#11 error, got {other:?}"),
    }
}

/// One case: `C_Encrypt` through the provider must equal `want`, `C_Decrypt` must give the
/// plaintext back, and a corrupted byte must answer `CKR_ENCRYPTED_DATA_INVALID`.
fn check(s: &Session, k: ObjectHandle, iv: &[u8], aad: &[u8], pt: &[u8], bits: u64, want: &[u8]) {
    let what = format!(
        "iv {} B, aad {} B, data {} B, tag {bits} bits",
        iv.len(),
        aad.len(),
        pt.len()
    );
    let mut ivm = iv.to_vec();
    let got = s
        .encrypt(&mech(&mut ivm, aad, bits), k, pt)
        .unwrap_or_else(|e| panic!("C_Encrypt ({what}): {e:?}"));
    assert!(
        got == want,
        "ciphertext and tag differ from the reference ({what})"
    );
    let back = s
        .decrypt(&mech(&mut ivm, aad, bits), k, &got)
        .unwrap_or_else(|e| panic!("C_Decrypt ({what}): {e:?}"));
    assert!(back == pt, "decryption gives the plaintext back ({what})");
    let mut bad = got.clone();
    let at = below(bad.len());
    bad[at] ^= 1 << below(8);
    assert_eq!(
        rv(s.decrypt(&mech(&mut ivm, aad, bits), k, &bad)),
        RvError::EncryptedDataInvalid,
        "a corrupted byte is refused ({what})"
    );
}

/// [`check`] with each number of pieces forced in turn (`None`: the provider's choice).
fn check_pieces(
    s: &Session,
    k: ObjectHandle,
    c: (&[u8], &[u8], &[u8]),
    bits: u64,
    want: &[u8],
    pieces: &[Option<usize>],
) {
    let (iv, aad, pt) = c;
    for p in pieces {
        force_parts(*p);
        check(s, k, iv, aad, pt, bits, want);
    }
    force_parts(None);
}

fn case_cases() -> usize {
    std::env::var("OPENCF_ACCEL_GCM_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400)
}

#[test]
fn random_cases_match_openssl() {
    let Some((_g, s)) = start(bulk_here) else {
        return;
    };
    let n = case_cases();
    for i in 0..n {
        let key = random(pick(&[16, 24, 32]));
        let k = aes_key(&s, &key);
        let iv = random(pick(&[12, 12, 1, 8, 13, 16, 17, 60, 128, 1 + below(128)]));
        let aad = random(pick(&[0, 0, 1, 15, 16, 17, 33, below(200)]));
        let len = pick(&[0, 1, 15, 16, 17, 31, 32, 33, 255, 4095, 4097, below(20_000)]);
        let pt = random(len);
        let bits = pick(&TAG_BITS);
        let want = openssl_seal(&key, &iv, &aad, &pt, bits as usize / 8);
        let pieces = [Some(pick(&[1, 2, 3, 4, 7]))];
        check_pieces(&s, k, (&iv, &aad, &pt), bits, &want, &pieces);
        s.destroy_object(k).unwrap();
        if i % 100 == 99 {
            eprintln!("{} random cases equal OpenSSL's", i + 1);
        }
    }
    force_parts(None);
}

#[test]
fn large_inputs_match_openssl() {
    let Some((_g, s)) = start(bulk_here) else {
        return;
    };
    let key = random(16);
    let k = aes_key(&s, &key);
    for (len, iv_len) in [
        ((1 << 20) - 1, 12),
        ((4 << 20) + 17, 12),
        (6 << 20, 1),
        ((3 << 20) + 5, 40),
    ] {
        let pt = random(len);
        let iv = random(iv_len);
        let aad = random(below(64));
        let want = openssl_seal(&key, &iv, &aad, &pt, 16);
        let pieces = [None, Some(2), Some(3), Some(5)];
        check_pieces(&s, k, (&iv, &aad, &pt), 128, &want, &pieces);
    }
}

#[test]
fn long_ivs_match_the_reference() {
    let Some((_g, s)) = start(bulk_here) else {
        return;
    };
    for iv_len in [129, 200, 1000, 65536] {
        let key = random(pick(&[16, 32]));
        let k = aes_key(&s, &key);
        let iv = random(iv_len);
        let aad = random(below(50));
        let pt = random(below(3000));
        let want = reference_seal(&key, &iv, &aad, &pt, 12);
        check_pieces(&s, k, (&iv, &aad, &pt), 96, &want, &[Some(1), Some(3)]);
    }
    // The reference agrees with OpenSSL where both apply.
    let key = random(24);
    let (iv, aad, pt) = (random(77), random(20), random(1000));
    assert_eq!(
        reference_seal(&key, &iv, &aad, &pt, 16),
        openssl_seal(&key, &iv, &aad, &pt, 16)
    );
    force_parts(None);
}

/// A 16-byte IV whose pre-counter block is `z` under `key`: `J0 = IV·H² ⊕ L·H`.
fn iv_with_j0(key: &[u8], z: u128) -> Vec<u8> {
    let h = ecb(key, &[0])[0];
    let lh = gf128::mul(gf128::lengths(0, 16), h);
    let inv = gf128::inverse(h);
    gf128::mul(z ^ lh, gf128::mul(inv, inv))
        .to_be_bytes()
        .to_vec()
}

#[test]
fn counter_wrap_matches_openssl() {
    let Some((_g, s)) = start(bulk_here) else {
        return;
    };
    for low in [0xffff_fff0_u32, 0xffff_ffdf, 0xffff_ffff, 0xffff_fffe] {
        let key = random(16);
        let k = aes_key(&s, &key);
        let top = u128::from_be_bytes(random(16).try_into().unwrap()) & !0xffff_ffff;
        let iv = iv_with_j0(&key, top | u128::from(low));
        assert_eq!(
            ref_j0(&key, &iv) as u32,
            low,
            "the crafted IV gives the wanted counter"
        );
        // 64 blocks and 5 bytes: the low 32 bits of the counter wrap inside the data; with
        // two parts and 0xffffffdf the second part starts exactly at counter 0.
        let pt = random(64 * 16 + 5);
        let aad = random(21);
        let want = openssl_seal(&key, &iv, &aad, &pt, 16);
        assert_eq!(want, reference_seal(&key, &iv, &aad, &pt, 16));
        let pieces = [1, 2, 3, 4, 5, 65].map(Some);
        check_pieces(&s, k, (&iv, &aad, &pt), 128, &want, &pieces);
    }
}

#[test]
fn multi_part_matches_openssl() {
    let Some((_g, s)) = start(bulk_here) else {
        return;
    };
    // Updates of any length, with 1 to 3 pieces forced (so that short updates are split
    // too, mid-block and across stretches), or large ones (up to 1.5 MiB) with the
    // provider's own choice, which splits those of 256 KiB and more; some messages are AAD
    // alone.
    for case in 0..80 {
        let key = random(pick(&[16, 24, 32]));
        let k = aes_key(&s, &key);
        let mut iv = random(pick(&[12, 7, 300]));
        let aad = random(below(40));
        let large = case % 4 == 3;
        let pt = match case % 10 {
            0 => Vec::new(),
            _ if large => random(below(1_500_000)),
            _ => random(below(50_000)),
        };
        let bits = pick(&TAG_BITS);
        let want = reference_seal(&key, &iv, &aad, &pt, bits as usize / 8);
        force_parts((!large).then(|| pick(&[1, 2, 3])));
        s.encrypt_init(&mech(&mut iv, &aad, bits), k).unwrap();
        let mut got = Vec::new();
        let mut rest = &pt[..];
        while !rest.is_empty() {
            let cut = if large && below(2) == 0 {
                // A length just past a block boundary, or a mid-block one.
                (262_144 + below(32)).min(rest.len())
            } else {
                below(rest.len() + 1).max(1)
            };
            let (a, b) = rest.split_at(cut);
            got.extend(s.encrypt_update(a).unwrap());
            rest = b;
        }
        got.extend(s.encrypt_final().unwrap());
        assert!(
            got == want,
            "multi-part encryption equals the reference (case {case}, {} bytes, AAD {})",
            pt.len(),
            aad.len()
        );
        for corrupt in [false, true] {
            let mut input = got.clone();
            if corrupt {
                let at = below(input.len());
                input[at] ^= 0x80;
            }
            s.decrypt_init(&mech(&mut iv, &aad, bits), k).unwrap();
            let mut back = Vec::new();
            for piece in input.chunks(below(input.len() + 1).max(1)) {
                let out = s.decrypt_update(piece).unwrap();
                assert!(
                    out.is_empty(),
                    "nothing is released before the tag verifies"
                );
                back.extend(out);
            }
            match s.decrypt_final() {
                Ok(out) if !corrupt => {
                    back.extend(out);
                    assert!(back == pt, "multi-part decryption gives the plaintext");
                }
                r => assert_eq!(rv(r), RvError::EncryptedDataInvalid, "corrupted: refused"),
            }
        }
    }
    force_parts(None);
}

/// Multi-part encryptions on three threads at once, each in its own session, with large
/// updates: their pieces share the provider's pool (and its count of operations in flight),
/// and every message still equals OpenSSL's.
#[test]
fn concurrent_multi_part_matches_openssl() {
    let Some((_g, _s)) = start(bulk_here) else {
        return;
    };
    force_parts(None);
    std::thread::scope(|sc| {
        for t in 0..3 {
            sc.spawn(move || {
                let s = common::session();
                for m in 0..6 {
                    let key = random(pick(&[16, 32]));
                    let k = aes_key(&s, &key);
                    let mut iv = random(12);
                    let aad = random(below(40));
                    let pt = random(300_000 + below(900_000));
                    let want = openssl_seal(&key, &iv, &aad, &pt, 16);
                    s.encrypt_init(&mech(&mut iv, &aad, 128), k).unwrap();
                    let mut got = Vec::new();
                    let mut rest = &pt[..];
                    while !rest.is_empty() {
                        let n = pick(&[1000, 262_144 + below(64), 400_000]).min(rest.len());
                        let (a, b) = rest.split_at(n);
                        got.extend(s.encrypt_update(a).unwrap());
                        rest = b;
                    }
                    got.extend(s.encrypt_final().unwrap());
                    assert!(got == want, "thread {t}, message {m}: equals OpenSSL's");
                }
            });
        }
    });
}

#[test]
fn bad_input_gets_error_codes() {
    let Some((_g, s)) = start(bulk_here) else {
        return;
    };
    let key = random(32);
    let k = aes_key(&s, &key);
    let err = |r: cryptoki::error::Result<()>| match r {
        Err(Error::Pkcs11(e, _)) => e,
        other => panic!("expected an error, got {other:?}"),
    };
    let (aad, mut iv) = (random(5), random(12));
    for bits in [0, 8, 100, 136] {
        assert_eq!(
            err(s.encrypt_init(&mech(&mut iv, &aad, bits), k)),
            RvError::MechanismParamInvalid,
            "tag of {bits} bits"
        );
    }
    assert_eq!(
        err(s.encrypt_init(&mech(&mut random(65537), &aad, 128), k)),
        RvError::MechanismParamInvalid,
        "IV over 64 KiB"
    );
    assert_eq!(
        err(s.encrypt_init(&Mechanism::AesCbc([0; 16]), k)),
        RvError::MechanismInvalid
    );
    // Ciphertext shorter than the tag.
    assert_eq!(
        rv(s.decrypt(&mech(&mut iv, &aad, 128), k, &[0u8; 15])),
        RvError::EncryptedDataLenRange
    );
    // A key without CKA_ENCRYPT.
    let no_use = s
        .create_object(&[
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::KeyType(KeyType::AES),
            Attribute::Token(false),
            Attribute::Value(key.clone()),
        ])
        .unwrap();
    assert_eq!(
        err(s.encrypt_init(&mech(&mut iv, &aad, 128), no_use)),
        RvError::KeyFunctionNotPermitted
    );
    // A second init while one is active; the first still works afterwards.
    s.encrypt_init(&mech(&mut iv, &aad, 128), k).unwrap();
    assert_eq!(
        err(s.encrypt_init(&mech(&mut iv, &aad, 128), k)),
        RvError::OperationActive
    );
    let ct = s.encrypt_final().unwrap();
    assert_eq!(ct, openssl_seal(&key, &iv, &aad, &[], 16));
    // The fault switch: single-part calls answer busy or device error (recoverable for the
    // framework), and the operation ends.
    for (fault, want) in [
        ("busy", RvError::DeviceMemory),
        ("engine-error", RvError::DeviceError),
    ] {
        std::env::set_var("OPENCF_ACCEL_FAULT", fault);
        let r = s.encrypt(&mech(&mut iv, &aad, 128), k, b"data");
        std::env::remove_var("OPENCF_ACCEL_FAULT");
        assert_eq!(rv(r), want, "{fault}");
        assert_eq!(
            rv(s.encrypt_update(b"x")),
            RvError::OperationNotInitialized,
            "{fault}: the operation ended"
        );
    }
}
