"""A change that rebinds a name to a non-leaf whose ``.grad`` the program then reads: the
read is always ``None`` (autograd fills ``.grad`` only for leaves), so the change broke
what the program reads its gradient from, whether the run then fails or prints ``None``."""

from __future__ import annotations

from gradfix.verify import rebound_names, verify_sources
from gradfix.verify.intent import FixIntent

TIMEOUT = 60.0

# A manual SGD step on a leaf outside no_grad ("a leaf Variable that requires grad is
# being used in an in-place operation").
STEP = """\
import torch

torch.manual_seed(0)
A, b = torch.randn(6, 3), torch.randn(6)
w = torch.zeros(3, requires_grad=True)
for step in range(3):
    loss = ((A @ w - b) ** 2).mean()
    loss.backward()
    w -= 0.1 * w.grad
    w.grad.zero_()
print(round(loss.item(), 4))
"""


def test_a_rebinding_that_leaves_a_non_leaf_is_rejected() -> None:
    wrong = STEP.replace("    w -= 0.1 * w.grad", "    w = w - 0.1 * w.grad")
    verdict = verify_sources(STEP, wrong, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
    assert "reads w.grad at" in verdict.reason and "not a leaf" in verdict.reason
    right = STEP.replace(
        "    w -= 0.1 * w.grad", "    with torch.no_grad():\n        w -= 0.1 * w.grad"
    )
    verdict = verify_sources(STEP, right, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason


def test_a_printed_none_gradient_of_a_rebound_name_is_rejected() -> None:
    before = (
        "import torch\nx = torch.tensor([1], requires_grad=True)\n"
        "(x * 2).sum().backward()\nprint(x.grad)\n"
    )
    wrong = before.replace(
        "torch.tensor([1], requires_grad=True)", "torch.tensor([1.], requires_grad=True).double()"
    )
    verdict = verify_sources(before, wrong, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
    assert "reads x.grad" in verdict.reason


def test_a_read_the_original_makes_at_the_same_statement_is_not_the_change_s() -> None:
    before = """\
import torch

torch.manual_seed(0)
x = torch.randn(3, requires_grad=True)
y = x * 2
y.sum().backward()
print(y.grad)
"""
    after = before.replace("y = x * 2\n", "y = x * 2.0\n")
    verdict = verify_sources(before, after, timeout=TIMEOUT, intent=FixIntent.unknown())
    # no rejection for the original's own read; a change that computes what the original
    # does while that read stays is no proven fix either (the bug it may mean is there)
    assert verdict.status == "unverified", verdict.reason
    assert "in both, snippet.py:7 `print(y.grad)` reads `.grad`" in verdict.reason


def test_rebound_names_are_the_targets_of_the_changed_statements() -> None:
    source = "a = 1\nself.w, (b, c) = f(\n  1)\nfor i in x:\n    d += 1\nwith f() as g:\n    pass\n"
    assert rebound_names(source, [1]) == {"a"}
    assert rebound_names(source, [3]) == {"self.w", "b", "c"}
    assert rebound_names(source, [5]) == {"d"}
    assert rebound_names(source, [4, 6]) == {"i", "g"}
    assert rebound_names("def (:\n", [1]) == frozenset()
