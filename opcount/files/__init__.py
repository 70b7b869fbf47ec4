"""Files opcount reads and writes on a user's behalf: a file written whole or not at all
(:mod:`.write`), a JSON or TOML file read within a size cap, every failure one line naming it
(:mod:`.read`)."""

from .read import MAX_READ_BYTES, parse_json, parse_toml, read_text
from .write import encoded, printable, save_figure, write_bytes, write_text

__all__ = [
    "MAX_READ_BYTES",
    "encoded",
    "parse_json",
    "parse_toml",
    "printable",
    "read_text",
    "save_figure",
    "write_bytes",
    "write_text",
]
