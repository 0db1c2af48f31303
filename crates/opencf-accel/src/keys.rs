//! Key management: `C_UnwrapKey` (AES key wrap, RFC 3394 and RFC 5649), so that keys can
//! be handed to the provider without passing through the application in clear.

use crate::objects::{Material, Object};
use crate::Accel;
use opencf_abi::sys::*;
use opencf_abi::{Attribute, CkResult, MechParam, Mechanism};
use openssl::cipher::Cipher;
use openssl::cipher_ctx::{CipherCtx, CipherCtxFlags};
use zeroize::Zeroizing;

impl Accel {
    /// `C_UnwrapKey`.
    pub(crate) fn unwrap_key(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        unwrapping_key: CK_OBJECT_HANDLE,
        wrapped: &[u8],
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        self.session(s)?;
        let pad = match m.mechanism {
            CKM_AES_KEY_WRAP => false,
            CKM_AES_KEY_WRAP_KWP | CKM_AES_KEY_WRAP_PAD => true,
            _ => return Err(CKR_MECHANISM_INVALID),
        };
        let kek = self
            .object(unwrapping_key)
            .map_err(|_| CKR_UNWRAPPING_KEY_HANDLE_INVALID)?;
        if !kek.flag(CKA_UNWRAP) {
            return Err(CKR_KEY_FUNCTION_NOT_PERMITTED);
        }
        if !kek.allows(m.mechanism) {
            return Err(CKR_MECHANISM_INVALID);
        }
        let kv = kek
            .aes_value()
            .ok_or(CKR_UNWRAPPING_KEY_TYPE_INCONSISTENT)?;
        let plain = aes_unwrap(kv, pad, &m.param, wrapped)?;
        let class = template
            .iter()
            .find(|a| a.kind == CKA_CLASS)
            .ok_or(CKR_TEMPLATE_INCOMPLETE)?
            .as_ulong()?;
        let material = match class {
            CKO_PRIVATE_KEY => Material::Pkcs8(plain),
            CKO_SECRET_KEY => Material::Value(plain),
            _ => return Err(CKR_ATTRIBUTE_VALUE_INVALID),
        };
        let o = Object::new(template, material, s)?;
        self.add_object(o)
    }
}

/// Unwraps `wrapped` under the AES key `kek` (RFC 3394, or RFC 5649 with `pad`), with the
/// default initial value only.
fn aes_unwrap(
    kek: &[u8],
    pad: bool,
    iv: &MechParam,
    wrapped: &[u8],
) -> CkResult<Zeroizing<Vec<u8>>> {
    let default_iv: &[u8] = if pad {
        &[0xa6, 0x59, 0x59, 0xa6]
    } else {
        &[0xa6; 8]
    };
    match iv {
        MechParam::None => {}
        MechParam::Bytes(b) if b.is_empty() || b == default_iv => {}
        _ => return Err(CKR_MECHANISM_PARAM_INVALID),
    }
    let cipher = match (kek.len(), pad) {
        (16, false) => Cipher::aes_128_wrap(),
        (24, false) => Cipher::aes_192_wrap(),
        (32, false) => Cipher::aes_256_wrap(),
        (16, true) => Cipher::aes_128_wrap_pad(),
        (24, true) => Cipher::aes_192_wrap_pad(),
        (32, true) => Cipher::aes_256_wrap_pad(),
        _ => return Err(CKR_UNWRAPPING_KEY_SIZE_RANGE),
    };
    if wrapped.len() < 16 || !wrapped.len().is_multiple_of(8) {
        return Err(CKR_WRAPPED_KEY_LEN_RANGE);
    }
    let bad = |_| CKR_WRAPPED_KEY_INVALID;
    let mut ctx = CipherCtx::new().map_err(|_| CKR_HOST_MEMORY)?;
    ctx.set_flags(CipherCtxFlags::FLAG_WRAP_ALLOW);
    ctx.decrypt_init(Some(cipher), Some(kek), None)
        .map_err(bad)?;
    let mut out = Zeroizing::new(vec![0u8; wrapped.len() + 16]);
    let n = ctx.cipher_update(wrapped, Some(&mut out)).map_err(bad)?;
    out.truncate(n);
    Ok(out)
}
