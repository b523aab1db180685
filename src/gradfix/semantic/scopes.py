"""Scopes and the bindings they hold."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

#: Nodes that open a scope.
SCOPE_TYPES = frozenset(
    {
        ast.Module,
        ast.FunctionDef,
        ast.AsyncFunctionDef,
        ast.Lambda,
        ast.ClassDef,
        ast.ListComp,
        ast.SetComp,
        ast.DictComp,
        ast.GeneratorExp,
    }
)


@dataclass(slots=True)  # hundreds of thousands per codebase: no instance dict
class Binding:
    """One place where a scope binds a name."""

    name: str
    kind: str  # assign | augassign | for | with | param | import | def | class | other
    #: the statement (or ``ast.arg``, ``ast.comprehension``, ``ast.withitem``,
    #: ``ast.NamedExpr``, ``ast.ExceptHandler``...) that binds
    node: ast.AST
    value: ast.expr | None  # the bound value, when known
    start: int  # pre-order index of the binding node
    end: int  # last pre-order index inside it: a use after ``end`` sees this binding
    qualified: str | None = None  # for imports: the dotted module/object name
    unpack_index: int | None = None  # for ``for a, b in it``: position of the name
    annotation: ast.expr | None = None


@dataclass
class Scope:
    node: ast.AST
    parent: Scope | None
    bindings: dict[str, list[Binding]] = field(default_factory=dict)
    #: a class body (asked at every step of a name lookup: an attribute, not a property)
    is_class: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.is_class = type(self.node) is ast.ClassDef


@dataclass
class LeafReason:
    """Why an expression holds a leaf tensor that requires grad (for messages)."""

    description: str
    binding: Binding | None = None


def is_none_assign(binding: Binding) -> bool:
    """``x = None``: a placeholder, not a value (``torch = None`` after a failed import)."""
    value = binding.value
    return binding.kind == "assign" and type(value) is ast.Constant and value.value is None
