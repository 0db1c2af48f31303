//! Serde models of the Wycheproof test-vector files (C2SP/wycheproof,
//! `testvectors_v1/`), one struct per schema the project runs.
//!
//! Only the fields the PKCS#11 runners need are modelled; unknown fields are
//! ignored. Byte strings are hex in the files and are decoded on load
//! ([`Hex`]).

use serde::{Deserialize, Deserializer};
use std::fmt;
use std::path::Path;

/// A hex-encoded byte string from a vector file, decoded.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Hex(pub Vec<u8>);

impl Hex {
    /// The decoded bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// Number of decoded bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the byte string is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", hex::encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Hex {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        hex::decode(&s).map(Hex).map_err(serde::de::Error::custom)
    }
}

/// The verdict a vector expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Expect {
    /// The operation must succeed and give the stated output.
    Valid,
    /// The operation must be rejected.
    Invalid,
    /// Either outcome is allowed (but no crash, and no wrong output).
    Acceptable,
}

/// A whole vector file, generic over its test-group type.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TestFile<G> {
    /// Algorithm name as the file states it.
    pub algorithm: String,
    /// Total number of tests the file declares.
    pub number_of_tests: usize,
    /// The groups.
    pub test_groups: Vec<G>,
}

/// Loads and parses a vector file.
pub fn load<G: for<'de> Deserialize<'de>>(path: &Path) -> Result<TestFile<G>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("parsing {}: {e}", path.display()))
}

/// Fields every test case carries.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Case {
    /// Test case id, unique within the file.
    pub tc_id: u64,
    /// Free-text description.
    #[serde(default)]
    pub comment: String,
    /// Flags naming the property the case exercises.
    #[serde(default)]
    pub flags: Vec<String>,
    /// Expected verdict.
    pub result: Expect,
}

impl Case {
    /// Whether the case carries `flag`.
    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
}

// ---------------------------------------------------------------- symmetric

/// `aead_test_schema_v1.json` (AES-GCM, ChaCha20-Poly1305).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AeadGroup {
    /// IV size in bits.
    pub iv_size: usize,
    /// Key size in bits.
    pub key_size: usize,
    /// Tag size in bits.
    pub tag_size: usize,
    /// Cases.
    pub tests: Vec<AeadTest>,
}

/// One AEAD case.
#[derive(Debug, Deserialize)]
pub struct AeadTest {
    /// Common fields.
    #[serde(flatten)]
    pub case: Case,
    /// Key.
    pub key: Hex,
    /// IV / nonce.
    pub iv: Hex,
    /// Additional authenticated data.
    pub aad: Hex,
    /// Plaintext.
    pub msg: Hex,
    /// Ciphertext without tag.
    pub ct: Hex,
    /// Tag.
    pub tag: Hex,
}

/// `ind_cpa_test_schema_v1.json` (AES-CBC with PKCS#5 padding).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IndCpaGroup {
    /// IV size in bits.
    pub iv_size: usize,
    /// Key size in bits.
    pub key_size: usize,
    /// Cases.
    pub tests: Vec<IndCpaTest>,
}

/// One IND-CPA cipher case.
#[derive(Debug, Deserialize)]
pub struct IndCpaTest {
    /// Common fields.
    #[serde(flatten)]
    pub case: Case,
    /// Key.
    pub key: Hex,
    /// IV.
    pub iv: Hex,
    /// Plaintext.
    pub msg: Hex,
    /// Ciphertext.
    pub ct: Hex,
}

/// `mac_test_schema_v1.json` (HMAC, AES-CMAC).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MacGroup {
    /// Key size in bits.
    pub key_size: usize,
    /// Tag size in bits (may be shorter than the full MAC: truncated).
    pub tag_size: usize,
    /// Cases.
    pub tests: Vec<MacTest>,
}

/// One MAC case.
#[derive(Debug, Deserialize)]
pub struct MacTest {
    /// Common fields.
    #[serde(flatten)]
    pub case: Case,
    /// Key.
    pub key: Hex,
    /// Message.
    pub msg: Hex,
    /// Expected (possibly truncated) tag.
    pub tag: Hex,
}

/// `keywrap_test_schema_v1.json` (AES-KW, AES-KWP).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeywrapGroup {
    /// Key-encryption key size in bits.
    pub key_size: usize,
    /// Cases.
    pub tests: Vec<KeywrapTest>,
}

/// One key-wrap case.
#[derive(Debug, Deserialize)]
pub struct KeywrapTest {
    /// Common fields.
    #[serde(flatten)]
    pub case: Case,
    /// Key-encryption key.
    pub key: Hex,
    /// The key being wrapped.
    pub msg: Hex,
    /// The wrapped key.
    pub ct: Hex,
}

// ---------------------------------------------------------------- KDFs

/// `hkdf_test_schema_v1.json`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HkdfGroup {
    /// IKM size in bits.
    pub key_size: usize,
    /// Cases.
    pub tests: Vec<HkdfTest>,
}

/// One HKDF case.
#[derive(Debug, Deserialize)]
pub struct HkdfTest {
    /// Common fields.
    #[serde(flatten)]
    pub case: Case,
    /// Input keying material.
    pub ikm: Hex,
    /// Salt (empty: no salt).
    pub salt: Hex,
    /// Info.
    pub info: Hex,
    /// Output length in bytes.
    pub size: usize,
    /// Expected output keying material.
    pub okm: Hex,
}

/// `pbkdf_test_schema.json`.
#[derive(Debug, Deserialize)]
pub struct PbkdfGroup {
    /// Cases.
    pub tests: Vec<PbkdfTest>,
}

/// One PBKDF2 case.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PbkdfTest {
    /// Common fields.
    #[serde(flatten)]
    pub case: Case,
    /// Password bytes.
    pub password: Hex,
    /// Salt.
    pub salt: Hex,
    /// Iteration count.
    pub iteration_count: u64,
    /// Derived key length in bytes.
    pub dk_len: usize,
    /// Expected derived key.
    pub dk: Hex,
}

// ---------------------------------------------------------------- EC

/// `ecdh_ecpoint_test_schema_v1.json` and `xdh_comp_schema_v1.json`.
#[derive(Debug, Deserialize)]
pub struct EcdhGroup {
    /// Curve name (`secp256r1`, `curve25519`, ...).
    pub curve: String,
    /// Cases.
    pub tests: Vec<EcdhTest>,
}

/// One key-agreement case.
#[derive(Debug, Deserialize)]
pub struct EcdhTest {
    /// Common fields.
    #[serde(flatten)]
    pub case: Case,
    /// Peer public key: an X9.62 point (ECDH) or a u-coordinate (XDH).
    pub public: Hex,
    /// Own private key: big-endian scalar (ECDH) or RFC 7748 bytes (XDH).
    pub private: Hex,
    /// Expected shared secret.
    pub shared: Hex,
}

/// An EC public key as the ECDSA files give it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EcPublicKey {
    /// Curve name.
    pub curve: String,
    /// Key size in bits.
    pub key_size: usize,
    /// Uncompressed X9.62 point.
    pub uncompressed: Hex,
}

/// `ecdsa_verify_schema_v1.json` and `ecdsa_p1363_verify_schema_v1.json`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EcdsaGroup {
    /// The verification key.
    pub public_key: EcPublicKey,
    /// Hash name (`SHA-256`, ...).
    pub sha: String,
    /// Cases.
    pub tests: Vec<SigTest>,
}

/// A signature-verification (or generation) case.
#[derive(Debug, Deserialize)]
pub struct SigTest {
    /// Common fields.
    #[serde(flatten)]
    pub case: Case,
    /// Message.
    pub msg: Hex,
    /// Signature.
    pub sig: Hex,
}

/// An EdDSA public key.
#[derive(Debug, Deserialize)]
pub struct EddsaPublicKey {
    /// `edwards25519` or `edwards448`.
    pub curve: String,
    /// Raw public key.
    pub pk: Hex,
}

/// `eddsa_verify_schema_v1.json`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EddsaGroup {
    /// The verification key.
    pub public_key: EddsaPublicKey,
    /// Cases.
    pub tests: Vec<SigTest>,
}

// ---------------------------------------------------------------- RSA

/// An RSA public key.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RsaPublicKey {
    /// Modulus, big-endian (may carry a leading zero byte).
    pub modulus: Hex,
    /// Public exponent.
    pub public_exponent: Hex,
}

/// `rsassa_pkcs1_verify_schema_v1.json` and `rsassa_pss_verify_schema_v1.json`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RsaVerifyGroup {
    /// The verification key.
    pub public_key: RsaPublicKey,
    /// Hash name.
    pub sha: String,
    /// MGF1 hash name (PSS only).
    #[serde(default)]
    pub mgf_sha: Option<String>,
    /// Salt length (PSS only).
    #[serde(default)]
    pub s_len: Option<u64>,
    /// Cases.
    pub tests: Vec<SigTest>,
}

/// `rsassa_pkcs1_generate_schema_v1.json`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RsaSignGroup {
    /// Private key, PKCS#8 DER.
    pub private_key_pkcs8: Hex,
    /// Hash name.
    pub sha: String,
    /// Cases.
    pub tests: Vec<SigTest>,
}

/// `rsaes_pkcs1_decrypt_schema_v1.json` and `rsaes_oaep_decrypt_schema_v1.json`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RsaDecryptGroup {
    /// Private key, PKCS#8 DER.
    pub private_key_pkcs8: Hex,
    /// OAEP hash name.
    #[serde(default)]
    pub sha: Option<String>,
    /// OAEP MGF1 hash name.
    #[serde(default)]
    pub mgf_sha: Option<String>,
    /// Cases.
    pub tests: Vec<RsaDecryptTest>,
}

/// One RSA decryption case.
#[derive(Debug, Deserialize)]
pub struct RsaDecryptTest {
    /// Common fields.
    #[serde(flatten)]
    pub case: Case,
    /// Expected plaintext.
    pub msg: Hex,
    /// Ciphertext.
    pub ct: Hex,
    /// OAEP label.
    #[serde(default)]
    pub label: Hex,
}

// ---------------------------------------------------------------- PQC

/// `mldsa_verify_schema.json`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MlDsaVerifyGroup {
    /// Raw public key (may have a wrong length on purpose).
    pub public_key: Hex,
    /// Cases.
    pub tests: Vec<MlDsaTest>,
}

/// `mldsa_sign_seed_schema.json`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MlDsaSignGroup {
    /// 32-byte private seed ξ (may have a wrong length on purpose).
    pub private_seed: Hex,
    /// Raw public key, when the seed is well formed.
    #[serde(default)]
    pub public_key: Option<Hex>,
    /// Cases.
    pub tests: Vec<MlDsaTest>,
}

/// One ML-DSA case (signing or verification).
#[derive(Debug, Deserialize)]
pub struct MlDsaTest {
    /// Common fields.
    #[serde(flatten)]
    pub case: Case,
    /// Message (absent for external-mu cases).
    #[serde(default)]
    pub msg: Option<Hex>,
    /// External mu (for `Internal` cases).
    #[serde(default)]
    pub mu: Option<Hex>,
    /// Context string; absent means empty.
    #[serde(default)]
    pub ctx: Option<Hex>,
    /// Signing randomness; absent means deterministic signing.
    #[serde(default)]
    pub rnd: Option<Hex>,
    /// Signature.
    pub sig: Hex,
}

/// `mlkem_test_schema.json`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MlKemGroup {
    /// `ML-KEM-512`, `ML-KEM-768` or `ML-KEM-1024`.
    pub parameter_set: String,
    /// Cases.
    pub tests: Vec<MlKemTest>,
}

/// One ML-KEM case.
#[derive(Debug, Deserialize)]
pub struct MlKemTest {
    /// Common fields.
    #[serde(flatten)]
    pub case: Case,
    /// 64-byte seed d || z (may have a wrong length on purpose).
    pub seed: Hex,
    /// Encapsulation key, when given.
    #[serde(default)]
    pub ek: Option<Hex>,
    /// Ciphertext.
    pub c: Hex,
    /// Expected shared secret (empty for invalid cases).
    #[serde(rename = "K", default)]
    pub k: Hex,
}
