"""A file written whole or not at all: a failure at any step leaves an existing file byte-identical
and no temporary file beside it; permissions kept, symlinks followed, devices written in place."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pytest

from opcount.files import encoded, printable, save_figure, write_bytes, write_text
from opcount.files import write as write_module

OLD = b'{"kept": true}\n'


def _fail(*args: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def _interrupt(*args: object) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize(("step", "failure"), [("fsync", _fail), ("replace", _fail), ("replace", _interrupt)])
def test_a_failed_write_leaves_the_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str, failure: object
) -> None:
    target = tmp_path / "report.json"
    target.write_bytes(OLD)
    monkeypatch.setattr(write_module.os, step, failure)
    with pytest.raises((OSError, KeyboardInterrupt)):
        write_text(target, '{"new": 1}\n' * 1000)
    monkeypatch.undo()
    assert target.read_bytes() == OLD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no temporary file left


def test_a_write_that_fails_part_way_leaves_the_file_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a full disk: the first block is written, the next one is refused
    target = tmp_path / "report.csv"
    target.write_bytes(OLD)
    real_fdopen = os.fdopen

    class HalfFull:
        def __init__(self, stream: object) -> None:
            self.stream = stream

        def __enter__(self) -> HalfFull:
            return self

        def __exit__(self, *exc: object) -> None:
            self.stream.close()  # type: ignore[attr-defined]

        def write(self, data: bytes) -> int:
            self.stream.write(data[: len(data) // 2])  # type: ignore[attr-defined]
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(write_module.os, "fdopen", lambda fd, mode: HalfFull(real_fdopen(fd, mode)))
    with pytest.raises(OSError, match="No space left"):
        write_text(target, "name,macs\n" * 10_000)
    assert target.read_bytes() == OLD
    assert [p.name for p in tmp_path.iterdir()] == ["report.csv"]


def test_the_whole_text_replaces_the_file(tmp_path: Path) -> None:
    target = tmp_path / "report.txt"
    target.write_bytes(OLD * 100)  # longer than what replaces it: nothing of it is left
    assert write_text(target, "short\n") == target
    assert target.read_bytes() == b"short\n"


def test_an_existing_file_keeps_its_permissions(tmp_path: Path) -> None:
    target = tmp_path / "report.txt"
    target.write_bytes(OLD)
    target.chmod(0o640)
    write_text(target, "new\n")
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_a_new_file_gets_the_umask_permissions(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_text(tmp_path / "new.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o644  # 0o666 less the umask, as open() gives


def test_a_symlink_is_followed_and_stays_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_bytes(OLD)
    link = tmp_path / "link.json"
    link.symlink_to(real.name)
    assert write_text(link, "new\n") == real
    assert link.is_symlink() and real.read_text() == "new\n"


def test_a_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link = tmp_path / "link.json"
    link.symlink_to("made.json")  # as a shell's > does
    write_text(link, "new\n")
    assert link.is_symlink() and (tmp_path / "made.json").read_text() == "new\n"


def test_a_device_is_written_in_place() -> None:
    assert write_text(os.devnull, "discarded\n") == Path(os.devnull).resolve()
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)  # not replaced by a regular file


def test_a_lone_surrogate_is_written_as_its_escape(tmp_path: Path) -> None:
    # Python decodes a file name that is not UTF-8 into lone surrogates (os.fsdecode)
    name = os.fsdecode(b"bad\xffname")
    assert encoded(name) == b"bad\\udcffname"
    assert printable(name, "utf-8") == "bad\\udcffname"
    assert printable("caf\u00e9", "ascii") == "caf\\xe9"
    target = tmp_path / "x.json"
    write_text(target, json.dumps({"name": name}, ensure_ascii=False))
    assert json.loads(target.read_text(encoding="utf-8")) == {"name": name}  # the escape reads back as the name


def test_a_figure_is_drawn_before_the_file_is_touched(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    class Broken(Figure):
        def savefig(self, *args: object, **kwargs: object) -> None:
            raise RuntimeError("drawing failed")

    target = tmp_path / "chart.png"
    target.write_bytes(OLD)
    with pytest.raises(RuntimeError):
        save_figure(Broken(), target)
    assert target.read_bytes() == OLD
    fig = Figure()
    fig.add_subplot().plot([1, 2])
    save_figure(fig, target)
    assert target.read_bytes().startswith(b"\x89PNG")
    save_figure(fig, tmp_path / "chart.svg")
    assert b"<svg" in (tmp_path / "chart.svg").read_bytes()
    write_bytes(target, b"raw")
    assert target.read_bytes() == b"raw"
