"""Metrics and events to the database, in batches, from the main rank only.

Rows are ``(step, tokens, flops, name, value)`` as ``db.Store.log_metrics`` takes them; they are
buffered and written every ``flush_rows`` rows or ``flush_seconds`` seconds, and whenever the
loop asks (evaluation, checkpoint, end, failure). A heartbeat goes with the flushes at most
every ``heartbeat_seconds`` so the orchestrator can tell a live run from a dead one.
"""

from __future__ import annotations

import math
import time
from typing import Any, Optional


class Recorder:
    def __init__(
        self,
        store: Optional[Any],
        key: str,
        flops_per_token: float,
        *,
        sweep: Optional[str] = None,
        flush_rows: int = 500,
        flush_seconds: float = 10.0,
        heartbeat_seconds: float = 30.0,
    ) -> None:
        self.store = store
        self.key = key
        self.sweep = sweep  # disambiguates a key registered in several sweeps
        self.flops_per_token = flops_per_token
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.rows: list[tuple[int, int, float, str, float]] = []
        self._last_flush = time.monotonic()
        self._last_heartbeat = -math.inf

    def metric(self, step: int, tokens: int, name: str, value: float) -> None:
        if self.store is None or value is None or not math.isfinite(value):
            return
        self.rows.append((step, tokens, tokens * self.flops_per_token, name, float(value)))
        if len(self.rows) >= self.flush_rows or time.monotonic() - self._last_flush >= self.flush_seconds:
            self.flush()

    def event(self, step: int, kind: str, detail: dict[str, Any] | None = None) -> None:
        if self.store is not None:
            self.flush()
            self.store.log_event(self.key, step, kind, detail or {}, sweep=self.sweep)

    def flush(self) -> None:
        if self.store is None:
            return
        if self.rows:
            self.store.log_metrics(self.key, self.rows, sweep=self.sweep)
            self.rows = []
        now = time.monotonic()
        self._last_flush = now
        if now - self._last_heartbeat >= self.heartbeat_seconds:
            self.store.heartbeat(self.key, sweep=self.sweep)
            self._last_heartbeat = now
