"""GF105 integer-requires-grad."""

from __future__ import annotations

import ast
import re

import libcst as cst

from gradfix.edits import Editor, cst_argument, with_argument
from gradfix.lazy import lazy_class
from gradfix.rule import FixPlan, FixSafety, Invalid, Rule, Valid
from gradfix.semantic.syntax import argument, is_false, is_true
from gradfix.torch_facts import INTEGER_DTYPES

PARAMETER = "torch.nn.Parameter"
#: Decimal integer literals (``12``, ``1_000``): they become ``12.0``.
_DECIMAL = re.compile(r"[0-9][0-9_]*")


class IntegerRequiresGrad(Rule):
    """
    ## What it does
    Finds tensors created with an integer dtype that are asked to require gradients:
    `torch.tensor([1, 2, 3], requires_grad=True)`, `torch.arange(5, requires_grad=True)`,
    an integer `dtype=` with `requires_grad=True`, and `nn.Parameter(torch.tensor([1, 2]))`.

    ## Why is this bad?
    Only floating point and complex tensors take part in autograd. A list of Python ints,
    `arange` of ints or `full` with an int fill value gives an `int64` tensor, and asking
    it for gradients raises at once: "Only Tensors of floating point and complex dtype can
    require gradients".

    ## Example
    ```python
    x = torch.tensor([1, 2, 3], requires_grad=True)
    steps = torch.arange(5, requires_grad=True)
    ```

    ## Use instead
    ```python
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    steps = torch.arange(5, requires_grad=True, dtype=torch.float32)
    ```
    Integer literals get a `.0` (nested lists too, signs kept); `arange` of integer
    literals gets `dtype=torch.float32`; an explicit integer dtype becomes `torch.float32`.

    ## Fix safety
    The original code raises before producing anything, so the fixed code has no forward
    result to disagree with. Float literals (and a float fill value of `torch.full`) give
    the values the integers meant, in the default dtype: safe. `arange` gets an explicit
    `torch.float32` (not `torch.get_default_dtype()`: shorter, and what users write);
    its values are the same integers: safe. Replacing an explicit integer `dtype=` is
    unsafe: the author asked for integers, and the intent may have been an index tensor
    that should not require grad at all. Only literal integers are judged: `arange(n)`
    with a name, or a list of names, is not reported.
    """

    code = "GF105"
    fix_restores_gradient = True
    name = "integer-requires-grad"
    message = "Integer tensor cannot require gradients; use a floating point dtype"
    fix_safety = FixSafety.SAFE
    fix_safeties = (FixSafety.SAFE, FixSafety.UNSAFE)

    VALID = [
        Valid(
            """
            import torch
            x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
            y = torch.arange(5.0, requires_grad=True)
            z = torch.tensor([1, 2], dtype=torch.float64, requires_grad=True)
            """
        ),
        Valid(
            """
            import torch
            labels = torch.tensor([0, 2, 1])
            index = torch.arange(4)
            mask = torch.tensor([1, 0, 1], requires_grad=False)
            """
        ),
        Valid(
            """
            import torch
            from torch import nn
            steps = nn.Parameter(torch.arange(3), requires_grad=False)
            w = nn.Parameter(torch.tensor([0.5, 1.5]))
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            x = torch.tensor([[1, -2], [3, 4]], requires_grad=True)
            """,
            """
            import torch
            x = torch.tensor([[1.0, -2.0], [3.0, 4.0]], requires_grad=True)
            """,
        ),
        Invalid(
            """
            import torch as th
            t = th.arange(1, 6, requires_grad=True)
            """,
            """
            import torch as th
            t = th.arange(1, 6, requires_grad=True, dtype=th.float32)
            """,
        ),
        Invalid(
            """
            import torch
            from torch import nn
            scale = nn.Parameter(torch.tensor([2, 3]))
            ids = torch.zeros(3, dtype=torch.long, requires_grad=True)
            mask = torch.zeros(3, dtype=torch.bool, requires_grad=True)
            """,
            """
            import torch
            from torch import nn
            scale = nn.Parameter(torch.tensor([2.0, 3.0]))
            ids = torch.zeros(3, dtype=torch.float32, requires_grad=True)
            mask = torch.zeros(3, dtype=torch.float32, requires_grad=True)
            """,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        name = self.analysis.call_name(node)
        if name is None or not self._asks_for_grad(node):
            return
        fix = self._fix(node, name)
        if fix is not None:
            self.report(node, fix=fix)

    def _asks_for_grad(self, node: ast.Call) -> bool:
        """``requires_grad=True`` on the call, or the call is the data of ``nn.Parameter``."""
        flag = argument(node, "requires_grad", None)
        if flag is not None:
            return is_true(flag)
        wrapper = self.analysis.parent(node)
        if type(wrapper) is ast.keyword:
            wrapper = self.analysis.parent(wrapper)
        if not isinstance(wrapper, ast.Call) or self.analysis.call_name(wrapper) != PARAMETER:
            return False
        if argument(wrapper, "data", 0) is not node:
            return False
        flag = argument(wrapper, "requires_grad", 1)
        return flag is None or not is_false(flag)

    def _fix(self, node: ast.Call, name: str) -> FixPlan | None:
        """The rewrite of an integer-typed constructor (``None``: not provably integer)."""
        dtype = argument(node, "dtype", None)
        if dtype is not None:
            if self.analysis.qualified_name(dtype) not in INTEGER_DTYPES:
                return None
            return self.plan_replace(
                node, _float32_dtype, "Use `torch.float32`", safety=FixSafety.UNSAFE
            )
        if name == "torch.tensor":
            return self._float_literal_fix(node, "data", 0)
        if name == "torch.full":
            return self._float_literal_fix(node, "fill_value", 1)
        if name == "torch.arange":
            return self._arange_fix(node)
        return None

    def _float_literal_fix(self, node: ast.Call, keyword: str, position: int) -> FixPlan | None:
        data = argument(node, keyword, position)
        if data is None or not self._all_integer_literals(data):
            return None

        def float_literals(editor: Editor, call: cst.CSTNode) -> cst.Call | None:
            assert isinstance(call, cst.Call)
            arg = cst_argument(call, keyword, position)
            if arg is None:
                return None
            value = arg.value.visit(_FloatLiterals())
            return call.with_changes(
                args=[a.with_changes(value=value) if a is arg else a for a in call.args]
            )

        return self.plan_replace(node, float_literals, "Use float literals")

    def _arange_fix(self, node: ast.Call) -> FixPlan | None:
        if not node.args or any(
            type(a) is ast.Starred or not self._all_integer_literals(a) for a in node.args
        ):
            return None
        if any(k.arg is None for k in node.keywords):
            return None  # ``**kwargs``: LibCST counted it as a starred argument
        if any(k.arg in ("start", "end", "step") for k in node.keywords):
            return None
        return self.plan_replace(node, _arange_float32, "Add `dtype=torch.float32`")

    def _all_integer_literals(self, expr: ast.expr) -> bool:
        """``3``, ``-2``, ``[1, 2]``, ``((1, 2), (3, 4))``: nothing but decimal integers."""
        if type(expr) is ast.UnaryOp and type(expr.op) in (ast.USub, ast.UAdd):
            return self._all_integer_literals(expr.operand)
        if type(expr) is ast.Constant and type(expr.value) is int:
            text = self.analysis.segment(expr) or ""
            return _DECIMAL.fullmatch(text) is not None
        if type(expr) in (ast.List, ast.Tuple):
            elements = expr.elts  # type: ignore[attr-defined]
            return bool(elements) and all(
                type(e) is not ast.Starred and self._all_integer_literals(e) for e in elements
            )
        return False


def _float32_dtype(editor: Editor, call: cst.CSTNode) -> cst.Call:
    """``dtype=torch.long`` -> ``dtype=torch.float32``."""
    assert isinstance(call, cst.Call)
    return with_argument(call, "dtype", editor.torch_attr("float32"))


def _arange_float32(editor: Editor, call: cst.CSTNode) -> cst.Call:
    """``arange(1, 6, ...)`` -> ``arange(1, 6, ..., dtype=torch.float32)``."""
    assert isinstance(call, cst.Call)
    return with_argument(call, "dtype", editor.torch_attr("float32"))


@lazy_class
def _FloatLiterals() -> type:
    class FloatLiterals(cst.CSTTransformer):
        """``1`` -> ``1.0``: the literal's own text, so its spelling (``1_000``) is kept."""

        def leave_Integer(self, original_node: cst.Integer, updated_node: cst.Integer) -> cst.Float:
            return cst.Float(
                value=updated_node.value + ".0", lpar=updated_node.lpar, rpar=updated_node.rpar
            )

    return FloatLiterals
