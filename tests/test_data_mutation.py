"""GF205 data-mutation: per-site safety, what is not reported, and its default state."""

from __future__ import annotations

import textwrap

import pytest

from gradfix.codemods.data_mutation import DataMutation
from gradfix.engine import lint_source
from gradfix.registry import select_rules

PRELUDE = "import torch\nfrom torch import nn\nw = torch.randn(3, requires_grad=True)\n"


def run(code: str, fix: bool = True):
    source = PRELUDE + textwrap.dedent(code).lstrip("\n")
    return lint_source(source, rules=[DataMutation], fix=fix, unsafe_fixes=True)


def only_fix(code: str):
    findings = run(code).findings
    assert len(findings) == 1, findings
    return findings[0].fix


def test_off_by_default_and_selectable() -> None:
    assert DataMutation not in select_rules(None, None)
    assert select_rules(["GF205"], None) == [DataMutation]


@pytest.mark.parametrize(
    ("code", "safety"),
    [
        ("w.data.normal_()\n", "safe"),
        ("y = (w * 2).sum()\nw.data.mul_(0.5)\ny.backward()\n", "unsafe"),  # w pending
        ("snapshot = w.data.clone()\n", "safe"),
        ("total = w.data.sum() + 1\n", "safe"),
        ("array = w.data.cpu().numpy()\n", "safe"),
        ("stacked = torch.cat([w.data, w.data * 2])\n", "safe"),
        ("alias = w.data\n", "unsafe"),  # shares storage with w from now on
        ("view = w.data.view(3, 1)\n", "unsafe"),
        ("w.data = w.data * 0.5\n", "unsafe"),  # copy_ writes into shared storage
    ],
)
def test_fix_safety_per_site(code: str, safety: str) -> None:
    fixes = {f.fix.safety for f in run(code).findings if f.fix is not None}
    assert fixes == {safety}


def test_update_in_forward_is_unsafe() -> None:
    fix = only_fix(
        """
        class Clipped(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(2, 2)

            def forward(self, x):
                self.fc.weight.data.clamp_(-1, 1)
                return self.fc(x)
        """
    )
    assert fix is not None and fix.safety == "unsafe"


@pytest.mark.parametrize(
    "code",
    [
        "w.data = w.data.to(torch.float64)\n",  # dtype changes
        "w.data = torch.randn(5)\n",  # shape may change
        "other = torch.ones(3)\nw.data = other\n",  # shares other's storage afterwards
        "w.data = w.data.normal()\n",  # seed 001's spelling: not a tensor method
    ],
)
def test_data_assignment_that_may_change_layout_is_report_only(code: str) -> None:
    findings = run(code).findings
    assert [f.code for f in findings] == ["GF205"]
    assert findings[0].fix is None
    assert "copy_" in findings[0].message and "nn.Parameter" in findings[0].message


def test_data_assignment_of_inplace_call_keeps_only_the_call() -> None:
    assert run("w.data = w.data.normal_()\n").source.endswith(
        "with torch.no_grad():\n    w.normal_()\n"
    )


def test_in_no_grad_drops_data() -> None:
    fixed = run(
        """
        with torch.no_grad():
            w.data.add_(torch.ones(3))
            w.data[0] = 1.0
        """
    ).source
    assert fixed.endswith("with torch.no_grad():\n    w.add_(torch.ones(3))\n    w[0] = 1.0\n")


@pytest.mark.parametrize(
    "code",
    [
        "print(w.data.dtype, w.data.device, w.data.shape[0], w.data.size(0))\n",
        "y = (w * 2).sum()\ny.backward()\nw.grad.data.zero_()\ng = w.grad.data\n",
        "self_data = torch.utils.data.get_worker_info()\n",
        "class Box:\n    def __init__(self, data):\n        self.data = data\n",
        "packed = nn.utils.rnn.pack_sequence([torch.ones(2, 1)])\nout, h = nn.RNN(1, 2)(packed)\n"
        "values = out.data * 2\n",
    ],
    ids=["metadata", "gradients", "torch.utils.data", "own attribute", "PackedSequence"],
)
def test_not_reported(code: str) -> None:
    assert run(code).findings == []


def test_mutation_inside_an_expression_is_reported_without_fix() -> None:
    findings = run("out = w.data.add_(1) * 2\n").findings
    assert [f.code for f in findings] == ["GF205"] and findings[0].fix is None


def test_consecutive_updates_and_parameter_loops_share_one_block() -> None:
    fixed = run(
        """
        model = nn.Linear(2, 2)
        model.weight.data.normal_(0, 0.02)
        model.bias.data.zero_()
        for name, p in model.named_parameters():
            p.data.mul_(0.5)
        """
    ).source
    assert fixed.count("with torch.no_grad():") == 1
    assert "    for name, p in model.named_parameters():\n        p.mul_(0.5)\n" in fixed


def test_initialiser_argument_drops_data() -> None:
    fixed = run("nn.init.zeros_(w.data[0:1])\nnn.init.normal_(w.data, std=0.02)\n").source
    assert fixed.endswith("nn.init.zeros_(w[0:1])\nnn.init.normal_(w, std=0.02)\n")


def test_unknown_inplace_function_gets_detach_unsafe() -> None:
    findings = run("def fill_(t):\n    t.fill_(1.0)\nfill_(w.data)\n").findings
    assert [f.fix.safety for f in findings if f.fix] == ["unsafe"]
    assert "fill_(w.detach())" in run("def fill_(t):\n    t.fill_(1.0)\nfill_(w.data)\n").source


def test_attribute_store_on_a_data_view_is_not_a_read() -> None:
    assert run("w.data[:2].requires_grad = False\n").findings == []


def test_inplace_function_of_a_relatively_imported_module_changes_its_argument() -> None:
    source = "from . import initialization as init\ninit.zeros_(w.data[0])\n"
    findings = run(source).findings
    assert [f.fix.safety for f in findings if f.fix] == ["unsafe"]
    assert "by `init.zeros_()`" in findings[0].message


def test_data_in_an_unpacking_target_is_not_taken_for_a_read() -> None:
    """transformers' quantizer_higgs.py: ``module.weight.data, meta = f(...)`` was reported
    as a read with a `.detach()` fix on the assignment target (a syntax error, dropped)."""
    from gradfix.engine import lint_source
    from gradfix.registry import find_rule

    source = (
        "import torch\nfrom torch import nn\n\n"
        "def replace(module: nn.Linear, weight, meta):\n"
        "    module.weight.data, module.meta = weight, meta\n"
        "    for module.weight.data in [weight]:\n"
        "        pass\n"
    )
    result = lint_source(source, rules=[find_rule("GF205")], fix=True, unsafe_fixes=True)
    assert not any("reads" in f.message for f in result.findings)
    assert result.dropped == [] and result.source == source


#: d2l-en chapter_convolutional-modern/batch-norm: ``self.moving_mean`` is assigned from
#: itself (``.to(X.device)``) and from a function that returns ``.data``; asking whether
#: it is a tensor followed it through its own assignment forever (RecursionError).
D2L_BATCH_NORM = """
def batch_norm(X, gamma, beta, moving_mean, moving_var, eps, momentum):
    if not torch.is_grad_enabled():
        X_hat = (X - moving_mean) / torch.sqrt(moving_var + eps)
    else:
        mean = X.mean(dim=0)
        var = ((X - mean) ** 2).mean(dim=0)
        X_hat = (X - mean) / torch.sqrt(var + eps)
        moving_mean = (1.0 - momentum) * moving_mean + momentum * mean
        moving_var = (1.0 - momentum) * moving_var + momentum * var
    Y = gamma * X_hat + beta
    return Y, moving_mean.data, moving_var.data


class BatchNorm(nn.Module):
    def __init__(self, num_features, num_dims):
        super().__init__()
        shape = (1, num_features)
        self.gamma = nn.Parameter(torch.ones(shape))
        self.beta = nn.Parameter(torch.zeros(shape))
        self.moving_mean = torch.zeros(shape)
        self.moving_var = torch.ones(shape)

    def forward(self, X):
        if self.moving_mean.device != X.device:
            self.moving_mean = self.moving_mean.to(X.device)
            self.moving_var = self.moving_var.to(X.device)
        Y, self.moving_mean, self.moving_var = batch_norm(
            X, self.gamma, self.beta, self.moving_mean,
            self.moving_var, eps=1e-5, momentum=0.9)
        return Y
"""


def test_attribute_assigned_from_itself_and_returned_data_ends_the_search() -> None:
    result = run(D2L_BATCH_NORM)
    assert [(f.line, f.code) for f in result.findings] == [(14, "GF205"), (14, "GF205")]


PACKED = (
    "from torch.nn.utils.rnn import pack_padded_sequence\nrnn = nn.GRU(3, 4)\n"
    "packed = pack_padded_sequence(torch.rand(5, 2, 3, requires_grad=True), [5, 3])\n"
)


@pytest.mark.parametrize(
    "code",
    [
        # a PackedSequence's ``.data`` is a field holding the packed tensor, in the graph
        PACKED + "total = packed.data.sum()\n",
        PACKED + "out, h = rnn(packed)\nout.data.mul_(2)\n",
        PACKED + "scores = rnn(packed)[0].data.clone()\n",
        # a mapping's items (DGL's ``edges.data["w"]``)
        "def message(edges):\n    edges.data['w'] = edges.data['w'] * 2\n",
        "def reduce(nodes):\n    nodes.data['h'].mul_(0.5)\n",
    ],
)
def test_data_that_is_not_tensor_data_is_not_reported(code: str) -> None:
    assert run(code).findings == []


@pytest.mark.parametrize(
    "code",
    [
        # an RNN's output on a padded tensor is a tensor
        "rnn = nn.GRU(3, 4)\nout, h = rnn(torch.rand(5, 2, 3))\nout.data.mul_(2)\n",
        # an integer index on a tensor's data
        "w.data[0] = 1.0\n",
    ],
)
def test_tensor_data_next_to_packed_and_keyed_data_is_reported(code: str) -> None:
    assert [f.code for f in run(code).findings] == ["GF205"]


def test_a_read_the_run_showed_cutting_the_graph_has_data_dropped() -> None:
    """Only where a run proved the cut (``gradfix trace``) is ``.data`` dropped, which gives
    the weights their gradient back; elsewhere the read keeps its ``.detach()``."""
    from gradfix.trace.link import knowing

    code = "logits = torch.stack([w, w * 2], 1).data  # sampled logits\nloss = logits.sum()\n"
    source = PRELUDE + code
    static = lint_source(source, rules=[DataMutation], fix=True, unsafe_fixes=True).source
    assert "torch.stack([w, w * 2], 1).detach()  # sampled logits" in static
    for kind in ("graph-cut", "grad-none"):
        rule = knowing(DataMutation, {4: {kind}})
        result = lint_source(source, rules=[rule], fix=True, unsafe_fixes=True)
        assert "logits = torch.stack([w, w * 2], 1)  # sampled logits\n" in result.source
        (finding,) = lint_source(source, rules=[rule]).findings
        assert finding.fix is not None and str(finding.fix.safety) == "unsafe"
