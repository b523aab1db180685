"""Inside the traced process: watch torch while the user's program runs, report pitfalls.

Built on torch's own extension points and on :mod:`gradfix.verify.instrument` (its patches
register every leaf and wrap every ``backward`` / ``autograd.grad`` call; a
:class:`TraceRecorder` subclasses its recorder):

* a ``TorchFunctionMode`` sees every torch call from Python. It stamps the user's line on
  the ``grad_fn`` of each result (``node.metadata``, the dict anomaly mode uses for its
  tracebacks), notes in-place changes of tensors that require grad (with the node that
  produced the tensor before the change), and notes *cuts*: a tensor that requires grad
  turned into a constant (``torch.tensor`` of tensors, ``.item()``, ``.data``...).
* a hook on the node of each op whose backward can be singular (sqrt, log, pow, div...)
  names the first node whose backward turns finite gradients into nan or inf.
* an error raised by an op or a backward call is read (:mod:`.errors`) and pinned to the
  user's line with what the notes above tell (the in-place line, the saving op, the value
  that carried an old graph, the cut).
* after each backward call, the values the program holds are looked at for graphs kept
  alive across iterations (:mod:`.kept`): a running total or a list that reaches the
  roots of earlier backward calls grows by one graph per step.

Findings are handed to ``sink`` as plain dicts as soon as they are made, so a program that
hangs or is killed keeps what was found. Every piece of bookkeeping is guarded: an error
inside the instrumentation is noted and never changes what the program sees.
"""

from __future__ import annotations

import ast
import functools
import itertools
import os
import sys
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from types import CodeType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from gradfix import pyast
from gradfix.fileio.files import FileError, read_source
from gradfix.torch_facts import GRAPH_CUTS, INDEX_OPS, INPLACE_DUNDERS
from gradfix.trace import errors, kept
from gradfix.trace.sites import Site, UserFrames, line_in
from gradfix.verify import instrument

#: index cuts kept (the latest): a program takes argmax at every step
MAX_INDEX_CUTS = 64
SITE_KEY = "gradfix_site"  # node.metadata key: the user line that made the node
ROOT_KEY = "gradfix_backward"  # node.metadata key: the backward call that consumed it
MADE_KEY = "gradfix_made"  # node.metadata key: how many backward calls had run when made
LOOP_KEY = "gradfix_loop"  # node.metadata key: the line of the loop's frame that made it
#: Cut kinds by how surely they are the bug when a backward finds no graph.
CUT_PRIORITY = (
    "tensor", "as_tensor", "new_tensor", "data", "item", "__float__", "__int__", "tolist",
    "numpy", "detach",
)  # fmt: skip
INPLACE_OPERATORS = INPLACE_DUNDERS | {"__setitem__"}
ACCUMULATING = frozenset({"add", "add_", "__add__", "__radd__", "__iadd__"})
MASKING = frozenset({"__getitem__", "masked_select"})  # ops that can drop elements by a mask
MAX_GRAPH_NODES = 20_000
MAX_GRAPH_CHAIN = 12  # the nodes of a finding's ``graph`` evidence (a drawing's path)
STEP = "optimizer.step"
MAX_INPLACE_CHANGES = 1000  # the latest in-place changes kept (a long run makes millions)
MAX_BACKWARD_SITES = 64  # the lines of the latest backward calls kept
MAX_RECENT_ROOTS = 4  # the root nodes of the latest backward calls kept
MAX_CHANGES_PER_TENSOR = 64  # the first changes of one tensor since its last save matter
#: tensor attribute: why a value computed from tensors that require grad has no graph,
#: ``(how, site)``: ``("no_grad", the with line)`` or ``("frozen", the line that froze it)``
CUT_TAG = "_gradfix_cut"
#: torch callables the tracer handles apart: grad mode switches, ``requires_grad`` changes
SPECIAL_OPS = {"_set_grad_enabled": "grad-mode", "requires_grad_": "requires-grad"}


@dataclass(frozen=True)
class Op:
    """What the tracer needs to know of a torch callable, worked out once per callable."""

    name: str
    attribute: str | None  # a tensor attribute's getter: "grad", "data" or "" (another)
    inplace: bool
    special: str | None = None  # one of SPECIAL_OPS' kinds


@dataclass
class InplaceChange:
    """An in-place op on a tensor that requires grad, as autograd will describe it."""

    site: Site | None
    shape: tuple[int, ...]
    base_shape: tuple[int, ...]  # of the tensor a view shares its storage and version with
    producer: str | None  # the grad_fn name of the tensor before the change
    producer_site: Site | None
    version: int  # the tensor's version after the change
    op: str
    result: str | None = None  # the grad_fn name after the change (autograd may name it)
    flag_site: Site | None = None  # where the module making the change was set in place


@dataclass
class Cut:
    """A call that made a constant out of a tensor that requires grad."""

    kind: str
    code: str
    site: Site
    order: int
    sources: list[Any]  # the grad_fn (or the leaf itself) of each input that required grad


class Tracer:
    """The state of one traced process."""

    def __init__(
        self,
        sink: Callable[[dict[str, Any]], None],
        *,
        singular: frozenset[str] = frozenset(),
        max_steps: int | None = None,
        on_stop: Callable[[str], None] | None = None,
    ) -> None:
        self.sink = sink
        self.frames = UserFrames()
        self.singular = singular
        self.max_steps = max_steps
        self.on_stop = on_stop
        self.busy = False
        self.steps = 0
        self.reported: set[tuple[str, str, int]] = set()
        self.inplace: dict[int, deque[InplaceChange]] = {}  # id of a tensor -> its changes
        self.cuts: dict[Site, Cut] = {}
        #: ``argmax`` and the like of a tensor that requires grad (indices: no gradient);
        #: named only when a backward finds no graph and no copy or detach explains it
        self.index_cuts: dict[Site, Cut] = {}
        self.order = itertools.count()
        self.leaves_with_grad: set[int] = set()
        self.backward_sites: dict[int, Site | None] = {}  # backward call number -> its line
        #: (backward call number, its root nodes) of the latest calls (their buffers are freed)
        self.recent_roots: deque[tuple[int, list[Any]]] = deque(maxlen=MAX_RECENT_ROOTS)
        self.loop_code: CodeType | None = None  # the code of the frame calling backward
        self.kept_reported: set[tuple[str, str]] = set()  # (file, name) found keeping graphs
        self.notes: list[str] = []
        #: id of a module -> (the module, where the program set its ``inplace`` flag)
        self.inplace_flags: dict[int, tuple[Any, Site]] = {}
        #: the user line that turned grad mode off (``with torch.no_grad():``), while off
        self.grad_off_site: Site | None = None
        self.tagging = False  # some value carries a CUT_TAG: values without graph pass it on
        #: each leaf's ``_version`` at the latest backward call (index of recorder.leaves)
        self.leaf_versions: list[int] = []
        self._ops: dict[Any, Op] = {}
        self.mode: TraceMode | None = None
        self.recorder = TraceRecorder(self)

    # --------------------------------------------------------------- reporting
    def report(
        self,
        kind: str,
        code: str,
        site: Site | None,
        message: str,
        evidence: dict[str, Any] | None = None,
        step: int | None = None,
    ) -> None:
        """``step``: the backward call the finding belongs to (default: the next one)."""
        if site is None:
            return
        key = (code, site[0], site[1])
        if key in self.reported:
            return
        self.reported.add(key)
        record = {
            "kind": kind,
            "code": code,
            "path": site[0],
            "line": site[1],
            "message": message,
            "step": self.steps + 1 if step is None else step,
            "evidence": evidence or {},
        }
        self.sink(record)

    def note_internal_error(self, where: str, error: BaseException) -> None:
        if len(self.notes) < 20:
            self.notes.append(f"{where}: {type(error).__name__}: {error}")

    # ------------------------------------------------------------- forward ops
    def observe(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run one torch call of the program, with notes before and after."""
        op = self._ops.get(func) or self._learn_op(func)
        target = args[0] if args else None
        if op.attribute is not None:
            if isinstance(target, torch.Tensor) and target.requires_grad:
                self._guarded(self._attribute_read, op.attribute, target)
            return func(*args, **kwargs)
        if op.special is not None:
            return self._special_op(op.special, func, args, kwargs)
        inplace = (op.inplace or kwargs.get("inplace") is True) and isinstance(target, torch.Tensor)
        if not inplace and not torch.is_grad_enabled():
            if self.grad_off_site is None:
                return func(*args, **kwargs)  # no graph is built: optimizer steps, evaluation
            result = func(*args, **kwargs)  # in the program's own no_grad block
            if isinstance(result, torch.Tensor):
                self._guarded(self._tag_without_grad, args, result)
            return result
        before = None
        if inplace and target.requires_grad:  # type: ignore[union-attr]
            before = self._guarded(self._before_inplace, target)
        try:
            result = func(*args, **kwargs)
        except RuntimeError as error:
            self._guarded(self._op_failed, error, op.name)
            raise
        if before is not None:
            self._guarded(self._after_inplace, target, before, op.name)
        elif op.name in GRAPH_CUTS:
            self._guarded(self._maybe_cut, op.name, args, result)
        elif op.name in INDEX_OPS:
            self._guarded(self._maybe_index_cut, op.name, args)
        elif isinstance(result, torch.Tensor) and result.grad_fn is not None:
            self._guarded(self._after_op, op.name, args, result)
        elif isinstance(result, tuple) and result:  # split, chunk, lstm, max(dim)...
            self._guarded(self._after_tuple_op, result)
        elif self.tagging and isinstance(result, torch.Tensor):  # no graph
            self._guarded(self._pass_tag, args, result)
        return result

    def _learn_op(self, func: Any) -> Op:
        name = getattr(func, "__name__", "")
        attribute = None
        special = SPECIAL_OPS.get(name)
        if func is vars(torch.Tensor).get("requires_grad_"):  # verify's wrapper of it
            special = "requires-grad"
        if name == "__get__":  # a getter: which attribute it reads matters, the rest not
            attribute = getattr(getattr(func, "__self__", None), "__name__", "")
            attribute = attribute if attribute in ("grad", "data") else ""
        elif name == "__set__" and _is_requires_grad(getattr(func, "__self__", None)):
            special = "requires-grad"
        op = Op(name, attribute=attribute, inplace=_is_inplace(name), special=special)
        try:
            self._ops[func] = op
        except TypeError:  # an unhashable callable: looked at each time
            pass
        return op

    # ------------------------------------------------ values made without graph
    def _special_op(
        self, special: str, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Grad mode switched (``torch.no_grad()``'s enter and exit), ``requires_grad`` set:
        noted, so that a loss without graph is traced back to where it lost it."""
        target = args[0] if args else None
        if special == "grad-mode":
            was_enabled = torch.is_grad_enabled()
            result = func(*args, **kwargs)
            self._guarded(self._grad_mode_set, was_enabled)
            return result
        required = isinstance(target, torch.Tensor) and target.requires_grad and target.is_leaf
        result = func(*args, **kwargs)
        if isinstance(target, torch.Tensor):
            self._guarded(self._requires_grad_set, target, required)
        return result

    def _grad_mode_set(self, was_enabled: bool) -> None:
        enabled = torch.is_grad_enabled()
        if was_enabled and not enabled:
            self.grad_off_site = self.frames.site()
        elif enabled:
            self.grad_off_site = None

    def _requires_grad_set(self, tensor: torch.Tensor, required: bool) -> None:
        """``p.requires_grad = False`` / ``p.requires_grad_(False)`` on a leaf that required
        grad: what is computed from it has no graph, from this line (set back: no more)."""
        if tensor.requires_grad:
            if getattr(tensor, CUT_TAG, None) is not None:
                delattr(tensor, CUT_TAG)
        elif required:
            site = self.frames.site()
            if site is not None:
                setattr(tensor, CUT_TAG, ("frozen", site))
                self.tagging = True

    def _tag_without_grad(self, args: tuple[Any, ...], result: torch.Tensor) -> None:
        """In the program's no_grad block: a value computed from tensors that require grad
        (or from such values) is tagged with the block's line."""
        if result.requires_grad:
            return
        for value in _tensors_in(args):
            if value.requires_grad:
                setattr(result, CUT_TAG, ("no_grad", self.grad_off_site))
                self.tagging = True
                return
            tag = getattr(value, CUT_TAG, None)
            if tag is not None:
                setattr(result, CUT_TAG, tag)
                return

    def _pass_tag(self, args: tuple[Any, ...], result: torch.Tensor) -> None:
        """A value without graph computed (grad on) from a tagged one carries its tag."""
        if result.requires_grad or getattr(result, CUT_TAG, None) is not None:
            return
        for value in _tensors_in(args):
            tag = getattr(value, CUT_TAG, None)
            if tag is not None:
                setattr(result, CUT_TAG, tag)
                return

    def _guarded(self, method: Callable[..., Any], *args: Any) -> Any:
        self.busy = True
        try:
            return method(*args)
        except Exception as error:  # noqa: BLE001 - the program must not see our errors
            self.note_internal_error(method.__name__, error)
            return None
        finally:
            self.busy = False

    def untraced(self, method: Callable[..., Any], *args: Any) -> Any:
        """``_guarded`` for work outside the mode's handler (after a backward or a step):
        the tracer's own torch calls then skip the mode instead of passing through it."""
        if torch.overrides._get_current_function_mode() is not self.mode:
            return self._guarded(method, *args)
        with torch.overrides._pop_mode_temporarily():
            return self._guarded(method, *args)

    def _after_op(self, name: str, args: tuple[Any, ...], result: torch.Tensor) -> None:
        node: Any = result.grad_fn
        site = self._stamp(node)
        if name in self.singular:
            check = functools.partial(self._check_finite, site, type(node).__name__)
            node.register_hook(functools.partial(check, graph=self._graph(node)))
        if name in ACCUMULATING and self.steps:
            self._check_accumulation(args, site)
        if name in MASKING and _masked_by_bool(args):
            self._watch_masked(args[0], site)

    def _stamp(self, node: Any) -> Site | None:
        """Note on the node the user's line that made it, how many backward calls had run,
        and the line of the loop (the frame that calls backward) it was made from."""
        frame = self.frames.frame(2)
        site = None if frame is None else (frame.f_code.co_filename, frame.f_lineno)
        metadata = _metadata(node)
        metadata[SITE_KEY] = site
        metadata[MADE_KEY] = self.steps
        if frame is not None and self.loop_code is not None and frame.f_code is not self.loop_code:
            metadata[LOOP_KEY] = line_in(frame.f_back, self.loop_code)  # made inside a call
        return site

    def _watch_masked(self, masked: Any, site: Site | None) -> None:
        """The op that made the values a mask selects from: where its backward turns the
        mask's zeros into nan (``0 * nan``: nan or inf in the dropped elements, e.g. in the
        data), the bug is at the mask's line (mask the op's inputs instead)."""
        node = masked.grad_fn if isinstance(masked, torch.Tensor) else None
        if node is None or type(node).__name__ == "AccumulateGrad":
            return
        name = type(node).__name__
        node.register_hook(functools.partial(self._check_finite, site, name, masked=True))

    def _after_tuple_op(self, result: tuple[Any, ...]) -> None:
        nodes = {id(t.grad_fn): t.grad_fn for t in result if isinstance(t, torch.Tensor)}
        for node in nodes.values():
            if node is not None and SITE_KEY not in _metadata(node):
                self._stamp(node)

    def _attribute_read(self, attribute: str, tensor: torch.Tensor) -> None:
        if attribute == "data" and torch.is_grad_enabled():
            self._add_cut("data", "GF205", [tensor])
        elif attribute == "grad" and not tensor.is_leaf and not tensor.retains_grad:
            self._nonleaf_grad_read(tensor)

    def _nonleaf_grad_read(self, tensor: torch.Tensor) -> None:
        node = tensor.grad_fn
        made_at = _metadata(node).get(SITE_KEY) if node is not None else None
        site = self.frames.site()
        if made_at is not None and made_at in self._leaf_sites_feeding(node):
            self._leaf_lost_on_creation(node, made_at, site)
            return
        self.report(
            "nonleaf-grad",
            "GF106",
            site,
            f"`.grad` of a non-leaf tensor is read: it is None (the tensor was made by "
            f"{type(node).__name__}{_at(made_at, site)}); only leaves get `.grad`",
            {"grad_fn": type(node).__name__, "made_at": _site_dict(made_at)},
        )

    def _leaf_sites_feeding(self, node: Any) -> set[Site | None]:
        """Where the leaves that ``node`` takes directly were created."""
        leaves = [getattr(n, "variable", None) for n, _ in node.next_functions if n is not None]
        known = {id(leaf): k for k, leaf in enumerate(self.recorder.leaves)}
        return {self.recorder.leaf_sites[known[id(v)]] for v in leaves if id(v) in known}

    def _graph(self, node: Any) -> list[dict[str, Any]]:
        """The grad_fn chain from a leaf to ``node`` (along each node's first input), with
        the user lines the tracer stamped: the drawing of an HTML report (``graph``
        evidence); a leaf tensor stands for its ``AccumulateGrad``."""
        chain: list[dict[str, Any]] = []
        while node is not None and len(chain) < MAX_GRAPH_CHAIN:
            if isinstance(node, torch.Tensor):  # a leaf itself (a cut's source)
                k, name = self.recorder._leaf_index.get(id(node)), "leaf"
                node = None
            elif hasattr(node, "variable"):
                k, name = self.recorder._leaf_index.get(id(node.variable)), "leaf"
                node = None
            else:
                k, name = None, type(node).__name__
            if k is not None and k < len(self.recorder.leaf_sites):
                site = self.recorder.leaf_sites[k]
            else:
                site = _metadata(node).get(SITE_KEY) if node is not None else None
            chain.append({"op": name, **(_site_dict(site) or {"path": None, "line": None})})
            if node is not None:
                node = next((n for n, _ in node.next_functions if n is not None), None)
        return chain[::-1]

    def _leaf_lost_on_creation(self, node: Any, made_at: Site, read_at: Site | None) -> None:
        """``w = torch.randn(3, requires_grad=True) / 2``: the name holds the op's result,
        the leaf that trains is out of reach; the fix goes where it was made (GF103)."""
        name = type(node).__name__
        self.report(
            "nonleaf-grad",
            "GF103",
            made_at,
            f"the leaf created with requires_grad here is lost: {name} made the value kept, "
            f"a non-leaf whose `.grad`{_at(read_at, made_at)} is None; apply the op before "
            "asking for grad",
            {"grad_fn": name, "read_at": _site_dict(read_at)},
        )

    def _before_inplace(self, target: torch.Tensor) -> InplaceChange:
        node = target.grad_fn
        base = target._base if target._base is not None else target
        return InplaceChange(
            site=None,
            shape=tuple(target.shape),
            base_shape=tuple(base.shape),
            producer=type(node).__name__ if node is not None else None,
            producer_site=_metadata(node).get(SITE_KEY) if node is not None else None,
            version=target._version,
            op="",
        )

    def _after_inplace(self, target: torch.Tensor, change: InplaceChange, name: str) -> None:
        change.site = self.frames.site()
        change.version = target._version
        change.op = name
        node = target.grad_fn
        change.result = type(node).__name__ if node is not None else None
        if self.inplace_flags:
            change.flag_site = self._flag_site()
        self._note_change(target, change)
        if node is not None and change.site is not None:
            _metadata(node)[SITE_KEY] = change.site

    def _flag_site(self) -> Site | None:
        """Where the program set ``inplace = True`` on the module whose ``forward`` (a
        library's, between here and the user's frame) makes the current change."""
        frame = sys._getframe(1)
        while frame is not None and not self.frames.is_user_file(frame.f_code.co_filename):
            held = self.inplace_flags.get(id(frame.f_locals.get("self")))
            if held is not None and held[0] is frame.f_locals.get("self"):
                return held[1]
            frame = frame.f_back  # type: ignore[assignment]
        return None

    def inplace_flag_set(self, module: Any, value: Any) -> None:
        """``m.inplace = True`` in the program's code (not a constructor's own)."""
        caller = sys._getframe(3)  # the program's frame: here <- _guarded <- __setattr__
        if value is True and self.frames.is_user_file(caller.f_code.co_filename):
            self.inplace_flags[id(module)] = (module, (caller.f_code.co_filename, caller.f_lineno))

    def _note_change(self, tensor: torch.Tensor, change: InplaceChange) -> None:
        """Keep the changes of each tensor (autograd names the first one after the save,
        by its version), for the latest changed tensors only."""
        key = id(tensor._base if tensor._base is not None else tensor)  # a view: its base's
        changes = self.inplace.pop(key, None)  # re-inserted last: the dict is oldest first
        if changes is None or change.version <= changes[-1].version:
            changes = deque(maxlen=MAX_CHANGES_PER_TENSOR)  # new, or a reused id
        changes.append(change)
        self.inplace[key] = changes
        if len(self.inplace) > MAX_INPLACE_CHANGES:
            del self.inplace[next(iter(self.inplace))]

    def optimizer_stepped(self, optimizer: torch.optim.Optimizer) -> None:
        """An optimizer step changes every parameter in place (under no_grad, so the mode
        does not watch it): note each, as the in-place change a later backward may hit."""
        site = self.frames.site()
        for group in optimizer.param_groups:
            for parameter in group["params"]:
                if isinstance(parameter, torch.Tensor) and parameter.requires_grad:
                    shape = tuple(parameter.shape)
                    change = InplaceChange(site, shape, shape, None, None, parameter._version, STEP)
                    self._note_change(parameter, change)

    def _maybe_cut(self, name: str, args: tuple[Any, ...], result: Any) -> None:
        if isinstance(result, torch.Tensor) and result.grad_fn is not None:
            self._after_op(name, args, result)
            return
        if not torch.is_grad_enabled() or not args:
            return
        sources = [t for t in _tensors_in(args[0]) if t.requires_grad]
        if name == "detach" and args:
            sources = [args[0]] if args[0].requires_grad else []
        if sources:
            single = name in ("tensor", "as_tensor") and isinstance(args[0], torch.Tensor)
            self._add_cut(name, "GF104" if single else GRAPH_CUTS[name], sources)

    def _maybe_index_cut(self, name: str, args: tuple[Any, ...]) -> None:
        sources = [t for t in _tensors_in(args[0]) if t.requires_grad] if args else []
        if sources:
            self._add_cut(name, "GF110", sources, self.index_cuts)
            if len(self.index_cuts) > MAX_INDEX_CUTS:
                del self.index_cuts[next(iter(self.index_cuts))]

    def _add_cut(
        self,
        kind: str,
        code: str,
        tensors: list[torch.Tensor],
        into: dict[Site, Cut] | None = None,
    ) -> None:
        site = self.frames.site()
        if site is None:
            return
        sources = [t.grad_fn if t.grad_fn is not None else t for t in tensors[:8]]
        cuts = self.cuts if into is None else into
        cuts[site] = Cut(kind, code, site, next(self.order), sources)

    def _check_accumulation(self, args: tuple[Any, ...], site: Site | None) -> None:
        """A sum that grows from step to step (an operand is this line's own earlier
        result) over a graph a backward already used keeps every step's graph alive; a sum
        of this step's losses (``first + second``) is rebuilt each step and does not."""
        nodes = [v.grad_fn for v in args if isinstance(v, torch.Tensor) and v.grad_fn is not None]
        if not any(_metadata(node).get(SITE_KEY) == site for node in nodes):
            return
        for value in args:
            if isinstance(value, torch.Tensor) and value.grad_fn is not None:
                if _consumed_graph(value.grad_fn):
                    self.report(
                        "graph-kept",
                        "GF403",
                        site,
                        "a value whose graph a backward already used is added up here: "
                        "every step's graph stays alive (memory grows per step)",
                        {"grad_fn": type(value.grad_fn).__name__},
                    )
                    return

    def _check_finite(
        self,
        site: Site | None,
        node_name: str,
        grad_inputs: Any,
        grad_outputs: Any,
        *,
        masked: bool = False,
        graph: list[dict[str, Any]] | None = None,
    ) -> None:
        self.busy = True
        try:
            if _all_finite(grad_outputs) and not _all_finite(grad_inputs):
                why = (
                    "a mask here drops nan/inf values: their zero gradient times nan is nan; "
                    "mask the inputs of the op instead"
                    if masked
                    else "a singular point of this op is reached, e.g. masked out"
                )
                self.report(
                    "nonfinite",
                    "GF301",
                    site,
                    f"the backward of {node_name} turned finite gradients into nan/inf here "
                    f"({why})",
                    {
                        "grad_fn": node_name,
                        "backward_at": _site_dict(self.frames.site()),
                        **({"masked": True} if masked else {}),
                        **({"graph": graph} if graph else {}),
                    },
                )
        except Exception as error:  # noqa: BLE001
            self.note_internal_error("finite check", error)
        finally:
            self.busy = False

    def _op_failed(self, error: RuntimeError, name: str) -> None:
        kind = errors.kind_of(str(error))
        message = _first_line(error)
        if kind == "view-inplace":
            view = message.split(" is a view")[0]  # "Output 1 of Split"
            message = (
                f"in-place `{name}` on one of several views an op returned ({view}): "
                "autograd forbids it; use the out-of-place op"
            )
        if kind in ("leaf-inplace", "view-leaf-inplace", "integer-grad", "view-inplace"):
            self.report_error(error, kind, errors.CODES[kind], self.frames.site(), message)

    def report_error(
        self,
        error: BaseException,
        kind: str,
        code: str,
        site: Site | None,
        message: str,
        evidence: dict[str, Any] | None = None,
    ) -> None:
        evidence = {"error": f"{type(error).__name__}: {_first_line(error)}", **(evidence or {})}
        self.report(kind, code, site, message, evidence)
        try:
            error.__dict__["gradfix_reported"] = True
        except (AttributeError, TypeError):
            pass

    # ---------------------------------------------------------------- backward
    def backward_failed(self, error: RuntimeError, roots: list[Any]) -> None:
        kind = errors.kind_of(str(error))
        site = self.frames.site()
        if kind == "inplace-saved":
            self._inplace_saved(error, roots, site)
        elif kind == "backward-twice":
            self._backward_twice(error, roots, site)
        elif kind == "no-grad-fn":
            self._graph_cut(error, site, roots)

    def _inplace_saved(self, error: RuntimeError, roots: list[Any], site: Site | None) -> None:
        details = errors.parse_saved_tensor_error(str(error))
        change = self._find_change(details) if details else None
        saver = _failing_node(roots, errors.INPLACE_SAVED)
        saver_site = _metadata(saver).get(SITE_KEY) if saver is not None else None
        evidence: dict[str, Any] = {
            "backward_at": _site_dict(site),
            "saved_by": type(saver).__name__ if saver is not None else None,
            "saved_at": _site_dict(saver_site),
            "graph": self._graph(saver) if saver is not None else [],
        }
        if change is None:
            self.report_error(
                error,
                "inplace-saved",
                "GF204",
                saver_site or site,
                "a tensor saved for backward was changed in place (the change was not seen)",
                evidence,
            )
            return
        evidence.update(
            changed_by=change.op,
            shape=list(change.shape),
            version=change.version,
            produced_by=change.producer,
            produced_at=_site_dict(change.producer_site),
        )
        here = change.site
        saver_name = type(saver).__name__ if saver is not None else "an op"
        if change.flag_site is not None:
            self._inplace_flag_broke(error, change, saver_name, evidence)
            return
        made = f"{change.producer or 'a leaf'}{_at(change.producer_site, here)}"
        message = (
            f"in-place `{change.op}` changes a tensor that {saver_name}{_at(saver_site, here)} "
            f"saved for backward (made by {made}); the backward{_at(site, here)} raises"
        )
        self.report_error(error, "inplace-saved", "GF204", here, message, evidence)

    def _inplace_flag_broke(
        self, error: RuntimeError, change: InplaceChange, saver: str, evidence: dict[str, Any]
    ) -> None:
        """The change is a module's, made in place by ``m.inplace = True``: the fix is there."""
        here = change.flag_site
        message = (
            f"`inplace = True` set here makes `{change.op}`{_at(change.site, here)} change a "
            f"tensor that {saver} saved for backward; the backward raises: keep the module "
            "out of place"
        )
        evidence["changed_at"] = _site_dict(change.site)
        self.report_error(error, "inplace-saved", "GF204", here, message, evidence)

    def _find_change(self, details: errors.SavedTensorError) -> InplaceChange | None:
        """The change that broke the save: of the latest changed tensor autograd's details
        describe, its first change past the saved version."""
        for changes in reversed(list(self.inplace.values())):
            if any(_describes(details, change) for change in changes):
                broke = [c for c in changes if details.expected < c.version <= details.version]
                if broke:
                    return broke[0]
        return None

    def _backward_twice(self, error: RuntimeError, roots: list[Any], site: Site | None) -> None:
        """Pinned where the fix goes: the earlier backward call, when it ran through this
        very graph (it must retain it); else where this step uses a value made before the
        latest backward, whose graph that backward freed (detach it where the step ends,
        or compute it anew in this step)."""
        earlier = [_metadata(node).get(ROOT_KEY) for node in _root_nodes(roots)]
        freeing = next((self.backward_sites.get(step) for step in earlier if step), None)
        old, user = self._carried_node(roots)
        carried = _made_at(old) if old is not None else None
        used = _made_at(user) if user is not None else None
        evidence = {
            "carried_from": _site_dict(carried),
            "used_at": _site_dict(used),
            "freed_node": type(old).__name__ if old is not None else None,
            "backward_at": _site_dict(site),
            "freed_by_backward_at": _site_dict(freeing),
        }
        here: Site | None = site
        built = self._built_once(roots, site) if freeing == site else None
        if built is not None:
            here = built
            message = (
                f"the graph the backward{_at(site, here)} runs through is built once, from "
                "here, and that backward freed it: a loop reruns the backward, not the "
                "forward (build the graph inside the loop)"
            )
        elif freeing is not None:
            here = freeing
            message = (
                "the backward here frees the graph a later backward"
                f"{_at(site, here)} runs through again (retain the graph here, or build the "
                "graph anew before the second backward)"
            )
        elif (shared := self._earlier_use(old, site)) is not None:
            here, freed_at = shared
            message = (
                f"the value made{_at(carried, here)} goes into this loss, whose backward"
                f"{_at(freed_at, here)} frees its graph, and again into the loss of the "
                f"backward{_at(site, here)}, which raises: detach it here if this loss must "
                "not train what made it (or retain the graph)"
            )
        elif used is not None and self.steps and self._untrained_sources(error, old, roots, site):
            return
        elif used is not None and self.steps:
            here = used
            message = (
                f"this step uses a value made{_at(carried, here)} before the latest backward, "
                f"which freed its graph: the backward{_at(site, here)} raises (detach the "
                "value at the end of each iteration, or compute it anew in this step)"
            )
        else:
            message = "a second backward through a graph the first one freed"
        self.report_error(error, "backward-twice", "GF401", here, message, evidence)

    def _untrained_sources(
        self, error: RuntimeError, old: Any, roots: list[Any], site: Site | None
    ) -> bool:
        """A value carried across iterations whose graph reaches only leaves that did not
        change since the latest backward, while the step trains others (labels made once
        from weights created with ``requires_grad=True``): each of those leaves is reported
        where it was made (it need not require grad); True when reported."""
        index = self.recorder._leaf_index
        versions = self.leaf_versions
        held = {id(n.variable): n.variable for n in _nodes([old]) if hasattr(n, "variable")}
        carried = [index.get(key) for key in held]
        if not carried or any(k is None or k >= len(versions) for k in carried):
            return False
        leaves = [self.recorder.leaves[k] for k in carried if k is not None]
        if any(leaf._version != versions[k] for leaf, k in zip(leaves, carried)):  # type: ignore[index]
            return False
        trained = [
            k
            for node in _nodes(_root_nodes(roots))
            if (k := index.get(id(getattr(node, "variable", None)))) is not None
            and k < len(versions)
            and self.recorder.leaves[k]._version != versions[k]
        ]
        if not trained:
            return False  # nothing trains between the backward calls: no contrast
        made = _made_at(old)
        for k in carried:
            here = self.recorder.leaf_sites[k]  # type: ignore[index]
            message = (
                "this tensor is created with requires_grad but the training step leaves it "
                f"unchanged, and the value made from it{_at(made, here)} before the loop "
                f"carries its graph into every step: the backward{_at(site, here)} raises "
                "at the second step; create it without requires_grad (or detach the value)"
            )
            evidence = {"carried_from": _site_dict(made), "backward_at": _site_dict(site)}
            self.report_error(error, "untrained-leaf", "GF401", here, message, evidence)
        return True

    def _built_once(self, roots: list[Any], site: Site | None) -> Site | None:
        """The first line, in the backward's file, of the graph a loop backpropagates
        again (one backward line run twice: the forward ran once, before the loop)."""
        if site is None:
            return None
        lines = {
            made[1]
            for node in _nodes(_root_nodes(roots))
            if (made := _metadata(node).get(SITE_KEY)) is not None and made[0] == site[0]
        }
        return (site[0], min(lines)) if lines and min(lines) < site[1] else None

    def _earlier_use(self, old: Any, site: Site | None) -> tuple[Site, Site | None] | None:
        """Where a graph of an earlier backward call *of another line* took ``old`` (one
        step's two losses share a value: a GAN's fake batch in D's and G's loss), and the
        line of that backward."""
        if old is None or site is None:
            return None
        for step, nodes in reversed(self.recent_roots):
            freed_at = self.backward_sites.get(step)
            if freed_at == site:
                continue  # the same backward line: a state carried across iterations
            for node in _nodes(nodes):
                use = _metadata(node).get(SITE_KEY)
                if use is not None and use[0] == site[0] and _takes(node, old):
                    return use, freed_at
        return None

    def _carried_node(self, roots: list[Any]) -> tuple[Any, Any]:
        """The first node of the failing graph made before the latest backward call, and
        the node of this step that uses it (the nearest one the tracer saw made). A node
        the tracer did not stamp (made inside an op: an RNN's layers) counts as made when
        the node that uses it was."""
        queue = [(node, None, self.steps) for node in _root_nodes(roots)]
        seen: set[int] = set()
        while queue and len(seen) < MAX_GRAPH_NODES:
            node, user, made = queue.pop(0)
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            made = _metadata(node).get(MADE_KEY, made)
            if made < self.steps:
                return node, user
            if SITE_KEY in _metadata(node):
                user = node  # the latest node on the path that the tracer saw made
            queue.extend((next_node, user, made) for next_node, _ in node.next_functions)
        return None, None

    def _graph_cut(self, error: RuntimeError, site: Site | None, roots: list[Any]) -> None:
        tags = [getattr(r, CUT_TAG, None) for r in roots if isinstance(r, torch.Tensor)]
        tag = next((t for t in tags if t is not None), None)
        if tag is not None:
            self._tagged_cut(error, site, *tag)
            return
        cut = self._likely_cut()
        if cut is None:
            self.report_error(
                error,
                "graph-cut",
                "GF101",
                site,
                "backward of a value that does not require grad: the graph was cut before it",
            )
            return
        self.report_error(
            error,
            "graph-cut",
            cut.code,
            cut.site,
            f"the graph is cut here (`{cut.kind}` of a tensor that requires grad): the "
            f"backward{_at(site, cut.site)} finds no grad_fn",
            {
                "cut": cut.kind,
                "backward_at": _site_dict(site),
                "graph": self._graph(cut.sources[0]) if cut.sources else [],
            },
        )

    def _tagged_cut(self, error: RuntimeError, site: Site | None, how: str, here: Site) -> None:
        """The value a backward found without graph was computed in a no_grad block, or
        from tensors whose ``requires_grad`` the program turned off: pinned there."""
        backward = f"the backward{_at(site, here)}"
        if how == "no_grad":
            kind = "no-grad-cut"
            message = (
                f"the value {backward} runs is computed in this no_grad block from tensors "
                "that require grad: it has no graph (no grad_fn); compute it outside the "
                "block"
            )
        else:
            kind = "frozen-cut"
            message = (
                "`requires_grad` is turned off here for a tensor the backward's value is "
                f"computed from, and nothing else it uses requires grad: {backward} finds "
                "no grad_fn; keep it trainable (or train the tensors meant to learn)"
            )
        evidence = {"cut": how, "backward_at": _site_dict(site)}
        self.report_error(error, kind, "GF101", here, message, evidence)

    def _likely_cut(self) -> Cut | None:
        if not self.cuts:
            # no copy or detach: the statement of the latest indices this step took of a
            # tensor that requires grad (a loss on argmax; a metric's argmax comes before)
            latest = max(self.index_cuts.values(), key=lambda c: c.order, default=None)
            if latest is None:
                return None
            path, line = latest.site
            return replace(latest, site=(path, _statement_start(path, line)))
        return min(self.cuts.values(), key=lambda c: (CUT_PRIORITY.index(c.kind), -c.order))

    def backward_done(self, kind: str, roots: list[Any], objective: float | None) -> None:
        if kind == "backward":
            self._check_leaf_grads(objective)
        self.steps += 1
        self.leaf_versions = [leaf._version for leaf in self.recorder.leaves]
        self.index_cuts.clear()  # a step's argmax did not cut the graph that just ran
        frame = self.frames.frame()
        self.loop_code = frame.f_code if frame is not None else None
        self.backward_sites[self.steps] = self.frames.site()
        self.backward_sites.pop(self.steps - MAX_BACKWARD_SITES, None)
        for root in roots:
            if isinstance(root, torch.Tensor) and root.grad_fn is not None:
                _metadata(root.grad_fn)[ROOT_KEY] = self.steps
        self.recent_roots.append((self.steps, _root_nodes(roots)))
        if self.steps >= 3:  # two earlier backward calls to keep
            self._check_kept_graphs()

    def _check_kept_graphs(self) -> None:
        """Report each name the program holds whose graph keeps the roots of two or more
        earlier backward calls of one line (a running total, a list of losses: memory grows
        per iteration; the sum of one step's two losses does not grow)."""
        for held in kept.held_values(self.frames, sys._getframe(1)):
            key = (held.frame.f_code.co_filename, held.name)
            if key in self.kept_reported:
                continue
            steps = sorted(kept.earlier_roots(held.tensors, ROOT_KEY, self.steps))
            sites = [self.backward_sites.get(step) for step in steps]
            if len(set(sites)) < len(sites):  # one backward line's roots of two iterations
                self.kept_reported.add(key)
                self._report_kept(held, steps)

    def _report_kept(self, held: kept.Held, steps: list[int]) -> None:
        site = _metadata(held.tensors[-1].grad_fn).get(SITE_KEY)
        if held.container is not None or site is None:
            line = kept.update_line(held.frame, held.name) or held.frame.f_lineno
            site = (held.frame.f_code.co_filename, line)
        holder = f"the {held.container} `{held.name}`" if held.container else f"`{held.name}`"
        self.report(
            "graph-kept",
            "GF403",
            site,
            f"{holder} keeps the graphs of {len(steps)} earlier backward calls (from "
            f"step {steps[0]} on), one more each step: memory grows per step; keep "
            "`.detach()` or `.item()` of the value instead",
            {"held_by": held.name, "container": held.container, "steps_kept": steps[-8:]},
            step=self.steps,
        )

    def _check_leaf_grads(self, objective: float | None) -> None:
        """Note the leaves that have a gradient; report nan/inf ones that no singular op's
        hook explained (a finite loss, an op outside the watched ones)."""
        grads: list[tuple[int, torch.Tensor]] = []
        for k, leaf in enumerate(self.recorder.leaves):
            grad = leaf.grad
            if grad is not None:
                self.leaves_with_grad.add(k)
                if grad.is_floating_point() and grad.layout == torch.strided:
                    grads.append((k, grad))
        explained = any(code.startswith("GF3") for code, _, _ in self.reported)
        if not grads or explained or objective is None or not _finite(objective):
            return
        # one fused max-abs per leaf: nan and inf survive it, finite values never overflow
        norms = torch._foreach_norm([grad for _, grad in grads], float("inf"))
        if len({norm.dtype for norm in norms}) == 1 and bool(torch.stack(norms).isfinite().all()):
            return  # the common case: one check for all leaves
        nonfinite = [k for (k, _), norm in zip(grads, norms) if not bool(norm.isfinite())]
        if nonfinite:
            self.report(
                "nonfinite",
                "GF301",
                self.recorder.leaf_sites[nonfinite[0]],
                "this leaf got a nan/inf gradient from a finite loss (the op was not seen)",
                {"leaves": [self.recorder.leaf_info[k]["origin"] for k in nonfinite]},
            )

    # -------------------------------------------------------------------- end
    def finish(self) -> None:
        """At the end of the run: leaves that never got a gradient, and where they were cut."""
        if not self.steps:
            return
        for k, leaf in enumerate(self.recorder.leaves):
            if k in self.leaves_with_grad or leaf.grad is not None:
                continue
            cut = self._cut_reaching(leaf)
            if cut is not None:
                made_at = self.recorder.leaf_sites[k]
                self.report(
                    "grad-none",
                    cut.code,
                    cut.site,
                    f"the graph is cut here (`{cut.kind}`): the leaf made"
                    f"{_at(made_at, cut.site)} never gets a gradient (`.grad` stays None)",
                    {"cut": cut.kind, "leaf_at": _site_dict(made_at)},
                )

    def _cut_reaching(self, leaf: torch.Tensor) -> Cut | None:
        for cut in sorted(self.cuts.values(), key=lambda c: CUT_PRIORITY.index(c.kind)):
            if any(source is leaf or _reaches(source, leaf) for source in cut.sources):
                return cut
        return None


class TraceRecorder(instrument.Recorder):
    """verify's recorder (leaves, backward calls) without values, reporting to a tracer."""

    def __init__(self, tracer: Tracer) -> None:
        super().__init__(filename="", record_values=False)
        self.tracer = tracer
        self.leaf_sites: list[Site | None] = []

    def script_line(self) -> int | None:
        site = self.tracer.frames.site()
        return site[1] if site else None

    def add_leaf(self, tensor: torch.Tensor, origin: str) -> None:
        count = len(self.leaves)
        super().add_leaf(tensor, origin)
        if len(self.leaves) > count:
            self.leaf_sites.append(self.tracer.frames.site())

    def run_event(
        self,
        kind: str,
        roots: list[Any],
        grad_outputs: list[Any],
        inputs: Any,
        call: Callable[[], Any],
    ) -> Any:
        if self.depth:
            return call()
        tracer = self.tracer
        index = self.event_count
        try:
            result = super().run_event(kind, roots, grad_outputs, inputs, call)
        except RuntimeError as error:
            tracer.untraced(tracer.backward_failed, error, roots)
            raise
        tracer.untraced(tracer.backward_done, kind, roots, self.objectives.get(index))
        if tracer.max_steps is not None and tracer.steps >= tracer.max_steps and tracer.on_stop:
            tracer.on_stop("max-steps")
        return result


class TraceMode(TorchFunctionMode):
    """Hands every torch call of the program to the tracer (not its own calls)."""

    def __init__(self, tracer: Tracer) -> None:
        super().__init__()
        self.tracer = tracer
        tracer.mode = self

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        tracer = self.tracer
        if tracer.busy or tracer.recorder.internal:
            return func(*args, **kwargs)
        return tracer.observe(func, args, kwargs)


def watch_inplace_flags(tracer: Tracer) -> None:
    """Tell the tracer where the program sets a module's ``inplace`` flag after building
    it (``for m in model.modules(): m.inplace = True``): the line a fix must change."""
    module_class: Any = torch.nn.Module
    setattr_ = module_class.__setattr__

    @functools.wraps(setattr_)
    def noting(self: Any, name: str, value: Any) -> None:
        if name == "inplace":
            tracer._guarded(tracer.inplace_flag_set, self, value)
        setattr_(self, name, value)

    module_class.__setattr__ = noting


def untraced_optimizer_steps(mode: TraceMode) -> None:
    """Run every optimizer step without the mode: a step is dozens of torch calls per
    parameter under no_grad, none of which builds a graph (most of the tracing cost of a
    training loop otherwise); the tracer is told of the step instead."""
    optimizer_class: Any = torch.optim.Optimizer
    hook_step = getattr(optimizer_class, "profile_hook_step", None)
    if hook_step is None:  # another torch: steps stay traced, only slower
        return

    def profile_hook_step(step: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(step)
        def step_untraced(*args: Any, **kwargs: Any) -> Any:
            if torch.overrides._get_current_function_mode() is not mode:
                return step(*args, **kwargs)
            with torch.overrides._pop_mode_temporarily():
                result = step(*args, **kwargs)
            mode.tracer.untraced(mode.tracer.optimizer_stepped, args[0])
            return result

        return hook_step(step_untraced)

    optimizer_class.profile_hook_step = staticmethod(profile_hook_step)


# ------------------------------------------------------------------ helpers
def _describes(details: errors.SavedTensorError, change: InplaceChange) -> bool:
    """Whether autograd's description of a modified tensor fits this change: its shape, and
    the node that made the tensor, before the change or after it (both are named)."""
    if change.op == STEP:  # a parameter, saved as itself or as a view (`w.t()`)
        return sorted(change.shape) == sorted(details.shape)
    return details.shape in (change.shape, change.base_shape) and (
        errors.same_op(change.producer, details.producer)
        or errors.same_op(change.result, details.producer)
    )


def _is_requires_grad(descriptor: Any) -> bool:
    """Whether ``descriptor`` is ``Tensor.requires_grad`` (torch's, or a property in its
    place: verify's instrumentation puts one there)."""
    return descriptor is not None and any(
        vars(cls).get("requires_grad") is descriptor for cls in (torch.Tensor, torch._C.TensorBase)
    )


def _is_inplace(name: str) -> bool:
    """``add_``, ``x += 1``, ``x[i] = v`` (not ``_foreach_add_``: a list, not a tensor)."""
    if name.endswith("_") and not name.endswith("__"):
        return not name.startswith("_")
    return name in INPLACE_OPERATORS


def _masked_by_bool(args: tuple[Any, ...]) -> bool:
    """``x[mask]``, ``x[:, mask]``, ``x.masked_select(mask)``: a boolean tensor selects."""
    if len(args) < 2:
        return False
    index = args[1] if isinstance(args[1], tuple) else (args[1],)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in index)


def _tensors_in(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors_in(item)


def _nodes(start: list[Any]) -> Iterator[Any]:
    """The nodes of the graph behind ``start`` (breadth first, each once, bounded)."""
    queue, seen = list(start), set[int]()
    while queue and len(seen) < MAX_GRAPH_NODES:
        node = queue.pop(0)
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        queue.extend(next_node for next_node, _ in node.next_functions)


def _takes(node: Any, old: Any) -> bool:
    return any(next_node is old for next_node, _ in node.next_functions)


def _root_nodes(roots: list[Any]) -> list[Any]:
    return [r.grad_fn for r in roots if isinstance(r, torch.Tensor) and r.grad_fn is not None]


def _failing_node(roots: list[Any], needle: str) -> Any:
    """The first node of the graph whose saved tensors raise an error containing ``needle``."""
    return next((node for node in _nodes(_root_nodes(roots)) if _fails(node, needle)), None)


def _made_at(node: Any) -> Site | None:
    """The line that made the node: in the loop's frame when known, else the innermost
    user line (a value made inside ``forward`` crosses iterations in the loop's frame)."""
    metadata = _metadata(node)
    return metadata.get(LOOP_KEY) or metadata.get(SITE_KEY)


def _fails(node: Any, needle: str) -> bool:
    for attribute in dir(node):
        if not attribute.startswith("_saved_"):
            continue
        try:
            getattr(node, attribute)
        except RuntimeError as error:
            if needle in str(error):
                return True
    return False


def _reaches(source: Any, leaf: torch.Tensor) -> bool:
    """Whether the graph behind the node ``source`` accumulates into ``leaf``."""
    if isinstance(source, torch.Tensor):
        return False
    return any(getattr(node, "variable", None) is leaf for node in _nodes([source]))


def _consumed_graph(node: Any) -> bool:
    """Whether ``node`` or one of its inputs was the root of a finished backward."""
    if ROOT_KEY in _metadata(node):
        return True
    return any(n is not None and ROOT_KEY in _metadata(n) for n, _ in node.next_functions)


def _metadata(node: Any) -> dict[str, Any]:
    """The node's own dict (kept as long as the node; anomaly mode keeps tracebacks there)."""
    metadata: dict[str, Any] = node.metadata
    return metadata


def _all_finite(values: Any) -> bool:
    return all(
        bool(torch.isfinite(v).all())
        for v in values
        if isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex())
    )


def _finite(value: float) -> bool:
    return value == value and abs(value) != float("inf")


def _first_line(error: BaseException) -> str:
    return instrument.one_line(error)


def _at(site: Site | None, here: Site | None) -> str:
    """`` at line 4`` (in the file of ``here``, where the finding is) or `` at model.py:4``."""
    if site is None:
        return ""
    if here is not None and site[0] == here[0]:
        return f" at line {site[1]}"
    return f" at {os.path.basename(site[0])}:{site[1]}"


def _site_dict(site: Site | None) -> dict[str, Any] | None:
    return None if site is None else {"path": site[0], "line": site[1]}


@functools.lru_cache(maxsize=32)
def _statement_starts(path: str) -> dict[int, int]:
    """Each line of the file at ``path`` -> the first line of the innermost statement
    holding it (a call on the third line of a statement is pinned where it starts)."""
    try:
        tree = pyast.parse(read_source(path).text)
    except (FileError, SyntaxError, ValueError):
        return {}
    starts: dict[int, int] = {}
    for node in ast.walk(tree):  # breadth first: inner statements come later and win
        if isinstance(node, ast.stmt) and not isinstance(node, _COMPOUND):
            for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                starts[line] = node.lineno
    return starts


_COMPOUND = (
    ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.For, ast.AsyncFor, ast.While,
    ast.If, ast.With, ast.AsyncWith, ast.Try,
)  # fmt: skip


def _statement_start(path: str, line: int) -> int:
    return _statement_starts(path).get(line, line)
