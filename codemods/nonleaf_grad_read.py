"""GF106 nonleaf-grad-read."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

import libcst as cst

from gradfix.edits import Editor
from gradfix.rule import (
    Edit,
    FixAvailability,
    FixPlan,
    FixSafety,
    Invalid,
    Rule,
    RuleContext,
    Valid,
)
from gradfix.semantic import Binding

#: The backward function (besides ``x.backward()``) that fills ``.grad`` of the tensors
#: that retain it; ``torch.autograd.grad`` returns the gradients instead (the torch fact
#: ``BACKWARD_FUNCTIONS`` holds both)
_FILLS_GRAD = frozenset({"torch.autograd.backward"})


@dataclass
class Read:
    """One read of ``name.grad`` whose reaching binding is a non-leaf requiring grad."""

    node: ast.Attribute
    binding: Binding


@dataclass
class Insertion:
    """The ``retain_grad()`` calls to insert after one binding statement."""

    statement: ast.Assign | ast.AnnAssign
    names: list[str] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)


class NonleafGradRead(Rule):
    """
    ## What it does
    Finds reads of `.grad` on a tensor that is the result of an op (`b = a * a`, a layer
    output, a slice of a parameter) after `backward()`, with no `b.retain_grad()`, and
    inserts `b.retain_grad()` right after the statement that binds `b`.

    ## Why is this bad?
    `backward()` fills `.grad` only for leaf tensors (created by the user with
    `requires_grad=True`, parameters). The gradient of an intermediate result is computed
    and thrown away: its `.grad` is `None`, and torch warns "The .grad attribute of a
    Tensor that is not a leaf Tensor is being accessed". Printing it, asserting on it or
    logging it silently shows nothing useful.

    ## Example
    ```python
    a = torch.tensor([3.0], requires_grad=True)
    b = a * a
    b.backward()
    print(b.grad)  # None, with a UserWarning
    ```

    ## Use instead
    ```python
    a = torch.tensor([3.0], requires_grad=True)
    b = a * a
    b.retain_grad()
    b.backward()
    print(b.grad)  # tensor([1.])
    ```

    ## Fix safety
    Safe: `retain_grad()` changes neither forward values nor the gradients of the leaves,
    it only keeps the intermediate's gradient. Only names bound by an assignment to an
    expression that provably requires grad and is not a leaf are reported, and only when a
    `backward()` call lies between the binding and the read. Reported without a fix when
    the binding is not a statement of its own line (a walrus, `x = ...; y = ...`, a
    one-line `if` body) or lies in another scope than the read. Leaves (parameters,
    `requires_grad=True` tensors, `.requires_grad_()`), loop variables, function
    parameters, names unpacked from a call (`h, c = lstm(x)`:
    unknown element), tensors that do not require grad or were computed under `no_grad()`,
    names already `retain_grad()`-ed and writes (`b.grad = None`) are not reported.
    `w = torch.randn(3, requires_grad=True) * 0.01` (GF103) and `w = w * 2` on a leaf
    (GF102) are left to their own rules: there the intent is the leaf's gradient.
    """

    code = "GF106"
    calls = frozenset({"retain_grad", "backward"})
    needs = frozenset({"grad"})  # every finding is a read of `x.grad`
    name = "nonleaf-grad-read"
    synopsis = (
        "Finds reads of `.grad` on a non-leaf tensor after `backward()`, always `None`, "
        "and inserts `b.retain_grad()` after its binding."
    )
    message = "`.grad` of a non-leaf tensor is `None` after backward(); call `.retain_grad()`"
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES

    VALID = [
        Valid(
            """
            import torch
            a = torch.tensor([3.0], requires_grad=True)
            b = a * a
            b.retain_grad()
            b.backward()
            print(a.grad, b.grad)
            """
        ),
        Valid(
            """
            import torch
            from torch import nn
            model = nn.Linear(3, 1)
            loss = model(torch.rand(2, 3)).sum()
            loss.backward()
            for p in model.parameters():
                print(p.grad)
            """
        ),
        Valid(
            """
            import torch
            x = torch.rand(3)
            y = x * 2
            y.sum()
            print(y.grad)  # y does not require grad: a leaf
            """
        ),
        Valid(
            """
            import torch
            a = torch.rand(3, requires_grad=True)
            b = a * 2
            b.sum().backward()
            b.grad = None
            """
        ),
        Valid(
            """
            import torch
            a = torch.rand(3, requires_grad=True)
            with torch.no_grad():
                frozen = a * 2  # not recorded: a leaf
            a.sum().backward()
            print(frozen.grad)
            """
        ),
        Valid(
            """
            import torch

            def show(t):
                t.sum().backward()
                print(t.grad)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            a = torch.tensor([3.0], requires_grad=True)
            b = a * a  # square
            b.backward()
            print(b.grad)
            """,
            """
            import torch
            a = torch.tensor([3.0], requires_grad=True)
            b = a * a  # square
            b.retain_grad()
            b.backward()
            print(b.grad)
            """,
        ),
        Invalid(
            """
            import torch as th

            def step(w, x):
                w = th.nn.Parameter(w)
                for _ in range(2):
                    h = th.tanh(
                        x @ w
                    )
                    loss = h.pow(2).sum()
                    loss.backward()
                    print(h.grad.norm())
            """,
            """
            import torch as th

            def step(w, x):
                w = th.nn.Parameter(w)
                for _ in range(2):
                    h = th.tanh(
                        x @ w
                    )
                    h.retain_grad()
                    loss = h.pow(2).sum()
                    loss.backward()
                    print(h.grad.norm())
            """,
        ),
        Invalid(
            """
            import torch
            a = torch.rand(3, requires_grad=True)
            if True: b = a * 2
            b.sum().backward()
            print(b.grad)
            """,
            report_only=True,
        ),
    ]

    def __init__(self, context: RuleContext) -> None:
        super().__init__(context)
        self._reads: list[Read] = []
        self._retained: dict[str, list[ast.Call]] = {}
        self._backwards: list[ast.Call] = []

    # -- collecting ------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if type(func) is ast.Attribute and func.attr == "retain_grad":
            if type(func.value) is ast.Name:
                self._retained.setdefault(func.value.id, []).append(node)
        if type(func) is ast.Attribute and func.attr == "backward":
            self._backwards.append(node)
        elif self.analysis.call_name(node) in _FILLS_GRAD:
            self._backwards.append(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr != "grad" or type(node.value) is not ast.Name:
            return
        if not self._is_read(node):
            return
        binding = self._nonleaf_binding(node.value, node)
        if binding is not None:
            self._reads.append(Read(node, binding))

    def leave_Module(self, original_node: ast.Module) -> None:
        reads = [r for r in self._reads if self._should_report(r)]
        insertions: dict[int, Insertion] = {}
        for read in reads:
            statement = self._fixable_statement(read)
            if statement is None:
                self.report(read.node, _message(read))
                continue
            insertion = insertions.setdefault(id(statement), Insertion(statement))
            name = read.binding.name
            if name not in insertion.names:
                insertion.names.append(name)
            insertion.reads.append(read)
        for insertion in insertions.values():
            fix = self._retain_grad_fix(insertion)
            for read in insertion.reads:
                self.report(read.node, _message(read), fix=fix)

    # -- deciding --------------------------------------------------------------------------
    def _is_read(self, node: ast.Attribute) -> bool:
        """Not a write: ``b.grad = ...``, ``+=``, ``del b.grad``, also an unpacking or a
        loop target (``x, b.grad = ...``, ``for b.grad in ...``)."""
        return type(node.ctx) is ast.Load

    def _nonleaf_binding(self, name: ast.Name, at: ast.AST) -> Binding | None:
        """The binding of ``name`` reaching ``at`` when it is a non-leaf requiring grad."""
        analysis = self.analysis
        binding = analysis.reaching_binding(name, at)
        if binding is None or binding.kind != "assign" or binding.value is None:
            return None
        if binding.unpack_index is not None or analysis.in_no_grad(binding.node):
            return None
        if analysis.leaf_reason(name, at) is not None:
            return None
        if not analysis.requires_grad(name, at):
            return None
        if self._lost_leaf(binding):
            return None
        return binding

    def _lost_leaf(self, binding: Binding) -> bool:
        """The value is an op on a leaf made in place (GF103) or on the name's own
        leaf (GF102): the user meant the leaf's gradient, not an intermediate one."""
        assert binding.value is not None
        analysis = self.analysis
        for node in ast.walk(binding.value):
            if type(node) is ast.Call:
                if analysis.leaf_value_reason(node, binding.node) is not None:
                    return True
            elif type(node) is ast.Name and node.id == binding.name:
                if analysis.leaf_reason(node) is not None:
                    return True
        return False

    def _should_report(self, read: Read) -> bool:
        """A backward call lies between binding and read, and no ``retain_grad()``."""
        analysis = self.analysis
        start, end = read.binding.end, analysis.index(read.node)
        retained = self._retained.get(read.binding.name, [])
        if any(start < analysis.index(call) < end for call in retained):
            return False
        return any(start < analysis.index(call) < end for call in self._backwards)

    # -- fixing ----------------------------------------------------------------------------
    def _fixable_statement(self, read: Read) -> ast.Assign | ast.AnnAssign | None:
        """The binding statement when it is in the read's scope (whether it is alone on
        its line is a question of layout: the fix builder answers it)."""
        analysis = self.analysis
        statement = read.binding.node
        if type(statement) is not ast.Assign and type(statement) is not ast.AnnAssign:
            return None
        if analysis.scope_of(statement) is not analysis.scope_of(read.node):
            return None
        return statement

    def _retain_grad_fix(self, insertion: Insertion) -> FixPlan:
        names = list(insertion.names)
        statement = insertion.statement

        def build(editor: Editor) -> list[Edit] | None:
            line = editor.statement(statement)
            if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
                return None  # ``x = ...; y = ...``, ``if c: x = ...``: no line of its own
            calls = [
                cst.SimpleStatementLine(
                    [cst.Expr(cst.Call(cst.Attribute(cst.Name(name), cst.Name("retain_grad"))))]
                )
                for name in names
            ]
            return [Edit(line, cst.FlattenSentinel([line, *calls]))]

        described = ", ".join(f"`{name}.retain_grad()`" for name in names)
        return self.plan(build, f"Call {described} after binding it")


def _message(read: Read) -> str:
    name = read.binding.name
    return (
        f"`{name}.grad` is `None` after backward(): `{name}` is the result of an op, not a "
        f"leaf; call `{name}.retain_grad()` after binding it"
    )
