//! The memory functions of `opencf_abi::ossl_mem`, installed in this test binary's copy of
//! OpenSSL (nothing here touches OpenSSL before `install`): every small block OpenSSL gets,
//! through `CRYPTO_malloc` and `CRYPTO_realloc`, lies within one 4 KiB page, contents survive
//! `realloc`, and OpenSSL still computes correctly with them.

use std::ffi::c_void;

use opencf_abi::ossl_mem::{crosses_page, install};
use openssl_sys as ffi;

extern "C" {
    // Not declared by `openssl-sys`.
    fn CRYPTO_realloc(
        block: *mut c_void,
        num: usize,
        file: *const std::ffi::c_char,
        line: std::ffi::c_int,
    ) -> *mut c_void;
}

fn malloc(len: usize) -> *mut c_void {
    // SAFETY: plain allocation through OpenSSL; the caller frees it with `free`.
    unsafe { ffi::CRYPTO_malloc(len, c"test".as_ptr(), 0) }
}

fn realloc(block: *mut c_void, len: usize) -> *mut c_void {
    // SAFETY: `block` is null or from `malloc`/`realloc` above and not used after this.
    unsafe { CRYPTO_realloc(block, len, c"test".as_ptr(), 0) }
}

fn free(block: *mut c_void) {
    // SAFETY: `block` is null or from `malloc`/`realloc` above and not used after this.
    unsafe { ffi::CRYPTO_free(block, c"test".as_ptr(), 0) }
}

#[test]
fn openssl_blocks_of_at_most_a_page_never_straddle_one() {
    assert!(install(), "OpenSSL refused the memory functions");
    assert!(install(), "a second call answers as the first");

    // Sizes from a small generator, kept alive in a pool so that malloc's free lists see
    // every kind of placement; more than enough blocks land across a boundary under plain
    // malloc (a 1 KiB block does in about a quarter of placements).
    let mut pool: Vec<(*mut c_void, usize)> = Vec::new();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = 1 + (x % 5000) as usize;
        let block = malloc(len);
        assert!(!block.is_null());
        assert!(
            !crosses_page(block as usize, len),
            "{len} bytes at {block:p}"
        );
        // SAFETY: `block` has room for `len` bytes.
        unsafe { std::ptr::write_bytes(block.cast::<u8>(), (i % 251) as u8, len) };
        pool.push((block, len));
        if pool.len() > 300 {
            let (old, _) = pool.swap_remove((x as usize / 7) % pool.len());
            free(old);
        }
    }

    // realloc: growing and shrinking keep the contents and the rule.
    for (block, len) in pool.iter_mut() {
        // SAFETY: `block` holds `len` bytes written above.
        let first = unsafe { *block.cast::<u8>() };
        let new_len = if *len > 2500 {
            *len / 3
        } else {
            *len * 2 - *len / 4
        };
        let grown = realloc(*block, new_len);
        assert!(!grown.is_null());
        assert!(
            !crosses_page(grown as usize, new_len),
            "{new_len} bytes at {grown:p}"
        );
        let kept = (*len).min(new_len);
        // SAFETY: `grown` holds at least `kept` bytes copied from the old block.
        let bytes = unsafe { std::slice::from_raw_parts(grown.cast::<u8>(), kept) };
        assert!(
            bytes.iter().all(|&b| b == first),
            "contents lost in realloc"
        );
        *block = grown;
        *len = new_len;
    }
    for (block, _) in pool {
        free(block);
    }
    assert!(realloc(std::ptr::null_mut(), 0).is_null());
    let block = realloc(std::ptr::null_mut(), 64);
    assert!(!block.is_null());
    assert!(
        realloc(block, 0).is_null(),
        "realloc to 0 frees and gives null"
    );

    // OpenSSL itself, on these functions: AES-128-GCM of the first test case of the GCM
    // specification (zero key, zero 96-bit IV, 16 zero bytes).
    let mut tag = [0u8; 16];
    let ct = openssl::symm::encrypt_aead(
        openssl::symm::Cipher::aes_128_gcm(),
        &[0; 16],
        Some(&[0; 12]),
        &[],
        &[0; 16],
        &mut tag,
    )
    .unwrap();
    assert_eq!(hex(&ct), "0388dace60b6a392f328c2b971b2fe78");
    assert_eq!(hex(&tag), "ab6e47d42cec13bdf53a67b21257bddf");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
