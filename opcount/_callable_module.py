"""A package that is also its main function: ``opcount.roofline(...)`` runs the roofline while
``import opcount.roofline as r`` still gives the package.

Without this, the package ``__init__`` binding the function under the package's own name would
replace the submodule attribute, and ``import opcount.roofline`` would hand back a function.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any


def make_callable(module_name: str, function: Callable[..., Any]) -> None:
    """Calling the module ``module_name`` calls ``function`` with the same arguments."""

    class CallableModule(types.ModuleType):
        __doc__ = sys.modules[module_name].__doc__

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return function(*args, **kwargs)

    sys.modules[module_name].__class__ = CallableModule
