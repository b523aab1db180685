"""Generate :mod:`gradfix.torch_facts.table` from torch itself.

Every fact is observed, not typed: each op is run once on small float64 inputs that
require grad, and the table records what autograd did.

- **saved**: which of the op's tensors autograd packed for backward (a
  ``saved_tensors_hooks`` pack hook sees every saved tensor; identity tells input from
  result), for each choice of which tensor inputs require grad;
- **in-place**: which ``name_`` methods and functions bump the version counter of their
  first argument (``requires_grad_`` and ``detach_`` do not: they change no data);
- **views**: which ops return storage of their input, always or only for some layouts;
- **non-finite points / overflow**: where on a grid a unary pointwise op's forward or its
  gradient is nan or infinite, and whether a large finite input overflows its forward;
- **modules**: the ``nn`` module classes that call a functional op of the same name, with
  their ``inplace`` flag; the signatures of ``backward`` and ``autograd.grad``.

Run ``python -m gradfix.torch_facts.generate`` to rewrite ``table.py``;
``tests/test_torch_facts.py`` fails when the committed table is not current.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import json
import pprint
import re
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

TABLE_PATH = Path(__file__).with_name("table.py")
#: Where the user-facing functions of an op live (``torch.nn.functional`` as ``F``).
NAMESPACES: dict[str, Any] = {"torch": torch, "F": F, "linalg": torch.linalg}
#: Ops that are never run: they touch global state, files, threads or the process.
NEVER_RUN = frozenset(
    "set_ resize_ resize_as_ share_memory_ record_stream backward register_hook apply_ map_ "
    "map2_ storage untyped_storage pin_memory cuda xpu mtia ipu to_mkldnn set_default_dtype "
    "set_default_device set_default_tensor_type manual_seed seed initial_seed "
    "set_num_threads set_num_interop_threads set_printoptions set_rng_state save load "
    "compile use_deterministic_algorithms set_grad_enabled set_warn_always "
    "set_float32_matmul_precision set_flush_denormal set_anomaly_enabled "
    "set_autocast_enabled export jit fork wait tolist numpy item".split()
)
#: Values tried for each argument type of an ATen schema, in order.
_CANDIDATES: dict[str, list[Any]] = {
    "int": [1, 0, 2],
    "SymInt": [1, 0, 2],
    "float": [2.0, 0.5],
    "number": [2.0, 0.5],
    "bool": [False],
    "List[int]": [[1, 0], [9], [3, 3], [1]],
    "Optional[List[int]]": [[1], None],
}
#: The points where a pointwise op's gradient is probed.
GRID = (-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0)
#: A large finite input: an op whose forward is not finite there "overflows" (``exp``).
LARGE = 1000.0


def make_input(seed: int, requires_grad: bool = True) -> torch.Tensor:
    """A 3x3 float64 tensor with values in [0.6, 1.4]: inside every op's domain."""
    generator = torch.Generator().manual_seed(seed)
    values = 0.6 + 0.8 * torch.rand(3, 3, generator=generator, dtype=torch.float64)
    return values.requires_grad_(requires_grad)


# --- which names exist ---------------------------------------------------------------------


def public_names() -> dict[str, list[str]]:
    """Every public op name -> the namespaces (``torch``, ``Tensor``, ``F``, ``linalg``)
    where it is callable."""
    where: dict[str, list[str]] = {}
    for label, namespace in (*NAMESPACES.items(), ("Tensor", torch.Tensor)):
        for name in dir(namespace):
            if name.startswith("_") or not callable(getattr(namespace, name, None)):
                continue
            value = getattr(namespace, name)
            if isinstance(value, type) or not _defined_by_torch(value):
                continue
            where.setdefault(name, []).append(label)
    return {name: sorted(labels) for name, labels in sorted(where.items())}


def _defined_by_torch(value: Any) -> bool:
    """Whether ``value`` is torch's own (``F.Optional`` is typing's, ``F.math`` a module)."""
    module = getattr(value, "__module__", None) or ""
    builtin = type(value).__name__ in ("builtin_function_or_method", "method_descriptor")
    return module.startswith("torch") or module == "" or builtin


def aten_schemas() -> dict[str, list[Any]]:
    """ATen schemas by op name, without the ``out=`` overloads."""
    by_name: dict[str, list[Any]] = {}
    for schema in torch._C._jit_get_all_schemas():
        namespace, _, name = schema.name.partition("::")
        if namespace != "aten" or schema.overload_name.endswith("out"):
            continue
        by_name.setdefault(name, []).append(schema)
    return by_name


# --- calling an op -------------------------------------------------------------------------


def _argument_choices(schema: Any, tensors: Sequence[torch.Tensor]) -> Iterator[list[Any]]:
    """Argument lists for the required positional arguments of ``schema``."""
    pools: list[list[Any]] = []
    tensor_count = 0
    for argument in schema.arguments:
        if argument.kwarg_only or argument.has_default_value():
            break
        kind = str(argument.type)
        if kind == "Tensor":
            if tensor_count >= len(tensors):
                return
            given = tensors[tensor_count]
            pools.append([given] if tensor_count == 0 else [given, *_other_operands()])
            tensor_count += 1
        elif kind in ("List[Tensor]", "Tensor[]"):
            pools.append([list(tensors[:2])])
        elif kind in _CANDIDATES:
            pools.append(_CANDIDATES[kind])
        elif kind.startswith("Optional["):
            pools.append([None])
        else:
            return
    yield from (list(choice) for choice in itertools.product(*pools))


def _other_operands() -> list[torch.Tensor]:
    """What an operand after the first may have to be: a mask (``masked_fill``) or an
    index (``index_add``, ``gather``)."""
    return [make_input(9, requires_grad=False) > 1.0, torch.tensor([[0, 1, 2]] * 3)]


def callables_of(name: str, where: Sequence[str]) -> list[Callable[..., Any]]:
    """The user-facing callables named ``name``: a Tensor method first."""
    found: list[Callable[..., Any]] = []
    if "Tensor" in where:
        found.append(lambda first, *rest: getattr(first, name)(*rest))
    found.extend(getattr(NAMESPACES[label], name) for label in where if label in NAMESPACES)
    return found


#: Argument lists tried when no ATen schema of the name gives a call that runs: an int
#: is the position of an input tensor, a float is passed as it is.
RECIPES: tuple[tuple[int | float, ...], ...] = ((0,), (0, 1), (0, 0.5), (0, 0.5, 1.5))


def _recipe_arguments(tensors: Sequence[torch.Tensor]) -> Iterator[list[Any]]:
    """``(x,)``, ``(x, y)``, ``(x, 0.5)``, ``(x, 0.5, 1.5)`` for the inputs given."""
    for recipe in RECIPES:
        positions = [i for i in recipe if isinstance(i, int)]
        if max(positions) < len(tensors):
            yield [tensors[i] if isinstance(i, int) else i for i in recipe]


def first_call(
    name: str,
    where: Sequence[str],
    schemas: dict[str, list[Any]],
    make: Callable[[], list[torch.Tensor]],
) -> tuple[Callable[[], Any], list[torch.Tensor]] | None:
    """A call of ``name`` that runs on fresh inputs from ``make``: ``(call, tensors it
    was given)``; the arguments come from the name's ATen schemas, then from recipes."""
    for function in callables_of(name, where):
        attempts: list[Callable[[Sequence[torch.Tensor]], Iterator[list[Any]]]] = [
            functools.partial(_argument_choices, s) for s in schemas.get(name, [])
        ]
        attempts.append(_recipe_arguments)  # when no schema gives a call that runs
        for choices_of in attempts:
            tensors = make()
            for arguments in choices_of(tensors):
                used = [t for a in arguments for t in _flatten(a) if isinstance(t, torch.Tensor)]
                if used and _runs(function, arguments):
                    return (lambda f=function, a=arguments: f(*a)), used
    return None


def _runs(function: Callable[..., Any], arguments: list[Any]) -> bool:
    try:
        with _quiet():
            function(*arguments)
    except Exception:  # an op that does not take these arguments: try the next ones
        return False
    return True


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# --- facts of one op -----------------------------------------------------------------------


def saved_facts(name: str, where: Sequence[str], schemas: dict[str, list[Any]]) -> dict[str, Any]:
    """What ``name`` saves for backward, for each choice of inputs requiring grad."""
    found = first_call(name, where, schemas, lambda: [make_input(1), make_input(2)])
    if found is None:
        return {}
    _, inputs = found
    labels = ["self", "other"][: len(inputs)]
    facts: dict[str, Any] = {}
    for requiring in _nonempty_subsets(labels):
        tensors = [make_input(1, "self" in requiring), make_input(2, "other" in requiring)]
        recorded = _record_saved(name, where, schemas, tensors[: len(inputs)])
        if recorded is not None:
            facts[",".join(requiring)] = recorded
    return facts


def _nonempty_subsets(labels: Sequence[str]) -> list[tuple[str, ...]]:
    return [s for r in range(len(labels), 0, -1) for s in itertools.combinations(labels, r)]


def _record_saved(
    name: str, where: Sequence[str], schemas: dict[str, list[Any]], tensors: list[torch.Tensor]
) -> list[str] | None:
    saved: list[torch.Tensor] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved.append(tensor)
        return tensor

    found = first_call(name, where, schemas, lambda: list(tensors))
    if found is None:
        return None
    call, _ = found
    saved.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), _quiet():
        result = call()
    results = [r for r in _flatten(result) if isinstance(r, torch.Tensor)]
    if not any(r.grad_fn is not None for r in results):
        return None
    labelled = [*zip(("self", "other"), tensors), *(("result", r) for r in results)]
    names = {label for tensor in saved for label, t in labelled if tensor is t}
    unnamed = [t for t in saved if not any(t is known for _, known in labelled)]
    names.update(label for label, t in labelled if _shares_version(t, unnamed))
    return sorted(names)


def _shares_version(tensor: torch.Tensor, saved: list[torch.Tensor]) -> bool:
    """Whether one of ``saved`` shares the version counter of ``tensor`` (a view of it,
    as ``linear`` saves ``weight.t()``): an in-place change to ``tensor`` then fails at
    backward as if ``tensor`` itself were saved. A copy (``kron``, ``2 / x``) shares none."""
    before = [s._version for s in saved]
    torch.autograd.graph.increment_version(tensor)
    return any(s._version > b for s, b in zip(saved, before, strict=True))


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, (tuple, list)):
        return [item for part in value for item in _flatten(part)]
    return [value]


def _laid_out(layout: str) -> list[torch.Tensor]:
    base = make_input(3, requires_grad=False)
    return [{"contiguous": base, "transposed": base.t(), "float32": base.float()}[layout]]


def view_fact(name: str, where: Sequence[str], schemas: dict[str, list[Any]]) -> str | None:
    """``"always"`` when the result shares its input's storage for a contiguous, a
    transposed and a float32 input, ``"sometimes"`` for some of them, None for none."""
    shares = []
    for layout in ("contiguous", "transposed", "float32"):
        found = first_call(name, where, schemas, functools.partial(_laid_out, layout))
        if found is None:
            return None
        call, inputs = found
        with _quiet():
            results = [r for r in _flatten(call()) if isinstance(r, torch.Tensor)]
        storage = _storage(inputs[0])
        shares.append(bool(results) and all(_storage(r) == storage for r in results))
    if all(shares):
        return "always"
    return "sometimes" if any(shares) else None


def _storage(tensor: torch.Tensor) -> int | None:
    """The address of a strided tensor's storage (None for sparse and other layouts)."""
    if tensor.layout != torch.strided:
        return None
    return int(tensor.untyped_storage().data_ptr())


def mutates_data(name: str, where: Sequence[str], schemas: dict[str, list[Any]]) -> bool:
    """Whether ``name`` bumps the version counter of its first argument."""
    base = make_input(4, requires_grad=False)
    found = first_call(name, where, schemas, lambda: [base.clone(), make_input(5, False)])
    if found is None:
        return False
    call, inputs = found
    before = inputs[0]._version
    with _quiet():
        call()
    return inputs[0]._version > before


def pointwise_facts(name: str, where: Sequence[str]) -> dict[str, Any]:
    """For a unary pointwise op, the points of :data:`GRID` where its forward
    (``nonfinite_forward``) or its gradient (``nonfinite_grad``) is nan or infinite, and
    whether a large finite input overflows the forward (``overflow``): what makes a
    masked-out branch poison a gradient."""
    function = callables_of(name, where)[0]
    forward_points, grad_points = [], []
    for point in GRID:
        x = torch.tensor([point], dtype=torch.float64, requires_grad=True)
        try:
            with _quiet():
                y = function(x)
                if not isinstance(y, torch.Tensor) or y.grad_fn is None or y.shape != x.shape:
                    return {}
                (gradient,) = torch.autograd.grad(y.sum(), x)
        except Exception:  # not a unary differentiable op
            return {}
        if not torch.isfinite(y).all():
            forward_points.append(point)
        if not torch.isfinite(gradient).all():
            grad_points.append(point)
    with _quiet():
        large = function(torch.tensor([LARGE], dtype=torch.float64))
    facts: dict[str, Any] = {}
    if forward_points:
        facts["nonfinite_forward"] = forward_points
    if grad_points:
        facts["nonfinite_grad"] = grad_points
    if not torch.isfinite(large).all():
        facts["overflow"] = True
    return facts


def is_pointwise(name: str, schemas: dict[str, list[Any]]) -> bool:
    packet = getattr(torch.ops.aten, name, None)
    if packet is None or not schemas.get(name):
        return False
    overload = getattr(packet, schemas[name][0].overload_name or "default", None)
    return overload is not None and torch.Tag.pointwise in overload.tags


# --- modules and signatures ----------------------------------------------------------------


def snake_case(name: str) -> str:
    """``LeakyReLU`` -> ``leaky_relu``, ``Dropout2d`` -> ``dropout2d``, ``GELU`` -> ``gelu``."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return spaced.lower()


def module_facts() -> dict[str, dict[str, Any]]:
    """``nn`` module class -> its functional op and ``inplace`` flag, when the class is a
    thin wrapper of ``F.<snake name>``."""
    facts: dict[str, dict[str, Any]] = {}
    for name in dir(nn):
        cls = getattr(nn, name)
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            continue
        functional = snake_case(name).replace("re_lu", "relu").replace("si_lu", "silu")
        if not callable(getattr(F, functional, None)):
            continue
        parameters = inspect.signature(cls.__init__).parameters
        entry: dict[str, Any] = {"functional": functional}
        if "inplace" in parameters:
            entry["inplace_default"] = parameters["inplace"].default
        facts[name] = entry
    return facts


def inplace_flag_positions() -> dict[str, int]:
    """Functional ops with an ``inplace`` parameter -> its position."""
    positions = {}
    for name in dir(F):
        function = getattr(F, name)
        if name.startswith("_") or not inspect.isfunction(function):
            continue
        parameters = list(inspect.signature(function).parameters)
        if "inplace" in parameters:
            positions[name] = parameters.index("inplace")
    return positions


def signature_of(function: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(function).parameters)


# --- the table -----------------------------------------------------------------------------


def op_entry(name: str, names: dict[str, list[str]], schemas: dict[str, list[Any]]) -> dict:
    """Every fact about one op name (only ``where`` when nothing was observed)."""
    where = names[name]
    entry: dict[str, Any] = {"where": where}
    if name.endswith("_"):
        if mutates_data(name, where, schemas):
            entry["inplace_of"] = name[:-1] if name[:-1] in names else None
        return entry
    if f"{name}_" in names and mutates_data(f"{name}_", names[f"{name}_"], schemas):
        entry["inplace"] = f"{name}_"
    view = view_fact(name, where, schemas)
    if view:
        entry["view"] = view
    saved = saved_facts(name, where, schemas)
    if saved:
        entry["saves"] = saved
    if is_pointwise(name, schemas):
        entry.update(pointwise_facts(name, where))
    return entry


def candidate_names() -> dict[str, list[str]]:
    return {n: w for n, w in public_names().items() if n not in NEVER_RUN}


def run_worker(start: int) -> None:
    """Print one JSON line per op from the ``start``-th name on, announcing each op first,
    so that the parent can tell which op killed the process."""
    torch.manual_seed(0)
    schemas = aten_schemas()
    names = candidate_names()
    for index, name in enumerate(list(names)[start:], start):
        print(json.dumps({"index": index}), flush=True)
        entry = op_entry(name, names, schemas)
        print(json.dumps({"name": name, "entry": entry}), flush=True)


def observe_ops() -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Facts of every op, each observed in a worker process that may crash on a bad
    call (some ATen ops segfault on inputs of the wrong shape): the op it died in is
    recorded as crashed and the next worker starts after it."""
    ops: dict[str, dict[str, Any]] = {}
    crashed: list[str] = []
    names = list(candidate_names())
    start = 0
    while start < len(names):
        command = [sys.executable, "-m", "gradfix.torch_facts.generate", "--worker", str(start)]
        process = subprocess.run(command, capture_output=True, text=True, check=False)
        current = start
        for line in process.stdout.splitlines():
            record = json.loads(line)
            if "index" in record:
                current = record["index"]
            elif len(record["entry"]) > 1:
                ops[record["name"]] = record["entry"]
        if process.returncode == 0:
            break
        crashed.append(names[current])
        print(f"{names[current]}: crashed the worker; recorded as crashed", file=sys.stderr)
        start = current + 1
    return ops, crashed


def generate() -> dict[str, Any]:
    ops, crashed = observe_ops()
    return {
        "torch_version": torch.__version__.split("+")[0],
        "ops": ops,
        "crashed": crashed,
        "modules": module_facts(),
        "inplace_flag_positions": inplace_flag_positions(),
        "signatures": {
            "Tensor.backward": signature_of(torch.Tensor.backward),
            "autograd.backward": signature_of(torch.autograd.backward),
            "autograd.grad": signature_of(torch.autograd.grad),
        },
    }


def render(table: dict[str, Any]) -> str:
    header = (
        '"""Facts about torch ops, observed by running torch: do not edit.\n\n'
        "Written by ``python -m gradfix.torch_facts.generate``; read through\n"
        ":mod:`gradfix.torch_facts`.\n"
        '"""\n\n'
        "# fmt: off\n"
    )
    body = "\n".join(
        f"{key.upper()} = {pprint.pformat(value, width=96, sort_dicts=True)}\n"
        for key, value in table.items()
    )
    return header + body


def main() -> int:
    if "--worker" in sys.argv:
        run_worker(int(sys.argv[sys.argv.index("--worker") + 1]))
        return 0
    text = render(generate())
    if "--check" in sys.argv:
        current = TABLE_PATH.read_text(encoding="utf-8") if TABLE_PATH.exists() else ""
        if current != text:
            print(f"{TABLE_PATH}: not current; run python -m gradfix.torch_facts.generate")
            return 1
        return 0
    TABLE_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {TABLE_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
