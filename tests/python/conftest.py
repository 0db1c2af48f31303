"""Fixtures: a fresh keystore, the module loaded through python-pkcs11, the
default PIN replaced, and an open R/W user session per test.

Environment:
  MODULE    the PKCS#11 module (default target/release/libopencf_softtoken.so)
  SOFTHSM=1 run against SoftHSMv2 instead, skipping what it lacks (a check of
            the tests themselves; our module never skips a mechanism)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import p11ext  # noqa: F401  (extends python-pkcs11's enums; import first)
import pkcs11
import pytest
import token_setup as ts

HERE = Path(__file__).resolve().parent


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "mechanisms(*mechs): mechanisms the test uses; only in SOFTHSM=1 runs is a "
        "test whose mechanisms the token does not list skipped",
    )


def pytest_report_header(config):
    mode = "SoftHSMv2 (check of the tests)" if ts.softhsm_mode() else "OpenCF"
    return [f"PKCS#11 module: {ts.module_path()} [{mode}]",
            f"python-pkcs11 {getattr(pkcs11, '__version__', '')}".rstrip()]


@pytest.fixture(scope="session")
def keystore_env(tmp_path_factory) -> dict[str, str]:
    """A fresh keystore for this test run, selected through the environment."""
    env = ts.prepare_keystore(tmp_path_factory.mktemp("keystore"))
    os.environ.update(env)
    return env


@pytest.fixture(scope="session")
def lib(keystore_env) -> pkcs11.lib:
    return ts.load()


@pytest.fixture(scope="session")
def token(lib) -> pkcs11.Token:
    return ts.get_token(lib)


@pytest.fixture(scope="session")
def user_login(token):
    """The session holding the user login: the default PIN replaced by USER_PIN."""
    session = ts.first_login(token)
    yield session
    session.close()


@pytest.fixture
def session(token, user_login) -> pkcs11.Session:
    """An open R/W session of the logged-in user; its session objects die with it."""
    s = token.open(rw=True)
    yield s
    s.close()


@pytest.fixture(scope="module")
def module_session(token, user_login) -> pkcs11.Session:
    """An R/W session shared by one test file, for keys that are costly to make."""
    s = token.open(rw=True)
    yield s
    s.close()


@pytest.fixture(scope="session")
def mechanisms(token) -> set[int]:
    return {int(m) for m in token.slot.get_mechanisms()}


@pytest.fixture(autouse=True)
def _skip_unlisted_mechanisms_on_softhsm(request):
    marker = request.node.get_closest_marker("mechanisms")
    if marker is None or not ts.softhsm_mode():
        return
    listed = request.getfixturevalue("mechanisms")
    missing = [m for m in marker.args if int(m) not in listed]
    if missing:
        names = ", ".join(getattr(m, "name", hex(int(m))) for m in missing)
        pytest.skip(f"SoftHSMv2 does not list {names}")


@pytest.fixture
def token_process(tmp_path):
    """Run token_process.py ACTION in a new process; returns its JSON answer.

    keystore=None gives the process a fresh keystore of its own under tmp_path.
    """

    def run(action: str, *, keystore: dict[str, str] | None = None, payload=None, timeout=300):
        env = dict(os.environ)
        if keystore is None:
            keystore = ts.prepare_keystore(tmp_path / f"keystore-{action}")
        env.update(keystore)
        env["PYTHONPATH"] = str(HERE) + os.pathsep + env.get("PYTHONPATH", "")
        proc = subprocess.run(
            [sys.executable, str(HERE / "token_process.py"), action],
            input=json.dumps(payload or {}), capture_output=True, text=True,
            env=env, timeout=timeout,
        )
        assert proc.returncode == 0, (
            f"token_process.py {action} exited {proc.returncode}\n"
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
        return json.loads(proc.stdout.strip().splitlines()[-1])

    return run
