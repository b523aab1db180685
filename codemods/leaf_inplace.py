"""GF201 leaf-inplace."""

from __future__ import annotations

import ast

from gradfix.no_grad_block import NoGradBlockRule, Site, inplace_target, used_in_graph_before
from gradfix.rule import FixAvailability, FixSafety, Invalid, Valid


class LeafInplace(NoGradBlockRule):
    """
    ## What it does
    Finds in-place operations on a leaf tensor that requires grad outside
    `torch.no_grad()`: initialisers (`w.normal_()`, `uniform_`, `fill_`, `zero_`, `copy_`),
    arithmetic (`w.add_(1)`, `w -= lr * w.grad`), and index assignment (`w[:] = 0`),
    including loops over `model.parameters()`, the weights of submodules reached through
    attributes and indexing (`model.encoder.layers[i].fc.weight[:, k] -= v`) and parameters
    of helper functions that every caller passes such a leaf (`init_table(emb.weight)`),
    and wraps them in `with torch.no_grad():`.

    ## Why is this bad?
    Autograd forbids changing a leaf that requires grad while it records: the statement
    raises "a leaf Variable that requires grad is being used in an in-place operation"
    (or, for `w[:] = 0`, backward later fails with "leaf variable has been moved into the
    graph interior"). Initialising or updating parameters by hand is an operation
    autograd must not record.

    ## Example
    ```python
    w = torch.empty(3, 4, requires_grad=True)
    w.normal_()  # RuntimeError: a leaf Variable that requires grad ...

    for epoch in range(100):
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        w -= lr * w.grad
        w.grad.zero_()
    ```

    ## Use instead
    ```python
    with torch.no_grad():
        w.normal_()

    for epoch in range(100):
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            w -= lr * w.grad
        w.grad.zero_()
    ```
    Consecutive updates share one block; a loop whose body only updates parameters is
    wrapped whole. `w.data.normal_()` also avoids the error, but skips autograd's version
    check: it is the discouraged form, which GF205 data-mutation (off by default) rewrites
    to this one.

    ## Fix safety
    Safe: the statement raised before, and under `no_grad` it does what it says. When the
    leaf was already used in the graph earlier in the same scope with no `backward()` in
    between, the in-place change would corrupt values saved for that graph (a backward-time
    version error, or a silently wrong gradient): reported without a fix. Code already
    under `no_grad()` / `inference_mode()` / a `@torch.no_grad()` function (or a function
    only called from one), `nn.init.*_` functions and tensors that do not require grad are
    not reported.
    """

    code = "GF201"
    name = "leaf-inplace"
    synopsis = (
        "Finds in-place operations on a leaf that requires grad (`w.normal_()`, `w -= lr "
        "* w.grad`) outside `torch.no_grad()` and wraps them in it."
    )
    message = "In-place operation on a leaf tensor that requires grad"
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES

    VALID = [
        Valid(
            """
            import torch
            w = torch.empty(3, requires_grad=True)
            with torch.no_grad():
                w.normal_()
            """
        ),
        Valid(
            """
            import torch
            from torch import nn
            lin = nn.Linear(3, 4)
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)
            """
        ),
        Valid(
            """
            import torch

            @torch.no_grad()
            def sgd_step(params, lr):
                for p in params:
                    p -= lr * p.grad
            """
        ),
        Valid(
            """
            import torch
            buf = torch.zeros(5)
            buf[0] = 1.0
            buf.add_(2)
            """
        ),
        Valid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            w.detach().normal_()
            w.grad = None
            """
        ),
        Valid(
            """
            import torch
            from torch import nn

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.w = nn.Parameter(torch.empty(3))
                    with torch.no_grad():
                        self._reset()

                def _reset(self):
                    self.w.uniform_(-1, 1)
            """
        ),
        Valid(
            """
            import torch
            from torch import nn
            model = nn.Linear(2, 2)
            for name, param in model.named_parameters():
                param.detach_()  # legal on a leaf: it stops requiring grad
            """
        ),
        Valid(
            """
            import torch
            from torch import nn

            def fill_first_column(table, values):
                table[:, 0] = values  # one caller passes a plain buffer

            emb = nn.Embedding(10, 4)
            fill_first_column(torch.zeros(10, 4), torch.arange(10.0))
            with torch.no_grad():
                fill_first_column(emb.weight, torch.arange(10.0))
            """
        ),
        Valid(
            """
            import torch
            settings = {"weight": torch.ones(3)}
            class Config:
                weight = torch.ones(3)
            cfg = Config()
            cfg.weight[0] = 2.0  # not a module's parameter
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch import nn

            def fill_first_column(table, values):
                table[:, 0] = values
                table[:, 1] = -values

            emb = nn.Embedding(10, 4)
            fill_first_column(emb.weight, torch.arange(10.0))
            """,
            """
            import torch
            from torch import nn

            def fill_first_column(table, values):
                with torch.no_grad():
                    table[:, 0] = values
                    table[:, 1] = -values

            emb = nn.Embedding(10, 4)
            fill_first_column(emb.weight, torch.arange(10.0))
            """,
        ),
        Invalid(
            """
            import torch
            from torch import nn

            class Block(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.proj = nn.Linear(4, 4)

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.blocks = nn.ModuleList([Block() for _ in range(2)])

            net = Net()
            for i in range(2):
                net.blocks[i].proj.weight[:, 0] -= 0.5
                net.blocks[i].proj.bias[0] = 0.0
            """,
            """
            import torch
            from torch import nn

            class Block(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.proj = nn.Linear(4, 4)

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.blocks = nn.ModuleList([Block() for _ in range(2)])

            net = Net()
            with torch.no_grad():
                for i in range(2):
                    net.blocks[i].proj.weight[:, 0] -= 0.5
                    net.blocks[i].proj.bias[0] = 0.0
            """,
        ),
        Invalid(
            """
            import torch
            w = torch.FloatTensor(10)
            w.requires_grad = True
            w.normal_()
            """,
            """
            import torch
            w = torch.FloatTensor(10)
            w.requires_grad = True
            with torch.no_grad():
                w.normal_()
            """,
        ),
        Invalid(
            """
            import torch as th
            w = th.randn(3, requires_grad=True)
            b = th.zeros(1, requires_grad=True)
            for step in range(3):
                loss = (w.sum() + b).pow(2).sum()
                loss.backward()
                # plain SGD
                w -= 0.1 * w.grad
                b -= 0.1 * b.grad  # bias too
                w.grad.zero_()
                b.grad.zero_()
            """,
            """
            import torch as th
            w = th.randn(3, requires_grad=True)
            b = th.zeros(1, requires_grad=True)
            for step in range(3):
                loss = (w.sum() + b).pow(2).sum()
                loss.backward()
                # plain SGD
                with th.no_grad():
                    w -= 0.1 * w.grad
                    b -= 0.1 * b.grad  # bias too
                w.grad.zero_()
                b.grad.zero_()
            """,
        ),
        Invalid(
            """
            from torch import nn
            model = nn.Linear(4, 2)
            for p in model.parameters():
                p.uniform_(-0.1, 0.1)
            """,
            """
            import torch
            from torch import nn
            model = nn.Linear(4, 2)
            with torch.no_grad():
                for p in model.parameters():
                    p.uniform_(-0.1, 0.1)
            """,
        ),
        Invalid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            y = w * 2
            w.zero_()  # no fix: `w` was used in the graph before
            y.sum().backward()
            """,
            report_only=True,
        ),
    ]

    def site_message(self, site: Site) -> str:
        code = " ".join(self.source.statement_code(site.statement).split())
        if len(code) > 40:
            code = code[:37] + "..."
        target = self.text_of(site.target)
        reason = site.reason.description if site.reason else "a leaf"
        text = f"In-place `{code}` on leaf `{target}` that requires grad ({reason})"
        if not site.fixable:
            text += "; it was used in the graph before: move the update before its first use"
        return text

    # -- one statement ---------------------------------------------------------------------
    def site(self, small: ast.stmt) -> Site | None:
        target = inplace_target(small)
        if target is None:
            return None
        base = target.value if type(target) is ast.Subscript else target
        reason = self.analysis.leaf_reason(base, small)
        if reason is None or self.analysis.in_no_grad(small):
            return None
        if self.analysis.leaf_accumulator(small) is not None:
            return None  # ``total += loss`` on a running total: GF403 drops `requires_grad`
        site = Site(small, base, reason)
        site.fixable = not used_in_graph_before(self, base, small)
        return site
