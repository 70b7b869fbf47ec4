"""Former home of the sparsity charts, kept so that ``opcount.sparsity_plot`` imports keep working:
they live in :mod:`opcount.sparsity.plot`."""

from .sparsity.plot import SparsityPoint, sparsity_roofline_chart, speedup_chart

__all__ = ["SparsityPoint", "sparsity_roofline_chart", "speedup_chart"]
