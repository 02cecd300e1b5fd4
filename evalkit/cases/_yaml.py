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
        _refuse_cycles(node)
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
    finally:
        loader.dispose()


def _refuse_cycles(root: Node) -> None:
    """A recursive alias (``a: &x [*x]``) makes data that JSON cannot hold: refuse it."""
    on_path: set[int] = set()
    done: set[int] = set()

    def visit(node: Node) -> None:
        if id(node) in done:
            return
        if id(node) in on_path:
            raise YamlSyntaxError(
                "an alias refers to a collection that contains it (a recursive alias)",
                line_of(node),
            )
        on_path.add(id(node))
        if isinstance(node, SequenceNode):
            for child in node.value:
                visit(child)
        elif isinstance(node, MappingNode):
            for key, value in node.value:
                visit(key)
                visit(value)
        on_path.discard(id(node))
        done.add(id(node))

    visit(root)


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
