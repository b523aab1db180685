"""Probes: drive code that a file defines but never runs (no torch here; pure text).

A fix inside a function or an ``nn.Module`` that the file never calls with a backward
leaves the oracle with nothing to compare. :func:`probe_for` then writes a small driver,
appended verbatim to both BEFORE and AFTER, that exercises the code around the fix:

- a module-level function whose parameters are tensors: called with seeded random inputs
  that require grad, trying a small ladder of shapes until the call runs (the same shape
  in both versions, since the forward computation must not change), then ``backward()``
  through the sum of every tensor it returns;
- an ``nn.Module`` subclass constructible without arguments: its ``forward`` probed the
  same way, and every ``@property`` of the class that returns a tensor (seed 000's
  ``Param``) summed in;
- the user's own entry point (``--entry module:function``): :func:`entry_driver` imports
  the module from the project root, with the fixed file's text swapped in for AFTER, and
  calls the function.

The inputs are leaves created by ``torch.randn(..., requires_grad=True)``, so the oracle
compares their gradients (and the module's parameters') like those of any script.

    probe = probe_for(source, line=12)
    if probe is not None:
        before, after = before + probe.code, after + probe.code
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass

from gradfix import pyast

#: Input shapes tried in order after those the code suggests (the first one accepted wins).
SHAPE_LADDER = ((4,), (3, 4), (2, 3, 4), (2, 3, 8, 8), (2, 8), ())
#: Annotations that say a parameter is not a tensor: such a function is not probed.
_NON_TENSOR_ANNOTATIONS = frozenset({"int", "float", "str", "bool", "bytes", "dict", "list"})

_PRELUDE = """

# --- gradfix verification probe: drives {what} (not part of the user's code) ---
def __gradfix_probe_sum(value):
    import torch as __t
    if isinstance(value, __t.Tensor):  # a cut graph then fails in backward() as it should
        return value.sum() if value.is_floating_point() else None
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        parts = [p for p in map(__gradfix_probe_sum, value) if p is not None]
        return sum(parts[1:], parts[0]) if parts else None
    return None


class GradfixProbeError(Exception):
    pass


def __gradfix_probe_call(fn, count):
    import torch as __t
    for shape in {ladder!r}:
        __t.manual_seed(0)
        inputs = [__t.randn(shape, requires_grad=True) for _ in range(count)]
        try:
            return fn(*inputs)
        except Exception:
            continue
    raise GradfixProbeError("no input shape of {ladder!r} is accepted")
"""


@dataclass(frozen=True)
class Probe:
    """What to append to both versions, and a one-line description for the evidence."""

    code: str
    description: str


def probe_for(source: str, line: int) -> Probe | None:
    """A driver for the module-level function or class around ``line``, or None."""
    try:
        tree = pyast.parse(source)
    except (SyntaxError, ValueError):
        return None
    for node in tree.body:
        end = getattr(node, "end_lineno", None) or node.lineno
        if not node.lineno <= line <= end:
            continue
        if isinstance(node, ast.FunctionDef):
            return _function_probe(node)
        if isinstance(node, ast.ClassDef):
            return _module_probe(node)
    return None


def _function_probe(func: ast.FunctionDef) -> Probe | None:
    count = _tensor_parameter_count(func.args, skip_first=False)
    if count is None:
        return None
    what = f"{func.name}() with random tensor inputs"
    body = (
        f"__gradfix_total = __gradfix_probe_sum(__gradfix_probe_call({func.name}, {count}))\n"
        "__gradfix_total.backward()\n"
    )
    return Probe(_prelude(what, _shape_ladder(func)) + "\n\n" + body, what)


def _module_probe(cls: ast.ClassDef) -> Probe | None:
    if not any(_base_name(base).endswith("Module") for base in cls.bases):
        return None
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    init = methods.get("__init__")
    if init is not None and _tensor_parameter_count(init.args, skip_first=True) != 0:
        return None  # needs constructor arguments
    properties = [n.name for n in methods.values() if _is_property(n)]
    lines = ["__gradfix_module = " + cls.name + "()", "__gradfix_outputs = []"]
    forward = methods.get("forward")
    count = _tensor_parameter_count(forward.args, skip_first=True) if forward else None
    if count is not None:
        lines.append(f"__gradfix_outputs.append(__gradfix_probe_call(__gradfix_module, {count}))")
    lines += [f"__gradfix_outputs.append(__gradfix_module.{name})" for name in properties]
    if len(lines) == 2:
        return None
    lines.append("__gradfix_probe_sum(__gradfix_outputs).backward()")
    parts = (["forward()"] if count is not None else []) + [f".{p}" for p in properties]
    what = f"{cls.name}() through {', '.join(parts)}"
    ladder = _shape_ladder(cls)
    return Probe(_prelude(what, ladder) + "\n\n" + "\n".join(lines) + "\n", what)


def _prelude(what: str, ladder: tuple[tuple[int, ...], ...]) -> str:
    return _PRELUDE.format(what=what, ladder=ladder)


def _shape_ladder(node: ast.AST) -> tuple[tuple[int, ...], ...]:
    """The generic ladder, led by shapes built from the feature sizes the code names:
    the first argument of ``nn.Linear`` / ``nn.Conv*`` / norms and the integer defaults of
    parameters (``def __init__(self, features=3)`` -> ``(4, 3)``, ``(2, 4, 3)``)."""
    defaults = _integer_defaults(node)
    leading: list[tuple[int, ...]] = []
    for call in ast.walk(node):
        if not (isinstance(call, ast.Call) and call.args):
            continue
        layer = _base_name(call.func)
        size = _integer_value(call.args[0], defaults)
        if size is None or size <= 0:
            continue
        if layer in ("Conv1d", "BatchNorm1d", "InstanceNorm1d"):
            leading.append((2, size, 8))
        elif layer in ("Conv2d", "BatchNorm2d", "InstanceNorm2d", "ConvTranspose2d"):
            leading.append((2, size, 8, 8))
        elif layer in ("Linear", "LayerNorm", "Bilinear", "LSTM", "GRU", "RNN"):
            leading += [(4, size), (2, 4, size)]
    leading += [(4, d) for d in defaults.values() if d > 0]
    ordered = dict.fromkeys([*leading, *SHAPE_LADDER])  # first occurrence wins
    return tuple(ordered)


def _integer_defaults(node: ast.AST) -> dict[str, int]:
    found: dict[str, int] = {}
    for func in ast.walk(node):
        if not isinstance(func, ast.FunctionDef):
            continue
        positional = [*func.args.posonlyargs, *func.args.args]
        pairs = zip(positional[len(positional) - len(func.args.defaults) :], func.args.defaults)
        for arg, default in pairs:
            if isinstance(default, ast.Constant) and type(default.value) is int:
                found[arg.arg] = default.value
    return found


def _integer_value(expr: ast.expr, defaults: dict[str, int]) -> int | None:
    if isinstance(expr, ast.Constant) and type(expr.value) is int:
        return expr.value
    if isinstance(expr, ast.Name):
        return defaults.get(expr.id)
    return None


def _tensor_parameter_count(args: ast.arguments, *, skip_first: bool) -> int | None:
    """How many positional parameters need a value (all taken as tensors), or None when
    one of them is declared not to be a tensor or the call needs keyword-only values."""
    positional = [*args.posonlyargs, *args.args][1 if skip_first else 0 :]
    required = positional[: len(positional) - len(args.defaults)]
    if any(d is None for d in args.kw_defaults):
        return None
    for arg in required:
        annotation = arg.annotation
        if isinstance(annotation, ast.Name) and annotation.id in _NON_TENSOR_ANNOTATIONS:
            return None
    return len(required)


def _is_property(func: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "property" for d in func.decorator_list)


def _base_name(base: ast.expr) -> str:
    if isinstance(base, ast.Attribute):
        return base.attr
    return base.id if isinstance(base, ast.Name) else ""


_ENTRY_DRIVER = '''# gradfix verification driver: calls {entry} (nothing here is the user's code)
import importlib
import importlib.abc
import importlib.machinery
import os
import sys

sys.path.insert(0, {root!r})
_gradfix_patched = {patched!r}


class _GradfixLoader(importlib.abc.Loader):
    """Loads the patched text of a file instead of the file itself."""

    def __init__(self, origin):
        self.origin = origin

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        code = compile(_gradfix_patched[self.origin], self.origin, "exec")
        exec(code, module.__dict__)


class _GradfixFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.origin in _gradfix_patched:
            spec.loader = _GradfixLoader(spec.origin)
        return spec


sys.meta_path.insert(0, _GradfixFinder())
_gradfix_result = getattr(importlib.import_module({module!r}), {function!r})()
_gradfix_files = [getattr(m, "__file__", None) for m in list(sys.modules.values())]
_gradfix_loaded = {{os.path.abspath(f) for f in _gradfix_files if f}}
if {target!r} not in _gradfix_loaded:
    raise ModuleNotFoundError("the entry point {entry} never imports {target}")
'''


class EntryError(ValueError):
    """A malformed ``--entry``; ``str()`` is a one-line message."""


def parse_entry(entry: str) -> tuple[str, str]:
    """``"pkg.train:main"`` -> ``("pkg.train", "main")``; :class:`EntryError` otherwise."""
    module, sep, function = entry.partition(":")
    dotted = all(part.isidentifier() for part in module.split("."))
    if not sep or not dotted or not function.isidentifier():
        raise EntryError(f"--entry must be MODULE:FUNCTION (e.g. train:main), not {entry!r}")
    return module, function


def entry_driver(entry: str, root: str, target: str, patched_sources: dict[str, str] | None) -> str:
    """A script that imports ``module`` of ``entry`` (``module:function``) from ``root``
    and calls ``function()``; with ``patched_sources`` (path -> text), those files are
    imported with that text instead of what is on disk (the user's files are never
    written). The run must import ``target``. The backward calls the entry point makes
    are what the oracle compares."""
    module, function = parse_entry(entry)
    target = os.path.abspath(target)
    patched = {os.path.abspath(path): text for path, text in (patched_sources or {}).items()}
    return _ENTRY_DRIVER.format(
        entry=entry,
        root=os.path.abspath(root),
        patched=patched,
        module=module,
        function=function,
        target=target,
    )
