"""Downstream tasks a run is scored on as it trains: the ``evals`` section and task files.

A task is multiple choice: a context, two or more choices and the index of the gold one, one
item per line of a JSON Lines file (the documents lm-evaluation-harness's multiple-choice tasks
produce: ``context`` or ``query``, ``choices``, ``gold``, and an optional ``few_shot`` prefix;
other keys are ignored). A choice is scored as the continuation ``delimiter + choice`` of the
context, as lm-evaluation-harness's ``target_delimiter`` does. The built-in task ``next_line``
(`scaling.trainer.evaluation.next_line`) needs no file. A task file is untrusted: bounded in bytes and
items, and every line is checked before anything trains (one line naming the file and line).

Torch-free: the plan, ``scaling plan``'s cost estimate and the trainer all read it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Protocol

from pydantic import Field, field_validator, model_validator

from scaling import vocab
from scaling.errors import SpecError
from scaling.schema import StrictModel
from scaling.userfiles import read_input

#: The largest task file read (lm-evaluation-harness's largest multiple-choice sets are a few MB).
MAX_TASK_BYTES = 64 << 20
#: Most items one task may hold, and choices one item may offer.
MAX_ITEMS = 100_000
MAX_CHOICES = 32
#: Most task files one run is scored on (each costs forward passes at every evaluation).
MAX_TASK_FILES = 16
#: Items of the built-in task when the plan does not say: one per this many ``eval_tokens`` (256
#: at the default 65,536), and at least the minimum.
EVAL_TOKENS_PER_ITEM = 256
MIN_NEXT_LINE_ITEMS = 16


class TaskFile(StrictModel):
    """A multiple-choice task in a JSON Lines file."""

    path: str = Field(description="the task's JSON Lines file")
    name: Optional[str] = Field(default=None, description="metric name part (default: the file's stem)")
    delimiter: str = Field(default=" ", max_length=16, description="between the context and each choice")
    items: Optional[int] = Field(default=None, gt=0, le=MAX_ITEMS, description="score the first this many (default: all)")

    @model_validator(mode="before")
    @classmethod
    def _name_from_stem(cls, value: Any) -> Any:
        if isinstance(value, dict) and value.get("name") is None and isinstance(value.get("path"), str):
            value = {**value, "name": Path(value["path"]).stem}
        return value

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        # Ray workers may start in another folder: the file is named as the plan's reader saw it.
        return str(Path(value).expanduser().absolute()) if value else value

    @field_validator("name")
    @classmethod
    def _metric_safe(cls, value: Optional[str]) -> Optional[str]:
        problem = vocab.task_name_problem(value or "")
        if problem:
            raise ValueError(problem)
        if value == vocab.NEXT_LINE:
            raise ValueError(f"{vocab.NEXT_LINE} is the built-in task's name; give the file another name")
        return value


class NextLineSpec(StrictModel):
    """The built-in task (`scaling.trainer.evaluation.next_line`): which of four 8-byte pieces truly continues a held-out line."""

    items: Optional[int] = Field(default=None, ge=1, le=MAX_ITEMS,
                                 description=f"passages scored (default: one per {EVAL_TOKENS_PER_ITEM} eval_tokens)")

    def count(self, eval_tokens: int) -> int:
        """Passages scored: ``items``, else as many as the held-out loss's budget allows (one per
        :data:`EVAL_TOKENS_PER_ITEM` tokens, so both evaluations cost about the same), at least
        :data:`MIN_NEXT_LINE_ITEMS`."""
        if self.items is not None:
            return self.items
        return min(MAX_ITEMS, max(MIN_NEXT_LINE_ITEMS, eval_tokens // EVAL_TOKENS_PER_ITEM))


class EvalsSpec(StrictModel):
    """Tasks every run is scored on at each evaluation (``eval_interval``) and at its end.

    Not part of a run's key: adding a task retrains nothing. ``next_line: false`` turns the
    built-in task off.
    """

    next_line: Optional[NextLineSpec] = Field(default=NextLineSpec(), description="the built-in task; false: off")
    tasks: tuple[TaskFile, ...] = Field(default=(), max_length=MAX_TASK_FILES, description="task files")

    @field_validator("next_line", mode="before")
    @classmethod
    def _switch(cls, value: Any) -> Any:
        if value is True:
            return {}
        return None if value is False else value

    @model_validator(mode="after")
    def _distinct_names(self) -> "EvalsSpec":
        seen: set[str] = set()
        for task in self.tasks:
            if task.name in seen:
                raise ValueError(f"tasks: two tasks are named {task.name!r}; give one a `name`")
            seen.add(task.name or "")
        return self

    @property
    def enabled(self) -> bool:
        return self.next_line is not None or bool(self.tasks)


@dataclass(frozen=True)
class Item:
    """One multiple-choice question: the continuation of ``context`` is ``delimiter + choices[i]``."""

    context: str
    choices: tuple[str, ...]
    gold: int
    where: str  # file:line (or the built-in task's offset), for messages


@dataclass(frozen=True)
class Task:
    """A task's items, ready to encode and score."""

    name: str
    items: tuple[Item, ...]
    delimiter: str
    source: str  # the file, or how the built-in task was made
    sha256: str  # of the items (the file's bytes for a task file)

    def describe(self) -> dict[str, Any]:
        """What a run records about the task (its data event); ``chance`` is the accuracy of guessing
        (the mean of 1 / choices), below which the task laws predict no accuracy."""
        chance = sum(1.0 / len(i.choices) for i in self.items) / len(self.items) if self.items else None
        return {"items": len(self.items), "source": self.source, "sha256": self.sha256, "chance": chance}


def items_sha256(items: tuple[Item, ...], delimiter: str) -> str:
    """A digest of the items as scored: equal digests, equal tasks."""
    canon = json.dumps([delimiter, [[i.context, list(i.choices), i.gold] for i in items]], ensure_ascii=False)
    return hashlib.sha256(canon.encode("utf-8", "surrogateescape")).hexdigest()


class DataLike(Protocol):
    """What the tasks need of a run's data section (`scaling.trainer.sections.DataSpec`, which imports this module)."""

    source: str
    tokenizer: Any


# -- task files ---------------------------------------------------------------------------------
def load_task(task: TaskFile) -> Task:
    """The items of ``task``'s file (at most ``task.items``); SpecError naming file and line otherwise."""
    path = Path(task.path)
    try:
        stat = path.stat()
        ident: tuple[int, ...] = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    except OSError:
        ident = (-1,)  # read_input says why in one line
    items, digest = _parse_cached(task.path, ident)
    kept = items[: task.items] if task.items is not None else items
    return Task(name=task.name or path.stem, items=kept, delimiter=task.delimiter, source=task.path, sha256=digest)


@functools.lru_cache(maxsize=32)
def _parse_cached(path: str, ident: tuple[int, ...]) -> tuple[tuple[Item, ...], str]:
    """Parsed once per file version: a sweep's thousands of runs share the plan's task files."""
    raw = read_input(path, "task (JSON Lines)", max_bytes=MAX_TASK_BYTES, error=SpecError, where="evals.tasks")
    return parse_lines(raw, path), hashlib.sha256(raw).hexdigest()


def parse_lines(raw: bytes, name: str) -> tuple[Item, ...]:
    """Items of a JSON Lines task; blank lines are skipped, anything else wrong is one SpecError line."""
    items: list[Item] = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        where = f"{name}:{number}"
        if len(items) >= MAX_ITEMS:
            raise SpecError(f"{where}: more than {MAX_ITEMS:,} items; keep a task to at most that many")
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            raise SpecError(f"{where}: not UTF-8 text") from None
        items.append(parse_item(text, where))
    if not items:
        raise SpecError(f"{name}: the task file holds no items (one JSON object per line)")
    return tuple(items)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_item(text: str, where: str) -> Item:
    """One line: ``{"context"|"query": str, "choices": [str, ...], "gold": int, "few_shot"?: str}``."""
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise SpecError(f"{where}: not a JSON object ({' '.join(str(exc).split())[:120]})") from None
    if not isinstance(doc, dict):
        raise SpecError(f"{where}: expected a JSON object with context, choices and gold, got {type(doc).__name__}")
    if "context" in doc and "query" in doc:
        raise SpecError(f"{where}: both `context` and `query` are given; give one (they name the same field)")
    context = doc.get("context", doc.get("query"))
    if not isinstance(context, str):
        raise SpecError(f"{where}: `context` (or `query`) must be a string")
    few_shot = doc.get("few_shot", "")
    if not isinstance(few_shot, str):
        raise SpecError(f"{where}: `few_shot` must be a string (the prefix before the context)")
    if not (few_shot + context):
        raise SpecError(f"{where}: the context is empty; a choice needs something to continue")
    choices = doc.get("choices")
    if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
        raise SpecError(f"{where}: `choices` must be a list of strings")
    if not 2 <= len(choices) <= MAX_CHOICES:
        raise SpecError(f"{where}: {len(choices)} choices; an item offers 2 to {MAX_CHOICES}")
    empty = next((i for i, c in enumerate(choices) if not c), None)
    if empty is not None:
        raise SpecError(f"{where}: choice {empty} is empty")
    first = {}
    for i, c in enumerate(choices):
        if c in first:
            raise SpecError(f"{where}: choices {first[c]} and {i} are identical ({c[:40]!r}): the model cannot "
                            "tell them apart, so which one is gold is ambiguous")
        first[c] = i
    gold = doc.get("gold")
    if not isinstance(gold, int) or isinstance(gold, bool):
        raise SpecError(f"{where}: `gold` must be the index of the correct choice (an integer)")
    if not 0 <= gold < len(choices):
        raise SpecError(f"{where}: gold {gold} is out of range for {len(choices)} choices (0 to {len(choices) - 1})")
    if not all(s.isascii() or _is_utf8(s) for s in (few_shot, context, *choices)):
        raise SpecError(f"{where}: a string holds a lone surrogate escape (\\ud800 to \\udfff), which is not text")
    return Item(context=few_shot + context, choices=tuple(choices), gold=gold, where=where)


def _is_utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (JSON's ``\\ud800`` escapes decode to lone surrogates, which do not)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def text_encoding_problem(data: "DataLike") -> Optional[str]:
    """Why text tasks cannot be encoded for ``data`` (None: they can): a token file has no tokenizer."""
    if data.source == "tokens":
        return ("data.source 'tokens' has no tokenizer to encode a task's text; "
                "score task files on text data (source builtin or text)")
    return None


def check_tasks(evals: EvalsSpec, data: "DataLike", context: int) -> list[Task]:
    """Every task file of ``evals``, parsed and checked against the run's data and context.

    Raises SpecError (one line: the file and line) for a malformed item, a token-file corpus, or
    (byte-level data, where a byte is a token) a continuation longer than the context.
    """
    if evals.tasks:
        problem = text_encoding_problem(data)
        if problem:
            raise SpecError(f"evals.tasks: {problem}")
    tasks = [load_task(t) for t in evals.tasks]
    if data.tokenizer is None:  # bytes are tokens: lengths are known exactly before training
        for task in tasks:
            for item in task.items:
                longest = max(len((task.delimiter + c).encode()) for c in item.choices)
                if longest > context:
                    raise SpecError(f"{item.where}: a choice of {longest} bytes does not fit the model's context "
                                    f"of {context} (a continuation must leave room for one context token)")
    return tasks
