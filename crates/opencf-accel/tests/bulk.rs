//! AES-CTR and AES-ECB on the bulk engine of `libopencf_accel.so`, through its C ABI
//! (`cryptoki` as the consumer): every result is compared byte for byte with OpenSSL's
//! single-threaded AES-CTR / AES-ECB (random keys, counter blocks, lengths up to 6 MiB,
//! single-part and multi-part with random update splits), and every answer about counter
//! bits, parameters and lengths with the software token's, loaded beside it in the same
//! process (`libopencf_softtoken.so`, on a keystore of its own).
//!
//! `OPENCF_ACCEL_BULK_PARTS` forces the number of pieces per call, so that small inputs cross
//! many piece boundaries; the large cases also run with the provider's own choice.
//! `OPENCF_ACCEL_BULK_CASES` sets the number of random cases (default 300).
//!
//! Build first: `cargo build --release -p opencf-accel -p opencf-softtoken`.

mod common;

use common::data::{aes_key, below, ctr_gcm_from_start, force_parts, pick, random};
use common::{module, start};
use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::error::{Error, RvError};
use cryptoki::mechanism::vendor_defined::VendorDefinedMechanism;
use cryptoki::mechanism::{Mechanism, MechanismType};
use cryptoki::object::{Attribute, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::{Session, UserType};
use cryptoki::types::AuthPin;
use openssl::symm::{Cipher, Crypter, Mode};
use std::os::raw::c_ulong;
use std::path::Path;
use std::sync::OnceLock;

/// `CK_AES_CTR_PARAMS`.
#[repr(C)]
struct CtrParams {
    counter_bits: c_ulong,
    cb: [u8; 16],
}

/// A mechanism of the test: AES-CTR with its parameters, or AES-ECB.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Ctr(c_ulong, [u8; 16]),
    Ecb,
}

impl Kind {
    /// The mechanism, borrowing `p` for the CTR parameters.
    fn mech<'a>(&self, p: &'a mut CtrParams) -> Mechanism<'a> {
        match *self {
            Kind::Ctr(bits, cb) => {
                *p = CtrParams {
                    counter_bits: bits,
                    cb,
                };
                Mechanism::VendorDefined(VendorDefinedMechanism::new(
                    MechanismType::AES_CTR,
                    Some(&*p),
                ))
            }
            Kind::Ecb => Mechanism::AesEcb,
        }
    }

    /// A random AES-CTR (128 counter bits, random counter block; one in four with its low 32
    /// bits a few thousand blocks before they wrap, where the GCM kernel's `inc32` stops) or
    /// AES-ECB.
    fn random() -> Kind {
        if below(2) == 0 {
            let mut cb: [u8; 16] = random(16).try_into().unwrap();
            if below(4) == 0 {
                let low = u32::MAX - below(4096) as u32;
                cb[12..].copy_from_slice(&low.to_be_bytes());
            }
            Kind::Ctr(128, cb)
        } else {
            Kind::Ecb
        }
    }

    /// A length this mechanism takes in one call, about `n` bytes.
    fn len(&self, n: usize) -> usize {
        match self {
            Kind::Ctr(..) => n,
            Kind::Ecb => n / 16 * 16,
        }
    }
}

fn params() -> CtrParams {
    CtrParams {
        counter_bits: 0,
        cb: [0; 16],
    }
}

/// OpenSSL's AES-CTR from counter block `cb` or AES-ECB without padding, in one call.
fn openssl(kind: Kind, key: &[u8], encrypt: bool, data: &[u8]) -> Vec<u8> {
    let (cipher, iv) = match (kind, key.len()) {
        (Kind::Ctr(_, cb), 16) => (Cipher::aes_128_ctr(), Some(cb)),
        (Kind::Ctr(_, cb), 24) => (Cipher::aes_192_ctr(), Some(cb)),
        (Kind::Ctr(_, cb), _) => (Cipher::aes_256_ctr(), Some(cb)),
        (Kind::Ecb, 16) => (Cipher::aes_128_ecb(), None),
        (Kind::Ecb, 24) => (Cipher::aes_192_ecb(), None),
        (Kind::Ecb, _) => (Cipher::aes_256_ecb(), None),
    };
    let mode = if encrypt {
        Mode::Encrypt
    } else {
        Mode::Decrypt
    };
    let mut c = Crypter::new(cipher, mode, key, iv.as_ref().map(|b| &b[..])).unwrap();
    c.pad(false);
    let mut out = vec![0u8; data.len() + 32];
    let mut n = c.update(data, &mut out).unwrap();
    n += c.finalize(&mut out[n..]).unwrap();
    out.truncate(n);
    out
}

fn code<T: std::fmt::Debug>(r: cryptoki::error::Result<T>) -> RvError {
    match r {
        Err(Error::Pkcs11(e, _)) => e,
        other => panic!("expected a PKCS#11 error, got {other:?}"),
    }
}

/// An answer: the output, or the `CKR_*` code.
type Answer = Result<Vec<u8>, RvError>;

fn answer(r: cryptoki::error::Result<Vec<u8>>) -> Answer {
    r.map_err(|e| match e {
        Error::Pkcs11(rv, _) => rv,
        other => panic!("expected a PKCS#11 answer, got {other:?}"),
    })
}

/// `C_Encrypt` / `C_Decrypt` of `data`.
fn one(s: &Session, k: ObjectHandle, kind: Kind, encrypt: bool, data: &[u8]) -> Answer {
    let mut p = params();
    let m = kind.mech(&mut p);
    answer(if encrypt {
        s.encrypt(&m, k, data)
    } else {
        s.decrypt(&m, k, data)
    })
}

/// `C_*Init`, then `C_*Update` with each piece of `data` as `cuts` gives it, then `C_*Final`;
/// the first error is the answer. Each update of AES-ECB must release exactly the whole
/// blocks received so far.
fn multi(
    s: &Session,
    k: ObjectHandle,
    kind: Kind,
    encrypt: bool,
    data: &[u8],
    cuts: &[usize],
) -> Answer {
    let mut p = params();
    let m = kind.mech(&mut p);
    answer(if encrypt {
        s.encrypt_init(&m, k).map(|_| Vec::new())
    } else {
        s.decrypt_init(&m, k).map(|_| Vec::new())
    })?;
    let mut out = Vec::new();
    let mut at = 0;
    for &c in cuts.iter().chain([&data.len()]) {
        let piece = &data[at..c];
        let got = answer(if encrypt {
            s.encrypt_update(piece)
        } else {
            s.decrypt_update(piece)
        })?;
        if matches!(kind, Kind::Ecb) {
            assert_eq!(
                out.len() + got.len(),
                c / 16 * 16,
                "an ECB update releases every whole block so far"
            );
        }
        out.extend(got);
        at = c;
    }
    out.extend(answer(if encrypt {
        s.encrypt_final()
    } else {
        s.decrypt_final()
    })?);
    Ok(out)
}

/// Random cut points of `n` bytes (sorted; repeats give empty updates).
fn cuts(n: usize) -> Vec<usize> {
    let mut c: Vec<usize> = (0..below(6)).map(|_| below(n + 1)).collect();
    c.sort_unstable();
    c
}

/// Whether the provider offers AES-CTR and AES-ECB here (with AES-GCM, exactly when the bulk
/// engine is); prints why not.
fn bulk_here() -> bool {
    let p = module();
    let slot = p.get_slots_with_token().unwrap()[0];
    let list = p.get_mechanism_list(slot).unwrap();
    let here = opencf_accel::gcm::available();
    for m in [MechanismType::AES_CTR, MechanismType::AES_ECB] {
        assert_eq!(
            list.contains(&m),
            here,
            "{m} is listed with the bulk engine"
        );
        if here {
            let info = p.get_mechanism_info(slot, m).unwrap();
            assert!(info.encrypt() && info.decrypt(), "{m}: encrypt and decrypt");
            assert_eq!((info.min_key_size(), info.max_key_size()), (16, 32), "{m}");
        }
    }
    if !here {
        eprintln!("SKIP: no bulk engine here (one core, or OPENCF_ACCEL_DISABLE=bulk)");
    }
    here
}

/// Encrypts `pt` single-part and multi-part (random splits) through the provider, compares
/// with OpenSSL, and decrypts back both ways, with `pieces` forced in turn; AES-CTR runs
/// through the GCM kernel from the key's first byte in half the cases, else from its first
/// megabyte.
fn check(
    s: &Session,
    k: ObjectHandle,
    key: &[u8],
    kind: Kind,
    pt: &[u8],
    pieces: &[Option<usize>],
) {
    let want = openssl(kind, key, true, pt);
    let what = format!("{kind:?}, key {} B, data {} B", key.len(), pt.len());
    ctr_gcm_from_start(below(2) == 0);
    for p in pieces {
        force_parts(*p);
        let ct = one(s, k, kind, true, pt).unwrap_or_else(|e| panic!("C_Encrypt ({what}): {e}"));
        assert!(
            ct == want,
            "C_Encrypt equals OpenSSL ({what}, pieces {p:?})"
        );
        let back =
            one(s, k, kind, false, &ct).unwrap_or_else(|e| panic!("C_Decrypt ({what}): {e}"));
        assert!(
            back == pt,
            "C_Decrypt gives the data back ({what}, pieces {p:?})"
        );
        let ct = multi(s, k, kind, true, pt, &cuts(pt.len())).unwrap();
        assert!(
            ct == want,
            "multi-part encryption equals OpenSSL ({what}, pieces {p:?})"
        );
        let back = multi(s, k, kind, false, &ct, &cuts(ct.len())).unwrap();
        assert!(back == pt, "multi-part decryption ({what}, pieces {p:?})");
    }
    force_parts(None);
    ctr_gcm_from_start(false);
}

#[test]
fn random_cases_match_openssl() {
    let Some((_g, s)) = start(bulk_here) else {
        return;
    };
    let n = std::env::var("OPENCF_ACCEL_BULK_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    for i in 0..n {
        let key = random(pick(&[16, 24, 32]));
        let k = aes_key(&s, &key);
        let kind = Kind::random();
        let len = pick(&[0, 1, 15, 16, 17, 31, 32, 33, 255, 4095, 4097, below(20_000)]);
        let pt = random(kind.len(len));
        check(&s, k, &key, kind, &pt, &[Some(pick(&[1, 2, 3, 4, 7]))]);
        s.destroy_object(k).unwrap();
        if i % 100 == 99 {
            eprintln!("{} random cases equal OpenSSL's", i + 1);
        }
    }
}

#[test]
fn large_inputs_match_openssl() {
    let Some((_g, s)) = start(bulk_here) else {
        return;
    };
    for len in [(1 << 20) - 1, (4 << 20) + 17, (6 << 20) + 5] {
        for kind in [Kind::Ctr(128, random(16).try_into().unwrap()), Kind::Ecb] {
            let key = random(pick(&[16, 24, 32]));
            let k = aes_key(&s, &key);
            let pt = random(kind.len(len));
            check(&s, k, &key, kind, &pt, &[None, Some(2), Some(3), Some(5)]);
        }
    }
}

/// One AES-CTR encryption larger than the C ABI layer's limit on templates and parameters
/// (256 MiB): a data buffer may be as large as AES-GCM allows one message (64 GiB), so the
/// size query answers and the call encrypts, as OpenSSL does.
#[test]
fn an_input_above_256_mib_is_encrypted() {
    let Some((_g, s)) = start(bulk_here) else {
        return;
    };
    let key = random(16);
    let k = aes_key(&s, &key);
    let kind = Kind::Ctr(128, random(16).try_into().unwrap());
    let pt = vec![0x5au8; (300 << 20) + 3];
    let ct = one(&s, k, kind, true, &pt).expect("C_Encrypt of 300 MiB");
    assert!(
        ct == openssl(kind, &key, true, &pt),
        "300 MiB equal OpenSSL's"
    );
    s.destroy_object(k).unwrap();
}

/// The software token, loaded beside the accelerator with a fresh keystore, its user PIN
/// changed once.
fn softtoken() -> &'static Pkcs11 {
    static M: OnceLock<Pkcs11> = OnceLock::new();
    M.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .nth(2)
            .unwrap();
        let lib = root.join("target/release/libopencf_softtoken.so");
        assert!(
            lib.exists(),
            "{} missing: cargo build --release -p opencf-softtoken",
            lib.display()
        );
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("accel-bulk-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::env::set_var("OPENCF_SOFTTOKEN_DIR", &dir);
        let p = Pkcs11::new(lib).unwrap();
        p.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
            .unwrap();
        let s = soft_open(&p);
        let pin = |x: &str| AuthPin::from(x.to_string());
        match s.login(UserType::User, Some(&pin("changeme"))) {
            Ok(()) | Err(Error::Pkcs11(RvError::PinExpired, _)) => {}
            Err(e) => panic!("C_Login (softtoken): {e:?}"),
        }
        s.set_pin(&pin("changeme"), &pin(SOFT_PIN)).unwrap();
        p
    })
}

const SOFT_PIN: &str = "accel-bulk-pin";

fn soft_open(p: &Pkcs11) -> Session {
    let slot = p
        .get_slots_with_token()
        .unwrap()
        .into_iter()
        .find(|s| {
            p.get_token_info(*s)
                .is_ok_and(|t| t.label() == "OpenCF Softtoken")
        })
        .expect("the softtoken's slot");
    p.open_rw_session(slot).unwrap()
}

/// A logged-in session of the software token.
fn soft_session() -> Session {
    let s = soft_open(softtoken());
    match s.login(UserType::User, Some(&AuthPin::from(SOFT_PIN.to_string()))) {
        Ok(()) | Err(Error::Pkcs11(RvError::UserAlreadyLoggedIn, _)) => {}
        Err(e) => panic!("C_Login (softtoken): {e:?}"),
    }
    s
}

/// The same steps on the accelerator and on the software token (each with its own copy of
/// `key`): both must give the same answer, which is returned.
fn same_as_softtoken(
    accel: &Session,
    soft: &Session,
    key: &[u8],
    what: &str,
    f: impl Fn(&Session, ObjectHandle) -> Answer,
) -> Answer {
    let (ka, ks) = (aes_key(accel, key), aes_key(soft, key));
    let (a, b) = (f(accel, ka), f(soft, ks));
    assert_eq!(a, b, "accelerator and software token answer alike: {what}");
    accel.destroy_object(ka).unwrap();
    soft.destroy_object(ks).unwrap();
    a
}

/// `C_EncryptInit` alone, as a step for [`same_as_softtoken`].
fn init<'a>(m: Mechanism<'a>) -> impl Fn(&Session, ObjectHandle) -> Answer + 'a {
    move |x, k| answer(x.encrypt_init(&m, k).map(|_| Vec::new()))
}

/// The counter block whose low 64 bits are `low` (the rest random).
fn counter(low: u64) -> [u8; 16] {
    let mut cb: [u8; 16] = random(16).try_into().unwrap();
    cb[8..].copy_from_slice(&low.to_be_bytes());
    cb
}

#[test]
fn counter_bits_match_the_softtoken_and_openssl() {
    let Some((_g, s)) = start(bulk_here) else {
        return;
    };
    let soft = soft_session();
    let max = [0xff; 16];
    let mut near = max;
    near[15] = 0xfc;
    // (counter bits, counter block, blocks left before the counter wraps within its bits)
    let cases: Vec<(c_ulong, [u8; 16], usize)> = vec![
        (32, counter(0xffff_fff0), 16),
        (32, counter(0x1234_5678_ffff_ffff), 1),
        (32, counter(0xffff_ff00), 256),
        (64, counter(u64::MAX - 1), 2),
        // The low 32 bits wrap after 16 blocks, well inside the 64 counter bits.
        (64, counter(0xffff_fff0), usize::MAX),
        (1, counter(1), 1),
        (1, counter(0xfffe), 2),
        (8, counter(0xf0), 16),
        (16, counter(0xffc0), 64),
        (127, max, 1),
        (128, near, 4),
        (128, max, 1),
        (128, counter(0), usize::MAX),
    ];
    for (bits, cb, left) in cases {
        let kind = Kind::Ctr(bits, cb);
        let key = random(pick(&[16, 24, 32]));
        let fits = left.min(300).saturating_mul(16);
        for (len, ok) in [
            (fits, true),
            (fits - 1, true),
            (fits + 1, left > 300),
            (0, true),
        ] {
            let pt = random(len);
            let what = format!("{bits} counter bits, counter {cb:02x?}, {len} bytes");
            let want = if ok {
                Ok(openssl(kind, &key, true, &pt))
            } else {
                Err(RvError::DataLenRange)
            };
            for (parts, gcm) in [
                (None, false),
                (Some(5), false),
                (None, true),
                (Some(5), true),
            ] {
                force_parts(parts);
                ctr_gcm_from_start(gcm);
                let r =
                    same_as_softtoken(&s, &soft, &key, &what, |x, k| one(x, k, kind, true, &pt));
                assert_eq!(r, want, "C_Encrypt: {what}");
                let r =
                    same_as_softtoken(&s, &soft, &key, &what, |x, k| one(x, k, kind, false, &pt));
                let want_dec = want.clone().map_err(|_| RvError::EncryptedDataLenRange);
                assert_eq!(r, want_dec, "C_Decrypt: {what}");
                let c = cuts(len);
                let r = same_as_softtoken(&s, &soft, &key, &what, |x, k| {
                    multi(x, k, kind, true, &pt, &c)
                });
                assert_eq!(r, want, "multi-part: {what}");
            }
        }
        // Multi-part up to the wrap, then one byte more: refused, and the operation ends.
        if left <= 300 {
            let what = format!("{bits} counter bits, counter {cb:02x?}: past the wrap");
            let r = same_as_softtoken(&s, &soft, &key, &what, |x, k| {
                let mut p = params();
                x.encrypt_init(&kind.mech(&mut p), k).unwrap();
                let got = answer(x.encrypt_update(&vec![7u8; left * 16 - 3]))?;
                assert!(answer(x.encrypt_update(&[1, 2, 3]))?.len() == 3);
                assert!(answer(x.encrypt_update(&[]))?.is_empty());
                let r = answer(x.encrypt_update(&[4]));
                assert_eq!(
                    code(x.encrypt_update(&[4])),
                    RvError::OperationNotInitialized
                );
                r.map(|_| got)
            });
            assert_eq!(r, Err(RvError::DataLenRange), "{what}");
        }
    }
    force_parts(None);
    ctr_gcm_from_start(false);
}

#[test]
fn bad_parameters_and_lengths_match_the_softtoken() {
    let Some((_g, s)) = start(bulk_here) else {
        return;
    };
    let soft = soft_session();
    let key = random(32);
    let ctr = MechanismType::AES_CTR;
    let bad = RvError::MechanismParamInvalid;
    // No CK_AES_CTR_PARAMS, a short one, a long one.
    let none = VendorDefinedMechanism::new::<CtrParams>(ctr, None);
    let r = same_as_softtoken(
        &s,
        &soft,
        &key,
        "NULL",
        init(Mechanism::VendorDefined(none)),
    );
    assert_eq!(r, Err(bad), "NULL CK_AES_CTR_PARAMS");
    let short = [0u8; 8];
    let m = Mechanism::VendorDefined(VendorDefinedMechanism::new(ctr, Some(&short)));
    assert_eq!(
        same_as_softtoken(&s, &soft, &key, "short", init(m)),
        Err(bad)
    );
    let long = [0u8; 40];
    let m = Mechanism::VendorDefined(VendorDefinedMechanism::new(ctr, Some(&long)));
    assert_eq!(
        same_as_softtoken(&s, &soft, &key, "long", init(m)),
        Err(bad)
    );
    // ulCounterBits out of 1..=128.
    for bits in [0, 129, 256, 1 << 40] {
        let mut p = params();
        let m = Kind::Ctr(bits, [0; 16]).mech(&mut p);
        let r = same_as_softtoken(&s, &soft, &key, &format!("{bits} bits"), init(m));
        assert_eq!(r, Err(bad), "ulCounterBits = {bits}");
    }
    // AES-ECB takes no parameter.
    let iv = [0u8; 16];
    let m = Mechanism::VendorDefined(VendorDefinedMechanism::new(
        MechanismType::AES_ECB,
        Some(&iv),
    ));
    assert_eq!(
        same_as_softtoken(&s, &soft, &key, "ECB with IV", init(m)),
        Err(bad)
    );
    // AES-ECB lengths: single-part.
    for len in [1, 15, 17, 31, 4097] {
        let data = random(len);
        let what = format!("ECB, {len} bytes");
        let r = same_as_softtoken(&s, &soft, &key, &what, |x, k| {
            one(x, k, Kind::Ecb, true, &data)
        });
        assert_eq!(r, Err(RvError::DataLenRange), "{what}");
        let r = same_as_softtoken(&s, &soft, &key, &what, |x, k| {
            one(x, k, Kind::Ecb, false, &data)
        });
        assert_eq!(r, Err(RvError::EncryptedDataLenRange), "{what}");
    }
    let r = same_as_softtoken(&s, &soft, &key, "ECB, nothing", |x, k| {
        one(x, k, Kind::Ecb, true, &[])
    });
    assert_eq!(r, Ok(Vec::new()));
    // AES-ECB lengths: multi-part with a remainder at the end; the operation ends.
    for encrypt in [true, false] {
        let want = if encrypt {
            RvError::DataLenRange
        } else {
            RvError::EncryptedDataLenRange
        };
        let r = same_as_softtoken(&s, &soft, &key, "ECB remainder", |x, k| {
            let got = multi(x, k, Kind::Ecb, encrypt, &[5u8; 25], &[5]);
            let after = if encrypt {
                x.encrypt_update(&[0; 16])
            } else {
                x.decrypt_update(&[0; 16])
            };
            assert_eq!(code(after), RvError::OperationNotInitialized);
            got
        });
        assert_eq!(
            r,
            Err(want),
            "ECB, 25 bytes in two updates (encrypt: {encrypt})"
        );
    }
    // A second init while a multi-part operation runs: CKR_OPERATION_ACTIVE, and the
    // operation goes on (the remainder of an ECB update, the keystream offset of CTR).
    let ctr = Kind::Ctr(128, random(16).try_into().unwrap());
    for kind in [ctr, Kind::Ecb] {
        let pt = random(kind.len(70));
        let r = same_as_softtoken(&s, &soft, &key, "a second init", |x, k| {
            let mut p = params();
            let m = kind.mech(&mut p);
            x.encrypt_init(&m, k).unwrap();
            let mut out = answer(x.encrypt_update(&pt[..21]))?;
            assert_eq!(code(x.encrypt_init(&m, k)), RvError::OperationActive);
            out.extend(answer(x.encrypt_update(&pt[21..]))?);
            out.extend(answer(x.encrypt_final())?);
            Ok(out)
        });
        assert_eq!(r, Ok(openssl(kind, &key, true, &pt)), "{kind:?}");
    }
    // A key with CKA_ENCRYPT false.
    for kind in [ctr, Kind::Ecb] {
        let no_use = |x: &Session| {
            x.create_object(&[
                Attribute::Class(ObjectClass::SECRET_KEY),
                Attribute::KeyType(KeyType::AES),
                Attribute::Token(false),
                Attribute::Encrypt(false),
                Attribute::Value(key.clone()),
            ])
            .unwrap()
        };
        let mut p = params();
        let m = kind.mech(&mut p);
        let (a, b) = (
            code(s.encrypt_init(&m, no_use(&s))),
            code(soft.encrypt_init(&m, no_use(&soft))),
        );
        assert_eq!((a, b), (RvError::KeyFunctionNotPermitted, a), "{kind:?}");
    }
}

#[test]
fn fault_switch_applies_to_single_part_calls() {
    let Some((_g, s)) = start(bulk_here) else {
        return;
    };
    let key = random(16);
    let k = aes_key(&s, &key);
    for kind in [Kind::Ctr(128, [0; 16]), Kind::Ecb] {
        for (fault, want) in [
            ("busy", RvError::DeviceMemory),
            ("engine-error", RvError::DeviceError),
        ] {
            std::env::set_var("OPENCF_ACCEL_FAULT", fault);
            let r = one(&s, k, kind, true, &[0; 32]);
            std::env::remove_var("OPENCF_ACCEL_FAULT");
            assert_eq!(r, Err(want), "{kind:?}, {fault}");
            assert_eq!(
                code(s.encrypt_update(b"x")),
                RvError::OperationNotInitialized,
                "{kind:?}, {fault}: the operation ended"
            );
        }
    }
}
