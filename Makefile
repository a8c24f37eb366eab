# Every target installs what it needs first, so each works on a fresh machine.
PYTHON ?= python3

.PHONY: install dev inplace test test-python test-rust run bench report lint

install:  ## build the release extension and install it with the test dependencies
	$(PYTHON) -m pip install ".[test]"

dev:  ## editable install for development (release profile, see pyproject.toml)
	$(PYTHON) -m pip install -e ".[test]"

inplace:  ## build the extension into python/seqbalance for PYTHONPATH=python runs (quick profile; no install)
	cargo build --profile quick --lib
	cp target/quick/libseqbalance.so python/seqbalance/_native.abi3.so

test: install test-python test-rust  ## the whole test suite: Python (benchmarks disabled) and Rust

test-python:
	$(PYTHON) -m pytest -q

test-rust:
	cargo test --workspace

run: install  ## the main job on the built-in synthetic batch
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
