"""Swapping a trainer's pure-Python partitioners for seqbalance's in a running process, and back.

One `ModulePatch` per trainer module (``verl.utils.seqlen_balancing``,
``openrlhf.utils.seqlen_balancing``). `ModulePatch.install` replaces the named functions in
that module and rebinds every already-imported module of the trainer's package that holds one of
the originals under any name (``from ... import get_seqlen_balanced_partitions`` copies the
function object into the importing module, so patching the defining module alone would miss it).
`ModulePatch.uninstall` puts the originals back wherever a replacement is found in the
package, including modules imported after ``install()`` that picked the replacement up by name.

The replacements are wrapper functions of each integration module (for the partitioners, built
here by `_partitioner_wrapper`), not seqbalance's public functions, so that ``uninstall()``
only ever undoes what ``install()`` did (a trainer module that imports
``seqbalance.get_seqlen_balanced_partitions`` on purpose is left alone), and so that
`ModulePatch.call` can hand an input seqbalance refuses by type to the trainer's original.

Nothing here imports a trainer until ``install()`` is called.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any

from .._inputs import check_refine

__all__ = ["IntegrationError", "ModulePatch"]


class IntegrationError(RuntimeError):
    """The trainer is importable, but its partitioners are not the ones seqbalance replaces.

    Raised when a function to replace is missing or has other parameters than the release
    seqbalance was written against: patching blindly could change what the trainer computes.
    Nothing has been patched when it is raised.
    """


class SaysOnce:
    """An integration's state that says each message once per key (at info level, on the
    integration's own logger): what holds for every step is said at the first."""

    def __init__(self, logger: logging.Logger) -> None:
        self.said: set[str] = set()
        self._logger = logger

    def once(self, key: str, message: str, *args: Any) -> None:
        if key not in self.said:
            self.said.add(key)
            self._logger.info(message, *args)


def _parameters(function: Any) -> list[tuple[str, Any, Any]]:
    """What a caller relies on: each parameter's name, kind and default, in order."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def _partitioner_wrapper(
    patch: ModulePatch, name: str, native: Callable[..., Any], trainer: str
) -> Callable[..., Any]:
    """``native`` under the trainer's exact signature ``(seqlen_list, k_partitions, equal_size)``.

    install() compares parameters by name, kind and default, so the wrapper spells them out
    rather than taking ``*args``. It answers through `ModulePatch.call` (the trainer's own
    function for an input seqbalance refuses by type) and carries the name, module and docstring
    of a function defined in ``patch.owner``, where the integration module binds it.
    """

    refinable = "refine" in inspect.signature(native).parameters
    weighed = name in patch.weighed

    def wrapper(seqlen_list: Any, k_partitions: Any, equal_size: Any) -> list[list[int]]:
        weigh = patch.weigh
        if weighed and weigh is not None:
            seqlen_list = weigh(seqlen_list)
        if refinable and patch.refine is not False:
            return patch.call(
                name, native, seqlen_list, k_partitions, equal_size, refine=patch.refine
            )
        return patch.call(name, native, seqlen_list, k_partitions, equal_size)

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__module__ = patch.owner
    wrapper.__doc__ = f"`seqbalance.{name}` in {trainer}'s place (installed by `install`)."
    return wrapper


def _signature_text(function: Any) -> str:
    try:
        return str(inspect.signature(function))
    except (TypeError, ValueError):
        return "(signature unavailable)"


class ModulePatch:
    """Replace functions of one trainer module, in the module and wherever the package copied them.

    Args:
        target: the module whose functions are replaced, e.g. ``"verl.utils.seqlen_balancing"``.
        package: the trainer's top-level package (``"verl"``); every imported module named
            ``package`` or ``package.*`` is searched for copies of the originals.
        partitioners: function name → the seqbalance function run in its place; each is wrapped
            under the trainer's signature ``(seqlen_list, k_partitions, equal_size)`` and the
            wrappers come first in `replacements` (the integration module binds them by name).
        trainer: the trainer's name, for the wrappers' docstrings (``"verl"``).
        replacements: function name → replacement, for functions of other signatures; each
            original must have exactly the replacement's parameters (names, kinds, defaults).
        optional: names that may be missing from ``target`` (older releases); they are then
            skipped. A missing name not listed here raises `IntegrationError`.
        weighed: partitioners whose ``seqlen_list`` holds lengths: while `weigh` is set
            (``install(cost=...)``), they partition ``weigh(seqlen_list)`` instead.
        what: what the replacements are, for the INFO line.
        owner: the public module, for messages (``"seqbalance.integrations.verl"``).
        install_hint: what to install when ``target`` cannot be imported.
        logger: where the one INFO line per install/uninstall goes.
    """

    def __init__(
        self,
        *,
        target: str,
        package: str,
        partitioners: Mapping[str, Callable[..., Any]] | None = None,
        trainer: str = "",
        replacements: Mapping[str, Callable[..., Any]] | None = None,
        optional: Iterable[str] = (),
        weighed: Iterable[str] = (),
        what: str = "seqbalance's native partitioners",
        owner: str,
        install_hint: str,
        logger: logging.Logger,
    ) -> None:
        self.target = target
        self.package = package
        self.optional = frozenset(optional)
        self.weighed = frozenset(weighed)
        self.what = what
        #: Lengths -> per-sample costs, for the `weighed` partitioners (None: the lengths).
        self.weigh: Callable[[Any], Any] | None = None
        self.owner = owner
        self.replacements: dict[str, Callable[..., Any]] = {
            name: _partitioner_wrapper(self, name, native, trainer)
            for name, native in (partitioners or {}).items()
        }
        self.replacements.update(replacements or {})
        self.install_hint = install_hint
        self.logger = logger
        self._lock = threading.Lock()
        # name -> the function install() found there; kept after uninstall() so a replacement
        # that falls back to the original (see seqbalance.integrations.verl) still can.
        self.originals: dict[str, Callable[..., Any]] = {}
        self._installed: list[str] = []
        self._warned: set[str] = set()
        # install(refine=...): what the replaced balancing functions pass as ``refine``.
        self.refine: bool | str = False

    def call(self, name: str, native: Callable[..., Any], *args: Any, **options: Any) -> Any:
        """``native(*args)``; where it refuses the input's type, the trainer's original instead.

        seqbalance raises ``TypeError`` for inputs it does not take (values of a kind it cannot
        compute exactly as the trainer does). The trainer's own function then computes the
        answer it always did (the slow way); a WARNING says so, once per function after each
        ``install()``.
        """
        try:
            return native(*args, **options)
        except TypeError as exc:
            original = self.originals.get(name)
            if original is None:
                raise
            if name not in self._warned:
                self._warned.add(name)
                self.logger.warning(
                    "seqbalance: %s.%s fell back to the trainer's own function for an input "
                    "seqbalance does not take (%s); later fallbacks are not logged",
                    self.target,
                    name,
                    exc,
                )
            return original(*args)

    def is_installed(self) -> bool:
        """Whether ``install()`` is in effect: it ran, ``uninstall()`` has not run since, and the
        target module as imported now still holds every replacement.

        Reloading the target (``importlib.reload``), or importing it afresh after it left
        ``sys.modules``, puts the trainer's originals back: ``False`` then.
        """
        if not self._installed:
            return False
        module = sys.modules.get(self.target)
        if module is None:
            return False
        for name, replacement in self.replacements.items():
            current = getattr(module, name, None)
            # A name the installed trainer lacks (optional, older releases) was never replaced.
            if current is not None and current is not replacement:
                return False
        return True

    def _import_target(self) -> ModuleType:
        try:
            return importlib.import_module(self.target)
        except ImportError as exc:
            raise ImportError(
                f"{self.owner}.install() could not import {self.target} ({exc}). "
                f"{self.install_hint}"
            ) from exc

    def _check(self, module: ModuleType) -> dict[str, Callable[..., Any]]:
        """The functions to replace now (name → current original); raise before changing anything."""
        found: dict[str, Callable[..., Any]] = {}
        problems: list[str] = []
        for name, replacement in self.replacements.items():
            current = getattr(module, name, None)
            if current is replacement:
                continue  # already ours
            if current is None:
                if name not in self.optional:
                    problems.append(f"{self.target}.{name} is missing")
                continue
            try:
                same = callable(current) and _parameters(current) == _parameters(replacement)
            except (TypeError, ValueError):
                same = False
            if not same:
                problems.append(
                    f"{self.target}.{name}{_signature_text(current)} does not have the "
                    f"parameters seqbalance replaces it under: {name}{_signature_text(replacement)}"
                )
                continue
            found[name] = current
        if problems:
            raise IntegrationError(
                f"{self.owner}.install() refused to patch: "
                + "; ".join(problems)
                + ". This release of the trainer is not one seqbalance knows; nothing was patched. "
                "Call seqbalance's functions directly, or report the trainer's version to seqbalance."
            )
        return found

    def _in_package(self, module_name: str) -> bool:
        return module_name == self.package or module_name.startswith(self.package + ".")

    def _rebind(self, swap: Mapping[int, tuple[Any, Any]]) -> list[tuple[str, str]]:
        """In every imported module of the package, replace attributes that are ``swap``'s keys.

        ``swap`` maps ``id(old)`` to ``(old, new)``; an attribute is replaced only when it *is*
        ``old`` (identity, never equality). Returns ``(module, attribute)`` for each one replaced.
        """
        changed = []
        for module_name, module in list(sys.modules.items()):
            if module is None or not self._in_package(module_name):
                continue
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for attribute, value in list(namespace.items()):
                pair = swap.get(id(value))
                if pair is not None and pair[0] is value:
                    setattr(module, attribute, pair[1])
                    changed.append((module_name, attribute))
        return changed

    def check(self) -> None:
        """Import the target and check its functions as `install` would, patching nothing:
        raises what `install` raises (for installing several patches all or none)."""
        with self._lock:
            self._check(self._import_target())

    def install(self, refine: Any = False) -> list[str]:
        """Replace the functions; return the names replaced in the target module (idempotent).

        ``refine`` (checked first, as `seqbalance.get_seqlen_balanced_partitions` checks
        it) is what the replaced balancing functions pass on from now on; a later ``install``
        sets it again.
        """
        mode = check_refine(refine)
        with self._lock:
            module = self._import_target()
            found = self._check(module)
            self.refine = mode
            self.originals.update(found)
            for name in found:
                setattr(module, name, self.replacements[name])
            # A second install() finds nothing new in the target module but still sweeps: a
            # module imported by name between the two calls already holds the replacement, and
            # one that holds an original (imported before a reload, say) is caught here.
            swap = {
                id(original): (original, self.replacements[name])
                for name, original in self.originals.items()
            }
            rebound = [
                f"{module_name}.{attribute}"
                for module_name, attribute in self._rebind(swap)
                if module_name != self.target
            ]
            first = not self._installed
            if first:
                self._warned.clear()
            self._installed = [
                name
                for name in self.replacements
                if getattr(module, name, None) is self.replacements[name]
            ]
            if first or found or rebound:
                self.logger.info(
                    "seqbalance: replaced %s in %s with %s%s",
                    ", ".join(self._installed),
                    self.target,
                    self.what,
                    f"; rebound by-name imports: {', '.join(rebound)}" if rebound else "",
                )
            return list(self._installed)

    def uninstall(self) -> list[str]:
        """Put the originals back everywhere in the package; return the names restored.

        Idempotent: without a prior ``install()`` it changes nothing and returns ``[]``.
        """
        with self._lock:
            if not self._installed:
                return []
            swap = {
                id(self.replacements[name]): (self.replacements[name], original)
                for name, original in self.originals.items()
            }
            restored = self._rebind(swap)
            module = sys.modules.get(self.target)
            names = [
                name
                for name, original in self.originals.items()
                if module is not None and getattr(module, name, None) is original
            ]
            self._installed = []
            self.logger.info(
                "seqbalance: restored the original %s (%d places in %s)",
                ", ".join(names) if names else "functions",
                len(restored),
                self.package,
            )
            return names
