"""Progress of a long command-line run: one status line on stderr, drawn by tqdm.

The line shows the step under way (``roofline on h100-sxm``) and the time since the run began.
It is drawn only on a terminal: piped or redirected, stderr gets nothing from it, and stdout
never does. tqdm is imported only then, so a run in a pipeline pays nothing for it.

A step can be one long call into torch (a trace), during which nothing else runs to redraw the
line; a daemon thread refreshes it twice a second under tqdm's own lock so the clock keeps
moving. Closing stops the thread and erases the line, so warnings and the output that follow
start on a clean line.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = ["Progress"]

_REFRESH_S = 0.5


class Progress:
    """``update(text)`` names the step under way; ``close()`` erases the line. With ``enabled``
    None the line is drawn only when ``stream`` is a terminal; False never draws it."""

    def __init__(self, stream: TextIO, *, enabled: bool | None = None) -> None:
        self._stream = stream
        self._enabled = _is_terminal(stream) if enabled is None else enabled
        self._bar: tqdm | None = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self._enabled

    def update(self, text: str) -> None:
        if not self._enabled:
            return
        if self._bar is not None:
            self._bar.set_description_str(text)  # redraws at once
            return
        from tqdm import tqdm

        self._bar = tqdm(
            desc=text,
            total=None,
            file=self._stream,
            bar_format="{desc} {elapsed}",
            leave=False,  # erased on close
            dynamic_ncols=True,
        )
        self._ticker = threading.Thread(target=self._tick, name="opcount-progress", daemon=True)
        self._ticker.start()

    def _tick(self) -> None:
        bar = self._bar
        while bar is not None and not self._stop.wait(_REFRESH_S):
            bar.refresh()

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
