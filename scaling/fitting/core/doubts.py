"""Why a fitted law, accuracy curve or power law may not be trusted, as data.

A :class:`Doubt` is its message (a ``str``, so it prints, joins and is read as before) and its
:class:`DoubtKind`, which is what code decides on: whether a law is reliable (it has any doubt),
and whether a doubt concerns only its parameters (:attr:`DoubtKind.about_parameters`: the
recommendation may still use such a law where its bootstrap determines the answer). Rewording a
message changes nothing but the message.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Iterable


class DoubtKind(str, Enum):
    """What a doubt is about."""

    #: Too few points (or evaluations) per fitted parameter to test the law.
    FEW_POINTS = "few points"
    #: Too few FLOP budgets or sizes, or too narrow a span, to show how the law scales.
    COVERAGE = "coverage"
    #: The bootstrap shows the data do not determine a parameter (or the law at all).
    UNDETERMINED = "undetermined"
    #: The Fisher information at the optimum is near-singular.
    ILL_CONDITIONED = "ill-conditioned"
    #: A parameter sits at a bound of the fit.
    PINNED = "pinned"
    #: An estimate, or its interval, lies where the quantity cannot be.
    IMPLAUSIBLE = "implausible"
    #: A key quantity's interval reaches where it cannot be (an exponent's across 0 or 1).
    WIDE_INTERVAL = "wide interval"
    #: Too few bootstrap resamples could be refitted.
    BOOTSTRAP = "bootstrap"
    #: A curve's feature (a sigmoid's transition) lies far outside the measured range.
    OUT_OF_RANGE = "out of range"
    #: The groups do not identify the law (too few, too narrow, collinear variables).
    IDENTIFICATION = "identification"
    #: A part of a chain of laws could not be fitted.
    NOT_FITTED = "not fitted"
    #: A form fits the data clearly worse than another form fitted to the same data.
    MISFIT = "misfit"
    #: A stored fit judged unreliable whose doubts were stored without their kinds.
    STORED = "stored"

    @property
    def about_parameters(self) -> bool:
        """Whether the doubt is about the law's parameters only, not its design or plausibility."""
        return self in PARAMETER_KINDS


#: The kinds that doubt a law's parameters (not identified, pinned, near-singular), as opposed to
#: its design (too few points or budgets) or its plausibility, which stay verdicts.
PARAMETER_KINDS = frozenset({DoubtKind.UNDETERMINED, DoubtKind.ILL_CONDITIONED, DoubtKind.PINNED})


class Doubt(str):
    """One doubt: the message, as a string, with its :attr:`kind`."""

    kind: DoubtKind

    def __new__(cls, kind: DoubtKind | str, message: str) -> "Doubt":
        self = super().__new__(cls, message)
        self.kind = DoubtKind(kind)
        return self

    @property
    def message(self) -> str:
        return str.__str__(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Doubt, (self.kind, self.message))

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind.value, "message": self.message}

    @classmethod
    def from_dict(cls, d: Any) -> "Doubt":
        if isinstance(d, dict):
            try:
                return cls(str(d.get("kind")), str(d.get("message", "")))
            except ValueError:
                return cls(DoubtKind.STORED, str(d.get("message", "")))
        return cls(DoubtKind.STORED, str(d))


def restore(stored: Any, reliable: Any = True, why: str = "") -> list[Doubt]:
    """Doubts from their stored form; a record without them that was stored as unreliable keeps one
    doubt of kind :attr:`DoubtKind.STORED` saying so (``why``: its message)."""
    if isinstance(stored, list):
        return [Doubt.from_dict(d) for d in stored]
    if reliable is False:
        return [Doubt(DoubtKind.STORED, why or "unreliable: the stored fit was judged unreliable")]
    return []


def relink(notes: list[str], doubts: list[Doubt]) -> list[str]:
    """Stored notes with each doubt's own message replaced by that doubt (the same object), so that
    :meth:`Doubtful.drop_doubts` removes both; a doubt whose message is not among them is added."""
    waiting = list(doubts)
    out: list[str] = []
    for note in notes:
        match = next((d for d in waiting if d.message == note), None)
        if match is not None:
            waiting.remove(match)
        out.append(note if match is None else match)
    return out + [d for d in waiting if d.kind is not DoubtKind.STORED]


def stored(doubts: Iterable[Doubt]) -> list[dict[str, str]]:
    """The JSON form of ``doubts``."""
    return [d.to_dict() if isinstance(d, Doubt) else Doubt(DoubtKind.STORED, str(d)).to_dict() for d in doubts]


class Doubtful:
    """A fitted object whose doubts are kept in ``doubts_`` and whose messages also read in ``notes_``."""

    notes_: list[str]
    doubts_: list[Doubt]

    def add_doubt(self, kind: DoubtKind, message: str) -> Doubt:
        """Record a doubt; its message joins the notes, where it is printed among them."""
        doubt = Doubt(kind, message)
        if not hasattr(self, "doubts_"):
            self.doubts_ = []
        if not hasattr(self, "notes_"):
            self.notes_ = []
        self.doubts_.append(doubt)
        self.notes_.append(doubt)
        return doubt

    def drop_doubts(self, *kinds: DoubtKind) -> None:
        """Forget the doubts of ``kinds`` (a bootstrap rerun judges them afresh), and their notes."""
        gone = [d for d in getattr(self, "doubts_", []) if d.kind in kinds]
        if not gone:
            return
        self.doubts_ = [d for d in self.doubts_ if d.kind not in kinds]
        ids = {id(d) for d in gone}
        self.notes_ = [n for n in self.notes_ if id(n) not in ids]

    def doubts(self) -> list[Doubt]:
        """Why the data cannot pin this down (empty when nothing doubts it)."""
        return list(getattr(self, "doubts_", None) or [])

    def reliable(self) -> bool:
        """True when nothing doubts it."""
        return not self.doubts()
