//! Where a module's copy of OpenSSL puts its memory: no block of at most 4 KiB straddles a
//! page boundary.
//!
//! Every OpenCF module links its own (vendored, hidden) copy of OpenSSL, so each can choose
//! that copy's memory functions. [`install`] sets them with `CRYPTO_set_mem_functions` at the
//! start of `C_Initialize`, before the copy has allocated anything (OpenSSL refuses the call
//! after its first allocation; the copy then keeps `malloc` and nothing else changes).
//!
//! # Why
//!
//! OpenSSL's AES-GCM provider context keeps the GCM state (counter block, tag, GHASH
//! accumulator) at an offset that is 8 modulo 16, and the AVX-512 code writes it with 16-byte
//! stores on every operation. glibc places the context wherever the process's earlier
//! allocations leave room; when a page boundary falls inside those first 0x50 bytes, each
//! operation pays page-split stores. For a 16-byte AES-128-GCM `C_EncryptInit` + `C_Encrypt`
//! that was about 30 ns of 260 ns, in whichever module (or process) happened to draw the
//! placement — the framework's slot 0 did, the software token loaded directly did not
//! (docs/PERFORMANCE.md, "Framework overhead").
//!
//! # Rule
//!
//! Like a slab allocator, small objects stay inside one page: a block of `1..=4096` bytes
//! that `malloc` (or `realloc`) returns across a 4 KiB boundary is replaced by one aligned to
//! the next power of two of its size, which cannot cross one. Blocks that already fit, and
//! larger blocks, are `malloc`'s own. The replacement is an allocation and a free more, for a
//! fraction of blocks proportional to their size (a 1 KiB block crosses a boundary in about a
//! quarter of placements); every block is still released with `free`.

use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

/// The size of the pages that small blocks must not straddle.
pub const PAGE: usize = 4096;

extern "C" {
    // OpenSSL 3: `int CRYPTO_set_mem_functions(CRYPTO_malloc_fn, CRYPTO_realloc_fn,
    // CRYPTO_free_fn)`; 0 when an allocation has already been made. Not declared by
    // `openssl-sys`; resolved against the vendored copy linked into this module.
    fn CRYPTO_set_mem_functions(
        malloc_fn: extern "C" fn(usize, *const c_char, c_int) -> *mut c_void,
        realloc_fn: extern "C" fn(*mut c_void, usize, *const c_char, c_int) -> *mut c_void,
        free_fn: extern "C" fn(*mut c_void, *const c_char, c_int),
    ) -> c_int;
}

/// Whether `len` bytes at `addr` are a small block (at most one page) that straddles a page
/// boundary.
pub fn crosses_page(addr: usize, len: usize) -> bool {
    len > 0 && len <= PAGE && addr % PAGE + len > PAGE
}

/// A block of `len` (1..=4096) bytes that cannot cross a page boundary, or null.
fn within_one_page(len: usize) -> *mut c_void {
    let align = len.next_power_of_two().max(16);
    let mut block = std::ptr::null_mut();
    // SAFETY: `align` is a power of two and a multiple of `size_of::<*mut c_void>()`, as
    // posix_memalign requires; on failure `block` stays null.
    if unsafe { libc::posix_memalign(&mut block, align, len) } != 0 {
        return std::ptr::null_mut();
    }
    block
}

/// `block` (`num` bytes from malloc or realloc, not yet handed out, null allowed) as it is,
/// or, when it straddles a page, moved with its first `keep` bytes into a block that does not
/// (kept where it is if that allocation fails).
fn in_one_page(block: *mut c_void, num: usize, keep: usize) -> *mut c_void {
    if block.is_null() || !crosses_page(block as usize, num) {
        return block;
    }
    let moved = within_one_page(num);
    if moved.is_null() {
        return block;
    }
    // SAFETY: `block` holds at least `keep` ≤ `num` bytes and `moved` has room for `num`; the
    // two are distinct live blocks, and `block` is released without having been handed out.
    unsafe {
        std::ptr::copy_nonoverlapping(block.cast::<u8>(), moved.cast::<u8>(), keep);
        libc::free(block);
    }
    moved
}

/// OpenSSL's `malloc`: glibc's block, moved when it is small and straddles a page. `num == 0`
/// gives null, as OpenSSL's own `CRYPTO_malloc` does.
extern "C" fn ossl_malloc(num: usize, _file: *const c_char, _line: c_int) -> *mut c_void {
    if num == 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: plain allocation; `in_one_page` checks the result.
    in_one_page(unsafe { libc::malloc(num) }, num, 0)
}

/// OpenSSL's `realloc`: null grows like `malloc`, zero frees and gives null (OpenSSL's own
/// `CRYPTO_realloc` does both before reaching `realloc`); a small result that straddles a page
/// is copied into a block that does not.
extern "C" fn ossl_realloc(
    block: *mut c_void,
    num: usize,
    file: *const c_char,
    line: c_int,
) -> *mut c_void {
    if block.is_null() {
        return ossl_malloc(num, file, line);
    }
    if num == 0 {
        // SAFETY: `block` is a live allocation of this copy of OpenSSL (malloc'd or
        // posix_memalign'd, both freed with free).
        unsafe { libc::free(block) };
        return std::ptr::null_mut();
    }
    // SAFETY: as above; realloc keeps `block` valid when it fails. The grown block holds
    // `num` bytes of content.
    in_one_page(unsafe { libc::realloc(block, num) }, num, num)
}

/// OpenSSL's `free`.
extern "C" fn ossl_free(block: *mut c_void, _file: *const c_char, _line: c_int) {
    // SAFETY: every block of this copy comes from malloc, realloc or posix_memalign above
    // (or is null, which free accepts).
    unsafe { libc::free(block) }
}

/// Gives this module's copy of OpenSSL the memory functions above, once; later calls return
/// the first answer. `false` when OpenSSL had already allocated (for instance in a test
/// binary that used the `openssl` crate first): the copy keeps plain `malloc`.
pub fn install() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(|| {
        // SAFETY: the three functions have the signatures OpenSSL 3 expects and stay valid
        // while the module is loaded; OpenSSL only accepts them before its first allocation,
        // so no block is ever freed by a function other than the one that matches its
        // allocator.
        unsafe { CRYPTO_set_mem_functions(ossl_malloc, ossl_realloc, ossl_free) == 1 }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crosses_page_only_for_small_blocks_over_a_boundary() {
        assert!(!crosses_page(0x1000, 4096));
        assert!(crosses_page(0x1008, 4096));
        assert!(crosses_page(0xff8, 16));
        assert!(!crosses_page(0xff0, 16));
        assert!(!crosses_page(0xff8, 8));
        assert!(!crosses_page(0xff8, 0));
        // Larger than a page: any placement crosses, and none is asked of malloc.
        assert!(!crosses_page(0x1008, 4097));
    }

    #[test]
    fn blocks_within_one_page_fit_their_page() {
        for len in [1, 15, 16, 17, 100, 0x3f8, 1000, 2048, 2049, 4095, 4096] {
            let block = within_one_page(len);
            assert!(!block.is_null());
            assert!(
                !crosses_page(block as usize, len),
                "{len} bytes at {block:p}"
            );
            // SAFETY: from posix_memalign above.
            unsafe { libc::free(block) };
        }
    }
}
