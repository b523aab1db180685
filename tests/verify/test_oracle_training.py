"""A fix whose purpose is to change what trains (GF107, GF109: a tensor registered as a
parameter): the oracle replays it with the leaves it makes train held across optimizer
steps, and that replay must equal BEFORE at every backward call. GF405's fix clears the
gradients each iteration: from the first call where BEFORE adds to a stale gradient, the
fix is compared against its own finite differences."""

from __future__ import annotations

from gradfix.registry import fix_intent
from gradfix.verify import verify_sources
from gradfix.verify.intent import FixIntent
from gradfix.verify.oracle import newly_trained

TIMEOUT = 30.0

UNREGISTERED = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.rand(2, 2)
        self.w.requires_grad = True
        self.fc = nn.Linear(2, 2)

    def forward(self, x):
        return self.fc(x @ self.w)


torch.manual_seed(0)
net = Net()
optimizer = torch.optim.Adam(net.parameters(), lr=0.1)
x = torch.randn(4, 2)
for _ in range(3):
    optimizer.zero_grad()
    net(x).sum().backward()
    optimizer.step()
"""
REGISTERED = UNREGISTERED.replace(
    "        self.w = torch.rand(2, 2)\n        self.w.requires_grad = True\n",
    "        self.w = nn.Parameter(torch.rand(2, 2))\n",
)


def test_a_fix_that_makes_a_leaf_train_is_proven_by_a_replay_that_holds_it() -> None:
    verdict = verify_sources(UNREGISTERED, REGISTERED, timeout=TIMEOUT, rules=["GF109"])
    assert verdict.status == "verified", verdict.reason
    assert verdict.reason.startswith("leaves now trained: #0 'net.w' (line 8)"), verdict.reason
    assert "across the optimizer's 3 step(s)" in verdict.reason
    assert verdict.evidence["now_trained"] == [0]
    assert verdict.evidence["events_compared"] == 3


def test_only_a_rule_that_declares_it_gets_the_replay() -> None:
    verdict = verify_sources(UNREGISTERED, REGISTERED, timeout=TIMEOUT, rules=["GF104"])
    assert verdict.status == "rejected", verdict.reason
    assert "forward changed" in verdict.reason
    assert verdict.evidence["now_trained"] == []


def test_a_fix_that_also_changes_anything_else_is_still_rejected() -> None:
    scaled = REGISTERED.replace("return self.fc(x @ self.w)", "return self.fc(x @ self.w) * 2")
    verdict = verify_sources(UNREGISTERED, scaled, timeout=TIMEOUT, rules=["GF109"])
    assert verdict.status == "rejected", verdict.reason
    assert verdict.reason.startswith("with the leaves it makes train (#0 'net.w' (line 8)) held")
    faster = REGISTERED.replace("lr=0.1", "lr=0.2")
    verdict = verify_sources(UNREGISTERED, faster, timeout=TIMEOUT, rules=["GF109"])
    assert verdict.status == "rejected", verdict.reason
    assert "forward changed: the result of backward call #2" in verdict.reason


PLAIN_WEIGHT = UNREGISTERED.replace(
    "        self.w = torch.rand(2, 2)\n        self.w.requires_grad = True\n",
    "        self.w = torch.rand(2, 2)\n",
)


def test_a_plain_tensor_made_a_parameter_is_proven_with_its_new_leaf_held() -> None:
    # BEFORE has no leaf for ``self.w`` at all (GF109's random weights): the replay holds
    # the new leaf, and every other leaf must keep BEFORE's gradients
    verdict = verify_sources(PLAIN_WEIGHT, REGISTERED, timeout=TIMEOUT, rules=["GF109"])
    assert verdict.status == "verified", verdict.reason
    assert verdict.reason.startswith("leaves now trained: #0 'net.w' (line 8)"), verdict.reason
    assert "leaves compared: #0 'net.fc.weight'" in verdict.reason
    assert any("before keeps plain" in note for note in verdict.evidence["notes"])
    scaled = REGISTERED.replace("return self.fc(x @ self.w)", "return self.fc(x @ self.w) * 2")
    verdict = verify_sources(PLAIN_WEIGHT, scaled, timeout=TIMEOUT, rules=["GF109"])
    assert verdict.status == "rejected", verdict.reason
    verdict = verify_sources(PLAIN_WEIGHT, REGISTERED, timeout=TIMEOUT, rules=["GF104"])
    assert verdict.status == "rejected", verdict.reason


def _trace(versions: list[list[int]]) -> dict:
    return {
        "outcome": {"status": "ok"},
        "leaves": [{"index": k} for k in range(len(versions[0]))],
        "events": [{"index": i, "versions": v} for i, v in enumerate(versions)],
        "event_count": len(versions),
    }


def test_newly_trained_are_the_leaves_only_after_steps_between_calls() -> None:
    before = _trace([[1, 5], [1, 6], [1, 7]])
    after = _trace([[1, 5], [2, 6], [3, 7]])
    assert newly_trained(before, after) == [0]
    assert newly_trained(after, after) == []
    # the leaves or calls do not line up: no replay (the comparison rejects it)
    assert newly_trained(before, _trace([[1, 5], [2, 6]])) == []
    # traces of an older runner carry no versions
    assert newly_trained({**before, "events": [{"index": 0}]}, after) == []


def test_the_rules_whose_fix_changes_what_trains_say_so() -> None:
    from gradfix.codemods import ALL_RULES

    changing = {rule.code for rule in ALL_RULES if rule.fix_changes_training}
    assert changing == {"GF107", "GF109", "GF405"}
    assert fix_intent(["gf109"]).changes_training
    assert not fix_intent(["GF104", "GF999"]).changes_training


ACCUMULATING = """\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(3, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
data = [(torch.randn(4, 3), torch.randn(4, 2)) for _ in range(4)]
for x, y in data:
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
"""
CLEARED = ACCUMULATING.replace(
    "    loss.backward()\n", "    optimizer.zero_grad()\n    loss.backward()\n"
)


def test_clearing_stale_gradients_is_proven_from_the_first_stale_step() -> None:
    verdict = verify_sources(ACCUMULATING, CLEARED, timeout=TIMEOUT, rules=["GF405"])
    assert verdict.status == "verified", verdict.reason
    assert "before adds each gradient to stale ones from backward call #2 on" in verdict.reason
    assert "parts from the fix's at #3: 2 call(s) compared against the fix's own" in (
        verdict.reason
    )
    # without the rule's declaration before's trajectory stays the reference
    verdict = verify_sources(ACCUMULATING, CLEARED, timeout=TIMEOUT)
    assert verdict.status == "rejected", verdict.reason


def test_clearing_the_gradients_before_the_step_is_rejected() -> None:
    lost = ACCUMULATING.replace(
        "    optimizer.step()\n", "    optimizer.zero_grad()\n    optimizer.step()\n"
    )
    verdict = verify_sources(ACCUMULATING, lost, timeout=TIMEOUT, rules=["GF405"])
    assert verdict.status == "rejected", verdict.reason


def test_a_fix_that_still_accumulates_later_is_rejected() -> None:
    from gradfix.verify import compare_traces

    def call(index: int, accumulated: list[int], root: float) -> dict:
        value = {"shape": [], "dtype": "float32", "numel": 1, "truncated": False}
        return {
            "index": index,
            "kind": "backward",
            "line": 9,
            "roots": [dict(value, values=[root])],
            "objective": root,
            "error": None,
            "grads": {"0": dict(value, values=[1.0])},
            "accumulated": accumulated,
            "versions": [index],
        }

    def trace(*events: dict) -> dict:
        return {
            "outcome": {"status": "ok"},
            "leaves": [{"index": 0, "shape": [], "dtype": "float32", "line": 3}],
            "events": list(events),
            "event_count": len(events),
        }

    before = trace(call(0, [], 1.0), call(1, [0], 2.0))
    after = trace(call(0, [], 1.0), call(1, [], 2.0), call(2, [0], 3.0))
    verdict = compare_traces(
        before, dict(after, event_count=2, events=after["events"][:2]), intent=fix_intent(["GF405"])
    )
    assert verdict.status == "verified", verdict.reason
    before = trace(call(0, [], 1.0), call(1, [0], 2.0), call(2, [0], 3.0))
    verdict = compare_traces(before, after, intent=fix_intent(["GF405"]))
    assert verdict.status == "rejected", verdict.reason
    assert "backward call #3 at line 9 still adds to a stale gradient of #0 (line 3)" in (
        verdict.reason
    )


def test_a_leaf_no_optimizer_clears_may_accumulate_in_both() -> None:
    from gradfix.verify import compare_traces

    value = {"shape": [], "dtype": "float32", "numel": 1, "truncated": False}

    def call(index: int, accumulated: list[int]) -> dict:
        return {
            "index": index,
            "kind": "backward",
            "line": 9,
            "roots": [dict(value, values=[float(index)])],
            "objective": float(index),
            "error": None,
            "grads": {"0": dict(value, values=[1.0]), "1": dict(value, values=[1.0])},
            "accumulated": accumulated,
            "versions": [index, 0],
        }

    def trace(*events: dict) -> dict:
        leaf = {"shape": [], "dtype": "float32", "line": 3}
        return {
            "outcome": {"status": "ok"},
            "leaves": [dict(leaf, index=0), dict(leaf, index=1)],
            "events": list(events),
            "event_count": len(events),
        }

    before = trace(call(0, []), call(1, [0, 1]))
    after = trace(call(0, []), call(1, [1]))  # leaf 1, an input, is never cleared
    verdict = compare_traces(before, after, intent=fix_intent(["GF405"]))
    assert verdict.status == "verified", verdict.reason
    assert "adds each gradient to stale ones" not in verdict.reason  # no later call parted
    assert "adds to the gradient left by earlier calls of #0 (line 3)" in " ".join(
        verdict.evidence["notes"]
    )


PLAIN_BLOCKS = """import torch
import torch.nn as nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.blocks = [nn.Linear(8, 8) for _ in range(2)]
        self.out = nn.Linear(8, 1)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            h = torch.relu(block(h))
        return self.out(h)


x = torch.randn(16, 4)  # drawn before the model: its init draws no other data
net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(3):
    opt.zero_grad()
    loss = net(x).pow(2).mean()
    loss.backward()
    opt.step()
"""


def test_registering_modules_that_an_init_loop_then_draws_for_is_judged_in_sync() -> None:
    """GF107's ModuleList makes `self.modules()` reach the blocks, so the init loop draws
    other values and the forward parts from the original's at once: the replay sets each
    leaf, at its first use, to the original's value there (and holds the blocks it now
    trains), and then keeps every forward result and gradient."""
    registered = PLAIN_BLOCKS.replace(
        "self.blocks = [nn.Linear(8, 8) for _ in range(2)]",
        "self.blocks = nn.ModuleList([nn.Linear(8, 8) for _ in range(2)])",
    )
    intent = fix_intent(["GF107"])
    verdict = verify_sources(PLAIN_BLOCKS, registered, timeout=TIMEOUT, intent=intent)
    assert verdict.status == "verified", verdict.reason
    assert "synchronised to before's" in verdict.reason
    # a change of the forward itself is still one
    doubled = registered.replace("return self.out(h)", "return 2 * self.out(h)")
    verdict = verify_sources(PLAIN_BLOCKS, doubled, timeout=TIMEOUT, intent=intent)
    assert verdict.status == "rejected", verdict.reason


# A learned initial state kept as a tensor that requires grad, not a parameter: the
# optimizer built from ``model.parameters()`` never holds it.
PLAIN_STATE = """\
import torch
import torch.nn as nn


class Init(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.val = torch.zeros((1, size), requires_grad=True)

    def forward(self, x):
        return self.val.repeat(x.shape[0], 1)


torch.manual_seed(0)
init, cell = Init(4), nn.GRUCell(3, 4)
model = nn.ModuleList([init, cell])
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
x = torch.randn(6, 3)
for step in range(3):
    opt.zero_grad()
    h = cell(x, init(x))
    h.pow(2).mean().backward()
    opt.step()
"""


def test_a_tensor_wrapped_as_a_parameter_over_its_storage_is_compared_as_that_tensor() -> None:
    """``nn.Parameter(torch.zeros(..., requires_grad=True))``: the tensor before uses is
    now the parameter's storage, and the parameter takes the gradient it took."""
    fixed = PLAIN_STATE.replace(
        "self.val = torch.zeros((1, size), requires_grad=True)",
        "self.val = nn.Parameter(torch.zeros((1, size), requires_grad=True))",
    )
    verdict = verify_sources(PLAIN_STATE, fixed, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert "leaves now trained" in verdict.reason


# Weights made to require grad and then cast (`.type(dtype)`: a copy, no leaf).
CAST_AFTER_REQUIRES_GRAD = """\
import torch

torch.manual_seed(0)
dtype = torch.DoubleTensor
x = torch.randn(5, 8, dtype=torch.float64)
w = torch.randn(8, 4, requires_grad=True).type(dtype)
for _ in range(2):
    loss = (x @ w).pow(2).sum()
    loss.backward()
    print(w.grad)
"""


def test_weights_created_in_their_dtype_are_synchronised_to_the_cast_values() -> None:
    """The fix creates the weights as float64 leaves: float64 draws other random values
    than float32 ones cast, so the forward parts at the first call; replayed with the
    leaves' values at their first use (the cast, a read of the values) synchronised to
    before's, the runs agree."""
    fixed = CAST_AFTER_REQUIRES_GRAD.replace(
        "torch.randn(8, 4, requires_grad=True).type(dtype)",
        "torch.randn(8, 4, requires_grad=True, dtype=torch.float64)",
    )
    verdict = verify_sources(
        CAST_AFTER_REQUIRES_GRAD, fixed, timeout=60.0, intent=FixIntent.unknown()
    )
    assert verdict.status == "verified", verdict.reason
    assert "synchronised to before's" in verdict.reason
