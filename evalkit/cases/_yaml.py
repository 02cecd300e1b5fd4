"""YAML that remembers lines: compose to nodes, check keys, then construct plain data.

Timestamps stay strings (JSON has no date type, and a case's content must be JSON).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

STR_TAG = "tag:yaml.org,2002:str"
MERGE_TAG = "tag:yaml.org,2002:merge"
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


# libyaml's parser when PyYAML has it (about 10x faster: sync of thousands of cases), else
# the pure-Python one; both give nodes with line marks.
_Base: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[valid-type,misc]
    """SafeLoader without the implicit timestamp type."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


@dataclass(frozen=True)
class KeyProblem:
    code: str
    line: int
    message: str


@dataclass
class Document:
    """A parsed YAML file: the node tree (for lines) and the data built from it."""

    node: Node | None
    data: Any
    key_problems: list[KeyProblem] = field(default_factory=list)


class YamlSyntaxError(Exception):
    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


def line_of(node: Node) -> int:
    return int(node.start_mark.line) + 1


def parse(text: str) -> Document:
    """Parse one YAML document. Raises YamlSyntaxError with the line of the problem.

    Keys are checked before the data is built: a duplicate key is reported (the last one
    wins, as in YAML loaders), a key that is not a string stops construction.
    """
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return Document(None, None)
        _refuse_bombs(node)
        problems = _check_keys(node)
        if any(p.code == "E-YAML-KEY" for p in problems):
            return Document(node, None, problems)
        data = loader.construct_document(node)
        return Document(node, data, problems)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = int(mark.line) + 1 if mark is not None else None
        message = exc.problem or exc.context or "invalid YAML"
        if exc.problem and exc.context:
            message += f" ({exc.context}"
            if exc.context_mark is not None and int(exc.context_mark.line) + 1 != line:
                message += f" that starts on line {int(exc.context_mark.line) + 1}"
            message += ")"
        raise YamlSyntaxError(message, line) from exc
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(str(exc).replace("\n", " "), None) from exc
    except RecursionError:  # the pure-Python parser (no libyaml) recurses per level
        raise YamlSyntaxError(
            f"collections are nested too deeply (evalkit reads at most {MAX_DEPTH} levels)",
            None,
        ) from None
    finally:
        loader.dispose()


MAX_DEPTH = 100
"""Collections inside one another deeper than this are refused (constructing the data
recurses once per level; no case needs a tenth of it)."""
MAX_VALUES = 1_000_000
"""Values a file may stand for once its aliases are expanded; past it, a file of a few
lines can stand for billions (the "billion laughs")."""
MAX_INT_DIGITS = 4000
"""Python's ``int`` reads at most 4300 digits; a longer number would crash the loader."""
_INT_TAG = "tag:yaml.org,2002:int"


def _refuse_bombs(root: Node) -> None:
    """Refuse what cannot become JSON data safely, before it is built: a recursive alias
    (``a: &x [*x]``), nesting past ``MAX_DEPTH``, aliases that expand past ``MAX_VALUES``,
    and integers too long to read. One pass without recursion (the file may be deep);
    a node reached through several aliases is walked once and counted at each use."""
    sizes: dict[int, int] = {}
    heights: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        key = id(node)
        children = _children(node)
        if leaving:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in children)
            heights[key] = 1 + max((heights[id(child)] for child in children), default=0)
            if heights[key] > MAX_DEPTH:
                raise YamlSyntaxError(
                    f"collections are nested more than {MAX_DEPTH} levels deep from here; "
                    "flatten the data",
                    line_of(node),
                )
            if sizes[key] > MAX_VALUES:
                raise YamlSyntaxError(
                    f"aliases (*name) expand this to more than {MAX_VALUES} values (a YAML "
                    "bomb); write the data out instead of repeating aliases of aliases",
                    line_of(node),
                )
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise YamlSyntaxError(
                "an alias refers to a collection that contains it (a recursive alias)",
                line_of(node),
            )
        if isinstance(node, ScalarNode) and node.tag == _INT_TAG:
            digits = sum(c.isdigit() for c in node.value)
            if digits > MAX_INT_DIGITS:
                raise YamlSyntaxError(
                    f"a number of {digits} digits is longer than evalkit reads "
                    f"({MAX_INT_DIGITS}); put it in quotes to keep it as text",
                    line_of(node),
                )
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in children)


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_keys(root: Node) -> list[KeyProblem]:
    problems: list[KeyProblem] = []
    seen: set[int] = set()
    stack: list[Node] = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, MappingNode):
            first_line: dict[str, int] = {}
            for key, value in node.value:
                stack.append(value)
                if isinstance(key, ScalarNode) and key.tag == MERGE_TAG:
                    continue
                if not (isinstance(key, ScalarNode) and key.tag == STR_TAG):
                    shown = key.value if isinstance(key, ScalarNode) else "a collection"
                    problems.append(
                        KeyProblem(
                            "E-YAML-KEY",
                            line_of(key),
                            f"key {shown!r} is not a string (YAML reads it as "
                            f"{key.tag.rsplit(':', 1)[-1]}): put it in quotes",
                        )
                    )
                    continue
                if key.value in first_line:
                    problems.append(
                        KeyProblem(
                            "E-YAML-DUPLICATE-KEY",
                            line_of(key),
                            f"key {key.value!r} appears twice in the same mapping (first on "
                            f"line {first_line[key.value]}); the later one would win: keep one",
                        )
                    )
                else:
                    first_line[key.value] = line_of(key)
    problems.sort(key=lambda p: p.line)
    return problems


def entries(node: Node) -> dict[str, tuple[Node, Node]]:
    """A mapping node's entries by key (last one wins, merge keys already flattened)."""
    if not isinstance(node, MappingNode):
        return {}
    result: dict[str, tuple[Node, Node]] = {}
    for key, value in node.value:
        if isinstance(key, ScalarNode):
            result[key.value] = (key, value)
    return result


def items(node: Node) -> list[Node]:
    return list(node.value) if isinstance(node, SequenceNode) else []
