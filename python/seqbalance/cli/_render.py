"""A library `ArgumentError` in the shell's words, rendered from where it arose.

The error carries its location (``loc``) and its kind's template (`seqbalance.errors.KINDS`);
the command line fills the template with its own ``where``: the flag that set the parameter
(`FLAGS`), the line of the input file that holds a sample, the ``--key-field`` of a sample.
Another parameter a message names (a ``ctx`` field ending in ``_argument``) is named by its flag
too. A new keyword needs one entry in `FLAGS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ..errors import KINDS, ArgumentError, where
from .readers import line_of_item

__all__ = ["FLAGS", "render", "render_document"]

#: The flag that sets each parameter the command line passes to the library.
FLAGS: Mapping[str, str] = MappingProxyType(
    {
        "k_partitions": "-k",
        "dp_size": "--dp",
        "max_token_len": "--max-token-len",
        "max_num_micro_batches": "--max-num-micro-batches",
        "group_size": "--group-size",
        "uid_list": "--uid-field",
        "max_sequences": "--max-sequences",
        "footprint": "--footprint",
        "cost": "--cost",
        "refine": "--refine",
        "order": "--order",
        "sync": "--sync",
        "pipeline_stages": "--pipeline-stages",
        "forward_share": "--forward-share",
        "equal_size": "--equal-size",
    }
)

#: The parameters that hold the input's samples, one per line of the input file.
SAMPLES = frozenset({"lengths", "seqlen_list", "weights"})

#: Templates the shell says otherwise: a flag and its value are two words, not ``name=value``.
_SHELL_TEMPLATES: Mapping[str, str] = MappingProxyType(
    {
        "conflict": "{where} {shown} with {other_argument} {other_value}: {reason}",
        "unsupported": "{function} does not support {where} {shown}",
    }
)


def render(error: ArgumentError, file: str | None) -> str | None:
    """``error``'s message with flags for parameters and lines for samples, or ``None`` when
    its location names nothing the command line sets (the caller then shows it as it is).

    Example:
        >>> from seqbalance.errors import argument_error
        >>> render(argument_error("too_small", "dp_size", 0, minimum=1, shown="0"), None)
        '--dp must be >= 1, got 0'
    """
    loc, kind = tuple(error.loc), error.kind
    if not loc or kind is None or kind not in KINDS or error.ctx is None:
        return None
    head, steps = loc[0], loc[1:]
    suffix = ""
    if head in SAMPLES and len(steps) == 1:
        place, suffix = where(loc), _lines(steps[0], file)
    elif head == "keys" and len(steps) == 1 and isinstance(steps[0], int):
        place = f"the --key-field of sample {steps[0]}"
    elif not steps and head in FLAGS:
        place = FLAGS[head]
    else:
        return None
    ctx: dict[str, Any] = {
        name: FLAGS.get(value, value) if name.endswith("_argument") else value
        for name, value in error.ctx.items()
    }
    library = KINDS[kind].template
    template = library if steps else _SHELL_TEMPLATES.get(kind, library)
    return template.format(where=place, argument=FLAGS.get(head, head), **ctx) + suffix


def render_document(error: ArgumentError) -> str | None:
    """A refused field of a document read from a file (``TimeCost.from_dict``'s ``data``) in the
    file's words: ``("data", "coefficients", "per_token")`` is ``"coefficients"."per_token"``, and
    a missing field ``no "factor" field``. ``None`` for an error located elsewhere.

    Example:
        >>> from seqbalance.errors import argument_error
        >>> loc = ("data", "coefficients", "per_token")
        >>> print(render_document(argument_error("not_allowed", loc, 1j, expected="a number", shown="1j")))
        "coefficients"."per_token" must be a number, got 1j
    """
    loc, kind = tuple(error.loc), error.kind
    if len(loc) < 2 or loc[0] != "data" or kind is None or kind not in KINDS or error.ctx is None:
        return None
    place = ".".join(f'"{step}"' for step in loc[1:])
    if kind == "missing_field":
        return f"no {place} field ({error.ctx['what']} has one)"
    return KINDS[kind].template.format(where=place, argument="the file", **error.ctx)


def _lines(step: Any, file: str | None) -> str:
    """`` (line N of FILE)`` (``lines N-M`` for a run of samples), or nothing for standard
    input and ``.npy`` files, whose samples have no line."""
    if file is None:
        return ""
    first, last = (step.start, step.stop - 1) if isinstance(step, slice) else (step, step)
    if not isinstance(first, int) or not isinstance(last, int):
        return ""
    line = line_of_item(file, first)
    if line is None:
        return ""
    if last == first:
        return f" (line {line} of {file})"
    end = line_of_item(file, last)
    return f" (lines {line}-{end} of {file})" if end else ""
