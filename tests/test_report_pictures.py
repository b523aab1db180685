"""The drawings of the HTML reports (``check --report x.html``, ``trace --report x.html``):
one SVG box per op on the path from the leaf to the loss, each with its line, the break
marked, and the fixed code's path beside it; rendered by a real browser when one exists."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradfix.cli import app

EXAMPLES = Path(__file__).parent.parent / "examples"
INPLACE = """\
import torch
w = torch.randn(4, requires_grad=True)
h = torch.sigmoid(w * 2)
h += 1
loss = (h * h).sum()
loss.backward()
"""
NODE = re.compile(r'<g class="node" data-line="(\d+)" data-role="(\w+)">')


def drawings(page: str) -> list[list[tuple[int, str]]]:
    """Each SVG's boxes as ``(line, role)``, in order."""
    return [
        [(int(line), role) for line, role in NODE.findall(svg)]
        for svg in re.findall(r"<svg .*?</svg>", page, re.S)
    ]


def test_check_report_draws_the_path_before_and_after_the_fix(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(INPLACE, encoding="utf-8")
    page = tmp_path / "r.html"
    result = CliRunner().invoke(app, ["check", "--report", str(page), str(script)])
    assert result.exit_code == 1
    text = page.read_text(encoding="utf-8")
    before, after = drawings(text)
    assert before == [(2, "leaf"), (3, "op"), (4, "mark"), (5, "op"), (6, "root")]
    assert after == [(2, "leaf"), (3, "op"), (4, "fixed"), (5, "op"), (6, "root")]
    assert "h += 1" in text and "h = h + 1" in text and "in-place" in text
    assert "<script" not in text and "http" not in text.split("<svg", 1)[1].replace(
        "http://www.w3.org/2000/svg", ""
    )


def test_check_report_path_through_a_function_and_an_index_assignment(tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    CliRunner().invoke(app, ["check", "--report", str(page), str(EXAMPLES / "gamma_loss.py")])
    [before, *_] = drawings(page.read_text(encoding="utf-8"))
    # the leaf x (12), the call passing it (13), the blend (7, marked), the loss, the
    # return, back at the call, the backward
    assert before[:3] == [(12, "leaf"), (13, "op"), (7, "mark")]
    assert before[-1] == (14, "root")
    page = tmp_path / "n.html"
    CliRunner().invoke(
        app, ["check", "--report", str(page), str(EXAMPLES / "normalised_parameters.py")]
    )
    [before, *_] = drawings(page.read_text(encoding="utf-8"))
    assert before[0] == (8, "leaf")  # self.paramn_ = nn.Parameter(...), through paramn[1] = ...
    assert (16, "op") in before and (20, "mark") in before


def test_check_report_fix_that_opens_a_block(tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    CliRunner().invoke(app, ["check", "--report", str(page), str(EXAMPLES / "init_weights.py")])
    text = page.read_text(encoding="utf-8")
    before, after = drawings(text)
    assert before == [(4, "leaf"), (6, "mark"), (9, "root")]
    # the fixed code: w.normal_() moved to line 7, under the with the fix wrote on line 6
    assert after == [(4, "leaf"), (7, "fixed"), (10, "root")]
    assert "under `with torch.no_grad():`" in text
    assert "RuntimeError: a leaf" not in text  # the line's comment is not drawn


def trace_report(script: Path, page: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gradfix", "trace", "--report", str(page), "--", sys.executable,
         script.name],
        capture_output=True, text=True, cwd=script.parent, check=False, timeout=300,
    )  # fmt: skip


def test_trace_report_draws_the_grad_fn_chain(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(INPLACE, encoding="utf-8")
    page = tmp_path / "run.html"
    done = trace_report(script, page)
    assert done.returncode == 1, done.stderr
    text = page.read_text(encoding="utf-8")
    before, after = drawings(text)
    # the run's chain: leaf w (2), MulBackward0 and SigmoidBackward0 (3), the change
    # (4, marked), the backward (6)
    assert before == [(2, "leaf"), (3, "op"), (4, "mark"), (6, "root")]
    assert "SigmoidBackward0" in text and "add_ (in place)" in text
    assert (4, "fixed") in after


def test_trace_report_of_a_first_nonfinite_value(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "nan.py"
    script.write_text(
        "import torch\nx = torch.tensor([0.0, 4.0], requires_grad=True)\ny = x * 1\n"
        "r = torch.sqrt(y)\nr.sum().backward()\n",
        encoding="utf-8",
    )
    page = tmp_path / "run.html"
    assert trace_report(script, page).returncode == 1
    [before] = drawings(page.read_text(encoding="utf-8"))
    assert before == [(2, "leaf"), (3, "op"), (4, "mark"), (5, "root")]
    assert "non-finite" in page.read_text(encoding="utf-8")


def test_trace_report_needs_html(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["trace", "--report", str(tmp_path / "r.json"), "--", "python", "x.py"]
    )
    assert result.exit_code == 2 and "the suffix must be .html" in result.stderr
    assert not (tmp_path / "r.json").exists()


# ------------------------------------------------------------------------ browser
def browser() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("no chromium binary in CI (.ci/run installs it with apt-get)")
        pytest.skip("no chromium binary: install it (apt-get install chromium) to render")
    return found


def decode_png(data: bytes) -> tuple[int, int, int, bytes]:
    """``(width, height, channels, pixels)`` of an 8-bit RGB or RGBA PNG (zlib only)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks, header = 8, [], b""
    while pos < len(data):
        (size,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + size]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            chunks.append(body)
        pos += size + 12
    width, height, depth, color = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and color in (2, 6), (depth, color)
    channels = 3 if color == 2 else 4
    raw, stride = zlib.decompress(b"".join(chunks)), width * channels
    out, previous = bytearray(), bytearray(stride)
    for row in range(height):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                guess = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + guess) & 255
        out += line
        previous = line
    return width, height, channels, bytes(out)


def render(chromium: str, page: Path, png: Path) -> tuple[float, int]:
    """The screenshot's grey-level variance and its count of the marked box's red."""
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={png}",
         "--window-size=900,700", page.as_uri()],
        capture_output=True, check=False, timeout=120,
    )  # fmt: skip
    assert png.exists(), "chromium wrote no screenshot"
    width, height, channels, pixels = decode_png(png.read_bytes())
    greys = [sum(pixels[i : i + 3]) // 3 for i in range(0, len(pixels), channels * 3)]
    mean = sum(greys) / len(greys)
    variance = sum((g - mean) ** 2 for g in greys) / len(greys)
    red = sum(
        1
        for i in range(0, len(pixels), channels)
        if pixels[i] > 170 and pixels[i + 1] < 90 and pixels[i + 2] < 90
    )
    return variance, red


def dom_nodes(chromium: str, page: Path) -> list[tuple[int, str]]:
    """The boxes as the browser parsed them (its DOM, serialised)."""
    dom = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, check=False, timeout=120,
    ).stdout  # fmt: skip
    return [(int(line), role) for line, role in NODE.findall(dom)]


def test_browser_renders_the_reports_of_an_example(tmp_path: Path) -> None:
    chromium = browser()
    example = tmp_path / "assemble_parameters.py"
    shutil.copy(EXAMPLES / "assemble_parameters.py", example)
    checked = tmp_path / "check.html"
    CliRunner().invoke(app, ["check", "--report", str(checked), str(example)])
    pages = [checked]
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        traced = tmp_path / "trace.html"
        assert trace_report(example, traced).returncode == 1
        pages.append(traced)
    for page in pages:
        variance, red = render(chromium, page, tmp_path / f"{page.stem}.png")
        assert variance > 100, f"{page.name}: the screenshot is blank"
        assert red > 200, f"{page.name}: the marked box is not drawn"
        nodes = dom_nodes(chromium, page)
        # the parameter (line 4), the torch.tensor cut (10, marked), the backward (11);
        # after the fix: torch.stack on line 10
        assert nodes[0] == (4, "leaf") and (10, "mark") in nodes and (11, "root") in nodes
        assert (10, "fixed") in nodes
