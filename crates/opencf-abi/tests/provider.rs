//! `Provider`: a PKCS#11 module loaded at run time and called through safe methods.
//!
//! The main test loads the software token built by `cargo build --release -p
//! opencf-softtoken` (it is skipped, with a message, when the library is not built; set
//! `OPENCF_SOFTTOKEN_SO` to use another build) with a fresh keystore in a temporary
//! directory.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use opencf_abi::provider::{LoadError, Provider};
use opencf_abi::sys::*;
use opencf_abi::{
    decode_template, encode_template, unpad_field, AttrValue, Attribute, MechParam, Mechanism,
    MessageParams, OutBuf,
};

/// Counts the allocations made by this test binary's Rust code, per thread (the loaded
/// module has its own allocator, which this does not see).
struct CountingAlloc;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is a plain thread-local cell with
// no destructor, so touching it never allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: per GlobalAlloc's contract, passed through.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: per GlobalAlloc's contract, passed through.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: per GlobalAlloc's contract, passed through.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

fn allocations() -> u64 {
    ALLOCATIONS.with(|c| c.get())
}

/// Loading and the environment are process-wide: the tests of this file run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn softtoken_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("OPENCF_SOFTTOKEN_SO") {
        return Some(PathBuf::from(p));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    ["release", "debug"]
        .iter()
        .map(|profile| root.join(profile).join("libopencf_softtoken.so"))
        .find(|p| p.exists())
}

/// A temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let p = std::env::temp_dir().join(format!(
            "opencf-provider-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const NEW_PIN: &[u8] = b"provider-test-pin";
const AES_KEY: [u8; 16] = *b"0123456789abcdef";

fn aes_key_template(label: &str) -> Vec<Attribute> {
    vec![
        Attribute::ulong(CKA_CLASS, CKO_SECRET_KEY),
        Attribute::ulong(CKA_KEY_TYPE, CKK_AES),
        Attribute::bool(CKA_TOKEN, false),
        Attribute::bool(CKA_ENCRYPT, true),
        Attribute::bool(CKA_DECRYPT, true),
        Attribute::bool(CKA_SENSITIVE, true),
        Attribute::new(CKA_LABEL, label.as_bytes().to_vec()),
        Attribute::new(CKA_VALUE, AES_KEY.to_vec()),
    ]
}

fn gcm(iv: [u8; 12], aad: &[u8]) -> Mechanism {
    Mechanism {
        mechanism: CKM_AES_GCM,
        param: MechParam::Gcm {
            iv: iv.to_vec(),
            iv_bits: 96,
            aad: aad.to_vec(),
            tag_bits: 128,
        },
    }
}

/// Logs the user in with the token's expired default PIN and changes it.
fn change_default_pin(p: &Provider, s: CK_SESSION_HANDLE) {
    let expired = match p.login(s, CKU_USER, b"changeme") {
        Ok(()) => false,
        Err(CKR_PIN_EXPIRED) => true,
        Err(rv) => panic!("C_Login: {rv:#x}"),
    };
    p.set_pin(s, b"changeme", NEW_PIN).unwrap();
    if expired {
        p.login(s, CKU_USER, NEW_PIN).unwrap();
    }
    // The new PIN works and the old one does not.
    p.logout(s).unwrap();
    assert_eq!(p.login(s, CKU_USER, b"changeme"), Err(CKR_PIN_INCORRECT));
    p.login(s, CKU_USER, NEW_PIN).unwrap();
}

/// AES-GCM through the two-call protocol: size query, short buffer, exact buffer.
fn gcm_round_trip(p: &Provider, s: CK_SESSION_HANDLE, key: CK_OBJECT_HANDLE) {
    let data = b"sixteen byte msg and a few more";
    let mech = gcm([7; 12], b"header");
    p.encrypt_init(s, &mech, key).unwrap();
    // Size query: NULL buffer, the operation stays active.
    let mut q = OutBuf::new(None);
    p.encrypt(s, data, &mut q).unwrap();
    let need = q.len();
    assert_eq!(need, data.len() + 16);
    // Too small: CKR_BUFFER_TOO_SMALL with the size, still active.
    let mut small = vec![0u8; need - 1];
    let mut o = OutBuf::new(Some(&mut small));
    assert_eq!(p.encrypt(s, data, &mut o), Err(CKR_BUFFER_TOO_SMALL));
    assert_eq!(o.len(), need);
    // Exact.
    let mut ct = vec![0u8; need];
    let mut o = OutBuf::new(Some(&mut ct));
    p.encrypt(s, data, &mut o).unwrap();
    assert_eq!(o.len(), need);
    // The same as OpenSSL's.
    let mut tag = [0u8; 16];
    let mut expect = openssl::symm::encrypt_aead(
        openssl::symm::Cipher::aes_128_gcm(),
        &AES_KEY,
        Some(&[7; 12]),
        b"header",
        data,
        &mut tag,
    )
    .unwrap();
    expect.extend_from_slice(&tag);
    assert_eq!(ct, expect);
    // The operation ended: another C_Encrypt is out of order.
    let mut o = OutBuf::new(Some(&mut small));
    assert_eq!(
        p.encrypt(s, data, &mut o),
        Err(CKR_OPERATION_NOT_INITIALIZED)
    );

    // And back.
    p.decrypt_init(s, &mech, key).unwrap();
    let mut q = OutBuf::new(None);
    p.decrypt(s, &ct, &mut q).unwrap();
    assert!(q.len() >= data.len());
    let mut pt = vec![0u8; q.len()];
    let mut o = OutBuf::new(Some(&mut pt));
    p.decrypt(s, &ct, &mut o).unwrap();
    let n = o.len();
    assert_eq!(&pt[..n], data);
    // A tampered tag fails.
    let mut bad = ct.clone();
    *bad.last_mut().unwrap() ^= 1;
    p.decrypt_init(s, &mech, key).unwrap();
    let mut out = vec![0u8; bad.len()];
    let mut o = OutBuf::new(Some(&mut out));
    assert_eq!(p.decrypt(s, &bad, &mut o), Err(CKR_ENCRYPTED_DATA_INVALID));

    // The in-place IV rewrite that cfspeed's timed loop does.
    let mut mech = mech;
    for i in 0..3u8 {
        if let MechParam::Gcm { iv, .. } = &mut mech.param {
            iv[11] = i;
        }
        p.encrypt_init(s, &mech, key).unwrap();
        let mut o = OutBuf::new(Some(&mut ct));
        p.encrypt(s, data, &mut o).unwrap();
    }

    // Multi-part.
    p.encrypt_init(s, &gcm([9; 12], b""), key).unwrap();
    let mut buf = vec![0u8; 64];
    let mut o = OutBuf::new(Some(&mut buf));
    p.encrypt_update(s, &data[..10], &mut o).unwrap();
    let mut total = o.len();
    let mut o = OutBuf::new(Some(&mut buf[total..]));
    p.encrypt_update(s, &data[10..], &mut o).unwrap();
    total += o.len();
    let mut o = OutBuf::new(Some(&mut buf[total..]));
    p.encrypt_final(s, &mut o).unwrap();
    total += o.len();
    assert_eq!(total, data.len() + 16);
}

/// The timed operations of cfspeed allocate nothing on the caller's side: the GCM
/// parameter points into the `Mechanism`, the one-attribute template is laid out on the
/// stack, and the output goes straight into the caller's buffer.
fn no_allocation_per_operation(p: &Provider, s: CK_SESSION_HANDLE, key: CK_OBJECT_HANDLE) {
    let mut mech = gcm([0; 12], b"");
    let data = [0x5a; 16];
    let mut out = [0u8; 32];
    let template = [Attribute::new(CKA_LABEL, b"provider-test-aes".to_vec())];
    let mut found = [0; 4];
    // The counter sees this thread's allocations.
    let before = allocations();
    drop(std::hint::black_box(vec![1u8; 8]));
    assert_eq!(allocations(), before + 1);
    let before = allocations();
    for i in 0..100u8 {
        if let MechParam::Gcm { iv, .. } = &mut mech.param {
            iv[11] = i;
        }
        p.encrypt_init(s, &mech, key).unwrap();
        let mut o = OutBuf::new(Some(&mut out));
        p.encrypt(s, &data, &mut o).unwrap();
        assert_eq!(o.len(), 32);
        p.find_objects_init(s, &template).unwrap();
        assert_eq!(p.find_objects_into(s, &mut found).unwrap(), 1);
        p.find_objects_final(s).unwrap();
    }
    assert_eq!(allocations() - before, 0);
}

/// Message-based AES-GCM (3.0): the tag comes back in the parameters.
fn message_gcm(p: &Provider, s: CK_SESSION_HANDLE, key: CK_OBJECT_HANDLE) {
    let data = b"message-based";
    p.message_encrypt_init(s, &Mechanism::new(CKM_AES_GCM), key)
        .unwrap();
    let mut params = MessageParams::Gcm {
        iv: vec![3; 12],
        iv_fixed_bits: 0,
        iv_generator: CKG_NO_GENERATE,
        tag: Vec::new(),
        tag_bits: 128,
    };
    let mut ct = vec![0u8; data.len()];
    let mut o = OutBuf::new(Some(&mut ct));
    p.encrypt_message(s, &mut params, b"aad", data, &mut o)
        .unwrap();
    assert_eq!(o.len(), data.len());
    p.message_encrypt_final(s).unwrap();
    let MessageParams::Gcm { tag, .. } = &params else {
        unreachable!()
    };
    let mut expect_tag = [0u8; 16];
    let expect = openssl::symm::encrypt_aead(
        openssl::symm::Cipher::aes_128_gcm(),
        &AES_KEY,
        Some(&[3; 12]),
        b"aad",
        data,
        &mut expect_tag,
    )
    .unwrap();
    assert_eq!(ct, expect);
    assert_eq!(tag, &expect_tag);

    p.message_decrypt_init(s, &Mechanism::new(CKM_AES_GCM), key)
        .unwrap();
    let mut pt = vec![0u8; data.len()];
    let mut o = OutBuf::new(Some(&mut pt));
    p.decrypt_message(s, &mut params, b"aad", &ct, &mut o)
        .unwrap();
    assert_eq!(&pt, data);
    p.message_decrypt_final(s).unwrap();
}

/// RSA-2048 key pair, PKCS#1 v1.5 and PSS signatures, attributes, search.
fn rsa(p: &Provider, s: CK_SESSION_HANDLE) {
    let (public, private) = p
        .generate_key_pair(
            s,
            &Mechanism::new(CKM_RSA_PKCS_KEY_PAIR_GEN),
            &[
                Attribute::bool(CKA_TOKEN, false),
                Attribute::bool(CKA_VERIFY, true),
                Attribute::ulong(CKA_MODULUS_BITS, 2048),
                Attribute::new(CKA_PUBLIC_EXPONENT, vec![1, 0, 1]),
            ],
            &[
                Attribute::bool(CKA_TOKEN, false),
                Attribute::bool(CKA_PRIVATE, true),
                Attribute::bool(CKA_SENSITIVE, true),
                Attribute::bool(CKA_SIGN, true),
                Attribute::new(CKA_LABEL, b"provider-test-rsa".to_vec()),
            ],
        )
        .unwrap();
    let msg = b"signed through a Provider";
    let sha256 = Mechanism::new(CKM_SHA256_RSA_PKCS);
    p.sign_init(s, &sha256, private).unwrap();
    let mut q = OutBuf::new(None);
    p.sign(s, msg, &mut q).unwrap();
    assert_eq!(q.len(), 256);
    let mut sig = vec![0u8; 256];
    let mut o = OutBuf::new(Some(&mut sig));
    p.sign(s, msg, &mut o).unwrap();
    assert_eq!(o.len(), 256);
    p.verify_init(s, &sha256, public).unwrap();
    p.verify(s, msg, &sig).unwrap();
    sig[0] ^= 1;
    p.verify_init(s, &sha256, public).unwrap();
    assert_eq!(p.verify(s, msg, &sig), Err(CKR_SIGNATURE_INVALID));

    // PSS: a parameter structure laid out by the provider side.
    let pss = Mechanism {
        mechanism: CKM_SHA256_RSA_PKCS_PSS,
        param: MechParam::RsaPss {
            hash_alg: CKM_SHA256,
            mgf: CKG_MGF1_SHA256,
            salt_len: 32,
        },
    };
    p.sign_init(s, &pss, private).unwrap();
    p.sign_update(s, &msg[..5]).unwrap();
    p.sign_update(s, &msg[5..]).unwrap();
    let mut o = OutBuf::new(Some(&mut sig));
    p.sign_final(s, &mut o).unwrap();
    p.verify_init(s, &pss, public).unwrap();
    p.verify_update(s, msg).unwrap();
    p.verify_final(s, &sig).unwrap();

    // Attributes: values, a sensitive one, one the object lacks (batch and one by one).
    let got = p
        .get_attribute_value(
            s,
            private,
            &[CKA_MODULUS, CKA_PRIVATE_EXPONENT, CKA_VALUE_LEN, CKA_SIGN],
        )
        .unwrap();
    assert!(matches!(&got[0], AttrValue::Value(n) if n.len() == 256));
    assert_eq!(got[1], AttrValue::Sensitive);
    assert_eq!(got[2], AttrValue::Invalid);
    assert_eq!(got[3], AttrValue::Value(vec![CK_TRUE]));
    let got = p
        .get_attribute_value(s, public, &[CKA_PUBLIC_EXPONENT, CKA_KEY_TYPE])
        .unwrap();
    assert_eq!(
        got,
        vec![
            AttrValue::Value(vec![1, 0, 1]),
            AttrValue::Value(CKK_RSA.to_ne_bytes().to_vec())
        ]
    );

    // Search by label.
    p.find_objects_init(
        s,
        &[Attribute::new(CKA_LABEL, b"provider-test-rsa".to_vec())],
    )
    .unwrap();
    assert_eq!(p.find_objects(s, 10).unwrap(), vec![private]);
    assert_eq!(p.find_objects(s, 10).unwrap(), vec![]);
    p.find_objects_final(s).unwrap();
    p.find_objects_init(
        s,
        &[
            Attribute::ulong(CKA_CLASS, CKO_PRIVATE_KEY),
            Attribute::ulong(CKA_KEY_TYPE, CKK_RSA),
        ],
    )
    .unwrap();
    let mut found = [0; 4];
    assert_eq!(p.find_objects_into(s, &mut found).unwrap(), 1);
    assert_eq!(found[0], private);
    p.find_objects_final(s).unwrap();

    match p.get_object_size(s, public) {
        Ok(n) => assert!(n > 0),
        Err(rv) => assert_eq!(rv, CKR_INFORMATION_SENSITIVE),
    }
    p.destroy_object(s, public).unwrap();
    assert_eq!(
        p.get_attribute_value(s, public, &[CKA_MODULUS]),
        Err(CKR_OBJECT_HANDLE_INVALID)
    );
}

/// A nested template attribute goes out and comes back.
fn nested_template(p: &Provider, s: CK_SESSION_HANDLE) {
    let wrap = encode_template(&[
        Attribute::ulong(CKA_KEY_TYPE, CKK_AES),
        Attribute::bool(CKA_EXTRACTABLE, true),
    ]);
    let mut t = aes_key_template("provider-test-wrap");
    t.push(Attribute::bool(CKA_WRAP, true));
    t.push(Attribute::new(CKA_WRAP_TEMPLATE, wrap));
    let key = p.create_object(s, &t).unwrap();
    let got = p
        .get_attribute_value(s, key, &[CKA_WRAP_TEMPLATE, CKA_LABEL])
        .unwrap();
    let AttrValue::Value(v) = &got[0] else {
        panic!("CKA_WRAP_TEMPLATE: {:?}", got[0]);
    };
    let mut back = decode_template(v).unwrap();
    back.sort_by_key(|a| a.kind);
    assert_eq!(
        back,
        vec![
            Attribute::ulong(CKA_KEY_TYPE, CKK_AES),
            Attribute::bool(CKA_EXTRACTABLE, true),
        ]
    );
    assert_eq!(got[1], AttrValue::Value(b"provider-test-wrap".to_vec()));
    p.set_attribute_value(s, key, &[Attribute::new(CKA_LABEL, b"renamed".to_vec())])
        .unwrap();
    assert_eq!(
        p.get_attribute_value(s, key, &[CKA_LABEL]).unwrap(),
        vec![AttrValue::Value(b"renamed".to_vec())]
    );
    let copy = p
        .copy_object(s, key, &[Attribute::new(CKA_LABEL, b"copy".to_vec())])
        .unwrap();
    p.destroy_object(s, copy).unwrap();
    p.destroy_object(s, key).unwrap();
}

/// ML-KEM through the 3.2 functions.
fn ml_kem(p: &Provider, s: CK_SESSION_HANDLE) {
    let (public, private) = p
        .generate_key_pair(
            s,
            &Mechanism::new(CKM_ML_KEM_KEY_PAIR_GEN),
            &[
                Attribute::bool(CKA_TOKEN, false),
                Attribute::ulong(CKA_PARAMETER_SET, CKP_ML_KEM_768),
                Attribute::bool(CKA_ENCAPSULATE, true),
            ],
            &[
                Attribute::bool(CKA_TOKEN, false),
                Attribute::bool(CKA_DECAPSULATE, true),
            ],
        )
        .unwrap();
    let secret = [
        Attribute::ulong(CKA_CLASS, CKO_SECRET_KEY),
        Attribute::ulong(CKA_KEY_TYPE, CKK_GENERIC_SECRET),
        Attribute::bool(CKA_TOKEN, false),
        Attribute::bool(CKA_SENSITIVE, false),
        Attribute::bool(CKA_EXTRACTABLE, true),
    ];
    let kem = Mechanism::new(CKM_ML_KEM);
    let mut q = OutBuf::new(None);
    assert_eq!(
        p.encapsulate_key(s, &kem, public, &secret, &mut q),
        Ok(None)
    );
    let mut ct = vec![0u8; q.len()];
    let mut o = OutBuf::new(Some(&mut ct));
    let k1 = p
        .encapsulate_key(s, &kem, public, &secret, &mut o)
        .unwrap()
        .expect("a key");
    let k2 = p.decapsulate_key(s, &kem, private, &secret, &ct).unwrap();
    let v1 = p.get_attribute_value(s, k1, &[CKA_VALUE]).unwrap();
    let v2 = p.get_attribute_value(s, k2, &[CKA_VALUE]).unwrap();
    assert!(matches!(&v1[0], AttrValue::Value(v) if v.len() == 32));
    assert_eq!(v1, v2);
}

#[test]
fn softtoken_through_a_provider() {
    let _g = serial();
    let Some(path) = softtoken_path() else {
        println!(
            "skipped: target/release/libopencf_softtoken.so is not built \
             (cargo build --release -p opencf-softtoken)"
        );
        return;
    };
    let dir = TempDir::new("softtoken");
    std::env::set_var("OPENCF_SOFTTOKEN_DIR", &dir.0);

    let p = Provider::load(&path).unwrap();
    assert_eq!((p.version().major, p.version().minor), (3, 2));
    assert!(p.has_v3());
    assert_eq!(p.path(), path.as_path());
    p.initialize().unwrap();
    // A second initialization of the same module is fine.
    p.initialize().unwrap();
    let info = p.get_info().unwrap();
    assert_eq!(unpad_field(&info.manufacturerID), "OpenCF");

    let slots = p.get_slot_list(true).unwrap();
    assert!(!slots.is_empty());
    let slot = slots[0];
    assert!(p.get_slot_list(false).unwrap().contains(&slot));
    let slot_info = p.get_slot_info(slot).unwrap();
    assert_ne!(slot_info.flags & CKF_TOKEN_PRESENT, 0);
    let token = p.get_token_info(slot).unwrap();
    assert_eq!(unpad_field(&token.label), "OpenCF Softtoken");
    assert_ne!(token.flags & CKF_USER_PIN_TO_BE_CHANGED, 0);
    let mechs = p.get_mechanism_list(slot).unwrap();
    assert!(mechs.contains(&CKM_AES_GCM));
    let mi = p.get_mechanism_info(slot, CKM_AES_GCM).unwrap();
    assert_ne!(mi.flags & CKF_ENCRYPT, 0);
    assert_eq!(
        p.get_mechanism_info(slot, 0x7fff_fff0).map(|_| ()),
        Err(CKR_MECHANISM_INVALID)
    );

    let s = p
        .open_session(slot, CKF_SERIAL_SESSION | CKF_RW_SESSION)
        .unwrap();
    change_default_pin(&p, s);
    let si = p.get_session_info(s).unwrap();
    assert_eq!(si.state, CKS_RW_USER_FUNCTIONS);
    let token = p.get_token_info(slot).unwrap();
    assert_eq!(token.flags & CKF_USER_PIN_TO_BE_CHANGED, 0);

    // A generated key and a known one.
    let generated = p
        .generate_key(
            s,
            &Mechanism::new(CKM_AES_KEY_GEN),
            &[
                Attribute::bool(CKA_TOKEN, false),
                Attribute::ulong(CKA_VALUE_LEN, 32),
                Attribute::bool(CKA_ENCRYPT, true),
                Attribute::bool(CKA_DECRYPT, true),
            ],
        )
        .unwrap();
    let mut ct = [0u8; 48];
    p.encrypt_init(s, &gcm([1; 12], b""), generated).unwrap();
    let mut o = OutBuf::new(Some(&mut ct));
    p.encrypt(s, b"with a generated key", &mut o).unwrap();
    assert_eq!(o.len(), 20 + 16);
    let key = p
        .create_object(s, &aes_key_template("provider-test-aes"))
        .unwrap();
    gcm_round_trip(&p, s, key);
    no_allocation_per_operation(&p, s, key);
    message_gcm(&p, s, key);

    // Digest and random.
    p.digest_init(s, &Mechanism::new(CKM_SHA256)).unwrap();
    let mut d = [0u8; 32];
    let mut o = OutBuf::new(Some(&mut d));
    p.digest(s, b"abc", &mut o).unwrap();
    assert_eq!(d, openssl::sha::sha256(b"abc"));
    let mut r = [0u8; 32];
    p.generate_random(s, &mut r).unwrap();
    assert_ne!(r, [0u8; 32]);

    rsa(&p, s);
    nested_template(&p, s);
    ml_kem(&p, s);

    // 3.0: cancelling an operation.
    p.encrypt_init(s, &gcm([2; 12], b""), key).unwrap();
    p.session_cancel(s, CKF_ENCRYPT).unwrap();
    p.encrypt_init(s, &gcm([2; 12], b""), key).unwrap();

    // Sessions from several threads at once.
    std::thread::scope(|sc| {
        for t in 0..4u8 {
            let p = &p;
            sc.spawn(move || {
                let s = p.open_session(slot, CKF_SERIAL_SESSION).unwrap();
                let mut out = [0u8; 32];
                for i in 0..200u8 {
                    p.encrypt_init(s, &gcm([t, i, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], b""), key)
                        .unwrap();
                    let mut o = OutBuf::new(Some(&mut out));
                    p.encrypt(s, &[i; 16], &mut o).unwrap();
                    assert_eq!(o.len(), 32);
                }
                p.close_session(s).unwrap();
            });
        }
    });

    p.logout(s).unwrap();
    p.close_session(s).unwrap();
    assert_eq!(p.close_session(s), Err(CKR_SESSION_HANDLE_INVALID));
    p.close_all_sessions(slot).unwrap();
    p.finalize().unwrap();
    assert_eq!(p.get_info().map(|_| ()), Err(CKR_CRYPTOKI_NOT_INITIALIZED));
    // Initialize again, then let the drop finalize it.
    p.initialize().unwrap();
    drop(p);
    // And the library loads again afterwards.
    let p = Provider::load(&path).unwrap();
    p.initialize().unwrap();
    assert!(!p.get_slot_list(true).unwrap().is_empty());
    p.finalize().unwrap();
    std::env::remove_var("OPENCF_SOFTTOKEN_DIR");
}

#[test]
fn a_2_40_module_has_no_3_0_functions() {
    let _g = serial();
    let path = Path::new("/usr/lib/softhsm/libsofthsm2.so");
    if !path.exists() {
        println!("skipped: SoftHSMv2 is not installed ({})", path.display());
        return;
    }
    let p = Provider::load(path).unwrap();
    if p.has_v3() {
        println!(
            "SoftHSMv2 offers PKCS#11 {}.{}",
            p.version().major,
            p.version().minor
        );
        return;
    }
    assert_eq!(p.version().major, 2);
    // Absent from a 2.40 table: answered without calling the module.
    assert_eq!(
        p.session_cancel(1, CKF_ENCRYPT),
        Err(CKR_FUNCTION_NOT_SUPPORTED)
    );
    assert_eq!(
        p.login_user(1, CKU_USER, b"1234", b"user"),
        Err(CKR_FUNCTION_NOT_SUPPORTED)
    );
    assert_eq!(
        p.message_encrypt_init(1, &Mechanism::new(CKM_AES_GCM), 1),
        Err(CKR_FUNCTION_NOT_SUPPORTED)
    );
    assert_eq!(p.verify_signature(1, b"x"), Err(CKR_FUNCTION_NOT_SUPPORTED));
    // Present but not initialized.
    assert_eq!(p.get_info().map(|_| ()), Err(CKR_CRYPTOKI_NOT_INITIALIZED));
}

#[test]
fn a_library_that_is_not_pkcs11() {
    let _g = serial();
    let Some(lib) = [
        "/lib/x86_64-linux-gnu/libz.so.1",
        "/usr/lib/x86_64-linux-gnu/libz.so.1",
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
    ]
    .iter()
    .map(Path::new)
    .find(|p| p.exists()) else {
        println!("skipped: no libz.so.1 or libm.so.6 found");
        return;
    };
    let err = Provider::load(lib).unwrap_err();
    assert_eq!(err, LoadError::NotPkcs11(lib.to_path_buf()));
    assert_eq!(
        err.to_string(),
        format!(
            "{} is not a PKCS#11 module (no C_GetFunctionList)",
            lib.display()
        )
    );
}

#[test]
fn missing_and_unloadable_files() {
    let _g = serial();
    let missing = Path::new("/nonexistent/libnothing.so");
    let err = Provider::load(missing).unwrap_err();
    assert_eq!(err, LoadError::NotFound(missing.to_path_buf()));
    assert_eq!(err.to_string(), "/nonexistent/libnothing.so: no such file");

    // A file that is not a shared library at all.
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    match Provider::load(&manifest).unwrap_err() {
        LoadError::Dlopen { path, message } => {
            assert_eq!(path, manifest);
            assert!(!message.is_empty());
            let shown = LoadError::Dlopen {
                path,
                message: message.clone(),
            }
            .to_string();
            assert!(shown.contains("cannot be loaded") && shown.contains(&message));
        }
        other => panic!("expected a dlopen error, got {other:?}"),
    }

    // A bare name dlopen cannot find.
    assert!(matches!(
        Provider::load(Path::new("libopencf-no-such-module.so")),
        Err(LoadError::Dlopen { .. })
    ));
}
