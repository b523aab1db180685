"""What names mean: imports resolved to qualified torch names."""

from __future__ import annotations

import ast
from collections.abc import Iterable

from gradfix.semantic.navigation import Navigation
from gradfix.semantic.scopes import is_none_assign
from gradfix.torch_facts import CANONICAL

_UNKNOWN = object()  # not asked yet (``None`` is an answer: not an imported name)


class NameQueries(Navigation):
    #: the answer of ``torch_alias`` once asked (False: not yet)
    _torch_alias: str | None | bool = False
    _imports_torch: bool | None = None  # the answer of ``imports_torch`` once asked
    #: the answer of ``call_aliases`` once asked
    _call_aliases: dict[str, tuple[str, ...]] | None = None

    def qualified_name(self, expr: ast.AST) -> str | None:
        """``th.nn.Parameter`` -> ``"torch.nn.Parameter"`` via imports; ``None`` if not imported."""
        known = self._qualified.get(expr, _UNKNOWN)
        if known is not _UNKNOWN:
            return known  # type: ignore[return-value]
        root = expr
        while type(root) is ast.Attribute:
            root = root.value  # type: ignore[attr-defined]
        if type(root) is not ast.Name or root.id not in self._imported_names:
            # no import binds the root of the chain (``self.proj.weight``, ``x.view``: most
            # names asked about): the answer of every level, without resolving each
            if expr in self._order:
                self._qualified[expr] = None
            return None
        if expr not in self._order:  # a node built by a rule
            return self._qualify(expr)
        qualified = self._qualified[expr] = self._qualify(expr)
        return qualified

    def _qualify(self, expr: ast.AST) -> str | None:
        if type(expr) is ast.Name:
            # the same in the whole scope it is read in (by name: ``self``, ``torch``...)
            key = (id(self.scope_of(expr)), expr.id)
            known = self._qualified_in_scope.get(key, _UNKNOWN)
            if known is _UNKNOWN:
                known = self._qualified_in_scope[key] = self._qualify_name(expr)
            return known  # type: ignore[return-value]
        if type(expr) is ast.Attribute:
            base = self.qualified_name(expr.value)
            if base is None:
                return None
            dotted = f"{base}.{expr.attr}"
            return CANONICAL.get(dotted, dotted)
        return None

    def _qualify_name(self, name: ast.Name) -> str | None:
        bindings = self.bindings(name)
        imports = [b for b in bindings if b.kind == "import"]
        others = [b for b in bindings if b.kind != "import" and not is_none_assign(b)]
        if not imports or others:
            return None
        return CANONICAL.get(imports[-1].qualified or "", imports[-1].qualified)

    def call_name(self, call: ast.Call) -> str | None:
        known = self._qualified.get(call.func, _UNKNOWN)  # asked by most rules: kept short
        return self.qualified_name(call.func) if known is _UNKNOWN else known  # type: ignore[return-value]

    def calls_that_may_be(self, qualified: Iterable[str]) -> list[ast.Call]:
        """A superset of the calls whose :meth:`call_name` is one of ``qualified``, in no
        particular order: those spelled with the last part of a name (``grad(...)``,
        ``ag.grad(...)``, ``super().backward()``) or with a name an import binds to such a
        part (``from torch.autograd import grad as g``: :meth:`call_aliases`). Cheaper
        than asking every call."""
        lasts = {name.rpartition(".")[2] for name in qualified}
        aliases = self.call_aliases()
        spellings = lasts | {local for local, parts in aliases.items() if lasts & set(parts)}
        found: list[ast.Call] = []
        for spelling in spellings:
            found += self.calls_named(spelling)
        return found

    def call_aliases(self) -> dict[str, tuple[str, ...]]:
        """Every name an import binds to something whose last part is spelled otherwise,
        with those parts: ``w`` -> ``("where",)`` for ``from torch import where as w``
        (what the rules' walk needs to hand a call of ``w`` to the rules about ``where``;
        a name imported in two scopes may have two)."""
        if self._call_aliases is None:
            aliases: dict[str, tuple[str, ...]] = {}
            for b in self._imports:
                if b.qualified:
                    last = CANONICAL.get(b.qualified, b.qualified).rpartition(".")[2]
                    if last != b.name and last not in aliases.get(b.name, ()):
                        aliases[b.name] = (*aliases.get(b.name, ()), last)
            self._call_aliases = aliases
        return self._call_aliases

    def is_torch_name(self, expr: ast.AST, *names: str) -> bool:
        qualified = self.qualified_name(expr)
        return qualified is not None and qualified in names

    def imports_torch(self) -> bool:
        """The file imports torch somewhere (rules find nothing in files that do not)."""
        if self._imports_torch is None:  # asked by most rules at most nodes: answered once
            self._imports_torch = any(
                (b.qualified or "").split(".")[0] == "torch" for b in self._imports
            )
        return self._imports_torch

    def torch_alias(self) -> str | None:
        """The module-level name bound to the ``torch`` module, if any (``torch``, ``th``)."""
        if self._torch_alias is False:
            alias = None
            for name, bindings in self._scopes[self.module].bindings.items():
                if any(b.kind == "import" and b.qualified == "torch" for b in bindings):
                    if all(b.kind == "import" or is_none_assign(b) for b in bindings):
                        alias = name
                        if name == "torch":
                            break
            self._torch_alias = alias
        return self._torch_alias  # type: ignore[return-value]

    def module_alias(self, qualified: str) -> str | None:
        """The module-level name an import binds to the module ``qualified`` and nothing
        rebinds: ``nn`` for ``from torch import nn``, ``tnn`` for ``import torch.nn as tnn``."""
        for name, bindings in self._scopes[self.module].bindings.items():
            if all(b.kind == "import" and b.qualified == qualified for b in bindings):
                return name
        return None

    def torch_attr(self, dotted: str) -> ast.expr:
        """An expression for ``torch.<dotted>`` using the file's alias (``th.stack``);
        ``ast.unparse`` gives its code."""
        expr: ast.expr = ast.Name(self.torch_alias() or "torch", ast.Load())
        for part in dotted.split("."):
            expr = ast.Attribute(expr, part, ast.Load())
        return expr
