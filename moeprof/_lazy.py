"""Package attributes imported on first use (PEP 562), so that importing a package stays light."""

from __future__ import annotations

import importlib
from typing import Any


def lazy_attribute(namespace: dict[str, Any], package: str, where: dict[str, str], name: str) -> Any:
    """``name`` from the module ``where`` names for it, kept in the package's ``namespace`` once imported.

    Any other name raises AttributeError, so that ``from package import submodule`` goes on to import
    the submodule.
    """
    module = where.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    namespace[name] = value
    return value
