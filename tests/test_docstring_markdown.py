"""Docstrings render on the API page: no code span wraps onto a line Markdown reads as a list,
no reStructuredText `::` shows its colons.

The API page renders docstrings as Markdown (mkdocstrings). A ``code span`` that wraps onto a
line starting with ``+``, ``-``, ``*`` or ``1.`` is broken there: the wrapped line opens a list
item, and the span shows raw backticks (ModelCost's multi-latent formula did).
"""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

from tests.test_docstrings import MODULES

LIST_MARKER = re.compile(r"^\s*(?:[-+*]|\d+[.)])\s")


def _docstrings(module_name: str) -> list[tuple[str, str]]:
    module = importlib.import_module(module_name)
    found = [(module_name, inspect.getdoc(module) or "")]
    for name, value in vars(module).items():
        if getattr(value, "__module__", None) != module_name:
            continue
        found.append((f"{module_name}.{name}", inspect.getdoc(value) or ""))
        if inspect.isclass(value):
            for member, attribute in vars(value).items():
                doc = inspect.getdoc(attribute) if callable(attribute) else None
                if doc:
                    found.append((f"{module_name}.{name}.{member}", doc))
    return found


def wrapped_list_lines(doc: str) -> list[str]:
    """Lines that start inside a code span and look like a list item to Markdown."""
    bad = []
    inside = False
    for line in doc.splitlines():
        if inside and LIST_MARKER.match(line):
            bad.append(line.strip())
        # Each run of backticks opens or closes a span (a run of two closes a run of two).
        for _ in re.findall(r"``|`", line):
            inside = not inside
    return bad


def test_the_check_finds_a_wrapped_span():
    assert wrapped_list_lines("``a = b\n+ c``, done") == ["+ c``, done"]
    assert wrapped_list_lines("``a = b +\nc``\n- a real list item") == []


@pytest.mark.parametrize("module_name", MODULES)
def test_no_code_span_wraps_onto_a_list_marker(module_name: str):
    for name, doc in _docstrings(module_name):
        assert not wrapped_list_lines(doc), f"{name}: {wrapped_list_lines(doc)}"


def rest_literal_lines(doc: str) -> list[str]:
    """Lines that end in reStructuredText's ``::`` (a literal block follows): Markdown prints the
    two colons as they are (TimeCost's model showed "modelled as::")."""
    return [line.strip() for line in doc.splitlines() if re.search(r"\w::\s*$", line)]


def test_the_check_finds_a_rest_literal_marker():
    assert rest_literal_lines("is modelled as::\n\n    t = a + b") == ["is modelled as::"]
    assert rest_literal_lines("is modelled as:\n\n    t = a::b") == []


@pytest.mark.parametrize("module_name", MODULES)
def test_no_docstring_opens_a_rest_literal_block(module_name: str):
    for name, doc in _docstrings(module_name):
        last = name.rsplit(".", 1)[-1]
        if last.startswith("_") and not last.startswith("__"):
            continue  # not on the API page (a private TypeVar carries typing's own docstring)
        assert not rest_literal_lines(doc), f"{name}: {rest_literal_lines(doc)}"
