# OpenCF — build, test and demo entry points.
#
#   make run     build, then demonstrate the software token with pkcs11-tool
#   make test    install test dependencies, build, run every test suite
#   make deps    install system packages, check Rust, create .venv
#   make build   cargo build --release --workspace
#   make test-suites   run the suites without deps and build
#   make fmt     check formatting (make format applies it)
#   make lint    clippy on every target, warnings are errors
#   make install       install the built modules, tools, p11-kit module file and the TLS
#                      proxy's systemd unit (PREFIX=/usr/local, DESTDIR for staging;
#                      make uninstall removes them; see docs/INTEGRATION.md)
#   make install-user  register target/release/libopencf.so with p11-kit for this user
#
# A test suite is a target named suite-NAME; `make test` runs every name in
# TEST_SUITES in order, keeps going when one fails, prints a summary and fails
# if any failed. Run a subset with e.g. `make test TEST_SUITES=python`.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

export PATH := $(HOME)/.cargo/bin:$(PATH)

CARGO  ?= cargo
VENV   ?= $(CURDIR)/.venv
MODULE ?= $(CURDIR)/target/release/libopencf_softtoken.so
export MODULE VENV

PYTEST_ARGS ?= -q
FUZZ_SECONDS ?= 60

TEST_SUITES ?= cargo badinput pkcs11-tool python metaslot cryptoadm-softhsm integration pktool cfspeed tlsproxy accel no-engines

.PHONY: help deps build test test-suites run fmt format lint clean fuzz install uninstall install-user uninstall-user $(addprefix suite-,$(TEST_SUITES))

help:
	@sed -n '1,17p' $(firstword $(MAKEFILE_LIST)) | sed 's/^# \{0,1\}//'

deps:
	scripts/install-deps.sh

build:
	$(CARGO) build --release --workspace

run: build
	scripts/demo.sh

test: deps build
	@$(MAKE) test-suites

# Runs the suites only (no deps, no build): every suite runs even when an
# earlier one fails; the last line sums them up.
test-suites:
	@passed=0; failed=0; failed_names=""; \
	for suite in $(TEST_SUITES); do \
		printf '\n=== suite %s ===\n' "$$suite"; \
		start=$$(date +%s); \
		if $(MAKE) suite-$$suite; then \
			passed=$$((passed + 1)); result=PASS; \
		else \
			failed=$$((failed + 1)); failed_names="$$failed_names $$suite"; result=FAIL; \
		fi; \
		printf '=== suite %s: %s (%ss) ===\n' "$$suite" "$$result" "$$(( $$(date +%s) - start ))"; \
	done; \
	echo; \
	if [ $$failed -ne 0 ]; then echo "failed suites:$$failed_names"; fi; \
	echo "suites: $$passed passed, $$failed failed"; \
	[ $$failed -eq 0 ]

# --- test suites -------------------------------------------------------------

suite-cargo:
	$(CARGO) test --release --workspace --no-fail-fast

suite-badinput:
	tests/c/run.sh

# libFuzzer run of the template target (nightly + cargo-fuzz; falls back to the stable
# driver, which suite-cargo also runs over 200,000 inputs).
fuzz:
	tests/fuzz.sh $(FUZZ_SECONDS)

suite-pkcs11-tool:
	tests/consumers/pkcs11-tool.sh

suite-metaslot:
	tests/consumers/metaslot.sh

suite-cryptoadm-softhsm:
	tests/consumers/cryptoadm-softhsm.sh

suite-pktool:
	tests/pktool/run.sh

# RSA Wycheproof through slot 0 with the accelerator first (skips without AVX-512 IFMA).
suite-accel:
	tests/consumers/accel.sh

# The accelerator as on a CPU without AVX-512 IFMA and with one core
# (OPENCF_ACCEL_DISABLE=ifma,bulk: no RSA, ECDSA or bulk engine): every cargo test, the
# metaslot consumers and the accel suite still pass, the engine cases skipping with a
# message and the metaslot routing to the software token (about 3 minutes).
suite-no-engines:
	OPENCF_ACCEL_DISABLE=ifma,bulk $(CARGO) test --release --workspace --no-fail-fast
	OPENCF_ACCEL_DISABLE=ifma,bulk tests/consumers/metaslot.sh
	OPENCF_ACCEL_DISABLE=ifma,bulk tests/consumers/accel.sh

suite-integration:
	tests/integration/run.sh

# cfspeed end to end (about 45 s): default set, SoftHSMv2 side by side, --json, --chart, --multi.
suite-cfspeed:
	tests/cfspeed/run.sh

# opencf-tlsproxy end to end (curl/openssl through the proxy, fallback, reload, robustness).
suite-tlsproxy:
	tests/tlsproxy/run.sh

# TLS handshakes/s and latency, opencf-tlsproxy against nginx (not part of `make test`; see
# docs/PERFORMANCE.md, "TLS proxy vs nginx").
.PHONY: bench-tls
bench-tls:
	$(CARGO) build --release -p opencf-tlsproxy -p opencf -p opencf-softtoken
	scripts/bench-tls.sh

# One 64 MiB AES-GCM encryption through slot 0 beside what copying 64 MiB costs at the same
# moment (not part of `make test`; docs/PERFORMANCE.md, "A ceiling for the 64 MiB encryption").
.PHONY: bench-bulk
bench-bulk: build
	scripts/bench-bulk.sh $(BENCH_BULK_ROUNDS)

suite-python:
	$(VENV)/bin/pytest $(PYTEST_ARGS) tests/python

# --- installation ------------------------------------------------------------
# `make install` copies what `make build` made (it builds nothing). libopencf.so finds
# libopencf_softtoken.so and libopencf_accel.so beside itself, so they go to LIBDIR; the
# tools in BINDIR find it in ../lib. Where p11-kit and systemd look (pkcs11.conf(5),
# systemd.unit(5)): for PREFIX=/usr the packaged directories (/usr/share/p11-kit/modules,
# /usr/lib/systemd/system), for PREFIX=/usr/local the administrator's p11-kit directory
# /etc/pkcs11/modules and systemd's /usr/local/lib/systemd/system, for any other PREFIX
# /etc/pkcs11/modules and /etc/systemd/system. P11KIT_MODULEDIR and SYSTEMD_UNITDIR
# override; DESTDIR stages the whole tree. `make uninstall` removes what `make install`
# wrote (with the same PREFIX, DESTDIR and directories).

PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
LIBDIR  ?= $(PREFIX)/lib
P11KIT_MODULEDIR ?= $(if $(filter /usr,$(PREFIX)),/usr/share/p11-kit/modules,/etc/pkcs11/modules)
SYSTEMD_UNITDIR  ?= $(if $(filter /usr /usr/local,$(PREFIX)),$(PREFIX)/lib/systemd/system,/etc/systemd/system)
RELEASE_DIR := $(CURDIR)/target/release
USER_MODULEDIR ?= $(or $(XDG_CONFIG_HOME),$(HOME)/.config)/pkcs11/modules
INSTALL_LIBS     := libopencf.so libopencf_softtoken.so
INSTALL_LIBS_OPT := libopencf_accel.so
INSTALL_BINS     := cryptoadm
INSTALL_BINS_OPT := cfspeed pktool opencf-tlsproxy tlsproxycfg
TLSPROXY_UNIT    := opencf-tlsproxy@.service

install:
	@for f in $(INSTALL_LIBS) $(INSTALL_BINS); do \
		[ -e "$(RELEASE_DIR)/$$f" ] || { echo "install: $(RELEASE_DIR)/$$f missing: run make build first" >&2; exit 1; }; \
	done
	install -d "$(DESTDIR)$(LIBDIR)" "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(P11KIT_MODULEDIR)"
	install -m 0755 $(addprefix "$(RELEASE_DIR)/,$(addsuffix ",$(INSTALL_LIBS))) "$(DESTDIR)$(LIBDIR)/"
	install -m 0755 $(addprefix "$(RELEASE_DIR)/,$(addsuffix ",$(INSTALL_BINS))) "$(DESTDIR)$(BINDIR)/"
	@for f in $(INSTALL_LIBS_OPT) $(INSTALL_BINS_OPT); do \
		case $$f in *.so) dir="$(DESTDIR)$(LIBDIR)";; *) dir="$(DESTDIR)$(BINDIR)";; esac; \
		if [ -e "$(RELEASE_DIR)/$$f" ]; then install -m 0755 "$(RELEASE_DIR)/$$f" "$$dir/"; echo "installed $$dir/$$f"; \
		else echo "$$f not built: not installed"; fi; \
	done
	sed 's|@LIBDIR@|$(LIBDIR)|' packaging/opencf.module.in >"$(DESTDIR)$(P11KIT_MODULEDIR)/opencf.module"
	chmod 0644 "$(DESTDIR)$(P11KIT_MODULEDIR)/opencf.module"
	@echo "p11-kit module file: $(DESTDIR)$(P11KIT_MODULEDIR)/opencf.module"
	@if [ -e "$(RELEASE_DIR)/opencf-tlsproxy" ]; then \
		install -d "$(DESTDIR)$(SYSTEMD_UNITDIR)" && \
		sed 's|@BINDIR@|$(BINDIR)|g' packaging/$(TLSPROXY_UNIT).in >"$(DESTDIR)$(SYSTEMD_UNITDIR)/$(TLSPROXY_UNIT)" && \
		chmod 0644 "$(DESTDIR)$(SYSTEMD_UNITDIR)/$(TLSPROXY_UNIT)" && \
		echo "systemd unit: $(DESTDIR)$(SYSTEMD_UNITDIR)/$(TLSPROXY_UNIT) (systemctl daemon-reload)"; \
	fi

uninstall:
	rm -f $(addprefix "$(DESTDIR)$(LIBDIR)/,$(addsuffix ",$(INSTALL_LIBS) $(INSTALL_LIBS_OPT)))
	rm -f $(addprefix "$(DESTDIR)$(BINDIR)/,$(addsuffix ",$(INSTALL_BINS) $(INSTALL_BINS_OPT)))
	rm -f "$(DESTDIR)$(P11KIT_MODULEDIR)/opencf.module" "$(DESTDIR)$(SYSTEMD_UNITDIR)/$(TLSPROXY_UNIT)"

install-user:
	@[ -e "$(RELEASE_DIR)/libopencf.so" ] || { echo "install-user: $(RELEASE_DIR)/libopencf.so missing: run make build first" >&2; exit 1; }
	install -d "$(USER_MODULEDIR)"
	sed 's|@LIBDIR@|$(RELEASE_DIR)|' packaging/opencf.module.in >"$(USER_MODULEDIR)/opencf.module"
	@echo "p11-kit module file: $(USER_MODULEDIR)/opencf.module (p11-kit ignores it in programs run as root)"

uninstall-user:
	rm -f "$(USER_MODULEDIR)/opencf.module"

# --- code quality ------------------------------------------------------------

fmt:
	$(CARGO) fmt --all -- --check

format:
	$(CARGO) fmt --all

lint:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
	rm -rf $(VENV)
