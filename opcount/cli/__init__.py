"""The ``opcount`` command: flags parsed once into typed options, the library called, the result rendered.

Nothing outside this package imports from it.
"""

from .main import main

__all__ = ["main"]
