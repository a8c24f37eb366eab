"""Every Python snippet of the docs is self-contained, and the trainer snippets run.

`tests/test_docs.py` runs a page's blocks in one namespace, in page order, and skips the blocks
marked ``docs-test: skip``. A reader pastes such a snippet on its own, though: here every marked
block must import each module it names (``seqbalance.``, ``np.``), and the trainer snippets, which use a
trainer's variables (``seq_lens``, ``dp_size``), run with example values for those variables.
"""

from __future__ import annotations

import ast
import builtins
from types import SimpleNamespace

import pytest

from tests.test_docs import DOCS, PYTHON, Block

#: Modules a snippet may name; one it names must be imported in the snippet itself.
MODULES = {"seqbalance", "sb", "np", "numpy", "json", "ray", "torch", "os", "sys", "time", "math"}

#: Example values for the variables a trainer snippet takes from the trainer around it.
_LENGTHS = [812, 4096, 77, 1500, 2048, 300, 9000, 640, 128, 2500, 64, 7000]
TRAINER_NAMES = {
    "seq_lens": _LENGTHS,
    "seqlens": _LENGTHS,
    "seq_lengths": _LENGTHS,
    "token_weights": _LENGTHS,
    "dp_size": 2,
    "max_tokens_per_microbatch": 16_384,
    "max_tokens_per_mb": 16_384,
    "max_tokens_per_pack": 16_384,
    "seq_len": 16_384,
    "samples": [SimpleNamespace(input_ids=[0] * n) for n in _LENGTHS],
}


def _marker_line(block: Block) -> str:
    """The line above the block's fence (where a ``docs-test`` marker sits)."""
    lines = (DOCS / block.page).read_text(encoding="utf-8").splitlines()
    return lines[block.line - 2] if block.line >= 2 else ""


TRAINER_BLOCKS = [
    b for b in PYTHON if b.marker == "skip" and "names from your trainer" in _marker_line(b)
]


def _unbound_names(body: str) -> set[str]:
    """Names a block loads but never binds (imports, assignments, loops, functions)."""
    tree = ast.parse(body)
    bound: set[str] = set()
    loaded: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return loaded - bound - set(dir(builtins))


#: The blocks a reader pastes on their own (test_docs.py does not run them in page order).
PASTED = [b for b in PYTHON if b.marker is not None and ">>>" not in b.body]


@pytest.mark.parametrize("block", PASTED, ids=lambda block: block.id)
def test_a_snippet_imports_the_modules_it_names(block: Block):
    assert not _unbound_names(block.body) & MODULES, f"{block.id} uses a module it does not import"


def test_the_check_finds_a_missing_import():
    assert _unbound_names("plan = seqbalance.plan_dp_micro_batches(x, 2, 10)") == {
        "seqbalance",
        "x",
    }
    assert _unbound_names("import seqbalance\nseqbalance.pack_sequences([1], 2)") == set()


def test_there_are_trainer_snippets():
    # ROLL, AReaL, NeMo-RL and prime-rl at least: a guard against the marker text changing.
    assert len(TRAINER_BLOCKS) >= 4, [b.id for b in TRAINER_BLOCKS]


@pytest.mark.parametrize("block", TRAINER_BLOCKS, ids=lambda block: block.id)
def test_a_trainer_snippet_runs_with_example_values(block: Block):
    missing = _unbound_names(block.body) - set(TRAINER_NAMES)
    assert not missing, f"{block.id}: give TRAINER_NAMES example values for {sorted(missing)}"
    namespace = {name: TRAINER_NAMES[name] for name in _unbound_names(block.body)}
    exec(compile(block.body, block.id, "exec"), namespace)
    # Whatever the snippet computed covers every sample once (a plan, packs or groups).
    results = [value for name, value in namespace.items() if name not in TRAINER_NAMES]
    assert results
    for value in results:
        if isinstance(value, list) and value:
            assert sorted(_flatten(value)) == list(range(len(_LENGTHS)))


def _flatten(value: object) -> list[int]:
    if isinstance(value, list):
        return [item for part in value for item in _flatten(part)]
    return [int(value)]  # type: ignore[call-overload]
