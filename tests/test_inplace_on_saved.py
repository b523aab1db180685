"""GF204 inplace-on-saved: cases beyond the embedded examples and fixtures."""

from __future__ import annotations

import textwrap

from gradfix.codemods.inplace_on_saved import InplaceOnSaved
from gradfix.engine import lint_source


def run(code: str, unsafe: bool = True):
    source = textwrap.dedent(code).lstrip("\n")
    return lint_source(source, rules=[InplaceOnSaved], fix=True, unsafe_fixes=unsafe)


def test_view_read_after_the_change_is_reported_without_fix() -> None:
    result = run(
        """
        import torch
        w = torch.randn(3, requires_grad=True)
        h = torch.tanh(w)
        top = h[:2]
        h += 1
        print(top)  # sees the change: rebinding h would not
        h.sum().backward()
        """
    )
    assert [f.code for f in result.findings] == ["GF204"]
    assert result.findings[0].fix is None
    assert "`tanh` saved its output" in result.findings[0].message


def test_change_under_no_grad_is_reported_without_fix() -> None:
    result = run(
        """
        import torch
        w = torch.randn(3, requires_grad=True)
        p = torch.softmax(w, 0)
        with torch.no_grad():
            p.clamp_(min=1e-6)
        torch.log(p).sum().backward()
        """
    )
    assert len(result.findings) == 1 and result.findings[0].fix is None


def test_function_parameter_is_reported_without_fix() -> None:
    # the caller still holds x: rebinding it here would not change the caller's tensor
    result = run(
        """
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(3, 3)

            def forward(self, x):
                y = self.fc(x)
                x.mul_(2)
                return y
        """
    )
    assert len(result.findings) == 1
    assert "`nn.Linear` saved it" in result.findings[0].message
    assert result.findings[0].fix is None


def test_tensor_operand_is_an_unsafe_fix() -> None:
    code = """
        import torch
        w = torch.randn(3, requires_grad=True)
        bias = torch.ones(3)
        h = torch.sigmoid(w)
        h += bias
        h.sum().backward()
        """
    assert run(code).findings[0].fix.safety == "unsafe"
    assert "h = h + bias" in run(code).source
    assert run(code, unsafe=False).source == textwrap.dedent(code).lstrip("\n")


def test_other_name_for_inplace_result_keeps_the_change_when_read_later() -> None:
    result = run(
        """
        import torch
        import torch.nn.functional as F
        w = torch.randn(3, requires_grad=True)
        h = torch.sigmoid(w)
        y = F.relu(h, inplace=True)
        (y + h).sum().backward()
        """
    )
    assert len(result.findings) == 1 and result.findings[0].fix is None


def test_graph_not_needed_after_the_change() -> None:
    result = run(
        """
        import torch
        w = torch.randn(3, requires_grad=True)
        h = torch.exp(w)
        total = h.sum()
        total.backward()
        h.mul_(2)
        print(total)
        """
    )
    assert result.findings == []


def test_saved_operand_through_a_view_and_parenthesised_operand() -> None:
    result = run(
        """
        import torch
        w = torch.randn(3, 3, requires_grad=True)
        a = w * 1.5
        out = a.t() @ w
        a -= 1 + 2
        out.sum().backward()
        """
    )
    assert "a = a - (1 + 2)" in result.source
    assert result.findings[0].fix.safety == "safe"


def test_custom_autograd_function_body_is_not_reported() -> None:
    result = run(
        """
        import torch

        scale = torch.nn.Parameter(torch.ones(3))

        class MaskedSoftmax(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, mask):
                out = torch.softmax(x * scale, -1)  # grad mode is off in here
                out.masked_fill_(mask, 0)
                ctx.save_for_backward(out)
                return out

        w = torch.randn(3, requires_grad=True)
        y = MaskedSoftmax.apply(w * 2, torch.tensor([True, False, False]))
        """
    )
    assert result.findings == []


def test_every_augmented_assignment_is_an_inplace_change() -> None:
    # `h %= 0.5` calls `__imod__`: backward fails as for `h += 0.5`; the prefilter used to
    # list only `+= -= *= /=` and skipped the file.
    result = run(
        """
        import torch
        w = torch.randn(3, requires_grad=True)
        h = torch.sigmoid(w)
        h %= 0.5
        h.sum().backward()
        """
    )
    assert [f.code for f in result.findings] == ["GF204"]
    assert "`sigmoid` saved its output" in result.findings[0].message


def test_matrix_multiply_assignment_rebinds() -> None:
    # torch.Tensor has no __imatmul__: `h @= m` is `h = h @ m`, nothing saved changes.
    result = run(
        """
        import torch
        w = torch.randn(3, 3, requires_grad=True)
        h = torch.sigmoid(w)
        h @= torch.eye(3)
        h.sum().backward()
        """
    )
    assert result.findings == []


def test_message_quotes_the_semicolon_that_ends_the_statement() -> None:
    """LibCST printed a small statement with its ``;``: the ast port keeps that text."""
    result = run(
        """
        import torch
        w = torch.randn(3, requires_grad=True)
        h = torch.sigmoid(w)
        h += 1 ; print(h)
        h.sum().backward()
        """
    )
    assert [f.code for f in result.findings] == ["GF204"]
    assert result.findings[0].message.startswith("`h += 1 ;` changes `h` in place")
    assert "h = h + 1 ; print(h)" in result.source


def test_clone_fix_only_for_a_statement_alone_on_its_line() -> None:
    result = run(
        """
        import torch
        w = torch.randn(3, requires_grad=True)
        g = torch.tanh(w)
        g[0] = 1;
        k = torch.exp(w)
        if True: k[0] = 2
        (g + k).sum().backward()
        """
    )
    fixes = {f.message.split("`")[1]: f.fix for f in result.findings}
    assert fixes["k[0] = 2"] is None  # ``h = h.clone()`` has no line of its own there
    assert fixes["g[0] = 1;"] is not None
    assert "g = g.clone()\ng[0] = 1;\n" in result.source


def test_operand_keeps_or_gets_parentheses() -> None:
    result = run(
        """
        import torch
        w = torch.randn(3, requires_grad=True)
        a = torch.sigmoid(w)
        a *= w if True else w
        b = torch.sigmoid(w)
        b -= (w + 1)
        c = torch.sigmoid(w)
        c -= w - 1
        (a + b + c).sum().backward()
        """
    )
    assert len(result.findings) == 3
    assert "a = a * (w if True else w)\n" in result.source
    assert "b = b - (w + 1)\n" in result.source
    assert "c = c - (w - 1)\n" in result.source


def test_list_element_held_by_another_name_is_reported_without_fix() -> None:
    # `first` holds the element: rebinding `maps[0]` would leave `first` unchanged
    result = run(
        """
        import torch
        w = torch.randn(3, requires_grad=True)
        maps = [torch.sigmoid(w * k) for k in range(3)]
        first = maps[0]
        maps[0] += 1.0
        (first + maps[0]).sum().backward()
        """
    )
    assert [f.code for f in result.findings] == ["GF204"]
    assert "the list's elements" in result.findings[0].message
    assert result.findings[0].fix is None


def test_item_assignment_in_a_list_is_not_a_change_in_place() -> None:
    result = run(
        """
        import torch
        w = torch.randn(3, requires_grad=True)
        maps = [torch.sigmoid(w * k) for k in range(3)]
        maps[0] = maps[0] * 2
        sum(m.sum() for m in maps).backward()
        """
    )
    assert result.findings == []


def test_operand_of_the_changing_statement_is_saved_in_this_iteration() -> None:
    # `x /= x.norm()`: `norm` saved `x` in the same statement, not in an earlier iteration
    result = run(
        """
        import torch
        w = torch.randn(3, 4, requires_grad=True)
        outs = []
        for step in range(2):
            x = w * (step + 1)
            x /= x.norm(dim=1, keepdim=True)
            outs.append(x)
        torch.stack(outs).sum().backward()
        """
    )
    assert [f.code for f in result.findings] == ["GF204"]
    assert "`norm` saved it for backward" in result.findings[0].message


def test_view_of_chunk_is_rebound_only_when_the_base_is_not_read_after() -> None:
    rebound = run(
        """
        import math
        import torch
        w = torch.randn(4, 2, requires_grad=True)
        angle, shift = torch.split(w * 1, 1, -1)
        angle *= 2 * math.pi
        (torch.cos(angle) + shift).sum().backward()
        """,
        unsafe=False,
    )
    assert "angle = angle * (2 * math.pi)" in rebound.source
    read_after = run(
        """
        import torch
        w = torch.randn(4, 2, requires_grad=True)
        h = w * 1
        angle, shift = h.chunk(2, -1)
        angle.mul_(2)
        h.sum().backward()
        """
    )
    assert [f.code for f in read_after.findings] == ["GF204"]
    assert read_after.findings[0].fix is None
    assert "views `chunk` returned" in read_after.findings[0].message


def test_inplace_flag_set_after_construction_reaches_the_walked_model_only() -> None:
    result = run(
        """
        import torch
        from torch import nn

        class Inner(nn.Module):
            def __init__(self):
                super().__init__()
                self.act = nn.ReLU()

            def forward(self, x):
                return self.act(torch.sigmoid(x))

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = Inner()

            def forward(self, x):
                return self.inner(x)

        class Apart(nn.Module):
            def __init__(self):
                super().__init__()
                self.act = nn.ReLU()

            def forward(self, x):
                return self.act(torch.tanh(x))

        net = Net()
        for m in net.modules():
            setattr(m, "inplace", True)
        """
    )
    assert [(f.code, f.line) for f in result.findings] == [("GF204", 30)]
    assert 'setattr(m, "inplace", False)' in result.source


def test_activation_chosen_by_a_literal_is_its_torch_function() -> None:
    result = run(
        """
        import torch
        from torch import nn
        import torch.nn.functional as F

        def activation(name):
            if name == "relu":
                return F.relu
            elif name == "gelu":
                return F.gelu
            raise ValueError(name)

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(3, 3)
                self.relu = activation("relu")
                self.gelu = activation("gelu")

            def forward(self, x):
                a = self.relu(self.fc(x))
                a += 1
                b = self.gelu(self.fc(x))
                b += 1
                return a + b
        """
    )
    assert [(f.code, f.line) for f in result.findings] == [("GF204", 21)]
    assert "`relu` in `self.relu` saved its output" in result.findings[0].message


def test_named_view_of_a_saved_tensor_is_reported_without_fix() -> None:
    result = run(
        """
        import torch
        w = torch.randn(4, 6, requires_grad=True)
        h = torch.sigmoid(w)
        top = h[:2]
        top.mul_(2)
        picked = h[[0, 2]]  # a list index copies
        picked.mul_(2)
        h.sum().backward()
        """
    )
    assert [(f.code, f.line) for f in result.findings] == [("GF204", 5)]
    assert result.findings[0].fix is None
    assert "changes `h` in place, but `sigmoid` saved its output" in result.findings[0].message
