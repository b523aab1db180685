"""LibCST is imported only when a fix is built: a check that finds nothing to fix never
pays for it, and a fix still works with the stand-in module in place."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

RUN = textwrap.dedent(
    """
    import sys
    from gradfix.cli import main
    sys.argv = ["gradfix", *sys.argv[1:]]
    try:
        main()
    except SystemExit as exit_:
        code = exit_.code
    print("libcst loaded:", "libcst._nodes" in sys.modules, file=sys.stderr)
    sys.exit(code)
    """
)

MODEL = textwrap.dedent(
    """
    import torch
    import torch.nn as nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 1)

        def forward(self, x):
            h = torch.sigmoid(self.fc(x))
            return h * 2
    """
)
BUGGY = "import torch\n\nw = torch.randn(3, requires_grad=True)\nw.normal_()\n"


def gradfix(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", RUN, *args, "--no-cache"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )


def test_a_check_without_fixes_never_imports_libcst(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text(MODEL, encoding="utf-8")
    (tmp_path / "broken.py").write_text("def f(:\n", encoding="utf-8")
    run = gradfix(tmp_path, "check", "model.py", "broken.py")
    assert "syntax error" in run.stderr  # errors are found without LibCST too
    assert "libcst loaded: False" in run.stderr


def test_a_fix_loads_libcst_through_the_stand_in(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(BUGGY, encoding="utf-8")
    check = gradfix(tmp_path, "check", "train.py")
    assert check.returncode == 1 and "GF201" in check.stdout
    assert "w.normal_()" in check.stdout  # the code frame shows the fix: LibCST built it
    fix = gradfix(tmp_path, "fix", "--no-verify", "--write", "train.py")
    assert fix.returncode == 0, fix.stderr
    assert "with torch.no_grad():\n    w.normal_()" in (tmp_path / "train.py").read_text()
    assert "libcst loaded: True" in fix.stderr
