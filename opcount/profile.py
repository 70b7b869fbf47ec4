"""Former home of the profiler, kept so that ``from opcount.profile import profile,
ProfileReport, ...`` keeps working: it lives in :mod:`opcount.profiling`.

``opcount/__init__`` imports this module before it binds ``opcount.profile`` to the function.
Importing it later would rebind that attribute to this module, since Python sets a submodule
as an attribute of its package when it first loads it.
"""

from .profiling import PYTHON as PYTHON
from .profiling import SELF as SELF
from .profiling import STATISTICS, ProfileError, ProfileReport, ProfileRow, profile
from .profiling.runner import MODULE_RANGE as MODULE_RANGE
from .profiling.runner import PASS_RANGE as PASS_RANGE

__all__ = ["STATISTICS", "ProfileError", "ProfileReport", "ProfileRow", "profile"]
