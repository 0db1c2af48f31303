//! Safe Rust forms of the PKCS#11 values that cross the C ABI.
//!
//! The ABI layer ([`crate::export`]) turns raw pointers into these types before a
//! [`crate::Backend`] sees them, and turns them back afterwards. Nothing here is `unsafe`.

use crate::sys::*;

/// Result of a PKCS#11 operation: `Err` carries the `CKR_*` code.
pub type CkResult<T> = Result<T, CK_RV>;

/// `CKF_ARRAY_ATTRIBUTE`: attributes whose value is itself a template.
pub const ARRAY_ATTRIBUTE_FLAG: CK_ATTRIBUTE_TYPE = 0x4000_0000;

/// One attribute of a template passed in by the caller (`C_CreateObject`, `C_FindObjectsInit`, …).
///
/// `value` holds the bytes exactly as the caller laid them out (`CK_ULONG` values in native byte
/// order, `CK_BBOOL` as one byte). Attributes whose type has [`ARRAY_ATTRIBUTE_FLAG`] carry their
/// nested template encoded with [`encode_template`].
#[derive(Clone, PartialEq, Eq)]
pub struct Attribute {
    /// `CKA_*` type.
    pub kind: CK_ATTRIBUTE_TYPE,
    /// Raw value bytes.
    pub value: Vec<u8>,
}

impl std::fmt::Debug for Attribute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Values may be secret: print only their length.
        write!(f, "Attribute({:#x}, {} bytes)", self.kind, self.value.len())
    }
}

impl Attribute {
    /// An attribute with raw bytes.
    pub fn new(kind: CK_ATTRIBUTE_TYPE, value: impl Into<Vec<u8>>) -> Self {
        Attribute {
            kind,
            value: value.into(),
        }
    }
    /// A `CK_ULONG` attribute.
    pub fn ulong(kind: CK_ATTRIBUTE_TYPE, v: CK_ULONG) -> Self {
        Attribute {
            kind,
            value: v.to_ne_bytes().to_vec(),
        }
    }
    /// A `CK_BBOOL` attribute.
    pub fn bool(kind: CK_ATTRIBUTE_TYPE, v: bool) -> Self {
        Attribute {
            kind,
            value: vec![v as u8],
        }
    }
    /// The value read as a `CK_ULONG`; a value of the wrong size is `CKR_ATTRIBUTE_VALUE_INVALID`.
    pub fn as_ulong(&self) -> CkResult<CK_ULONG> {
        ulong_from_bytes(&self.value)
    }
    /// The value read as a `CK_BBOOL`; anything but one byte is `CKR_ATTRIBUTE_VALUE_INVALID`.
    pub fn as_bool(&self) -> CkResult<bool> {
        bool_from_bytes(&self.value)
    }
}

/// Reads a native-endian `CK_ULONG` of exactly the right size.
pub fn ulong_from_bytes(b: &[u8]) -> CkResult<CK_ULONG> {
    let arr: [u8; std::mem::size_of::<CK_ULONG>()] =
        b.try_into().map_err(|_| CKR_ATTRIBUTE_VALUE_INVALID)?;
    Ok(CK_ULONG::from_ne_bytes(arr))
}

/// Reads a one-byte `CK_BBOOL`.
pub fn bool_from_bytes(b: &[u8]) -> CkResult<bool> {
    match b {
        [v] => Ok(*v != 0),
        _ => Err(CKR_ATTRIBUTE_VALUE_INVALID),
    }
}

/// Whether `t` is an attribute whose value is a nested template (`CKA_WRAP_TEMPLATE`,
/// `CKA_UNWRAP_TEMPLATE`, `CKA_DERIVE_TEMPLATE`, `CKA_ENCAPSULATE_TEMPLATE`,
/// `CKA_DECAPSULATE_TEMPLATE`). Other types with [`ARRAY_ATTRIBUTE_FLAG`] set, such as
/// `CKA_ALLOWED_MECHANISMS` (an array of mechanism types) or unknown ones, are plain bytes.
pub fn is_template_attribute(t: CK_ATTRIBUTE_TYPE) -> bool {
    matches!(
        t,
        CKA_WRAP_TEMPLATE
            | CKA_UNWRAP_TEMPLATE
            | CKA_DERIVE_TEMPLATE
            | CKA_ENCAPSULATE_TEMPLATE
            | CKA_DECAPSULATE_TEMPLATE
    )
}

/// Encodes a nested template (the value of an array attribute such as `CKA_WRAP_TEMPLATE`):
/// for each attribute, type (u64 LE), length (u64 LE), value.
pub fn encode_template(attrs: &[Attribute]) -> Vec<u8> {
    let mut out = Vec::new();
    for a in attrs {
        out.extend_from_slice(&a.kind.to_le_bytes());
        out.extend_from_slice(&(a.value.len() as u64).to_le_bytes());
        out.extend_from_slice(&a.value);
    }
    out
}

/// Decodes what [`encode_template`] produced; malformed input is `CKR_ATTRIBUTE_VALUE_INVALID`.
pub fn decode_template(mut b: &[u8]) -> CkResult<Vec<Attribute>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        if b.len() < 16 {
            return Err(CKR_ATTRIBUTE_VALUE_INVALID);
        }
        let kind = CK_ATTRIBUTE_TYPE::from_le_bytes(b[..8].try_into().unwrap());
        let len = u64::from_le_bytes(b[8..16].try_into().unwrap());
        b = &b[16..];
        let len = usize::try_from(len).map_err(|_| CKR_ATTRIBUTE_VALUE_INVALID)?;
        if b.len() < len {
            return Err(CKR_ATTRIBUTE_VALUE_INVALID);
        }
        out.push(Attribute {
            kind,
            value: b[..len].to_vec(),
        });
        b = &b[len..];
    }
    Ok(out)
}

/// What a backend answers for one attribute asked for by `C_GetAttributeValue`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttrValue {
    /// The value (array attributes encoded with [`encode_template`]).
    Value(Vec<u8>),
    /// The attribute is sensitive or unextractable: `CKR_ATTRIBUTE_SENSITIVE`.
    Sensitive,
    /// The object has no such attribute: `CKR_ATTRIBUTE_TYPE_INVALID`.
    Invalid,
}

/// Largest GCM IV the OpenCF modules accept (bytes). PKCS#11 sets no bound; this one keeps a
/// hostile `ulIvLen` from costing more than a bounded GHASH.
pub const GCM_MAX_IV: usize = 64 * 1024;

/// Checks a GCM IV (`CK_GCM_PARAMS.pIv`): 1 to [`GCM_MAX_IV`] bytes, else
/// `CKR_MECHANISM_PARAM_INVALID`.
pub fn gcm_iv_ok(iv: &[u8]) -> CkResult<()> {
    if iv.is_empty() || iv.len() > GCM_MAX_IV {
        return Err(CKR_MECHANISM_PARAM_INVALID);
    }
    Ok(())
}

/// The GCM tag length in bytes for `ulTagBits`: one of the lengths NIST SP 800-38D allows,
/// else `CKR_MECHANISM_PARAM_INVALID`.
pub fn gcm_tag_len(tag_bits: CK_ULONG) -> CkResult<usize> {
    match tag_bits {
        32 | 64 | 96 | 104 | 112 | 120 | 128 => Ok(tag_bits as usize / 8),
        _ => Err(CKR_MECHANISM_PARAM_INVALID),
    }
}

/// The initial counter block of a `CKM_AES_CTR` mechanism and how many bytes may be processed
/// before the counter wraps within its `ulCounterBits` low bits (saturating at `u128::MAX`).
/// `ulCounterBits` must be 1 to 128 and the parameter a `CK_AES_CTR_PARAMS`, else
/// `CKR_MECHANISM_PARAM_INVALID`.
pub fn aes_ctr_params(m: &Mechanism) -> CkResult<(&[u8; 16], u128)> {
    let MechParam::AesCtr { counter_bits, cb } = &m.param else {
        return Err(CKR_MECHANISM_PARAM_INVALID);
    };
    let bits = *counter_bits;
    if !(1..=128).contains(&bits) {
        return Err(CKR_MECHANISM_PARAM_INVALID);
    }
    let value = u128::from_be_bytes(*cb);
    let blocks = if bits == 128 {
        (u128::MAX - value).saturating_add(1)
    } else {
        let mask = (1u128 << bits) - 1;
        (1u128 << bits) - (value & mask)
    };
    Ok((cb, blocks.saturating_mul(16)))
}

/// A mechanism with its parameter already parsed from the caller's `CK_MECHANISM`.
#[derive(Clone, Debug)]
pub struct Mechanism {
    /// `CKM_*` type.
    pub mechanism: CK_MECHANISM_TYPE,
    /// The parsed parameter.
    pub param: MechParam,
}

impl Mechanism {
    /// A mechanism without parameter.
    pub fn new(mechanism: CK_MECHANISM_TYPE) -> Self {
        Mechanism {
            mechanism,
            param: MechParam::None,
        }
    }
}

/// Mechanism parameters, parsed by mechanism type. Structures the ABI layer does not know
/// arrive as [`MechParam::Bytes`] (their raw bytes), which backends reject for mechanisms that
/// need a structure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MechParam {
    /// No parameter (`pParameter` NULL and length 0).
    None,
    /// A byte string: an IV (CBC, key wrap) or an unknown structure's raw bytes.
    Bytes(Vec<u8>),
    /// A single `CK_ULONG` (`CK_MAC_GENERAL_PARAMS`).
    Ulong(CK_ULONG),
    /// `CK_AES_CTR_PARAMS`.
    AesCtr {
        /// Number of counter bits in the block.
        counter_bits: CK_ULONG,
        /// Initial counter block.
        cb: [u8; 16],
    },
    /// `CK_GCM_PARAMS`.
    Gcm {
        /// IV.
        iv: Vec<u8>,
        /// `ulIvBits` as given.
        iv_bits: CK_ULONG,
        /// Additional authenticated data.
        aad: Vec<u8>,
        /// Tag length in bits.
        tag_bits: CK_ULONG,
    },
    /// `CK_SALSA20_CHACHA20_POLY1305_PARAMS`.
    ChaCha20Poly1305 {
        /// Nonce.
        nonce: Vec<u8>,
        /// Additional authenticated data.
        aad: Vec<u8>,
    },
    /// `CK_RSA_PKCS_PSS_PARAMS`.
    RsaPss {
        /// Hash mechanism.
        hash_alg: CK_MECHANISM_TYPE,
        /// `CKG_MGF1_*`.
        mgf: CK_RSA_PKCS_MGF_TYPE,
        /// Salt length in bytes.
        salt_len: CK_ULONG,
    },
    /// `CK_RSA_PKCS_OAEP_PARAMS`.
    RsaOaep {
        /// Hash mechanism.
        hash_alg: CK_MECHANISM_TYPE,
        /// `CKG_MGF1_*`.
        mgf: CK_RSA_PKCS_MGF_TYPE,
        /// `CKZ_DATA_SPECIFIED` or 0.
        source: CK_ULONG,
        /// The label.
        source_data: Vec<u8>,
    },
    /// `CK_ECDH1_DERIVE_PARAMS`.
    Ecdh1 {
        /// `CKD_*`.
        kdf: CK_ULONG,
        /// Shared info for the KDF.
        shared_data: Vec<u8>,
        /// The other party's public value.
        public_data: Vec<u8>,
    },
    /// `CK_PKCS5_PBKD2_PARAMS2` (and the older `CK_PKCS5_PBKD2_PARAMS`).
    Pbkdf2 {
        /// `CKZ_SALT_SPECIFIED`.
        salt_source: CK_ULONG,
        /// Salt.
        salt: Vec<u8>,
        /// Iteration count.
        iterations: CK_ULONG,
        /// `CKP_PKCS5_PBKD2_HMAC_*`.
        prf: CK_ULONG,
        /// Password.
        password: Vec<u8>,
    },
    /// `CK_HKDF_PARAMS`.
    Hkdf {
        /// Run the extract step.
        extract: bool,
        /// Run the expand step.
        expand: bool,
        /// Hash mechanism of the PRF.
        prf_hash: CK_MECHANISM_TYPE,
        /// `CKF_HKDF_SALT_*`.
        salt_type: CK_ULONG,
        /// Salt (for `CKF_HKDF_SALT_DATA`).
        salt: Vec<u8>,
        /// Salt key (for `CKF_HKDF_SALT_KEY`).
        salt_key: CK_OBJECT_HANDLE,
        /// Info.
        info: Vec<u8>,
    },
    /// `CK_EDDSA_PARAMS`.
    Eddsa {
        /// Pre-hash variant.
        ph: bool,
        /// Context string.
        context: Vec<u8>,
    },
    /// `CK_SIGN_ADDITIONAL_CONTEXT` (ML-DSA, SLH-DSA and their `CKM_HASH_*_SHA*` variants).
    SignContext {
        /// `CKH_*` hedge variant.
        hedge: CK_ULONG,
        /// Context string.
        context: Vec<u8>,
    },
    /// `CK_HASH_SIGN_ADDITIONAL_CONTEXT` (`CKM_HASH_ML_DSA`, `CKM_HASH_SLH_DSA`: the data is
    /// a digest made with `hash`).
    HashSignContext {
        /// `CKH_*` hedge variant.
        hedge: CK_ULONG,
        /// Context string.
        context: Vec<u8>,
        /// `CKM_*` of the hash that produced the digest.
        hash: CK_MECHANISM_TYPE,
    },
}

/// Parameters of one message of a message-based AEAD call (`C_EncryptMessage`, …), copied in
/// from the caller's structure; the ABI layer copies `iv` (when generated) and `tag` (on
/// encryption) back out on success.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MessageParams {
    /// `CK_GCM_MESSAGE_PARAMS`.
    Gcm {
        /// IV (input, or output when generated).
        iv: Vec<u8>,
        /// Fixed bits of a generated IV.
        iv_fixed_bits: CK_ULONG,
        /// `CKG_NO_GENERATE`, `CKG_GENERATE`, `CKG_GENERATE_COUNTER`, `CKG_GENERATE_RANDOM`.
        iv_generator: CK_GENERATOR_FUNCTION,
        /// Tag (output when encrypting, input when decrypting).
        tag: Vec<u8>,
        /// Tag length in bits.
        tag_bits: CK_ULONG,
    },
    /// `CK_SALSA20_CHACHA20_POLY1305_MSG_PARAMS`.
    ChaCha20Poly1305 {
        /// Nonce.
        nonce: Vec<u8>,
        /// 16-byte tag (output when encrypting, input when decrypting).
        tag: Vec<u8>,
    },
}

/// The caller's output buffer, for the PKCS#11 two-call protocol.
///
/// A backend calls [`OutBuf::reserve`] with the length it will produce. With a NULL buffer the
/// call is a size query: `reserve` returns `Ok(None)`, the backend returns `Ok` at once and
/// leaves its operation active. With a buffer that is too small `reserve` fails with
/// `CKR_BUFFER_TOO_SMALL` (the operation also stays active); the ABI layer reports the needed
/// length in both cases.
#[derive(Debug)]
pub struct OutBuf<'a> {
    buf: Option<&'a mut [u8]>,
    len: usize,
}

impl<'a> OutBuf<'a> {
    /// Wraps the caller's buffer (`None` for a NULL pointer).
    pub fn new(buf: Option<&'a mut [u8]>) -> Self {
        OutBuf { buf, len: 0 }
    }
    /// True for a size query (NULL output pointer).
    pub fn is_query(&self) -> bool {
        self.buf.is_none()
    }
    /// Capacity of the caller's buffer (0 for a query).
    pub fn capacity(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| b.len())
    }
    /// Announces `n` bytes of output; see the type's documentation.
    pub fn reserve(&mut self, n: usize) -> CkResult<Option<&mut [u8]>> {
        self.len = n;
        match self.buf.as_deref_mut() {
            None => Ok(None),
            Some(b) if b.len() < n => Err(CKR_BUFFER_TOO_SMALL),
            Some(b) => Ok(Some(&mut b[..n])),
        }
    }
    /// Records the length actually written after [`OutBuf::reserve`] (which may be less).
    pub fn set_len(&mut self, n: usize) {
        self.len = n;
    }
    /// Reserves `data.len()` bytes and copies `data`. `Ok(false)`: it was a size query.
    pub fn write(&mut self, data: &[u8]) -> CkResult<bool> {
        match self.reserve(data.len())? {
            None => Ok(false),
            Some(b) => {
                b.copy_from_slice(data);
                Ok(true)
            }
        }
    }
    /// The bytes written so far (`None` for a size query), after [`OutBuf::set_len`] or
    /// [`OutBuf::write`].
    pub fn filled(&self) -> Option<&[u8]> {
        let n = self.len;
        self.buf.as_deref().and_then(|b| b.get(..n))
    }
    /// The length to report to the caller.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True when nothing is to be reported.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The caller's buffer as a C pointer and capacity (NULL and 0 for a size query), to hand
    /// straight to a loaded module ([`crate::provider::Provider`]).
    pub(crate) fn as_raw(&mut self) -> (*mut u8, usize) {
        match self.buf.as_deref_mut() {
            None => (std::ptr::null_mut(), 0),
            Some(b) => (b.as_mut_ptr(), b.len()),
        }
    }
}

/// What `C_Initialize` was given, validated by the ABI layer.
#[derive(Clone, Copy, Debug, Default)]
pub struct InitArgs {
    /// `CKF_OS_LOCKING_OK` was set (or no arguments were passed).
    pub os_locking_ok: bool,
    /// `CKF_LIBRARY_CANT_CREATE_OS_THREADS` was set.
    pub no_os_threads: bool,
    /// [`CKF_OPENCF_FRAMEWORK`] was set: the caller is `libopencf.so`, which may use the
    /// OpenCF-only mechanisms (key migration) that applications never reach.
    pub framework: bool,
}

/// A vendor flag of `CK_C_INITIALIZE_ARGS.flags`: set by `libopencf.so` when it initializes a
/// provider (and dropped again if the provider answers `CKR_ARGUMENTS_BAD`). Other modules
/// ignore it. See docs/METASLOT.md (Key clones).
pub const CKF_OPENCF_FRAMEWORK: CK_FLAGS = 0x8000_0000;

/// A vendor mechanism of the software token, for the framework only: AES key wrap with padding
/// (RFC 5649) of a sensitive, *non-extractable* key under a one-off session key, so that the
/// metaslot can move the key into the provider that runs an operation
/// (`auto_key_migrate = true`). It is not in any mechanism list, answers
/// `CKR_MECHANISM_INVALID` unless the module was initialized with [`CKF_OPENCF_FRAMEWORK`],
/// and `libopencf.so` refuses it from applications.
pub const CKM_OPENCF_MIGRATE_KWP: CK_MECHANISM_TYPE = CKM_VENDOR_DEFINED | 0x4f43_0001;

/// Copies `s` into a blank-padded fixed-size PKCS#11 text field.
pub fn pad_field<const N: usize>(s: &str) -> [u8; N] {
    let mut out = [b' '; N];
    let mut n = 0;
    for ch in s.chars() {
        let mut tmp = [0u8; 4];
        let enc = ch.encode_utf8(&mut tmp).as_bytes();
        if n + enc.len() > N {
            break;
        }
        out[n..n + enc.len()].copy_from_slice(enc);
        n += enc.len();
    }
    out
}

/// Reads a blank-padded PKCS#11 text field back into a trimmed string.
pub fn unpad_field(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .trim_end_matches([' ', '\0'])
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_round_trip() {
        let t = vec![
            Attribute::bool(CKA_SIGN, true),
            Attribute::new(CKA_LABEL, b"x".to_vec()),
        ];
        assert_eq!(decode_template(&encode_template(&t)).unwrap(), t);
        assert_eq!(
            decode_template(&[1, 2, 3]),
            Err(CKR_ATTRIBUTE_VALUE_INVALID)
        );
    }

    #[test]
    fn outbuf_protocol() {
        let mut q = OutBuf::new(None);
        assert_eq!(q.write(b"abc"), Ok(false));
        assert_eq!(q.len(), 3);
        let mut small = [0u8; 2];
        let mut s = OutBuf::new(Some(&mut small));
        assert_eq!(s.write(b"abc"), Err(CKR_BUFFER_TOO_SMALL));
        assert_eq!(s.len(), 3);
        let mut big = [0u8; 8];
        let mut b = OutBuf::new(Some(&mut big));
        assert_eq!(b.write(b"abc"), Ok(true));
        assert_eq!(&big[..3], b"abc");
    }

    #[test]
    fn padded_fields() {
        let f: [u8; 8] = pad_field("abc");
        assert_eq!(&f, b"abc     ");
        assert_eq!(unpad_field(&f), "abc");
        let long: [u8; 4] = pad_field("abcdef");
        assert_eq!(&long, b"abcd");
    }
}

/// What [`crate::Backend::async_complete`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum AsyncDone {
    /// Still running: `CKR_PENDING`.
    Pending,
    /// Done: the output, which the layer above writes into the caller's buffer of the
    /// original call.
    Output(zeroize::Zeroizing<Vec<u8>>),
    /// Done, and already written into the caller's buffer of the original call (a call
    /// passed through to a provider module): its length.
    Written(usize),
}
