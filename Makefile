# OpenCF — build, test and demo entry points.
#
#   make run     build, then demonstrate the software token with pkcs11-tool
#   make test    install test dependencies, build, run every test suite
#   make deps    install system packages, check Rust, create .venv
#   make build   cargo build --release --workspace
#   make test-suites   run the suites without deps and build
#   make fmt     check formatting (make format applies it)
#   make lint    clippy on every target, warnings are errors
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

TEST_SUITES ?= cargo badinput pkcs11-tool python metaslot cryptoadm-softhsm

.PHONY: help deps build test test-suites run fmt format lint clean fuzz $(addprefix suite-,$(TEST_SUITES))

help:
	@sed -n '1,14p' $(firstword $(MAKEFILE_LIST)) | sed 's/^# \{0,1\}//'

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

suite-python:
	$(VENV)/bin/pytest $(PYTEST_ARGS) tests/python

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
