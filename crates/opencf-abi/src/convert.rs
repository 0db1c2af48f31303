//! Raw-pointer conversions shared by the exported functions: input byte strings, the two-call
//! output protocol, lists of handles, templates in and `C_GetAttributeValue` out.
//!
//! Every pointer from the caller is read and written with `read_unaligned`/`write_unaligned`
//! (C callers do not always align what they pass), and no slice is built from a length above
//! [`MAX_DATA_LEN`] (data, signatures, PINs: the caller's buffers) or [`MAX_LEN`] (templates,
//! attribute values and mechanism parameters).

use std::ffi::c_void;
use std::mem::size_of;
use std::ops::Deref;
use std::ptr;

use zeroize::Zeroizing;

use crate::sys::*;
use crate::types::*;

/// Largest length accepted for a template, an attribute value or a mechanism parameter's
/// inner buffer (256 MiB).
pub(crate) const MAX_LEN: CK_ULONG = 256 << 20;

/// Largest length accepted for a data buffer given by pointer and length (64 GiB, AES-GCM's
/// own limit on one message): large single-part operations are the bulk engine's purpose, and
/// a length this side of it makes no slice larger than the address space allows.
pub(crate) const MAX_DATA_LEN: CK_ULONG = 1 << 36;

/// `CKR_ARGUMENTS_BAD` for a NULL required pointer.
pub(crate) fn req<T>(p: *mut T) -> CkResult<*mut T> {
    if p.is_null() {
        Err(CKR_ARGUMENTS_BAD)
    } else {
        Ok(p)
    }
}

/// Writes `v` to a pointer checked with [`req`].
///
/// # Safety
/// `p` must be valid for writing a `T` (alignment not required).
pub(crate) unsafe fn put<T>(p: *mut T, v: T) {
    // SAFETY: per the function's contract.
    unsafe { p.write_unaligned(v) }
}

/// Converts a length to `usize`, refusing anything above `max`.
fn checked_len(len: CK_ULONG, max: CK_ULONG, err: CK_RV) -> CkResult<usize> {
    if len > max {
        Err(err)
    } else {
        Ok(len as usize)
    }
}

/// An input byte string: NULL with a nonzero length or a length above [`MAX_DATA_LEN`] is
/// `CKR_ARGUMENTS_BAD`; a zero length is the empty slice.
///
/// # Safety
/// A non-NULL `p` must be valid for reading `len` bytes for `'a`.
pub(crate) unsafe fn bytes<'a>(p: *const u8, len: CK_ULONG) -> CkResult<&'a [u8]> {
    let n = checked_len(len, MAX_DATA_LEN, CKR_ARGUMENTS_BAD)?;
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(CKR_ARGUMENTS_BAD);
    }
    // SAFETY: per the function's contract; `u8` needs no alignment.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// A writable byte buffer given by pointer and length (`C_GenerateRandom`), same rules as
/// [`bytes`].
///
/// # Safety
/// A non-NULL `p` must be valid for writing `len` bytes for `'a`, and nothing else may access
/// them meanwhile.
pub(crate) unsafe fn bytes_mut<'a>(p: *mut u8, len: CK_ULONG) -> CkResult<&'a mut [u8]> {
    let n = checked_len(len, MAX_DATA_LEN, CKR_ARGUMENTS_BAD)?;
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(CKR_ARGUMENTS_BAD);
    }
    // SAFETY: per the function's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

/// Copies bytes from a structure's inner pointer: NULL with a nonzero length, or a length
/// above [`MAX_LEN`], is `err`.
///
/// # Safety
/// A non-NULL `p` must be valid for reading `len` bytes.
pub(crate) unsafe fn copy_inner(p: *const c_void, len: CK_ULONG, err: CK_RV) -> CkResult<Vec<u8>> {
    // SAFETY: per the function's contract.
    Ok(unsafe { inner_slice(p, len, err) }?.to_vec())
}

/// The bytes behind a structure's inner pointer, checked as by [`copy_inner`], not copied.
///
/// # Safety
/// A non-NULL `p` must be valid for reading `len` bytes for the returned lifetime.
pub(crate) unsafe fn inner_slice<'a>(
    p: *const c_void,
    len: CK_ULONG,
    err: CK_RV,
) -> CkResult<&'a [u8]> {
    let n = checked_len(len, MAX_LEN, err)?;
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(err);
    }
    // SAFETY: per the function's contract.
    Ok(unsafe { std::slice::from_raw_parts(p as *const u8, n) })
}

/// Input bytes that may have been copied because they overlap the output buffer (in-place
/// encryption): a `&[u8]` and a `&mut [u8]` over the same memory are not allowed in Rust.
pub(crate) enum Input<'a> {
    Borrowed(&'a [u8]),
    Copied(Zeroizing<Vec<u8>>),
}

impl Deref for Input<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Input::Borrowed(b) => b,
            Input::Copied(v) => v,
        }
    }
}

/// The caller's output buffer and length pointer, for the two-call protocol.
pub(crate) struct Out {
    p: *mut u8,
    pul: *mut CK_ULONG,
    cap: usize,
}

impl Out {
    /// Checks `pul` (NULL is `CKR_ARGUMENTS_BAD`) and reads the capacity. Capacities above
    /// [`MAX_DATA_LEN`] are clamped to it (no operation produces more; never a wild slice).
    ///
    /// # Safety
    /// `pul` must be valid for reading and writing a `CK_ULONG`; a non-NULL `p` must be valid
    /// for writing `*pul` bytes until [`Out::run`] returns.
    pub(crate) unsafe fn new(p: *mut u8, pul: *mut CK_ULONG) -> CkResult<Out> {
        let pul = req(pul)?;
        // SAFETY: per the function's contract.
        let cap = unsafe { pul.read_unaligned() }.min(MAX_DATA_LEN) as usize;
        Ok(Out { p, pul, cap })
    }

    /// True for a size query (NULL output pointer).
    pub(crate) fn is_query(&self) -> bool {
        self.p.is_null()
    }

    /// Reads an input byte string for this call (see [`bytes`]); copies it when it overlaps
    /// the output buffer.
    ///
    /// # Safety
    /// As for [`bytes`].
    pub(crate) unsafe fn input<'a>(&self, p: *const u8, len: CK_ULONG) -> CkResult<Input<'a>> {
        // SAFETY: per the function's contract.
        let data = unsafe { bytes(p, len)? };
        if self.p.is_null() || data.is_empty() || self.cap == 0 {
            return Ok(Input::Borrowed(data));
        }
        let (a, b) = (data.as_ptr() as usize, self.p as usize);
        if a < b + self.cap && b < a + data.len() {
            Ok(Input::Copied(Zeroizing::new(data.to_vec())))
        } else {
            Ok(Input::Borrowed(data))
        }
    }

    /// Runs `f` with the caller's buffer as an [`OutBuf`], then reports the length: on `Ok`
    /// and on `CKR_BUFFER_TOO_SMALL` `*pul` is set to the length the backend announced;
    /// other errors leave `*pul` alone.
    ///
    /// # Safety
    /// As for [`Out::new`]; no other live reference may cover the output buffer.
    pub(crate) unsafe fn run<R>(self, f: impl FnOnce(&mut OutBuf) -> CkResult<R>) -> CkResult<R> {
        let buf = if self.p.is_null() {
            None
        } else {
            // SAFETY: per the function's contract.
            Some(unsafe { std::slice::from_raw_parts_mut(self.p, self.cap) })
        };
        let query = buf.is_none();
        // The `OutBuf` (and its borrow of the caller's buffer) ends before `*pul` is written.
        let (result, len) = {
            let mut out = OutBuf::new(buf);
            let result = f(&mut out);
            (result, out.len())
        };
        match &result {
            Ok(_) if !query && len > self.cap => return Err(CKR_GENERAL_ERROR),
            Ok(_) | Err(CKR_BUFFER_TOO_SMALL) => {
                // SAFETY: per the function's contract.
                unsafe { put(self.pul, len as CK_ULONG) }
            }
            Err(_) => {}
        }
        result
    }
}

/// `pOut`/`pulOutLen` only (`C_EncryptFinal`, `C_DigestFinal`, …).
///
/// # Safety
/// As for [`Out::new`].
pub(crate) unsafe fn out_only(
    p: *mut u8,
    pul: *mut CK_ULONG,
    f: impl FnOnce(&mut OutBuf) -> CkResult<()>,
) -> CkResult<()> {
    // SAFETY: per the function's contract.
    unsafe { Out::new(p, pul)?.run(f) }
}

/// One input byte string and the two-call output (`C_Encrypt`, `C_Sign`, …).
///
/// # Safety
/// As for [`bytes`] and [`Out::new`].
pub(crate) unsafe fn in_out(
    data: *const u8,
    data_len: CK_ULONG,
    p: *mut u8,
    pul: *mut CK_ULONG,
    f: impl FnOnce(&[u8], &mut OutBuf) -> CkResult<()>,
) -> CkResult<()> {
    // SAFETY: per the function's contract.
    unsafe {
        let out = Out::new(p, pul)?;
        let data = out.input(data, data_len)?;
        out.run(|o| f(&data, o))
    }
}

/// Writes a list with the two-call protocol used by `C_GetSlotList` and
/// `C_GetMechanismList`: NULL list → count; too small → `CKR_BUFFER_TOO_SMALL` with the count.
///
/// # Safety
/// `pul` must be valid for reading and writing; a non-NULL `p` for writing `*pul` items.
pub(crate) unsafe fn write_list<T: Copy>(
    p: *mut T,
    pul: *mut CK_ULONG,
    items: &[T],
) -> CkResult<()> {
    let n = items.len() as CK_ULONG;
    // SAFETY: per the function's contract.
    unsafe {
        if !p.is_null() {
            if pul.read_unaligned() < n {
                put(pul, n);
                return Err(CKR_BUFFER_TOO_SMALL);
            }
            for (i, item) in items.iter().enumerate() {
                put(p.add(i), *item);
            }
        }
        put(pul, n);
    }
    Ok(())
}

/// Checks a template's pointer and count; returns the count.
fn template_count(p: *const CK_ATTRIBUTE, n: CK_ULONG) -> CkResult<usize> {
    if n > MAX_LEN / size_of::<CK_ATTRIBUTE>() as CK_ULONG {
        return Err(CKR_ARGUMENTS_BAD);
    }
    if n > 0 && p.is_null() {
        return Err(CKR_ARGUMENTS_BAD);
    }
    Ok(n as usize)
}

/// Copies in a template (`C_CreateObject`, `C_FindObjectsInit`, …). NULL with a nonzero count
/// is `CKR_ARGUMENTS_BAD`; a bad value pointer or length is `CKR_ATTRIBUTE_VALUE_INVALID`;
/// array attributes (`CKF_ARRAY_ATTRIBUTE`) are encoded with [`encode_template`].
///
/// # Safety
/// A non-NULL `p` must be valid for reading `n` attributes whose value pointers are valid
/// for their lengths.
pub(crate) unsafe fn template(p: *const CK_ATTRIBUTE, n: CK_ULONG) -> CkResult<Vec<Attribute>> {
    let n = template_count(p, n)?;
    // SAFETY: per the function's contract.
    unsafe { read_attributes(p, n, true) }
}

/// # Safety
/// As for [`template`], with `p` non-NULL when `n > 0`.
unsafe fn read_attributes(
    p: *const CK_ATTRIBUTE,
    n: usize,
    allow_array: bool,
) -> CkResult<Vec<Attribute>> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: per the function's contract.
        let a = unsafe { p.add(i).read_unaligned() };
        if a.ulValueLen == CK_UNAVAILABLE_INFORMATION {
            return Err(CKR_ATTRIBUTE_VALUE_INVALID);
        }
        let value = if is_template_attribute(a.type_) {
            // A nested template, one level deep.
            let size = size_of::<CK_ATTRIBUTE>() as CK_ULONG;
            if !allow_array || a.ulValueLen % size != 0 || a.ulValueLen > MAX_LEN {
                return Err(CKR_ATTRIBUTE_VALUE_INVALID);
            }
            let count = (a.ulValueLen / size) as usize;
            if count > 0 && a.pValue.is_null() {
                return Err(CKR_ATTRIBUTE_VALUE_INVALID);
            }
            // SAFETY: per the function's contract (the caller's nested array).
            let nested = unsafe { read_attributes(a.pValue as *const CK_ATTRIBUTE, count, false)? };
            encode_template(&nested)
        } else {
            // SAFETY: per the function's contract.
            unsafe { copy_inner(a.pValue, a.ulValueLen, CKR_ATTRIBUTE_VALUE_INVALID)? }
        };
        out.push(Attribute {
            kind: a.type_,
            value,
        });
    }
    Ok(out)
}

/// Reads the attribute types of a `C_GetAttributeValue` template.
///
/// # Safety
/// As for [`template`] (only the types are read).
pub(crate) unsafe fn template_types(
    p: *const CK_ATTRIBUTE,
    n: CK_ULONG,
) -> CkResult<Vec<CK_ATTRIBUTE_TYPE>> {
    let n = template_count(p, n)?;
    // SAFETY: per the function's contract.
    Ok((0..n)
        .map(|i| unsafe { ptr::addr_of!((*p.add(i)).type_).read_unaligned() })
        .collect())
}

/// Outcome of filling one attribute, ordered by precedence of the overall return value.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fill {
    Ok,
    TooSmall,
    Invalid,
    Sensitive,
}

/// Fills the caller's `C_GetAttributeValue` template from the backend's answers (one per
/// attribute, in order). Every attribute is processed; the return value is
/// `CKR_ATTRIBUTE_SENSITIVE`, else `CKR_ATTRIBUTE_TYPE_INVALID`, else `CKR_BUFFER_TOO_SMALL`,
/// else `CKR_OK`.
///
/// # Safety
/// `p` must be valid for reading and writing `answers.len()` attributes whose non-NULL value
/// pointers are valid for writing their lengths.
pub(crate) unsafe fn fill_template(p: *mut CK_ATTRIBUTE, answers: &[AttrValue]) -> CkResult<()> {
    let mut worst = Fill::Ok;
    for (i, answer) in answers.iter().enumerate() {
        // SAFETY: per the function's contract.
        let fill = unsafe { fill_one(p.add(i), answer, true)? };
        worst = worst.max(fill);
    }
    match worst {
        Fill::Ok => Ok(()),
        Fill::TooSmall => Err(CKR_BUFFER_TOO_SMALL),
        Fill::Invalid => Err(CKR_ATTRIBUTE_TYPE_INVALID),
        Fill::Sensitive => Err(CKR_ATTRIBUTE_SENSITIVE),
    }
}

/// # Safety
/// As for [`fill_template`], for one attribute.
unsafe fn fill_one(
    slot: *mut CK_ATTRIBUTE,
    answer: &AttrValue,
    allow_array: bool,
) -> CkResult<Fill> {
    let len_ptr = unsafe { ptr::addr_of_mut!((*slot).ulValueLen) };
    // SAFETY: per the function's contract.
    let a = unsafe { slot.read_unaligned() };
    let value = match answer {
        AttrValue::Value(v) => v,
        AttrValue::Sensitive => {
            unsafe { put(len_ptr, CK_UNAVAILABLE_INFORMATION) };
            return Ok(Fill::Sensitive);
        }
        AttrValue::Invalid => {
            unsafe { put(len_ptr, CK_UNAVAILABLE_INFORMATION) };
            return Ok(Fill::Invalid);
        }
    };
    if allow_array && is_template_attribute(a.type_) {
        let nested = decode_template(value).map_err(|_| CKR_GENERAL_ERROR)?;
        // SAFETY: per the function's contract.
        return unsafe { fill_array(slot, &nested) };
    }
    // SAFETY: per the function's contract.
    unsafe {
        if a.pValue.is_null() {
            put(len_ptr, value.len() as CK_ULONG);
            Ok(Fill::Ok)
        } else if (a.ulValueLen as u128) < value.len() as u128 {
            put(len_ptr, CK_UNAVAILABLE_INFORMATION);
            Ok(Fill::TooSmall)
        } else {
            ptr::copy_nonoverlapping(value.as_ptr(), a.pValue as *mut u8, value.len());
            put(len_ptr, value.len() as CK_ULONG);
            Ok(Fill::Ok)
        }
    }
}

/// An array attribute: pValue NULL → the size of the nested array; a big enough array whose
/// value pointers are all NULL → each entry's type and length; otherwise each caller entry is
/// filled by its type with the usual rules.
///
/// # Safety
/// As for [`fill_template`], for one attribute.
unsafe fn fill_array(slot: *mut CK_ATTRIBUTE, nested: &[Attribute]) -> CkResult<Fill> {
    let len_ptr = unsafe { ptr::addr_of_mut!((*slot).ulValueLen) };
    // SAFETY: per the function's contract.
    let a = unsafe { slot.read_unaligned() };
    let need = (nested.len() * size_of::<CK_ATTRIBUTE>()) as CK_ULONG;
    if a.pValue.is_null() {
        unsafe { put(len_ptr, need) };
        return Ok(Fill::Ok);
    }
    if a.ulValueLen < need {
        unsafe { put(len_ptr, CK_UNAVAILABLE_INFORMATION) };
        return Ok(Fill::TooSmall);
    }
    let arr = a.pValue as *mut CK_ATTRIBUTE;
    // SAFETY: the caller's array holds at least `nested.len()` entries (checked above).
    unsafe {
        put(len_ptr, need);
        let all_null = (0..nested.len()).all(|i| {
            ptr::addr_of!((*arr.add(i)).pValue)
                .read_unaligned()
                .is_null()
        });
        let mut worst = Fill::Ok;
        for (i, attr) in nested.iter().enumerate() {
            let entry = arr.add(i);
            if all_null {
                put(ptr::addr_of_mut!((*entry).type_), attr.kind);
                put(
                    ptr::addr_of_mut!((*entry).ulValueLen),
                    attr.value.len() as CK_ULONG,
                );
                continue;
            }
            let kind = ptr::addr_of!((*entry).type_).read_unaligned();
            let answer = match nested.iter().find(|n| n.kind == kind) {
                Some(n) => AttrValue::Value(n.value.clone()),
                None => AttrValue::Invalid,
            };
            worst = worst.max(fill_one(entry, &answer, false)?);
        }
        Ok(worst)
    }
}

/// Validates `C_Initialize`'s argument.
///
/// # Safety
/// A non-NULL `p` must be valid for reading a `CK_C_INITIALIZE_ARGS`.
pub(crate) unsafe fn init_args(p: *const CK_C_INITIALIZE_ARGS) -> CkResult<InitArgs> {
    if p.is_null() {
        return Ok(InitArgs {
            os_locking_ok: true,
            no_os_threads: false,
            framework: false,
        });
    }
    // SAFETY: per the function's contract.
    let a = unsafe { p.read_unaligned() };
    if !a.pReserved.is_null() {
        return Err(CKR_ARGUMENTS_BAD);
    }
    let given = [
        a.CreateMutex.is_some(),
        a.DestroyMutex.is_some(),
        a.LockMutex.is_some(),
        a.UnlockMutex.is_some(),
    ];
    let n = given.iter().filter(|g| **g).count();
    if n != 0 && n != given.len() {
        return Err(CKR_ARGUMENTS_BAD);
    }
    let os_locking_ok = a.flags & CKF_OS_LOCKING_OK != 0;
    if n == given.len() && !os_locking_ok {
        // We can only use the operating system's locking.
        return Err(CKR_CANT_LOCK);
    }
    Ok(InitArgs {
        os_locking_ok,
        no_os_threads: a.flags & CKF_LIBRARY_CANT_CREATE_OS_THREADS != 0,
        framework: a.flags & crate::CKF_OPENCF_FRAMEWORK != 0,
    })
}
