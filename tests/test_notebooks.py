"""Jupyter notebooks (gradfix.notebook): code cells checked and fixed as one program.

Notebooks are built here with json the way Jupyter writes them (indent 1, sorted keys,
non-ASCII kept, final newline); each test names the cell shapes it needs.
"""

from __future__ import annotations

import html
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gradfix.cli import app
from gradfix.codemods import ALL_RULES
from gradfix.fileio.files import discover
from gradfix.notebook import build_program, cell_at_line, fix_program, lint_notebook
from gradfix.runner import RunOptions, process_paths

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "init_weights_notebook.ipynb"

# seed 001 spread over cells: the leaf is made in cell 1, initialised in place in cell 3
SEED_001_CELLS = [
    "import torch\n\nw = torch.FloatTensor(10)\nw.requires_grad = True",
    "md:## Initialise",
    "x = torch.linspace(0.0, 1.0, 10)\nw.normal_()  # in place on a leaf",
    "(w * x).sum().backward()\nprint(w.grad)",
]
MAGIC_LINES = [
    "%matplotlib inline",
    "!pip install torch==2.13.0",
    "files = !ls -1",
    "torch.linspace?",
    "%env CUBLAS_WORKSPACE_CONFIG=:4096:8",
]
MAGIC_CELLS = [
    "\n".join([MAGIC_LINES[0], "import torch", MAGIC_LINES[1], MAGIC_LINES[2]]),
    "w = torch.empty(3, requires_grad=True)\n" + MAGIC_LINES[3],
    "%%time\nfor step in range(2):\n    " + MAGIC_LINES[4] + "\n    !echo \\\n  step\nw.normal_()",
    "%%bash\necho $((1 + 2)) > out.txt",
    "(w * 2).sum().backward()",
]


def notebook(cells: list[str], **top: Any) -> dict[str, Any]:
    """An nbformat 4 notebook; ``md:`` cells are markdown, code cells get an output."""
    data: dict[str, Any] = {
        "cells": [],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python", "version": "3.11.7"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    for number, text in enumerate(cells):
        if text.startswith("md:"):
            cell = {"cell_type": "markdown", "id": f"md{number}", "metadata": {}}
            data["cells"].append({**cell, "source": lines(text[3:])})
            continue
        output = {"name": "stdout", "output_type": "stream", "text": ["température: 1.0\n"]}
        cell = {"cell_type": "code", "execution_count": number + 1, "id": f"code{number}"}
        cell.update({"metadata": {"tags": ["keep"]}, "outputs": [output]})
        data["cells"].append({**cell, "source": lines(text)})
    return {**data, **top}


def lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def jupyter_text(data: object) -> str:
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def write_notebook(path: Path, cells: list[str]) -> Path:
    path.write_text(jupyter_text(notebook(cells)), encoding="utf-8")
    return path


def invoke(*args: str, input: str | None = None):  # noqa: A002 (click's name)
    return CliRunner().invoke(app, list(args), input=input, catch_exceptions=False)


def code_sources(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return ["".join(cell["source"]) for cell in cells]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- discovery -----------------------------------------------------------------------------


def test_directories_yield_notebooks_next_to_python_files(tmp_path: Path) -> None:
    for name in ["b.py", "a.ipynb", "sub/c.ipynb", ".ipynb_checkpoints/a-checkpoint.ipynb"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}", encoding="utf-8")
    found = [Path(c.path).relative_to(tmp_path).as_posix() for c in discover([str(tmp_path)])]
    assert found == ["a.ipynb", "b.py", "sub/c.ipynb"]


# --- locations -----------------------------------------------------------------------------


def test_a_name_flows_between_cells_and_the_finding_names_its_cell(project: Path) -> None:
    write_notebook(project / "nb.ipynb", SEED_001_CELLS)
    result = invoke("check", "--format", "concise", "--select", "GF201", ".")
    assert result.stdout.splitlines() == [
        "nb.ipynb:cell 3:line 2:col 1: GF201 In-place `w.normal_()` on leaf `w` that requires"
        " grad (marked with requires_grad = True)"
    ]
    assert result.exit_code == 1


def test_json_findings_carry_the_cell_and_the_line_inside_it(project: Path) -> None:
    write_notebook(project / "nb.ipynb", SEED_001_CELLS)
    (project / "m.py").write_text("import torch\n", encoding="utf-8")
    [finding] = json.loads(invoke("check", "--format", "json", ".").stdout)
    assert (finding["path"], finding["cell"], finding["line"], finding["col"]) == (
        "nb.ipynb",
        3,
        2,
        1,
    )
    assert finding["end_line"] == 2 and finding["code"] == "GF201"


# a graph made in cell 1, backpropagated in a loop in cell 3 (program line 10): GF401
STALE_GRAPH_CELLS = [
    "import torch\n\nw = torch.randn(3, requires_grad=True)\nloss = (w * 2).sum()",
    "md:## Train\nthe loop",
    "opt = torch.optim.SGD([w], lr=0.1)\nfor step in range(3):\n    opt.zero_grad()\n"
    '    loss.backward()  # "again"\n    opt.step()',
]


def json_line_of(path: Path, cell: int, line: int) -> int:
    """The line of the file's JSON text that stores ``line`` of ``cell``'s source."""
    stored = json.dumps(json.loads(path.read_text())["cells"][cell - 1]["source"][line - 1])
    [number] = [n for n, text in enumerate(path.read_text().splitlines(), 1) if stored in text]
    return number


def test_sarif_places_a_notebook_finding_on_the_json_line_that_stores_its_code(
    project: Path,
) -> None:
    path = write_notebook(project / "explore.ipynb", STALE_GRAPH_CELLS)
    log = json.loads(invoke("check", "--format", "sarif", "--select", "GF401", ".").stdout)
    [result] = log["runs"][0]["results"]
    region = result["locations"][0]["physicalLocation"]["region"]
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "explore.ipynb"
    line = json_line_of(path, 1, 4)
    text = path.read_text().splitlines()[line - 1]
    assert region["startLine"] == region["endLine"] == line != 4
    assert text[region["startColumn"] - 1 : region["endColumn"] - 1] == "loss = (w * 2).sum()"
    assert result["properties"] == {"cell": 1, "cellLine": 4, "cellColumn": 1}
    assert result["message"]["text"].startswith("cell 1, line 4: Graph built once")


def test_a_columns_counts_the_json_escapes_before_it(project: Path) -> None:
    cells = [
        's = "tab\\t"; x = "é"\nimport torch\nw = torch.ones(2, requires_grad=True)\nw.zero_()'
    ]
    path = project / "nb.ipynb"
    path.write_text(json.dumps(notebook(cells), indent=1, ensure_ascii=True) + "\n")
    from gradfix.notebook import source_position

    position = source_position(path.read_text())
    assert position is not None
    text = path.read_text().splitlines()
    line, col = position(1, 1, 14)  # after `\\t` (written `\\\\t`), before `\u00e9`
    assert text[line - 1][col - 1 :].startswith('x = \\"\\u00e9')
    line, col = position(1, 4, 1)
    assert text[line - 1][col - 1 :].startswith("w.zero_()")


def test_github_annotations_of_a_notebook_name_the_cell_on_the_json_line(project: Path) -> None:
    path = write_notebook(project / "explore.ipynb", STALE_GRAPH_CELLS)
    output = invoke("check", "--format", "github", "--select", "GF401", ".").stdout
    assert f"file=explore.ipynb,line={json_line_of(path, 1, 4)},col=" in output
    assert "title=gradfix GF401 (backward-twice) in cell 1::GF401 cell 1, line 4: " in output


def test_messages_name_the_cell_and_line_of_the_code_they_point_at(project: Path) -> None:
    write_notebook(project / "explore.ipynb", STALE_GRAPH_CELLS)
    [finding] = json.loads(invoke("check", "--format", "json", "--select", "GF401", ".").stdout)
    assert (finding["cell"], finding["line"]) == (1, 4)
    assert "backpropagated in every iteration (cell 3, line 4)" in finding["message"]
    assert "line 10" not in finding["message"]


def test_a_message_naming_lines_of_several_cells_names_each() -> None:
    from gradfix.notebook import name_cell_lines, program_lines

    program = build_program(notebook(["a = 1\nb = 2", "md:text", "c = 3", "d = 4\ne = 5"]))
    places = program_lines(program.source)
    assert name_cell_lines("at line 3, 5 and (line 7-8)", places) == (
        "at cell 1, line 2; cell 3, line 1 and (cell 4, line 1-2)"
    )
    assert name_cell_lines("from line 2-5 but `line 2` stays", places) == (
        "from cell 1, line 1 to cell 3, line 1 but `line 2` stays"
    )


def test_findings_sort_by_cell_before_line() -> None:
    cells = [
        "import torch\nw = torch.empty(3, requires_grad=True)",
        "\n\n\nw.uniform_()\n(w * 1).sum().backward()",
        "w.zero_()",
    ]
    text = jupyter_text(notebook(cells))
    found = lint_notebook(text, rules=ALL_RULES).findings
    assert [(f.cell, f.line) for f in found] == [(2, 4), (3, 1)]
    assert sorted(reversed(found)) == found


# --- magics --------------------------------------------------------------------------------


def test_magics_are_kept_byte_for_byte_and_their_cells_still_fixed(project: Path) -> None:
    path = write_notebook(project / "nb.ipynb", MAGIC_CELLS)
    # without --no-verify: notebooks are not executed, and written as without verification
    result = invoke("fix", "--write", "nb.ipynb")
    assert result.exit_code == 0, result.stdout + result.stderr
    sources = code_sources(path)
    for line in MAGIC_LINES:
        assert sum(line in source for source in sources) == 1, line
    assert sources[0] == MAGIC_CELLS[0] and sources[1] == MAGIC_CELLS[1]
    assert sources[2] == MAGIC_CELLS[2].replace(
        "w.normal_()", "with torch.no_grad():\n    w.normal_()"
    )
    assert sources[3:] == MAGIC_CELLS[3:]


def test_a_cell_under_a_non_python_cell_magic_is_skipped() -> None:
    cells = [
        "import torch",
        "%%writefile train.py\nw = torch.ones(2, requires_grad=True)\n"
        "w.zero_()\n(w * 1).sum().backward(",
        "x = (1\n     % 2)",
    ]
    lint = lint_notebook(jupyter_text(notebook(cells)), rules=ALL_RULES)
    assert lint.findings == []


# --- cells that do not parse --------------------------------------------------------------

# an exercise blank in cell 3 (with a pitfall of its own that must stay untouched); the
# leaf of cell 1 is still followed into cell 4
BLANK_CELLS = [
    SEED_001_CELLS[0],
    "md:## Exercise",
    "w.zero_()\nmodel = ",
    SEED_001_CELLS[2],
    "print((w.grad,)",
    SEED_001_CELLS[3],
]
SKIPPED_LINES = [
    "nb.ipynb:cell 3: skipped: syntax error at line 2: invalid syntax",
    "nb.ipynb:cell 5: skipped: syntax error at line 1: '(' was never closed",
]


def test_a_cell_that_does_not_parse_is_skipped_and_the_others_checked(project: Path) -> None:
    write_notebook(project / "nb.ipynb", BLANK_CELLS)
    result = invoke("check", "--select", "GF201", "nb.ipynb")
    assert result.stdout.splitlines()[0].startswith("nb.ipynb:cell 4:line 2:col 1: GF201 ")
    assert result.stdout.splitlines()[-1] == (
        "Found 1 finding (1 fixable with `gradfix fix`). "
        "2 notebook cells could not be parsed (skipped)."
    )
    assert result.stderr.splitlines() == SKIPPED_LINES
    assert result.exit_code == 2  # like a syntax error in a Python file


def test_fix_write_fixes_the_other_cells_and_never_a_skipped_one(project: Path) -> None:
    path = write_notebook(project / "nb.ipynb", BLANK_CELLS)
    result = invoke("fix", "--write", "nb.ipynb")
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    verdicts = [line for line in lines if " GF201 " in line]
    if verdicts:  # with torch, the fix is proven first: the program runs without the cells
        assert [v.split(": GF201 ")[0] for v in verdicts] == ["nb.ipynb:cell 4:line 2:col 1"]
        assert " GF201 verified: " in verdicts[0]
    assert [line for line in lines if line not in verdicts] == [
        *SKIPPED_LINES,
        "Fixed 1 finding in 1 file. 2 notebook cells could not be parsed (skipped).",
    ]
    sources = code_sources(path)
    assert sources[3] == SEED_001_CELLS[2].replace(
        "w.normal_()", "with torch.no_grad():\n    w.normal_()"
    )
    assert [sources[i] for i in (0, 1, 2, 4, 5)] == [
        BLANK_CELLS[0],
        "## Exercise",
        BLANK_CELLS[2],
        BLANK_CELLS[4],
        BLANK_CELLS[5],
    ]


def test_the_stdin_filter_fixes_a_notebook_with_a_skipped_cell(project: Path) -> None:
    text = jupyter_text(notebook(BLANK_CELLS))
    result = invoke("fix", "-", "--stdin-filename", "nb.ipynb", input=text)
    assert result.exit_code == 2 and result.stderr.splitlines()[:2] == SKIPPED_LINES
    write_notebook(project / "nb.ipynb", BLANK_CELLS)
    invoke("fix", "--write", "nb.ipynb")
    assert result.stdout == (project / "nb.ipynb").read_text(encoding="utf-8")


def test_a_skipped_cell_survives_the_cache(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRADFIX_NO_CACHE", raising=False)
    write_notebook(project / "nb.ipynb", ["import torch", "model = "])
    for _ in range(2):  # the second run reads the cache: not a clean file, the same lines
        result = invoke("check", "nb.ipynb")
        assert result.exit_code == 2
        assert result.stderr == "nb.ipynb:cell 2: skipped: syntax error at line 1: invalid syntax\n"


def test_an_indented_cell_is_checked_and_fixed_in_place_as_ipython_runs_it(
    project: Path,
) -> None:
    # IPython removes the indentation of a cell whose first line is indented
    cells = [
        "import torch\nw = torch.ones(2, requires_grad=True)",
        "\n    %matplotlib inline\n    w.normal_()\n    for i in range(2):\n        w.zero_()",
        "  model = ",  # an indented exercise blank: still skipped, its line counted in it
    ]
    path = write_notebook(project / "nb.ipynb", cells)
    result = invoke("check", "--format", "concise", "nb.ipynb")
    assert [line.split(": GF")[0] for line in result.stdout.splitlines()] == [
        "nb.ipynb:cell 2:line 3:col 5",
        "nb.ipynb:cell 2:line 5:col 9",
    ]
    assert result.stderr == "nb.ipynb:cell 3: skipped: syntax error at line 1: invalid syntax\n"
    invoke("fix", "--write", "nb.ipynb")
    assert code_sources(path)[1] == (  # one block for both updates, in the cell's indentation
        "\n    %matplotlib inline\n    with torch.no_grad():\n        w.normal_()\n"
        "        for i in range(2):\n            w.zero_()"
    )
    path.unlink()
    write_notebook(path, cells)
    assert invoke("check", "--add-noqa", "nb.ipynb").stderr.startswith("Added 2 noqa comments")
    assert code_sources(path)[1] == cells[1].replace("_()", "_()  # noqa: GF201")
    assert invoke("check", "nb.ipynb").stdout == (
        "No findings. 1 notebook cell could not be parsed (skipped).\n"
    )


@pytest.mark.parametrize("suffix", [".json", ".md", ".html"])
def test_the_report_lists_the_skipped_cells(project: Path, suffix: str) -> None:
    write_notebook(project / "nb.ipynb", BLANK_CELLS)
    assert invoke("fix", "--report", f"report{suffix}", "nb.ipynb").exit_code == 2
    report = (project / f"report{suffix}").read_text(encoding="utf-8")
    skipped = [line.split(":", 1)[1] for line in SKIPPED_LINES]  # without the path
    if suffix == ".json":
        assert json.loads(report)["files"][0]["skipped_cells"] == skipped
    else:
        escape = html.escape if suffix == ".html" else str
        assert all(escape(cell) in report for cell in skipped)


@pytest.mark.parametrize(
    "line",
    [
        "w?",
        "??w",
        "w??",
        "torch.*Tensor?",
        "?torch.nn.*",
        "!ls -1",
        "files = !ls -1",
        "%matplotlib inline",
        "%time (w * 2).sum()",
        "%%time",
        "%%capture captured",
    ],
)
def test_ipython_syntax_is_not_an_error(line: str) -> None:
    cells = ["import torch\nw = torch.ones(2, requires_grad=True)", f"{line}\nw.zero_()"]
    lint = lint_notebook(jupyter_text(notebook(cells)), rules=ALL_RULES, fix=True)
    assert lint.skipped == []
    assert [(f.code, f.cell, f.line) for f in lint.findings] == [("GF201", 2, 2)]
    fixed = json.loads(lint.text)["cells"][1]["source"]
    assert fixed == [f"{line}\n", "with torch.no_grad():\n", "    w.zero_()"]


# --- writing -------------------------------------------------------------------------------


def test_fix_write_changes_only_the_fixed_cell_source(project: Path) -> None:
    path = write_notebook(project / "nb.ipynb", SEED_001_CELLS)
    before = json.loads(path.read_text(encoding="utf-8"))
    result = invoke("fix", "--write", "--no-verify", "nb.ipynb")
    assert result.exit_code == 0 and "Fixed 1 finding in 1 file." in result.stderr
    text = path.read_text(encoding="utf-8")
    after = json.loads(text)
    assert text == jupyter_text(after)  # indent 1, key order, raw é, final newline
    assert "température" in text
    expected = json.loads(json.dumps(before))
    expected["cells"][2]["source"] = [
        "x = torch.linspace(0.0, 1.0, 10)\n",
        "with torch.no_grad():\n",
        "    w.normal_()  # in place on a leaf",
    ]
    assert after == expected
    assert [list(cell) for cell in after["cells"]] == [list(cell) for cell in before["cells"]]


def test_the_file_s_own_json_layout_is_kept() -> None:
    data = notebook(SEED_001_CELLS)
    for text in [
        json.dumps(data, indent=2),  # ASCII escapes, no final newline, insertion order
        json.dumps(data, separators=(",", ":"), ensure_ascii=False) + "\n",
    ]:
        fixed = lint_notebook(text, rules=ALL_RULES, fix=True).text
        assert fixed != text
        after = json.loads(fixed)
        assert after["cells"][2]["source"][1] == "with torch.no_grad():\n"
        layout = {"indent": 2} if text.startswith("{\n") else {"separators": (",", ":")}
        ascii_only = "\\u00e9" in text
        final = "\n" if text.endswith("\n") else ""
        assert fixed == json.dumps(after, ensure_ascii=ascii_only, **layout) + final


def test_a_layout_gradfix_cannot_reproduce_is_reported_not_rewritten() -> None:
    text = json.dumps(notebook(SEED_001_CELLS), indent="\t")
    lint = lint_notebook(text, rules=ALL_RULES, fix=True)
    assert lint.text == text and len(lint.remaining) == 1
    assert lint.dropped and "JSON layout" in lint.dropped[0]


def test_fixing_is_idempotent(project: Path) -> None:
    path = write_notebook(project / "nb.ipynb", MAGIC_CELLS)
    assert invoke("fix", "--write", "--no-verify", "nb.ipynb").exit_code == 0
    once = path.read_bytes()
    result = invoke("fix", "--write", "--no-verify", "nb.ipynb")
    assert result.exit_code == 0 and "Nothing to fix." in result.stderr
    assert path.read_bytes() == once
    assert invoke("check", "nb.ipynb").exit_code == 0


def test_diff_preview_is_a_patch_of_the_json_naming_the_cell(project: Path) -> None:
    write_notebook(project / "nb.ipynb", SEED_001_CELLS)
    result = invoke("fix", "nb.ipynb")
    assert result.exit_code == 1
    assert result.stdout == (
        "--- a/nb.ipynb\n"
        "+++ b/nb.ipynb\n"
        "@@ -53,7 +53,8 @@ cell 3\n"
        "    ],\n"
        '    "source": [\n'
        '     "x = torch.linspace(0.0, 1.0, 10)\\n",\n'
        '-    "w.normal_()  # in place on a leaf"\n'
        '+    "with torch.no_grad():\\n",\n'
        '+    "    w.normal_()  # in place on a leaf"\n'
        "    ]\n"
        "   },\n"
        "   {\n"
    )


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_apply_of_the_preview_of_a_directory_gives_the_fixed_files(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    previewed, written = project / "previewed", project / "written"
    (previewed / "sub").mkdir(parents=True)
    (previewed / "train.py").write_text(
        "import torch\nw = torch.randn(3, requires_grad=True)\nw.normal_()\n", encoding="utf-8"
    )
    write_notebook(previewed / "nb.ipynb", SEED_001_CELLS)
    write_notebook(previewed / "sub" / "magic.ipynb", [*MAGIC_CELLS[:2], "md:x", *MAGIC_CELLS[2:]])
    shutil.copytree(previewed, written)
    monkeypatch.chdir(written)
    assert invoke("fix", "--write", ".").exit_code == 0
    monkeypatch.chdir(previewed)
    preview = invoke("fix", ".").stdout
    assert "@@ cell 3\n" in preview and "@@ cell 4\n" in preview  # the hunks name their cells
    applied = subprocess.run(["git", "apply", "-"], input=preview.encode(), capture_output=True)
    assert applied.returncode == 0, applied.stderr
    fixed = [path for path in written.rglob("*") if path.suffix in (".py", ".ipynb")]
    assert len(fixed) == 3
    for path in fixed:
        assert (previewed / path.relative_to(written)).read_bytes() == path.read_bytes(), path


def test_hunk_headers_name_the_cell_whatever_the_key_order() -> None:
    data = notebook(SEED_001_CELLS)
    reordered = {"metadata": data["metadata"], "nbformat": 4, "cells": data["cells"]}
    text = json.dumps(reordered, indent=2) + "\n"
    name = cell_at_line(text)
    lines = text.splitlines()
    for number, cell in enumerate(data["cells"], start=1):
        line = lines.index(f'      "id": "{cell["id"]}",') + 1
        assert name(line) == f"cell {number}"
    assert name(1) == name(2) == name(len(lines)) == ""  # outside the cells
    # on one line every cell shares the line: no name rather than a wrong one
    assert cell_at_line(json.dumps(data))(1) == ""


def test_stdin_notebook_is_fixed_to_stdout(project: Path) -> None:
    text = jupyter_text(notebook(SEED_001_CELLS))
    result = invoke("fix", "-", "--stdin-filename", "nb.ipynb", input=text)
    assert result.exit_code == 0
    assert json.loads(result.stdout)["cells"][2]["source"][1] == "with torch.no_grad():\n"


def test_fix_verify_executes_a_notebook_and_names_the_cell_in_its_verdict(project: Path) -> None:
    """The code cells run as one program in the notebook's directory (magics stubbed);
    the verdict names the cell and its line, in its place and in its reason."""
    pytest.importorskip("torch")
    cells = [SEED_001_CELLS[0], "%matplotlib inline\n" + SEED_001_CELLS[2], SEED_001_CELLS[3]]
    path = write_notebook(project / "nb.ipynb", cells)
    (project / "scale.txt").write_text("2.0", encoding="utf-8")  # read from its directory
    path.write_text(
        path.read_text("utf-8").replace(
            "linspace(0.0, 1.0, 10)", "linspace(0.0, float(open('scale.txt').read()), 10)"
        ),
        encoding="utf-8",
    )
    result = invoke("fix", "--verify", "--write", "nb.ipynb")
    assert "nb.ipynb:cell 2:line 3:col 1: GF201 verified: " in result.stderr, result.stderr
    assert "before raised RuntimeError at cell 2, line 3" in result.stderr
    assert "with torch.no_grad():\n" in code_sources(path)[1]
    assert "%matplotlib inline" in code_sources(path)[1]  # the magic kept byte for byte
    assert "cannot be verified" not in result.stderr


def test_a_notebook_verdict_names_its_cell_and_keeps_its_program_key(project: Path) -> None:
    """A silent graph cut in a cell is proven like a script's; the verdict shows the cell,
    its key stays the finding's place in the joined program (how fixes are applied)."""
    pytest.importorskip("torch")
    from gradfix.notebook_proof import verify_notebook_fixes
    from gradfix.registry import select_rules

    text = jupyter_text(notebook(["import torch\nw = torch.randn(3, requires_grad=True)",
                                  "a = torch.tensor([w[0] * 2, w[1]])",
                                  "(a.sum() + w.sum()).backward()"]))  # fmt: skip
    (verdict,) = verify_notebook_fixes("nb.ipynb", text, rules=select_rules(select=["GF101"]))
    assert verdict.line().startswith("nb.ipynb:cell 2:line 1:col 5: GF101 verified: ")
    assert verdict.to_dict()["cell"] == 2 and verdict.to_dict()["line"] == 1
    assert verdict.finding.line == verdict.evidence["program_line"] > 2


def test_fix_interactive_leaves_notebooks_alone_and_says_so(project: Path) -> None:
    path = write_notebook(project / "nb.ipynb", SEED_001_CELLS)
    (project / "a.py").write_text(
        "import torch\nw = torch.randn(3, requires_grad=True)\nw.normal_()\n", encoding="utf-8"
    )
    before = path.read_bytes()
    result = invoke("fix", "--interactive", ".", input="y\n")
    assert "nb.ipynb: note: notebooks are not reviewed interactively; skipped" in result.stderr
    assert path.read_bytes() == before
    assert "with torch.no_grad():" in (project / "a.py").read_text(encoding="utf-8")


# --- noqa comments -------------------------------------------------------------------------


def test_add_noqa_on_the_example_comments_the_cell_and_keeps_every_other_byte(
    project: Path,
) -> None:
    path = project / EXAMPLE.name
    shutil.copy(EXAMPLE, path)
    original = path.read_text(encoding="utf-8")
    result = invoke("check", "--add-noqa", EXAMPLE.name)
    assert (result.exit_code, result.stdout) == (0, "All checks passed.\n")
    assert result.stderr == "Added 1 noqa comment in 1 file.\n"
    line = '    "w.normal_()  # initialise the weight"\n'
    assert original.count(line) == 1
    commented = line.replace("weight", "weight  # noqa: GF201")
    assert path.read_text(encoding="utf-8") == original.replace(line, commented)
    after = json.loads(path.read_text(encoding="utf-8"))
    assert [c.get("outputs") for c in after["cells"]] == [
        c.get("outputs") for c in json.loads(original)["cells"]
    ]
    again = invoke("check", EXAMPLE.name)
    assert (again.exit_code, again.stdout, again.stderr) == (0, "All checks passed.\n", "")


def test_add_noqa_comments_cells_with_magics_and_the_notebook_checks_clean(project: Path) -> None:
    cells = [*SEED_001_CELLS[:3], *MAGIC_CELLS[1:3], "model = "]
    path = write_notebook(project / "nb.ipynb", cells)
    expected = notebook(cells)
    expected["cells"][2]["source"][1] = "w.normal_()  # in place on a leaf  # noqa: GF201"
    expected["cells"][4]["source"][-1] = "w.normal_()  # noqa: GF201"
    result = invoke("check", "--add-noqa", "nb.ipynb")
    assert result.stderr.splitlines() == [
        "Added 2 noqa comments in 1 file.",
        "nb.ipynb:cell 6: skipped: syntax error at line 1: invalid syntax",
    ]
    assert result.exit_code == 2  # the skipped cell
    assert path.read_text(encoding="utf-8") == jupyter_text(expected)
    again = invoke("check", "nb.ipynb")
    assert again.exit_code == 2 and again.stdout == (
        "No findings. 1 notebook cell could not be parsed (skipped).\n"
    )


def test_add_noqa_keeps_a_source_held_as_one_string(project: Path) -> None:
    data = notebook(SEED_001_CELLS)
    data["cells"][2]["source"] = "".join(data["cells"][2]["source"])
    path = project / "nb.ipynb"
    path.write_text(jupyter_text(data), encoding="utf-8")
    assert invoke("check", "--add-noqa", "nb.ipynb").exit_code == 0
    source = json.loads(path.read_text(encoding="utf-8"))["cells"][2]["source"]
    assert source == SEED_001_CELLS[2].replace("leaf", "leaf  # noqa: GF201")


def test_add_noqa_refuses_a_json_layout_it_cannot_write_back(project: Path) -> None:
    path = project / "nb.ipynb"
    text = json.dumps(notebook(SEED_001_CELLS), indent="\t")
    path.write_text(text, encoding="utf-8")
    result = invoke("check", "--add-noqa", "nb.ipynb")
    assert result.exit_code == 2
    assert (
        "nb.ipynb: cannot add noqa comments: the notebook's JSON layout is not the one "
        "Jupyter writes (re-save it with Jupyter, then run again)\n" in result.stderr
    )
    assert path.read_text(encoding="utf-8") == text


# --- fixes across cells --------------------------------------------------------------------


def test_a_fix_that_would_join_two_cells_is_reported_not_applied(project: Path) -> None:
    # GF201 wraps consecutive in-place statements in one `with` block: here the two
    # statements end one cell and start the next.
    cells = [
        "import torch\nw = torch.empty(3, requires_grad=True)\nb = torch.empty(3, "
        "requires_grad=True)\nw.normal_()",
        "b.zero_()\n(w * b).sum().backward()",
        "v = torch.empty(2, requires_grad=True)\nv.uniform_()\n(v * 1).sum().backward()",
    ]
    path = write_notebook(project / "nb.ipynb", cells)
    result = invoke("fix", "--write", "--no-verify", "nb.ipynb")
    assert (
        "nb.ipynb: note: did not apply a fix that would move code across notebook cells "
        "(GF201 at cell 1 line 4, GF201 at cell 2 line 1): Wrap in `torch.no_grad()`"
    ) in result.stderr
    assert result.exit_code == 1
    sources = code_sources(path)
    assert sources[:2] == cells[:2]
    assert sources[2] == cells[2].replace("v.uniform_()", "with torch.no_grad():\n    v.uniform_()")
    locations = [line.split(": GF")[0] for line in result.stdout.splitlines()]
    assert locations == ["nb.ipynb:cell 1:line 4:col 1", "nb.ipynb:cell 2:line 1:col 1"]


def test_an_import_the_fix_needs_goes_into_the_first_cell() -> None:
    cells = [
        "%matplotlib inline\nfrom torch import nn",
        "md:text",
        "p = nn.Parameter(nn.Linear(2, 2).weight.detach())\np.normal_()\n(p * 2).sum().backward()",
    ]
    fixed = json.loads(lint_notebook(jupyter_text(notebook(cells)), rules=ALL_RULES, fix=True).text)
    sources = ["".join(cell["source"]) for cell in fixed["cells"]]
    assert sources[0] == "import torch\n" + cells[0]
    assert "with torch.no_grad():\n    p.normal_()" in sources[2]


def test_an_import_the_fix_needs_takes_the_indentation_of_an_indented_first_cell() -> None:
    cells = [
        "\t%matplotlib inline\n\tfrom torch import nn",
        "md:text",
        "p = nn.Parameter(nn.Linear(2, 2).weight.detach())\np.normal_()",
    ]
    lint = lint_notebook(jupyter_text(notebook(cells)), rules=ALL_RULES, fix=True)
    assert lint.remaining == [] and lint.dropped == []
    sources = ["".join(cell["source"]) for cell in json.loads(lint.text)["cells"]]
    assert sources[0] == "\timport torch\n" + cells[0]


# --- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"cells": [', "not a Jupyter notebook: invalid JSON at line 1 column 12: "),
        ("[1, 2]", 'not a Jupyter notebook: no "nbformat" version'),
        ('{"nbformat": 4}', 'not a Jupyter notebook: no "cells" list'),
        ('{"nbformat": 3, "worksheets": []}', "nbformat 3 notebook: only nbformat 4"),
    ],
)
def test_a_bad_notebook_is_one_error_line_and_the_run_goes_on(
    project: Path, text: str, message: str
) -> None:
    (project / "bad.ipynb").write_text(text, encoding="utf-8")
    write_notebook(project / "good.ipynb", SEED_001_CELLS)
    run = process_paths(["."], RunOptions(rules=ALL_RULES))
    bad, good = run.files
    assert bad.error is not None and bad.error.startswith(message) and "\n" not in bad.error
    assert good.error is None and [f.code for f in good.findings] == ["GF201"]
    result = invoke("check", ".")
    assert result.exit_code == 2 and f"bad.ipynb: {message}" in result.stderr


def test_a_notebook_of_another_language_has_nothing_to_check() -> None:
    data = notebook(SEED_001_CELLS)
    data["metadata"]["language_info"] = {"name": "R"}
    assert lint_notebook(jupyter_text(data), rules=ALL_RULES).findings == []


# --- the bundled example -------------------------------------------------------------------


def test_the_example_notebook_shows_seed_001_and_is_fixed() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    lint = lint_notebook(text, rules=ALL_RULES, fix=True)
    assert [(f.code, f.cell) for f in lint.findings] == [("GF201", 4)]
    assert lint.remaining == [] and lint.dropped == []
    assert json.loads(lint.text)["cells"][3]["outputs"] == json.loads(text)["cells"][3]["outputs"]


def test_the_example_notebook_fix_is_verified_by_execution() -> None:
    pytest.importorskip("torch")
    from gradfix.verify import verify_sources

    program = build_program(json.loads(EXAMPLE.read_text(encoding="utf-8")))
    fixed, notes = fix_program(program, ALL_RULES, path=str(EXAMPLE), unsafe_fixes=True)
    assert fixed != program.source and notes == []
    verdict = verify_sources(program.source, fixed, filename=EXAMPLE.name)
    assert verdict.status == "verified", verdict.reason
