"""The built-in task ``next_line``: which of four pieces of text truly continues a held-out line?

Made from the held-out split of the run's own corpus, so every sweep has a downstream task with
nothing downloaded. Each item cuts a line of the held-out split at a random point: the passage is
the text before the cut (at most :func:`passage_limit` bytes, earlier lines included), the true
choice the next :func:`line_limit` bytes of that line, and the three others pieces of as many bytes
cut the same way from other lines (distinct texts, drawn like the true one, so that a piece's
commonness alone scores chance), the true one at a random position. All choices have the same
length in bytes, so a choice's length says nothing (``acc_norm`` equals ``acc`` here), and they
are short, so what the passage tells the model decides more than the pieces' own likelihood:
tiny CPU models score above the chance of 1/4 after a few hundred steps (docs/concepts/tasks.md).

Everything is drawn from a generator seeded by the data fingerprint and the context: the same
corpus and context give the same items on every machine and in every run. On tokenized text the
held-out tokens are decoded first (cuts fall between characters). Torch-free (numpy only).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from scaling import vocab
from scaling.trainer.evaluation.eval_tasks import Item, Task, items_sha256

#: Choices per item: the true line and three others.
CHOICES = 4
#: The held-out bytes scanned for lines (a large corpus's held-out split is not read whole).
MAX_SCAN_BYTES = 4 << 20
#: Bytes of a passage at most, and of each choice (shorter for a short context, see the functions).
MAX_PASSAGE_BYTES = 64
CHOICE_BYTES = 8


def line_limit(context: int) -> int:
    """Bytes of each choice: :data:`CHOICE_BYTES`, or half a shorter context."""
    return max(1, min(CHOICE_BYTES, context // 2))


def passage_limit(context: int) -> int:
    """Bytes of a passage at most: what the context leaves beside a choice, at most :data:`MAX_PASSAGE_BYTES`."""
    return max(1, min(MAX_PASSAGE_BYTES, context + 1 - line_limit(context)))


def build(held_out: bytes, fingerprint: str, items: int, context: int) -> tuple[Optional[Task], str]:
    """The task made from ``held_out`` (bytes of the held-out split), and a note: how it was made, or
    why there is none (too few distinct pieces of lines)."""
    lines = held_out[:MAX_SCAN_BYTES].split(b"\n")
    starts = np.cumsum([0] + [len(line) + 1 for line in lines[:-1]])
    limit, passage = line_limit(context), passage_limit(context)
    rng = np.random.default_rng([int(fingerprint[:16], 16), context])
    # One cut per line: the passage ends inside the line, the choices are rests of lines.
    cuts = [(i, int(rng.integers(1, len(lines[i]) - limit + 1)))
            for i in range(1, len(lines) - 1) if len(lines[i]) > limit and lines[i].strip()]
    cuts = [(i, c) for i, c in cuts if lines[i][c:c + limit].strip() and _boundary(lines[i], c)
            and _boundary(lines[i], c + limit)]
    rests = [lines[i][c:c + limit] for i, c in cuts]
    pool = sorted(set(rests))
    if len(pool) < CHOICES:
        return None, f"the held-out split has {len(pool)} distinct pieces of lines; {CHOICES} are needed"
    picked = sorted(rng.choice(len(cuts), size=min(items, len(cuts)), replace=False).tolist())
    out = []
    for k in picked:
        i, c = cuts[k]
        gold_text = rests[k]
        end = int(starts[i]) + c
        text = held_out[max(0, end - passage):end].lstrip(_CONTINUATION)  # whole characters only
        others: list[bytes] = []
        tries = 0
        while len(others) < CHOICES - 1:
            tries += 1
            other = rests[int(rng.integers(len(rests)))] if tries <= 1000 else pool[int(rng.integers(len(pool)))]
            if other != gold_text and other not in others:
                others.append(other)
        gold = int(rng.integers(CHOICES))
        choices = others[:gold] + [gold_text] + others[gold:]
        out.append(Item(context=_text(text), choices=tuple(_text(c) for c in choices), gold=gold,
                        where=f"next_line: held-out byte {end}"))
    task_items = tuple(out)
    note = (f"{len(task_items)} lines of the held-out split cut at random, four {limit}-byte continuations each, "
            f"passages of at most {passage} bytes, seeded by the data fingerprint")
    return Task(name=vocab.NEXT_LINE, items=task_items, delimiter="", source=note,
                sha256=items_sha256(task_items, "")), note


def _text(raw: bytes) -> str:
    """Bytes as text that encodes back to the same bytes (surrogate escapes keep any byte)."""
    return raw.decode("utf-8", "surrogateescape")


_CONTINUATION = bytes(range(0x80, 0xC0))  # UTF-8 continuation bytes: never the first byte of a character


def _boundary(line: bytes, at: int) -> bool:
    """Whether ``at`` falls between two characters of ``line`` (UTF-8)."""
    return at >= len(line) or line[at] not in _CONTINUATION
