"""Predicted beside measured: per-module and per-operator wall time of real forward passes,
next to the roofline's speed-of-light time (AMAIX validated its model against measured layer
times; the Sparsity Roofline reports "% of speed-of-light").

How it measures
---------------
- Every module gets a ``record_function`` range for the duration of each of its calls (forward
  pre/post hooks, removed in ``finally``), every forward pass another one. One
  ``torch.profiler`` session covers ``repeats`` passes after ``warmup`` unprofiled ones; each
  pass's event tree is walked once.
- **Operators** are the outermost dispatcher events in a module (``aten::conv2d``, not the
  ``aten::convolution`` / ``mkldnn_convolution`` it calls), keyed as the analyses key them
  (``conv``, ``addmm``, ``relu_``), so they pair with the roofline's ``by_operator()`` rows.
- **Custom operators** (MXNet's custom-operator profiling): a
  ``torch.autograd.Function`` appears under its class name, a ``torch.library`` operator under
  its name without namespace (as the analyses name it). The operators it launches are
  attributed under its name (``MyOp::add``), and its own time, outside those operators, is a row
  of its own (``MyOp::(python)``; ``(self)`` for operators not defined in Python).
  ``torch.library.custom_op`` operators called through their Python object or an
  ``OpOverload`` make no profiler event of their own; ``OpOverload.__call__`` is wrapped for the
  duration of the measurement to give them one (restored in ``finally``).
- **Times.** On CPU an event's time is its wall time; on CUDA the time of the kernels it
  launched (the profiler's device time), passes separated by ``torch.cuda.synchronize``. The
  model's time without the profiler (``wall``) is measured too: ``perf_counter`` on CPU, CUDA
  events on CUDA. Python rows and the modules' ``self`` time are host time.
- **Statistic.** ``"midmean"`` (default): the passes are ranked by the model's time and the
  middle half kept (all of them below 4 passes); every row is its mean over those passes. Unlike
  a per-row median this is additive: within one pass a child's range lies inside its parent's,
  so the children's times sum to no more than the parent's, and averages over the same passes
  keep that. ``"median"`` (per row, robust but not additive) and ``"mean"`` are available.

The model is left as it was: hooks removed, training flags untouched, buffers (batch-norm
statistics updated by a training-mode pass) restored, the global RNG forked; also after an error.

The modules, one concern each: :mod:`.measure` (:func:`profile`: arguments, prediction, the
steps below in order), :mod:`.runner` (running and timing the model, leaving it as it was),
:mod:`.events` (one pass's profiler events attributed to modules and operators, custom
operators named), :mod:`.aggregate` (passes to rows, paired with the prediction) and
:mod:`.report` (:class:`ProfileRow`, :class:`ProfileReport`: tables, exports, chart).
"""

from .aggregate import STATISTICS
from .events import PYTHON, SELF
from .measure import profile
from .report import ProfileReport, ProfileRow
from .runner import ProfileError

__all__ = ["PYTHON", "SELF", "STATISTICS", "ProfileError", "ProfileReport", "ProfileRow", "profile"]
