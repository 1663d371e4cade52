"""The scheduler's bookkeeping of its runs' states, kept up to date one change at a time.

Every change of a run's state goes through :meth:`Tally.moved` (``RunState.state``'s setter), so
the scheduler's loop and the live display touch only the runs an event concerns, never all of
them: how many runs are in each state, which are queued (in admission order), the compute of
the completed ones, and which runs changed since the display last looked. A sweep of 10,000
runs then costs per event what a sweep of 10 does.
"""

from __future__ import annotations

import bisect
from dataclasses import InitVar, dataclass, field
from typing import TYPE_CHECKING, Iterator, Optional

from scaling import vocab
from scaling.db.lifecycle import QUEUED, RESERVING, WAITING, check_transition

if TYPE_CHECKING:
    from scaling.orchestrator.expand import PlannedRun

#: States whose runs still have work to do.
PENDING_STATES = (QUEUED, RESERVING, WAITING)


class Tally:
    """Runs by state (each state's runs in the order they entered it), kept by the runs themselves."""

    def __init__(self) -> None:
        self.by_state: dict[str, dict[int, "RunState"]] = {}
        self.queued_order: list[int] = []  # indices of the queued runs, ascending: smallest first
        self.changed: dict[int, "RunState"] = {}  # since the last take_changed()
        self.total_flops = 0.0
        self.completed_flops = 0.0
        self.moves = 0  # state changes recorded (tests count these against events)

    def add(self, s: "RunState") -> None:
        self.total_flops += s.flops
        self._enter(s, s.state)

    def moved(self, s: "RunState", old: str, new: str) -> None:
        self.moves += 1
        self._leave(s, old)
        self._enter(s, new)

    def count(self, *states: str) -> int:
        return sum(len(self.by_state.get(state, ())) for state in states)

    def counts(self) -> dict[str, int]:
        return {state: len(runs) for state, runs in self.by_state.items() if runs}

    def runs(self, state: str) -> list["RunState"]:
        """The runs in ``state`` now, in the order they entered it (a copy: safe to change states meanwhile)."""
        return list(self.by_state.get(state, {}).values())

    def queued(self) -> Iterator["RunState"]:
        """Queued runs in admission order; a run that leaves the queue meanwhile is skipped."""
        queued = self.by_state.get(QUEUED, {})
        for index in list(self.queued_order):
            s = queued.get(index)
            if s is not None:
                yield s

    def take_changed(self) -> list["RunState"]:
        """The runs whose state changed since the last call (each once, in sweep order)."""
        changed = [self.changed[i] for i in sorted(self.changed)]
        self.changed.clear()
        return changed

    def _enter(self, s: "RunState", state: str) -> None:
        self.by_state.setdefault(state, {})[s.index] = s
        self.changed[s.index] = s
        if state == QUEUED:
            bisect.insort(self.queued_order, s.index)
        elif state == vocab.COMPLETED:
            self.completed_flops += s.flops

    def _leave(self, s: "RunState", state: str) -> None:
        self.by_state.get(state, {}).pop(s.index, None)
        if state == QUEUED:
            at = bisect.bisect_left(self.queued_order, s.index)
            if at < len(self.queued_order) and self.queued_order[at] == s.index:
                del self.queued_order[at]
        elif state == vocab.COMPLETED:
            self.completed_flops -= s.flops


@dataclass(eq=False)
class RunState:
    """What the driver knows about one run of the sweep.

    ``state`` is QUEUED, RESERVING, WAITING, or the run status it has reached; each change is
    one that :data:`scaling.db.lifecycle.TRANSITIONS` allows (any other raises), and is recorded
    in the scheduler's :class:`~scaling.orchestrator.tally.Tally`.
    """

    run: "PlannedRun"
    initial_state: InitVar[str] = QUEUED
    tally: Optional[Tally] = field(default=None, repr=False)
    index: int = 0  # position in the sweep (admission order: smallest first)
    attempt: Optional[int] = None
    started_at: Optional[float] = None
    step: int = 0
    loss: Optional[float] = None
    eval_loss: Optional[float] = None
    first_seen: Optional[tuple[float, int]] = None  # (time, step) when progress was first read
    failures: int = 0  # failed attempts, this sweep and earlier ones
    lost: int = 0
    error: Optional[str] = None
    skipped: bool = False  # completed before this sweep started
    launched_at: Optional[float] = None  # wall clock (time.time) when the task was submitted
    rank_sizes: Optional[list[int]] = None  # ranks per node bundle of a tp/pp run's reservation
    rank_nodes: Optional[list[str]] = None  # the node each rank goes to (tp/pp runs, see placement.py)
    overhead_s: Optional[float] = None  # submit -> task start plus task end -> collected
    flops: float = 0.0  # C, for the display's totals (set from the spec)

    def __post_init__(self, initial_state: str) -> None:
        self.flops = self.run.spec.flops
        self.current = initial_state
        if self.tally is not None:
            self.tally.add(self)

    @property
    def state(self) -> str:
        return self.current

    @state.setter
    def state(self, value: str) -> None:
        old = self.current
        if old == value:
            return
        self.current = check_transition(old, value)
        if self.tally is not None:
            self.tally.moved(self, old, value)

    @property
    def key(self) -> str:
        return self.run.key

    @property
    def steps(self) -> int:
        return self.run.spec.steps

    def eta_seconds(self, now: float) -> Optional[float]:
        if self.state != vocab.RUNNING or self.first_seen is None:
            return None
        t0, s0 = self.first_seen
        if self.step <= s0 or now <= t0:
            return None
        rate = (self.step - s0) / (now - t0)
        return max(0.0, (self.steps - self.step) / rate)
