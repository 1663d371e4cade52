"""Time spent in a run's training steps, for its throughput and MFU, without waiting for the device."""

from __future__ import annotations

import time
from typing import Any

import torch


class StepTimer:
    """Time spent in training steps, without waiting for the device at every step.

    On a GPU each step is bracketed by CUDA events, read only when the time is taken (at a
    logged step); on the CPU the wall clock is exact as it is."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.tokens = 0
        self.seconds = 0.0
        self.events: list[tuple[Any, Any]] = []
        self._begin: Any = None

    def start(self) -> None:
        if self.cuda:
            self._begin = torch.cuda.Event(enable_timing=True)
            self._begin.record()
        else:
            self._begin = time.perf_counter()

    def stop(self, tokens: int) -> None:
        self.tokens += tokens
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.events.append((self._begin, end))
        else:
            self.seconds += time.perf_counter() - self._begin

    def take(self) -> tuple[int, float]:
        """(tokens, seconds) since the last take, and start again."""
        if self.events:
            self.events[-1][1].synchronize()
            self.seconds += sum(a.elapsed_time(b) for a, b in self.events) / 1000.0
        out = (self.tokens, self.seconds)
        self.tokens, self.seconds, self.events = 0, 0.0, []
        return out
