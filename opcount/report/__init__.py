"""Reports: fvcore-compatible tables and model strings, a compact tree, and exports.

Everything here is pure: it reads an analysis' results (``by_module``, ``by_module_and_operator``,
``uncalled_modules``) and the model's structure, and returns text or plain data. It never
changes an analysis' settings (fvcore's printers switch the analysis' warnings off) nor any
global state (fvcore flips ``tabulate.PRESERVE_WHITESPACE``; we pass ``preserve_whitespace``).

A report is made of :class:`Column` s, named by key in :data:`COLUMNS`. :func:`register_column`
adds more (the roofline's time columns plug in there); a new column reads its analysis from
``extra={"<role>": analysis}`` through :meth:`Sources.get`.

One module per job: :mod:`.columns` (the column registry), :mod:`.parameters` (parameter
counts), :mod:`.rows` (which rows, in what order), :mod:`.tables` (fvcore's tables and the
operator table), :mod:`.model_str` (the model string and the compact tree), :mod:`.exports`
(dict, JSON, CSV, markdown), :mod:`.html` (the HTML page), :mod:`.trace` (the roofline as a Chrome
trace-event timeline); numbers are written by :mod:`opcount.units`.
"""

from __future__ import annotations

from ..units import COMPACT, EXACT, FVCORE_STR, FVCORE_TABLE, UNITS, NumberFormat, exact, format_number
from .columns import COLUMNS, Column, Sources, Values, register_column, resolve_columns
from .exports import ROOT, csv_fields, csv_rows, export_number, to_csv, to_dict, to_json, to_markdown
from .html import html_report
from .model_str import flop_count_str, tree_str
from .parameters import parameter_count
from .rows import check_max_depth
from .tables import flop_count_table, module_table, operator_table, parameter_count_table

__all__ = [
    "COLUMNS",
    "COMPACT",
    "EXACT",
    "FVCORE_STR",
    "FVCORE_TABLE",
    "ROOT",
    "UNITS",
    "Column",
    "NumberFormat",
    "Sources",
    "Values",
    "check_max_depth",
    "csv_fields",
    "csv_rows",
    "exact",
    "export_number",
    "flop_count_str",
    "flop_count_table",
    "format_number",
    "html_report",
    "module_table",
    "operator_table",
    "parameter_count",
    "parameter_count_table",
    "register_column",
    "resolve_columns",
    "to_csv",
    "to_dict",
    "to_json",
    "to_markdown",
    "tree_str",
]
