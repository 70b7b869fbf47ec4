"""torchvision for the tests that use it, in files that also hold tests that do not.

opcount installs and runs without torchvision (it is the ``vision`` extra), and the smoke subset
runs where it is absent. ``torchvision`` here is the package when it imports, else a stand-in
whose first attribute access skips the test (or, at import time, the test module) that reached it.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import pytest

INSTALL = "pip install 'opcount[vision]'"


class _Missing:
    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):  # introspection (pytest, copy, inspect) must not skip anything
            raise AttributeError(attr)
        pytest.skip(f"needs {self._name} ({INSTALL})", allow_module_level=True)


def _optional(name: str) -> ModuleType | Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return _Missing(name)


torchvision: Any = _optional("torchvision")
HAS_TORCHVISION = not isinstance(torchvision, _Missing)
