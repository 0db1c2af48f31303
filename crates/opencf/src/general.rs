//! General-purpose functions: `C_Initialize` (config, providers, slot map, metaslot),
//! `C_Finalize`, `C_GetInfo`, and where `libopencf.so` lives.

use crate::providers::{self, merge_mech};
use crate::{route, MetaInfo, OpenCf, Sessions};
use opencf_abi::sys::*;
use opencf_abi::{pad_field, CkResult, InitArgs};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The directory `libopencf.so` was loaded from: `$OPENCF_LIB_DIR`, else the mapping of
/// `libopencf.so` in `/proc/self/maps`, else the directory of the running executable.
/// Bare module names in the config are looked up there.
pub fn lib_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("OPENCF_LIB_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::fs::read_to_string("/proc/self/maps")
        .ok()
        .and_then(|maps| dir_from_maps(&maps))
    {
        return d;
    }
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Finds the directory of `libopencf.so` in the text of `/proc/self/maps`.
pub fn dir_from_maps(maps: &str) -> Option<PathBuf> {
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(Path::new)
        .find(|p| p.file_name().is_some_and(|n| n == "libopencf.so"))
        .and_then(|p| p.parent().map(Path::to_path_buf))
}

/// The functions slot 0 routes to any provider (`route.rs`).
const ROUTED: CK_FLAGS = CKF_ENCRYPT
    | CKF_DECRYPT
    | CKF_DIGEST
    | CKF_SIGN
    | CKF_SIGN_RECOVER
    | CKF_VERIFY
    | CKF_VERIFY_RECOVER;

/// The functions slot 0 runs in the keystore only (`OpenCf::keystore_allows`).
const KEYSTORE_ONLY: CK_FLAGS = CKF_GENERATE
    | CKF_GENERATE_KEY_PAIR
    | CKF_WRAP
    | CKF_UNWRAP
    | CKF_DERIVE
    | CKF_ENCAPSULATE
    | CKF_DECAPSULATE
    | CKF_MESSAGE_ENCRYPT
    | CKF_MESSAGE_DECRYPT
    | CKF_MESSAGE_SIGN
    | CKF_MESSAGE_VERIFY
    | CKF_MULTI_MESSAGE;

impl OpenCf {
    /// `C_Initialize`.
    pub fn init(args: &InitArgs) -> CkResult<OpenCf> {
        let dir = lib_dir();
        let cfg = match opencf_config::load(&dir) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("opencf: {e}");
                return Err(CKR_FUNCTION_FAILED);
            }
        };
        let provs = providers::load_all(&cfg, &dir, args.no_os_threads)?;
        let mut slots = Vec::new();
        for (i, p) in provs.iter().enumerate() {
            for &s in &p.slots {
                slots.push((i, s));
            }
        }
        let mut meta = None;
        // `opencf_config::load` has already applied OPENCF_METASLOT_ENABLED/_KEYSTORE.
        if cfg.metaslot.enabled {
            let want = cfg.metaslot.keystore.clone();
            let ks = provs
                .iter()
                .position(|p| p.label.as_deref() == Some(want.as_str()));
            match ks {
                None => {
                    eprintln!(
                        "opencf: metaslot keystore token \"{want}\" not found in any provider"
                    );
                    providers::finalize_all(&provs);
                    return Err(CKR_FUNCTION_FAILED);
                }
                Some(k) => {
                    // Slot 0 runs key management and the message-based functions in the
                    // keystore only: another provider's flags for them would offer what slot
                    // 0 then refuses, so only its routed functions count.
                    let mut mechs = HashMap::new();
                    for (idx, p) in provs.iter().enumerate() {
                        for (m, i) in &p.mechs {
                            let mut i = *i;
                            if idx != k {
                                if i.flags & ROUTED == 0 {
                                    continue;
                                }
                                i.flags &= !KEYSTORE_ONLY;
                            }
                            merge_mech(&mut mechs, *m, &i);
                        }
                    }
                    meta = Some(MetaInfo {
                        keystore: k,
                        ks_slot: provs[k].meta_slot.unwrap_or(0),
                        routes: route::routes(&provs, &mechs),
                        mechs,
                        auto_key_migrate: cfg.metaslot.auto_key_migrate,
                    });
                }
            }
        }
        Ok(OpenCf {
            clones: route::CloneCache::new(provs.len()),
            providers: provs,
            slots,
            meta,
            sessions: Sessions::default(),
        })
    }

    /// `C_Finalize`: finalizes every provider.
    pub fn fini(&self) {
        providers::finalize_all(&self.providers);
    }

    /// `C_GetInfo`.
    pub fn info(&self) -> CK_INFO {
        CK_INFO {
            cryptokiVersion: CK_VERSION { major: 3, minor: 2 },
            manufacturerID: pad_field("OpenCF"),
            flags: 0,
            libraryDescription: pad_field("OpenCF framework"),
            libraryVersion: CK_VERSION { major: 0, minor: 1 },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lookup() {
        let maps = "7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/x/libopencf_softtoken.so\n\
                    7f02-7f03 r-xp 00000000 08:01 2 /opt/ocf/lib/libopencf.so\n";
        assert_eq!(dir_from_maps(maps), Some(PathBuf::from("/opt/ocf/lib")));
        assert_eq!(dir_from_maps("7f00-7f01 r-xp 0 0 0 [vdso]\n"), None);
    }
}
