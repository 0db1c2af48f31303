//! Loading the providers named by the configuration, and what the framework learns about each
//! at `C_Initialize` (its slots, the slot the metaslot uses, that slot's mechanisms).

pub use opencf_abi::provider::Provider;
use opencf_abi::sys::*;
use opencf_abi::{unpad_field, CkResult};
use opencf_config::{Config, ProviderConfig};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

/// One loaded, initialized provider.
pub struct Prov {
    /// Its configuration entry.
    pub cfg: ProviderConfig,
    /// The loaded module.
    pub p: Provider,
    /// The provider's slot IDs, in its own order.
    pub slots: Vec<CK_SLOT_ID>,
    /// The slot the metaslot uses: the first with a token.
    pub meta_slot: Option<CK_SLOT_ID>,
    /// Token label of [`Prov::meta_slot`].
    pub label: Option<String>,
    /// Mechanisms of [`Prov::meta_slot`] that the policy allows.
    pub mechs: crate::UlongMap<CK_MECHANISM_TYPE, CK_MECHANISM_INFO>,
    /// Its live counters (`cryptoadm stat`); `None` when `OPENCF_STAT=off`.
    pub stats: Option<&'static opencf_stat::ProviderStats>,
    /// A session the framework owns on [`Prov::meta_slot`], holding key clones (session objects
    /// are visible to every session of the process on that token). Opened on first use.
    pub internal: Mutex<Option<CK_SESSION_HANDLE>>,
    /// The module is the OpenCF software token (by its `C_GetInfo`), whose saved operation
    /// states name their mechanism in a layout slot 0 can read
    /// (`opencf_softtoken_core::mech::saved_state_mechanism`): `C_SetOperationState` checks
    /// that mechanism against the policy. Another module's states are opaque.
    pub softtoken_states: bool,
}

impl Prov {
    /// Opens (once) the framework's own session on the metaslot slot.
    pub fn internal_session(&self) -> CkResult<CK_SESSION_HANDLE> {
        let mut g = self.internal.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = *g {
            return Ok(h);
        }
        let slot = self.meta_slot.ok_or(CKR_TOKEN_NOT_PRESENT)?;
        let h = self
            .p
            .open_session(slot, CKF_SERIAL_SESSION | CKF_RW_SESSION)?;
        *g = Some(h);
        Ok(h)
    }

    /// Whether the token of [`Prov::meta_slot`] offers asynchronous sessions
    /// (`CKF_ASYNC_SESSION_SUPPORTED`; asked of the module each time).
    pub fn offers_async(&self) -> bool {
        self.meta_slot.is_some_and(|s| {
            (self.p.get_token_info(s)).is_ok_and(|t| t.flags & CKF_ASYNC_SESSION_SUPPORTED != 0)
        })
    }
}

/// Counting for `cryptoadm stat` is on unless `OPENCF_STAT` is `off` (or `0`, `false`), which
/// removes it from the hot path altogether (to measure what it costs).
fn stats_enabled() -> bool {
    !matches!(
        std::env::var("OPENCF_STAT").as_deref(),
        Ok("off" | "0" | "false")
    )
}

fn describe(rv: CK_RV) -> String {
    opencf_abi::rv_names::rv_name(rv)
}

/// Loads and initializes every provider of `cfg`, in order. A provider that cannot be loaded
/// or initialized fails the whole `C_Initialize` after a message naming it on stderr: the
/// framework never silently runs with fewer providers than configured. The one exception is
/// the accelerator provider of the built-in default (no config file), which is only there
/// because its module was found: if it cannot be used, a warning names it and the software
/// token serves alone, as when the module is absent.
///
/// `no_os_threads`: the application forbade threads (`CKF_LIBRARY_CANT_CREATE_OS_THREADS`);
/// each provider is told, and one that needs them answers `CKR_NEED_TO_CREATE_THREADS`, which
/// becomes the framework's answer unless that provider is the optional accelerator.
pub fn load_all(cfg: &Config, lib_dir: &Path, no_os_threads: bool) -> CkResult<Vec<Prov>> {
    let mut out: Vec<Prov> = Vec::new();
    for pc in &cfg.providers {
        let path = opencf_config::resolve_module(&pc.module, lib_dir);
        match load_one(pc, &path, lib_dir, no_os_threads) {
            Ok(prov) => out.push(prov),
            Err((why, rv)) => {
                let optional = matches!(cfg.source, opencf_config::Source::BuiltIn)
                    && pc.module == opencf_config::ACCEL_MODULE;
                eprintln!(
                    "opencf: provider \"{}\" ({}): {why}{}",
                    pc.name,
                    path.display(),
                    if optional {
                        " (built-in default: skipped)"
                    } else {
                        ""
                    }
                );
                if !optional {
                    finalize_all(&out);
                    return Err(if rv == Some(CKR_NEED_TO_CREATE_THREADS) {
                        CKR_NEED_TO_CREATE_THREADS
                    } else {
                        CKR_FUNCTION_FAILED
                    });
                }
            }
        }
    }
    Ok(out)
}

/// Loads, initializes and probes one provider; the error says what failed, with the
/// module's answer when it refused `C_Initialize`.
fn load_one(
    pc: &ProviderConfig,
    path: &Path,
    lib_dir: &Path,
    no_os_threads: bool,
) -> Result<Prov, (String, Option<CK_RV>)> {
    let init_failed = |rv: CK_RV| {
        let why = if rv == CKR_NEED_TO_CREATE_THREADS {
            "it needs threads of its own, which the application forbids".to_string()
        } else {
            format!("C_Initialize failed: {}", describe(rv))
        };
        (why, Some(rv))
    };
    let p = if links_softtoken(path, lib_dir) {
        let args = opencf_abi::InitArgs {
            os_locking_ok: true,
            no_os_threads,
            framework: true,
        };
        let token = <opencf_softtoken_core::SoftToken as opencf_abi::Backend>::initialize(&args)
            .map_err(init_failed)?;
        Provider::linked(path, Box::new(token))
    } else {
        let p = Provider::load(path).map_err(|e| (e.to_string(), None))?;
        p.initialize_for_framework(no_os_threads)
            .map_err(init_failed)?;
        p
    };
    probe(pc.clone(), p).map_err(|rv| (format!("cannot list its slots: {}", describe(rv)), None))
}

/// Turns off [`links_softtoken`]: `OPENCF_SOFTTOKEN_LINKED=0` (or `off`, `false`) loads the
/// software token's module file like any other provider.
pub const ENV_SOFTTOKEN_LINKED: &str = "OPENCF_SOFTTOKEN_LINKED";

/// Whether the provider at `path` is the software token installed beside `libopencf.so` (the
/// same file, by device and inode, as `lib_dir/libopencf_softtoken.so`): that module is built
/// from the same code as the copy linked into `libopencf.so`, which then serves it without the
/// C ABI in between (docs/METASLOT.md, "The software token linked in"). Any other module, a
/// softtoken elsewhere included, is loaded with `dlopen`.
fn links_softtoken(path: &Path, lib_dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if matches!(
        std::env::var(ENV_SOFTTOKEN_LINKED).as_deref(),
        Ok("0" | "off" | "false")
    ) {
        return false;
    }
    let beside = lib_dir.join(opencf_config::SOFTTOKEN_MODULE);
    match (std::fs::metadata(path), std::fs::metadata(beside)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// Finalizes every provider (errors ignored: there is nothing left to do about them).
pub fn finalize_all(provs: &[Prov]) {
    for p in provs {
        let _ = p.p.finalize();
    }
}

/// Learns a provider's slots and mechanisms; on failure the provider is finalized.
fn probe(cfg: ProviderConfig, p: Provider) -> Result<Prov, CK_RV> {
    let slots = match p.get_slot_list(false) {
        Ok(s) => s,
        Err(rv) => {
            let _ = p.finalize();
            return Err(rv);
        }
    };
    let mut meta_slot = None;
    let mut label = None;
    for &s in &slots {
        if let Ok(ti) = p.get_token_info(s) {
            meta_slot = Some(s);
            label = Some(unpad_field(&ti.label));
            break;
        }
    }
    let mut mechs = crate::UlongMap::default();
    if let Some(s) = meta_slot {
        for m in p.get_mechanism_list(s).unwrap_or_default() {
            if !cfg.allows(m) {
                continue;
            }
            if let Ok(info) = p.get_mechanism_info(s, m) {
                mechs.insert(m, info);
            }
        }
    }
    let stats = stats_enabled().then(|| opencf_stat::provider(&cfg.name));
    let softtoken_states = p.get_info().is_ok_and(|i| {
        unpad_field(&i.manufacturerID) == "OpenCF"
            && unpad_field(&i.libraryDescription) == "OpenCF software token"
    });
    Ok(Prov {
        cfg,
        p,
        slots,
        meta_slot,
        label,
        mechs,
        stats,
        internal: Mutex::new(None),
        softtoken_states,
    })
}

/// Merges one provider's mechanism info into the metaslot's: minimum of the minimum key sizes,
/// maximum of the maximum, flags ORed, the hardware flag cleared.
pub fn merge_mech(
    into: &mut HashMap<CK_MECHANISM_TYPE, CK_MECHANISM_INFO>,
    m: CK_MECHANISM_TYPE,
    i: &CK_MECHANISM_INFO,
) {
    let mut i = *i;
    i.flags &= !CKF_HW;
    match into.get_mut(&m) {
        None => {
            into.insert(m, i);
        }
        Some(e) => {
            e.ulMinKeySize = e.ulMinKeySize.min(i.ulMinKeySize);
            e.ulMaxKeySize = e.ulMaxKeySize.max(i.ulMaxKeySize);
            e.flags |= i.flags;
        }
    }
}
