"""What the ``lsmstore`` command prints: aligned tables (colour on a terminal) or JSON.

Every command hands its result to :class:`Output` as plain data (dicts, lists); with
``--output json`` that data is printed as one JSON document on stdout, otherwise as a
table or ``key: value`` lines.  Messages and progress go to stderr, so stdout stays
parseable.  Colour follows the terminal (``--no-color`` or ``NO_COLOR`` turn it off).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

FORMATS = ("table", "json")


class StdoutClosed(Exception):
    """The reader of stdout went away (``| head -1``): the command stops, quietly and
    successfully.  (Not an OSError, which click would turn into exit status 1.)"""


@contextmanager
def _stdout_closed_is_done() -> Iterator[None]:
    try:
        yield
    except BrokenPipeError as e:
        raise StdoutClosed() from e


def timestamp(epoch: float | int | None) -> str:
    if not epoch:
        return ""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


class BinarySpeedColumn(ProgressColumn):
    """Transfer speed in the units the summary line uses (KiB/s, MiB/s)."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        shown = "?" if speed is None else f"{human_size(int(speed))}/s"
        return Text(shown, style="progress.data.speed")


class Output:
    """The printer of one command run."""

    def __init__(
        self, fmt: str = "table", *, color: bool | None = None, progress: bool | None = None
    ) -> None:
        self.json = fmt == "json"
        no_color = color is False
        plain: dict[str, Any] = {"color_system": None} if no_color else {}  # no ANSI at all
        # Off a terminal, never wrap: a table row stays one line for grep/awk.
        self.console = Console(
            no_color=no_color,
            highlight=False,
            soft_wrap=False,
            width=None if sys.stdout.isatty() else 100_000,
            **plain,
        )
        self.err = Console(stderr=True, no_color=no_color, highlight=False, **plain)
        self.show_progress = self.err.is_terminal if progress is None else progress
        if progress and not self.err.is_terminal:
            self.err = Console(
                stderr=True, no_color=no_color, highlight=False, force_terminal=True, width=120
            )

    # --- results -----------------------------------------------------------------------

    def emit_json(self, data: Any) -> None:
        with _stdout_closed_is_done():
            sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
            sys.stdout.flush()

    def table(
        self,
        rows: Sequence[Mapping[str, Any]],
        columns: Sequence[str],
        *,
        headers: Sequence[str] | None = None,
        styles: Mapping[str, str] | None = None,
        data: Any = None,
    ) -> None:
        """Rows as an aligned table, or (JSON) ``data`` if given, else the rows."""
        if self.json:
            self.emit_json(list(rows) if data is None else data)
            return
        t = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
        styles = styles or {}
        for i, col in enumerate(columns):
            t.add_column(
                (headers[i] if headers else col).upper(), style=styles.get(col), no_wrap=True
            )
        for row in rows:
            t.add_row(*(escape(_text(row.get(c))) for c in columns))
        if self.console.is_terminal:
            self.console.print(t)
            return
        with self.console.capture() as captured:  # off a terminal: no trailing blanks
            self.console.print(t)
        with _stdout_closed_is_done():
            sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
            sys.stdout.flush()

    def record(self, fields: Mapping[str, Any], *, data: Any = None) -> None:
        """One object as ``key: value`` lines, or (JSON) ``data`` if given, else it."""
        if self.json:
            self.emit_json(dict(fields) if data is None else data)
            return
        width = max((len(k) for k in fields), default=0)
        for k, v in fields.items():
            self.console.print(f"[bold]{escape(k).ljust(width)}[/bold]  {escape(_text(v))}")

    def lines(self, lines: Sequence[str], *, data: Any) -> None:
        """Pre-formatted lines (rich markup allowed), or (JSON) ``data``."""
        if self.json:
            self.emit_json(data)
            return
        for line in lines:
            self.console.print(line)

    def done(self, message: str, *, data: Any) -> None:
        """The outcome of a command that changes something: a message, or (JSON) data."""
        if self.json:
            self.emit_json(data)
        else:
            self.console.print(message)

    def write_bytes(self, data: bytes) -> None:
        with _stdout_closed_is_done():
            sys.stdout.buffer.write(data)

    def warn(self, message: str) -> None:
        self.err.print(f"[yellow]warning:[/yellow] {escape(message)}")

    # --- progress ----------------------------------------------------------------------

    @contextmanager
    def transfer(self, description: str, *, total_bytes: int | None = None) -> Iterator[Tracker]:
        """Progress of a transfer of files and bytes (rate and ETA), on stderr."""
        if not self.show_progress:
            yield Tracker(None, None)
            return
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(binary_units=True),  # KiB/MiB, as human_size and the summary
            BinarySpeedColumn(),
            TextColumn("{task.fields[files]} files"),
            TimeRemainingColumn(),
            console=self.err,
            transient=False,
        )
        with progress:
            task = progress.add_task(description, total=total_bytes, files=0)
            yield Tracker(progress, task, by_bytes=True)

    @contextmanager
    def counting(self, description: str, *, total: int | None = None) -> Iterator[Tracker]:
        """Progress counted in items (M of N, ETA), on stderr."""
        if not self.show_progress:
            yield Tracker(None, None)
            return
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.err,
        )
        with progress:
            yield Tracker(progress, progress.add_task(description, total=total, files=0))

    @contextmanager
    def spinner(self, description: str) -> Iterator[None]:
        """A spinner with elapsed time for work of unknown length (a long commit)."""
        if not self.show_progress:
            yield
            return
        progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=self.err
        )
        with progress:
            progress.add_task(description, total=None)
            yield


class Tracker:
    """Advances one progress task (a no-op when progress is off)."""

    def __init__(
        self, progress: Progress | None, task: TaskID | None, *, by_bytes: bool = False
    ) -> None:
        self._progress = progress
        self._by_bytes = by_bytes
        self._task = task
        self.files = 0
        self.bytes = 0

    def advance(self, nbytes: int = 0, files: int = 0) -> None:
        self.files += files
        self.bytes += nbytes
        if self._progress is not None and self._task is not None:
            self._progress.update(
                self._task, advance=nbytes if self._by_bytes else files, files=self.files
            )

    def add_total(self, amount: int) -> None:
        if self._progress is not None and self._task is not None:
            task = self._progress.tasks[self._task]
            self._progress.update(self._task, total=(task.total or 0) + amount)


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)
