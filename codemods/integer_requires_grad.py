"""GF105 integer-requires-grad."""

from __future__ import annotations

import ast
import re

import libcst as cst

from gradfix.edits import Editor, cst_argument, with_argument
from gradfix.lazy import lazy_class
from gradfix.rule import Edit, FixAvailability, FixPlan, FixSafety, Invalid, Rule, Valid
from gradfix.semantic.syntax import argument, is_false, is_true
from gradfix.torch_facts import INTEGER_DTYPES

PARAMETER = "torch.nn.Parameter"
#: torch functions whose result is an integer (or bool) tensor: indices, counts, draws.
INTEGER_FUNCTIONS = frozenset(
    "torch." + name
    for name in "argmax argmin argsort randint randint_like randperm nonzero bucketize "
    "searchsorted multinomial".split()
)
#: Tensor methods with an integer (or bool) result.
INTEGER_METHODS = frozenset("argmax argmin argsort long int short byte bool nonzero".split())
#: torch functions returning ``(values, indices)`` when given a dimension.
VALUES_INDICES = frozenset("torch." + n for n in "max min sort topk kthvalue mode median".split())
#: Methods of a tensor of ids: ``emb(ids)`` of an ``nn.Embedding``, ``F.embedding(ids, w)``.
ID_CONSUMERS = frozenset({"torch.nn.functional.embedding", "torch.nn.functional.one_hot"})
#: Loss functions whose second argument is a class index.
INDEX_TARGET_LOSSES = frozenset(
    "torch.nn.functional." + n for n in ("cross_entropy", "nll_loss", "multi_margin_loss")
)
#: Decimal integer literals (``12``, ``1_000``): they become ``12.0``.
_DECIMAL = re.compile(r"[0-9][0-9_]*")


class IntegerRequiresGrad(Rule):
    """
    ## What it does
    Finds tensors created with an integer dtype that are asked to require gradients:
    `torch.tensor([1, 2, 3], requires_grad=True)`, `torch.arange(5, requires_grad=True)`,
    an integer `dtype=` with `requires_grad=True`, and `nn.Parameter(torch.tensor([1, 2]))`;
    also `requires_grad = True` / `requires_grad_()` on integer results (`argmax`, the
    indices of `torch.max(x, 1)`, `randint`, `.long()`), reported without a fix: indices
    carry no gradient, the loss must be computed on the scores.

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
    with a name, or a list of names, is not reported. A tensor of literal integers used
    as ids (looked up in an `nn.Embedding`, an index, the targets of `cross_entropy`)
    keeps its integers and loses `requires_grad=True` instead: floats would break that use.
    """

    code = "GF105"
    assign_targets = frozenset({ast.Attribute})  # visit_Assign: ``ids.requires_grad = True``
    # `requires_grad=True`, `.requires_grad = True`, `.requires_grad_()`, `nn.Parameter(...)`
    needs = frozenset({"requires_grad", "requires_grad_", PARAMETER.rpartition(".")[2]})
    fix_restores_gradient = True
    name = "integer-requires-grad"
    synopsis = (
        "Finds integer tensors asked to require gradients, which raises, and makes them "
        "floating point (float literals or `dtype=torch.float32`)."
    )
    message = "Integer tensor cannot require gradients; use a floating point dtype"
    fix_safety = FixSafety.SAFE
    fix_safeties = (FixSafety.SAFE, FixSafety.UNSAFE)
    fix_availability = FixAvailability.SOMETIMES
    INDICES_MESSAGE = (
        "Integer indices cannot require gradients: `argmax`/`max(dim)` indices, draws and "
        "casts to an integer dtype carry no gradient; compute the loss on the scores instead"
    )

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
        Valid(
            """
            import torch
            scores = torch.randn(4, 3, requires_grad=True)
            predicted = scores.argmax(dim=1)
            values, _ = torch.max(scores, 1)
            values.requires_grad_()  # the values are floats
            scores.requires_grad = True
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
        Invalid(
            """
            import torch
            scores = torch.randn(4, 3, requires_grad=True)
            _, labels_hat = scores.max(dim=1)
            labels_hat.requires_grad_()
            drawn = torch.randint(0, 3, (4,))
            drawn.requires_grad = True
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch
            from torch import nn
            embed = nn.Embedding(10, 4)
            token_ids = torch.tensor([[1, 5, 2]], requires_grad=True)
            vectors = embed(token_ids)
            """,
            """
            import torch
            from torch import nn
            embed = nn.Embedding(10, 4)
            token_ids = torch.tensor([[1, 5, 2]])
            vectors = embed(token_ids)
            """,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        marks = type(func) is ast.Attribute and func.attr == "requires_grad_"
        if not marks and not self._asks_for_grad(node):
            return  # cheap first: most calls neither pass requires_grad nor feed a Parameter
        name = self.analysis.call_name(node)
        if name is None:
            self._check_requires_grad_call(node)
            return
        if not self._asks_for_grad(node):
            return
        fix = self._fix(node, name)
        if fix is not None and self._used_as_ids(node):
            fix = self._drop_requires_grad(node)
        if fix is not None:
            self.report(node, fix=fix)

    # -- requires_grad asked of an integer result ----------------------------------------
    def visit_Assign(self, node: ast.Assign) -> None:
        """``predicted.requires_grad = True`` on the indices of ``torch.max(out, 1)``."""
        if len(node.targets) != 1 or not is_true(node.value):
            return
        target = node.targets[0]
        if type(target) is ast.Attribute and target.attr == "requires_grad":
            if self._is_integer_result(target.value, node, 0):
                self.report(node, self.INDICES_MESSAGE)

    def _check_requires_grad_call(self, node: ast.Call) -> None:
        """``ids.requires_grad_()`` on an integer result."""
        func = node.func
        if type(func) is not ast.Attribute or func.attr != "requires_grad_":
            return
        flag = argument(node, "requires_grad", 0)
        if (flag is None or is_true(flag)) and self._is_integer_result(func.value, node, 0):
            self.report(node, self.INDICES_MESSAGE)

    def _is_integer_result(self, expr: ast.expr, at: ast.AST, depth: int) -> bool:
        """``expr`` is an index or integer tensor computed by torch: ``argmax``,
        ``randint``, ``.long()``, the indices of ``torch.max(x, dim)``."""
        if depth > 6:
            return False
        if type(expr) is ast.Name:
            binding = self.analysis.reaching_binding(expr, at)
            if binding is None or binding.kind != "assign" or binding.value is None:
                return False
            if binding.unpack_index is not None:
                return binding.unpack_index == 1 and self._values_indices(binding.value)
            return self._is_integer_result(binding.value, binding.node, depth + 1)
        if type(expr) is ast.Attribute and expr.attr == "indices":
            return self._values_indices(expr.value)
        if type(expr) is ast.Subscript and type(expr.slice) is ast.Constant:
            return expr.slice.value == 1 and self._values_indices(expr.value)
        if type(expr) is not ast.Call:
            return False
        name = self.analysis.call_name(expr)
        if name is not None:
            return name in INTEGER_FUNCTIONS
        func = expr.func
        return type(func) is ast.Attribute and func.attr in INTEGER_METHODS

    def _values_indices(self, expr: ast.expr) -> bool:
        """``torch.max(x, 1)``, ``x.topk(3)``: a ``(values, indices)`` pair."""
        if type(expr) is not ast.Call:
            return False
        name = self.analysis.call_name(expr)
        if name is not None:
            return name in VALUES_INDICES and len(expr.args) + len(expr.keywords) >= 2
        func = expr.func
        if type(func) is not ast.Attribute or "torch." + func.attr not in VALUES_INDICES:
            return False
        return func.attr in ("topk", "sort", "kthvalue") or bool(expr.args or expr.keywords)

    # -- integer ids asked for gradients -------------------------------------------------
    def _used_as_ids(self, node: ast.Call) -> bool:
        """The tensor ``node`` makes is used as ids: looked up in an ``nn.Embedding``, an
        index, the class targets of a loss. A float version would break that use."""
        statement = self.analysis.parent(node)
        if type(statement) is not ast.Assign or len(statement.targets) != 1:
            return False
        target = statement.targets[0]
        if type(target) is not ast.Name:
            return False
        scope = self.analysis.scope_of(statement).node
        for use in self.analysis.name_nodes_in(scope, target.id):
            if use is target or self.analysis.reaching_binding(use, use) is None:
                continue
            binding = self.analysis.reaching_binding(use, use)
            if binding is not None and binding.node is statement and self._id_use(use):
                return True
        return False

    def _id_use(self, use: ast.Name) -> bool:
        parent = self.analysis.parent(use)
        if type(parent) is ast.Subscript and parent.slice is use:
            return True  # ``table[ids]``
        if type(parent) is not ast.Call or use not in parent.args:
            return False
        name = self.analysis.call_name(parent) or ""
        if name in ID_CONSUMERS:
            return parent.args[0] is use
        if name in INDEX_TARGET_LOSSES:
            return len(parent.args) > 1 and parent.args[1] is use
        return self._is_embedding(parent.func, parent)

    def _is_embedding(self, func: ast.expr, at: ast.AST) -> bool:
        """``func`` holds an ``nn.Embedding`` (bound to ``nn.Embedding(...)`` here)."""
        if not self.analysis.is_nn_layer(func, at):
            return False
        while type(func) is ast.Name:
            binding = self.analysis.reaching_binding(func, at)
            if binding is None or binding.value is None:
                return False
            func, at = binding.value, binding.node
        if type(func) is ast.Attribute and self.analysis.is_self(func.value, at):
            values = self.analysis.self_attribute_values(func, at)
            return bool(values) and all(self._is_embedding(v, b.node) for v, b in values)
        name = self.analysis.call_name(func) if type(func) is ast.Call else None
        return name in ("torch.nn.Embedding", "torch.nn.EmbeddingBag")

    def _drop_requires_grad(self, node: ast.Call) -> FixPlan:
        def build(editor: Editor) -> list[Edit]:
            call = editor.node(node)
            assert isinstance(call, cst.Call)
            return [editor.remove_argument(call, "requires_grad")]

        return self.plan(build, "Drop `requires_grad=True`: the tensor holds ids")

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
