"""The base of every plan and run-spec section: frozen, unknown keys refused, numbers that are numbers.

pydantic's lax mode reads YAML's ``true`` as 1 where a number is expected (``batch_tokens: true``
would become "1 is less than one sequence"), so a bool there is refused by name. Text stays
accepted for a number: YAML 1.1 reads an unquoted ``1e18`` as a string, and plans write budgets
that way. The other way round, a field of true or false takes only a YAML boolean: pydantic would
read the strings 'yes', 'off' or 'false' and the numbers 0 and 1 as booleans.
"""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Iterator
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator
from pydantic_core import PydanticSerializationError


T = TypeVar("T")


def checked(value: T, problem: str | None) -> T:
    """``value`` when ``problem`` (what a ``*_problem`` function found wrong with it) is None; else the
    ValueError that a validator raises and pydantic reports at the field."""
    if problem:
        raise ValueError(problem)
    return value


def _numeric(annotation: object) -> bool:
    """True for int or float, optionally wrapped in Optional, Annotated, list or tuple."""
    if annotation in (int, float):
        return True
    origin, args = get_origin(annotation), [a for a in get_args(annotation) if a is not type(None)]
    if origin is Annotated:
        return _numeric(args[0])
    if origin in (Union, types.UnionType, list, tuple):
        args = [a for a in args if a is not Ellipsis]
        return bool(args) and all(_numeric(a) for a in args)
    return False


@functools.lru_cache(maxsize=None)
def _boolean(model: type[BaseModel], name: str) -> bool:
    """Whether ``model``'s field ``name`` takes only true or false (bool, optionally Optional)."""
    field = model.model_fields.get(name)
    if field is None:
        return False
    annotation = field.annotation
    args = [a for a in get_args(annotation) if a is not type(None)]
    return annotation is bool or (get_origin(annotation) in (Union, types.UnionType) and args == [bool])


def _has_bool(value: object) -> bool:
    return isinstance(value, bool) or (isinstance(value, (list, tuple)) and any(isinstance(v, bool) for v in value))


class StrictModel(BaseModel):
    # extra="forbid": nested models ignore unknown keys by default, so a typo would vanish.
    # allow_inf_nan=False: ``.inf`` or ``.nan`` is never a usable setting.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: object, info: ValidationInfo) -> object:
        kind = value.__class__
        if kind in (str, int, float):  # text or a number where a boolean is expected: refused as a bool for a number is
            if _boolean(cls, info.field_name or ""):
                raise ValueError(f"expected true or false, not {value!r}")
            return value
        if kind not in (bool, list, tuple):  # the common case (a section, None), cheaply
            return value
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and _has_bool(value) and _numeric(field.annotation):
            raise ValueError(f"expected a number, not {str(value).lower()} (YAML reads true/false/yes/no as booleans)")
        return value

    # pydantic wraps any exception a custom serializer raises, Ctrl-C's KeyboardInterrupt included,
    # in a PydanticSerializationError; a Ctrl-C landing there must stay an interrupt (exit 130).
    def model_dump(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        with interrupts_unwrapped():
            return super().model_dump(*args, **kwargs)

    def model_dump_json(self, *args: Any, **kwargs: Any) -> str:
        with interrupts_unwrapped():
            return super().model_dump_json(*args, **kwargs)


@contextlib.contextmanager
def interrupts_unwrapped() -> Iterator[None]:
    """Re-raise a KeyboardInterrupt that pydantic's serializer wrapped as a PydanticSerializationError."""
    try:
        yield
    except PydanticSerializationError as exc:
        if "KeyboardInterrupt" in str(exc):
            raise KeyboardInterrupt from None
        raise
