"""Hardware for the roofline, by name: the presets, ``"local"`` (this machine, measured), a
TOML/JSON file, or a :class:`Hardware` as is.

The record itself is :mod:`opcount.hardware.spec`, the datasheet figures
:mod:`opcount.hardware.presets` (sources in docs/hardware.md); both are importable from here.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from ..errors import OpcountError
from .presets import PRESETS
from .spec import TENSOR, VECTOR, DType, G, Hardware, T, dtype_name

__all__ = [
    "ALIASES",
    "LOCAL",
    "PRESETS",
    "RETIRED",
    "TENSOR",
    "VECTOR",
    "DType",
    "G",
    "Hardware",
    "T",
    "UnknownHardwareError",
    "dtype_name",
    "hardware",
]

ALIASES = {"h100": "h100-sxm", "h200": "h200-sxm", "a100": "a100-sxm", "4090": "rtx-4090", "nvdla": "nvdla-full"}
# Names that once meant something else, with what to use instead: an error, not a guess.
RETIRED = {"cpu": "'xeon-8480-2s' (2 x Intel Xeon Platinum 8480+) or 'local' (measures this machine)"}
LOCAL = "local"


class UnknownHardwareError(OpcountError, LookupError):
    """No preset has that name and no such file exists; the message suggests the closest names."""


def hardware(name_or_path: str | Path | Hardware, *, recalibrate: bool = False) -> Hardware:
    """A preset by name (case and ``_``/``-`` insensitive), ``"local"``, a TOML/JSON file, or a Hardware as is.

    ``"local"`` measures this machine's device (the GPU when torch sees one, else the CPU;
    ``"local:cpu"`` / ``"local:cuda"`` choose) once and caches the result, see
    :mod:`opcount.hardware.calibrate`; ``recalibrate=True`` measures again.
    """
    if isinstance(name_or_path, Hardware):
        return name_or_path
    text = str(name_or_path)
    key = text.strip().lower().replace("_", "-").replace(" ", "-")
    key = ALIASES.get(key, key)
    if key in PRESETS:
        return PRESETS[key]
    if key == LOCAL or key.startswith(LOCAL + ":"):
        from .calibrate import local_hardware  # imports torch: only when asked

        return local_hardware(key.partition(":")[2] or None, recalibrate=recalibrate)
    path = Path(text)
    if path.suffix.lower() in (".toml", ".json") or path.is_file():
        if path.is_dir():
            raise IsADirectoryError(f"hardware file {text!r} is a folder: name the .toml or .json file in it")
        if not path.is_file():
            raise FileNotFoundError(f"no hardware file {text!r}")
        return Hardware.from_file(path)
    raise UnknownHardwareError(_unknown(text, key))


def _unknown(text: str, key: str) -> str:
    if key in RETIRED:
        return f"unknown hardware {text!r}: use {RETIRED[key]}"
    names = sorted([*PRESETS, *ALIASES, LOCAL])
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return (
        f"unknown hardware {text!r}: {hint}choose one of {', '.join(sorted(PRESETS))}, local (aliases: "
        f"{', '.join(f'{a}={n}' for a, n in sorted(ALIASES.items()))}) or give a .toml/.json file"
    )
