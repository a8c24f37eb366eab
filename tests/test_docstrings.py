"""Every docstring example in the package runs (doctest), from whichever seqbalance is imported.

pytest's ``--doctest-modules`` would import the modules from ``python/`` by path, which has no
compiled extension under ``make test`` (the installed wheel has it); walking the imported
package runs the same examples on the installed copy and on an in-place build alike.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import seqbalance

# Integrations need their trainers to import; their examples are run by the integration tests.
_SKIP_PREFIXES = ("seqbalance.integrations.",)


def _modules() -> list[str]:
    names = ["seqbalance"]
    for info in pkgutil.walk_packages(seqbalance.__path__, prefix="seqbalance."):
        if not info.name.startswith(_SKIP_PREFIXES) and info.name != "seqbalance.__main__":
            names.append(info.name)
    return sorted(names)


MODULES = _modules()


def test_every_module_is_collected():
    # A module that failed to be listed would silently run no example.
    assert {
        "seqbalance.partition",
        "seqbalance.planning.micro_batches",
        "seqbalance.cli.main",
    } <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(module, name):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"


def test_the_examples_are_many():
    # The documented modules carry examples; a finder that found none would pass vacuously.
    finder = doctest.DocTestFinder(exclude_empty=True)
    examples = sum(
        len(test.examples)
        for name in MODULES
        for test in finder.find(importlib.import_module(name), name)
    )
    assert examples >= 20
