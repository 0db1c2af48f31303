//! Random inputs and AES key objects, for the tests of the bulk engine. Not every test file
//! uses every helper.
#![allow(dead_code)]

use cryptoki::object::{Attribute, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::Session;

/// `n` random bytes.
pub fn random(n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    openssl::rand::rand_bytes(&mut b).unwrap();
    b
}

/// A random number below `n`.
pub fn below(n: usize) -> usize {
    let b = random(8);
    (u64::from_le_bytes(b.try_into().unwrap()) % n as u64) as usize
}

/// A random element of `xs`.
pub fn pick<T: Copy>(xs: &[T]) -> T {
    xs[below(xs.len())]
}

/// Sets `OPENCF_ACCEL_BULK_PARTS` (`None`: the provider chooses).
pub fn force_parts(parts: Option<usize>) {
    match parts {
        Some(p) => std::env::set_var("OPENCF_ACCEL_BULK_PARTS", p.to_string()),
        None => std::env::remove_var("OPENCF_ACCEL_BULK_PARTS"),
    }
}

/// Where AES-CTR keystreams come from in the provider: the GCM kernel from a key's first byte
/// (`true`), or OpenSSL's AES-CTR until the key has run the provider's default of a megabyte
/// (`false`). `$OPENCF_ACCEL_CTR_GCM_AFTER`, read at each call.
pub fn ctr_gcm_from_start(yes: bool) {
    if yes {
        std::env::set_var("OPENCF_ACCEL_CTR_GCM_AFTER", "0");
    } else {
        std::env::remove_var("OPENCF_ACCEL_CTR_GCM_AFTER");
    }
}

/// A session AES key for encryption and decryption, by value.
pub fn aes_key(s: &Session, key: &[u8]) -> ObjectHandle {
    s.create_object(&[
        Attribute::Class(ObjectClass::SECRET_KEY),
        Attribute::KeyType(KeyType::AES),
        Attribute::Token(false),
        Attribute::Encrypt(true),
        Attribute::Decrypt(true),
        Attribute::Value(key.to_vec()),
    ])
    .expect("C_CreateObject (AES key)")
}
