//! A tiny backend for the ABI tests: fixed answers, and hooks to make it fail or panic.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use opencf_abi::sys::*;
use opencf_abi::*;

/// Values dropped so far.
pub static DROPS: AtomicUsize = AtomicUsize::new(0);
/// `finalize` calls so far.
pub static FINALIZES: AtomicUsize = AtomicUsize::new(0);
/// Values built so far.
pub static BUILT: AtomicUsize = AtomicUsize::new(0);
/// Make the next `initialize` fail.
pub static FAIL_INIT: AtomicBool = AtomicBool::new(false);
/// Make the next `initialize` panic.
pub static PANIC_INIT: AtomicBool = AtomicBool::new(false);

/// The only session handle the dummy knows.
pub const SESSION: CK_SESSION_HANDLE = 42;
/// A session whose operations panic.
pub const PANIC_SESSION: CK_SESSION_HANDLE = 666;
/// An object for which the backend answers one attribute too few.
pub const SHORT_OBJECT: CK_OBJECT_HANDLE = 999;

pub struct Dummy {
    /// The last mechanism an `*Init` call received.
    pub last_mech: Mutex<Option<Mechanism>>,
    /// The last template `C_CreateObject` received.
    pub last_template: Mutex<Vec<Attribute>>,
}

impl Drop for Dummy {
    fn drop(&mut self) {
        DROPS.fetch_add(1, Ordering::SeqCst);
    }
}

impl Dummy {
    fn remember(&self, mech: &Mechanism) -> CkResult<()> {
        *self.last_mech.lock().unwrap() = Some(mech.clone());
        Ok(())
    }
}

fn session(s: CK_SESSION_HANDLE) -> CkResult<()> {
    match s {
        SESSION => Ok(()),
        PANIC_SESSION => panic!("a backend bug"),
        _ => Err(CKR_SESSION_HANDLE_INVALID),
    }
}

/// The dummy's "ciphertext": every byte inverted, then 16 bytes of 0xEE.
pub fn dummy_encrypt(data: &[u8]) -> Vec<u8> {
    let mut v: Vec<u8> = data.iter().map(|b| !b).collect();
    v.extend_from_slice(&[0xEE; 16]);
    v
}

pub fn wrap_template() -> Vec<Attribute> {
    vec![
        Attribute::bool(CKA_ENCRYPT, true),
        Attribute::new(CKA_LABEL, b"wrapped".to_vec()),
    ]
}

impl Backend for Dummy {
    fn initialize(_args: &InitArgs) -> CkResult<Self> {
        if FAIL_INIT.swap(false, Ordering::SeqCst) {
            return Err(CKR_FUNCTION_FAILED);
        }
        if PANIC_INIT.swap(false, Ordering::SeqCst) {
            panic!("initialize panics");
        }
        BUILT.fetch_add(1, Ordering::SeqCst);
        Ok(Dummy {
            last_mech: Mutex::new(None),
            last_template: Mutex::new(Vec::new()),
        })
    }
    fn finalize(&self) {
        FINALIZES.fetch_add(1, Ordering::SeqCst);
    }
    fn get_info(&self) -> CkResult<CK_INFO> {
        Ok(CK_INFO {
            cryptokiVersion: CK_VERSION { major: 3, minor: 2 },
            manufacturerID: pad_field("OpenCF"),
            flags: 0,
            libraryDescription: pad_field("ABI test backend"),
            libraryVersion: CK_VERSION { major: 0, minor: 1 },
        })
    }
    fn get_slot_list(&self, token_present: bool) -> CkResult<Vec<CK_SLOT_ID>> {
        Ok(if token_present {
            vec![1]
        } else {
            vec![1, 2, 3]
        })
    }
    fn get_slot_info(&self, slot: CK_SLOT_ID) -> CkResult<CK_SLOT_INFO> {
        match slot {
            1..=3 => Ok(CK_SLOT_INFO {
                flags: CKF_TOKEN_PRESENT,
                ..Default::default()
            }),
            _ => Err(CKR_SLOT_ID_INVALID),
        }
    }
    fn get_token_info(&self, _slot: CK_SLOT_ID) -> CkResult<CK_TOKEN_INFO> {
        Ok(CK_TOKEN_INFO {
            label: pad_field("dummy"),
            ..Default::default()
        })
    }
    fn get_mechanism_list(&self, _slot: CK_SLOT_ID) -> CkResult<Vec<CK_MECHANISM_TYPE>> {
        Ok(vec![CKM_AES_GCM, CKM_SHA256])
    }
    fn get_mechanism_info(
        &self,
        _s: CK_SLOT_ID,
        _m: CK_MECHANISM_TYPE,
    ) -> CkResult<CK_MECHANISM_INFO> {
        Ok(CK_MECHANISM_INFO {
            ulMinKeySize: 16,
            ulMaxKeySize: 32,
            flags: CKF_ENCRYPT,
        })
    }
    fn init_token(&self, _slot: CK_SLOT_ID, so_pin: &[u8], label: &[u8; 32]) -> CkResult<()> {
        if so_pin == b"so" && label.starts_with(b"token") {
            Ok(())
        } else {
            Err(CKR_PIN_INCORRECT)
        }
    }
    fn open_session(&self, _slot: CK_SLOT_ID, flags: CK_FLAGS) -> CkResult<CK_SESSION_HANDLE> {
        if flags & CKF_SERIAL_SESSION == 0 {
            return Err(CKR_SESSION_PARALLEL_NOT_SUPPORTED);
        }
        Ok(SESSION)
    }
    fn close_session(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        session(s)
    }
    fn close_all_sessions(&self, _slot: CK_SLOT_ID) -> CkResult<()> {
        Ok(())
    }
    fn get_session_info(&self, s: CK_SESSION_HANDLE) -> CkResult<CK_SESSION_INFO> {
        session(s)?;
        Ok(CK_SESSION_INFO {
            slotID: 1,
            state: CKS_RW_PUBLIC_SESSION,
            flags: 6,
            ulDeviceError: 0,
        })
    }
    fn login(&self, s: CK_SESSION_HANDLE, _user: CK_USER_TYPE, pin: &[u8]) -> CkResult<()> {
        session(s)?;
        if pin == b"1234" {
            Ok(())
        } else {
            Err(CKR_PIN_INCORRECT)
        }
    }
    fn logout(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        session(s)
    }
    fn create_object(
        &self,
        s: CK_SESSION_HANDLE,
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        session(s)?;
        *self.last_template.lock().unwrap() = template.to_vec();
        Ok(100)
    }
    fn get_attribute_value(
        &self,
        s: CK_SESSION_HANDLE,
        obj: CK_OBJECT_HANDLE,
        types: &[CK_ATTRIBUTE_TYPE],
    ) -> CkResult<Vec<AttrValue>> {
        session(s)?;
        let mut out: Vec<AttrValue> = types
            .iter()
            .map(|t| match *t {
                CKA_LABEL => AttrValue::Value(b"hello".to_vec()),
                CKA_CLASS => AttrValue::Value(CKO_SECRET_KEY.to_ne_bytes().to_vec()),
                CKA_VALUE => AttrValue::Sensitive,
                CKA_WRAP_TEMPLATE => AttrValue::Value(encode_template(&wrap_template())),
                _ => AttrValue::Invalid,
            })
            .collect();
        if obj == SHORT_OBJECT {
            out.pop();
        }
        Ok(out)
    }
    fn find_objects(&self, s: CK_SESSION_HANDLE, max: usize) -> CkResult<Vec<CK_OBJECT_HANDLE>> {
        session(s)?;
        Ok([1, 2, 3, 4, 5].into_iter().take(max).collect())
    }
    fn encrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        _key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        session(s)?;
        self.remember(mech)
    }
    fn encrypt(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        session(s)?;
        out.write(&dummy_encrypt(data))?;
        Ok(())
    }
    fn decrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        _key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        session(s)?;
        self.remember(mech)
    }
    fn sign_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        _key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        session(s)?;
        self.remember(mech)
    }
    fn message_encrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        _key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        session(s)?;
        self.remember(mech)
    }
    fn encrypt_message(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        _aad: &[u8],
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        session(s)?;
        if !out.write(data)? {
            return Ok(());
        }
        match params {
            MessageParams::Gcm {
                iv,
                iv_generator,
                tag,
                ..
            } => {
                if *iv_generator != CKG_NO_GENERATE {
                    iv.fill(0x11);
                }
                tag.fill(0xAA);
            }
            MessageParams::ChaCha20Poly1305 { tag, .. } => tag.fill(0xCC),
        }
        Ok(())
    }
    fn encrypt_message_begin(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        _aad: &[u8],
    ) -> CkResult<()> {
        session(s)?;
        if let MessageParams::Gcm {
            iv, iv_generator, ..
        } = params
        {
            if *iv_generator != CKG_NO_GENERATE {
                iv.fill(0x22);
            }
        }
        Ok(())
    }
    fn encrypt_message_next(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        data: &[u8],
        out: &mut OutBuf,
        last: bool,
    ) -> CkResult<()> {
        session(s)?;
        if out.write(data)? && last {
            if let MessageParams::Gcm { tag, .. } = params {
                tag.fill(0xBB);
            }
        }
        Ok(())
    }
    fn decrypt_message(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        _aad: &[u8],
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        session(s)?;
        let MessageParams::Gcm { tag, .. } = params else {
            return Err(CKR_MECHANISM_PARAM_INVALID);
        };
        if tag.iter().any(|b| *b != 0xAA) {
            return Err(CKR_ENCRYPTED_DATA_INVALID);
        }
        out.write(data)?;
        Ok(())
    }
    fn generate_key_pair(
        &self,
        s: CK_SESSION_HANDLE,
        _mech: &Mechanism,
        _public: &[Attribute],
        _private: &[Attribute],
    ) -> CkResult<(CK_OBJECT_HANDLE, CK_OBJECT_HANDLE)> {
        session(s)?;
        Ok((10, 11))
    }
    fn encapsulate_key(
        &self,
        s: CK_SESSION_HANDLE,
        _mech: &Mechanism,
        _public_key: CK_OBJECT_HANDLE,
        _template: &[Attribute],
        ciphertext: &mut OutBuf,
    ) -> CkResult<Option<CK_OBJECT_HANDLE>> {
        session(s)?;
        Ok(ciphertext.write(&[9; 32])?.then_some(77))
    }
    fn generate_random(&self, s: CK_SESSION_HANDLE, out: &mut [u8]) -> CkResult<()> {
        session(s)?;
        out.fill(0x42);
        Ok(())
    }
    fn wait_for_slot_event(&self, dont_block: bool) -> CkResult<CK_SLOT_ID> {
        if dont_block {
            Err(CKR_NO_EVENT)
        } else {
            Ok(1)
        }
    }
    fn check_session(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        session(s)
    }
}
