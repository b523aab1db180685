"""The generated torch facts: current for the installed torch, and right on known ops."""

from __future__ import annotations

import inspect
import subprocess
import sys
from typing import Any

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


def test_augmented_assignments_are_every_python_operator() -> None:
    import ast

    spellings = (*facts.AUGMENTED_ASSIGNMENTS, "@=")  # `@=` rebinds: no Tensor.__imatmul__
    operators = {type(ast.parse(f"x {op} y").body[0].op) for op in spellings}  # type: ignore[attr-defined]
    assert len(operators) == len(spellings) == len(ast.operator.__subclasses__())


def test_inplace_dunders_exist_on_tensors() -> None:
    torch = pytest.importorskip("torch")
    assert len(facts.INPLACE_DUNDERS) == len(facts.AUGMENTED_ASSIGNMENTS)
    assert all(hasattr(torch.Tensor, name) for name in facts.INPLACE_DUNDERS)
    assert not hasattr(torch.Tensor, "__imatmul__")


def test_integer_dtypes_are_the_dtypes_that_cannot_require_grad() -> None:
    torch = pytest.importorskip("torch")
    for qualified in sorted(facts.INTEGER_DTYPES):
        with pytest.raises(RuntimeError, match="can require gradients"):
            torch.zeros(2, dtype=getattr(torch, qualified.removeprefix("torch."))).requires_grad_()
    for name in ("float32", "float64", "float16", "bfloat16", "complex64"):
        assert f"torch.{name}" not in facts.INTEGER_DTYPES
        torch.zeros(2, dtype=getattr(torch, name)).requires_grad_()


def test_not_inplace_methods_change_no_data() -> None:
    torch = pytest.importorskip("torch")
    for name in sorted(facts.NOT_INPLACE):
        assert not facts.is_inplace_method(name)
        tensor = torch.zeros(2, requires_grad=True)
        method = getattr(tensor, name, None)
        if method is None:
            continue  # not a tensor method in this torch: calling it raises AttributeError
        version = tensor._version
        method() if name != "record_stream_" else None
        assert tensor._version == version, name


def test_curated_view_ops_agree_with_the_generated_table() -> None:
    # The generator probes one float32 input: it has no view fact for two-tensor ops
    # (view_as, expand_as) or casts to another dtype (half); where it has one, it agrees.
    probed = [name for name in facts.VIEW_OPS if "view" in facts.OPS.get(name, {})]
    assert len(probed) > 10
    assert [name for name in probed if not facts.is_view(name)] == []
    probed = [name for name in facts.MAY_ALIAS_OPS if "view" in facts.OPS.get(name, {})]
    assert [name for name in probed if not facts.may_return_input(name)] == []


def test_singular_inputs_of_the_unsafe_functions_cover_the_probed_points() -> None:
    # unsafe_branch (GF301-GF303, and the ops `gradfix trace` watches) writes the singular
    # inputs as intervals; every point where torch gave a nan/inf gradient must be in them.
    from gradfix.unsafe_branch import ELEMENTWISE

    for name, function in sorted(ELEMENTWISE.items()):
        missed = [x for x in facts.nonfinite_grad_points(name) if not function.is_singular(x)]
        assert missed == [], name


def test_saved_by_hand_are_the_ops_the_generator_cannot_call() -> None:
    """The hand families answer only where the generated facts are silent: an op the
    generator learns to call leaves ``SAVED_BY_HAND``."""
    for name in facts.SAVED_BY_HAND:
        assert not facts.OPS.get(name, {}).get("saves"), name
    for name in facts.TENSOR_OPS - facts.SAVED_BY_HAND:
        assert facts.OPS.get(name, {}).get("saves") is not None, name


def test_a_saved_view_of_an_input_counts_as_the_input() -> None:
    """``linear`` saves ``weight.t()``, ``tensordot`` a reshaped view: an in-place change
    to the input fails at backward all the same."""
    assert facts.saved_for_backward("linear", ("self",)) == {"other"}
    assert facts.saved_for_backward("tensordot", ("other",)) == {"self"}
    assert facts.saved_for_backward("kron", ("self",)) == set()  # copies: nothing to break


def test_hand_families_disagree_with_torch_only_where_documented(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``bench/saved_facts_compare.py``: the hand ``SAVES_*`` families say what the
    generated facts say, but for the three ops ``curated.py`` names (the semantic analysis
    answers for them from the generated facts)."""
    import importlib
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    compare = importlib.import_module("saved_facts_compare")
    disagreeing = {
        line.split()[0] for line in compare.disagreements() if "no generated" not in line
    }
    assert disagreeing == {"hypot", "kron", "pow"}


def test_multi_output_views_are_those_autograd_refuses_to_change() -> None:
    import torch

    base = torch.randn(4, 4, requires_grad=True) * 1
    splitters = {
        "chunk": lambda t: t.chunk(2),
        "split": lambda t: t.split(2),
        "split_with_sizes": lambda t: t.split_with_sizes([2, 2]),
        "unbind": lambda t: t.unbind(0),
        "tensor_split": lambda t: t.tensor_split(2),
        "unsafe_chunk": lambda t: t.unsafe_chunk(2),
        "hsplit": lambda t: t.hsplit(2),
    }
    for name, split in splitters.items():
        try:
            split(base)[1].mul_(2)
            refused = False
        except RuntimeError as error:
            refused = "returns multiple views" in str(error)
        assert refused == (name in facts.MULTI_OUTPUT_VIEW_OPS), name


def _build_layer(torch: Any, name: str, **flags: bool) -> Any:
    """One instance of the ``nn`` class ``name``, with small sizes."""
    sized = {
        "Bilinear": (4, 4, 4),
        "PReLU": (),
        "MultiheadAttention": (4, 2),
        "Transformer": (4, 2, 1, 1, 8),
        "TransformerEncoderLayer": (4, 2, 8),
        "TransformerDecoderLayer": (4, 2, 8),
        "GroupNorm": (2, 4),
    }
    if "Conv" in name:
        args: tuple[int, ...] = (4, 3) if name.startswith("Lazy") else (4, 4, 3)
    elif name in sized:
        args = sized[name]
    elif "Norm" in name or name.startswith("Lazy"):
        args = (4,)
    else:
        args = (4, 4)
    return getattr(torch.nn, name)(*args, **flags)


def test_parameter_layers_own_parameters_unless_their_flag_is_off() -> None:
    torch = pytest.importorskip("torch")
    for name, flag in sorted(facts.NN_PARAMETER_LAYERS.items()):
        assert list(_build_layer(torch, name).parameters()), name
        if flag is not None:
            keyword, position = flag
            signature = list(inspect.signature(getattr(torch.nn, name).__init__).parameters)
            assert signature.index(keyword) == position + 1, name  # after ``self``
            assert not list(_build_layer(torch, name, **{keyword: False}).parameters()), name


def test_index_ops_and_integer_casts_give_results_without_gradient() -> None:
    torch = pytest.importorskip("torch")
    x = torch.rand(6, requires_grad=True)
    for name in sorted(facts.INDEX_OPS):
        args = (torch.tensor([0.5]),) if name in ("bucketize", "searchsorted") else ()
        if name == "searchsorted":
            result = torch.searchsorted(x.detach().sort().values, x)
        elif name == "bucketize":
            result = torch.bucketize(x, *args)
        else:
            result = getattr(x, name)()
        assert not result.requires_grad and not result.is_floating_point(), name
    for name in sorted(facts.INTEGER_CASTS):
        assert not getattr(x, name)().requires_grad, name
    for name in sorted(facts.VALUES_INDICES_OPS):
        values, indices = getattr(torch, name)(x.view(2, 3), 1) if name != "topk" else x.topk(2)
        assert values.requires_grad and not indices.requires_grad, name


def test_constant_init_layers_start_at_constants_and_the_others_at_random_numbers() -> None:
    """What GF108 says a layer built in `forward` holds on each call: `nn.LayerNorm`'s
    weight 1 and bias 0, not "new random weights"."""
    torch = pytest.importorskip("torch")
    expected = {"weight 1, bias 0": (1.0, 0.0), "weight 1": (1.0, None)}
    expected["weight `init`, 0.25 by default"] = (0.25, None)
    for name in sorted(facts.NN_PARAMETER_LAYERS):
        if name.startswith("Lazy"):
            continue  # no values before the first call
        torch.manual_seed(0)
        first = [p.detach().clone() for p in _build_layer(torch, name).parameters()]
        torch.manual_seed(1)
        second = [p.detach() for p in _build_layer(torch, name).parameters()]
        same = all(torch.equal(a, b) for a, b in zip(first, second))
        start = facts.NN_CONSTANT_INIT_LAYERS.get(name)
        assert same == (start is not None), name
        if start is not None:
            weight, bias = expected[start]
            layer = _build_layer(torch, name)
            assert torch.all(layer.weight == weight), name
            assert (getattr(layer, "bias", None) is None) == (bias is None), name
            if bias is not None:
                assert torch.all(layer.bias == bias), name
