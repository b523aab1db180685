"""The incremental lint (``gradfix.incremental``) gives exactly what a full lint gives.

Every edit below is linted both ways: incrementally from the snapshot of the text before
the edit, and in full. Where the incremental lint answers (it may decline: the edit is
outside one top-level statement, an import, a text that does not parse alone), its
findings, messages and fixes must be the full lint's, byte for byte."""

from __future__ import annotations

import ast
import dataclasses
import random
import re
import sys
from pathlib import Path

import pytest

from gradfix.engine import FileLint, SourceError
from gradfix.incremental import Snapshot, relint
from gradfix.registry import all_rules, select_rules

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from lsp_speed import generated  # noqa: E402

RULES = tuple(all_rules())


def full(source: str, rules: tuple = RULES) -> FileLint:
    return FileLint(source, rules=rules, path="m.py", lazy_fixes=True)


def snapshot(source: str, rules: tuple = RULES) -> Snapshot:
    lint = full(source, rules)
    assert lint.tree is not None
    snap = Snapshot.of(source, lint.tree, lint.findings, rules, "m.py")
    assert snap is not None
    return snap


def shown(findings: object) -> list[tuple[object, ...]]:
    return [
        (f.line, f.col, f.end_line, f.end_col, f.code, f.message, f.fix)
        for f in findings  # type: ignore[attr-defined]
    ]


def check_edit(before: str, after: str, rules: tuple = RULES) -> bool:
    """Whether the incremental lint answered; asserts that its answer is the full one's."""
    again = relint(snapshot(before, rules), after)
    if again is None:
        return False
    assert shown(again.findings) == shown(full(after, rules).findings), after
    return True


# --- edits that change findings in another top-level statement -------------------------

HELPER = """\
import torch


def make(n):
    return torch.randn(n, requires_grad=True)


def train():
    w = make(3)
    w.normal_()
    return w
"""


def test_an_edit_in_a_helper_changes_the_findings_of_its_caller() -> None:
    after = HELPER.replace("requires_grad=True", "requires_grad=False")
    before_codes = [f.code for f in full(HELPER).findings]
    after_codes = [f.code for f in full(after).findings]
    assert before_codes != after_codes  # the premise: the caller's finding depends on make
    assert check_edit(HELPER, after)


CALLER = """\
import torch
import torch.nn as nn


class Scale(nn.Module):
    def forward(self, x):
        y = torch.sigmoid(x)
        y += 1
        return y


def run(x):
    model = Scale()
    return model(x)


def unrelated(v):
    return v * 2
"""


def test_an_edit_in_a_method_is_checked_with_the_code_linked_to_it() -> None:
    after = CALLER.replace("        y += 1\n", "        y = y + 1\n")
    assert [f.code for f in full(CALLER).findings] != [f.code for f in full(after).findings]
    assert check_edit(CALLER, after)


def test_lines_added_move_the_findings_below() -> None:
    text = generated(400)
    lines = text.splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if "opt.zero_grad()" in line)
    after = "".join([*lines[: first + 1], "        opt.zero_grad()\n", *lines[first + 1 :]])
    assert check_edit(text, after)
    removed = "".join([*lines[:first], *lines[first + 1 :]])
    assert check_edit(text, removed)


def test_a_one_line_edit_of_a_big_file_checks_only_its_function() -> None:
    text = generated(2000)
    lines = text.splitlines(keepends=True)
    target = next(i for i, line in enumerate(lines) if "lr=0." in line)
    after = "".join(
        [*lines[:target], lines[target].replace("lr=0.", "lr=7."), *lines[target + 1 :]]
    )
    again = relint(snapshot(text), after)
    assert again is not None
    assert shown(again.findings) == shown(full(after).findings)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # an import changes what every name means
        ("import torch\nx = 1\n", "import torch as t\nx = 1\n"),
        # the edited statement does not parse on its own
        ("import torch\ndef f():\n    return 1\n", "import torch\ndef f():\n    return (1\n"),
        # a function's import changed
        (
            "import torch\ndef f():\n    import numpy\n    return 1\n",
            "import torch\ndef f():\n    import numpy as np\n    return 1\n",
        ),
        # an import added in a function
        (
            "import torch\ndef f():\n    return 1\n",
            "import torch\ndef f():\n    import numpy\n    return 1\n",
        ),
        # a method typed at another indentation than the class's members
        (
            "import torch\nclass A:\n    def f(self):\n        return 1\n",
            "import torch\nclass A:\n    def f(self):\n        return 1\n  def g(self):\n   pass\n",
        ),
        # nothing changed
        ("import torch\nx = 1\n", "import torch\nx = 1\n"),
    ],
)
def test_edits_that_need_a_full_lint(before: str, after: str) -> None:
    assert relint(snapshot(before), after) is None


def test_texts_with_other_line_breaks_are_linted_in_full() -> None:
    source = "import torch\r\nx = torch.ones(2)\r\n"
    lint = full(source)
    assert lint.tree is not None
    assert Snapshot.of(source, lint.tree, lint.findings, RULES, "m.py") is None


# --- many edits of real code ------------------------------------------------------------

SOURCES = sorted([*ROOT.glob("fixtures/*/*.py"), *ROOT.glob("bench/realworld/*/bug.py")], key=str)
NUMBER = re.compile(r"\b\d+\b")
WORD = re.compile(r"\b[A-Za-z_]\w*\b")


def edits(source: str, rng: random.Random) -> list[str]:
    """A few one-line edits of ``source``: a number changed, a line removed or doubled, a
    name replaced by another of the file's names, an in-place statement added."""
    lines = source.splitlines(keepends=True)
    names = sorted(set(WORD.findall(source)))
    code = [i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")]
    found = []
    for _ in range(6):
        i = rng.choice(code)
        line = lines[i]
        kind = rng.randrange(5)
        if kind == 0 and NUMBER.search(line):
            new = [NUMBER.sub(lambda m: str(int(m.group()) + 1), line, count=1)]
        elif kind == 1:
            new = []
        elif kind == 2:
            new = [line, line]
        elif kind == 3 and WORD.search(line):
            words = WORD.findall(line)
            new = [line.replace(rng.choice(words), rng.choice(names), 1)]
        else:
            indent = line[: len(line) - len(line.lstrip())]
            target = rng.choice(WORD.findall(line) or ["x"])
            new = [line, f"{indent}{target}.add_(1)\n"]
        found.append("".join([*lines[:i], *new, *lines[i + 1 :]]))
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_random_edits_give_the_full_lint(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    rng = random.Random(path.name)
    rules = tuple(select_rules(["ALL"]))
    try:
        full(source, rules)
    except SourceError:
        pytest.skip("does not parse")
    for after in edits(source, rng):
        try:
            full(after, rules)
        except SourceError:
            continue  # the editor shows the syntax error; nothing to compare
        check_edit(source, after, rules)


def test_most_random_edits_are_incremental() -> None:
    """The comparison above means something only if the incremental lint answers."""
    answered = total = 0
    rng = random.Random(0)
    for path in SOURCES[::7]:
        source = path.read_text(encoding="utf-8")
        snap = snapshot(source)
        for after in edits(source, rng):
            try:
                full(after)
            except SourceError:
                continue
            total += 1
            answered += relint(snap, after) is not None
    assert total > 50
    assert answered / total > 0.3, (answered, total)


# --- the language server's buffer lint ------------------------------------------------


def test_a_buffer_lint_after_an_edit_is_incremental_and_confirmed_by_a_full_lint() -> None:
    from gradfix.lsp import BufferLint, ClientText
    from gradfix.rule import Finding

    uri = "file:///m.py"
    first = BufferLint.of(uri, ClientText(CALLER), "m.py", RULES)
    assert first.snapshot is not None and not first.incremental
    # a snapshot that is wrong where the edit does not reach (line 13 is in ``run``)
    fake = Finding(13, 5, "GF999", "fake", "not there", 13, 10)
    wrong = dataclasses.replace(first.snapshot, findings=(*first.snapshot.findings, fake))
    after = CALLER.replace("v * 2", "v * 3")
    lint = BufferLint.of(uri, ClientText(after), "m.py", RULES, wrong)
    assert lint.incremental
    assert fake in lint.findings  # carried: the edit of ``unrelated`` cannot change ``run``
    assert lint.confirm() is True
    assert shown(lint.findings) == shown(full(after).findings)
    assert lint.confirm() is False  # once
    assert lint.snapshot is not None and fake not in lint.snapshot.findings


def test_quick_fixes_of_an_incremental_lint_come_from_the_whole_text() -> None:
    from gradfix.lsp import BufferLint, ClientText

    uri = "file:///m.py"
    first = BufferLint.of(uri, ClientText(CALLER), "m.py", RULES)
    after = CALLER.replace("v * 2", "v * 3")
    lint = BufferLint.of(uri, ClientText(after), "m.py", RULES, first.snapshot)
    assert lint.incremental
    singles = lint.singles()
    assert singles and all(s.source is None or "v * 3" in s.source for s in singles)
    assert not lint.incremental


# --- edits that are incremental since issue 32 ------------------------------------------


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # the edit spans two top-level statements
        ("import torch\nx = 1\ny = 2\n", "import torch\nx = 3\ny = 4\n"),
        # a statement added after the last one, between two, removed
        ("import torch\nx = 1\n", "import torch\nx = 1\ny = 2\n"),
        ("import torch\nx = 1\n\ny = 2\n", "import torch\nx = 1\nz = x\ny = 2\n"),
        ("import torch\nx = 1\nz = x\ny = 2\n", "import torch\nx = 1\ny = 2\n"),
        # a function that imports, edited elsewhere
        (
            "import torch\ndef f():\n    import numpy\n    return 1\n",
            "import torch\ndef f():\n    import numpy\n    return 2\n",
        ),
        # a method of a class, a method added, a method removed
        (CALLER, CALLER.replace("        y += 1\n", "        y = y + 1\n")),
        (
            CALLER,
            CALLER.replace(
                "        return y\n", "        return y\n\n    def g(self):\n        pass\n"
            ),
        ),
        (
            CALLER.replace(
                "        return y\n", "        return y\n\n    def g(self):\n        pass\n"
            ),
            CALLER,
        ),
    ],
)
def test_edits_that_are_incremental(before: str, after: str) -> None:
    assert check_edit(before, after)


def test_an_edit_in_a_method_of_a_big_class_checks_the_method_not_the_class() -> None:
    methods = "".join(
        f"    def m{n}(self, x):\n"
        f"        w = torch.randn({n}, requires_grad=True)\n"
        "        return w\n\n"
        for n in range(300)
    )
    before = f"import torch\n\n\nclass Big:\n{methods}    def last(self, x):\n        return x\n"
    after = before.replace(
        "(150, requires_grad=True)\n", "(150, requires_grad=True)\n        w.normal_()\n"
    )
    again = relint(snapshot(before), after)
    assert again is not None and again.exact
    assert shown(again.findings) == shown(full(after).findings)
    assert [f.line for f in again.findings] == [
        n + 1 for n, line in enumerate(after.splitlines()) if line == "        w.normal_()"
    ]


# --- random edits of a real-shaped big file ---------------------------------------------


def real_shaped() -> str:
    """A big file shaped like transformers' ``modeling_utils.py``: the real-world bug
    files one after the other (functions, classes, module-level code, imports in the
    middle, names that repeat) with the bench's generated blocks, then a class holding
    every top-level function of the bug files as a method (thousands of lines)."""
    parts, methods = [], []
    for path in sorted(ROOT.glob("bench/realworld/*/bug.py")):
        source = path.read_text(encoding="utf-8")
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        parts.append(source)
        lines = source.splitlines(keepends=True)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and not node.decorator_list:
                body = lines[node.lineno - 1 : node.end_lineno]
                methods.append("".join("    " + line if line.strip() else line for line in body))
    big = "class Everything(nn.Module):\n" + "\n".join(methods)
    middle = len(parts) // 2  # and the bench's generated blocks in the middle
    parts[middle:middle] = [generated(1800)]
    return "import torch\nimport torch.nn as nn\n\n" + "\n\n".join([*parts, big])


def test_random_edits_of_a_real_shaped_file_give_the_full_lint() -> None:
    """Edits everywhere in a 5,000-line file (a line typed in a function, in a method of
    the big class, at module level; random one-line edits): an exact answer is the full
    lint's; an answer within the budget (the links reach most of such a file) is too,
    but for rare findings whose context did not fit (the language server's full lint
    corrects them once typing pauses)."""
    from lsp_speed import KINDS, versions

    source = real_shaped()
    assert source.count("\n") > 4500
    snap = snapshot(source)
    assert len(snap.findings) > 100  # the comparison means something
    rng = random.Random(32)
    afters = [t for kind in KINDS for t in versions(source, kind, 4)[1] if t != source]
    for _ in range(4):
        afters += edits(source, rng)
    total = answered = exact = differ = 0
    for after in afters:
        try:
            expected = shown(full(after).findings)
        except SourceError:
            continue
        total += 1
        again = relint(snap, after)
        if again is None:
            continue
        answered += 1
        got = shown(again.findings)
        if again.exact:
            exact += 1
            assert got == expected
        else:
            differ += got != expected
            assert len(set(got) ^ set(expected)) <= 2, set(got) ^ set(expected)
    assert answered >= total * 0.8, (answered, total)
    assert differ <= (answered - exact) * 0.15, (differ, answered - exact)
