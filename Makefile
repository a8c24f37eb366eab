# Every target installs what it needs first, so each works on a fresh machine.
# It installs into the Python that $(PYTHON) names: activate a virtual environment first
# (python3 -m venv .venv && . .venv/bin/activate), or pass PYTHON=/path/to/python.
PYTHON ?= python3

# A reminder, not a refusal: CI and containers install into their own Python on purpose.
VENV_NOTE = $(PYTHON) -c "import sys; sys.prefix != sys.base_prefix or print('note: installing into', \
	sys.prefix, '(not a virtual environment; see the README, Install)', file=sys.stderr)"

.PHONY: install install-run dev inplace test test-python test-rust run bench report lint wheel

install:  ## build the release extension and install it with the test dependencies
	@$(VENV_NOTE)
	$(PYTHON) -m pip install ".[test]"

install-run:  ## build the release extension and install it with what running needs (NumPy) only
	@$(VENV_NOTE)
	$(PYTHON) -m pip install .

dev:  ## editable install for development (release profile, see pyproject.toml)
	@$(VENV_NOTE)
	$(PYTHON) -m pip install -e ".[test]"

inplace:  ## build the extension into python/seqbalance for PYTHONPATH=python runs (quick profile; no install)
	cargo build --profile quick --lib
	cp target/quick/libseqbalance.so python/seqbalance/_native.abi3.so

test: install test-python test-rust  ## the whole test suite: Python (benchmarks disabled) and Rust

test-python:
	$(PYTHON) -m pytest -q

test-rust:
	cargo test --workspace

run: install-run  ## the main job on the built-in synthetic batch
	$(PYTHON) -m seqbalance

bench: install  ## pytest-benchmark: native against the reference
	$(PYTHON) -m pytest benches --benchmark-enable --benchmark-columns=min,median,rounds -q

report: install  ## the benchmark report (terminal table + bench-report.json)
	$(PYTHON) benches/report.py

lint:
	$(PYTHON) -m pip install ".[dev]"
	ruff check python tests benches
	ruff format --check python tests benches
	$(PYTHON) -m mypy
	$(PYTHON) -m mypy.stubtest seqbalance._native
	cargo fmt --check
	cargo clippy --workspace --all-targets -- -D warnings

wheel:  ## a manylinux_2_28 wheel for this machine's CPU in dist/ (see the README, Wheels for a cluster)
	$(PYTHON) -m pip install "maturin>=1.9.4,<2" "ziglang>=0.11"
	$(PYTHON) -m maturin build --release --compatibility manylinux_2_28 --zig --out dist
