"""A config or hardware file read within a size cap, every failure one line naming the file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from opcount.errors import OpcountValueError
from opcount.files import MAX_READ_BYTES, parse_json, parse_toml, read_text


def _refused(path: Path, parse: str = "json") -> str:
    with pytest.raises(OpcountValueError) as caught:
        text = read_text(path)
        (parse_json if parse == "json" else parse_toml)(text, path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{path}: "), message
    return message


def test_the_cap_is_16_mib() -> None:
    assert MAX_READ_BYTES == 16 * 1024 * 1024


def test_a_file_over_the_cap_is_refused_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "config.json"
    with open(big, "wb") as f:  # sparse: 2 GiB of size, no disk used
        f.truncate(2 * 2**30)
    assert "2,147,483,648 bytes, more than the 16 MiB a config file may hold (the limit)" in _refused(big)


def test_a_file_just_under_the_cap_is_read(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"a": "' + "x" * (MAX_READ_BYTES - 10) + '"}')
    assert len(parse_json(read_text(path), path)["a"]) == MAX_READ_BYTES - 10


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 200_000 + "]" * 200_000, "not valid JSON: nested too deep to read"),
        ('{"vocab_size": ' + "9" * 5000 + "}", "not valid JSON: an integer of more than 4,300 digits"),
        ('{"vocab_size": }', "not valid JSON: Expecting value at line 1 column 16"),
    ],
)
def test_what_the_parser_cannot_read_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    assert _refused(path) == f"{path}: {message}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a = " + "[" * 200_000 + "]" * 200_000, "not valid TOML: nested too deep to read"),
        ("a = " + "9" * 5000, "not valid TOML: an integer of more than 4,300 digits"),
        ("a = ", "not valid TOML: Invalid value (at end of document)"),
    ],
)
def test_what_the_toml_parser_cannot_read_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "device.toml"
    path.write_text(text)
    assert _refused(path, "toml") == f"{path}: {message}"


def test_a_binary_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b'{"a": "\xff"}')
    assert _refused(path) == f"{path}: not a text file (invalid start byte at byte 7)"


def test_what_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    assert _refused(tmp_path) == f"{tmp_path}: not a regular file"
    assert _refused(Path(os.devnull)) == f"{os.devnull}: not a regular file"  # /dev/zero would never end
    missing = tmp_path / "missing.json"
    assert _refused(missing) == f"{missing}: cannot read it (No such file or directory)"
