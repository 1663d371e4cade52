"""A rich progress bar on stderr, shown only when asked (commands ask when stderr is a terminal)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator


@contextmanager
def progress_bar(show: bool) -> Iterator[Any]:
    """A ``rich.progress.Progress`` that draws on stderr when ``show`` and is silent otherwise."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

    with Progress(
        TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeRemainingColumn(),
        console=Console(stderr=True), disable=not show, transient=True,
    ) as bar:
        yield bar
