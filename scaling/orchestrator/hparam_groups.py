"""A grid block's ``hparams``: every point of the block trained once per combination of learning
rate, batch and beta2, its runs one group.

``hparams: {lr: [1e-3, 3e-3, 1e-2], batch_tokens: {from: rule, factors: [0.5, 1, 2]}}`` lists a
field's values, or multiples of what the plan's rule gives that field at each point. A field not
listed keeps the point's own value (from ``rules``, else ``train``). The runs of one point share a
label (:func:`scaling.naming.group_label`), stored with each run, so a notebook or a fit of the best learning
rate and batch per point can take them together. This module is the schema and the pure
arithmetic; the expansion (`scaling.orchestrator.expand`) places and keys the runs.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Optional, Sequence, Union

from pydantic import ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from scaling import fmt
from scaling.accounting import whole_sequences
from scaling.errors import FieldProblem
from scaling.rules import HPARAM_CHECKS
from scaling.schema import StrictModel

#: The hyperparameters a block may sweep, each a field of the run spec (so each changes the key).
HPARAMS = ("lr", "batch_tokens", "beta2")
#: The fields a plan's ``rules`` may set, around which ``factors`` are taken.
RULED = ("lr", "batch_tokens")
#: Values (or factors) one field may list; the plan's run bound caps the product of all of them.
MAX_VALUES = 1000
#: How far a point's D may move to be whole batches of every batch it is trained with.
MAX_ROUNDING = 0.05
#: Largest factor of a rule (and smallest, its inverse): beyond it a learning rate or batch is no
#: longer a number a run can take.
MAX_FACTOR = 1e6


class HparamValueError(ValueError):
    """A sweep with no usable runs at one point; ``field`` names the hyperparameter."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class _Strict(StrictModel):
    """The ``hparams`` block's sections (:class:`scaling.schema.StrictModel`)."""


class Factors(_Strict):
    """``{from: rule, factors: [0.25, 0.5, 1, 2, 4]}``: multiples of the rule's value at each point."""

    # Written back as ``from`` (a stored plan reloads), read as either name.
    model_config = ConfigDict(**_Strict.model_config, validate_by_name=True, serialize_by_alias=True)
    source: Literal["rule"] = Field(alias="from", description="what the factors multiply: the plan's rule")
    factors: tuple[float, ...] = Field(description="multiples of the rule's value, each a run")

    @field_validator("factors", mode="before")
    @classmethod
    def _usable(cls, value: object) -> object:
        return _numbers(value, lambda v: 1 / MAX_FACTOR <= v <= MAX_FACTOR,
                        f"a factor must lie between {1 / MAX_FACTOR:g} and {MAX_FACTOR:g}", "factors: ")


def _number(value: object) -> float:
    """A YAML number (or text spelling one: YAML 1.1 reads ``1e-3`` as text); bools and NaN refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{value!r} is not a number")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a number") from None
    if not math.isfinite(number):
        raise ValueError(f"{value!r} is not a finite number")
    return number


def _numbers(value: object, ok: Callable[[float], bool], why: str, what: str = "") -> tuple[float, ...]:
    """``value`` as a tuple of distinct numbers each passing ``ok``; a ValueError naming the first
    problem (``what`` prefixes it where the error's place does not name the list)."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{what}expected a list of values, or {{from: rule, factors: [...]}}, not {value!r}")
    if not value:
        raise ValueError(f"{what}an empty list sweeps nothing; give at least two values")
    if len(value) > MAX_VALUES:
        raise ValueError(f"{what}{len(value)} values, more than {MAX_VALUES}")
    out: list[float] = []
    for i, item in enumerate(value):
        try:
            number = _number(item)
        except ValueError as exc:
            raise ValueError(f"{what}item {i}: {exc}") from None
        if not ok(number):
            raise ValueError(f"{what}item {i} is {item}: {why}")
        out.append(number)
    problem = coincidence_problem(value, out)
    if problem:
        raise ValueError(f"{what}{problem}")
    return tuple(out)


def coincidence_problem(items: Sequence[object], values: list[float]) -> Optional[str]:
    """Why two of ``values`` (``items`` as written) cannot both be swept: one listed twice, or two
    equal to :data:`SIGNIFICANT` significant digits (they would differ by rounding alone and print
    alike); None when every value is its own. A grid's tokens and budgets follow the same rule."""
    seen: dict[str, int] = {}
    for i, number in enumerate(values):
        j = seen.setdefault(_digits(number), i)
        if j == i:
            continue
        if values[j] == number:
            return f"{items[i]} is listed twice"
        return (f"items {j} and {i} ({items[j]} and {items[i]}) are equal to {SIGNIFICANT} significant digits: "
                "the runs would differ by rounding alone, and print alike")
    return None


#: Values of one swept field must differ within this many significant digits (what `scaling plan` prints).
SIGNIFICANT = 6


def _digits(number: float) -> str:
    """``number`` to :data:`SIGNIFICANT` significant digits, as text (equal text: indistinguishable values)."""
    return f"{number:.{SIGNIFICANT}g}"


Sweep = Union[tuple[float, ...], Factors]


class HparamsPlan(_Strict):
    """A grid block's hyperparameter sweep: values per field, or factors of the field's rule."""

    lr: Optional[Sweep] = Field(default=None, description="learning rates, or factors of rules.lr")
    batch_tokens: Optional[Sweep] = Field(default=None,
                                          description="batches in tokens, or factors of rules.batch_tokens")
    beta2: Optional[Sweep] = Field(default=None, description="AdamW beta2 values")

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, value: object) -> object:
        if isinstance(value, dict):
            for key in value:
                if key not in HPARAMS:
                    raise ValueError(f"{key!r} is not a hyperparameter a sweep can vary (use {', '.join(HPARAMS)})")
            if all(v is None for v in value.values()):
                raise ValueError(f"hparams names no hyperparameter to sweep (use {', '.join(HPARAMS)})")
        return value

    @field_validator("lr", "batch_tokens", "beta2", mode="before")
    @classmethod
    def _values_or_factors(cls, value: object, info: ValidationInfo) -> object:
        field = info.field_name
        if value is None:
            return None
        if isinstance(value, dict):
            if field not in RULED:
                raise ValueError(f"{field} has no rule to take factors of (rules sets {' and '.join(RULED)}): "
                                 "list its values")
            try:
                return Factors.model_validate(value)
            except ValidationError as exc:
                problem = FieldProblem(exc)
                where, msg = problem.path, problem.message
                if problem.kind == "extra_forbidden":
                    msg = "unknown field (use from and factors)"
                elif problem.kind == "missing":
                    msg = "required field is missing (the form is {from: rule, factors: [...]})"
                elif problem.kind == "literal_error":
                    msg = "factors are taken of the plan's rule: write from: rule"
                raise ValueError(f"{where}: {msg}" if where and not msg.startswith(where) else msg) from None
        ok, why = HPARAM_CHECKS[field]
        return _numbers(value, ok, why)

    @model_validator(mode="after")
    def _a_sweep(self) -> "HparamsPlan":
        if self.count == 1:
            one = ", ".join(f"{f} {_shown(getattr(self, f))}" for f in self.fields)
            raise ValueError(f"one combination ({one}) is a setting, not a sweep: set it in train or rules, "
                             "or list more values")
        return self

    @property
    def fields(self) -> tuple[str, ...]:
        """The fields swept, in :data:`HPARAMS` order."""
        return tuple(f for f in HPARAMS if getattr(self, f) is not None)

    @property
    def count(self) -> int:
        """Runs per point (before batches that round to the same whole sequences are merged)."""
        return math.prod(len(_items(getattr(self, f))) for f in self.fields)

    def factor_fields(self) -> tuple[str, ...]:
        """The fields given as factors of a rule (the plan must have that rule)."""
        return tuple(f for f in self.fields if isinstance(getattr(self, f), Factors))


def _items(sweep: Sweep) -> tuple[float, ...]:
    return sweep.factors if isinstance(sweep, Factors) else sweep


def _shown(sweep: Sweep) -> str:
    return f"{_items(sweep)[0]:g}" + (" x the rule" if isinstance(sweep, Factors) else "")


@dataclass(frozen=True)
class Combination:
    """One run of a point: its learning rate, batch (tokens, whole sequences) and beta2."""

    lr: float
    batch_tokens: int
    beta2: float

    def label(self, fields: Iterable[str]) -> str:
        """The swept fields' values, for a run's name (``lr=0.003,batch=4096``)."""
        shown = {"lr": f"lr={self.lr:.4g}", "batch_tokens": f"batch={self.batch_tokens}",
                 "beta2": f"beta2={self.beta2:g}"}
        return ",".join(shown[f] for f in fields)


def combinations(sweep: HparamsPlan, lr: float, batch_tokens: int, beta2: float, context: int) -> list[Combination]:
    """The runs of one point: every combination of the swept fields' values.

    ``lr``, ``batch_tokens`` and ``beta2`` are the point's own values (from the rules or the train
    section): a field not swept keeps its value, factors multiply it. A batch is rounded to whole
    sequences of ``context`` tokens (at least one); batches that round alike are one run. Raises
    :class:`HparamValueError` when a field's values are not usable here (a batch that is not
    whole sequences, or batch factors that all round to one batch).
    """
    values: dict[str, list[Any]] = {
        "lr": _values(sweep.lr, lr),
        "batch_tokens": _batches(sweep.batch_tokens, batch_tokens, context),
        "beta2": _values(sweep.beta2, beta2),
    }
    return [Combination(lr=a, batch_tokens=int(b), beta2=c) for a, b, c in itertools.product(*values.values())]


def _values(sweep: Optional[Sweep], own: float) -> list[float]:
    if sweep is None:
        return [own]
    if isinstance(sweep, Factors):
        return [own * f for f in sweep.factors]
    return list(sweep)


def _batches(sweep: Optional[Sweep], own: int, context: int) -> list[int]:
    """Batches in tokens, whole sequences: listed ones must be; a rule's multiples are rounded."""
    if sweep is None:
        return [own]
    if isinstance(sweep, Factors):
        rounded = [whole_sequences(own * f, context) for f in sweep.factors]
        kept = list(dict.fromkeys(rounded))
        if len(kept) < len(rounded) and len(kept) < 2:
            raise HparamValueError("batch_tokens", f"every factor of the rule's {own} tokens rounds to "
                                   f"{kept[0]} tokens (whole sequences of {context}): not a sweep")
        return kept
    for b in sweep:
        if int(b) % context:
            raise HparamValueError("batch_tokens", f"{int(b)} tokens is not a whole number of sequences of "
                                   f"{context} tokens")
    return [int(b) for b in sweep]


def common_tokens(D: float, batches: Iterable[int]) -> int:
    """D rounded up to whole batches of every one of ``batches``, so each combination of a point
    trains the same tokens (and compute): one point of the fits, not one per batch.

    Raises :class:`HparamValueError` when that moves D by more than :data:`MAX_ROUNDING` (batches
    whose least common multiple is large next to D: batches that divide one another avoid it).
    """
    batches = sorted(set(batches))
    step = math.lcm(*batches)
    tokens = math.ceil(D / step) * step
    if tokens > D * (1 + MAX_ROUNDING):
        raise HparamValueError("batch_tokens", f"D={fmt.count(D)} tokens is not close to a whole number of every batch "
                               f"({', '.join(map(str, batches))} tokens: {step} is the least common multiple): use "
                               "batches that divide one another (powers of two), or a larger D")
    return tokens


def group_rows(runs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The groups of a plan's runs (rows of `scaling plan`, with ``hparam_group``, ``lr``,
    ``batch_tokens``, ``beta2``, ``C_own`` and ``est_seconds``): each group's runs, the values it
    sweeps and its cost, in the order the groups first appear. Runs of no group are left out."""
    groups: dict[str, dict[str, Any]] = {}
    for r in runs:
        label = r.get("hparam_group")
        if label is None:
            continue
        g = groups.setdefault(label, {"group": label, "runs": 0, "lr": set(), "batch_tokens": set(), "beta2": set(),
                                      "C": 0.0, "est_seconds": 0.0})
        g["runs"] += 1
        for field in ("lr", "batch_tokens", "beta2"):
            g[field].add(r[field])
        g["C"] += r["C_own"]
        g["est_seconds"] += r["est_seconds"]
    return [{**g, **{f: sorted(g[f]) for f in ("lr", "batch_tokens", "beta2")}} for g in groups.values()]
