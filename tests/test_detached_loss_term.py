"""GF408 detached-loss-term: the shapes it finds, the stop-gradients it leaves alone."""

from __future__ import annotations

import textwrap

from gradfix.codemods.detached_loss_term import DetachedLossTerm
from gradfix.engine import lint_source

HEADER = "import torch\nimport torch.nn as nn\n"


def run(code: str):
    source = HEADER + textwrap.dedent(code).lstrip("\n")
    return lint_source(source, rules=[DetachedLossTerm], fix=True, unsafe_fixes=True)


def lines(code: str) -> list[int]:
    return [f.line - 2 for f in run(code).findings]


def test_a_detached_term_in_a_function_with_aliased_losses_is_fixed() -> None:
    code = """
    import torch.nn.functional as Fn
    def generator_step(netG, netD, x, target, opt):
        opt.zero_grad()
        fake = netG(x)
        adv = Fn.binary_cross_entropy(netD(fake).detach(), torch.ones(4, 1))
        loss = Fn.l1_loss(fake, target) + 0.1 * adv
        loss.backward()
        opt.step()
    netG, netD = nn.Linear(3, 3), nn.Sequential(nn.Linear(3, 1), nn.Sigmoid())
    generator_step(netG, netD, torch.randn(4, 3), torch.randn(4, 3), None)
    """
    result = run(code)
    assert [(f.code, f.line - 2) for f in result.findings] == [("GF408", 5)]
    assert "binary_cross_entropy(netD(fake), torch.ones(4, 1))" in result.source


def test_a_detached_value_read_again_is_reported_without_a_fix() -> None:
    code = """
    model = nn.Linear(3, 2)
    x, y = torch.randn(4, 3), torch.randn(4, 2)
    out = model(x)
    pen = out.pow(2).mean().detach()
    loss = ((out - y) ** 2).mean() + pen
    loss.backward()
    print(pen)
    """
    result = run(code)
    assert [f.line - 2 for f in result.findings] == [4]
    assert result.findings[0].fix is None


def test_a_loss_with_no_term_that_trains_is_left_to_the_run() -> None:
    # every term detached: backward() raises at once, which GF110 and `gradfix trace` report
    assert (
        lines(
            """
        model = nn.Linear(3, 1)
        out = model(torch.randn(4, 3)).detach()
        loss = out.mean() + 1.0
        loss.backward()
        """
        )
        == []
    )


def test_stop_gradients_inside_a_term_and_data_terms_are_not_reported() -> None:
    assert (
        lines(
            """
        model, target_net = nn.Linear(3, 2), nn.Linear(3, 2)
        x, y = torch.randn(4, 3), torch.randn(4, 2)
        q = model(x)
        target = (y + 0.9 * target_net(x).max(1, keepdim=True)[0]).detach()
        td = ((q - target) ** 2).mean()
        l2 = 0.5 * (y ** 2).mean()
        loss = td + l2 + torch.tensor(0.1)
        loss.backward()
        """
        )
        == []
    )


def test_a_training_loop_in_a_module_method_with_a_multi_line_loss() -> None:
    code = """
    class Trainer(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(3, 3)
            self.critic = nn.Linear(3, 1)

        def fit(self, batches, opt):
            for x in batches:
                opt.zero_grad()
                out = self.net(x)
                score = self.critic(out).mean().item()  # read only by the loss
                loss = (
                    out.pow(2).mean()  # reconstruction
                    - 0.01 * score
                )
                loss.backward()
                opt.step()
    """
    result = run(code)
    assert [(f.line - 2, f.fix) for f in result.findings] == [(11, None)]


def test_data_returned_by_a_method_of_a_local_class_is_found_and_dropped() -> None:
    code = """
    import torch.nn.functional as F
    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = nn.GRUCell(4, 4)
            self.out = nn.Linear(4, 6)
        def sample(self, h, steps=3):
            logits = []
            for _ in range(steps):
                h = self.cell(torch.zeros(2, 4), h)
                logits.append(self.out(h))
            logits = torch.stack(logits, 1).data
            return logits
    encoder, head, decoder = nn.Linear(5, 4), nn.Linear(4, 3), Decoder()
    features = encoder(torch.randn(2, 5))
    logits = decoder.sample(features)
    loss = F.cross_entropy(logits.reshape(-1, 6), torch.zeros(6, dtype=torch.long))
    loss = loss + F.mse_loss(head(features), torch.zeros(2, 3))
    loss.backward()
    """
    result = run(code)
    assert [(f.line - 2, f.fix is not None) for f in result.findings] == [(12, True)]
    assert "logits = torch.stack(logits, 1)\n" in result.source
