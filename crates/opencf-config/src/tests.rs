use super::*;
use opencf_abi::sys;
use std::sync::Mutex;

/// Tests that read or change environment variables hold this.
static ENV: Mutex<()> = Mutex::new(());

fn env_lock() -> std::sync::MutexGuard<'static, ()> {
    ENV.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sets/clears the variables for the duration of a test and restores them afterwards.
struct EnvGuard(Vec<(&'static str, Option<std::ffi::OsString>)>);

impl EnvGuard {
    fn set(vars: &[(&'static str, Option<&str>)]) -> Self {
        let all = [
            ENV_CONF,
            ENV_METASLOT_ENABLED,
            ENV_METASLOT_KEYSTORE,
            "XDG_CONFIG_HOME",
            "HOME",
        ];
        let saved = all.iter().map(|&k| (k, std::env::var_os(k))).collect();
        for &k in &all {
            if k != "HOME" {
                std::env::remove_var(k);
            }
        }
        for &(k, v) in vars {
            match v {
                Some(v) => std::env::set_var(k, v),
                None => std::env::remove_var(k),
            }
        }
        EnvGuard(saved)
    }
}

impl Drop for EnvGuard {
    fn drop(&mut self) {
        for (k, v) in &self.0 {
            match v {
                Some(v) => std::env::set_var(k, v),
                None => std::env::remove_var(k),
            }
        }
    }
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    parse_str(text, Some(Path::new("/x/opencf.toml")))
}

const FULL: &str = r#"
[metaslot]
enabled = false
keystore = "My Token"
auto_key_migrate = false

[[provider]]
name = "accel"
module = "libopencf_accel.so"
[provider.policy.CKM_AES_GCM]
min_bytes = 4096

[[provider]]
name = "softtoken"
module = "libopencf_softtoken.so"
enabled = ["CKM_AES_GCM", "0x1082", "CKM_ECDSA"]

[[provider]]
name = "softhsm"
module = "/usr/lib/softhsm/libsofthsm2.so"
disabled = ["CKM_RSA_PKCS_KEY_PAIR_GEN"]
random = false
"#;

#[test]
fn parses_full_example() {
    let c = parse(FULL).unwrap();
    assert_eq!(c.source, Source::File("/x/opencf.toml".into()));
    assert!(!c.metaslot.enabled);
    assert_eq!(c.metaslot.keystore, "My Token");
    assert!(!c.metaslot.auto_key_migrate);
    let names: Vec<_> = c.providers.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["accel", "softtoken", "softhsm"]);
    let accel = &c.providers[0];
    assert_eq!(accel.min_bytes(sys::CKM_AES_GCM), Some(4096));
    assert_eq!(accel.min_bytes(sys::CKM_AES_CBC), None);
    assert!(accel.allows(sys::CKM_AES_GCM) && accel.random && accel.all_enabled());
    let soft = &c.providers[1];
    assert_eq!(
        soft.enabled_mechanisms,
        Some(vec![sys::CKM_AES_GCM, sys::CKM_AES_CBC, sys::CKM_ECDSA])
    );
    assert!(soft.allows(sys::CKM_AES_CBC) && !soft.allows(sys::CKM_RSA_PKCS));
    let hsm = &c.providers[2];
    assert!(!hsm.random);
    assert!(!hsm.allows(sys::CKM_RSA_PKCS_KEY_PAIR_GEN) && hsm.allows(sys::CKM_RSA_PKCS));
    assert_eq!(hsm.module, "/usr/lib/softhsm/libsofthsm2.so");
}

#[test]
fn defaults_for_empty_file() {
    let c = parse("").unwrap();
    assert_eq!(c.metaslot, MetaslotConfig::default());
    assert!(c.metaslot.enabled && c.metaslot.auto_key_migrate);
    assert_eq!(c.metaslot.keystore, "OpenCF Softtoken");
    assert!(c.providers.is_empty());
    let c = parse("[metaslot]\n[[provider]]\nname='a'\nmodule='b'\n").unwrap();
    assert!(c.providers[0].random && c.providers[0].all_enabled());
}

#[test]
fn enabled_and_disabled_combine() {
    let c = parse("[[provider]]\nname='a'\nmodule='m'\nenabled=['CKM_AES_GCM','CKM_AES_CBC']\ndisabled=['CKM_AES_CBC']\n").unwrap();
    let p = &c.providers[0];
    assert!(
        p.allows(sys::CKM_AES_GCM) && !p.allows(sys::CKM_AES_CBC) && !p.allows(sys::CKM_AES_ECB)
    );
    let c = parse("[[provider]]\nname='a'\nmodule='m'\nenabled=[]\n").unwrap();
    assert!(c.providers[0].all_disabled() && !c.providers[0].allows(sys::CKM_AES_GCM));
}

fn expect_err(text: &str, line: usize, needle: &str) {
    let e = parse(text).expect_err("must fail");
    assert_eq!(e.file.as_deref(), Some(Path::new("/x/opencf.toml")), "{e}");
    assert_eq!(e.line, Some(line), "{e}");
    assert!(e.message.contains(needle), "{e:?} lacks {needle}");
    let shown = e.to_string();
    assert!(
        shown.starts_with(&format!("/x/opencf.toml:{line}: ")),
        "{shown}"
    );
}

#[test]
fn syntax_error_names_line() {
    expect_err("[metaslot]\nenabled = true\nkeystore = \"x\n", 3, "");
    expect_err("[metaslot]\nenabled = yes\n", 2, "");
}

#[test]
fn unknown_keys_rejected_everywhere() {
    expect_err("colour = 1\n", 1, "colour");
    expect_err(
        "[metaslot]\nenabled = true\nkeystor = \"x\"\n",
        3,
        "keystor",
    );
    expect_err(
        "[[provider]]\nname = 'a'\nmodule = 'b'\nrandon = false\n",
        4,
        "randon",
    );
    expect_err(
        "[[provider]]\nname = 'a'\nmodule = 'b'\n[provider.policy.CKM_AES_GCM]\nmin_byte = 5\n",
        5,
        "min_byte",
    );
}

#[test]
fn wrong_types_rejected() {
    expect_err("[metaslot]\nenabled = \"true\"\n", 2, "");
    expect_err(
        "[[provider]]\nname = 'a'\nmodule = 'b'\ndisabled = 'CKM_AES_GCM'\n",
        4,
        "",
    );
}

#[test]
fn unknown_mechanism_rejected() {
    expect_err(
        "[[provider]]\nname = 'a'\nmodule = 'b'\n\ndisabled = ['CKM_AES_GCM',\n 'CKM_NOPE']\n",
        6,
        "CKM_NOPE",
    );
    expect_err(
        "[[provider]]\nname = 'a'\nmodule = 'b'\nenabled = ['CKM_FOO']\n",
        4,
        "CKM_FOO",
    );
    expect_err(
        "[[provider]]\nname = 'a'\nmodule = 'b'\n[provider.policy.CKM_BAR]\nmin_bytes = 1\n",
        4,
        "CKM_BAR",
    );
}

#[test]
fn duplicate_and_empty_names_rejected() {
    expect_err(
        "[[provider]]\nname = 'a'\nmodule = 'b'\n[[provider]]\nname = 'a'\nmodule = 'c'\n",
        5,
        "duplicate provider name \"a\"",
    );
    expect_err("[[provider]]\nname = ''\nmodule = 'b'\n", 2, "empty name");
    expect_err(
        "[[provider]]\nname = 'a'\nmodule = ' '\n",
        3,
        "empty module",
    );
    expect_err("\n[[provider]]\nmodule = 'b'\n", 2, "missing \"name\"");
    expect_err("[[provider]]\nname = 'a'\n", 1, "missing \"module\"");
    expect_err("[metaslot]\nkeystore = ''\n", 2, "empty token label");
}

/// Two names the live counters would cut to the same first 32 bytes are one provider to
/// `cryptoadm stat`: refused, with both names; a long name alone is fine.
#[test]
fn names_alike_in_their_counted_bytes_rejected() {
    let long = "provider-with-a-rather-long-name";
    assert_eq!(long.len(), opencf_stat::NAME_MAX);
    expect_err(
        &format!(
            "[[provider]]\nname = '{long}-a'\nmodule = 'b'\n\
             [[provider]]\nname = '{long}-b'\nmodule = 'c'\n"
        ),
        5,
        &format!("\"{long}-b\" agrees with \"{long}-a\" (line 2) in its first 32 bytes"),
    );
    let text = format!("[[provider]]\nname = '{long}-a'\nmodule = 'b'\n");
    assert_eq!(parse(&text).unwrap().providers.len(), 1);
    assert_eq!(opencf_stat::truncate_name(&format!("{long}-a")), long);
    // Cut back to a character boundary: 31 ASCII bytes and a two-byte character.
    assert_eq!(
        opencf_stat::truncate_name(&format!("{}é", &long[..31])),
        &long[..31]
    );
}

#[test]
fn error_display_forms() {
    let e = ConfigError::new(Some(Path::new("/f")), None, "cannot read");
    assert_eq!(e.to_string(), "/f: cannot read");
    let e = ConfigError::new(Some(Path::new("/f")), Some(3), "bad");
    assert_eq!(e.to_string(), "/f:3: bad");
    assert!(load_from(Path::new("/nonexistent/opencf.toml"))
        .unwrap_err()
        .to_string()
        .starts_with("/nonexistent/opencf.toml: cannot read"));
}

#[test]
fn load_from_reads_through_a_bound() {
    // A device is not read at all (it could be /dev/zero, which never ends).
    let e = load_from(Path::new("/dev/zero")).unwrap_err().to_string();
    assert_eq!(
        e,
        "/dev/zero: cannot read: not a regular file (a device, FIFO, socket or directory is not read)"
    );
    let dir = tempfile::tempdir().unwrap();
    // A regular file past the bound.
    let big = dir.path().join("big.toml");
    fs::write(&big, vec![b'#'; MAX_CONFIG_FILE as usize + 1]).unwrap();
    let e = load_from(&big).unwrap_err().to_string();
    assert!(e.ends_with("cannot read: larger than 1048576 bytes"), "{e}");
    let latin1 = dir.path().join("latin1.toml");
    fs::write(&latin1, b"# caf\xe9\n").unwrap();
    let e = load_from(&latin1).unwrap_err().to_string();
    assert!(e.ends_with("cannot read: not UTF-8"), "{e}");
    // Exactly at the bound is still read.
    let full = dir.path().join("full.toml");
    let mut text = String::from("[metaslot]\nenabled = true\n");
    text.push_str(&"#".repeat(MAX_CONFIG_FILE as usize - text.len()));
    fs::write(&full, &text).unwrap();
    assert!(load_from(&full).unwrap().metaslot.enabled);
}

#[test]
fn mechanism_names() {
    assert_eq!(mechanism_from_name("CKM_AES_GCM"), Some(sys::CKM_AES_GCM));
    assert_eq!(mechanism_from_name("0x1087"), Some(0x1087));
    assert_eq!(mechanism_from_name("0X1087"), Some(0x1087));
    assert_eq!(mechanism_from_name("4231"), Some(4231));
    assert_eq!(mechanism_from_name("CKM_NOPE"), None);
    assert_eq!(mechanism_from_name("0xZZ"), None);
    assert_eq!(mechanism_from_name("0x+1087"), None);
    assert_eq!(mechanism_from_name(""), None);
    assert_eq!(mechanism_name(sys::CKM_AES_GCM), "CKM_AES_GCM");
    assert_eq!(
        mechanism_name(sys::CKM_EC_KEY_PAIR_GEN),
        "CKM_EC_KEY_PAIR_GEN"
    );
    assert_eq!(
        mechanism_from_name("CKM_ECDSA_KEY_PAIR_GEN"),
        Some(sys::CKM_EC_KEY_PAIR_GEN)
    );
    assert_eq!(mechanism_name(0x8000_1234), "0x80001234");
    // Every name round-trips to its value, and every value has a name that maps back to it.
    assert!(MECHANISMS.len() >= 470, "{}", MECHANISMS.len());
    for &(n, v) in MECHANISMS {
        assert_eq!(mechanism_from_name(n), Some(v), "{n}");
        assert_eq!(mechanism_from_name(&mechanism_name(v)), Some(v), "{n}");
    }
}

#[test]
fn softtoken_mechanisms_have_names() {
    // Everything the softtoken offers must be nameable in the config.
    for &m in &[
        sys::CKM_RSA_PKCS_KEY_PAIR_GEN,
        sys::CKM_RSA_PKCS,
        sys::CKM_RSA_PKCS_PSS,
        sys::CKM_RSA_PKCS_OAEP,
        sys::CKM_SHA256_RSA_PKCS,
        sys::CKM_SHA256_RSA_PKCS_PSS,
        sys::CKM_EC_KEY_PAIR_GEN,
        sys::CKM_ECDSA,
        sys::CKM_ECDSA_SHA256,
        sys::CKM_ECDH1_DERIVE,
        sys::CKM_EC_EDWARDS_KEY_PAIR_GEN,
        sys::CKM_EDDSA,
        sys::CKM_AES_KEY_GEN,
        sys::CKM_AES_ECB,
        sys::CKM_AES_CBC,
        sys::CKM_AES_CBC_PAD,
        sys::CKM_AES_CTR,
        sys::CKM_AES_GCM,
        sys::CKM_AES_KEY_WRAP,
        sys::CKM_AES_KEY_WRAP_PAD,
        sys::CKM_AES_CMAC,
        sys::CKM_SHA_1,
        sys::CKM_SHA256,
        sys::CKM_SHA384,
        sys::CKM_SHA512,
        sys::CKM_SHA3_256,
        sys::CKM_SHA256_HMAC,
        sys::CKM_GENERIC_SECRET_KEY_GEN,
        sys::CKM_HKDF_DERIVE,
        sys::CKM_PKCS5_PBKD2,
    ] {
        assert!(mechanism_name(m).starts_with("CKM_"), "{m:#x}");
    }
}

#[test]
fn resolve_module_paths() {
    let lib = Path::new("/opt/opencf/lib");
    assert_eq!(
        resolve_module("libx.so", lib),
        PathBuf::from("/opt/opencf/lib/libx.so")
    );
    assert_eq!(
        resolve_module("/usr/lib/libx.so", lib),
        PathBuf::from("/usr/lib/libx.so")
    );
    assert_eq!(resolve_module("./libx.so", lib), PathBuf::from("./libx.so"));
    assert_eq!(
        resolve_module("sub/libx.so", lib),
        PathBuf::from("sub/libx.so")
    );
}

#[test]
fn default_config_with_and_without_accel() {
    let dir = tempfile::tempdir().unwrap();
    let c = default_config_in(dir.path());
    assert_eq!(c.source, Source::BuiltIn);
    assert_eq!(c.providers.len(), 1);
    assert_eq!(
        (c.providers[0].name.as_str(), c.providers[0].module.as_str()),
        ("softtoken", "libopencf_softtoken.so")
    );
    assert_eq!(c.metaslot, MetaslotConfig::default());
    fs::write(dir.path().join("libopencf_accel.so"), b"").unwrap();
    let c = default_config_in(dir.path());
    let names: Vec<_> = c.providers.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["accel", "softtoken"]);
    assert_eq!(c.providers[0].module, "libopencf_accel.so");
    assert_eq!(
        c.providers[0].min_bytes(sys::CKM_AES_GCM),
        Some(ACCEL_GCM_MIN_BYTES),
        "small AES-GCM operations pass the accelerator over"
    );
    assert_eq!(c.providers[0].min_bytes(sys::CKM_AES_CBC), None);
    assert_eq!(c.providers[1].min_bytes(sys::CKM_AES_GCM), None);
}

#[test]
fn save_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/opencf.toml");
    let c = parse(FULL).unwrap();
    save(&c, &path).unwrap();
    let back = load_from(&path).unwrap();
    assert_eq!(back.metaslot, c.metaslot);
    assert_eq!(back.providers, c.providers);
    assert_eq!(back.source, Source::File(path.clone()));
    // No temp files left behind; the lock file is.
    let mut left: Vec<_> = fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["opencf.toml", "opencf.toml.lock"]);
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.contains("[provider.policy.CKM_AES_GCM]"), "{text}");
    assert!(
        text.contains("disabled = [\"CKM_RSA_PKCS_KEY_PAIR_GEN\"]"),
        "{text}"
    );
}

#[test]
fn update_starts_from_default_and_is_atomic_under_threads() {
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("lib");
    fs::create_dir(&lib).unwrap();
    let path = dir.path().join("opencf.toml");
    update(&path, &lib, |c| {
        c.providers.push(ProviderConfig::new("p0", "/m0.so"));
        Ok::<_, ConfigError>(())
    })
    .unwrap();
    let c = load_from(&path).unwrap();
    let names: Vec<_> = c.providers.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["softtoken", "p0"]);
    // Concurrent read-modify-write: no update is lost, the file always parses.
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (path, lib) = (path.clone(), lib.clone());
            std::thread::spawn(move || {
                for i in 0..10 {
                    update(&path, &lib, |c| {
                        c.providers
                            .push(ProviderConfig::new(format!("t{t}-{i}"), "/m.so"));
                        Ok::<_, ConfigError>(())
                    })
                    .unwrap();
                    load_from(&path).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(load_from(&path).unwrap().providers.len(), 2 + 40);
    // An error from the closure leaves the file untouched.
    let before = fs::read(&path).unwrap();
    let r: Result<(), ConfigError> = update(&path, &lib, |c| {
        c.providers.clear();
        Err(ConfigError::new(None, None, "no"))
    });
    assert!(r.is_err());
    assert_eq!(fs::read(&path).unwrap(), before);
    // An edit the parser would refuse (a blank provider name) is not written.
    let e = update(&path, &lib, |c| {
        c.providers[1].name = " ".into();
        Ok::<_, ConfigError>(())
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("the edit is refused") && e.contains("empty name"),
        "{e}"
    );
    assert_eq!(fs::read(&path).unwrap(), before);
}

#[test]
fn search_order_and_env_overrides() {
    let _g = env_lock();
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("lib");
    let xdg = dir.path().join("xdg");
    let home = dir.path().join("home");
    let system = dir.path().join("etc/opencf/opencf.toml");
    fs::create_dir_all(&lib).unwrap();
    let write = |p: &Path, label: &str| {
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, format!("[metaslot]\nkeystore = \"{label}\"\n")).unwrap();
    };
    let ks = |c: Config| (c.source, c.metaslot.keystore, c.metaslot.enabled);

    // Nothing anywhere: built-in default.
    let _e = EnvGuard::set(&[
        ("XDG_CONFIG_HOME", Some(xdg.to_str().unwrap())),
        ("HOME", Some(home.to_str().unwrap())),
    ]);
    assert_eq!(
        ks(load_with(&lib, &system).unwrap()),
        (Source::BuiltIn, DEFAULT_KEYSTORE.into(), true)
    );
    assert_eq!(find_config_file_with(&system), None);

    // System file.
    write(&system, "sys");
    assert_eq!(
        ks(load_with(&lib, &system).unwrap()),
        (Source::File(system.clone()), "sys".into(), true)
    );

    // $HOME/.config when XDG_CONFIG_HOME is unset; not used while XDG_CONFIG_HOME is set.
    let home_cfg = home.join(".config/opencf/opencf.toml");
    write(&home_cfg, "home");
    assert_eq!(ks(load_with(&lib, &system).unwrap()).1, "sys");
    std::env::remove_var("XDG_CONFIG_HOME");
    assert_eq!(
        ks(load_with(&lib, &system).unwrap()),
        (Source::File(home_cfg.clone()), "home".into(), true)
    );
    std::env::set_var("XDG_CONFIG_HOME", &xdg);

    // User file beats system file.
    let user = xdg.join("opencf/opencf.toml");
    write(&user, "user");
    assert_eq!(
        ks(load_with(&lib, &system).unwrap()),
        (Source::File(user.clone()), "user".into(), true)
    );

    // OPENCF_CONF beats both; a missing OPENCF_CONF file is an error, not a fallback.
    let explicit = dir.path().join("explicit.toml");
    write(&explicit, "explicit");
    std::env::set_var(ENV_CONF, &explicit);
    assert_eq!(
        ks(load_with(&lib, &system).unwrap()),
        (Source::File(explicit.clone()), "explicit".into(), true)
    );
    std::env::set_var(ENV_CONF, dir.path().join("missing.toml"));
    let e = load_with(&lib, &system).unwrap_err();
    assert!(e.to_string().contains("missing.toml: cannot read"), "{e}");

    // A broken file is an error naming it, not a fallback.
    fs::write(&explicit, "[metaslot\n").unwrap();
    std::env::set_var(ENV_CONF, &explicit);
    let e = load_with(&lib, &system).unwrap_err();
    assert_eq!(
        (e.file.as_deref(), e.line),
        (Some(explicit.as_path()), Some(1))
    );
    write(&explicit, "explicit");

    // Env overrides.
    for (v, want) in [
        ("false", false),
        ("0", false),
        ("no", false),
        ("NO", false),
        ("true", true),
        ("1", true),
        ("yes", true),
    ] {
        std::env::set_var(ENV_METASLOT_ENABLED, v);
        assert_eq!(
            load_with(&lib, &system).unwrap().metaslot.enabled,
            want,
            "{v}"
        );
    }
    std::env::set_var(ENV_METASLOT_ENABLED, "maybe");
    assert!(load_with(&lib, &system)
        .unwrap_err()
        .to_string()
        .contains(ENV_METASLOT_ENABLED));
    std::env::remove_var(ENV_METASLOT_ENABLED);
    std::env::set_var(ENV_METASLOT_KEYSTORE, "Other Token");
    assert_eq!(
        load_with(&lib, &system).unwrap().metaslot.keystore,
        "Other Token"
    );
    // load_from never applies overrides.
    assert_eq!(load_from(&explicit).unwrap().metaslot.keystore, "explicit");
    // And they apply to the built-in default too.
    std::env::remove_var(ENV_CONF);
    fs::remove_file(&user).unwrap();
    fs::remove_file(&system).unwrap();
    std::env::remove_var("HOME");
    std::env::set_var(ENV_METASLOT_ENABLED, "off");
    let c = load_with(&lib, &system).unwrap();
    assert_eq!(
        (c.source, c.metaslot.keystore.as_str(), c.metaslot.enabled),
        (Source::BuiltIn, "Other Token", false)
    );
}

#[test]
fn edits_go_to_the_file_of_the_editor_and_start_from_the_file_in_effect() {
    let _g = env_lock();
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("lib");
    let xdg = dir.path().join("xdg");
    let system = dir.path().join("etc/opencf/opencf.toml");
    let user = xdg.join("opencf/opencf.toml");
    fs::create_dir_all(&lib).unwrap();
    let _e = EnvGuard::set(&[("XDG_CONFIG_HOME", Some(xdg.to_str().unwrap()))]);
    let target = |explicit: Option<&Path>, root| edit_target_with(explicit, root, &system).unwrap();

    // Root edits the system file, a user the user file; --config and OPENCF_CONF name theirs.
    assert_eq!(
        target(None, true),
        EditTarget {
            path: system.clone(),
            seed: None
        }
    );
    assert_eq!(
        target(None, false),
        EditTarget {
            path: user.clone(),
            seed: Some(system.clone())
        }
    );
    let explicit = dir.path().join("explicit.toml");
    for root in [false, true] {
        assert_eq!(target(Some(&explicit), root).path, explicit);
        assert_eq!(target(Some(&explicit), root).seed, None);
    }
    std::env::set_var(ENV_CONF, &explicit);
    assert_eq!(target(None, false).path, explicit);
    assert_eq!(target(Some(&system), false).path, system, "--config first");
    std::env::remove_var(ENV_CONF);

    // A user's first edit starts from the system file, which stays as it was; the new user
    // file is what the framework reads from then on.
    fs::create_dir_all(system.parent().unwrap()).unwrap();
    fs::write(
        &system,
        "[metaslot]\nkeystore = \"sys\"\n[[provider]]\nname = \"hsm\"\nmodule = \"/opt/libhsm.so\"\n",
    )
    .unwrap();
    let before = fs::read(&system).unwrap();
    let edit = |f: fn(&mut Config)| {
        update_target(&target(None, false), &lib, |c| {
            f(c);
            Ok::<_, ConfigError>(())
        })
        .unwrap()
    };
    edit(|c| c.providers[0].random = false);
    assert_eq!(fs::read(&system).unwrap(), before);
    assert_eq!(find_config_file_with(&system), Some(user.clone()));
    let c = load_from(&user).unwrap();
    assert_eq!(
        (c.metaslot.keystore.as_str(), c.providers[0].name.as_str()),
        ("sys", "hsm")
    );
    assert!(!c.providers[0].random);
    // Later edits start from the user file.
    edit(|c| c.metaslot.auto_key_migrate = false);
    let c = load_from(&user).unwrap();
    assert!(!c.providers[0].random && !c.metaslot.auto_key_migrate);

    // Without a system file the first edit starts from the built-in default.
    fs::remove_file(&user).unwrap();
    fs::remove_file(&system).unwrap();
    edit(|_| {});
    let names: Vec<_> = load_from(&user)
        .unwrap()
        .providers
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["softtoken"]);
}

/// `mkfifo PATH`, through the tool (no `unsafe` outside the ABI crate).
fn mkfifo(path: &Path) {
    let st = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(st.success(), "mkfifo {}", path.display());
}

/// A FIFO as the configuration (every application reads it at `C_Initialize`) is an error at
/// once: its open used to wait for a writer without end.
#[test]
fn a_fifo_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.toml");
    mkfifo(&fifo);
    let (tx, rx) = std::sync::mpsc::channel();
    let path = fifo.clone();
    std::thread::spawn(move || tx.send(load_from(&path).map(|_| ()).map_err(|e| e.to_string())));
    let r = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("load_from of a FIFO still waits after 10 s");
    let e = r.unwrap_err();
    assert!(
        e.ends_with(
            "cannot read: not a regular file (a device, FIFO, socket or directory is not read)"
        ),
        "{e}"
    );
}

/// An edit changes the file the path names: through a symbolic link it writes the link's
/// file (also a file the link names that does not exist yet), and the link stays a link. A
/// FIFO (as a device would be) is refused and left as it was; nothing is made beside it.
#[test]
fn edits_follow_links_and_replace_only_regular_files() {
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("lib");
    fs::create_dir(&lib).unwrap();
    let real_dir = dir.path().join("real");
    fs::create_dir(&real_dir).unwrap();
    let real = real_dir.join("opencf.toml");
    let link = dir.path().join("link.toml");
    std::os::unix::fs::symlink("real/opencf.toml", &link).unwrap();
    let is_link = |p: &Path| fs::symlink_metadata(p).unwrap().file_type().is_symlink();
    let set = |on: bool| {
        move |c: &mut Config| {
            c.metaslot.enabled = on;
            Ok::<_, ConfigError>(())
        }
    };
    // A dangling link: the file it names is made.
    update(&link, &lib, set(true)).unwrap();
    assert!(is_link(&link));
    assert!(
        load_from(&real).unwrap().metaslot.enabled,
        "the link's file is made"
    );
    update(&link, &lib, set(false)).unwrap();
    assert!(is_link(&link));
    assert!(
        !load_from(&real).unwrap().metaslot.enabled,
        "the link's file changed"
    );
    assert!(
        real_dir.join("opencf.toml.lock").is_file(),
        "the lock is the real file's"
    );
    assert!(!dir.path().join("link.toml.lock").exists());

    let fifo = dir.path().join("fifo.toml");
    mkfifo(&fifo);
    let e = update(&fifo, &lib, set(false)).unwrap_err().to_string();
    assert!(e.contains("is not a regular file"), "{e}");
    use std::os::unix::fs::FileTypeExt;
    assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    assert!(!dir.path().join("fifo.toml.lock").exists());
}
