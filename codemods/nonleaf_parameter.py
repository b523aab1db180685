"""GF103 nonleaf-parameter."""

from __future__ import annotations

import ast
import bisect
import functools
import io
import tokenize
from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst

from gradfix.edits import Editor, without_argument
from gradfix.rule import Edit, FixAvailability, FixPlan, FixSafety, Invalid, Rule, Valid
from gradfix.semantic import (
    VIEW_ATTRIBUTES,
    argument,
    argument_value,
    call_arguments,
    normalized_code,
)
from gradfix.torch_facts import NON_TENSOR_METHODS, VIEW_METHODS

#: Methods that move a tensor to a device or cast it: the values stay, so the fix keeps them.
MOVES = frozenset({"to", "cuda", "double", "half", "bfloat16"})
#: Casts spelled as methods -> the ``dtype=`` of the factory.
CAST_DTYPES = {"double": "float64", "half": "float16", "bfloat16": "bfloat16"}
#: Methods that return the tensor itself on a fresh CPU float tensor (still a leaf), or
#: keep it a leaf, or are not ops: not reported.
NOT_REPORTED = (
    frozenset(
        "float cpu contiguous requires_grad_ retain_grad register_hook detach clone_ share_memory_ "
        "pin_memory".split()
    )
    | NON_TENSOR_METHODS
)
#: Ops that shape a parameter's value: the fix makes their result the leaf. After other ops
#: (``.sum()``, ``.matmul(x)``) the value is a computation, not a parameter: report only.
SHAPING = (
    MOVES | VIEW_METHODS | frozenset("reshape flatten repeat tile clone abs exp sqrt T mT".split())
)
#: torch dtype names accepted by ``.to(torch.<dtype>)``.
DTYPE_NAMES = frozenset(
    "float float32 float64 double half float16 bfloat16 complex64 complex128".split()
)


@dataclass
class LostLeaf:
    """A value whose innermost operand creates a leaf: ``creation`` and the ops after it."""

    creation: ast.Call
    ops: list[ast.expr]  # outermost first
    kind: str  # parameter | factory | marked


class NonleafParameter(Rule):
    """
    ## What it does
    Finds an op applied to a leaf in the same expression that creates it:
    `torch.randn(3, 4, requires_grad=True) * 0.01`,
    `torch.randn(12, 1, requires_grad=True).view(3, 4)`,
    `torch.zeros(3, requires_grad=True).to(device)`, `nn.Parameter(torch.randn(n)).double()`,
    `nn.Parameter(x).t()`, and moves the op inside, so that the bound value is the leaf.

    ## Why is this bad?
    Any op on a tensor that requires grad returns a non-leaf: the name (or attribute) holds
    the result of the op, and the leaf that receives the gradient is unreachable. `.grad`
    stays `None`, an optimizer refuses it ("can't optimize a non-leaf Tensor"), and as an
    attribute of an `nn.Module` it is not a parameter: not in `model.parameters()`, never
    trained, not saved in the `state_dict`. `.to(device)` hides the bug on the CPU (the
    same device returns the leaf itself) and shows it on the GPU.

    ## Example
    ```python
    w = torch.randn(3, 4, requires_grad=True) * 0.01
    b = torch.zeros(4, requires_grad=True).to(device)
    self.scale = nn.Parameter(torch.ones(n)).double()
    ```

    ## Use instead
    ```python
    w = (torch.randn(3, 4) * 0.01).requires_grad_()
    b = torch.zeros(4, device=device, requires_grad=True)
    self.scale = nn.Parameter(torch.ones(n).double())
    ```
    The same holds in list comprehensions, `params.append(...)` and
    `register_parameter(...)`. Create the value first, then make it the leaf:
    `nn.Parameter(...)` around the finished value, or `.requires_grad_()` at the end.
    Device moves and casts of a factory become its `device=` / `dtype=` arguments.

    ## Fix safety
    Safe for device moves and casts (`.to(device)`, `.cuda()`, `.double()`): the leaf keeps
    its values and only becomes the tensor that is used. Unsafe for ops that change values
    or shape (`* 0.01`, `.view(3, 4)`, `.t()`): the gradient now lands on the scaled or
    reshaped tensor (100x the old leaf's for `* 0.01`), which is what the code meant but
    changes every later update; review it. An attribute of an `nn.Module` becomes
    `nn.Parameter(<value>)`, an unsafe fix: the module gains a parameter (optimizers built
    from `model.parameters()` now train it, `state_dict` gets a key). After ops that
    compute rather than shape a value (`torch.randn(3, requires_grad=True).sum()`) there
    is no fix: the leaf is still unreachable, but what was meant is unclear. Ops that
    return the leaf itself on a fresh tensor (`.float()`, `.cpu()`, `.contiguous()`),
    in-place initialisers (GF201),
    `.detach()`, and ops on tensors that do not require grad (`model.to(device)`,
    `x.to(device)`) are not reported.
    """

    code = "GF103"
    calls = frozenset({"append", "register_parameter"})
    #: every finding's value holds a call spelled one of these (``_may_create_leaf``)
    needs = frozenset({"Parameter", "requires_grad", "requires_grad_"})
    fix_restores_gradient = True
    name = "nonleaf-parameter"
    synopsis = (
        "Finds an op applied to a leaf where it is created (`.to(device)`, `* 0.01`), so "
        "the bound value is no leaf, and moves the op into the creation."
    )
    message = "An op after creating a leaf makes the bound value a non-leaf: `.grad` stays `None`"
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES
    fix_safeties = (FixSafety.SAFE, FixSafety.UNSAFE)

    VALID = [
        Valid(
            """
            import torch
            from torch import nn
            device = torch.device("cpu")
            model = nn.Linear(3, 4).to(device)
            x = torch.randn(2, 3).to(device)
            w = torch.randn(3, 4, device=device, requires_grad=True)
            b = (torch.randn(4) * 0.01).requires_grad_()
            s = nn.Parameter(torch.ones(4).double())
            """
        ),
        Valid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            content = torch.rand(1, 3, 8, 8).to(device)
            # already on the device: .to(device) returns the leaf itself
            target = content.clone().requires_grad_(True).to(device)
            bias = torch.zeros(3, device=device, requires_grad=True).to(device)
            """
        ),
        Valid(
            """
            import torch
            w = torch.randn(3, requires_grad=True).float()  # the leaf itself
            v = torch.empty(3, requires_grad=True)
            with torch.no_grad():
                v.normal_()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            w = torch.randn(3, 4, requires_grad=True) * 0.01  # small init
            """,
            """
            import torch
            w = (torch.randn(3, 4) * 0.01).requires_grad_()  # small init
            """,
        ),
        Invalid(
            """
            import torch as th
            t = th.randn(12, 1, requires_grad=True).view(3, 4)
            """,
            """
            import torch as th
            t = th.randn(12, 1).view(3, 4).requires_grad_()
            """,
        ),
        Invalid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            b = torch.zeros(3, requires_grad=True).to(device)
            c = torch.zeros(3, requires_grad=True).cuda()
            d = torch.zeros(3, requires_grad=True).double()
            """,
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            b = torch.zeros(3, device=device, requires_grad=True)
            c = torch.zeros(3, device="cuda", requires_grad=True)
            d = torch.zeros(3, dtype=torch.float64, requires_grad=True)
            """,
        ),
        Invalid(
            """
            import torch
            from torch import nn

            class Net(nn.Module):
                def __init__(self, n):
                    super().__init__()
                    self.scale = nn.Parameter(torch.ones(n)).double()
                    self.proj = nn.Parameter(torch.randn(n, n) / n).t()
            """,
            """
            import torch
            from torch import nn

            class Net(nn.Module):
                def __init__(self, n):
                    super().__init__()
                    self.scale = nn.Parameter(torch.ones(n).double())
                    self.proj = nn.Parameter((torch.randn(n, n) / n).t())
            """,
        ),
        Invalid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            content = torch.rand(1, 3, 8, 8)
            target = content.clone().requires_grad_(True).to(device)
            """,
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            content = torch.rand(1, 3, 8, 8)
            target = content.clone().to(device).requires_grad_()
            """,
        ),
        Invalid(
            """
            import torch
            w = torch.randn(3, requires_grad=True).clamp(-1, 1)  # no fix: not a move or a scaling
            """,
            report_only=True,
        ),
    ]

    def visit_Assign(self, node: ast.Assign) -> None:
        self._check(node.value, node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._check(node.value, node)

    def visit_Return(self, node: ast.Return) -> None:
        if node.value is not None:
            self._check(node.value, node)

    def visit_ListComp(self, node: ast.ListComp) -> None:
        self._check(node.elt, node)  # ``[torch.randn(n, requires_grad=True) * s for ...]``

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if type(func) is ast.Attribute and func.attr in ("append", "register_parameter"):
            arguments = _source_arguments(node)
            if arguments:
                self._check(argument_value(arguments[-1]), node)  # ``params.append(...)``

    # -- deciding --------------------------------------------------------------------------
    @functools.cached_property
    def _creation_positions(self) -> list[int]:
        """The pre-order positions of the calls that may create a leaf
        (``_may_create_leaf``): every finding's value holds one (its ops peel down to it);
        many files have none."""
        analysis = self.analysis
        calls = analysis.by_type.get(ast.Call, [])
        return [analysis.index(c) for c in calls if _may_create_leaf(c)]  # type: ignore[arg-type]

    def _holds_creation(self, value: ast.expr) -> bool:
        positions = self._creation_positions
        if not positions:
            return False  # most files create no leaf
        first = bisect.bisect_left(positions, self.analysis.index(value))
        return first < len(positions) and positions[first] <= self.analysis.end_index(value)

    def _check(self, value: ast.expr, statement: ast.AST) -> None:
        if not self._holds_creation(value):
            return
        lost = self._lost_leaf(value, statement)
        if lost is None or not lost.ops or self._moved_where_it_is(lost, statement):
            return
        if self._module_attribute(statement) is not None:
            fix = self._module_parameter_fix(value, lost)
        else:
            fix = self._fix(value, lost)
        self.report(value, self._message(statement, lost), fix=fix)

    def _moved_where_it_is(self, lost: LostLeaf, at: ast.AST) -> bool:
        """Every op is ``.to(d)`` and the leaf is made on ``d`` already: ``.to`` returns the
        tensor itself, still the leaf (``content.clone().requires_grad_(True).to(device)``
        after ``content = load(...).to(device)``; ``torch.ones(3, device=d,
        requires_grad=True).to(d)``)."""
        devices = [self._moved_to(op) for op in lost.ops]
        targets = {normalized_code(d) for d in devices if d is not None}
        if len(targets) != 1 or None in devices:
            return False
        placed = self._placed_on(lost.creation, at)
        return placed is not None and normalized_code(placed) in targets

    def _moved_to(self, op: ast.expr) -> ast.expr | None:
        """``x.to(d)`` / ``x.to(device=d)`` where ``d`` is a device (the fix's own reading,
        :meth:`_move_keyword`): ``d``, else ``None``."""
        if type(op) is not ast.Call or type(op.func) is not ast.Attribute:
            return None
        move = self._move_keyword(op) if op.func.attr == "to" else None
        if move is None or move[0] != "device" or not isinstance(move[1], ast.expr):
            return None
        return move[1]

    def _placed_on(self, creation: ast.Call, at: ast.AST) -> ast.expr | None:
        """The device ``creation`` makes its tensor on, when the code says it: its
        ``device=``, or the ``.to(d)`` that made the tensor it copies (``x.clone()``,
        ``x.detach()``, ``x.requires_grad_()``, chained, of a name bound to ``....to(d)``)."""
        device = argument(creation, "device", None)
        if device is not None:
            return device
        current: ast.expr = creation
        while type(current) is ast.Call and type(current.func) is ast.Attribute:
            if current.func.attr not in _SAME_DEVICE:
                return None
            current = current.func.value
        if type(current) is not ast.Name:
            return None
        binding = self.analysis.reaching_binding(current, at)
        value = binding.value if binding is not None and binding.kind == "assign" else None
        return None if value is None else self._moved_to(value)

    def _lost_leaf(self, expr: ast.expr, at: ast.AST) -> LostLeaf | None:
        """Peel ops off ``expr`` down to a call that creates a leaf; the other operand of
        an arithmetic op must not require grad (``w * x`` of two trained tensors is a
        computation, not this pattern)."""
        lost = self._peel(expr, at)
        if lost is None:
            return None
        for op in lost.ops:
            if type(op) is ast.BinOp:
                other = op.right if self._peel(op.left, at) is not None else op.left
                if self.analysis.requires_grad(other, at):
                    return None
        return lost

    def _peel(self, expr: ast.expr, at: ast.AST) -> LostLeaf | None:
        """The syntactic chain of ops from ``expr`` down to a leaf creation, if any."""
        ops: list[ast.expr] = []
        current = expr
        for _ in range(16):
            kind = self._creation_kind(current, at)
            if kind is not None:
                assert isinstance(current, ast.Call)
                return LostLeaf(current, ops, kind)
            operand = self._operand(current, at)
            if operand is None:
                return None
            ops.append(current)
            current = operand
        return None

    def _creation_kind(self, expr: ast.expr, at: ast.AST) -> str | None:
        if type(expr) is not ast.Call or not _may_create_leaf(expr):
            return None
        if self.analysis.leaf_value_reason(expr, at) is None:
            return None
        name = self.analysis.call_name(expr)
        if name == "torch.nn.Parameter":
            arguments = _source_arguments(expr)
            positional = arguments and type(arguments[0]) is not ast.keyword
            return "parameter" if positional else None
        return "factory" if name is not None else "marked"

    def _operand(self, expr: ast.expr, at: ast.AST) -> ast.expr | None:
        """The tensor operand of a one-operand op (``t.view(3)``, ``t.T``, ``t * 0.01``)."""
        if type(expr) is ast.Call and type(expr.func) is ast.Attribute:
            method = expr.func.attr
            if method.endswith("_") or method in NOT_REPORTED:
                return None
            return expr.func.value
        if type(expr) is ast.Attribute and expr.attr in VIEW_ATTRIBUTES:
            return expr.value
        if type(expr) is ast.UnaryOp and type(expr.op) is ast.USub:
            return expr.operand
        if type(expr) is ast.BinOp:
            return expr.left if self._peel(expr.left, at) is not None else expr.right
        return None

    def _module_attribute(self, statement: ast.AST) -> str | None:
        """``self.<attr> = ...`` in a method of an ``nn.Module`` subclass: the attribute."""
        target = None
        if type(statement) is ast.Assign and len(statement.targets) == 1:
            target = statement.targets[0]
        elif type(statement) is ast.AnnAssign:
            target = statement.target
        if type(target) is not ast.Attribute or type(target.value) is not ast.Name:
            return None
        cls = self.analysis.enclosing_class(statement)
        if cls is None or target.value.id != "self":
            return None
        bases = [self.analysis.qualified_name(argument_value(base)) or "" for base in cls.bases]
        if not any(base.startswith("torch.nn.") for base in bases):
            return None
        return target.attr

    def _message(self, statement: ast.AST, lost: LostLeaf) -> str:
        attr = self._module_attribute(statement)
        if attr is None:
            return self.message
        return (
            f"`self.{attr}` is the result of an op on a new leaf, not a leaf: it is not "
            f"registered as a parameter (never trained) and its `.grad` stays `None`"
        )

    # -- fixing: decided on ast, built on LibCST -------------------------------------------
    def _fix(self, value: ast.expr, lost: LostLeaf) -> FixPlan | None:
        ops = [_op_name(op) for op in lost.ops]
        if not all(op in SHAPING or op.endswith("Operation") for op in ops):
            return None
        only_moves = all(op in MOVES for op in ops)
        safety = FixSafety.SAFE if only_moves else FixSafety.UNSAFE
        if lost.kind == "parameter":
            return self._parameter_fix(value, lost, safety)
        if lost.kind == "factory" and only_moves:
            keywords = self._folded_keywords(lost)
            if keywords is not None:
                return self.plan_replace(
                    value,
                    lambda editor, _: _fold_into_factory(editor, lost.creation, keywords),
                    "Create the leaf on its device / with its dtype",
                    safety=FixSafety.SAFE,
                )
        return self._requires_grad_fix(value, lost, safety)

    def _module_parameter_fix(self, value: ast.expr, lost: LostLeaf) -> FixPlan | None:
        """A module attribute becomes a registered parameter: ``nn.Parameter(<value>)``.
        Unsafe: the module gains a parameter (optimizers, ``state_dict`` keys)."""
        if lost.kind == "parameter":
            return self._parameter_fix(value, lost, FixSafety.UNSAFE)
        if not all(
            _op_name(op) in SHAPING or _op_name(op).endswith("Operation") for op in lost.ops
        ):
            return None
        nn_alias = self.analysis.module_alias("torch.nn")

        def registered(editor: Editor, node: cst.CSTNode) -> cst.Call:
            moved = node.deep_replace(editor.node(lost.creation), _plain(editor, lost))
            assert isinstance(moved, cst.BaseExpression)
            parameter = _parameter_class(editor, nn_alias)
            return cst.Call(parameter, [cst.Arg(_without_outer_parens(moved))])

        description = "Register the finished value as an nn.Parameter"
        return self.plan_replace(value, registered, description, safety=FixSafety.UNSAFE)

    def _parameter_fix(self, value: ast.expr, lost: LostLeaf, safety: FixSafety) -> FixPlan:
        def build(editor: Editor) -> list[Edit]:
            node = editor.node(value)
            assert isinstance(node, cst.BaseExpression)
            creation = editor.node(lost.creation)
            assert isinstance(creation, cst.Call)
            data = creation.args[0]
            moved = node.deep_replace(creation, _parenthesized(data.value))
            assert isinstance(moved, cst.BaseExpression)
            moved = _without_outer_parens(moved)
            args = [data.with_changes(value=moved), *creation.args[1:]]
            new = creation.with_changes(args=args, lpar=node.lpar, rpar=node.rpar)
            return [Edit(node, new)]

        description = "Apply the op before wrapping in nn.Parameter"
        return self.plan(build, description, safety=safety)

    def _requires_grad_fix(self, value: ast.expr, lost: LostLeaf, safety: FixSafety) -> FixPlan:
        def marked(editor: Editor, node: cst.CSTNode) -> cst.Call:
            moved = node.deep_replace(editor.node(lost.creation), _plain(editor, lost))
            assert isinstance(moved, cst.BaseExpression)
            return cst.Call(cst.Attribute(_parenthesized(moved), cst.Name("requires_grad_")))

        description = "Apply the op first, then call `.requires_grad_()`"
        return self.plan_replace(value, marked, description, safety=safety)

    def _folded_keywords(self, lost: LostLeaf) -> dict[str, KeywordValue] | None:
        """``torch.zeros(3, requires_grad=True).to(device)`` -> ``{"device": device}``:
        the factory arguments the moves become (None: one cannot be folded)."""
        keywords: dict[str, KeywordValue] = {}
        for op in reversed(lost.ops):
            assert isinstance(op, ast.Call) and isinstance(op.func, ast.Attribute)
            pair = self._move_keyword(op)
            if pair is None or pair[0] in keywords:
                return None
            keywords[pair[0]] = pair[1]
        creation = lost.creation
        if any(argument(creation, keyword, None) is not None for keyword in keywords):
            return None
        if not any(k.arg == "requires_grad" for k in creation.keywords):
            return None  # the new arguments go before ``requires_grad=``
        return keywords

    def _move_keyword(self, op: ast.Call) -> tuple[str, KeywordValue] | None:
        assert isinstance(op.func, ast.Attribute)
        method = op.func.attr
        arguments = call_arguments(op)
        if method in CAST_DTYPES and not arguments:
            dtype = CAST_DTYPES[method]
            return "dtype", lambda editor: editor.torch_attr(dtype)
        if method == "cuda" and not arguments:
            return "device", lambda editor: cst.SimpleString('"cuda"')
        if method != "to" or len(arguments) != 1:
            return None
        arg = arguments[0]
        if type(arg) is ast.keyword and arg.arg is not None:
            return (arg.arg, arg.value) if arg.arg in ("device", "dtype") else None
        return self._classify_to_argument(argument_value(arg), op)

    def _classify_to_argument(
        self, value: ast.expr, at: ast.AST, depth: int = 0
    ) -> tuple[str, ast.expr] | None:
        qualified = self.analysis.qualified_name(value) or ""
        if qualified.startswith("torch.") and qualified[len("torch.") :] in DTYPE_NAMES:
            return "dtype", value
        if self._is_simple_string(value):
            return "device", value
        if type(value) is ast.Call and self.analysis.call_name(value) == "torch.device":
            return "device", value
        if type(value) is ast.Name and depth < 3:  # `dev = torch.device(...)`: any name
            binding = self.analysis.reaching_binding(value, at)
            if binding is not None and binding.kind == "assign" and binding.value is not None:
                if binding.unpack_index is None:
                    bound = self._classify_to_argument(binding.value, binding.node, depth + 1)
                    if bound is not None:
                        return bound[0], value
        last = value.attr if type(value) is ast.Attribute else None
        last = value.id if type(value) is ast.Name else last
        if last is not None and "device" in last.lower():
            return "device", value
        return None

    def _is_simple_string(self, value: ast.expr) -> bool:
        """One string or bytes literal (LibCST's ``SimpleString``: not ``"a" "b"``)."""
        if type(value) is not ast.Constant or type(value.value) not in (str, bytes):
            return False
        text = self.analysis.segment(value) or ""
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
        except (tokenize.TokenError, SyntaxError):
            return False
        return sum(token.type == tokenize.STRING for token in tokens) == 1


#: A value of a folded factory argument: the ``ast`` expression the user wrote (its LibCST
#: node is reused) or a builder of a new one (``torch.float64``, ``"cuda"``).
KeywordValue = ast.expr | Callable[[Editor], "cst.BaseExpression"]


#: methods whose result is on the device of their receiver
_SAME_DEVICE = frozenset({"clone", "detach", "requires_grad_", "contiguous", "float"})


def _fold_into_factory(
    editor: Editor, creation_ast: ast.Call, keywords: dict[str, KeywordValue]
) -> cst.Call:
    """``torch.zeros(3, requires_grad=True)`` with ``device=device`` (and ``dtype=``) put
    before ``requires_grad=``, spaced like it. Not :func:`gradfix.edits.with_argument`:
    that appends after the last argument with a tight ``=``; here the new arguments go in
    front of ``requires_grad=`` and copy its ``=`` (``requires_grad = True`` stays
    consistent), which is the layout the rule has always produced."""
    creation = editor.node(creation_ast)
    assert isinstance(creation, cst.Call)
    args = list(creation.args)
    flag = next(i for i, a in enumerate(args) if _is_keyword(a, "requires_grad"))
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    new_args = []
    for name, value in keywords.items():
        expr = value(editor) if callable(value) else editor.node(value)
        assert isinstance(expr, cst.BaseExpression)
        arg = cst.Arg(expr, keyword=cst.Name(name), equal=args[flag].equal, comma=comma)
        new_args.append(arg)
    return creation.with_changes(args=[*args[:flag], *new_args, *args[flag:]])


def _plain(editor: Editor, lost: LostLeaf) -> cst.BaseExpression:
    """The creation without what makes it a leaf (``requires_grad=True``, the call of
    ``.requires_grad_()``)."""
    creation = editor.node(lost.creation)
    assert isinstance(creation, cst.Call)
    if lost.kind == "marked":
        assert isinstance(creation.func, cst.Attribute)
        return creation.func.value
    return without_argument(creation, "requires_grad")


def _parameter_class(editor: Editor, nn_alias: str | None) -> cst.BaseExpression:
    """``nn.Parameter`` with the file's name of ``torch.nn`` (``tnn.Parameter`` after
    ``from torch import nn as tnn``), else ``torch.nn.Parameter``."""
    if nn_alias is not None:
        return cst.Attribute(cst.Name(nn_alias), cst.Name("Parameter"))
    return editor.torch_attr("nn.Parameter")


def _source_arguments(call: ast.Call) -> list[ast.expr | ast.keyword]:
    """The arguments of ``call`` in the order of the source (``f(k=1, *a)``: keyword
    first), as LibCST lists them."""
    arguments = call_arguments(call)
    if call.args and call.keywords:
        arguments.sort(key=lambda a: (a.lineno, a.col_offset))
    return arguments


def _may_create_leaf(call: ast.Call) -> bool:
    """Cheap syntactic test before asking the analysis: ``Parameter(...)``,
    ``...(requires_grad=True)``, ``.requires_grad_()``."""
    func = call.func
    name = func.attr if type(func) is ast.Attribute else getattr(func, "id", "")
    return name in ("Parameter", "requires_grad_") or any(
        k.arg == "requires_grad" for k in call.keywords
    )


def _op_name(op: ast.expr) -> str:
    """The method or attribute of an op; ``BinaryOperation`` / ``UnaryOperation`` for an
    operator (the names the rule has always matched ``*Operation`` on)."""
    if type(op) is ast.Call and type(op.func) is ast.Attribute:
        return op.func.attr
    if type(op) is ast.Attribute:
        return op.attr
    if type(op) is ast.BinOp:
        return "BinaryOperation"
    if type(op) is ast.UnaryOp:
        return "UnaryOperation"
    return type(op).__name__


def _parenthesized(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``expr`` wrapped in parentheses when it is an operator expression without them."""
    if (
        isinstance(
            expr,
            (
                cst.BinaryOperation,
                cst.UnaryOperation,
                cst.BooleanOperation,
                cst.Comparison,
                cst.IfExp,
                cst.Lambda,
            ),
        )
        and not expr.lpar
    ):
        return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return expr


def _without_outer_parens(expr: cst.BaseExpression) -> cst.BaseExpression:
    return expr.with_changes(lpar=[], rpar=[]) if expr.lpar else expr


def _is_keyword(arg: cst.Arg, keyword: str) -> bool:
    return arg.keyword is not None and arg.keyword.value == keyword
