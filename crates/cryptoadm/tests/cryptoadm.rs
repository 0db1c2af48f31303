//! Runs the built `cryptoadm` binary against configs in temp dirs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_cryptoadm");

struct Env {
    dir: tempfile::TempDir,
    cfg: PathBuf,
    lib: PathBuf,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("etc/opencf.toml");
        let lib = dir.path().join("lib");
        std::fs::create_dir_all(&lib).unwrap();
        Env { dir, cfg, lib }
    }
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.arg("--config").arg(&self.cfg).args(args);
        c.env("OPENCF_LIB_DIR", &self.lib)
            .env("OPENCF_SOFTTOKEN_DIR", self.dir.path().join("keystore"))
            .env_remove("OPENCF_CONF")
            .env_remove("OPENCF_METASLOT_ENABLED")
            .env_remove("OPENCF_METASLOT_KEYSTORE");
        c
    }
    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }
    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "{args:?}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    }
    /// Succeeds without a word on standard error.
    fn quiet(&self, args: &[&str]) {
        let o = self.run(args);
        assert!(
            o.status.success() && o.stderr.is_empty(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.push("--json");
        serde_json::from_str(&self.ok(&a)).unwrap()
    }
    fn code(&self, args: &[&str]) -> (i32, String) {
        let o = self.run(args);
        (
            o.status.code().unwrap(),
            String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout),
        )
    }
    fn names(&self) -> Vec<String> {
        self.json(&["list"])["providers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_string())
            .collect()
    }
    fn policy(&self, name: &str) -> Value {
        let v = self.json(&["list", "-p"]);
        v["providers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()
            .clone()
    }
}

#[test]
fn list_fresh_system_shows_builtin_default() {
    let e = Env::new();
    let v = e.json(&["list"]);
    assert_eq!(v["config"], "built-in default");
    assert_eq!(v["providers"][0]["name"], "softtoken");
    assert_eq!(v["providers"][0]["module"], "libopencf_softtoken.so");
    assert_eq!(
        v["providers"][0]["path"],
        e.lib.join("libopencf_softtoken.so").display().to_string()
    );
    assert_eq!(v["providers"][0]["state"], "enabled");
    assert!(!e.cfg.exists(), "listing must not write");
    // accel is in the default only when present beside the library.
    std::fs::write(e.lib.join("libopencf_accel.so"), b"").unwrap();
    assert_eq!(e.names(), ["accel", "softtoken"]);
    let text = e.ok(&["list"]);
    assert!(
        text.contains("softtoken") && text.contains("built-in default"),
        "{text}"
    );
}

/// The software token built beside this binary: a module that loads (install checks that).
fn softtoken() -> Option<PathBuf> {
    let so = softtoken_dir().map(|d| d.join("libopencf_softtoken.so"));
    if so.is_none() {
        eprintln!("skipped: target/release/libopencf_softtoken.so not built (cargo build --release -p opencf-softtoken)");
    }
    so
}

/// `dir/name` as a symbolic link to `target`.
fn link(dir: &Path, name: &str, target: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    std::os::unix::fs::symlink(target, &p).unwrap();
    p
}

#[test]
fn install_and_uninstall() {
    let Some(so) = softtoken() else { return };
    let e = Env::new();
    let x = e.dir.path().join("x");
    let hsm = link(&x, "libsofthsm2.so", &so);
    let foo = link(&x, "libfoo.so.1", &so);
    e.ok(&["install", &format!("provider={}", hsm.display())]);
    assert!(e.cfg.exists());
    assert_eq!(e.names(), ["softtoken", "softhsm2"]);
    e.ok(&[
        "install",
        &format!("provider={}", foo.display()),
        "name=first",
        "before=softtoken",
    ]);
    assert_eq!(e.names(), ["first", "softtoken", "softhsm2"]);
    let v = e.json(&["list"]);
    assert_eq!(v["config"], e.cfg.display().to_string());
    assert_eq!(v["providers"][0]["module"], foo.display().to_string());
    // Duplicate name, unknown before=: problem, exit 1, file unchanged.
    let before = std::fs::read(&e.cfg).unwrap();
    assert_eq!(
        e.code(&["install", &format!("provider={}", hsm.display())])
            .0,
        1
    );
    assert_eq!(
        e.code(&[
            "install",
            &format!("provider={}", foo.display()),
            "name=b",
            "before=nope"
        ])
        .0,
        1
    );
    assert_eq!(std::fs::read(&e.cfg).unwrap(), before);
    e.ok(&["uninstall", "provider=first"]);
    assert_eq!(e.names(), ["softtoken", "softhsm2"]);
    assert_eq!(e.code(&["uninstall", "provider=first"]).0, 1);
    // Usage errors.
    assert_eq!(e.code(&["install"]).0, 64);
    assert_eq!(e.code(&["install", "module=/x.so"]).0, 64);
    assert_eq!(e.code(&["uninstall"]).0, 64);
    assert_eq!(e.code(&["frobnicate"]).0, 64);
    assert_eq!(e.code(&["list", "-x"]).0, 64);
}

/// Without --config, cryptoadm lists the file the framework reads: a user file, when there is
/// one, for root as for anyone (only read here: nothing is written outside the temp dir).
#[test]
fn list_reads_the_file_the_framework_reads() {
    let e = Env::new();
    let xdg = e.dir.path().join("xdg");
    let user = xdg.join("opencf/opencf.toml");
    std::fs::create_dir_all(user.parent().unwrap()).unwrap();
    std::fs::write(&user, "[metaslot]\nkeystore = \"Mine\"\n[[provider]]\nname = \"mine\"\nmodule = \"/m/libmine.so\"\n").unwrap();
    let o = Command::new(BIN)
        .args(["list", "--json"])
        .env("XDG_CONFIG_HOME", &xdg)
        .env("OPENCF_LIB_DIR", &e.lib)
        .env_remove("OPENCF_CONF")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["config"], user.display().to_string());
    assert_eq!(v["providers"][0]["name"], "mine");
}

#[test]
fn install_refuses_modules_that_do_not_load() {
    let e = Env::new();
    std::fs::write(e.lib.join("libnotp11.so"), b"this is not a shared object").unwrap();
    for module in [
        "/etc/passwd",
        "/nonexistent/libnone.so",
        "libnotp11.so",
        "libnone.so",
    ] {
        let (code, out) = e.code(&["install", &format!("provider={module}"), "name=bad"]);
        assert_eq!(code, 1, "{module}: {out}");
        assert!(out.contains("not installed"), "{module}: {out}");
        assert!(!e.cfg.exists(), "{module}: nothing written");
    }
}

#[test]
fn install_stores_absolute_paths_and_keeps_bare_names() {
    let Some(so) = softtoken() else { return };
    let e = Env::new();
    link(&e.dir.path().join("mods"), "libmine.so", &so);
    let o = e
        .cmd(&["install", "provider=./mods/libmine.so", "name=rel"])
        .current_dir(e.dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let abs = std::fs::canonicalize(e.dir.path())
        .unwrap()
        .join("mods/libmine.so");
    // A bare name is looked up beside the library, where applications find it too.
    link(&e.lib, "libbare.so", &so);
    link(&e.lib, "libopencf_softtoken.so", &so);
    e.ok(&["install", "provider=libbare.so", "name=bare"]);
    let v = e.json(&["list"]);
    let module = |n: &str| {
        v["providers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == n)
            .unwrap()["module"]
            .clone()
    };
    assert_eq!(module("rel"), abs.display().to_string());
    assert_eq!(module("bare"), "libbare.so");
    // Every provider loads from any working directory.
    let o = e.cmd(&["refresh"]).current_dir("/").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
}

#[test]
fn enable_disable_mechanisms_and_random() {
    let e = Env::new();
    e.ok(&[
        "disable",
        "provider=softtoken",
        "mechanism=CKM_ECDSA,CKM_AES_GCM",
    ]);
    let p = e.policy("softtoken");
    assert_eq!(
        p["disabled"],
        serde_json::json!(["CKM_ECDSA", "CKM_AES_GCM"])
    );
    assert_eq!(p["all_enabled"], false);
    let text = e.ok(&["list", "-p"]);
    assert!(text.contains("softtoken: all mechanisms are enabled, except CKM_ECDSA, CKM_AES_GCM. random is enabled."), "{text}");
    assert_eq!(
        e.json(&["list"])["providers"][0]["state"],
        "partially enabled"
    );

    e.ok(&["enable", "provider=softtoken", "mechanism=CKM_ECDSA"]);
    assert_eq!(
        e.policy("softtoken")["disabled"],
        serde_json::json!(["CKM_AES_GCM"])
    );

    e.ok(&["disable", "provider=softtoken", "random"]);
    assert_eq!(e.policy("softtoken")["random"], false);
    assert!(e.ok(&["list", "-p"]).contains("random is disabled."));
    e.ok(&["enable", "provider=softtoken", "random"]);
    assert_eq!(e.policy("softtoken")["random"], true);

    // "all" with blanks around it, as a list's names may have.
    e.ok(&["disable", "provider=softtoken", "mechanism= all "]);
    let p = e.policy("softtoken");
    assert_eq!(p["enabled"], serde_json::json!([]));
    assert_eq!(e.json(&["list"])["providers"][0]["state"], "disabled");
    assert!(e
        .ok(&["list", "-p"])
        .contains("softtoken: all mechanisms are disabled."));
    e.ok(&[
        "enable",
        "provider=softtoken",
        "mechanism=CKM_AES_GCM,0x1082",
    ]);
    assert_eq!(
        e.policy("softtoken")["enabled"],
        serde_json::json!(["CKM_AES_GCM", "CKM_AES_CBC"])
    );
    assert!(e.ok(&["list", "-p"]).contains("softtoken: only these mechanisms are enabled: CKM_AES_GCM, CKM_AES_CBC. random is enabled."));
    e.ok(&["disable", "provider=softtoken", "mechanism=CKM_AES_CBC"]);
    assert_eq!(
        e.policy("softtoken")["enabled"],
        serde_json::json!(["CKM_AES_GCM"])
    );
    e.ok(&["enable", "provider=softtoken", "mechanism=all"]);
    let p = e.policy("softtoken");
    assert_eq!(
        (p["all_enabled"].clone(), p["enabled"].clone()),
        (Value::Bool(true), Value::Null)
    );

    // Errors.
    assert_eq!(
        e.code(&["disable", "provider=softtoken", "mechanism=CKM_NOPE"])
            .0,
        64
    );
    assert_eq!(e.code(&["disable", "provider=softtoken"]).0, 64);
    assert_eq!(e.code(&["disable", "provider=nope", "random"]).0, 1);
    assert_eq!(e.code(&["disable", "mechanism=CKM_AES_GCM"]).0, 64);
}

#[test]
fn policy_thresholds_are_listed() {
    let e = Env::new();
    std::fs::create_dir_all(e.cfg.parent().unwrap()).unwrap();
    std::fs::write(&e.cfg, "[[provider]]\nname='accel'\nmodule='libx.so'\n[provider.policy.CKM_AES_GCM]\nmin_bytes=4096\n").unwrap();
    assert_eq!(
        e.policy("accel")["policy"]["CKM_AES_GCM"]["min_bytes"],
        4096
    );
    assert!(e
        .ok(&["list", "-p"])
        .contains("CKM_AES_GCM is used for data of at least 4096 bytes."));
    // Edits keep the policy.
    e.ok(&["disable", "provider=accel", "random"]);
    assert_eq!(
        e.policy("accel")["policy"]["CKM_AES_GCM"]["min_bytes"],
        4096
    );
}

/// An edit writes the file anew: comments a person wrote in it are not kept, so the file as
/// it was is saved beside it (FILE.bak) and a note on stderr says so. A file with only the
/// header cryptoadm writes gets no note and no copy.
#[test]
fn an_edit_saves_a_file_with_comments_of_its_own() {
    let e = Env::new();
    std::fs::create_dir_all(e.cfg.parent().unwrap()).unwrap();
    let mine = "# SHA-1 stays off: ticket SEC-1234\n[[provider]]\nname='accel'\nmodule='libx.so'\n";
    std::fs::write(&e.cfg, mine).unwrap();
    let (code, out) = e.code(&["disable", "provider=accel", "random"]);
    assert_eq!(code, 0, "{out}");
    let bak = e.cfg.with_extension("toml.bak");
    assert!(
        out.contains("without its 1 comment line(s)") && out.contains(&bak.display().to_string()),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(&bak).unwrap(),
        mine,
        "the file as it was"
    );
    let now = std::fs::read_to_string(&e.cfg).unwrap();
    assert!(
        !now.contains("SEC-1234") && now.contains("cryptoadm rewrites the file"),
        "{now}"
    );
    // The file cryptoadm wrote has no comment of its own: the next edit says nothing.
    std::fs::remove_file(&bak).unwrap();
    e.quiet(&["enable", "provider=accel", "random"]);
    assert!(
        !bak.exists(),
        "no copy of a file without comments of its own"
    );
}

#[test]
fn metaslot_settings() {
    let e = Env::new();
    let v = e.json(&["list", "metaslot"]);
    assert_eq!(
        (
            v["enabled"].clone(),
            v["keystore"].clone(),
            v["auto_key_migrate"].clone()
        ),
        (
            Value::Bool(true),
            Value::from("OpenCF Softtoken"),
            Value::Bool(true)
        )
    );
    e.ok(&["disable", "metaslot"]);
    assert_eq!(e.json(&["list", "metaslot"])["enabled"], false);
    assert!(e.ok(&["list", "metaslot"]).contains("Status: disabled"));
    e.ok(&["enable", "metaslot"]);
    e.ok(&["disable", "metaslot", "auto-key-migrate"]);
    let v = e.json(&["list", "metaslot"]);
    assert_eq!(
        (v["enabled"].clone(), v["auto_key_migrate"].clone()),
        (Value::Bool(true), Value::Bool(false))
    );
    // A label that no provider has now is kept, with a warning (the token may come later).
    let o = e.run(&[
        "enable",
        "metaslot",
        "token=My HSM Token",
        "auto-key-migrate",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("warning: no configured provider has a token labelled \"My HSM Token\""),
        "{err}"
    );
    let v = e.json(&["list", "metaslot"]);
    assert_eq!(
        (v["keystore"].clone(), v["auto_key_migrate"].clone()),
        (Value::from("My HSM Token"), Value::Bool(true))
    );
    assert!(e
        .ok(&["list", "metaslot"])
        .contains("Keystore token: My HSM Token"));
    assert_eq!(e.code(&["disable", "metaslot", "token=x"]).0, 64);
    assert_eq!(e.code(&["enable", "metaslot", "bogus"]).0, 64);
    // A blank value is no value (the configuration refuses a blank label or name): refused
    // before anything is written, and the file still reads.
    let before = std::fs::read(&e.cfg).unwrap();
    let (code, out) = e.code(&["enable", "metaslot", "token=   "]);
    assert_eq!(
        (code, out.trim()),
        (64, "cryptoadm: \"token=\" needs a value")
    );
    let (code, out) = e.code(&["install", "provider=libx.so", "name= "]);
    assert_eq!(
        (code, out.trim()),
        (64, "cryptoadm: \"name=\" needs a value")
    );
    assert_eq!(std::fs::read(&e.cfg).unwrap(), before);
    e.ok(&["list"]);
    // Install after metaslot edits keeps the default providers.
    assert_eq!(e.names(), ["softtoken"]);
}

#[test]
fn unparsable_config_exits_2_everywhere() {
    let e = Env::new();
    std::fs::create_dir_all(e.cfg.parent().unwrap()).unwrap();
    for (text, line, needle) in [
        ("[metaslot]\nenabled = true\nkeystore = \"x\n", 3, ""),
        (
            "[[provider]]\nname='a'\nmodule='b'\ncolour=1\n",
            4,
            "colour",
        ),
        (
            "[[provider]]\nname='a'\nmodule='b'\ndisabled=['CKM_NOPE']\n",
            4,
            "CKM_NOPE",
        ),
        (
            "[[provider]]\nname='a'\nmodule='b'\n[[provider]]\nname='a'\nmodule='c'\n",
            5,
            "duplicate",
        ),
    ] {
        std::fs::write(&e.cfg, text).unwrap();
        for args in [
            &["list"][..],
            &["list", "-p"],
            &["list", "-m"],
            &["list", "-v"],
            &["list", "metaslot"],
            &["list", "--json"],
            &["install", "provider=/x/liby.so"],
            &["uninstall", "provider=a"],
            &["enable", "metaslot"],
            &["disable", "provider=a", "random"],
            &["refresh"],
        ] {
            let (code, out) = e.code(args);
            assert_eq!(code, 2, "{args:?} {out}");
            let want = format!("{}:{line}: ", e.cfg.display());
            assert!(
                out.contains(&want) && out.contains(needle),
                "{args:?}: {out}"
            );
        }
        assert_eq!(
            std::fs::read_to_string(&e.cfg).unwrap(),
            text,
            "file untouched"
        );
    }
}

/// A module built here whose `C_GetFunctionList` runs `body` (C).
fn c_module(e: &Env, name: &str, body: &str) -> PathBuf {
    let src = e.dir.path().join(format!("{name}.c"));
    std::fs::write(
        &src,
        format!(
            "#include <unistd.h>\n\
             unsigned long C_GetFunctionList(void **list) {{ (void)list; {body} return 5; }}\n"
        ),
    )
    .unwrap();
    let so = e.lib.join(format!("lib{name}.so"));
    let st = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&src)
        .status()
        .expect("cc");
    assert!(st.success(), "cc {}", src.display());
    so
}

/// A module that crashes or hangs when it is loaded is a problem of that provider: `install`
/// refuses it and `refresh` names it, while cryptoadm goes on (each module is loaded in a
/// process of its own, stopped after `$CRYPTOADM_PROBE_TIMEOUT` seconds).
#[test]
fn a_module_that_crashes_or_hangs_is_reported() {
    let e = Env::new();
    let crash = c_module(&e, "crash", "*(volatile int *)0 = 1;");
    let hang = c_module(&e, "hang", "for (;;) pause();");
    let (code, out) = e.code(&["install", &format!("provider={}", crash.display())]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "not installed: the module crashed the process that loaded it (signal 11, SIGSEGV)"
        ),
        "{out}"
    );
    // Exit code and output of a command whose module loads are stopped after 1 s.
    let within_1s = |args: &[&str]| {
        let o = e
            .cmd(args)
            .env("CRYPTOADM_PROBE_TIMEOUT", "1")
            .output()
            .unwrap();
        let out =
            String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout);
        (o.status.code(), out)
    };
    let (code, err) = within_1s(&["install", &format!("provider={}", hang.display())]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("not installed: the module did not answer within 1 s"),
        "{err}"
    );
    assert!(!e.cfg.exists(), "nothing installed");

    std::fs::create_dir_all(e.cfg.parent().unwrap()).unwrap();
    std::fs::write(
        &e.cfg,
        format!(
            "[metaslot]\nenabled = false\n[[provider]]\nname='crash'\nmodule='{}'\n\
             [[provider]]\nname='hang'\nmodule='{}'\n",
            crash.display(),
            hang.display()
        ),
    )
    .unwrap();
    let (code, out) = within_1s(&["refresh"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("provider \"crash\": the module crashed the process that loaded it")
            && out.contains("provider \"hang\": the module did not answer within 1 s"),
        "{out}"
    );
    // A limit past what a timer holds (1e300 s) is cut to a day, not a panic: the crashing
    // module alone is still reported at once. A fraction of a second is shown as it is.
    std::fs::write(
        &e.cfg,
        format!(
            "[metaslot]\nenabled = false\n[[provider]]\nname='crash'\nmodule='{}'\n",
            crash.display()
        ),
    )
    .unwrap();
    let o = e
        .cmd(&["refresh"])
        .env("CRYPTOADM_PROBE_TIMEOUT", "1e300")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("provider \"crash\": the module crashed") && !out.contains("panicked"),
        "{out}"
    );
    let (code, err) = {
        let o = e
            .cmd(&["install", &format!("provider={}", hang.display())])
            .env("CRYPTOADM_PROBE_TIMEOUT", "0.5")
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("did not answer within 0.5 s"), "{err}");
}

#[test]
fn refresh_reports_problems() {
    let e = Env::new();
    std::fs::create_dir_all(e.cfg.parent().unwrap()).unwrap();
    std::fs::write(e.lib.join("libnotp11.so"), b"this is not a shared object").unwrap();
    std::fs::write(&e.cfg, "[[provider]]\nname='missing'\nmodule='/nonexistent/libnone.so'\n[[provider]]\nname='bogus'\nmodule='libnotp11.so'\n").unwrap();
    let (code, out) = e.code(&["refresh"]);
    assert_eq!(code, 1, "{out}");
    let lines: Vec<_> = out.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("provider \"missing\": ")
                && l.contains("/nonexistent/libnone.so")),
        "{out}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("provider \"bogus\": ") && l.contains("libnotp11.so")),
        "{out}"
    );
    let o = e.run(&["refresh", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["providers"][0]["ok"], false);
    // Two modules, and the metaslot's keystore token, which neither provides.
    let problems = v["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 3, "{v}");
    assert!(problems[2]
        .as_str()
        .unwrap()
        .starts_with("metaslot keystore token \"OpenCF Softtoken\" not found"));
    // Listings that load the modules report the problem with status 1 too.
    for args in [
        &["list", "-m"][..],
        &["list", "-v"],
        &["list", "-m", "--json"],
    ] {
        let (code, out) = e.code(args);
        assert_eq!(code, 1, "{args:?}: {out}");
        assert!(out.contains("libnone.so"), "{args:?}: {out}");
    }
}

fn softtoken_dir() -> Option<PathBuf> {
    // target/<profile>/cryptoadm → target/release/libopencf_softtoken.so
    let target = Path::new(BIN).parent()?.parent()?;
    let so = target.join("release/libopencf_softtoken.so");
    so.exists().then(|| target.join("release"))
}

#[test]
fn refresh_and_list_m_with_softtoken() {
    let Some(rel) = softtoken_dir() else {
        eprintln!("skipped: target/release/libopencf_softtoken.so not built (cargo build --release -p opencf-softtoken)");
        return;
    };
    let e = Env::new();
    let store = e.dir.path().join("softtoken");
    std::fs::create_dir_all(&store).unwrap();
    let so = rel.join("libopencf_softtoken.so");
    e.ok(&[
        "install",
        &format!("provider={}", so.display()),
        "name=soft",
    ]);
    e.ok(&["uninstall", "provider=softtoken"]);
    e.ok(&["disable", "provider=soft", "mechanism=CKM_ECDSA"]);
    // A keystore label that a provider has: no warning.
    let o = e
        .cmd(&["enable", "metaslot", "token=OpenCF Softtoken"])
        .env("OPENCF_SOFTTOKEN_DIR", &store)
        .output()
        .unwrap();
    assert!(
        o.status.success() && o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let run = |args: &[&str]| {
        let o = e
            .cmd(args)
            .env("OPENCF_SOFTTOKEN_DIR", &store)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    assert!(run(&["refresh"]).contains("1 provider(s) OK"));
    let v: Value = serde_json::from_str(&run(&["list", "-m", "--json"])).unwrap();
    let p = &v["providers"][0];
    assert_eq!(p["errors"], serde_json::json!([]));
    let mechs = p["slots"][0]["mechanisms"].as_array().unwrap();
    let find = |n: &str| {
        mechs
            .iter()
            .find(|m| m["name"] == n)
            .unwrap_or_else(|| panic!("{n} missing"))
    };
    assert_eq!(find("CKM_AES_GCM")["enabled"], true);
    assert_eq!(find("CKM_ECDSA")["enabled"], false);
    let text = run(&["list", "-m"]);
    assert!(
        text.lines()
            .any(|l| l.contains("CKM_ECDSA") && l.contains("disabled by policy")),
        "{text}"
    );
    let v: Value = serde_json::from_str(&run(&["list", "-v", "--json"])).unwrap();
    let s = &v["providers"][0]["slots"][0];
    assert!(s["token"]["label"].is_string());
    let rsa = s["mechanisms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "CKM_RSA_PKCS_KEY_PAIR_GEN")
        .unwrap();
    assert!(rsa["max_key_size"].as_u64().unwrap() >= 2048);
    assert!(rsa["flags"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "GENERATE_KEY_PAIR"));
    let text = run(&["list", "-v"]);
    assert!(
        text.contains("Token:") && text.contains("GENERATE_KEY_PAIR"),
        "{text}"
    );
}

#[test]
fn list_m_with_softhsm() {
    let so = Path::new("/usr/lib/softhsm/libsofthsm2.so");
    if !so.exists() {
        eprintln!("skipped: {} not installed", so.display());
        return;
    }
    let e = Env::new();
    let tokdir = e.dir.path().join("tokens");
    std::fs::create_dir_all(&tokdir).unwrap();
    let conf = e.dir.path().join("softhsm2.conf");
    std::fs::write(
        &conf,
        format!(
            "directories.tokendir = {}\nobjectstore.backend = file\n",
            tokdir.display()
        ),
    )
    .unwrap();
    e.ok(&[
        "install",
        "provider=/usr/lib/softhsm/libsofthsm2.so",
        "name=softhsm",
    ]);
    e.ok(&[
        "disable",
        "provider=softhsm",
        "mechanism=CKM_RSA_PKCS_KEY_PAIR_GEN",
    ]);
    let o = e
        .cmd(&["list", "-m", "provider=softhsm", "--json"])
        .env("SOFTHSM2_CONF", &conf)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let p = &v["providers"][0];
    assert_eq!(p["name"], "softhsm");
    let mechs = p["slots"][0]["mechanisms"].as_array().unwrap();
    assert!(mechs
        .iter()
        .any(|m| m["name"] == "CKM_AES_CBC" && m["enabled"] == true));
    assert!(mechs
        .iter()
        .any(|m| m["name"] == "CKM_RSA_PKCS_KEY_PAIR_GEN" && m["enabled"] == false));
    let o = e
        .cmd(&["refresh"])
        .env("SOFTHSM2_CONF", &conf)
        .env("OPENCF_SOFTTOKEN_DIR", e.dir.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains("softhsm\":"), "{out}");
}

#[test]
fn concurrent_writers_never_tear_the_file() {
    let Some(so) = softtoken() else { return };
    let e = Env::new();
    e.ok(&[
        "install",
        &format!("provider={}", so.display()),
        "name=base",
    ]);
    let children: Vec<_> = (0..8)
        .map(|i| {
            let cfg = e.cfg.clone();
            let lib = e.lib.clone();
            let (so, store) = (so.clone(), e.dir.path().join("keystore"));
            std::thread::spawn(move || {
                for round in 0..6 {
                    let args: Vec<String> = match (i + round) % 4 {
                        0 => vec![
                            "install".into(),
                            format!("provider={}", so.display()),
                            format!("name=p{i}-{round}"),
                        ],
                        1 => vec![
                            "disable".into(),
                            "provider=base".into(),
                            format!("mechanism=CKM_AES_GCM,CKM_SHA256"),
                            "random".into(),
                        ],
                        2 => vec![
                            "enable".into(),
                            "provider=base".into(),
                            "mechanism=all".into(),
                            "random".into(),
                        ],
                        _ => vec![
                            "disable".into(),
                            "metaslot".into(),
                            "auto-key-migrate".into(),
                        ],
                    };
                    let o = Command::new(BIN)
                        .arg("--config")
                        .arg(&cfg)
                        .args(&args)
                        .env("OPENCF_LIB_DIR", &lib)
                        .env("OPENCF_SOFTTOKEN_DIR", &store)
                        .output()
                        .unwrap();
                    assert!(
                        o.status.success(),
                        "{args:?}: {}",
                        String::from_utf8_lossy(&o.stderr)
                    );
                    // Readers never see a torn file.
                    let text = std::fs::read_to_string(&cfg).unwrap();
                    assert!(text.parse::<toml_check::Doc>().is_ok(), "torn:\n{text}");
                }
            })
        })
        .collect();
    for c in children {
        c.join().unwrap();
    }
    let names = e.names();
    // softtoken + base + every install (one in four rounds per process), none lost.
    let installs = (0..8)
        .flat_map(|i| (0..6).filter(move |r| (i + r) % 4 == 0))
        .count();
    assert_eq!(names.len(), 2 + installs, "{names:?}");
    let (code, out) = e.code(&["list", "-p"]);
    assert_eq!(code, 0, "{out}");
    let left: Vec<_> = std::fs::read_dir(e.cfg.parent().unwrap())
        .unwrap()
        .map(|d| d.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(left.iter().all(|n| !n.contains(".tmp.")), "{left:?}");
}

/// Parses via the binary's own parser: `list` succeeds only on a valid file.
mod toml_check {
    pub struct Doc;
    impl std::str::FromStr for Doc {
        type Err = String;
        fn from_str(s: &str) -> Result<Doc, String> {
            let dir = tempfile::tempdir().unwrap();
            let f = dir.path().join("c.toml");
            std::fs::write(&f, s).unwrap();
            let o = std::process::Command::new(super::BIN)
                .arg("--config")
                .arg(&f)
                .arg("list")
                .output()
                .unwrap();
            if o.status.success() {
                Ok(Doc)
            } else {
                Err(String::from_utf8_lossy(&o.stderr).into_owned())
            }
        }
    }
}

/// The metaslot's keystore token: `refresh` reports it missing (the framework's C_Initialize
/// fails without it), and `uninstall` refuses to remove the only provider that has it unless
/// forced, then warns.
#[test]
fn the_keystore_token_is_checked() {
    let Some(so) = softtoken() else { return };
    let e = Env::new();
    link(&e.lib, "libopencf_softtoken.so", &so);
    let (code, out) = e.code(&["refresh"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("1 provider(s) OK"), "{out}");

    // The only holder: refused, nothing written.
    let (code, out) = e.code(&["uninstall", "provider=softtoken"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("keystore token \"OpenCF Softtoken\"") && out.contains("--force"),
        "{out}"
    );
    assert!(!e.cfg.exists(), "a refused uninstall writes nothing");

    // Forced: removed, with the warning of `enable metaslot token=`.
    let o = e.run(&["uninstall", "--force", "provider=softtoken"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("warning: no configured provider has a token labelled \"OpenCF Softtoken\""),
        "{err}"
    );
    assert!(e.names().is_empty());

    // Back, under another name; a second holder makes the first one removable.
    e.ok(&["install", "provider=libopencf_softtoken.so", "name=soft"]);
    assert_eq!(e.code(&["refresh"]).0, 0);
    e.ok(&["install", "provider=libopencf_softtoken.so", "name=soft2"]);
    e.quiet(&["uninstall", "provider=soft"]);

    // A keystore label that no provider has: refresh says so, exit 1.
    e.ok(&["enable", "metaslot", "token=Elsewhere"]);
    let (code, out) = e.code(&["refresh"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("metaslot keystore token \"Elsewhere\" not found in any provider"),
        "{out}"
    );
    assert!(!out.contains("provider(s) OK"), "{out}");
    let o = e.run(&["refresh", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["problems"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["providers"][0]["ok"], true, "{v}");

    // The environment's overrides count as the framework applies them: a keystore label
    // that no provider has, a metaslot turned off, a value the framework refuses.
    e.ok(&["enable", "metaslot", "token=OpenCF Softtoken"]);
    let with = |var: &str, value: &str, args: &[&str]| {
        let o = e.cmd(args).env(var, value).output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        (o.status.code().unwrap(), out)
    };
    let (code, out) = with("OPENCF_METASLOT_KEYSTORE", "Elsewhere", &["refresh"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "environment: OPENCF_METASLOT_KEYSTORE makes \"Elsewhere\" the keystore token \
             (the file names \"OpenCF Softtoken\")"
        ) && out.contains("metaslot keystore token \"Elsewhere\" not found in any provider"),
        "{out}"
    );
    let (code, out) = with(
        "OPENCF_METASLOT_KEYSTORE",
        "Elsewhere",
        &["refresh", "--json"],
    );
    assert_eq!(code, 1, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["environment"].as_array().unwrap().len(), 1, "{v}");
    let (code, out) = with("OPENCF_METASLOT_ENABLED", "no", &["refresh"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("environment: OPENCF_METASLOT_ENABLED turns the metaslot off"),
        "{out}"
    );
    let (code, out) = with("OPENCF_METASLOT_ENABLED", "maybe", &["refresh"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("OPENCF_METASLOT_ENABLED: invalid value \"maybe\"")
            && out.contains("applications started with this environment fail C_Initialize"),
        "{out}"
    );

    // With the metaslot disabled the keystore is not needed: no problem, no refusal.
    e.ok(&["enable", "metaslot", "token=OpenCF Softtoken"]);
    e.ok(&["disable", "metaslot"]);
    e.ok(&["enable", "metaslot", "token=Elsewhere"]);
    assert_eq!(e.code(&["refresh"]).0, 0);
    e.ok(&["enable", "metaslot", "token=OpenCF Softtoken"]);
    e.quiet(&["uninstall", "provider=soft2"]);
    // Turning the metaslot on without its keystore warns as well.
    let o = e.run(&["enable", "metaslot"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("warning: no configured provider has a token"),
        "{err}"
    );
}

/// A configuration file that does not exist: the framework refuses to start when
/// $OPENCF_CONF names it, and listings say so; a file named only with --config is shown as
/// the built-in default a first edit starts from. Edits create the file.
#[test]
fn a_missing_config_file_is_reported() {
    let e = Env::new();
    let home = e.dir.path().join("home");
    let envs = |c: &mut Command| {
        c.env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"));
    };
    let code = |c: &mut Command| {
        envs(c);
        let o = c.output().unwrap();
        (
            o.status.code().unwrap(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };

    // --config only: not the framework's file.
    let (c, out, err) = code(&mut e.cmd(&["list"]));
    assert_eq!(c, 0, "{out}{err}");
    let want = format!("built-in default (no file at {})", e.cfg.display());
    assert!(out.contains(&format!("Configuration: {want}\n")), "{out}");
    assert!(err.is_empty(), "{err}");
    if let Some(so) = softtoken() {
        link(&e.lib, "libopencf_softtoken.so", &so);
        let (c, out, err) = code(&mut e.cmd(&["refresh"]));
        assert_eq!(c, 0, "{out}{err}");
        assert!(out.contains(&format!("{want}: 1 provider(s) OK")), "{out}");
    }
    let (c, out, _) = code(&mut e.cmd(&["list", "--json"]));
    assert_eq!(c, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["config"], "built-in default");
    assert_eq!(v["missing"]["path"], e.cfg.display().to_string());
    assert_eq!(v["missing"]["framework_refuses"], false);

    // $OPENCF_CONF names it, with --config the same file or without --config.
    let framework = |args: &[&str], with_option: bool| {
        let mut c = if with_option {
            e.cmd(args)
        } else {
            let mut c = Command::new(BIN);
            c.args(args).env("OPENCF_LIB_DIR", &e.lib);
            c
        };
        c.env("OPENCF_CONF", &e.cfg);
        code(&mut c)
    };
    for with_option in [true, false] {
        let (c, out, err) = framework(&["refresh"], with_option);
        assert_eq!(c, 1, "{out}{err}");
        assert!(
            out.contains(&format!(
                "{} (named by OPENCF_CONF) does not exist: the framework refuses to start",
                e.cfg.display()
            )),
            "{out}"
        );
        assert!(!out.contains("OK"), "{out}");
        let (c, out, _) = framework(&["refresh", "--json"], with_option);
        assert_eq!(c, 1);
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["problems"].as_array().unwrap().len(), 1, "{v}");
        assert_eq!(v["missing"]["framework_refuses"], true, "{v}");
        for args in [&["list"][..], &["list", "-p"], &["list", "metaslot"]] {
            let (c, out, err) = framework(args, with_option);
            assert_eq!(c, 0, "{args:?}: {out}{err}");
            assert!(
                err.contains("warning: OPENCF_CONF names")
                    && err.contains("the framework refuses to start"),
                "{args:?}: {err}"
            );
        }
        let (_, out, _) = framework(&["list"], with_option);
        assert!(
            out.contains("Configuration: ") && out.contains("the framework refuses to start"),
            "{out}"
        );
        let (_, out, _) = framework(&["list", "metaslot"], with_option);
        assert!(
            out.contains("Source: ") && out.contains("the framework refuses to start"),
            "{out}"
        );
    }
    assert!(!e.cfg.exists(), "listings write nothing");

    // An edit creates the file; from then on it is listed as it is.
    let (c, out, err) = framework(&["disable", "metaslot", "auto-key-migrate"], false);
    assert_eq!(c, 0, "{out}{err}");
    assert!(e.cfg.exists());
    let (c, out, err) = framework(&["list"], false);
    assert_eq!(c, 0, "{out}{err}");
    assert!(
        out.contains(&format!("Configuration: {}", e.cfg.display())) && err.is_empty(),
        "{out}{err}"
    );
}
