"""Old import paths kept for a while: a module that moved leaves a small module at its old
path that warns once, when imported, and hands every name on to the new one."""
from __future__ import annotations

import warnings
from types import ModuleType
from typing import Any, Callable, Dict, List, Optional, Tuple


def moved(old: str, new: ModuleType, aliases: Optional[Dict[str, str]] = None
          ) -> Tuple[Callable[[str], Any], Callable[[], List[str]]]:
    """Warns that module ``old`` is deprecated in favour of ``new`` and returns the
    ``(__getattr__, __dir__)`` pair that makes ``old`` hand every attribute on to ``new``.

    Parameters
    ----------
    old : str
        The deprecated module's name (its ``__name__``).
    new : module
        The module that holds the code now.
    aliases : dict of str to str, optional
        Names that ``old`` gave under another name: ``{old_name: name_in_new}``.

    Returns
    -------
    tuple of (callable, callable)
        The module-level ``__getattr__`` and ``__dir__`` for ``old``.
    """
    aliases = dict(aliases or {})
    renamed = "".join(f"; {a} is {new.__name__}.{b}" for a, b in sorted(aliases.items()))
    # stacklevel 3: past this function and the old module, to the import statement (the
    # import machinery's own frames are skipped).
    warnings.warn(f"{old} is deprecated: import {new.__name__} instead{renamed}",
                  DeprecationWarning, stacklevel=3)

    def __getattr__(name: str) -> Any:
        try:
            return getattr(new, aliases.get(name, name))
        except AttributeError:
            raise AttributeError(f"module {old!r} has no attribute {name!r}") from None

    def __dir__() -> List[str]:
        return sorted(set(dir(new)) | set(aliases))

    return __getattr__, __dir__
