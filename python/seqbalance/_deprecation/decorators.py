"""The decorators that retire a spelling; each registers its `Deprecation` as it wraps.

* `renamed_params`: a renamed parameter. The old keyword keeps working, warns a
  ``DeprecationWarning`` naming the old spelling, the new one and the version that removes it
  (``"pack_max_length= is deprecated since 0.3 and is removed in 1.0; pass max_token_len="``);
  passing both spellings is a ``TypeError`` naming both.
* `retired_flag`, `retired_value`: a bool switch that became a function of its own, a value a
  parameter no longer takes.
* `renamed_function`: the old name is an alias of the new function that warns when called.
* `renamed_attribute`: a read-only property under the old name that warns and reads the new one.
* `changed_default`: a default that changes after a release; a ``FutureWarning`` when the
  argument is omitted, naming both defaults and the version of the flip.
* `keyword_only_from`: a parameter that becomes keyword-only; passing it by position warns.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from .._inputs import check_flag
from .registry import REMOVED_IN, SINCE, Deprecation, warn
from .registry import register as _register

__all__ = [
    "WORKLOAD_NOTE",
    "changed_default",
    "keyword_only_from",
    "renamed_attribute",
    "renamed_function",
    "renamed_params",
    "retired_flag",
    "retired_value",
    "workload_flag",
]

_F = TypeVar("_F", bound=Callable[..., Any])


def _qualname(func: Callable[..., Any]) -> str:
    module = func.__module__
    public = "seqbalance" if module.startswith("seqbalance") else module
    return f"{public}.{func.__qualname__}"


def renamed_params(
    *,
    since: str = SINCE,
    removed_in: str = REMOVED_IN,
    where: str | None = None,
    convert: dict[str, Callable[[Any], Any]] | None = None,
    notes: dict[str, str] | None = None,
    **old_to_new: str,
) -> Callable[[_F], _F]:
    """Decorate a function whose parameters ``old_to_new`` keys were renamed to its values.

    The old keyword still works: it warns once per call site and is passed on under the new name
    (through ``convert[old]`` first when given: ``balance_workload=True`` means
    ``cost="workload"``). Passing both spellings, by keyword or the new one by position, is a
    ``TypeError`` naming both. Calls without an old keyword pay one dictionary check.
    """

    def decorate(func: _F) -> _F:
        owner = where or _qualname(func)
        entries = {
            old: _register(
                Deprecation(
                    "parameter",
                    owner,
                    old,
                    new,
                    since,
                    removed_in,
                    note=(notes or {}).get(old, ""),
                )
            )
            for old, new in old_to_new.items()
        }
        olds = frozenset(entries)
        signature = inspect.signature(func)
        for new in old_to_new.values():
            if new not in signature.parameters:
                raise TypeError(f"{owner} has no parameter {new}= to rename to")
        converters = convert or {}

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if kwargs and not olds.isdisjoint(kwargs):
                for old in olds.intersection(kwargs):
                    entry = entries[old]
                    new = entry.new
                    if new in kwargs or new in _positional(signature, args):
                        raise TypeError(
                            f"{func.__name__}() got both {new}= and its deprecated spelling "
                            f"{old}=; pass only {new}="
                        )
                    warn(entry)
                    value = kwargs.pop(old)
                    kwargs[new] = converters[old](value) if old in converters else value
            return func(*args, **kwargs)

        wrapper.__deprecated_params__ = dict(old_to_new)  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


def _positional(signature: inspect.Signature, args: tuple[Any, ...]) -> set[str]:
    """The names ``args`` bind to by position (only read when an old keyword was passed)."""
    names = [
        name
        for name, p in signature.parameters.items()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return set(names[: len(args)])


def retired_flag(
    flag: str,
    replacement: Callable[..., Any],
    *,
    since: str = SINCE,
    removed_in: str = REMOVED_IN,
) -> Callable[[_F], _F]:
    """Decorate a function whose bool keyword ``flag`` switched to ``replacement`` (a separate
    function with the same other parameters): ``flag=True`` calls ``replacement``, ``flag=False``
    the function itself; either warns once per call site (``as_ids=`` -> `pack_ids`)."""

    def decorate(func: _F) -> _F:
        entry = _register(
            Deprecation(
                "parameter",
                _qualname(func),
                flag,
                f"seqbalance.{replacement.__name__}(...)",
                since,
                removed_in,
                note=f"`{flag}=True` is `{replacement.__name__}(...)`",
            )
        )

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if kwargs and flag in kwargs:
                warn(entry)
                if check_flag(kwargs.pop(flag), flag):
                    return replacement(*args, **kwargs)
            return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


#: How the retired ``balance_workload=`` translates (`workload_flag`).
WORKLOAD_NOTE = '`balance_workload=True` is `cost="workload"`, `False` is `cost="tokens"`'


def workload_flag(value: Any) -> str:
    """The ``cost`` a retired ``balance_workload=`` flag meant."""
    return "workload" if check_flag(value, "balance_workload") else "tokens"


def retired_value(
    parameter: str,
    value: Any,
    replacement: Any,
    *,
    since: str = SINCE,
    removed_in: str = REMOVED_IN,
) -> Callable[[_F], _F]:
    """Decorate a function whose keyword ``parameter`` no longer takes ``value`` (``None``):
    passing it warns once per call site and passes ``replacement`` (``balance_report``'s
    ``group_size=None`` is ``group_size=1``)."""

    def decorate(func: _F) -> _F:
        entry = _register(
            Deprecation(
                "parameter",
                _qualname(func),
                f"{parameter}={value!r}",
                f"{parameter}={replacement!r}",
                since,
                removed_in,
            )
        )

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if kwargs and parameter in kwargs and kwargs[parameter] is value:
                warn(entry)
                kwargs[parameter] = replacement
            return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def renamed_function(
    new_func: _F,
    old_name: str,
    *,
    since: str = SINCE,
    removed_in: str = REMOVED_IN,
    where: str = "seqbalance",
) -> _F:
    """An alias of ``new_func`` under ``old_name`` that warns once per call site."""
    entry = _register(
        Deprecation(
            "function",
            where,
            f"{where}.{old_name}",
            f"{where}.{new_func.__name__}",
            since,
            removed_in,
        )
    )

    @functools.wraps(new_func)
    def alias(*args: Any, **kwargs: Any) -> Any:
        warn(entry)
        return new_func(*args, **kwargs)

    alias.__name__ = old_name
    alias.__qualname__ = old_name
    alias.__doc__ = f"Deprecated alias of `{new_func.__name__}`: {entry.message}."
    return alias  # type: ignore[return-value]


def renamed_attribute(
    cls: type,
    old: str,
    new: str,
    *,
    since: str = SINCE,
    removed_in: str = REMOVED_IN,
    note: str = "",
    warns_unless: Callable[[Any], bool] | None = None,
) -> Deprecation:
    """Add a read-only property ``cls.old`` that warns and returns ``self.new``.

    ``warns_unless(self)`` true means the old spelling is still valid for that instance (no
    warning): `StepTime.seconds` under a `TimeCost`, whose unit is seconds.
    """
    where = f"seqbalance.{cls.__name__}"
    entry = _register(
        Deprecation(
            "attribute",
            where,
            f"{cls.__name__}.{old}",
            f"{cls.__name__}.{new}",
            since,
            removed_in,
            note=note,
        )
    )

    def read(self: Any) -> Any:
        if warns_unless is None or not warns_unless(self):
            warn(entry)
        return getattr(self, new)

    read.__name__ = old
    read.__doc__ = f"Deprecated: {entry.message}." + (f" {note}" if note else "")
    setattr(cls, old, property(read))
    return entry


def changed_default(
    parameter: str,
    old: Any,
    new: Any,
    *,
    flips_in: str,
    since: str = SINCE,
    register: bool = True,
) -> Callable[[_F], _F]:
    """Decorate a function whose ``parameter`` default changes from ``old`` to ``new`` in
    ``flips_in``. Until then the function's default stays ``old``; a call that omits the
    argument warns a ``FutureWarning`` once per call site, a call that passes it says nothing.
    """

    def decorate(func: _F) -> _F:
        signature = inspect.signature(func)
        if parameter not in signature.parameters:
            raise TypeError(f"{func.__name__} has no parameter {parameter}=")
        entry = Deprecation(
            "default", _qualname(func), repr(old), repr(new), since, flips_in, parameter=parameter
        )
        if register:
            _register(entry)
        position = list(signature.parameters).index(parameter)
        keyword_only = signature.parameters[parameter].kind == inspect.Parameter.KEYWORD_ONLY

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if parameter not in kwargs and (keyword_only or len(args) <= position):
                warn(entry)
            return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def keyword_only_from(
    parameter: str, *, where: str, since: str = SINCE, removed_in: str = REMOVED_IN
) -> Callable[[_F], _F]:
    """Decorate a function whose positional-or-keyword ``parameter`` becomes keyword-only in
    ``removed_in``: passing it by position still works and warns once per call site."""

    def decorate(func: _F) -> _F:
        signature = inspect.signature(func)
        if parameter not in signature.parameters:
            raise TypeError(f"{func.__name__} has no parameter {parameter}=")
        position = list(signature.parameters).index(parameter)
        entry = _register(
            Deprecation(
                "positional",
                where,
                f"{parameter} by position",
                f"{parameter}=",
                since,
                removed_in,
                parameter=parameter,
            )
        )

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if len(args) > position:
                warn(entry)
            return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
