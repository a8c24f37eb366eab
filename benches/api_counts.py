"""Counts of how far the public surface agrees with itself (issue 42's before/after figures).

    python benches/api_counts.py            # a table on stdout
    python benches/api_counts.py --json     # the same as one JSON document

It counts, on the installed (or PYTHONPATH) seqbalance:

* retired spellings in public signatures: parameters named as the api-spec's retired spellings
  (``pack_max_length``, ``max_tokens_per_rank``, ``force_group_size``, ``balance_workload``,
  ``as_ids``; ``seqlen_list`` outside the frozen drop-ins; ``values`` in ``balance_report``);
* shared names with more than one default: a parameter name that two public callables take with
  different defaults (the spec's exemptions are listed and not counted);
* regular expressions in ``seqbalance/cli``: lines that use the ``re`` module;
* native calls per public call: how many times each public function calls into ``seqbalance._native``
  for one ordinary call (a drop-in on 1,000 lengths, each planner on the same batch);
* test entry points in the built extension: ``_purge_delay``, ``_input_reads``, ``_internal_error_check``.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import argparse
import functools
import inspect
import json
import sys
import tokenize
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

import seqbalance
from seqbalance import _native

RETIRED = {
    "pack_max_length",
    "max_tokens_per_rank",
    "force_group_size",
    "balance_workload",
    "as_ids",
}
FROZEN = {
    "karmarkar_karp",
    "get_seqlen_balanced_partitions",
    "greedy_partition",
    "log_seqlen_unbalance",
}
# The spec's exemptions from "one default per shared name".
EXEMPT_NAMES = {"hidden_size", "num_layers", "equal_size"}
TEST_ENTRY_POINTS = ("_purge_delay", "_input_reads", "_internal_error_check")
PUBLIC_MODULES = ("seqbalance", "seqbalance.planning", "seqbalance.costs", "seqbalance.samplers")


def public_callables() -> Iterator[tuple[str, Callable[..., Any]]]:
    """Every public callable of the public modules (classes through their constructor), once each."""
    seen: set[int] = set()
    for module_name in PUBLIC_MODULES:
        module = __import__(module_name, fromlist=["_"])
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name, None)
            if obj is None or not callable(obj) or id(obj) in seen:
                continue
            seen.add(id(obj))
            yield name, obj


def signature(obj: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        return None


def retired_spellings() -> list[str]:
    found = []
    for name, obj in public_callables():
        sig = signature(obj)
        if sig is None:
            continue
        for parameter in sig.parameters:
            if parameter in RETIRED:
                found.append(f"{name}({parameter}=)")
            elif parameter == "seqlen_list" and name not in FROZEN:
                found.append(f"{name}({parameter}=)")
            elif parameter == "values" and name == "balance_report":
                found.append(f"{name}({parameter}=)")
    return sorted(found)


def defaults_per_name() -> dict[str, list[str]]:
    defaults: dict[str, dict[str, set[str]]] = {}
    for name, obj in public_callables():
        if name in FROZEN:
            continue
        sig = signature(obj)
        if sig is None:
            continue
        for parameter in sig.parameters.values():
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                continue
            if parameter.name in EXEMPT_NAMES or parameter.name == "self":
                continue
            if parameter.default is parameter.empty:
                continue  # required-or-not may differ
            default = repr(parameter.default)
            if (
                parameter.name == "cost"
                and parameter.default is None
                and name in {"partition_ids", "install"}
            ):
                continue  # cost=None means "the values themselves" / "none installed" there
            defaults.setdefault(parameter.name, {}).setdefault(default, set()).add(name)
    return {
        parameter: [f"{d} ({', '.join(sorted(users))})" for d, users in sorted(by_default.items())]
        for parameter, by_default in sorted(defaults.items())
        if len(by_default) > 1
    }


def cli_regexes() -> tuple[int, int, int]:
    """(lines calling the re module, raw-string pattern literals, files importing re) in seqbalance/cli."""
    cli = Path(seqbalance.__file__).parent / "cli"
    lines = patterns = files = 0
    for path in sorted(cli.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        text = source.splitlines()
        lines += sum(1 for line in text if _uses_re(line))
        if any(line.strip() == "import re" or line.startswith("from re ") for line in text):
            files += 1
            with path.open("rb") as handle:
                for token in tokenize.tokenize(handle.readline):
                    if token.type == tokenize.STRING and token.string[:1] in "rR":
                        patterns += 1
    return lines, patterns, files


def _uses_re(line: str) -> bool:
    stripped = line.strip()
    if stripped.startswith("#"):
        return False
    return any(
        f"re.{fn}(" in line
        for fn in (
            "compile",
            "sub",
            "subn",
            "match",
            "fullmatch",
            "search",
            "split",
            "findall",
            "finditer",
            "escape",
        )
    )


class _Counter:
    def __init__(self) -> None:
        self.calls = 0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return fn(*args, **kwargs)

        return counted


def native_calls() -> dict[str, int]:
    """Calls into the extension for one call of each public function (patched module attributes)."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(16, 4096, size=1000).tolist()
    cap = 16384
    counter = _Counter()
    patched: list[tuple[types.ModuleType, str, Any]] = []
    targets: list[tuple[types.ModuleType, str]] = []
    for name in dir(_native):
        value = getattr(_native, name)
        if callable(value) and not isinstance(value, type) and not name.startswith("__"):
            targets.append((_native, name))
    # Modules that bound native names at import time.
    for module in list(sys.modules.values()):
        if not isinstance(module, types.ModuleType) or module is _native:
            continue
        if not getattr(module, "__name__", "").startswith("seqbalance."):
            continue
        for name, value in list(vars(module).items()):
            if (
                getattr(value, "__module__", None) in {"seqbalance._native", "_native"}
                and callable(value)
                and not isinstance(value, type)
            ):
                targets.append((module, name))
    for module, name in targets:
        original = getattr(module, name)
        patched.append((module, name, original))
        setattr(module, name, counter.wrap(original))

    def count(call: Callable[[], Any]) -> int:
        counter.calls = 0
        call()
        return counter.calls

    s = seqbalance
    floats = (np.asarray(lengths, dtype=np.float32) * 1.5).tolist()
    cases: dict[str, Callable[[], Any]] = {
        "karmarkar_karp (ints)": lambda: s.karmarkar_karp(lengths, 8, equal_size=True),
        "karmarkar_karp (float32 floats)": lambda: s.karmarkar_karp(floats, 8, equal_size=True),
        "get_seqlen_balanced_partitions": lambda: s.get_seqlen_balanced_partitions(
            lengths, 8, equal_size=False
        ),
        "greedy_partition": lambda: s.greedy_partition(lengths, 8, equal_size=False),
        "partition_ids": lambda: s.partition_ids(lengths, 8),
        "plan_micro_batches": lambda: s.plan_micro_batches(lengths, cap),
        "plan_dp_micro_batches": lambda: s.plan_dp_micro_batches(lengths, 8, cap),
        "plan_dp_micro_batches (refine=True)": lambda: s.plan_dp_micro_batches(
            lengths, 8, cap, refine=True
        ),
        "pack_sequences": lambda: s.pack_sequences(lengths, cap),
        "plan_packed_steps": lambda: _plan_packed_steps(s, lengths, cap),
        "simulate_step": lambda: s.simulate_step(s.plan_dp_micro_batches(lengths, 8, cap), lengths),
        "refine_partitions": lambda: s.refine_partitions(
            lengths, s.greedy_partition(lengths, 8, equal_size=False)
        ),
    }
    results: dict[str, int] = {}
    try:
        for label, call in cases.items():
            try:
                results[label] = count(call)
            except Exception as error:  # noqa: BLE001 - a renamed parameter: report, don't stop
                results[label] = -1
                print(f"  {label}: {type(error).__name__}: {error}", file=sys.stderr)
        # simulate_step's own count, without the plan it simulates.
        plan = s.plan_dp_micro_batches(lengths, 8, cap)
        results["simulate_step"] = count(lambda: s.simulate_step(plan, lengths))
    finally:
        for module, name, original in patched:
            setattr(module, name, original)
    return results


def _plan_packed_steps(s: Any, lengths: list[int], cap: int) -> Any:
    sig = inspect.signature(s.plan_packed_steps)
    key = "max_token_len" if "max_token_len" in sig.parameters else "pack_max_length"
    return s.plan_packed_steps(lengths, 8, 4, **{key: cap})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    retired = retired_spellings()
    shared = defaults_per_name()
    regex_lines, regex_patterns, regex_files = cli_regexes()
    calls = native_calls()
    entry = [name for name in TEST_ENTRY_POINTS if hasattr(_native, name)]
    report = {
        "version": seqbalance.__version__,
        "retired_spellings_in_public_signatures": retired,
        "shared_names_with_more_than_one_default": shared,
        "cli_regex_lines": regex_lines,
        "cli_regex_pattern_literals": regex_patterns,
        "cli_files_using_re": regex_files,
        "native_calls_per_public_call": calls,
        "test_entry_points_in_extension": entry,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"seqbalance {report['version']}")
    print(f"retired spellings in public signatures: {len(retired)}")
    for item in retired:
        print(f"  {item}")
    print(f"shared parameter names with more than one default: {len(shared)}")
    for parameter, defaults in shared.items():
        print(f"  {parameter}: {'; '.join(defaults)}")
    print(
        f"regular expressions in cli/: {regex_patterns} raw-string literals (patterns and replacements), {regex_lines} lines calling re, "
        f"{regex_files} files importing re"
    )
    print("native calls per public call:")
    for label, n in calls.items():
        print(f"  {label}: {n}")
    print(f"test entry points in the extension: {len(entry)} {entry}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
