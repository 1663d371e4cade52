"""Clean-up that a second Ctrl-C must not cut short.

After the first Ctrl-C (or SIGTERM) the sweep marks its running runs interrupted and shuts its
Ray down. A user pressing Ctrl-C again, as people do, would otherwise interrupt that clean-up
half-way: runs left `running` until their heartbeat goes stale, Ray's agents left alive, and an
exit without the "interrupted" line.

Starting Ray must not be cut short either: a Ctrl-C inside ``ray.init`` left a half-started Ray
(its core worker connecting, its processes starting) that nothing shut down, and the interpreter's
exit then tore it down under Ray's own threads (a crash after "interrupted"). So the start runs
with Ctrl-C deferred (:func:`deferred_interrupts`): Ray is either fully up, and shut down by the
sweep's clean-up, or not started.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold SIGINT and SIGTERM during the block and raise KeyboardInterrupt after it when one came
    (main thread only), so the block completes and whoever called it cleans up as for any Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def remember(signum: int, frame: object) -> None:
        received.append(signum)

    previous = {sig: signal.signal(sig, remember) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:
        raise KeyboardInterrupt


@contextlib.contextmanager
def uninterrupted() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM for the block, then restore their handlers (main thread only,
    where Python runs signal handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
