# Every target installs what it needs first, so each works on a fresh machine.
# It installs into the Python that $(PYTHON) names: activate a virtual environment first
# (python3 -m venv .venv && . .venv/bin/activate), or pass PYTHON=/path/to/python.
PYTHON ?= python3

# A reminder, not a refusal: CI and containers install into their own Python on purpose.
VENV_NOTE = $(PYTHON) -c "import sys; sys.prefix != sys.base_prefix or print('note: installing into', \
	sys.prefix, '(not a virtual environment; see the README, Install)', file=sys.stderr)"

# Two wheels, each built once per change of the sources (pip fetches maturin for the build) into a
# folder of its own, so no other wheel (make wheel's, a maturin build of yours in dist/) is ever
# picked up by mistake: the release wheel (install-run, local-wheel; what make wheel builds too),
# and the test build that install, test, lint, docs and test-integrations install: the same
# release profile with the cargo feature `test-hooks`, which adds the tests' entry points
# (_native._purge_delay, _input_reads, _internal_error_check and the read counter). The release
# wheel has none of them.
LOCAL_WHEEL_DIR := target/local-wheel
LOCAL_WHEEL_STAMP := $(LOCAL_WHEEL_DIR)/.built
LOCAL_WHEEL = $(wildcard $(LOCAL_WHEEL_DIR)/seqbalance-*.whl)
TEST_WHEEL_DIR := target/test-wheel
TEST_WHEEL_STAMP := $(TEST_WHEEL_DIR)/.built
TEST_WHEEL = $(wildcard $(TEST_WHEEL_DIR)/seqbalance-*.whl)
# The cargo features of the test build (maturin's PEP 517 backend reads MATURIN_PEP517_ARGS).
TEST_FEATURES := test-hooks
# What goes into the wheel; a change to any of these rebuilds it (cargo itself only recompiles
# what changed).
WHEEL_SOURCES := $(shell find rust python -type f \( -name '*.rs' -o -name '*.py' -o -name '*.pyi' \
	-o -name 'Cargo.toml' -o -name 'py.typed' \) 2>/dev/null) \
	Cargo.toml Cargo.lock build.rs pyproject.toml README.md LICENSE

# The integration job's own virtual environment (torch, Ray, verl, TransferQueue: a few GB).
INTEGRATION_VENV ?= .venv-integration
INTEGRATION_PYTHON := $(INTEGRATION_VENV)/bin/python
# Seconds an integration test may run before pytest-timeout stops it (Ray start-up included).
INTEGRATION_TIMEOUT ?= 600

.PHONY: install install-run dev inplace test test-suites test-python test-rust run bench report lint docs \
	wheel local-wheel test-integrations integration-venv

$(LOCAL_WHEEL_STAMP): $(WHEEL_SOURCES)
	@echo "== building the release wheel into $(LOCAL_WHEEL_DIR)/ (fat LTO: the first build takes" \
		"about a minute on 2 idle cores; later ones only recompile what changed) =="
	@rm -rf $(LOCAL_WHEEL_DIR)
	env -u MATURIN_PEP517_ARGS $(PYTHON) -m pip wheel --no-deps --wheel-dir $(LOCAL_WHEEL_DIR) .
	@touch $@

$(TEST_WHEEL_STAMP): $(WHEEL_SOURCES)
	@echo "== building the test build (release profile, features $(TEST_FEATURES)) into" \
		"$(TEST_WHEEL_DIR)/ (fat LTO: about a minute on 2 idle cores) =="
	@rm -rf $(TEST_WHEEL_DIR)
	MATURIN_PEP517_ARGS="--features $(TEST_FEATURES)" \
		$(PYTHON) -m pip wheel --no-deps --wheel-dir $(TEST_WHEEL_DIR) .
	@touch $@

local-wheel: $(LOCAL_WHEEL_STAMP)  ## the release wheel in target/local-wheel/ (rebuilt when a source changes)

# A comma inside $(call ...) would split its argument: extras lists write $(comma).
comma := ,
# pip keeps an installed 0.2.0 when asked to install another 0.2.0: the second line replaces it.
# $(1): the wheel, $(2): its extras.
define install_wheel
	$(PYTHON) -m pip install "$(1)$(2)"
	$(PYTHON) -m pip install --no-deps --force-reinstall "$(1)"
endef

install: $(TEST_WHEEL_STAMP)  ## build the test build (release profile + test hooks) and install it with the test dependencies
	@$(VENV_NOTE)
	$(call install_wheel,$(TEST_WHEEL),[test])

install-run: $(LOCAL_WHEEL_STAMP)  ## build the release extension and install it with what running needs (NumPy) only
	@$(VENV_NOTE)
	$(call install_wheel,$(LOCAL_WHEEL),)

dev:  ## editable install for development (release profile and the test hooks, see pyproject.toml)
	@$(VENV_NOTE)
	MATURIN_PEP517_ARGS="--features $(TEST_FEATURES)" $(PYTHON) -m pip install -e ".[test]"

inplace:  ## build the extension into python/seqbalance for PYTHONPATH=python runs (quick profile and the test hooks; no install)
	cargo build --profile quick --lib --features $(TEST_FEATURES)
	cp target/quick/libseqbalance.so python/seqbalance/_native.abi3.so

# What the banners say each suite takes on 2 cores, idle (the load average the tests' own) and
# loaded (shared with other jobs); the README's Install section gives the full figures.
PYTEST_MINUTES_IDLE := 7.8-9.3
PYTEST_MINUTES_LOADED := 14-17
CARGO_TEST_MINUTES_IDLE := 3
CARGO_TEST_MINUTES_LOADED := 4-6

test: install  ## the whole test suite: Python (benchmarks disabled) and Rust, both run; fails if either fails
	@$(MAKE) --no-print-directory test-suites

# Both suites run whatever the first gives (a failed pytest must not hide the Rust tests, with or
# without make -k); the status is non-zero when either failed, and the last line says which.
test-suites:  ## pytest, then cargo test --workspace, without installing first (make test installs)
	@python_rc=0; rust_rc=0; \
	$(MAKE) --no-print-directory test-python || python_rc=$$?; \
	$(MAKE) --no-print-directory test-rust || rust_rc=$$?; \
	said() { if [ "$$1" -eq 0 ]; then echo passed; else echo failed; fi; }; \
	echo "== make test: pytest $$(said $$python_rc), cargo test $$(said $$rust_rc) =="; \
	[ $$python_rc -eq 0 ] && [ $$rust_rc -eq 0 ]

test-python:
	@echo "== pytest: the Python suite (on 2 cores: about $(PYTEST_MINUTES_IDLE) minutes idle," \
		"$(PYTEST_MINUTES_LOADED) loaded); -rfEs lists failures and why tests were skipped =="
	$(PYTHON) -m pytest -q -rfEs

test-rust:
	@echo "== cargo test --workspace: compiles the test profile, then the property tests (on 2 cores:" \
		"about $(CARGO_TEST_MINUTES_IDLE) minutes idle, $(CARGO_TEST_MINUTES_LOADED) loaded) =="
	cargo test --workspace

run: install-run  ## the main job on the built-in synthetic batch
	$(PYTHON) -m seqbalance

bench: install  ## pytest-benchmark: native against the reference
	$(PYTHON) -m pytest benches --benchmark-enable --benchmark-columns=min,median,rounds -q

report: install  ## the benchmark report (terminal table + bench-report.json)
	$(PYTHON) benches/report.py

lint: $(TEST_WHEEL_STAMP)  ## ruff (check + format), mypy, stubtest, cargo fmt, clippy -D warnings
	$(call install_wheel,$(TEST_WHEEL),[dev])
	$(PYTHON) -m ruff check python tests benches docs/extensions
	$(PYTHON) -m ruff format --check python tests benches docs/extensions
	$(PYTHON) -m mypy
	$(PYTHON) -m mypy.stubtest seqbalance._native --allowlist .ci/stubtest-allowlist.txt \
		--ignore-unused-allowlist
	cargo fmt --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy --workspace --all-targets --features $(TEST_FEATURES) -- -D warnings

# NO_MKDOCS_2_WARNING: Material for MkDocs prints an end-of-life banner on every build; the
# project stays on MkDocs 1.6 and Material 9 (pinned below 2 and 10) until it moves, see
# docs/development.md, so the banner says nothing new. tests/test_site.py then checks the
# built site (examples as code, no Google Fonts, tables within the page).
docs: $(TEST_WHEEL_STAMP)  ## the documentation site in site/ (mkdocs build --strict), then its tests
	$(call install_wheel,$(TEST_WHEEL),[docs$(comma)test])
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict
	SEQBALANCE_SITE=site $(PYTHON) -m pytest -q -rfEs tests/test_site.py

# verl is installed without its dependencies (they include vLLM and CUDA builds): the pinned file
# names what importing the parts seqbalance patches needs, and verl itself comes after it.
integration-venv:
	test -x $(INTEGRATION_PYTHON) || $(PYTHON) -m venv $(INTEGRATION_VENV)
	@echo "== installing the integration dependencies into $(INTEGRATION_VENV) (torch and its CUDA" \
		"libraries: several GB to download) =="
	$(INTEGRATION_PYTHON) -m pip install --quiet --upgrade pip
	$(INTEGRATION_PYTHON) -m pip install -r .ci/requirements-integration.txt
	$(INTEGRATION_PYTHON) -m pip install --no-deps -r .ci/requirements-integration-nodeps.txt

test-integrations: $(TEST_WHEEL_STAMP) integration-venv  ## every `integration` test, none may skip
	$(INTEGRATION_PYTHON) -m pip install --no-deps --force-reinstall "$(TEST_WHEEL)"
	@echo "== pytest -m integration --require-integrations (Ray starts with 2 CPUs; each test" \
		"stops after $(INTEGRATION_TIMEOUT) s) =="
	@rc=0; RAY_USAGE_STATS_ENABLED=0 $(INTEGRATION_PYTHON) -m pytest -q -rfEs -m integration \
		--require-integrations --timeout $(INTEGRATION_TIMEOUT) -p no:randomly || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "error: no test marked 'integration' was collected" >&2; fi; \
	exit $$rc

wheel:  ## a manylinux_2_28 wheel for this machine's CPU in dist/manylinux/ (see the docs, Wheels for a cluster)
	$(PYTHON) -m pip install "maturin>=1.9.4,<2" "ziglang>=0.11"
	$(PYTHON) -m maturin build --release --compatibility manylinux_2_28 --zig --out dist/manylinux
