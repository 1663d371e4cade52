"""Clean-up that a second Ctrl-C must not cut short.

After the first Ctrl-C (or SIGTERM) the sweep marks its running runs interrupted and shuts its
Ray down. A user pressing Ctrl-C again, as people do, would otherwise interrupt that clean-up
half-way: runs left `running` until their heartbeat goes stale, Ray's agents left alive, and an
exit without the "interrupted" line.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


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
