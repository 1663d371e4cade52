"""Load YAML safely and remember the line of every mapping key and list item.

Validation errors name a field path such as ``grid.0.compute.2``; this module maps that path
back to the line where the user wrote it, so a bad plan's message says ``plan.yaml:14``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

import yaml

from scaling import safe_yaml
from scaling.errors import PlanError

Path_ = tuple[Any, ...]


def _lines_of(node: yaml.Node, path: Path_, lines: dict[Path_, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            if isinstance(key_node, yaml.ScalarNode):  # a repeated key was refused by safe_yaml.parse
                lines[path + (key,)] = key_node.start_mark.line + 1
                _lines_of(value_node, path + (key,), lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[path + (i,)] = item.start_mark.line + 1
            _lines_of(item, path + (i,), lines)


class YamlSource:
    """A parsed YAML document with the line of each key path (1-based)."""

    def __init__(self, text: str, name: str = "<plan>") -> None:
        self.name = name
        self.lines: dict[Path_, int] = {}
        # One composition gives both the data and the lines; aliases, depth and size are bounded.
        self.data, node = safe_yaml.parse(text, name, PlanError)
        if node is not None:
            _lines_of(node, (), self.lines)

    @classmethod
    def from_path(cls, path: str | Path) -> "YamlSource":
        return cls(safe_yaml.read_text(path, PlanError, "plan"), str(path))

    def line(self, loc: Sequence[Any]) -> int | None:
        """The line of the longest prefix of ``loc`` the document spells out."""
        loc = tuple(loc)
        for end in range(len(loc), 0, -1):
            if loc[:end] in self.lines:
                return self.lines[loc[:end]]
        return None


def located(source: Optional["YamlSource"], loc: Sequence[Any], message: str) -> str:
    """``file:line: field.path: message``, the field left out where the message names it already."""
    place, field = where(source, loc), ".".join(str(p) for p in loc)
    if field and (message == field or message.startswith((f"{field}.", f"{field}:", f"{field} "))):
        place = place.removesuffix(f": {field}")  # the message names the field (not merely a longer word)
    return f"{place}: {message}"


def where(source: Optional["YamlSource"], loc: Sequence[Any]) -> str:
    """``file:line: field.path`` of ``loc`` in the plan file (no line where the file does not spell it)."""
    name = source.name if source is not None else "plan"
    line = source.line(loc) if source is not None else None
    field = ".".join(str(p) for p in loc) or "(top level)"
    return f"{name}:{line}: {field}" if line else f"{name}: {field}"
