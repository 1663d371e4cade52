"""What a recommendation says beside its numbers, as data: each note its text and its :class:`NoteKind`.

A :class:`Note` is its text (a ``str``, so it prints and joins as before) and its kind, which is
what code decides on (the closing answer leaves out the notes its other lines already say), as a
:class:`~scaling.fitting.core.doubts.Doubt` is for a fit. Rewording a note changes nothing but the note.
"""

from __future__ import annotations

from enum import Enum
from typing import Any


class NoteKind(str, Enum):
    """What a recommendation's note is about."""

    #: A law gives no compute-optimal point at the budget (its reason is in ``no_optimum``).
    NO_OPTIMUM = "no optimum"
    #: A law doubted only in its parameters whose bootstrap determines the answer at this budget.
    AT_BUDGET = "determined at budget"
    #: Which laws the choice, agreement and consensus leave out (each has its own line).
    LEFT_OUT = "left out"
    #: No law is reliable: no agreement or consensus.
    NO_CONSENSUS = "no consensus"
    #: How the concrete run was sized (the plan's rules, the defaults, and why).
    RUN = "run"
    #: Where the concrete run's lr and batch come from when the hyperparameter laws set neither.
    RUN_HPARAMS = "run hyperparameters"
    #: The runs worth adding: why none are suggested, or at which budget they were ranked.
    NEXT_RUNS = "next runs"
    #: The downstream tasks' predictions at the recommended run.
    TASKS = "tasks"
    #: What the data say about themselves (conventions, units, what was averaged or left out).
    DATA = "data"
    #: A warning about the input (units, conventions, dropped rows), printed as one.
    WARNING = "warning"
    #: How the loss laws treat the hyperparameter groups (their tuned loss or a fixed setting).
    HPARAM_MODE = "hyperparameter mode"
    #: A part of the analysis that could not be fitted, with why.
    NOT_FITTED = "not fitted"
    #: Anything else.
    OTHER = "other"


class Note(str):
    """One note: its text, as a string, with its :attr:`kind`."""

    kind: NoteKind

    def __new__(cls, kind: NoteKind | str, text: str) -> "Note":
        self = super().__new__(cls, text)
        self.kind = NoteKind(kind)
        return self

    @property
    def text(self) -> str:
        return str.__str__(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Note, (self.kind, self.text))

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind.value, "text": self.text}

    @classmethod
    def from_dict(cls, d: object) -> "Note":
        """A stored note; one stored as bare text, or of a kind no longer known, is of kind ``OTHER``."""
        if isinstance(d, dict):
            try:
                return cls(str(d.get("kind")), str(d.get("text", "")))
            except ValueError:
                return cls(NoteKind.OTHER, str(d.get("text", "")))
        return cls(NoteKind.OTHER, str(d))


def as_note(text: object, kind: NoteKind = NoteKind.OTHER) -> Note:
    """``text`` as a note (a note stays as it is)."""
    return text if isinstance(text, Note) else Note(kind, str(text))
