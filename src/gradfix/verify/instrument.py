"""Hooks that record leaves and backward calls while a script runs (subprocess side).

Imported only by the runner subprocess: it imports torch. ``install()`` patches torch once
per process; each execution of a script then gets a fresh :class:`Recorder` through
``activate(recorder)``. The patches do nothing while no recorder is active.

What is recorded:

* **leaves**, in creation order: tensors that come out of a torch factory with
  ``requires_grad=True``, ``nn.Parameter(...)``, ``t.requires_grad_()`` and
  ``t.requires_grad = True``. The position in that list is the leaf's identity across the
  buggy and the fixed script.
* **backward events**: every top-level call of ``Tensor.backward``,
  ``torch.autograd.backward`` and ``torch.autograd.grad``. Before calling the real function
  the root values (the forward result) are recorded; afterwards the gradient each tracked
  leaf received *from this call* (``.grad`` after minus ``.grad`` before, ``None`` when
  ``.grad`` stays ``None``), or the returned gradients of ``autograd.grad``; the leaves
  that no longer require grad at the call (``frozen``: ``requires_grad_(False)`` on a
  teacher's weights), and the names of the ``nn.Module`` parameters the script can reach
  (``model.lin.weight``, from its module-level names and its frames' locals).
* **discarded gradients**: the leaves whose ``.grad`` after a backward call was reset
  (``zero_grad()``, ``p.grad = None``) before the program read it (an optimizer step, a
  ``p.grad`` in its code, a hook): what that call added to them had no effect on the
  program (``discarded`` of the event). Reads are seen through a ``Tensor.grad`` property;
  ``zero_grad`` reads each gradient only to reset it, which is no use of it.

For finite differences the recorder can also count the *uses* of each leaf (through a
``TorchFunctionMode``) and perturb one element of one leaf at a chosen use, see
:class:`UseTracker`.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import linecache
import math
import os
import re
import sys
import sysconfig
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from gradfix.torch_facts import FACTORY_FUNCTIONS, TENSOR_FACTORY_METHODS

MAX_RECORDED_EVENTS = 50
MAX_TENSOR_ELEMENTS = 100_000
# Relative finite-difference step by leaf dtype (half precision needs a coarser step).
#: a step of 1e-3 in float32 keeps rounding noise below 1e-4 of the derivative; float64's
#: rounding allows 1e-6, a thousand times less likely to step across a kink (a ReLU input
#: within 1e-3 of zero) and with a truncation error a million times smaller
FD_STEP = {torch.float16: 1e-2, torch.bfloat16: 1e-2, torch.float64: 1e-6}
FD_DEFAULT_STEP = 1e-3

# The C getset descriptor behind `Tensor.requires_grad` (typed as a bool by the stubs).
_BASE_REQUIRES_GRAD: Any = torch._C.TensorBase.requires_grad
# The C getset descriptor behind `Tensor.grad`.
_BASE_GRAD: Any = torch._C.TensorBase.grad
_ACTIVE: Recorder | None = None
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
#: where libraries live (a frame there is not the program's own code)
_LIBRARIES = tuple(
    sorted(
        {path for k in ("stdlib", "purelib", "platlib") if (path := sysconfig.get_path(k))}
        | {_TORCH_DIR, os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    )
)
_INSTALLED = False


class StopScript(BaseException):
    """Ends a finite-difference run once the backward event of interest was evaluated.

    A ``BaseException`` so that the script's own ``except Exception`` does not swallow it.
    """


def encode_float(value: float) -> float | str:
    """JSON-safe float: nan and infinities become the strings ``float()`` reads back."""
    return value if math.isfinite(value) else str(value)


def encode_tensor(tensor: torch.Tensor) -> dict[str, Any]:
    """Values of ``tensor`` as a flat float64 list (row-major) plus shape and dtype.

    Tensors whose values cannot be read this way (sparse, quantized, meta) keep their
    shape and dtype with no values, marked ``truncated``.
    """
    try:
        return _encode_strided(tensor)
    except Exception:  # noqa: BLE001 - never let the instrumentation break the script
        return {
            "shape": list(tensor.shape),
            "dtype": str(tensor.dtype).replace("torch.", ""),
            "numel": tensor.numel(),
            "values": [],
            "truncated": True,
        }


def _encode_strided(tensor: torch.Tensor) -> dict[str, Any]:
    data = tensor.detach()
    if data.is_complex():
        data = torch.view_as_real(data)
    if data.layout != torch.strided or data.is_quantized or data.device.type == "meta":
        raise ValueError("no strided values")
    flat = data.reshape(-1).cpu()
    truncated = flat.numel() > MAX_TENSOR_ELEMENTS
    values = flat[:MAX_TENSOR_ELEMENTS].to(torch.float64).tolist()
    return {
        "shape": list(tensor.shape),
        "dtype": str(tensor.dtype).replace("torch.", ""),
        "numel": flat.numel(),
        "values": [encode_float(v) for v in values],
        "truncated": truncated,
    }


@dataclass
class Perturbation:
    """Add ``multiple * h`` to element ``element`` of leaf ``leaf`` at its ``use``-th use."""

    leaf: int
    use: int
    element: int
    multiple: float
    value: float | None = None  # the element's value just before the perturbation
    step: float | None = None  # the change actually applied (after rounding to the dtype)


class Recorder:
    """State of one execution of one script."""

    def __init__(self, filename: str, *, record_values: bool = True) -> None:
        self.filename = filename
        self.record_values = record_values
        self.leaves: list[torch.Tensor] = []
        self.leaf_info: list[dict[str, Any]] = []
        self._leaf_index: dict[int, int] = {}
        self.events: list[dict[str, Any]] = []
        self.event_count = 0
        self.objectives: dict[int, float | None] = {}
        self.root_eps: dict[int, float] = {}
        self.leaf_counts: dict[int, int] = {}
        self.depth = 0
        self.internal = False
        # --max-steps: the script is stopped at the backward call of this index (by
        # StopScript, or by ``on_max_steps`` when the whole process must end there).
        self.max_events: int | None = None
        #: record each backward call's roots and skip the call (a run with autograd off
        #: that gives the forward results a fix must keep, see ``Runner.trace``)
        self.skip_backward = False
        self.on_max_steps: Callable[[], None] | None = None
        # Finite-difference support (see UseTracker).
        self.stop_after_event: int | None = None
        self.perturbation: Perturbation | None = None
        #: ``autograd.grad`` without ``create_graph`` returns constants to autograd: a
        #: probe run keeps them (event index -> the gradients), a perturbed run is given
        #: them back instead of computing them, so finite differences differentiate what
        #: autograd does (first-order MAML's inner step: a constant correction)
        self.keep_constant_grads = False
        self.constant_grads: dict[int, Any] = {}
        self.replay_constant_grads: dict[int, Any] | None = None
        self.next_grad_is_constant = False  # set by the wrapper for the call it runs
        self.use_counts: dict[int, int] = {}
        self.data_epoch: dict[int, int] = {}
        self._group_token: dict[int, tuple[int, int]] = {}
        self._group_first_use: dict[int, int] = {}
        self.first_uses: dict[int, dict[int, int | None]] = {}
        #: The script's module namespace, to record gradients of the values it binds.
        self.namespace: dict[str, Any] | None = None
        #: leaf index -> the first name of it as a module parameter (``model.lin.weight``)
        self.parameter_names: dict[int, str] = {}
        #: leaf index -> the recorded backward events whose gradient of it is still in
        #: its ``.grad``, unread by the program (see ``discarded`` of an event)
        self._unread: dict[int, list[int]] = {}
        #: leaf -> the backward calls whose gradients its ``.grad`` holds (since its reset)
        self._since_reset: dict[int, list[int]] = {}
        #: leaf -> the calls each optimizer step that read its ``.grad`` read, in order
        self.step_windows: dict[int, list[list[int]]] = {}
        #: leaves whose gradient was reset (or ``zero_grad()`` reached) since the last
        #: backward call, and the leaves the latest call was made for (see ``owns``)
        self._reset_since_call: set[int] = set()
        self._owns: list[int] | None = None
        self._zeroing = 0  # inside ``zero_grad()``: its reads of ``.grad`` only reset them
        self._zeroed: set[int] = set()  # leaves ``zero_grad()`` reached
        #: leaves an optimizer step must not change (restored after each step, see
        #: :func:`_hold_step`): a fix that makes them train is replayed without it
        self.hold: frozenset[int] = frozenset()
        #: leaves held like ``hold`` at the optimizer steps made while they do not
        #: require grad (a frozen layer an optimizer with momentum still moves)
        self.hold_frozen: frozenset[int] = frozenset()
        #: record each leaf's values at its first grad-mode use (``first_values``), and
        #: set them at that use from ``sync`` (a replay synchronised to another run's)
        self.record_first_values = False
        self.first_values: dict[int, list[float]] = {}
        self.value_used: set[int] = set()
        self.sync: dict[int, list[float]] = {}
        #: the same at the first read of each group of a leaf's values (every write the
        #: program makes between reads starts a group: an optimizer step, a target
        #: network's ``load_state_dict``): keyed ``"k:g"`` (``group_values``), set from
        #: ``sync_groups`` (a replay that takes the updates of another run), and each group
        #: whose values the replay found other than the run it takes them from
        #: (``sync_diverged``: what the change writes differently)
        self.record_group_values = False
        self.group_values: dict[str, list[float]] = {}
        self.group_values_truncated = False
        self._group_values_count = 0
        self.sync_groups: dict[str, list[float]] = {}
        self.sync_diverged: list[dict[str, int]] = []
        self._value_tokens: dict[int, tuple[int, int]] = {}
        self._value_groups: dict[int, tuple[int, int]] = {}
        self._sync_index: dict[int, list[tuple[int, int]]] | None = None
        self._held_values: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.held_steps = 0
        #: Finite differences differentiate what autograd does, and autograd never goes
        #: through a ``torch.optim`` step: a probe run records the values each step leaves
        #: its leaves at (``step_values``, None past ``STEP_MAX_VALUES``), and a perturbed
        #: run is given them back after the same step (``replay_steps``), so a perturbation
        #: reaches a later objective only through the graph, never through another
        #: parameter's update (a GAN's discriminator stepped on the generator's output).
        #: the gradients ``autograd.grad`` returned that no torch call has read yet:
        #: id -> (the tensor, kept alive so its id stays its own; its event's record; leaf)
        self._watched: dict[int, tuple[torch.Tensor, dict[str, Any], int]] = {}
        #: lines of the script the change wrote or removed: a grad-off read of a leaf's
        #: values there (a ``no_grad`` block the change adds or removes, not an optimizer
        #: step) is a use like a grad-mode one, so finite differences follow it
        self.changed_lines: frozenset[int] = frozenset()
        #: autograd was last turned off by a statement at a line the change wrote or
        #: removed (``torch.set_grad_enabled(False)`` run on import): the reads under it
        #: are followed by finite differences, as those at such a line
        self.grad_off_by_change = False
        #: autograd was last turned off by a reentrant checkpoint for its forward (which
        #: backward runs again with autograd on): the reads under it are the forward's own,
        #: uses like grad-mode ones, and finite differences follow them
        self.grad_off_by_checkpoint = False
        #: grad-mode object (a ``no_grad`` block) -> both flags above when entered
        self._grad_modes: dict[int, tuple[bool, bool]] = {}
        self.setting_grad_mode = False
        self.in_optimizer_step = 0
        self.in_function = 0  # inside an ``autograd.Function``'s apply (its forward)
        #: what of the program's own makes gradients other than the derivative of the
        #: forward: its ``autograd.Function`` classes applied, backward hooks it registered
        self.custom_gradients: set[str] = set()
        #: where the program set ``requires_grad`` to False, and on which leaf (see _frozen)
        self.freezes: list[dict[str, Any]] = []
        #: where the program set ``requires_grad = False`` on a module, and its leaves
        self.module_freezes: list[dict[str, Any]] = []
        #: optimizer steps made again on the gradients of that optimizer's last step (the
        #: same gradients stepped on twice)
        self.resteps: list[dict[str, Any]] = []
        #: the leaves some optimizer's step holds (in its parameter groups), whether or not
        #: a gradient ever reaches them
        self.optimized: set[int] = set()
        self._last_step_grads: dict[int, list[tuple[Any, int | None]]] = {}
        #: tensors made frozen on purpose (``nn.Parameter(x, requires_grad=False)``):
        #: id -> (the tensor, kept alive so its id stays its own; the statement)
        self._made_frozen: dict[int, tuple[torch.Tensor, str]] = {}
        #: storage address -> the first leaf over it (see ``_note_shared_storage``)
        self._storages: dict[int, int] = {}
        #: statement -> the tensors it set ``requires_grad`` True on (ids): one that sets it
        #: on several (``model.requires_grad_(True)``) is a blanket unfreeze
        self.unfreezes: dict[str, set[int]] = {}
        #: leaf -> how often the program or an optimizer read its ``.grad`` (not to reset it)
        self.grad_reads: dict[int, int] = {}
        #: statements of the program that read ``.grad`` of a non-leaf (see grad_read)
        self.nonleaf_grad_reads: list[dict[str, Any]] = []
        #: lines of the script run inside optimizer steps (see ``_StepLines``)
        self.step_lines: set[int] = set()
        self.record_steps = False
        #: each backward call's ``gradient=`` weights (constants to autograd): a probe run
        #: keeps them (``record_steps``), a perturbed run weighs its roots by the probe's,
        #: so finite differences differentiate what autograd does (an ``out.backward(
        #: gradient=g)`` whose ``g`` the program computed from the leaves)
        self.kept_grad_outputs: dict[int, list[Any]] = {}
        self.replay_grad_outputs: dict[int, list[Any]] | None = None
        self.step_values: list[dict[int, torch.Tensor] | None] = []
        #: each new leaf's value at its creation (a probe), and the probe's (a replay)
        self.initial_values: dict[int, torch.Tensor] = {}
        self.replay_initial: dict[int, torch.Tensor] | None = None
        self.replay_steps: list[dict[int, torch.Tensor] | None] | None = None
        self.optimizer_steps = 0
        #: what each ``.detach()`` the change did not write returned (a probe: None past
        #: ``DETACH_MAX_VALUES``), and the probe's, handed back to a perturbed run once its
        #: perturbation is applied: autograd holds a detached value constant (a regression
        #: target ``pred.detach() + noise``), so finite differences must too
        self.detached: list[torch.Tensor | None] = []
        self.replay_detached: list[torch.Tensor | None] | None = None
        self._detach_calls = 0
        #: lines of the script whose in-place writes a replay makes out of place (see
        #: ``out_of_place``)
        self.dealias: frozenset[int] = frozenset()
        self.dealiased_modules: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
        #: the results of ``.detach()`` calls on tensors that required grad: a leaf made
        #: of one (``x.detach().requires_grad_()``) is a cut, not an input of its own
        #: the graph roots of the latest backward call, and the ids of the nodes they
        #: reach (built when first asked, see ``_backpropagated``)
        self._backpropagated_roots: list[Any] = []
        self._backpropagated_ids: set[int] | None = None
        #: (by id; weak, as tensors compare element by element)
        self.cuts: dict[int, weakref.ReferenceType[torch.Tensor]] = {}

    # ----------------------------------------------------------------- leaves
    def add_leaf(self, tensor: torch.Tensor, origin: str) -> None:
        if id(tensor) in self._leaf_index:
            return
        self._leaf_index[id(tensor)] = len(self.leaves)
        self.leaves.append(tensor)
        self.leaf_info.append(
            {
                "index": len(self.leaf_info),
                "shape": list(tensor.shape),
                "dtype": str(tensor.dtype).replace("torch.", ""),
                "origin": origin,
                "line": self.script_line(),
                "declared": _declared_by_the_program(),
            }
        )
        cut = self.cuts.get(id(tensor))
        if cut is not None and cut() is tensor:
            self.leaf_info[-1]["from_cut"] = True
        if self.depth:
            # made while a recorded backward call runs (a reentrant checkpoint's detached
            # inputs): autograd's own machinery, not a leaf of the program's
            self.leaf_info[-1]["in_backward"] = True
        self._note_shared_storage(len(self.leaves) - 1, tensor)
        made = self._made_frozen.get(id(tensor))
        if made is not None and made[0] is tensor:
            # made frozen on purpose, requiring grad only since: by which statements
            self.leaf_info[-1]["made_frozen"] = made[1]
            statement = _program_statement()
            if statement is not None:
                self.leaf_info[-1]["unfrozen_by"] = statement[0]
        if (self.record_steps or self.replay_steps is not None) and _held_at_creation(
            origin, self.leaf_info[-1]["declared"]
        ):
            self._hold_initial(len(self.leaves) - 1, tensor)

    def _note_shared_storage(self, k: int, tensor: torch.Tensor) -> None:
        """A new leaf over an earlier leaf's storage (``m.bias = nn.Parameter(b.view(-1))``
        with ``b`` a view of the old bias): the program replaced that leaf by this one, and
        perturbing the old one's values perturbs the new one. Recorded as ``rewrapped_as``
        on the earlier leaf (its gradient, None, is no cut finite differences can see)."""
        internal, self.internal = self.internal, True  # no use of the leaf
        try:
            pointer = tensor.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError, AttributeError):
            return
        finally:
            self.internal = internal
        if not pointer:
            return
        earlier = self._storages.get(pointer)
        if earlier is None:
            self._storages[pointer] = k
        elif "rewrapped_as" not in self.leaf_info[earlier]:
            self.leaf_info[earlier]["rewrapped_as"] = k

    def _hold_initial(self, k: int, tensor: torch.Tensor) -> None:
        """A new leaf's value is a constant to autograd, even where it was computed from
        another leaf (``weight_norm``'s parameters from the weight, ``nn.Parameter(w.
        clone())``): a probe run records it, a perturbed run is given it back, as for an
        optimizer step (see ``record_steps``)."""
        internal, self.internal = self.internal, True
        try:
            with torch.no_grad():
                if self.record_steps:
                    kept = sum(v.numel() for v in self.initial_values.values())
                    if kept + tensor.numel() <= STEP_MAX_VALUES and not tensor.is_meta:
                        self.initial_values[k] = tensor.detach().clone()
                    return
                value = (self.replay_initial or {}).get(k)
                perturbed = self.perturbation.leaf if self.perturbation is not None else None
                if value is not None and k != perturbed and value.shape == tensor.shape:
                    tensor.detach().copy_(value)
        finally:
            self.internal = internal

    def leaf_index(self, obj: object) -> int | None:
        return self._leaf_index.get(id(obj)) if isinstance(obj, torch.Tensor) else None

    def script_line(self) -> int | None:
        """Line of the innermost frame that belongs to the executed script."""
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename == self.filename:
                return frame.f_lineno
            frame = frame.f_back
        return None

    # ----------------------------------------------------------------- events
    def run_event(
        self,
        kind: str,
        roots: list[Any],
        grad_outputs: list[Any],
        inputs: Any,
        call: Callable[[], Any],
    ) -> Any:
        """Record one backward call around ``call`` (the real autograd function)."""
        if self.depth:
            return call()
        if self.max_events is not None and self.event_count >= self.max_events:
            if self.on_max_steps is not None:
                self.on_max_steps()
            raise StopScript  # both versions stop after the same number of calls
        index = self.event_count
        self.event_count += 1
        self._backpropagated_roots = [
            r.grad_fn for r in roots if isinstance(r, torch.Tensor) and r.grad_fn is not None
        ]
        self._backpropagated_ids = None
        self.internal = True
        try:
            weights = grad_outputs
            if self.replay_grad_outputs is not None and index in self.replay_grad_outputs:
                weights = self.replay_grad_outputs[index]
            elif self.record_steps and any(isinstance(g, torch.Tensor) for g in grad_outputs):
                self.kept_grad_outputs[index] = [
                    g.detach().clone() if isinstance(g, torch.Tensor) else g for g in grad_outputs
                ]
            self.objectives[index] = objective_value(roots, weights)
            self.root_eps[index] = _rounding_unit(roots)
            self.leaf_counts[index] = len(self.leaves)
            self.first_uses[index] = dict(self._group_first_use)
            record = self._begin_record(index, kind, roots) if self.record_values else None
            grads_before = self._grad_snapshot() if record and kind == "backward" else None
            bound = self._hook_bound_values() if record and kind == "backward" else {}
            if record and kind == "backward":
                record["bound_values"] = self._bound_values()
                # opened before the call: a hook that reads ``.grad`` during it uses it
                record["discarded"] = []
                for k in range(len(self.leaves)):
                    self._unread.setdefault(k, []).append(index)
                    self._since_reset.setdefault(k, []).append(index)
                record["accumulated"] = _stale(grads_before or [])
                if self._reset_since_call:
                    # the leaves reset just before it: the ones this loss is for (an
                    # actor's optimizer zeroed before the actor loss's backward); with no
                    # reset in between, the previous call's (accumulation)
                    self._owns = sorted(self._reset_since_call)
                    self._reset_since_call = set()
                if self._owns is not None:
                    record["owns"] = self._owns
            if record:
                record["frozen"] = self._frozen_leaves()
                record["versions"] = [leaf._version for leaf in self.leaves]
                # `.data` writes bypass the version counter: the values' sums see them
                record["sums"] = [_leaf_sum(leaf) for leaf in self.leaves]
                record["padding_rows"] = self._padding_rows()
                self._name_parameters()
        finally:
            self.internal = False
        if self.stop_after_event == index:
            raise StopScript
        constant = kind == "grad" and self.next_grad_is_constant
        self.next_grad_is_constant = False
        if record is not None and constant:
            record["constant"] = True  # ``autograd.grad`` without ``create_graph``
        replayed = self.replay_constant_grads
        if constant and replayed is not None and index in replayed:
            stored = replayed[index]
            call = lambda: tuple(None if g is None else g.clone() for g in stored)  # noqa: E731
        self.depth += 1
        try:
            result = call()
            if constant and self.keep_constant_grads and isinstance(result, tuple):
                self.constant_grads[index] = tuple(
                    None if g is None else g.detach().clone() for g in result
                )
        except Exception as exc:
            if record is not None:
                record["error"] = {"type": type(exc).__name__, "message": one_line(exc)}
            raise
        finally:
            self.depth -= 1
            for hook in bound.values():
                hook.handle.remove()
        if record is not None:
            self.internal = True
            try:
                record["grads"] = self._event_grads(kind, grads_before, inputs, result)
                if kind == "grad":
                    self._watch_returned(record, inputs, result)
                if bound:
                    record["bound_grads"] = {
                        name: None if hook.grad is None else encode_tensor(hook.grad)
                        for name, hook in bound.items()
                    }
            finally:
                self.internal = False
        return result

    def _watch_returned(self, record: dict[str, Any], inputs: Any, result: Any) -> None:
        """The gradients an ``autograd.grad`` call returned are ``unread`` until a torch
        call takes one (MAML's inner step reads those of the weights it adapts and drops
        the others: a fix that no longer asks for them changes nothing)."""
        record["unread"] = []
        for k, grad in self._returned_grads(inputs, result):
            if isinstance(grad, torch.Tensor):
                record["unread"].append(k)
                self._watched[id(grad)] = (grad, record, k)

    def _read_watched(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        for value in (*args, *kwargs.values()):
            items = value if isinstance(value, (list, tuple)) else (value,)
            for item in items:
                entry = (
                    self._watched.pop(id(item), None) if isinstance(item, torch.Tensor) else None
                )
                if entry is not None and entry[0] is item and entry[2] in entry[1]["unread"]:
                    entry[1]["unread"].remove(entry[2])

    def _bound_values(self) -> dict[str, Any]:
        """Values and leaf indices of the module-level names that hold tensors requiring
        grad, at a backward call: which leaf a name holds, and what it holds."""
        bound: dict[str, Any] = {}
        for name, value in self._named_tensors():
            if _BASE_REQUIRES_GRAD.__get__(value):
                bound[name] = {"leaf": self.leaf_index(value), "value": encode_tensor(value)}
        return bound

    def _named_tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Module-level tensors by name, and the tensors of module-level ``nn.Module``
        objects by ``object.attribute`` (``model.scale``: parameters and plain attributes,
        one level deep)."""
        for name, value in list((self.namespace or {}).items()):
            if name.startswith("__"):
                continue
            if isinstance(value, torch.Tensor):
                yield name, value
            elif isinstance(value, torch.nn.Module):
                attributes = {**vars(value), **value._parameters}
                for attr, item in attributes.items():
                    if isinstance(item, torch.Tensor):
                        yield f"{name}.{attr}", item

    def _frozen_leaves(self) -> list[int]:
        """Leaves that no longer require grad: frozen on purpose, no gradient expected."""
        return [k for k, leaf in enumerate(self.leaves) if not _BASE_REQUIRES_GRAD.__get__(leaf)]

    def _padding_rows(self) -> dict[str, list[int]]:
        """Leaf -> the elements of the ``padding_idx`` row of an embedding's weight the
        script holds: their gradient is zero by definition, whatever the forward does with
        them (finite differences of the values disagree on purpose)."""
        rows: dict[str, list[int]] = {}
        for _, held in self._held_modules():
            for module in held.modules():
                if not isinstance(module, (torch.nn.Embedding, torch.nn.EmbeddingBag)):
                    continue
                weight: torch.Tensor = module.weight
                padding = module.padding_idx
                k = self.leaf_index(weight)
                if k is None or padding is None or weight.dim() != 2:
                    continue
                width = weight.shape[1]
                rows[str(k)] = list(range(padding * width, (padding + 1) * width))
        return rows

    def _name_parameters(self) -> None:
        """Name the leaves that are parameters of the modules the script holds (its
        module-level names, then the locals of its frames, innermost first)."""
        for owner, module in self._held_modules():
            for name, parameter in module.named_parameters():
                k = self.leaf_index(parameter)
                if k is not None:
                    self.parameter_names.setdefault(k, f"{owner}.{name}")

    def _held_modules(self) -> Iterator[tuple[str, torch.nn.Module]]:
        scopes = [self.namespace or {}]
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename == self.filename and frame.f_locals is not scopes[0]:
                scopes.append(frame.f_locals)
            frame = frame.f_back
        for scope in scopes:
            for name, value in list(scope.items()):
                if isinstance(value, torch.nn.Module) and not name.startswith("__"):
                    yield name, value

    def _hook_bound_values(self) -> dict[str, _GradHook]:
        """Hook the module-level names (and module attributes) bound to non-leaf tensors
        that require grad.

        ``w = torch.randn(3, requires_grad=True) * 0.01`` binds a non-leaf: the leaf that
        gets the gradient is unreachable, and a fix makes ``w`` itself the leaf. The
        gradient w.r.t. the bound value is what such a fix must reproduce. A hook records
        it without touching ``.grad`` (``retain_grad()`` would change the script's
        behaviour), and is removed after the call.
        """
        hooks: dict[str, _GradHook] = {}
        for name, value in self._named_tensors():
            if not _BASE_REQUIRES_GRAD.__get__(value) or value.is_leaf:
                continue
            hook = _GradHook()
            hook.handle = value.register_hook(hook)
            hooks[name] = hook
        return hooks

    def _begin_record(self, index: int, kind: str, roots: list[Any]) -> dict[str, Any] | None:
        if index >= MAX_RECORDED_EVENTS:
            return None
        line = self.script_line()
        record = {
            "index": index,
            "kind": kind,
            "line": line,
            # the statement's text: the same call in both versions whatever the line shift
            "code": _statement_text(linecache.getline(self.filename, line)) if line else "",
            "roots": [encode_tensor(r) for r in roots if isinstance(r, torch.Tensor)],
            "objective": _maybe_encode(self.objectives[index]),
            "error": None,
            "grads": {},
        }
        self.events.append(record)
        return record

    def _grad_snapshot(self) -> list[torch.Tensor | None]:
        return [None if leaf.grad is None else leaf.grad.detach().clone() for leaf in self.leaves]

    def _event_grads(
        self, kind: str, grads_before: list[torch.Tensor | None] | None, inputs: Any, result: Any
    ) -> dict[str, Any]:
        if kind == "grad":
            return {
                str(k): None if g is None else encode_tensor(g)
                for k, g in self._returned_grads(inputs, result)
            }
        grads: dict[str, Any] = {}
        for k, leaf in enumerate(self.leaves):
            before = grads_before[k] if grads_before and k < len(grads_before) else None
            grads[str(k)] = _grad_increment(leaf.grad, before)
        return grads

    def _returned_grads(self, inputs: Any, result: Any) -> Iterator[tuple[int, Any]]:
        if isinstance(inputs, dict):
            pairs = [(inputs[key], result[key]) for key in inputs]
        else:
            seq = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
            pairs = list(zip(seq, result))
        for tensor, grad in pairs:
            k = self.leaf_index(tensor)
            if k is not None:
                yield k, grad

    # ---------------------------------------------------- discarded gradients
    def grad_read(self, tensor: torch.Tensor) -> None:
        """The program reads ``tensor.grad``: the gradients in it are used."""
        k = self.leaf_index(tensor)
        if k is None:
            if not tensor.is_leaf and tensor.requires_grad and not tensor.retains_grad:
                self._nonleaf_grad_read()
            return
        if self._zeroing:
            self._zeroed.add(k)  # read by ``zero_grad`` to reset it
            return
        self._unread.pop(k, None)
        self.grad_reads[k] = self.grad_reads.get(k, 0) + 1
        if self.in_optimizer_step:
            # an optimizer step reads the gradients every call since the last reset gave
            window = self._since_reset.get(k, [])
            windows = self.step_windows.setdefault(k, [])
            if (not windows or windows[-1] != window) and len(windows) < 200:
                windows.append(list(window))
            for index in window:
                stepped = self.events[index].setdefault("stepped_with", [])
                if k not in stepped:
                    stepped.append(k)
                # the calls whose gradients of k this step reads together with this one's
                self.events[index].setdefault("read_with", {})[str(k)] = list(window)

    def _nonleaf_grad_read(self) -> None:
        """The program's own code reads ``.grad`` of a tensor that is not a leaf: always
        ``None`` (autograd fills it only for leaves, or after ``retain_grad()``). Each
        statement is recorded once, by ``where`` / ``code`` / ``line``."""
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename == __file__:
            frame = frame.f_back
        if frame is None or len(self.nonleaf_grad_reads) >= 20:
            return
        filename = frame.f_code.co_filename
        if filename.startswith(("<", *_LIBRARIES)):
            return  # torch's, a library's
        relative = os.path.relpath(filename) if os.path.isabs(filename) else filename
        where = f"{relative}:{frame.f_lineno}"
        if any(read["where"] == where for read in self.nonleaf_grad_reads):
            return
        code = _statement_text(linecache.getline(filename, frame.f_lineno))
        self.nonleaf_grad_reads.append({"where": where, "code": code, "line": frame.f_lineno})

    def grad_reset(self, tensor: torch.Tensor) -> None:
        """``tensor.grad`` is replaced (``= None``, ``= g``, ``del``) or zeroed: the
        gradients in it that nothing read are discarded."""
        k = self.leaf_index(tensor)
        if k is None:
            return
        self._since_reset.pop(k, None)
        self._reset_since_call.add(k)
        for index in self._unread.pop(k, ()):
            if index < len(self.events):
                self.events[index].setdefault("discarded", []).append(k)

    def begin_zero_grad(self) -> None:
        self._zeroing += 1

    def end_zero_grad(self) -> None:
        """The leaves ``zero_grad(set_to_none=False)`` zeroed in place are reset too."""
        self._zeroing -= 1
        if self._zeroing:
            return
        zeroed, self._zeroed = self._zeroed, set()
        self._reset_since_call.update(zeroed)  # a gradient still None is reset as well
        self.internal = True
        try:
            with torch.no_grad():
                for k in sorted(zeroed):
                    grad = _BASE_GRAD.__get__(self.leaves[k])
                    if grad is None or not bool(grad.any()):
                        self.grad_reset(self.leaves[k])
        finally:
            self.internal = False

    # ----------------------------------------------------------- leaf uses
    def observe_call(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Count grad-mode uses of tracked leaves; apply a pending perturbation. Calls
        made inside a recorded backward call (autograd's own dispatch of the inputs it
        differentiates) are no uses: a replay that hands back a stored gradient instead
        of running ``autograd.grad`` must count the same uses as the run it replays."""
        if self.depth:
            return
        owner = getattr(func, "__self__", None)
        if type(owner).__name__ == "getset_descriptor" or type(owner) is _GradAttribute:
            # `.data` reads/writes bypass the version counter: treat them as a possible
            # mutation so the next use starts a new group (`w.data.normal_()` inits).
            if getattr(owner, "__name__", None) == "data" and args:
                k = self.leaf_index(args[0])
                if k is not None:
                    self.data_epoch[k] = self.data_epoch.get(k, 0) + 1
                    if len(args) == 1 and self._data_read_at_changed_line():
                        # a `.data` read at a line the change wrote or removed (the cut a
                        # fix removes, `x @ w.data`): a use finite differences follow,
                        # as they follow a `.detach()` there
                        self._count_use(k)
            return
        if self._watched:
            self._read_watched(args, kwargs)
        if (self.record_group_values or self.sync_groups) and not self.in_optimizer_step:
            if _reads_values(func, args, kwargs):
                self._values_at_groups(args, kwargs)
        if (
            not torch.is_grad_enabled()
            and not self.grad_off_by_checkpoint
            and not (self.grad_off_by_change and not self.in_optimizer_step)
            and not self._read_at_changed_line(func, args, kwargs)
        ):
            return
        if _computes(func, args, kwargs):
            self._regroup_updated_leaves()
        used = sorted(set(self._leaf_args(args, kwargs)))
        if (self.record_first_values or self.sync) and _reads_values(func, args, kwargs):
            for k in used:
                if k not in self.value_used:
                    self.value_used.add(k)
                    _first_use_values(self, k, self.leaves[k])
        for k in used:
            self._count_use(k)

    def out_of_place(self, func: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """In a replay that makes the in-place writes at the given lines out of place
        (``dealias``, lines of the script): an augmented assignment there (``x +=
        pos``, which rebinds ``x``) computes a new tensor instead of writing into the one
        other names still hold, and a call there with ``inplace=True`` runs with False.
        The repair an "inplace operation" error asks for, applied to the original."""
        frame: FrameType | None = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename != self.filename:
            if kwargs.get("inplace") is True and self.dealiased_modules:
                owner = frame.f_locals.get("self")
                if isinstance(owner, torch.nn.Module) and owner in self.dealiased_modules:
                    return func, dict(kwargs, inplace=False)  # a module made at such a line
            frame = frame.f_back
        if frame is None or frame.f_lineno not in self.dealias:
            return func, kwargs
        if kwargs.get("inplace") is True:
            return func, dict(kwargs, inplace=False)
        name = getattr(func, "__name__", "")
        plain = getattr(torch.Tensor, name[:-1], None) if name.endswith("_") else None
        if plain is not None and not name.startswith("_") and _augmented_assignment(frame):
            return plain, kwargs
        return func, kwargs

    def detach(self, result: Any, in_place: bool = False, source_fn: Any = None) -> Any:
        """A ``.detach()`` the program made: a probe keeps its value, a perturbed run
        whose perturbation is applied gets the probe's back (the detached value is a
        constant to autograd). One the change wrote is followed, as a grad-off read there
        is (a stray ``.detach()`` the fix removes is the cut finite differences must see,
        also inside a helper or torch's ``state_dict()`` that a changed line calls).
        ``in_place``: ``t.detach_()`` is given the probe's values back in ``t`` itself.
        ``source_fn``: the detached tensor's ``grad_fn``; a value an earlier backward call
        went through (recurrent state carried into the next window, truncated BPTT) is
        held even at a changed line: differentiating through it again is what no program
        without ``retain_graph`` can mean."""
        n = self._detach_calls
        self._detach_calls += 1
        if not isinstance(result, torch.Tensor) or self.in_optimizer_step:
            return result
        if self.record_steps:
            kept = sum(t.numel() for t in self.detached if t is not None)
            keep = kept + result.numel() <= DETACH_MAX_VALUES and not result.is_meta
            self.detached.append(result.clone() if keep else None)
            return result
        replay, p = self.replay_detached, self.perturbation
        if replay is None or p is None or p.step is None or n >= len(replay):
            return result
        if self.in_function:
            return result  # inside an autograd.Function's forward: its backward decides
        stored = replay[n]
        if stored is None or stored.shape != result.shape or stored.dtype != result.dtype:
            return result
        if self._called_at_changed_line() and not self._backpropagated(source_fn):
            return result
        if in_place:
            result.data.copy_(stored)
            return result
        return stored.clone()

    def _backpropagated(self, fn: Any) -> bool:
        """Whether autograd node ``fn`` is in the graph the latest backward call went
        through."""
        if fn is None or not self._backpropagated_roots:
            return False
        if self._backpropagated_ids is None:
            seen: set[int] = set()
            stack = list(self._backpropagated_roots)
            while stack and len(seen) < BACKPROPAGATED_NODES:
                node = stack.pop()
                if node is None or id(node) in seen:
                    continue
                seen.add(id(node))
                stack.extend(next_fn for next_fn, _ in getattr(node, "next_functions", ()))
            self._backpropagated_ids = seen
        return id(fn) in self._backpropagated_ids

    def _called_at_changed_line(self) -> bool:
        """Whether the running call is made at (or called from) a line the change wrote."""
        return self._called_from_changed_line(sys._getframe(2))

    def _data_read_at_changed_line(self) -> bool:
        """Whether a ``.data`` read (not a write) is made at a line the change wrote, in
        grad mode, outside an optimizer step (``p.data -= lr * g`` there is an update).
        A statement of the script's that writes through ``.data`` (``w.data[i] = v``,
        ``w.data.copy_(v)``, ``w.data += v``) is no read: the value is replaced."""
        if not self.changed_lines or self.in_optimizer_step or not torch.is_grad_enabled():
            return False
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename == self.filename and frame.f_lineno in self.changed_lines:
                text = linecache.getline(self.filename, frame.f_lineno)
                return not _DATA_WRITE.search(text)
            frame = frame.f_back
        return False

    def _called_from_changed_line(self, frame: FrameType | None) -> bool:
        while frame is not None:
            if frame.f_code.co_filename == self.filename and frame.f_lineno in self.changed_lines:
                return True
            frame = frame.f_back
        return False

    def reads_perturbed_off_grad(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> bool:
        """A grad-off call (a ``no_grad`` block: a TD target made with the network it
        trains) that reads the leaf a finite-difference run has perturbed. Autograd holds
        what it computes constant, so the perturbed run must too: it reads the value the
        leaf had before the perturbation. Not an optimizer step (its update is given back
        by ``replay_steps``), nor a read the change wrote (followed, see
        ``_read_at_changed_line``)."""
        p = self.perturbation
        if p is None or p.step is None or p.value is None or torch.is_grad_enabled():
            return False
        if self.in_optimizer_step or self.in_function or not _reads_values(func, args, kwargs):
            return False
        if p.leaf not in set(self._leaf_args(args, kwargs)):
            return False
        return not (
            self.grad_off_by_change
            or self.grad_off_by_checkpoint
            or self._read_at_changed_line(func, args, kwargs)
        )

    def grad_mode_set(self, enabled: bool) -> None:
        """Autograd turned on or off (``set_grad_enabled``, a ``no_grad`` or
        ``enable_grad`` block entered or left, by torch's grad-mode objects): off by a
        statement the change wrote or removed, or not. A block left gives back what held
        when it was entered (kept per grad-mode object)."""
        frame: FrameType | None = sys._getframe(2)  # torch's code that set the mode
        torch_file, owner, leaving = frame.f_code.co_filename if frame else "", None, False
        while frame is not None and frame.f_code.co_filename == torch_file:
            owner, leaving = frame.f_locals.get("self"), frame.f_code.co_name == "__exit__"
            frame = frame.f_back
        if leaving and id(owner) in self._grad_modes:
            self.grad_off_by_change, self.grad_off_by_checkpoint = self._grad_modes.pop(id(owner))
            return
        if owner is not None and len(self._grad_modes) < 1000:
            self._grad_modes.setdefault(
                id(owner), (self.grad_off_by_change, self.grad_off_by_checkpoint)
            )
        self.grad_off_by_change = (
            not enabled and bool(self.changed_lines) and self._called_from_changed_line(frame)
        )
        self.grad_off_by_checkpoint = (
            not enabled and frame is not None and frame.f_code.co_filename.endswith(_CHECKPOINT)
        )

    def unperturbed(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run ``func`` with the perturbed element back at its value, then perturb it
        again; through ``.data``, so the leaf's version counter does not move."""
        p = self.perturbation
        assert p is not None and p.value is not None
        leaf = self.leaves[p.leaf]
        index = _unravel(p.element, tuple(leaf.shape))
        internal, self.internal = self.internal, True
        try:
            data = leaf.data
            perturbed = data[index].clone()
            data[index] = p.value
            try:
                return func(*args, **kwargs)
            finally:
                data[index] = perturbed
        finally:
            self.internal = internal

    def _read_at_changed_line(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> bool:
        """A grad-off call that reads a leaf's values at (or called from) a line the change
        wrote or removed, outside an optimizer step."""
        if (
            not self.changed_lines
            or self.in_optimizer_step
            or not _reads_values(func, args, kwargs)
        ):
            return False
        if next(self._leaf_args(args, kwargs), None) is None:
            return False
        return self._called_at_changed_line()

    def _regroup_updated_leaves(self) -> None:
        """A leaf changed in place since its group began (an optimizer step under no_grad)
        starts a new group at the next grad-mode call, even when no call takes the leaf
        itself: a view made before the loop (``w_t = w.t()``) carries its new values into
        the graph. The call runs before any later change, so the perturbation lands on the
        value the next backward differentiates; a copy made before the change (a stale
        derived value) does not see it, and finite differences then disagree, as they must.
        """
        for k, token in list(self._group_token.items()):
            if self.leaves[k]._version != token[0]:
                self._count_use(k)

    def _values_at_groups(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """At a call that reads values (in any grad mode): each leaf written since its
        values were last taken (its version or ``.data`` epoch moved), and each leaf among
        the arguments read for the first time, starts its next group; its values there are
        recorded, or set from the run this one is synchronised to (see ``sync_groups``)."""
        window = self.event_count
        moved = [k for k, token in self._value_tokens.items() if self._value_token(k) != token]
        for k in dict.fromkeys([*moved, *self._leaf_args(args, kwargs)]):
            token = self._value_token(k)
            last = self._value_groups.get(k)
            if self._value_tokens.get(k) == token and last is not None and last[0] == window:
                continue
            written = self._value_tokens.get(k) != token
            self._value_tokens[k] = token
            group = (window, last[1] + 1 if last is not None and last[0] == window else 0)
            self._value_groups[k] = group
            _group_values(self, k, group, written, first=last is None)

    def _value_token(self, k: int) -> tuple[int, int]:
        return self.leaves[k]._version, self.data_epoch.get(k, 0)

    def _leaf_args(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[int]:
        for value in (*args, *kwargs.values()):
            items = value if isinstance(value, (list, tuple)) else (value,)
            for item in items:
                k = self.leaf_index(item)
                if k is not None:
                    yield k

    def _count_use(self, k: int) -> None:
        use = self.use_counts.get(k, 0) + 1
        self.use_counts[k] = use
        leaf = self.leaves[k]
        token = (leaf._version, self.data_epoch.get(k, 0))
        if self._group_token.get(k) != token:
            self._group_token[k] = token
            self._group_first_use[k] = use
        p = self.perturbation
        if p is not None and p.leaf == k and p.use == use and p.step is None:
            _apply_perturbation(leaf, p)
            if k in self._value_tokens:  # the perturbation is no write of the program's
                self._value_tokens[k] = self._value_token(k)


class _GradHook:
    """A tensor hook that keeps the (summed) gradient flowing into one tensor."""

    def __init__(self) -> None:
        self.grad: torch.Tensor | None = None
        self.handle: Any = None

    def __call__(self, grad: torch.Tensor) -> None:
        grad = grad.detach().clone()
        self.grad = grad if self.grad is None else self.grad + grad


def _leaf_sum(leaf: torch.Tensor) -> float | None:
    """The sum of a leaf's values (None where it cannot be taken: a meta or sparse one)."""
    try:
        total = float(leaf.detach().double().sum())
    except (RuntimeError, TypeError, ValueError):
        return None
    return total if math.isfinite(total) else None  # the trace is strict JSON


def _stale(grads: list[torch.Tensor | None]) -> list[int]:
    """The leaves whose ``.grad`` holds a nonzero gradient before a backward call: the
    call adds to it (what an optimizer step then reads is a sum over calls)."""
    found = []
    for k, grad in enumerate(grads):
        try:
            if grad is not None and bool(grad.count_nonzero()):
                found.append(k)
        except Exception:  # noqa: BLE001 - sparse or odd gradients: not judged
            continue
    return found


#: the longest error message kept from a run (the JSON evidence and reports hold it whole)
ONE_LINE_CHARS = 2000


def one_line(exc: BaseException) -> str:
    """The first line of the error's message; a huge one (a tensor printed in it) is cut
    at a word boundary, never inside a word (verdict lines shorten it further)."""
    from gradfix.shorten import shorten

    text = str(exc).strip().splitlines()
    return shorten(text[0], ONE_LINE_CHARS) if text else ""


def _maybe_encode(value: float | None) -> float | str | None:
    return None if value is None else encode_float(value)


def _grad_increment(after: torch.Tensor | None, before: torch.Tensor | None) -> Any:
    if after is None:
        return None
    if before is None or before.shape != after.shape:
        return encode_tensor(after)
    try:
        return encode_tensor(after.detach().to(torch.float64) - before.to(torch.float64))
    except Exception:  # noqa: BLE001 - e.g. sparse gradients: report the total instead
        return encode_tensor(after)


def objective_value(roots: list[Any], grad_outputs: list[Any]) -> float | None:
    """The scalar that backward differentiates: sum over roots of (root * grad_output)."""
    total = 0.0
    try:
        with torch.no_grad():
            for i, root in enumerate(roots):
                if not isinstance(root, torch.Tensor):
                    continue
                value = root.detach().to(torch.float64)
                weight = grad_outputs[i] if i < len(grad_outputs) else None
                if isinstance(weight, torch.Tensor):
                    value = value * weight.detach().to(torch.float64)
                total += float(value.sum())
    except Exception:  # noqa: BLE001 - complex roots, shape mismatches: no objective
        return None
    return total


def _rounding_unit(roots: list[Any]) -> float:
    """Machine epsilon of the least precise floating root (float32 when none is)."""
    eps = [
        torch.finfo(r.dtype).eps
        for r in roots
        if isinstance(r, torch.Tensor) and (r.is_floating_point() or r.is_complex())
    ]
    return max(eps) if eps else torch.finfo(torch.float32).eps


#: torch's reentrant checkpoint, whose forward runs with autograd off
_CHECKPOINT = os.path.join("torch", "utils", "checkpoint.py")
#: at most this many leaf values are recorded for a synchronised replay
SYNC_MAX_VALUES = 2_000_000
#: calls that read a tensor's metadata, not its values (``nn.init`` asks a weight its
#: fan-in before it fills it)
METADATA_CALLS = frozenset(
    {
        "dim",
        "size",
        "numel",
        "nelement",
        "ndimension",
        "stride",
        "storage_offset",
        "element_size",
        "is_floating_point",
        "is_complex",
        "__len__",
        "data_ptr",
        "type",
        "__get__",
        "__format__",
        "__repr__",
        "__hash__",
    }
)


@functools.lru_cache(maxsize=256)
def _instructions(code: CodeType) -> dict[int, Any]:
    import dis

    return {ins.offset: ins for ins in dis.get_instructions(code)}


def _augmented_assignment(frame: FrameType) -> bool:
    """Whether ``frame`` is executing an augmented assignment (``x += y``: Python rebinds
    ``x`` to what the in-place operator returns)."""
    ins = _instructions(frame.f_code).get(frame.f_lasti)
    if ins is None:
        return False
    return ins.opname.startswith("INPLACE_") or (
        ins.opname == "BINARY_OP" and str(ins.argrepr).endswith("=")
    )


def _reads_values(func: Any, args: Any = (), kwargs: Any = None) -> bool:
    """Whether a call reads a tensor's values: not a metadata query, not an ``nn.init``
    function (dispatched to a torch function mode whole: it writes the values). ``x.type()``
    asks for a name, ``x.type(torch.DoubleTensor)`` casts: it reads them."""
    if getattr(func, "__module__", "") == "torch.nn.init":
        return False
    name = getattr(func, "__name__", "")
    if name == "type" and (len(args) > 1 or kwargs):
        return True
    return name not in METADATA_CALLS


def _first_use_values(recorder: Recorder, k: int, leaf: torch.Tensor) -> None:
    """Record, or set from the synchronised run, leaf ``k``'s values at its first use.
    Through ``.data``: the leaf's version counter does not move."""
    with torch.no_grad():
        if recorder.record_first_values:
            recorded = sum(len(v) for v in recorder.first_values.values())
            flat = leaf.detach().reshape(-1)
            if recorded + leaf.numel() <= SYNC_MAX_VALUES and bool(flat.isfinite().all()):
                recorder.first_values[k] = [float(v) for v in flat.tolist()]  # strict JSON
        values = recorder.sync.get(k)
        if values is not None and len(values) == leaf.numel():
            source = torch.tensor(values, dtype=torch.float64).view(leaf.shape)
            leaf.data.copy_(source.to(leaf.dtype))


#: a synchronised value counts as different from the one it replaces beyond these
SYNC_DIVERGED_RTOL, SYNC_DIVERGED_ATOL = 1e-5, 1e-6


def _group_values(
    recorder: Recorder, k: int, group: tuple[int, int], written: bool, first: bool
) -> None:
    """Record, or set from the synchronised run, leaf ``k``'s values at the first read of a
    ``group`` (the backward calls made so far, and the writes since in that window):
    through ``.data``, so the version counter does not move. A run records a group only
    where the leaf was written (or first read); a replay takes the same group's values,
    or at a window's first read, the last values the other run had before that window
    (it wrote the leaf where this run did not: an optimizer step this run skipped). A set
    value that differs from the one the run had is noted in ``sync_diverged``."""
    leaf = recorder.leaves[k]
    if not leaf.is_floating_point():
        return
    key = f"{k}:{group[0]}:{group[1]}"
    with torch.no_grad():
        if recorder.record_group_values and (written or first):
            _record_group(recorder, key, leaf)
        if not recorder.sync_groups:
            return
        values = recorder.sync_groups.get(key)
        if values is None and group[1] == 0:
            values = _latest_before(recorder, k, group[0])
        if values is None or len(values) != leaf.numel():
            return
        source = torch.tensor(values, dtype=torch.float64).view(leaf.shape).to(leaf.dtype)
        current = leaf.detach()
        if len(recorder.sync_diverged) < 20 and not torch.allclose(
            current, source, rtol=SYNC_DIVERGED_RTOL, atol=SYNC_DIVERGED_ATOL, equal_nan=True
        ):
            recorder.sync_diverged.append(
                {
                    "leaf": k,
                    "before_call": group[0],
                    "write": group[1],
                    "first": first,
                    "written": written,  # by this run (else only by the other one)
                }
            )
        leaf.data.copy_(source)


def _record_group(recorder: Recorder, key: str, leaf: torch.Tensor) -> None:
    if recorder.group_values_truncated:
        return
    flat = leaf.detach().reshape(-1)
    if recorder._group_values_count + leaf.numel() > SYNC_MAX_VALUES:
        recorder.group_values_truncated = True
    elif bool(flat.isfinite().all()):
        recorder.group_values[key] = [float(v) for v in flat.tolist()]  # strict JSON
        recorder._group_values_count += leaf.numel()


def _latest_before(recorder: Recorder, k: int, window: int) -> list[float] | None:
    """The values of leaf ``k``'s last group the synchronised run recorded before backward
    call ``window`` (the groups indexed per leaf once)."""
    if recorder._sync_index is None:
        index: dict[int, list[tuple[int, int]]] = {}
        for key in recorder.sync_groups:
            leaf, n, j = (int(part) for part in key.split(":"))
            index.setdefault(leaf, []).append((n, j))
        recorder._sync_index = {leaf: sorted(groups) for leaf, groups in index.items()}
    earlier = [group for group in recorder._sync_index.get(k, ()) if group[0] < window]
    if not earlier:
        return None
    return recorder.sync_groups.get(f"{k}:{earlier[-1][0]}:{earlier[-1][1]}")


def _apply_perturbation(leaf: torch.Tensor, p: Perturbation) -> None:
    with torch.no_grad():
        index = _unravel(p.element, tuple(leaf.shape))
        element = leaf.detach()[index]
        value = float(element)
        h = FD_STEP.get(leaf.dtype, FD_DEFAULT_STEP) * max(1.0, abs(value))
        element.add_(p.multiple * h)
        p.value = value
        p.step = float(element) - value


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return tuple(reversed(index))


#: the calls that differentiate a graph already built: they read no leaf's values
_DIFFERENTIATES = frozenset({"backward", "grad"})


def _computes(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a grad-mode call computes with tensor values, so that a leaf changed in
    place since its last use is read anew from here on (a view of it among the arguments).
    Not a backward call (the graph it walks was built from the values each leaf had at its
    uses, even where the leaf changed since: the change "modified by an inplace operation"
    reports), nor a call without a tensor argument (the profiler's records around an
    optimizer step, ``set_grad_enabled``)."""
    if getattr(func, "__name__", "") in _DIFFERENTIATES:
        return False
    for value in (*args, *kwargs.values()):
        items = value if isinstance(value, (list, tuple)) else (value,)
        if any(isinstance(item, torch.Tensor) for item in items):
            return True
    return False


class UseTracker(TorchFunctionMode):
    """Sees every torch call while active; reports leaf uses to the active recorder.

    A *use* is a torch function called in grad mode with a tracked leaf among its
    arguments. Uses are grouped by the leaf's version counter (and `.data` accesses): the
    gradient at backward event m is the derivative with respect to the leaf's value at the
    first use of the group that was current when event m happened, so a finite-difference
    run perturbs the leaf right before that use. This also covers leaves initialised in
    place after creation (`nn.Linear` runs `reset_parameters` under no_grad) and training
    loops whose optimizer updates the leaf between events.
    """

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        recorder = _ACTIVE
        if _FLOAT64 and _widens(func, kwargs):
            args, kwargs = _widened(args), _widened(kwargs)
        if recorder is not None and recorder.dealias and not recorder.internal:
            func, kwargs = recorder.out_of_place(func, kwargs)
        if recorder is not None and not recorder.internal:
            recorder.observe_call(func, args, kwargs)
            if recorder.reads_perturbed_off_grad(func, args, kwargs):
                return recorder.unperturbed(func, args, kwargs)
            name = getattr(func, "__name__", "")
            if name in ("detach", "detach_") and not recorder.depth:
                source = args[0] if args and isinstance(args[0], torch.Tensor) else None
                source_fn = source.grad_fn if source is not None else None
                return recorder.detach(
                    func(*args, **kwargs), in_place=name == "detach_", source_fn=source_fn
                )
        return func(*args, **kwargs)


#: how many autograd nodes of the latest backward call's graph ``_backpropagated`` visits
BACKPROPAGATED_NODES = 200_000

#: calls that make, convert or write a tensor: the float64 run leaves their arguments be
_NOT_WIDENED = frozenset({"to", "type", "float", "half", "bfloat16", "copy_", "set_", "__set__"})


def _widens(func: Any, kwargs: dict[str, Any]) -> bool:
    """Whether the float64 run computes ``func`` with its float32 tensor arguments widened:
    an out-of-place computation (not in place, not into ``out=``, not a conversion). A
    float32 tensor the program made itself (``torch.FloatTensor(array)``) would otherwise
    narrow what it meets (``binary_cross_entropy_with_logits`` computes in its target's
    dtype), and the float64 run's finite differences would see float32's rounding."""
    name = getattr(func, "__name__", "")
    return not (name.endswith("_") or name in _NOT_WIDENED or "out" in kwargs)


def _widened(value: Any) -> Any:
    """``value`` with its float32 tensors (also inside a plain list, tuple or dict) in
    float64."""
    if isinstance(value, torch.Tensor):
        return _TO(value, torch.float64) if value.dtype == torch.float32 else value
    if type(value) in (list, tuple):
        return type(value)(_widened(v) for v in value)
    if type(value) is dict:
        return {key: _widened(v) for key, v in value.items()}
    return value


#: Random factories and in-place samplers: in a float64 run (:func:`float64_run`) they
#: draw in float32, as the program does, and their values are then widened exactly.
RANDOM_FACTORIES = frozenset({"randn", "rand", "randn_like", "rand_like", "normal"})
RANDOM_METHODS = (
    "uniform_", "normal_", "exponential_", "cauchy_", "log_normal_", "geometric_",
    "bernoulli_", "random_",
)  # fmt: skip
_FLOAT64 = False
#: ``Tensor.to`` as torch defines it: the float64 run narrows its own draws with it
_TO = torch.Tensor.to


@contextlib.contextmanager
def float64_run() -> Iterator[None]:
    """Run a float32 program in float64 with the same random values: the default dtype is
    float64 while it is active, and random factories and samplers draw in float32 and
    widen the result, so the program computes the same function with less rounding.
    Finite differences of such a run resolve differences float32's rounding hides."""
    global _FLOAT64
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    _FLOAT64 = True
    try:
        yield
    finally:
        _FLOAT64 = False
        torch.set_default_dtype(saved)


def _draw_narrow(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``fn`` (a random factory) drawn in float32 and widened to float64."""
    requires_grad = bool(kwargs.pop("requires_grad", False))
    narrow = [_narrow(a) for a in args]
    kwargs = {k: _narrow(v) for k, v in kwargs.items()}
    result = fn(*narrow, **dict(kwargs, dtype=torch.float32)).to(torch.float64)
    if requires_grad:
        _BASE_REQUIRES_GRAD.__set__(result, True)
    return result


def _is_float64(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype == torch.float64


def _narrow(value: Any) -> Any:
    return _TO(value.detach(), torch.float32) if _is_float64(value) else value


def _wrap_sampler(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def sampler(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if not (_FLOAT64 and self.dtype == torch.float64):
            return method(self, *args, **kwargs)
        drawn = _TO(self.detach(), torch.float32)
        method(drawn, *args, **kwargs)
        with torch.no_grad():
            self.copy_(drawn)
        return self

    return sampler


# ------------------------------------------------------------------ patches
def activate(recorder: Recorder | None) -> None:
    global _ACTIVE
    _ACTIVE = recorder


def _declared_by_the_program() -> bool:
    """Whether the leaf being registered was asked for by the program itself
    (``torch.randn(3, requires_grad=True)``, ``nn.Parameter(...)`` in its code) rather than
    made by torch (the weights of ``nn.Linear``): a leaf the program declared is meant to
    receive a gradient."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    return frame is not None and not frame.f_code.co_filename.startswith(_TORCH_DIR)


def _held_at_creation(origin: str, declared: bool) -> bool:
    """Whether finite differences hold a new leaf at the value it was made with: a
    parameter torch makes from another (``weight_norm``'s from the weight) is a constant
    to autograd and to what trains. A leaf the program makes itself from a computed value
    (``torch.tensor([losses], requires_grad=True)``, ``nn.Parameter(gru_out)`` in a
    ``forward``, ``x.detach().requires_grad_()``) cuts the graph there: the derivative of
    the program follows its value, and finite differences must see that cut."""
    return not declared


def _register(result: Any, origin: str) -> None:
    recorder = _ACTIVE
    if recorder is None or recorder.internal or not isinstance(result, torch.Tensor):
        return
    if _BASE_REQUIRES_GRAD.__get__(result) and result.is_leaf:
        recorder.add_leaf(result, origin)


def _wrap_factory(fn: Callable[..., Any], origin: str) -> Callable[..., Any]:
    random = origin.startswith("torch.") and origin[6:] in RANDOM_FACTORIES

    @functools.wraps(fn)
    def factory(*args: Any, **kwargs: Any) -> Any:
        if _FLOAT64 and random and kwargs.get("dtype") in (None, torch.float32):
            result = _draw_narrow(fn, args, dict(kwargs))
        elif _FLOAT64 and kwargs.get("dtype") is torch.float32:
            result = _made_narrow(fn, args, dict(kwargs))
        else:
            result = fn(*args, **kwargs)
        _register(result, origin)
        return result

    return factory


def _made_narrow(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A tensor the program asks for in float32 (``torch.tensor(data, dtype=torch.float32)``),
    made so and widened: the float64 run computes with the same values in double precision."""
    requires_grad = bool(kwargs.pop("requires_grad", False))
    result = fn(*args, **kwargs).to(torch.float64)
    if requires_grad:
        _BASE_REQUIRES_GRAD.__set__(result, True)
    return result


def _narrowing(value: Any) -> bool:
    """Whether ``value`` names float32 (``torch.float32``, ``"torch.FloatTensor"``)."""
    if value is torch.float32:
        return True
    return isinstance(value, str) and value in ("torch.FloatTensor", "float32", "torch.float32")


def _wrap_narrowing(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """``Tensor.float()``, ``.to(torch.float32)``, ``.type(torch.FloatTensor)`` in a float64
    run keep (or make) double precision: a program that converts its inputs to float32
    explicitly would otherwise mix float32 tensors into the widened computation (a dtype
    error, or float32 rounding again). Inert outside the float64 run."""

    @functools.wraps(method)
    def narrowing(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if not _FLOAT64 or not (self.is_floating_point() or name == "float"):
            return method(self, *args, **kwargs)
        if name == "float":
            return self if self.dtype == torch.float64 else method(self, *args, **kwargs).double()
        args = tuple(torch.float64 if _narrowing(a) else a for a in args)
        if _narrowing(kwargs.get("dtype")):
            kwargs["dtype"] = torch.float64
        if name == "type" and args and isinstance(args[0], type) and args[0] is torch.FloatTensor:
            args = (torch.float64, *args[1:])
        return method(self, *args, **kwargs)

    return narrowing


def _wrap_event(fn: Callable[..., Any], kind: str) -> Callable[..., Any]:
    signature = inspect.signature(fn)
    record_kind = "grad" if kind == "grad" else "backward"

    @functools.wraps(fn)
    def event(*args: Any, **kwargs: Any) -> Any:
        recorder = _ACTIVE
        if recorder is None or recorder.depth:
            return fn(*args, **kwargs)
        roots, grad_outputs, inputs = _event_arguments(signature, kind, args, kwargs)
        if record_kind == "grad":
            recorder.next_grad_is_constant = not _creates_graph(signature, args, kwargs)
        if recorder.skip_backward and record_kind == "backward":
            return recorder.run_event(record_kind, roots, grad_outputs, inputs, lambda: None)
        return recorder.run_event(
            record_kind, roots, grad_outputs, inputs, lambda: fn(*args, **kwargs)
        )

    return event


def _creates_graph(
    signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> bool:
    """Whether an ``autograd.grad`` call records the graph of its gradients."""
    try:
        bound = signature.bind(*args, **kwargs).arguments
    except TypeError:
        return True  # unknown: computed as always
    return bool(bound.get("create_graph"))


def _event_arguments(
    signature: inspect.Signature, kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[list[Any], list[Any], Any]:
    try:
        bound = signature.bind(*args, **kwargs).arguments
    except TypeError:
        return [], [], None
    if kind == "tensor.backward":
        return [bound.get("self")], [bound.get("gradient")], None
    root_name, weight_name = (
        ("outputs", "grad_outputs") if kind == "grad" else ("tensors", "grad_tensors")
    )
    weights = bound.get(weight_name)
    if weights is None:
        weights = bound.get("grad_variables")  # the deprecated spelling
    roots = _as_list(bound.get(root_name))
    weights = _as_list(weights)
    return roots, weights, bound.get("inputs")


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, torch.Tensor):
        return [value]
    try:
        return list(value)
    except TypeError:
        return [value]


def install() -> None:
    """Patch torch (idempotent). The patches are inert while no recorder is active."""
    global _INSTALLED
    if _INSTALLED:
        return
    _INSTALLED = True
    for name in sorted(FACTORY_FUNCTIONS):
        if hasattr(torch, name):
            setattr(torch, name, _wrap_factory(getattr(torch, name), f"torch.{name}"))
    for name in sorted(TENSOR_FACTORY_METHODS):
        setattr(torch.Tensor, name, _wrap_factory(getattr(torch.Tensor, name), f"Tensor.{name}"))
    _patch_leaf_marking()
    _patch_backward()
    _patch_gradient_uses()
    _patch_optimizer_steps()
    _patch_custom_gradients()
    _patch_module_construction()
    _patch_grad_mode()
    for name in RANDOM_METHODS:
        setattr(torch.Tensor, name, _wrap_sampler(getattr(torch.Tensor, name)))
    for name in ("float", "to", "type"):
        setattr(torch.Tensor, name, _wrap_narrowing(name, getattr(torch.Tensor, name)))


def _patch_grad_mode() -> None:
    """Every change of autograd's mode goes through ``torch._C._set_grad_enabled``
    (``set_grad_enabled``, ``no_grad`` and ``enable_grad`` blocks and decorators): the
    recorder learns whether the statement that turned it off is one the change wrote."""
    setter = torch._C._set_grad_enabled

    @functools.wraps(setter)
    def set_grad_enabled(mode: bool) -> None:
        recorder = _ACTIVE
        if recorder is None or recorder.internal or recorder.setting_grad_mode:
            setter(mode)  # the recorder's own, or the call torch's function mode passes on
            return
        recorder.setting_grad_mode = True
        try:
            setter(mode)
        finally:
            recorder.setting_grad_mode = False
        recorder.grad_mode_set(bool(mode))

    torch._C._set_grad_enabled = set_grad_enabled  # type: ignore[assignment]


def _patch_module_construction() -> None:
    """In a replay that makes the in-place writes at some lines out of place, a module
    made at one of them (``nn.LeakyReLU(0.2, inplace=True)``) is remembered: its calls
    with ``inplace=True`` run out of place (see ``Recorder.out_of_place``)."""
    module_init = torch.nn.Module.__init__

    @functools.wraps(module_init)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        module_init(self, *args, **kwargs)
        recorder = _ACTIVE
        if recorder is None or not recorder.dealias or recorder.internal:
            return
        if recorder.script_line() in recorder.dealias:
            recorder.dealiased_modules.add(self)

    torch.nn.Module.__init__ = init  # type: ignore[method-assign]
    module_setattr = torch.nn.Module.__setattr__

    @functools.wraps(module_setattr)
    def setattr_(self: Any, name: str, value: Any) -> None:
        module_setattr(self, name, value)
        if name == "requires_grad" and value is False and _ACTIVE is not None:
            _module_frozen(self)

    torch.nn.Module.__setattr__ = setattr_  # type: ignore[method-assign]
    tensor_setattr = torch.Tensor.__setattr__

    def setattr_tensor(self: Any, name: str, value: Any) -> None:
        tensor_setattr(self, name, value)
        if value is False and _ACTIVE is not None and _FREEZE_TYPO.match(name):
            _tensor_freeze_asked(self, name)

    torch.Tensor.__setattr__ = setattr_tensor  # type: ignore[method-assign,assignment]


#: a statement that writes a tensor's values through ``.data``: an assignment to it or to
#: an index of it, an augmented assignment, or an in-place method called on it
_DATA_WRITE = re.compile(r"\.data\s*(\[[^\]]*\])?\s*([-+*/%@&|^]|//|\*\*)?=(?!=)|\.data\.\w+_\(")

#: an attribute name that asks for a freeze but is not the flag (``param.require_grad``,
#: ``param.requires_grad_ = False``): a plain Python attribute, which freezes nothing
_FREEZE_TYPO = re.compile(r"(?i)(?!requires_grad$)(?=.*req)(?=.*grad)\w+$")


def _tensor_freeze_asked(tensor: torch.Tensor, name: str) -> None:
    """The program sets ``name = False`` on a leaf, a misspelt ``requires_grad``: the
    statement asks to freeze it (recorded with the modules' attribute freezes)."""
    recorder = _listening()
    if recorder is None or len(recorder.module_freezes) >= 50:
        return
    k = recorder.leaf_index(tensor)
    statement = _program_statement()
    if k is None or statement is None:
        return
    code, line = statement
    recorder.module_freezes.append({"leaf": k, "code": code, "line": line, "attribute": name})


def _module_frozen(module: torch.nn.Module) -> None:
    """The program sets ``requires_grad = False`` as an attribute of a module (no
    tensor's flag: its parameters still train): the statement asks to freeze them, which
    a fix may then do another way (leaving them out of the optimizer)."""
    recorder = _listening()
    if recorder is None or len(recorder.module_freezes) >= 50:
        return
    statement = _program_statement()
    if statement is None:
        return
    code, line = statement
    for parameter in module.parameters():
        k = recorder.leaf_index(parameter)
        if k is not None and len(recorder.module_freezes) < 50:
            recorder.module_freezes.append({"leaf": k, "code": code, "line": line})


def _patch_optimizer_steps() -> None:
    """Every ``torch.optim`` optimizer's step restores the held leaves (inert otherwise)."""
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    register_optimizer_step_pre_hook(_save_held)
    register_optimizer_step_post_hook(_restore_held)


def _save_held(optimizer: Any, args: Any, kwargs: Any) -> None:
    recorder = _ACTIVE
    if recorder is not None and not recorder.in_optimizer_step:
        _note_restep(recorder, optimizer)
        _note_optimized(recorder, optimizer)
    if recorder is not None:
        recorder.in_optimizer_step += 1
        if recorder.in_optimizer_step == 1 and sys.gettrace() is None:
            sys.settrace(_StepLines(recorder))
    if recorder is None or not (recorder.hold or recorder.hold_frozen):
        return
    recorder._held_values = [
        (leaf, leaf.detach().clone())
        for k, leaf in enumerate(recorder.leaves)
        if k in recorder.hold or (k in recorder.hold_frozen and not leaf.requires_grad)
    ]


def _note_optimized(recorder: Recorder, optimizer: Any) -> None:
    for group in optimizer.param_groups:
        for p in group["params"]:
            k = recorder.leaf_index(p)
            if k is not None:
                recorder.optimized.add(k)


def _note_restep(recorder: Recorder, optimizer: Any) -> None:
    """An optimizer stepping again on gradients no backward call or reset touched since
    its last step (the same ``.grad`` tensors at the same versions), some of them there:
    it steps twice on the same gradients (a second ``step`` of the generator's optimizer
    where the discriminator's was meant)."""
    grads = [p.grad for group in optimizer.param_groups for p in group["params"]]
    # the tensors themselves, not their ids: a gradient freed by ``zero_grad()`` may leave
    # its id to the next one
    seen = [(g, None if g is None else g._version) for g in grads]
    last = recorder._last_step_grads.get(id(optimizer))
    recorder._last_step_grads[id(optimizer)] = seen
    same = (
        last is not None
        and len(last) == len(seen)
        and all(a is b and va == vb for (a, va), (b, vb) in zip(last, seen))
    )
    if not same or all(g is None for g in grads) or len(recorder.resteps) >= 20:
        return
    statement = _program_statement()
    if statement is not None:
        code, line = statement
        recorder.resteps.append({"code": code, "line": line, "after_call": recorder.event_count})


def _restore_held(optimizer: Any, args: Any, kwargs: Any) -> None:
    recorder = _ACTIVE
    if recorder is None:
        return
    recorder.in_optimizer_step = max(0, recorder.in_optimizer_step - 1)
    if not recorder.in_optimizer_step and isinstance(sys.gettrace(), _StepLines):
        sys.settrace(None)
    _hold_step(recorder, optimizer)
    if not recorder._held_values:
        return
    with torch.no_grad():
        for leaf, value in recorder._held_values:
            leaf.detach().copy_(value)
    recorder._held_values = []
    recorder.held_steps += 1


#: at most this many lines of the script are noted as run inside optimizer steps
STEP_LINES_MAX = 2000


class _StepLines:
    """A trace function while an optimizer step runs: the lines of the script it runs
    (a custom optimizer's ``step`` and the script's helpers it calls) go to the recorder's
    ``step_lines``: a change there rewrites the update, which no gradient shows."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename != self.recorder.filename:
            return None  # torch's own step: no line events
        return self._line

    def _line(self, frame: FrameType, event: str, arg: Any) -> Any:
        lines = self.recorder.step_lines
        if event == "line" and self.recorder.in_optimizer_step and len(lines) < STEP_LINES_MAX:
            lines.add(frame.f_lineno)
        return self._line


def _statement_text(line: str) -> str:
    """A source line without its indentation and comment (``# bench: bug``, a note the
    change added): the same statement in both versions reads the same."""
    import io
    import tokenize

    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline))
    except (tokenize.TokenError, SyntaxError):
        return line.strip()
    comment = next((t for t in tokens if t.type == tokenize.COMMENT), None)
    text = line.strip()
    return text[: comment.start[1]].rstrip() if comment is not None else text


#: at most this many values of the leaves optimizer steps change are kept by a probe run
STEP_MAX_VALUES = 20_000_000
#: the values a probe keeps of the program's ``.detach()`` results (see ``Recorder.detach``)
DETACH_MAX_VALUES = 5_000_000


def _hold_step(recorder: Recorder, optimizer: Any) -> None:
    """After an optimizer step: record the values it left its leaves at (a probe run), or
    set them back to the probe's (a perturbed run; the perturbed leaf keeps its own). None
    of its own torch calls is a use of a leaf: uses are numbered alike in every run."""
    internal, recorder.internal = recorder.internal, True
    try:
        _hold_step_values(recorder, optimizer)
    finally:
        recorder.internal = internal


def _hold_step_values(recorder: Recorder, optimizer: Any) -> None:
    n = recorder.optimizer_steps
    recorder.optimizer_steps += 1
    if getattr(optimizer, "defaults", {}).get("differentiable"):
        return  # a step autograd differentiates through: part of the function
    if recorder.record_steps:
        kept = sum(v.numel() for step in recorder.step_values if step for v in step.values())
        stepped = {
            k: p
            for group in optimizer.param_groups
            for p in group["params"]
            if (k := recorder.leaf_index(p)) is not None
        }
        if kept + sum(p.numel() for p in stepped.values()) > STEP_MAX_VALUES:
            recorder.step_values.append(None)
            return
        with torch.no_grad():
            recorder.step_values.append({k: p.detach().clone() for k, p in stepped.items()})
        return
    replay = recorder.replay_steps
    if replay is None or n >= len(replay) or replay[n] is None:
        return
    skip = recorder.perturbation.leaf if recorder.perturbation is not None else None
    with torch.no_grad():
        for k, value in (replay[n] or {}).items():
            if k != skip and k < len(recorder.leaves):
                recorder.leaves[k].detach().copy_(value)


def _program_statement() -> tuple[str, int] | None:
    """The statement of the program's own code (its innermost frame outside torch and
    the libraries) that is running: its text and line."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(("<", *_LIBRARIES)):
        frame = frame.f_back
    if frame is None:
        return None
    code = _statement_text(linecache.getline(frame.f_code.co_filename, frame.f_lineno))
    return code, frame.f_lineno


def _frozen(tensor: torch.Tensor, made: bool = False) -> None:
    """The program sets ``requires_grad`` of a tensor to False (``made``: makes it so,
    ``nn.Parameter(x, requires_grad=False)``): the statement and the leaf, once per pair."""
    recorder = _listening()
    if recorder is None or len(recorder.freezes) >= 50:
        return
    statement = _program_statement()
    if statement is None:
        return
    code, line = statement
    entry = {"leaf": recorder.leaf_index(tensor), "code": code, "line": line}
    if entry not in recorder.freezes:
        recorder.freezes.append(entry)
    if made and len(recorder._made_frozen) < 50:
        recorder._made_frozen[id(tensor)] = (tensor, code)


def _unfrozen(tensor: torch.Tensor) -> None:
    """The program sets ``requires_grad`` of a tensor to True: which statement, counted
    over the tensors it unfreezes (see ``Recorder.unfreezes``)."""
    recorder = _listening()
    if recorder is None or len(recorder.unfreezes) >= 50:
        return
    statement = _program_statement()
    if statement is not None:
        recorder.unfreezes.setdefault(statement[0], set()).add(id(tensor))


def _patch_leaf_marking() -> None:
    parameter_new = torch.nn.Parameter.__new__

    def new_parameter(cls: type, data: Any = None, requires_grad: bool = True) -> Any:
        parameter: Any = parameter_new(cls, data, requires_grad)
        _register(parameter, "nn.Parameter")
        if not requires_grad:
            _frozen(parameter, made=True)
        return parameter

    torch.nn.Parameter.__new__ = staticmethod(new_parameter)  # type: ignore[assignment]

    requires_grad_ = torch.Tensor.requires_grad_

    def mark_requires_grad(self: torch.Tensor, requires_grad: bool = True) -> torch.Tensor:
        result = requires_grad_(self, requires_grad)
        if requires_grad:
            _unfrozen(self)
            _register(self, "requires_grad_()")
        else:
            _frozen(self)
        return result

    torch.Tensor.requires_grad_ = mark_requires_grad  # type: ignore[assignment,method-assign]

    detach = torch.Tensor.detach

    @functools.wraps(detach)  # named ``detach``, as the use tracker knows it
    def detach_noting_cuts(self: torch.Tensor) -> torch.Tensor:
        result = detach(self)
        recorder = _ACTIVE
        if recorder is not None and not recorder.internal and _BASE_REQUIRES_GRAD.__get__(self):
            # a graph value cut off: a leaf made of it later is a cut, not an input
            recorder.cuts[id(result)] = weakref.ref(result)
        return result

    torch.Tensor.detach = detach_noting_cuts  # type: ignore[assignment,method-assign]

    def get_requires_grad(self: torch.Tensor) -> bool:
        return bool(_BASE_REQUIRES_GRAD.__get__(self))

    def set_requires_grad(self: torch.Tensor, value: bool) -> None:
        _BASE_REQUIRES_GRAD.__set__(self, value)
        if value:
            _unfrozen(self)
            _register(self, "requires_grad = True")
        else:
            _frozen(self)

    torch.Tensor.requires_grad = property(  # type: ignore[assignment,method-assign]
        get_requires_grad, set_requires_grad, doc=_BASE_REQUIRES_GRAD.__doc__
    )


def _patch_custom_gradients() -> None:
    """See the program define its own gradients (a surrogate, a straight-through
    estimator, a relevance rule): an ``autograd.Function`` subclass of its own applied, or
    a backward hook the script registers itself. Its gradients are then no derivative of
    its forward, and finite differences no reference for them."""
    function_apply = torch.autograd.Function.apply.__func__  # type: ignore[attr-defined]

    def apply(cls: type, *args: Any, **kwargs: Any) -> Any:
        recorder = _ACTIVE
        if recorder is not None and not cls.__module__.startswith("torch"):
            recorder.custom_gradients.add(f"{cls.__name__}.apply")
            if not recorder.internal:
                # its forward runs with autograd off: the call is the leaves' use
                recorder.observe_call(apply, args, kwargs)
        if recorder is None:
            return function_apply(cls, *args, **kwargs)
        # its forward's grad-off reads are differentiated all the same (by its backward,
        # or a reentrant checkpoint's recomputation): a perturbation must reach them
        recorder.in_function += 1
        try:
            return function_apply(cls, *args, **kwargs)
        finally:
            recorder.in_function -= 1

    torch.autograd.Function.apply = classmethod(apply)  # type: ignore[assignment,method-assign]

    def watch(owner: type, name: str) -> None:
        register = getattr(owner, name, None)
        if register is None:
            return

        @functools.wraps(register)
        def registered(self: Any, *args: Any, **kwargs: Any) -> Any:
            recorder = _ACTIVE
            caller = sys._getframe(1).f_code.co_filename
            if recorder is not None and not recorder.internal and caller == recorder.filename:
                recorder.custom_gradients.add(f"{type(self).__name__}.{name}")
            return register(self, *args, **kwargs)

        setattr(owner, name, registered)

    for name in ("register_hook", "register_post_accumulate_grad_hook"):
        watch(torch.Tensor, name)
    for name in (
        "register_full_backward_hook",
        "register_backward_hook",
        "register_full_backward_pre_hook",
    ):
        watch(torch.nn.Module, name)


def _patch_backward() -> None:
    torch.Tensor.backward = _wrap_event(  # type: ignore[method-assign]
        torch.Tensor.backward, "tensor.backward"
    )
    torch.autograd.backward = _wrap_event(torch.autograd.backward, "backward")
    torch.autograd.grad = _wrap_event(torch.autograd.grad, "grad")


def _patch_gradient_uses() -> None:
    """See the program read and reset ``.grad`` (the recorder's discarded gradients)."""
    torch.Tensor.grad = _GradAttribute()  # type: ignore[assignment,method-assign]
    for owner in (torch.optim.Optimizer, torch.nn.Module):
        owner.zero_grad = _wrap_zero_grad(owner.zero_grad)  # type: ignore[method-assign]


class _GradAttribute:
    """``Tensor.grad`` as torch's getset descriptor, telling the active recorder of each
    read and reset. Named ``grad`` like it: a torch function mode sees an access as a call
    of this object's ``__get__`` (torch looks the attribute up on ``torch.Tensor``), and
    the tracer and :class:`UseTracker` tell attribute reads from ops by that."""

    __name__ = "grad"
    __doc__ = _BASE_GRAD.__doc__

    def __get__(self, tensor: torch.Tensor | None, owner: type | None = None) -> Any:
        if tensor is None:
            return self
        active = _listening()
        if active is not None:
            active.grad_read(tensor)
        return _BASE_GRAD.__get__(tensor)

    def __set__(self, tensor: torch.Tensor, value: Any) -> None:
        _BASE_GRAD.__set__(tensor, value)
        active = _listening()
        if active is not None:
            active.grad_reset(tensor)

    def __delete__(self, tensor: torch.Tensor) -> None:
        _BASE_GRAD.__delete__(tensor)
        active = _listening()
        if active is not None:
            active.grad_reset(tensor)


def _listening() -> Recorder | None:
    """The active recorder, unless it is doing its own work."""
    active = _ACTIVE
    return None if active is None or active.internal else active


def _wrap_zero_grad(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def zero_grad(self: Any, *args: Any, **kwargs: Any) -> Any:
        active = _ACTIVE
        if active is None or active.internal:
            return fn(self, *args, **kwargs)
        active.begin_zero_grad()
        try:
            return fn(self, *args, **kwargs)
        finally:
            active.end_zero_grad()

    return zero_grad
