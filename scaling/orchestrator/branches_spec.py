"""The ``branches:`` section of a grid block (a module of its own: the plan schema imports it,
and :mod:`scaling.orchestrator.branches`, which expands it, reads the plan)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from scaling import fmt
from scaling.schema import StrictModel
from scaling.trainer.sections import MAX_STORED_INT


class BranchesPlan(StrictModel):
    """A grid block's branch points: the token budgets and how each branch cools down."""

    tokens: list[float] = Field(min_length=1, description="D of each branch")
    cooldown_fraction: float = Field(default=0.2, gt=0, lt=1, description="share of a branch's steps that decay")
    shape: Literal["linear", "1-sqrt"] = Field(default="linear", description="how the cooldown falls: linear or 1-sqrt")

    @field_validator("tokens")
    @classmethod
    def _positive(cls, values: list[float]) -> list[float]:
        for v in values:
            if not v > 0:
                raise ValueError(f"values must be positive, got {v}")
            if v > MAX_STORED_INT:
                raise ValueError(f"{fmt.count(v)} tokens is more than the database can store ({fmt.count(MAX_STORED_INT)})")
        return values
