"""Questions about one `ast` node that need no analysis: literals, arguments, order.

Rules import these from :mod:`gradfix.semantic` (``argument``, ``is_true``,
``is_number_literal``, ``normalized_code``, ``VariableNames``...).
"""

from __future__ import annotations

import ast
import functools
import io
import tokenize
from collections.abc import Callable
from typing import Any

from gradfix.fileio.text import LINE

#: Fields that hold the shared singletons ``Load()``, ``Add()``, ``Eq()``...: never visited
#: (one object stands for every occurrence, so it has no parent nor position).
_SINGLETON_FIELDS = frozenset({"ctx", "op", "ops"})
_FIELDS: dict[type[ast.AST], tuple[str, ...]] = {}


def source_children(node: ast.AST) -> list[ast.AST]:
    """The child nodes of ``node`` in the order of the source text (``ast`` lists
    decorators after the body, a default apart from its parameter, ``x if c else y`` test
    first): pre-order positions then follow the text, as LibCST's do."""
    special = _SPECIAL_CHILDREN.get(type(node))
    if special is not None:
        return special(node)
    fields = _FIELDS.get(type(node))
    if fields is None:
        fields = tuple(f for f in node._fields if f not in _SINGLETON_FIELDS)
        _FIELDS[type(node)] = fields
    children: list[ast.AST] = []
    for name in fields:
        value = getattr(node, name, None)
        if type(value) is list:
            children += [item for item in value if isinstance(item, ast.AST)]
        elif isinstance(value, ast.AST):
            children.append(value)
    return children


def children_function(kind: type[ast.AST]) -> Callable[[Any], list[ast.AST]]:
    """What gives :func:`source_children` of the nodes of type ``kind`` (a traversal looks
    it up once per type instead of once per node)."""
    return _SPECIAL_CHILDREN.get(kind, source_children)


def _call_children(node: ast.Call) -> list[ast.AST]:
    args, keywords = node.args, node.keywords
    if keywords and args:  # ``f(a=1, *b)``: a keyword may come before a (starred) argument
        last, first = args[-1], keywords[0]
        if (last.lineno, last.col_offset) > (first.lineno, first.col_offset):
            return [node.func, *sorted([*args, *keywords], key=_start)]
    return [node.func, *args, *keywords]


def _dict_children(node: ast.Dict) -> list[ast.AST]:
    pairs = zip(node.keys, node.values, strict=True)
    return [child for key, value in pairs for child in (key, value) if child is not None]


def _start(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def _definition_children(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> list:
    children: list[ast.AST] = [*node.decorator_list, *getattr(node, "type_params", [])]
    if type(node) is ast.ClassDef:
        children += [*node.bases, *node.keywords]
    else:
        children.append(node.args)  # type: ignore[union-attr]
        if node.returns is not None:  # type: ignore[union-attr]
            children.append(node.returns)  # type: ignore[union-attr]
    return [*children, *node.body]


def _parameter_children(node: ast.arguments) -> list[ast.AST]:
    children: list[ast.AST] = []
    for arg, default in parameter_defaults(node):
        children.append(arg)
        if default is not None:
            children.append(default)
    return children


_SPECIAL_CHILDREN: dict[type[ast.AST], Callable[[Any], list[ast.AST]]] = {
    ast.FunctionDef: _definition_children,
    ast.AsyncFunctionDef: _definition_children,
    ast.ClassDef: _definition_children,
    ast.arguments: _parameter_children,
    ast.IfExp: lambda node: [node.body, node.test, node.orelse],
    ast.Dict: _dict_children,
    ast.Call: _call_children,
    # the most frequent node types, spelled out: what the loop below would find, faster
    # (the analysis asks for the children of every node once)
    ast.Attribute: lambda node: [node.value],
    ast.Assign: lambda node: [*node.targets, node.value],
    ast.arg: lambda node: [] if node.annotation is None else [node.annotation],
    ast.keyword: lambda node: [node.value],
    ast.BinOp: lambda node: [node.left, node.right],
    ast.Subscript: lambda node: [node.value, node.slice],
    ast.Compare: lambda node: [node.left, *node.comparators],
    ast.Expr: lambda node: [node.value],
    ast.Tuple: lambda node: list(node.elts),
    ast.UnaryOp: lambda node: [node.operand],
    ast.Return: lambda node: [] if node.value is None else [node.value],
    ast.If: lambda node: [node.test, *node.body, *node.orelse],
    ast.List: lambda node: list(node.elts),
    ast.BoolOp: lambda node: list(node.values),
    ast.Starred: lambda node: [node.value],
    ast.alias: lambda node: [],
    ast.AugAssign: lambda node: [node.target, node.value],
    ast.Slice: lambda node: [n for n in (node.lower, node.upper, node.step) if n is not None],
    ast.AnnAssign: lambda node: [
        n for n in (node.target, node.annotation, node.value) if n is not None
    ],
}


def parameter_defaults(node: ast.arguments) -> list[tuple[ast.arg, ast.expr | None]]:
    """Every parameter in source order with its default (None without one)."""
    positional = [*node.posonlyargs, *node.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(node.defaults))
    pairs = list(zip(positional, [*defaults, *node.defaults], strict=True))
    if node.vararg is not None:
        pairs.append((node.vararg, None))
    pairs += zip(node.kwonlyargs, node.kw_defaults, strict=True)
    if node.kwarg is not None:
        pairs.append((node.kwarg, None))
    return pairs


def default_of(func: ast.FunctionDef | ast.AsyncFunctionDef, param: ast.arg) -> ast.expr | None:
    """The default value of ``param`` in ``func``'s signature."""
    return next((d for a, d in parameter_defaults(func.args) if a is param), None)


# -- call arguments ----------------------------------------------------------------------------
#: A call argument as LibCST's ``Arg``: a positional expression, an ``ast.Starred`` or an
#: ``ast.keyword`` (``**kw`` is a keyword whose ``arg`` is None).
CallArgument = ast.expr | ast.keyword


def call_arguments(call: ast.Call) -> list[CallArgument]:
    """Positional then keyword arguments (LibCST's ``call.args``)."""
    return [*call.args, *call.keywords]


def argument_value(arg: CallArgument) -> ast.expr:
    """What an argument passes (LibCST's ``arg.value``): the expression after ``*``, ``**``
    or ``keyword=``."""
    if type(arg) is ast.keyword or type(arg) is ast.Starred:
        return arg.value
    return arg  # type: ignore[return-value]


def argument_values(call: ast.Call) -> list[ast.expr]:
    return [argument_value(a) for a in call_arguments(call)]


def is_unpacked(arg: CallArgument) -> bool:
    """``*xs`` or ``**kw`` (LibCST's ``arg.star``)."""
    return type(arg) is ast.Starred or (type(arg) is ast.keyword and arg.arg is None)


def argument_node(call: ast.Call, keyword: str, position: int | None) -> CallArgument | None:
    """The argument passed as ``keyword=`` (the ``ast.keyword``) or at ``position``
    (positional only; the expression)."""
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw
    if position is not None:
        positional = [a for a in call.args if type(a) is not ast.Starred]
        if len(positional) > position:
            return positional[position]
    return None


def argument(call: ast.Call, keyword: str, position: int | None) -> ast.expr | None:
    """The value passed as ``keyword=`` or at ``position`` (positional only). LibCST's
    version returned the ``Arg``: its ``.value`` is what this returns."""
    found = argument_node(call, keyword, position)
    return None if found is None else argument_value(found)


_argument = argument


# -- literals ----------------------------------------------------------------------------------
def is_true(expr: ast.AST | None) -> bool:
    return type(expr) is ast.Constant and expr.value is True


def is_false(expr: ast.AST | None) -> bool:
    return type(expr) is ast.Constant and expr.value is False


def is_none(expr: ast.AST | None) -> bool:
    return type(expr) is ast.Constant and expr.value is None


def is_int_literal(expr: ast.AST) -> bool:
    """``3``, ``0x10`` (not ``True``)."""
    return type(expr) is ast.Constant and type(expr.value) is int


def is_number_literal(expr: ast.AST) -> bool:
    """``3``, ``0.5``, ``-2``, ``+1e-3``: a Python number written in the source."""
    if type(expr) is ast.UnaryOp and type(expr.op) in (ast.USub, ast.UAdd):
        return is_number_literal(expr.operand)
    return type(expr) is ast.Constant and type(expr.value) in (int, float)


def combined_values(expr: ast.AST) -> list[ast.expr] | None:
    """The values an arithmetic expression combines (``a + b``, ``-a``, ``a if c else b``,
    ``[a, *b]``); None: not one."""
    if type(expr) is ast.BinOp:
        return [expr.left, expr.right]
    if type(expr) is ast.UnaryOp:
        return [expr.operand]
    if type(expr) is ast.IfExp:
        return [expr.body, expr.orelse]
    if type(expr) in (ast.List, ast.Tuple):
        return [e.value if type(e) is ast.Starred else e for e in expr.elts]  # type: ignore[attr-defined]
    return None


def constructs_a_class(name: str) -> bool:
    """``torch.nn.Linear``, ``torch.optim.SGD``: a class, not an op on tensors
    (``torch.distributions.Categorical`` is followed: its methods read its arguments)."""
    module, _, last = name.rpartition(".")
    return last[:1].isupper() and not module.startswith("torch.distributions")


def string_value(expr: ast.AST) -> str | None:
    return expr.value if type(expr) is ast.Constant and type(expr.value) is str else None


def dotted(node: ast.AST) -> str:
    """``a.b.c`` for a chain of names, else ``""``."""
    if type(node) is ast.Name:
        return node.id
    if type(node) is ast.Attribute:
        return f"{dotted(node.value)}.{node.attr}"
    return ""


def normalized_code(expr: ast.AST) -> str:
    """A key that two expressions share when they differ only in layout: whitespace,
    comments, parentheses (``x[ i ]`` and ``x[i]``; not ``"a b"`` and ``"ab"``). A target
    and a read of the same expression share it too (``x[i] = ...`` and ``x[i]``)."""
    dump = ast.dump(expr)
    return dump.replace("ctx=Store()", "ctx=Load()").replace("ctx=Del()", "ctx=Load()")


def literal_items(value: ast.AST) -> list[ast.expr] | None:
    """The items of a list/tuple literal without ``*unpacking`` (None otherwise)."""
    if type(value) is not ast.List and type(value) is not ast.Tuple:
        return None
    if any(type(e) is ast.Starred for e in value.elts):
        return None
    return list(value.elts)


def iterates_at_least_once(iterable: ast.expr) -> bool:
    """``range(3)``, ``range(1, 4)``, ``[a, b]``: a loop over it runs its body."""
    if type(iterable) is ast.List or type(iterable) is ast.Tuple:
        return bool(iterable.elts) and literal_items(iterable) is not None
    if type(iterable) is not ast.Call or type(iterable.func) is not ast.Name:
        return False
    args = argument_values(iterable)
    if iterable.func.id != "range" or not 1 <= len(args) <= 2:
        return False
    if not all(is_int_literal(a) for a in args):
        return False
    bounds: list[int] = [a.value for a in args]  # type: ignore[attr-defined]
    return bounds[-1] > (bounds[0] if len(bounds) == 2 else 0)


def flatten_operands(call: ast.Call) -> list[ast.expr]:
    """Argument values, with the elements of list/tuple literals spliced in."""
    operands: list[ast.expr] = []
    for value in argument_values(call):
        if type(value) is ast.List or type(value) is ast.Tuple:
            operands.extend(argument_value(e) for e in value.elts)
        else:
            operands.append(value)
    return operands


def iterated_source(iterable: ast.expr, unpack_index: int | None) -> ast.expr | None:
    """What a loop variable is taken from: ``x`` for ``for row in x``, the i-th argument
    for ``for a, b in zip(x, y)``, ``x`` for the second name of ``enumerate(x)``."""
    if unpack_index is None:
        return iterable
    if type(iterable) is not ast.Call or type(iterable.func) is not ast.Name:
        return None
    if iterable.keywords or any(type(a) is ast.Starred for a in iterable.args):
        return None
    args = iterable.args
    if iterable.func.id == "zip" and unpack_index < len(args):
        return args[unpack_index]
    if iterable.func.id == "enumerate" and unpack_index == 1 and len(args) == 1:
        return args[0]
    return None


def subscript_key(node: ast.Subscript) -> str | None:
    """``"params"`` for ``group["params"]``."""
    return string_value(node.slice)


def subscript_indices(node: ast.Subscript) -> list[ast.expr]:
    """The comma-separated indices of ``x[i, j]`` (one for ``x[i]``)."""
    index = node.slice
    return list(index.elts) if type(index) is ast.Tuple else [index]


def target_name(node: ast.AST) -> str | None:
    """The ``x`` of ``x.requires_grad = ...`` or ``x.requires_grad_()``."""
    if type(node) is ast.Assign:
        target = node.targets[0]
        if type(target) is ast.Attribute and type(target.value) is ast.Name:
            return target.value.id
    if type(node) is ast.Call and type(node.func) is ast.Attribute:
        if type(node.func.value) is ast.Name:
            return node.func.value.id
    return None


def is_function(node: ast.AST | None) -> bool:
    """A ``def`` or ``async def`` (LibCST's ``FunctionDef``)."""
    return type(node) is ast.FunctionDef or type(node) is ast.AsyncFunctionDef


class VariableNames(ast.NodeVisitor):
    """Collects the ``Name`` nodes under a node, in source order (on `ast` an attribute's
    name, a keyword or a parameter is not a ``Name``). The name walkers of the rules
    subclass it for what they count besides (parameters, imports, assignment targets).

        collector = VariableNames()
        collector.visit(node)
        collector.names
    """

    def __init__(self) -> None:
        self.names: list[ast.Name] = []

    def visit_Name(self, node: ast.Name) -> None:
        self.names.append(node)

    def generic_visit(self, node: ast.AST) -> None:
        for child in source_children(node):
            self.visit(child)


def is_backward_call(call: ast.Call) -> bool:
    """``x.backward(...)``: a call of a method named ``backward`` (``torch.autograd.backward``
    included; rules that must tell the two apart ask ``call_name``)."""
    return type(call.func) is ast.Attribute and call.func.attr == "backward"


@functools.lru_cache(maxsize=4)
def _source_lines(source: str) -> list[str]:
    return LINE.findall(source)


def source_segment(source: str, node: ast.AST) -> str | None:
    """``ast.get_source_segment(source, node)`` without splitting the whole source at
    each call (it does: a rule asking it in a loop is quadratic in the file)."""
    try:
        line, end_line = node.lineno - 1, node.end_lineno - 1  # type: ignore[attr-defined]
        col, end_col = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
    except (AttributeError, TypeError):
        return None
    if end_col is None:
        return None
    lines = _source_lines(source)
    if line == end_line:
        return lines[line].encode()[col:end_col].decode()
    first = lines[line].encode()[col:].decode()
    last = lines[end_line].encode()[:end_col].decode()
    return "".join([first, *lines[line + 1 : end_line], last])


def is_concatenated_string(expr: ast.AST, source: str) -> bool:
    """``"a" "b"``: string literals written side by side, one ``ast.Constant`` (LibCST's
    ``ConcatenatedString``, not a ``SimpleString``)."""
    if type(expr) is not ast.Constant or type(expr.value) not in (str, bytes):
        return False
    text = f"({source_segment(source, expr)})"  # in parentheses: lines join
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return False
    return sum(token.type == tokenize.STRING for token in tokens) > 1


def spelled_names(node: ast.AST) -> tuple[str, ...]:
    """The identifiers ``node`` itself spells (not its children's): a variable, an
    attribute, a keyword, a parameter, a definition, an import, a ``global``... (each one
    a ``Name`` node in LibCST)."""
    if isinstance(node, ast.Name):
        return (node.id,)
    if isinstance(node, ast.Attribute):
        return (node.attr,)
    if isinstance(node, (ast.keyword, ast.arg)):
        return (node.arg,) if node.arg else ()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return (node.name,)
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return tuple(node.names)
    if isinstance(node, ast.ExceptHandler):
        return (node.name,) if node.name else ()
    if isinstance(node, ast.alias):
        return (*node.name.split("."), *((node.asname,) if node.asname else ()))
    if isinstance(node, ast.ImportFrom):
        return tuple(part for part in (node.module or "").split(".") if part)
    return ()


def arguments_in_source_order(call: ast.Call) -> list[CallArgument]:
    """The arguments as written (LibCST's ``call.args``): ``f(a=1, *b)`` puts the keyword
    first, where :func:`call_arguments` lists positional arguments first."""
    arguments = call_arguments(call)
    if call.args and call.keywords:
        arguments.sort(key=lambda a: (a.lineno, a.col_offset))
    return arguments


def is_super_call(node: ast.expr) -> bool:
    """``super()`` (the receiver of ``super().f(x)``)."""
    return type(node) is ast.Call and type(node.func) is ast.Name and node.func.id == "super"
