"""Where the module under test is and how a fresh token is brought into use.

Shared by conftest.py and by token_process.py, which tests run as separate
processes. The module is ours (env MODULE, default
target/release/libopencf_softtoken.so). With SOFTHSM=1 the same tests run
against SoftHSMv2 instead: a check of the tests themselves, in which tests whose
mechanisms SoftHSMv2 lacks are skipped.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import p11ext  # noqa: F401  (registers the extra enum members before any use)
import pkcs11

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODULE = ROOT / "target" / "release" / "libopencf_softtoken.so"
SOFTHSM_MODULE = Path("/usr/lib/softhsm/libsofthsm2.so")

TOKEN_LABEL = "OpenCF Softtoken"
DEFAULT_PIN = "changeme"
SO_PIN = "changeme"
USER_PIN = "opencf-test-pin-1"


def softhsm_mode() -> bool:
    return os.environ.get("SOFTHSM") == "1"


def module_path() -> str:
    if softhsm_mode():
        return os.environ.get("MODULE_SOFTHSM", str(SOFTHSM_MODULE))
    return os.environ.get("MODULE", str(DEFAULT_MODULE))


def prepare_keystore(directory: Path) -> dict[str, str]:
    """Make DIRECTORY a fresh keystore; return the environment that selects it.

    Our module creates its token on first use. SoftHSMv2 needs a config file
    and an initialised token, given the same label and PINs as ours.
    """
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    env = {"OPENCF_SOFTTOKEN_DIR": str(directory)}
    if softhsm_mode():
        tokens = directory / "softhsm-tokens"
        tokens.mkdir(exist_ok=True)
        conf = directory / "softhsm2.conf"
        conf.write_text(f"directories.tokendir = {tokens}\nobjectstore.backend = file\n")
        env["SOFTHSM2_CONF"] = str(conf)
        subprocess.run(
            ["softhsm2-util", "--init-token", "--free", "--label", TOKEN_LABEL,
             "--so-pin", SO_PIN, "--pin", DEFAULT_PIN],
            env={**os.environ, **env}, check=True, capture_output=True,
        )
    return env


def load() -> pkcs11.lib:
    path = module_path()
    if not Path(path).is_file():
        raise FileNotFoundError(f"PKCS#11 module not found: {path} (run 'make build')")
    return pkcs11.lib(path)


def get_token(lib: pkcs11.lib) -> pkcs11.Token:
    return lib.get_token(token_label=TOKEN_LABEL)


def first_login(token: pkcs11.Token) -> pkcs11.Session:
    """Log in with the default PIN, replace it with USER_PIN, return the R/W session."""
    session = token.open(rw=True, user_pin=DEFAULT_PIN)
    session.set_pin(DEFAULT_PIN, USER_PIN)
    return session


def login(token: pkcs11.Token) -> pkcs11.Session:
    return token.open(rw=True, user_pin=USER_PIN)
