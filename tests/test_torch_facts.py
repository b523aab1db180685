"""The generated torch facts: current for the installed torch, and right on known ops."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gradfix import torch_facts as facts


def test_table_is_current_for_the_installed_torch() -> None:
    torch = pytest.importorskip("torch")
    if torch.__version__.split("+")[0] != facts.TORCH_VERSION:
        pytest.skip(f"table made with torch {facts.TORCH_VERSION}, not {torch.__version__}")
    check = [sys.executable, "-m", "gradfix.torch_facts.generate", "--check"]
    result = subprocess.run(check, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_reading_the_facts_does_not_import_torch() -> None:
    code = "import sys, gradfix.torch_facts; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("name", "requiring", "saved"),
    [
        ("exp", ("self",), {"result"}),
        ("sigmoid", ("self",), {"result"}),
        ("log", ("self",), {"self"}),
        ("mul", ("self",), {"other"}),
        ("mul", ("other",), {"self"}),
        ("mul", ("self", "other"), {"self", "other"}),
        ("div", ("self",), {"other"}),
        ("add", ("self", "other"), set()),
        ("sum", ("self",), set()),
    ],
)
def test_saved_for_backward(name: str, requiring: tuple[str, ...], saved: set[str]) -> None:
    assert facts.saved_for_backward(name, requiring) == saved


def test_inplace_twins() -> None:
    assert facts.inplace_twin("sigmoid") == "sigmoid_"
    assert facts.out_of_place("relu_") == "relu"
    assert facts.mutates_first_argument("copy_")
    assert facts.out_of_place("copy_") is None
    # they change no data: not an in-place change for autograd
    assert not facts.mutates_first_argument("requires_grad_")
    assert not facts.mutates_first_argument("detach_")


def test_views() -> None:
    for name in ("view", "t", "transpose", "select", "detach", "unsqueeze", "expand"):
        assert facts.is_view(name), name
    for name in ("reshape", "contiguous", "flatten"):
        assert facts.may_return_input(name) and not facts.is_view(name), name
    assert not facts.may_return_input("exp")


def test_singular_and_overflowing_ops() -> None:
    assert 0.0 in facts.nonfinite_grad_points("sqrt")
    assert 0.0 in facts.nonfinite_grad_points("log")
    assert not facts.nonfinite_grad_points("exp")
    assert facts.overflows("exp") and not facts.overflows("sigmoid")


def test_modules_and_signatures() -> None:
    assert facts.functional_of_module("ReLU") == ("relu", True)
    assert facts.functional_of_module("LeakyReLU") == ("leaky_relu", True)
    assert facts.functional_of_module("Softmax") == ("softmax", False)
    assert facts.functional_of_module("Linear") == ("linear", False)
    assert facts.INPLACE_FLAG_POSITIONS["relu"] == 1
    assert facts.SIGNATURES["autograd.grad"][:2] == ["outputs", "inputs"]
