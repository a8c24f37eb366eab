"""A Griffe extension for the API page: docstring examples render as code.

Griffe's Google-style parser reads ``Examples:`` as an examples section, whose ``>>>`` lines
become highlighted code blocks. Two spellings this package's docstrings use (and doctest and
Napoleon accept) it does not: an ``Example:`` header is an admonition whose body is Markdown,
and ``>>>`` lines outside any section are a paragraph; Markdown reads each ``>`` as a quote, so
the code rendered as three nested blockquotes with its lines run together. This rewrites both
into an ``Examples:`` section (and an indented ``>>>`` block in prose into a highlighted one)
before Griffe parses the docstring (the docstrings themselves, and the doctests run from them,
are unchanged). mkdocs.yml loads it under the Python handler's ``extensions``;
tests/test_site.py checks the built API page.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension

#: An ``Example:`` section header (nothing after the colon), at any indentation.
SINGULAR_HEADER = re.compile(r"^(?P<indent>\s*)Example:\s*$")
#: Any section header at the docstring's own level (``Args:``, ``Raises:``, ``Note:``...).
SECTION_HEADER = re.compile(r"^\w[\w\s-]*:\s*$")


def examples_as_sections(text: str) -> str:
    """``text`` (a cleaned docstring) with every example in an ``Examples:`` section.

    ``Example:`` headers become ``Examples:``; a run of ``>>>`` lines and their output at the
    docstring's own level (not indented under a section) gets an ``Examples:`` header and is
    indented under it; an indented run of them in the docstring's prose (a Markdown code block
    between paragraphs) becomes a ``pycon`` code block in place. Everything else is left as it
    is.

    Examples:
        >>> examples_as_sections("Sum.\\n\\n>>> 1 + 1\\n2").split("\\n")
        ['Sum.', '', 'Examples:', '    >>> 1 + 1', '    2']
        >>> examples_as_sections("Sum.\\n\\nExample:\\n    >>> 1\\n    1")
        'Sum.\\n\\nExamples:\\n    >>> 1\\n    1'
    """
    lines = text.split("\n")
    out: list[str] = []
    in_section = False  # under a section header such as "Args:" (its lines are indented)
    position = 0
    while position < len(lines):
        line = lines[position]
        header = SINGULAR_HEADER.match(line)
        if header:
            out.append(f"{header.group('indent')}Examples:")
            in_section = in_section or not header.group("indent")
        elif line.startswith(">>>"):
            if out and out[-1].strip():
                out.append("")
            out.append("Examples:")
            # The run: the prompts and their output, up to a blank line.
            while position < len(lines) and lines[position].strip():
                out.append(f"    {lines[position]}")
                position += 1
            in_section = True
            continue
        elif line.startswith("    >>>") and not in_section and (not out or not out[-1].strip()):
            out.append("```pycon")
            while position < len(lines) and lines[position].startswith("    "):
                out.append(lines[position][4:])
                position += 1
            out.append("```")
            continue
        else:
            out.append(line)
            if line and not line[0].isspace():
                in_section = SECTION_HEADER.match(line) is not None
        position += 1
    return "\n".join(out)


class DoctestExamples(Extension):
    """Rewrite each docstring's examples into an ``Examples:`` section (`examples_as_sections`)."""

    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        docstring = getattr(obj, "docstring", None)
        if docstring is not None and ">>>" in docstring.value:
            docstring.value = examples_as_sections(docstring.value)
