"""``opcount hardware [NAME]``: the hardware ``--hardware`` takes, without analyzing a model.

Without a name, one row per preset: its device, memory bandwidth and peaks. With a name (a preset,
an alias, ``local`` or a .toml/.json file), that device's peak per unit and dtype with each ridge
point, so a reader can see what a roofline will divide by before running one.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import tabulate

from ..hardware.lookup import ALIASES, PRESETS, Hardware, hardware
from ..units import si, size
from .args import UsageError
from .parser import command_parser


def build_parser() -> argparse.ArgumentParser:
    p = command_parser(
        prog="opcount hardware",
        description="The hardware presets --hardware takes, or one device's peaks and ridge points.",
        epilog="Sources of every figure: the hardware guide (hardware.md).",
    )
    p.add_argument(
        "name", nargs="?", metavar="NAME", help="a preset or alias, 'local' (measured) or a .toml/.json file"
    )
    p.add_argument("--recalibrate", action="store_true", help="local: measure this machine again, not from the cache")
    p.add_argument("-o", "--output", metavar="FILE", help="write the text to FILE instead of stdout")
    return p


def run(argv: Sequence[str]) -> tuple[str, str | None]:
    """The text ``opcount hardware ARGV`` prints, and the file ``-o`` names (None: stdout)."""
    args = build_parser().parse_args(list(argv))
    if args.output is not None and not args.output.strip():  # as opcount MODEL: "" printed to the terminal
        raise UsageError(f"-o needs a file name, got {args.output!r}")
    if args.name is None:
        if args.recalibrate:
            raise UsageError("--recalibrate applies to opcount hardware local")
        return presets_table(), args.output
    try:
        found = hardware(args.name, recalibrate=args.recalibrate)
    except (LookupError, ValueError, OSError) as e:  # OSError: a file missing, a folder, unreadable
        raise UsageError(str(e).splitlines()[0]) from None
    return describe(found), args.output


def presets_table() -> str:
    """One row per preset: name, device, bandwidth, dense peaks of the tensor and vector units."""
    aliases: dict[str, list[str]] = {}
    for alias, name in ALIASES.items():
        aliases.setdefault(name, []).append(alias)
    rows = []
    for name, hw in sorted(PRESETS.items()):
        label = name + (f" ({', '.join(sorted(aliases[name]))})" if name in aliases else "")
        rows.append([label, hw.description, si(hw.bandwidth, unit="B/s"), _peaks(hw, "tensor"), _peaks(hw, "vector")])
    headers = ["name", "device", "bandwidth", "tensor peaks (FLOP/s)", "vector peaks (FLOP/s)"]
    return str(tabulate.tabulate(rows, headers=headers, tablefmt="pipe", disable_numparse=True)) + (
        "\n\nDense peaks, 2 FLOPs per multiply-add, as datasheets give them; "
        "opcount hardware NAME shows one device with its ridge points; --hardware local measures this machine."
    )


def _peaks(hw: Hardware, unit: str) -> str:
    table = hw.peak.get(unit, {})
    return ", ".join(f"{dtype} {si(rate)}" for dtype, rate in sorted(table.items(), key=lambda kv: -kv[1]))


def describe(hw: Hardware) -> str:
    """One device: its figures, then a row per unit and dtype with the peak and the ridge point."""
    lines = [
        f"{hw.name}: {hw.description}" if hw.description else hw.name,
        f"memory bandwidth {si(hw.bandwidth, unit='B/s')}",
    ]
    if hw.buffer_bytes:
        lines.append(f"on-chip buffer {size(hw.buffer_bytes)}")
    if hw.memory_bytes:
        lines.append(f"memory {size(hw.memory_bytes)}")
    if hw.interconnect is not None:  # the links a deployment's collectives run on (deploy.md)
        ic = hw.interconnect
        link = f"links {si(ic.bandwidth, unit='B/s')} a direction, {ic.devices_per_node} a node"
        if ic.network_bandwidth:
            link += f"; network {si(ic.network_bandwidth, unit='B/s')} a direction"
        lines.append(link)
    if hw.clock_hz:
        lines.append(f"clock {si(hw.clock_hz, unit='Hz')}")
    if hw.power_w:
        lines.append(f"board power {hw.power_w:,.0f} W")
    if hw.fp8:  # the FP8 encoding an 8-bit float request runs in (hardware.md)
        lines.append(f"FP8 format {hw.fp8} ({'AMD fnuz' if hw.fp8.endswith('fnuz') else 'OCP'})")
    if hw.sparse.nm:
        lines.append(f"sparse tensor unit: {', '.join(f'{n}:{m}' for n, m in hw.sparse.nm)}")
    rows = [
        [unit, dtype, si(rate, unit="FLOP/s"), f"{rate / hw.bandwidth:.3g}"]
        for unit in hw.units
        for dtype, rate in sorted(hw.peak[unit].items(), key=lambda kv: -kv[1])
    ]
    table = tabulate.tabulate(
        rows, headers=["unit", "dtype", "peak", "ridge point (FLOP/B)"], tablefmt="pipe", disable_numparse=True
    )
    return "\n".join(lines) + "\n\n" + str(table)
