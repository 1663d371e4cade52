"""What an analysis' N, D and C count, stated once (:class:`Conventions`): the one typed value the
loss laws, a summary of them and an :class:`~scaling.fitting.analysis.Analysis` carry, with the flat JSON
form fits have always been stored in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Optional

from scaling.accounting import FLOPS_PER_PARAM_TOKEN
from scaling.errors import FitError

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from scaling.fitting.core.measurements import FitData


@dataclass(frozen=True)
class Conventions:
    """What an analysis' N, D and C count, stated once: the parameters N counts (``non_embedding`` or
    ``total``), the FLOPs convention, k in C = k N D, and how the data's tokens were counted (effective
    data, its R*s) and its hyperparameter groups read. Stored as the flat mapping analyses have always
    stored (:meth:`to_json`), so that any stored analysis reads back (:meth:`from_json`)."""

    params: str = "non_embedding"
    flops: str = "6N"
    #: FLOPs per parameter per token.
    k: float = FLOPS_PER_PARAM_TOKEN
    effective_data: bool = False
    unique_tokens: Optional[float] = None
    unique_tokens_column: Optional[str] = None
    #: R*_D and R*_N of effective data where they are not the defaults, and their fits where fitted.
    r_star_D: Optional[float] = None
    r_star_N: Optional[float] = None
    r_star_fits: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: How the hyperparameter groups were read (:data:`scaling.fitting.hyperparams.hparams.MODES`).
    hparams: Optional[str] = None
    #: A sweep of mixtures of experts: what N counts (active parameters), C's formula, and where its
    #: sparsity and granularity come from (stored under ``N``, ``C``, ``sparsity``, ``granularity``).
    n_counts: Optional[str] = None
    c_formula: Optional[str] = None
    sparsity: Optional[str] = None
    granularity: Optional[str] = None

    @classmethod
    def of(cls, data: "FitData") -> "Conventions":
        """The conventions ``data`` were read in."""
        return cls.from_json(data.conventions())

    def to_json(self) -> dict[str, Any]:
        """The stored form: ``params``, ``flops``, ``flops_per_param_token``, ``effective_data``,
        ``unique_tokens``, then the others only where stated."""
        out: dict[str, Any] = {"params": self.params, "flops": self.flops, "flops_per_param_token": self.k,
                               "effective_data": self.effective_data, "unique_tokens": self.unique_tokens}
        optional = {"unique_tokens_column": self.unique_tokens_column, "r_star_D": self.r_star_D,
                    "r_star_N": self.r_star_N, "r_star_fits": dict(self.r_star_fits) or None, "hparams": self.hparams,
                    "N": self.n_counts, "C": self.c_formula, "sparsity": self.sparsity, "granularity": self.granularity}
        return out | {key: value for key, value in optional.items() if value is not None}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Conventions":
        """:meth:`to_json` read back; a stored mapping without a field (an older analysis) takes its default,
        a key this version does not know is left out."""
        if not isinstance(d, Mapping):
            raise FitError(f"stored conventions must be a mapping, not {type(d).__name__}")

        def opt(key: str, kind: type) -> Any:
            return None if d.get(key) is None else kind(d[key])

        return cls(params=str(d.get("params") or cls.params), flops=str(d.get("flops") or cls.flops),
                   k=float(d.get("flops_per_param_token") or FLOPS_PER_PARAM_TOKEN),
                   effective_data=bool(d.get("effective_data", False)), unique_tokens=opt("unique_tokens", float),
                   unique_tokens_column=opt("unique_tokens_column", str), r_star_D=opt("r_star_D", float),
                   r_star_N=opt("r_star_N", float), r_star_fits=dict(d.get("r_star_fits") or {}),
                   hparams=opt("hparams", str), n_counts=opt("N", str), c_formula=opt("C", str),
                   sparsity=opt("sparsity", str), granularity=opt("granularity", str))
