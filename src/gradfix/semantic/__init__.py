"""The shared analysis on Python's `ast`: what every rule asks about a file.

It replaced ``gradfix.analysis.FileAnalysis`` (the same questions on LibCST, removed by
issue 12), with the same method names, arguments and meanings, on `ast` nodes.

    tree = ast.parse(source)
    semantic = Semantic(tree, source)
    semantic.qualified_name(call.func)  # "torch.nn.Parameter"

One traversal (:mod:`.collect`) records parents, pre-order indices (in the order of the
source text, as LibCST's), scopes and bindings, names by spelling, call sites, ``self.``
attributes, returns and generators. The questions are split by concern:

- :mod:`.navigation` tree, scopes, ``bindings``/``reaching_binding``, exclusive branches
- :mod:`.names` ``qualified_name``, ``call_name``, ``is_torch_name``, torch aliases
- :mod:`.values` returned values, list elements, passed arguments, ``self`` attributes
- :mod:`.modules` ``is_nn_layer``, ``is_module``, ``parameter_iterable``
- :mod:`.leaves` ``leaf_reason``, ``leaf_value_reason``
- :mod:`.grad` ``in_no_grad``, ``requires_grad``
- :mod:`.tensors` ``is_tensor``, ``tensor_op``, ``saved_operands``, ``saves_output``,
  ``element_shape``
- :mod:`.syntax` helpers on one node (``argument``, ``is_true``, ``normalized_code``...)
- :mod:`.tables` Python operators -> torch ops; every torch fact is read from
  :mod:`gradfix.torch_facts`

What changed from ``FileAnalysis`` (for readers of older rules; everything else is the
same name and meaning):

========================================  ===============================================
``FileAnalysis(module: cst.Module)``      ``Semantic(tree: ast.Module, source: str)``;
                                          ``.module`` is the ``ast.Module``, ``.source``
``argument(call, kw, pos)`` -> ``cst.Arg`` returns the passed *value* (``arg.value``);
                                          ``argument_node`` returns the ``ast.keyword`` or
                                          positional expression
``call.args`` (``cst.Arg`` list)          ``call_arguments(call)`` (positional then
                                          keywords), ``argument_value(arg)``,
                                          ``argument_values(call)``, ``is_unpacked(arg)``
``Binding.node`` ``Param`` / ``CompFor``  ``ast.arg`` / ``ast.comprehension`` /
/ ``WithItem``                            ``ast.withitem``; statements are the ``ast.stmt``
``enclosing_statement`` -> line           the innermost ``ast.stmt`` (no
                                          ``SimpleStatementLine``: ``a; b`` are two)
``name_nodes_in(root, name)``             variables only (``ast.Name``): an attribute's
                                          name, a keyword, a parameter are not ``Name``
``enclosing_function``/``local_function`` ``ast.FunctionDef`` or ``AsyncFunctionDef``
``torch_attr(dotted)`` -> ``cst`` expr    an ``ast.expr`` (``ast.unparse`` for its code)
``normalized_code(expr)``                 ``ast.dump`` with targets read as loads
``VariableNames`` (``walk(node, c)``)     an ``ast.NodeVisitor``: ``c.visit(node)``
``_is_self``, ``_unpacked_call_values``,  public: ``is_self``, ``unpacked_call_values``,
``_parameter_iteration``,                 ``parameter_iteration``, ``is_module_base``,
``_is_module_base``, ``_runs_once``       ``runs_once`` (no rule used the private names)
========================================  ===============================================
"""

from __future__ import annotations

import ast

from gradfix.semantic.scopes import SCOPE_TYPES, Binding, LeafReason, Scope
from gradfix.semantic.syntax import (
    CallArgument,
    VariableNames,
    _argument,
    argument,
    argument_node,
    argument_value,
    argument_values,
    call_arguments,
    dotted,
    is_false,
    is_none,
    is_number_literal,
    is_true,
    is_unpacked,
    normalized_code,
    source_children,
)
from gradfix.semantic.tensors import TensorQueries
from gradfix.torch_facts import (
    FACTORIES,
    LAYER_PARAMETERS,
    NO_GRAD_CONTEXTS,
    NON_TENSOR_METHODS,
    NON_TENSOR_TORCH,
    REDUCTIONS,
    SAVES_DIVISOR,
    SAVES_INPUTS,
    SAVES_NOTHING,
    SAVES_OTHER_OPERANDS,
    SAVES_OUTPUT,
    TENSOR_OPS,
    VIEW_ATTRIBUTES,
    VIEW_OPS,
)

SCOPE_NODES = tuple(SCOPE_TYPES)
_is_true = is_true
_is_false = is_false


class Semantic(TensorQueries):
    """Facts about one module parsed with ``ast.parse``; see the module docstring."""

    def __init__(
        self,
        tree: ast.Module,
        source: str = "",
        no_grad_callers: frozenset[str] = frozenset(),
        walked: frozenset[type] = frozenset(),
    ) -> None:
        """``no_grad_callers``: the names of functions that other files call only under
        ``no_grad`` (see :attr:`~.navigation.Navigation.no_grad_callers`). ``walked``: the
        node types the rules' walk visits (:func:`gradfix.walk.walked_types`): their nodes
        are listed in pre-order during the one traversal (``walked_nodes``)."""
        super().__init__(tree, source, walked)
        self.no_grad_callers = no_grad_callers


__all__ = [
    "FACTORIES",
    "LAYER_PARAMETERS",
    "NON_TENSOR_METHODS",
    "NON_TENSOR_TORCH",
    "NO_GRAD_CONTEXTS",
    "REDUCTIONS",
    "SAVES_DIVISOR",
    "SAVES_INPUTS",
    "SAVES_NOTHING",
    "SAVES_OTHER_OPERANDS",
    "SAVES_OUTPUT",
    "SCOPE_NODES",
    "TENSOR_OPS",
    "VIEW_ATTRIBUTES",
    "VIEW_OPS",
    "Binding",
    "CallArgument",
    "LeafReason",
    "Scope",
    "Semantic",
    "VariableNames",
    "_argument",
    "_is_false",
    "_is_true",
    "argument",
    "argument_node",
    "argument_value",
    "argument_values",
    "call_arguments",
    "dotted",
    "is_false",
    "is_none",
    "is_number_literal",
    "is_true",
    "is_unpacked",
    "normalized_code",
    "source_children",
]
