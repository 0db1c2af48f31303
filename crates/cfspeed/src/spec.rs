//! What can be measured: the benchmark names users type, their parsing, and
//! the input sizes.
//!
//! A benchmark name is `MECHANISM[:PARAMETER][:OPERATION]`, e.g.
//! `CKM_AES_CBC_PAD`, `CKM_SHA256_RSA_PKCS:3072`, `CKM_SHA256_RSA_PKCS:4096:verify`,
//! `CKM_ECDSA:P-384`, `CKM_ML_KEM:decapsulate`. Without a size an RSA name
//! takes the sizes of `--rsa-bits` (default 2048); without an operation a
//! signature mechanism signs, `CKM_RSA_PKCS_OAEP` decrypts,
//! `CKM_ECDH1_DERIVE` derives and `CKM_ML_KEM` is measured both ways.

use opencf_abi::sys::*;
use openssl::hash::MessageDigest;
use openssl::nid::Nid;

/// A single-part bulk cipher (encryption).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cipher {
    /// AES-128-GCM, 12-byte IV (new per operation), 16-byte tag.
    AesGcm,
    /// AES-128-CBC with PKCS#7 padding.
    AesCbcPad,
    /// AES-128-CBC without padding (sizes that are block multiples).
    AesCbc,
    /// AES-128-CTR, 128-bit counter.
    AesCtr,
    /// AES-128-ECB (sizes that are block multiples).
    AesEcb,
    /// ChaCha20-Poly1305, 256-bit key, 12-byte nonce (new per operation).
    ChaCha20Poly1305,
}

impl Cipher {
    /// The PKCS#11 mechanism.
    pub fn mechanism(self) -> CK_MECHANISM_TYPE {
        match self {
            Cipher::AesGcm => CKM_AES_GCM,
            Cipher::AesCbcPad => CKM_AES_CBC_PAD,
            Cipher::AesCbc => CKM_AES_CBC,
            Cipher::AesCtr => CKM_AES_CTR,
            Cipher::AesEcb => CKM_AES_ECB,
            Cipher::ChaCha20Poly1305 => CKM_CHACHA20_POLY1305,
        }
    }

    /// The mechanism's name.
    pub fn name(self) -> &'static str {
        match self {
            Cipher::AesGcm => "CKM_AES_GCM",
            Cipher::AesCbcPad => "CKM_AES_CBC_PAD",
            Cipher::AesCbc => "CKM_AES_CBC",
            Cipher::AesCtr => "CKM_AES_CTR",
            Cipher::AesEcb => "CKM_AES_ECB",
            Cipher::ChaCha20Poly1305 => "CKM_CHACHA20_POLY1305",
        }
    }

    /// OpenSSL's name for `EVP_CIPHER_fetch`.
    pub fn ossl_name(self) -> &'static str {
        match self {
            Cipher::AesGcm => "AES-128-GCM",
            Cipher::AesCbcPad | Cipher::AesCbc => "AES-128-CBC",
            Cipher::AesCtr => "AES-128-CTR",
            Cipher::AesEcb => "AES-128-ECB",
            Cipher::ChaCha20Poly1305 => "ChaCha20-Poly1305",
        }
    }

    /// The same cipher in `openssl::symm` (the reference of cross-checks).
    pub fn symm(self) -> openssl::symm::Cipher {
        use openssl::symm::Cipher as C;
        match self {
            Cipher::AesGcm => C::aes_128_gcm(),
            Cipher::AesCbcPad | Cipher::AesCbc => C::aes_128_cbc(),
            Cipher::AesCtr => C::aes_128_ctr(),
            Cipher::AesEcb => C::aes_128_ecb(),
            Cipher::ChaCha20Poly1305 => C::chacha20_poly1305(),
        }
    }

    /// An AEAD (a 16-byte tag follows the ciphertext; nonce new per op).
    pub fn aead(self) -> bool {
        matches!(self, Cipher::AesGcm | Cipher::ChaCha20Poly1305)
    }

    /// PKCS#7 padding.
    pub fn padded(self) -> bool {
        self == Cipher::AesCbcPad
    }

    /// Only whole 16-byte blocks.
    pub fn blocks_only(self) -> bool {
        matches!(self, Cipher::AesCbc | Cipher::AesEcb)
    }

    /// Key length in bytes.
    pub fn key_len(self) -> usize {
        match self {
            Cipher::ChaCha20Poly1305 => 32,
            _ => 16,
        }
    }

    /// IV (nonce, counter block) length in bytes.
    pub fn iv_len(self) -> usize {
        match self {
            Cipher::AesGcm | Cipher::ChaCha20Poly1305 => 12,
            Cipher::AesEcb => 0,
            _ => 16,
        }
    }
}

/// A digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Digest {
    /// SHA-256.
    Sha256,
    /// SHA-384.
    Sha384,
    /// SHA-512.
    Sha512,
    /// SHA3-256.
    Sha3_256,
}

impl Digest {
    /// The PKCS#11 mechanism.
    pub fn mechanism(self) -> CK_MECHANISM_TYPE {
        match self {
            Digest::Sha256 => CKM_SHA256,
            Digest::Sha384 => CKM_SHA384,
            Digest::Sha512 => CKM_SHA512,
            Digest::Sha3_256 => CKM_SHA3_256,
        }
    }

    /// The mechanism's name.
    pub fn name(self) -> &'static str {
        match self {
            Digest::Sha256 => "CKM_SHA256",
            Digest::Sha384 => "CKM_SHA384",
            Digest::Sha512 => "CKM_SHA512",
            Digest::Sha3_256 => "CKM_SHA3_256",
        }
    }

    /// OpenSSL's digest.
    pub fn md(self) -> MessageDigest {
        match self {
            Digest::Sha256 => MessageDigest::sha256(),
            Digest::Sha384 => MessageDigest::sha384(),
            Digest::Sha512 => MessageDigest::sha512(),
            Digest::Sha3_256 => MessageDigest::sha3_256(),
        }
    }
}

/// A NIST curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Curve {
    /// P-256 (prime256v1).
    P256,
    /// P-384 (secp384r1).
    P384,
    /// P-521 (secp521r1).
    P521,
}

impl Curve {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Curve::P256 => "P-256",
            Curve::P384 => "P-384",
            Curve::P521 => "P-521",
        }
    }

    /// OpenSSL's NID.
    pub fn nid(self) -> Nid {
        match self {
            Curve::P256 => Nid::X9_62_PRIME256V1,
            Curve::P384 => Nid::SECP384R1,
            Curve::P521 => Nid::SECP521R1,
        }
    }

    /// `CKA_EC_PARAMS`: the DER of the curve's OID.
    pub fn params(self) -> &'static [u8] {
        match self {
            Curve::P256 => &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07],
            Curve::P384 => &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22],
            Curve::P521 => &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23],
        }
    }

    /// Bytes of a field element (half an ECDSA signature).
    pub fn field_bytes(self) -> usize {
        match self {
            Curve::P256 => 32,
            Curve::P384 => 48,
            Curve::P521 => 66,
        }
    }

    fn parse(s: &str) -> Option<Curve> {
        match s {
            "p-256" | "p256" | "secp256r1" | "prime256v1" => Some(Curve::P256),
            "p-384" | "p384" | "secp384r1" => Some(Curve::P384),
            "p-521" | "p521" | "secp521r1" => Some(Curve::P521),
            _ => None,
        }
    }
}

/// What a public-key benchmark does with its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PkOp {
    /// `C_SignInit` + `C_Sign`.
    Sign,
    /// `C_VerifyInit` + `C_Verify`.
    Verify,
    /// `C_DecryptInit` + `C_Decrypt`.
    Decrypt,
    /// `C_DeriveKey` + `C_DestroyObject`.
    Derive,
    /// `C_EncapsulateKey` + `C_DestroyObject`.
    Encapsulate,
    /// `C_DecapsulateKey` + `C_DestroyObject`.
    Decapsulate,
}

impl PkOp {
    fn name(self) -> &'static str {
        match self {
            PkOp::Sign => "sign",
            PkOp::Verify => "verify",
            PkOp::Decrypt => "decrypt",
            PkOp::Derive => "derive",
            PkOp::Encapsulate => "encapsulate",
            PkOp::Decapsulate => "decapsulate",
        }
    }

    fn parse(s: &str) -> Option<PkOp> {
        match s {
            "sign" => Some(PkOp::Sign),
            "verify" => Some(PkOp::Verify),
            "decrypt" => Some(PkOp::Decrypt),
            "derive" => Some(PkOp::Derive),
            "encapsulate" | "encap" => Some(PkOp::Encapsulate),
            "decapsulate" | "decap" => Some(PkOp::Decapsulate),
            _ => None,
        }
    }
}

/// The RSA mechanisms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RsaMech {
    /// CKM_SHA256_RSA_PKCS (sign, verify).
    Pkcs,
    /// CKM_SHA256_RSA_PKCS_PSS, salt 32 bytes, MGF1-SHA-256 (sign, verify).
    Pss,
    /// CKM_RSA_PKCS_OAEP, SHA-256, MGF1-SHA-256, no label (decrypt).
    Oaep,
}

impl RsaMech {
    fn name(self) -> &'static str {
        match self {
            RsaMech::Pkcs => "CKM_SHA256_RSA_PKCS",
            RsaMech::Pss => "CKM_SHA256_RSA_PKCS_PSS",
            RsaMech::Oaep => "CKM_RSA_PKCS_OAEP",
        }
    }
}

/// A benchmark the user can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bench {
    /// Single-part encryption.
    Cipher(Cipher),
    /// Single-part digest.
    Digest(Digest),
    /// CKM_SHA256_HMAC with a 32-byte key, single-part sign.
    Hmac,
    /// RSA with a key of `bits`.
    Rsa {
        /// Mechanism.
        mech: RsaMech,
        /// Modulus bits.
        bits: u32,
        /// Sign, verify or decrypt.
        op: PkOp,
    },
    /// CKM_ECDSA of a 32-byte hash.
    Ecdsa {
        /// Curve.
        curve: Curve,
        /// Sign or verify.
        op: PkOp,
    },
    /// CKM_EDDSA, Ed25519, 32-byte message.
    Eddsa {
        /// Sign or verify.
        op: PkOp,
    },
    /// CKM_ECDH1_DERIVE on P-256, no KDF, a 32-byte generic secret.
    Ecdh,
    /// CKM_ML_DSA, ML-DSA-65, 32-byte message.
    MlDsa {
        /// Sign or verify.
        op: PkOp,
    },
    /// CKM_ML_KEM, ML-KEM-768.
    MlKem {
        /// Encapsulate or decapsulate.
        op: PkOp,
    },
    /// C_FindObjects by CKA_LABEL among many token objects.
    Find,
}

/// The RSA key sizes a benchmark takes, in bits.
const RSA_BITS: std::ops::RangeInclusive<u32> = 1024..=16384;

/// The names `parse` knows, for error messages and `--help`.
pub const KNOWN: &str = "CKM_AES_GCM, CKM_AES_CBC_PAD, CKM_AES_CBC, CKM_AES_CTR, CKM_AES_ECB, \
     CKM_CHACHA20_POLY1305, CKM_SHA256, CKM_SHA384, CKM_SHA512, CKM_SHA3_256, CKM_SHA256_HMAC, \
     CKM_SHA256_RSA_PKCS[:BITS][:verify], CKM_SHA256_RSA_PKCS_PSS[:BITS][:verify], \
     CKM_RSA_PKCS_OAEP[:BITS], CKM_ECDSA[:P-256|P-384|P-521][:verify], CKM_EDDSA[:verify], \
     CKM_ECDH1_DERIVE, CKM_ML_DSA[:verify], CKM_ML_KEM[:encapsulate|:decapsulate], find";

impl Bench {
    /// Parses a benchmark name (case-insensitive, `-` for `_`, `CKM_`
    /// optional) into one benchmark or several: an RSA name without a size
    /// gives one per `rsa_bits`, `CKM_ML_KEM` without an operation gives
    /// encapsulate and decapsulate.
    pub fn parse(s: &str, rsa_bits: &[u32]) -> Result<Vec<Bench>, String> {
        let mut parts = s.trim().split(':');
        let head = parts.next().unwrap_or_default();
        let head = head.to_ascii_uppercase().replace('-', "_");
        let head = head.strip_prefix("CKM_").unwrap_or(&head).to_string();
        let (mut bits, mut curve, mut op) = (None, None, None);
        for p in parts {
            let p = p.trim().to_ascii_lowercase();
            if let Ok(b) = p.parse::<u32>() {
                bits = Some(b);
            } else if let Some(c) = Curve::parse(&p) {
                curve = Some(c);
            } else if let Some(o) = PkOp::parse(&p) {
                op = Some(o);
            } else if !matches!(p.as_str(), "ed25519" | "ml-dsa-65" | "ml-kem-768") {
                return Err(format!("{s:?}: unknown parameter {p:?}"));
            }
        }
        let unknown = || format!("unknown benchmark {s:?}; known: {KNOWN}");
        let bad = |what: &str| format!("{s:?}: {what}");
        let only = |allowed: &[PkOp], default: PkOp| -> Result<PkOp, String> {
            let o = op.unwrap_or(default);
            if allowed.contains(&o) {
                Ok(o)
            } else {
                Err(bad(&format!("operation {} is not offered here", o.name())))
            }
        };
        let simple = |b: Bench| -> Result<Vec<Bench>, String> {
            if bits.is_some() || curve.is_some() || op.is_some() {
                return Err(bad("this mechanism takes no parameter"));
            }
            Ok(vec![b])
        };
        if curve.is_some()
            && head != "ECDSA"
            && !(head == "ECDH1_DERIVE" && curve == Some(Curve::P256))
        {
            return Err(bad(
                "a curve is only chosen for CKM_ECDSA (CKM_ECDH1_DERIVE is P-256)",
            ));
        }
        if bits.is_some() && !head.contains("RSA") {
            return Err(bad("a key size is only chosen for RSA"));
        }
        // The range is checked for RSA names only (a number after another name is a
        // parameter that mechanism does not take), and for --rsa-bits as well as a size in
        // the name.
        if head.contains("RSA") {
            if let Some(b) = bits.iter().chain(rsa_bits).find(|b| !RSA_BITS.contains(*b)) {
                return Err(bad(&format!(
                    "RSA size {b} is out of range {}..{}",
                    RSA_BITS.start(),
                    RSA_BITS.end()
                )));
            }
        }
        let rsa = |mech: RsaMech, o: PkOp| -> Vec<Bench> {
            match bits {
                Some(b) => vec![Bench::Rsa {
                    mech,
                    bits: b,
                    op: o,
                }],
                None => rsa_bits
                    .iter()
                    .map(|&b| Bench::Rsa {
                        mech,
                        bits: b,
                        op: o,
                    })
                    .collect(),
            }
        };
        let sv = [PkOp::Sign, PkOp::Verify];
        match head.as_str() {
            "AES_GCM" => simple(Bench::Cipher(Cipher::AesGcm)),
            "AES_CBC_PAD" => simple(Bench::Cipher(Cipher::AesCbcPad)),
            "AES_CBC" => simple(Bench::Cipher(Cipher::AesCbc)),
            "AES_CTR" => simple(Bench::Cipher(Cipher::AesCtr)),
            "AES_ECB" => simple(Bench::Cipher(Cipher::AesEcb)),
            "CHACHA20_POLY1305" => simple(Bench::Cipher(Cipher::ChaCha20Poly1305)),
            "SHA256" => simple(Bench::Digest(Digest::Sha256)),
            "SHA384" => simple(Bench::Digest(Digest::Sha384)),
            "SHA512" => simple(Bench::Digest(Digest::Sha512)),
            "SHA3_256" => simple(Bench::Digest(Digest::Sha3_256)),
            "SHA256_HMAC" => simple(Bench::Hmac),
            "SHA256_RSA_PKCS" => Ok(rsa(RsaMech::Pkcs, only(&sv, PkOp::Sign)?)),
            "SHA256_RSA_PKCS_PSS" => Ok(rsa(RsaMech::Pss, only(&sv, PkOp::Sign)?)),
            "RSA_PKCS_OAEP" => Ok(rsa(RsaMech::Oaep, only(&[PkOp::Decrypt], PkOp::Decrypt)?)),
            "ECDSA" => Ok(vec![Bench::Ecdsa {
                curve: curve.unwrap_or(Curve::P256),
                op: only(&sv, PkOp::Sign)?,
            }]),
            "EDDSA" => Ok(vec![Bench::Eddsa {
                op: only(&sv, PkOp::Sign)?,
            }]),
            "ECDH1_DERIVE" => {
                only(&[PkOp::Derive], PkOp::Derive)?;
                Ok(vec![Bench::Ecdh])
            }
            "ML_DSA" => Ok(vec![Bench::MlDsa {
                op: only(&sv, PkOp::Sign)?,
            }]),
            "ML_KEM" => match op {
                None => Ok(vec![
                    Bench::MlKem {
                        op: PkOp::Encapsulate,
                    },
                    Bench::MlKem {
                        op: PkOp::Decapsulate,
                    },
                ]),
                Some(_) => Ok(vec![Bench::MlKem {
                    op: only(&[PkOp::Encapsulate, PkOp::Decapsulate], PkOp::Encapsulate)?,
                }]),
            },
            "FIND" | "FIND_OBJECTS" | "FINDOBJECTS" => simple(Bench::Find),
            _ => Err(unknown()),
        }
    }

    /// The name in reports (parsed back by [`Bench::parse`]).
    pub fn name(self) -> String {
        let with_op = |base: String, op: PkOp, default: PkOp| {
            if op == default {
                base
            } else {
                format!("{base}:{}", op.name())
            }
        };
        match self {
            Bench::Cipher(c) => c.name().into(),
            Bench::Digest(d) => d.name().into(),
            Bench::Hmac => "CKM_SHA256_HMAC".into(),
            Bench::Rsa { mech, bits, op } => {
                let default = if mech == RsaMech::Oaep {
                    PkOp::Decrypt
                } else {
                    PkOp::Sign
                };
                with_op(format!("{}:{bits}", mech.name()), op, default)
            }
            Bench::Ecdsa { curve, op } => {
                with_op(format!("CKM_ECDSA:{}", curve.name()), op, PkOp::Sign)
            }
            Bench::Eddsa { op } => with_op("CKM_EDDSA:Ed25519".into(), op, PkOp::Sign),
            Bench::Ecdh => "CKM_ECDH1_DERIVE:P-256".into(),
            Bench::MlDsa { op } => with_op("CKM_ML_DSA:ML-DSA-65".into(), op, PkOp::Sign),
            Bench::MlKem { op } => format!("CKM_ML_KEM:ML-KEM-768:{}", op.name()),
            Bench::Find => "find".into(),
        }
    }

    /// The mechanism a module must list for the benchmark (none for `find`).
    pub fn mechanism(self) -> Option<CK_MECHANISM_TYPE> {
        Some(match self {
            Bench::Cipher(c) => c.mechanism(),
            Bench::Digest(d) => d.mechanism(),
            Bench::Hmac => CKM_SHA256_HMAC,
            Bench::Rsa { mech, .. } => match mech {
                RsaMech::Pkcs => CKM_SHA256_RSA_PKCS,
                RsaMech::Pss => CKM_SHA256_RSA_PKCS_PSS,
                RsaMech::Oaep => CKM_RSA_PKCS_OAEP,
            },
            Bench::Ecdsa { .. } => CKM_ECDSA,
            Bench::Eddsa { .. } => CKM_EDDSA,
            Bench::Ecdh => CKM_ECDH1_DERIVE,
            Bench::MlDsa { .. } => CKM_ML_DSA,
            Bench::MlKem { .. } => CKM_ML_KEM,
            Bench::Find => return None,
        })
    }

    /// What one operation is, for the report.
    pub fn describe(self, size: usize, find_objects: usize) -> String {
        let op = |o: PkOp| match o {
            PkOp::Sign => "C_SignInit + C_Sign",
            PkOp::Verify => "C_VerifyInit + C_Verify",
            PkOp::Decrypt => "C_DecryptInit + C_Decrypt",
            PkOp::Derive => "C_DeriveKey + C_DestroyObject",
            PkOp::Encapsulate => "C_EncapsulateKey + C_DestroyObject",
            PkOp::Decapsulate => "C_DecapsulateKey + C_DestroyObject",
        };
        let keys = "key pair generated in the token as session objects";
        match self {
            Bench::Cipher(c) => {
                let key = if c == Cipher::ChaCha20Poly1305 {
                    "ChaCha20-Poly1305"
                } else {
                    &c.ossl_name()[..7]
                };
                let iv = match c {
                    Cipher::AesGcm | Cipher::ChaCha20Poly1305 => {
                        ", new 12-byte nonce per op, 16-byte tag"
                    }
                    Cipher::AesEcb => "",
                    _ => ", fixed IV",
                };
                format!(
                    "{key} {} encrypt {size} bytes: C_EncryptInit + C_Encrypt{iv}; key is a \
                     session object",
                    c.name()
                )
            }
            Bench::Digest(d) => format!("{} of {size} bytes: C_DigestInit + C_Digest", d.name()),
            Bench::Hmac => format!(
                "HMAC-SHA-256 of {size} bytes, 32-byte key: C_SignInit + C_Sign; key is a \
                 session object"
            ),
            Bench::Rsa { mech, bits, op: o } => {
                let what = match mech {
                    RsaMech::Pkcs => "PKCS#1 v1.5 SHA-256, 32-byte message",
                    RsaMech::Pss => "PSS SHA-256, MGF1-SHA-256, 32-byte salt, 32-byte message",
                    RsaMech::Oaep => "OAEP SHA-256, MGF1-SHA-256, 32-byte plaintext",
                };
                format!("RSA-{bits} {what}: {}; {keys}", op(o))
            }
            Bench::Ecdsa { curve, op: o } => {
                format!(
                    "ECDSA {} of a 32-byte hash: {}; {keys}",
                    curve.name(),
                    op(o)
                )
            }
            Bench::Eddsa { op: o } => format!("Ed25519 of a 32-byte message: {}; {keys}", op(o)),
            Bench::Ecdh => format!(
                "ECDH P-256, CKD_NULL, 32-byte generic secret session key: {}; {keys}",
                op(PkOp::Derive)
            ),
            Bench::MlDsa { op: o } => {
                format!("ML-DSA-65 of a 32-byte message: {}; {keys}", op(o))
            }
            Bench::MlKem { op: o } => format!("ML-KEM-768: {}; {keys}", op(o)),
            Bench::Find => format!(
                "C_FindObjectsInit(CKA_LABEL) + C_FindObjects + C_FindObjectsFinal, label in \
                 the middle of {find_objects} CKO_DATA token objects"
            ),
        }
    }

    /// Whether the input size is a parameter (bulk mechanisms).
    pub fn sized(self) -> bool {
        matches!(self, Bench::Cipher(_) | Bench::Digest(_) | Bench::Hmac)
    }

    /// Whether `size` can be used (CBC without padding and ECB need whole
    /// blocks).
    pub fn size_ok(self, size: usize) -> bool {
        match self {
            Bench::Cipher(c) if c.blocks_only() => size % 16 == 0,
            _ => true,
        }
    }

    /// Whether every operation is timed on its own (latency percentiles).
    pub fn per_op_latency(self) -> bool {
        !self.sized()
    }
}

/// Parses one size: bytes, or with a `k` suffix KiB (`16k` = 16384).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mult) = match t
        .strip_suffix("kib")
        .or_else(|| t.strip_suffix("kb"))
        .or_else(|| t.strip_suffix('k'))
    {
        Some(n) => (n, 1024),
        None => (t.strip_suffix('b').unwrap_or(&t), 1),
    };
    let n: usize = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a size (bytes, or e.g. 16k)"))?;
    match n.checked_mul(mult) {
        Some(v) if v > 0 && v <= 1 << 30 => Ok(v),
        _ => Err(format!("size {s:?} must be between 1 byte and 1 GiB")),
    }
}

/// Parses a comma-separated size list.
pub fn parse_sizes(s: &str) -> Result<Vec<usize>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(parse_size)
        .collect()
}

/// One name of every kind, for tests.
#[cfg(test)]
pub const EXAMPLES: &[&str] = &[
    "CKM_AES_GCM",
    "aes-cbc-pad",
    "CKM_AES_CBC",
    "CKM_AES_CTR",
    "CKM_AES_ECB",
    "CKM_CHACHA20_POLY1305",
    "CKM_SHA256",
    "sha3-256",
    "CKM_SHA256_HMAC",
    "CKM_SHA256_RSA_PKCS:3072",
    "CKM_SHA256_RSA_PKCS:4096:verify",
    "CKM_SHA256_RSA_PKCS_PSS",
    "CKM_RSA_PKCS_OAEP:2048",
    "CKM_ECDSA:P-384",
    "CKM_ECDSA:p521:verify",
    "CKM_EDDSA",
    "CKM_ECDH1_DERIVE",
    "CKM_ML_DSA:verify",
    "CKM_ML_KEM:decap",
    "find",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(
            parse_sizes("16,64, 1k,16KiB,8192b").unwrap(),
            vec![16, 64, 1024, 16384, 8192]
        );
        assert!(parse_size("0").is_err());
        assert!(parse_size("x").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("2048k").is_ok());
    }

    #[test]
    fn names_round_trip() {
        let all = EXAMPLES;
        for name in all {
            for b in Bench::parse(name, &[2048]).unwrap() {
                assert_eq!(Bench::parse(&b.name(), &[2048]).unwrap(), vec![b], "{name}");
            }
        }
    }

    #[test]
    fn expansion_and_errors() {
        let v = Bench::parse("CKM_SHA256_RSA_PKCS", &[2048, 3072]).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].name(), "CKM_SHA256_RSA_PKCS:3072");
        assert_eq!(Bench::parse("CKM_ML_KEM", &[2048]).unwrap().len(), 2);
        assert_eq!(
            Bench::parse("ecdsa", &[2048]).unwrap(),
            vec![Bench::Ecdsa {
                curve: Curve::P256,
                op: PkOp::Sign
            }]
        );
        assert!(Bench::parse("CKM_RSA_PKCS_OAEP:sign", &[2048]).is_err());
        assert!(Bench::parse("CKM_AES_GCM:2048", &[2048]).is_err());
        // A number after a name that takes none is not called an RSA size.
        assert_eq!(
            Bench::parse("CKM_AES_GCM:16", &[2048]).unwrap_err(),
            "\"CKM_AES_GCM:16\": a key size is only chosen for RSA"
        );
        // The RSA range holds for --rsa-bits as for a size in the name.
        for (name, bits) in [
            ("CKM_SHA256_RSA_PKCS:512", 2048),
            ("CKM_SHA256_RSA_PKCS", 0),
        ] {
            let e = Bench::parse(name, &[bits]).unwrap_err();
            assert!(e.ends_with("is out of range 1024..16384"), "{e}");
        }
        assert!(Bench::parse("CKM_ECDSA:P-999", &[2048]).is_err());
        assert!(Bench::parse("CKM_MD5", &[2048]).is_err());
        assert!(Bench::Cipher(Cipher::AesEcb).size_ok(32));
        assert!(!Bench::Cipher(Cipher::AesCbc).size_ok(20));
        assert!(Bench::Cipher(Cipher::AesCbcPad).size_ok(20));
    }
}
