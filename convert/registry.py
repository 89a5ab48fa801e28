"""A small name -> factory registry shared by teachers, readers, students, generators.

Like opacus' accountant registry: duplicate names are refused, and "allowed
values" text in errors is always built from the registry itself.
"""

from __future__ import annotations

import difflib
from typing import Callable, Generic, Iterator, Optional, TypeVar

from .errors import OptionError

T = TypeVar("T")


def closest(name: str, names) -> Optional[str]:
    """The one name a typo of ``name`` most likely meant, or None (every "did you mean" in an error asks this)."""
    close = difflib.get_close_matches(name, list(names), n=1)
    return close[0] if close else None


class Registry(Generic[T]):
    """``param``: the parameter whose values are this registry's names (``student``), named by an unknown-name error."""

    def __init__(self, kind: str, *, param: Optional[str] = None) -> None:
        self.kind, self.param = kind, param
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._items[name] = obj
            return obj

        return deco

    def remove(self, name: str) -> None:
        """Take ``name`` out again (a plugin unloaded, a test's own entry cleaned up)."""
        self._items.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def names(self) -> list[str]:
        return sorted(self._items)

    def items(self) -> list[tuple[str, T]]:
        return sorted(self._items.items())

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise self.unknown(name) from None

    def unknown(self, name: str, *, otherwise: str = "", param: Optional[str] = None) -> OptionError:
        """The error for a name not registered: the closest name, then every name (``otherwise``: a further way out;
        ``param``: the parameter to change where it is not the registry's own)."""
        close = closest(name, self.names())
        choose = f"choose one of: {', '.join(self.names())}{otherwise}"
        fix = f"did you mean {close!r}? Otherwise {choose}" if close else choose
        return OptionError(f"unknown {self.kind} {name!r}", fix=fix, param=param or self.param)
