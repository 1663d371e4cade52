"""YAML from users, parsed once and bounded: size, nesting depth, and no aliases.

A plan or spec file is untrusted. PyYAML's ``safe_load`` builds no Python objects, but it
expands aliases (a few lines of ``&a``/``*a`` grow exponentially: the "billion laughs") and
recurses once per nesting level. Here the file is capped in bytes, aliases are refused before
anything is expanded, nesting is capped, and the text is composed once: the node graph gives
both the data and the line of every key (see :mod:`scaling.orchestrator.yamlsource`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import yaml

from scaling.errors import UserError
from scaling.userfiles import read_input

MAX_BYTES = 256 * 1024  # plans and specs written by hand are a few kB; 256 KiB parses in about a second
MAX_DEPTH = 64  # nesting levels of mappings and lists


class _Refused(yaml.YAMLError):
    def __init__(self, problem: str, mark: Optional[yaml.Mark]) -> None:
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases and deep nesting while composing, before expansion."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._depth = 0

    def compose_node(self, parent: Optional[yaml.Node], index: object) -> Optional[yaml.Node]:
        if self.check_event(yaml.AliasEvent):
            raise _Refused("aliases (*name) are not allowed: write the value out", self.peek_event().start_mark)
        if self._depth >= MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def read_text(path: str | Path, error: type[UserError], what: str) -> str:
    """The text of the ``what`` file at ``path``, at most :data:`MAX_BYTES` (else ``error``)."""
    p = Path(path).expanduser()
    raw = read_input(p, what, max_bytes=MAX_BYTES, error=error)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{p}: not UTF-8 text (byte {exc.start})") from None


def parse(text: str, name: str, error: type[UserError]) -> tuple[Any, yaml.Node | None]:
    """The data of the YAML document ``text`` and its root node (None for an empty document).

    Raises ``error`` with ``name:line`` for invalid YAML, aliases, deep nesting, a text over
    :data:`MAX_BYTES`, a key repeated in one mapping, or a scalar Python cannot hold (a 5000-digit
    integer, 2021-13-45)."""
    if len(text) > MAX_BYTES:
        raise error(f"{name}: larger than {MAX_BYTES // 1024} KiB")
    loader = None
    try:
        loader = _BoundedLoader(text)  # its reader already refuses control characters
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{name}:{mark.line + 1}" if mark is not None else name
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"{where}: invalid YAML: {problem}") from None
    except (ValueError, OverflowError, RecursionError) as exc:
        reason = " ".join(str(exc).split(";")[0].split())[:200]
        raise error(f"{name}: invalid YAML value: {reason}") from None
    finally:
        if loader is not None:
            loader.dispose()
    if node is not None:
        dup = _duplicate_key(node, ())
        if dup is not None:
            field, line = dup
            raise error(f"{name}:{line}: {field}: duplicate key")
    return data, node


def _duplicate_key(node: yaml.Node, path: tuple[Any, ...]) -> tuple[str, int] | None:
    """The dotted path and line of the first key a mapping repeats (PyYAML would keep the last silently)."""
    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                if key_node.value in seen:
                    return ".".join(str(p) for p in path + (key_node.value,)), key_node.start_mark.line + 1
                seen.add(key_node.value)
            found = _duplicate_key(value_node, path + (key_node.value,))
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found = _duplicate_key(item, path + (i,))
            if found:
                return found
    return None
