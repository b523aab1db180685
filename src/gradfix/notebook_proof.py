"""Notebooks proven by execution: the fixes of an ``.ipynb`` run as the joined program.

A notebook is checked and fixed as one program, its code cells joined in order
(:mod:`gradfix.notebook`: magics and shell lines are placeholder statements, so the
program runs). The verifier executes that program, before and after each fix, with the
notebook's directory as the working directory (as Jupyter starts a kernel there), and
each verdict names the cell and its line, in its location and in its reason.

    verdicts = verify_notebook_fixes("explore.ipynb", text, rules=select_rules())
    verdicts[0].line()   # explore.ipynb:cell 3:line 2:col 1: GF201 verified: ...
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gradfix.proof import FixVerdict

#: the joined program's name beside the notebook (``explore.ipynb.py``): it is not a module
#: name, so nothing of the project imports it by chance
PROGRAM_SUFFIX = ".py"


def verify_notebook_fixes(path: str, text: str, **options: Any) -> list[FixVerdict]:
    """:func:`gradfix.proof.verify_fixes` on the notebook's joined program; each verdict's
    ``shown`` finding and reason are in cells (the ``finding`` stays at its place in the
    program, the key ``fix --verify`` applies fixes by)."""
    from gradfix.notebook import build_program, load_notebook
    from gradfix.proof import verify_fixes

    program = build_program(load_notebook(text))
    if not program.cells:
        return []
    source = program.source
    script = path + PROGRAM_SUFFIX
    verdicts = verify_fixes(script, source, **options)
    return [in_cells(verdict, path, source) for verdict in verdicts]


def program_source(text: str) -> str:
    """The joined program of the notebook file ``text`` (what the verifier runs)."""
    from gradfix.notebook import build_program, load_notebook

    return build_program(load_notebook(text)).source


def in_cells(verdict: FixVerdict, path: str, source: str) -> FixVerdict:
    """``verdict`` on the notebook ``path``: shown at its cell and line, and every line
    of the program its reason names (``at line 64``, ``explore.ipynb.py:64``) said as
    the cell's (``at cell 3, line 2``, :func:`gradfix.notebook.name_cell_lines`)."""
    from gradfix.notebook import locate, name_cell_lines, program_lines

    script = re.escape(path.rsplit("/", 1)[-1] + PROGRAM_SUFFIX)
    reason = re.sub(rf"(?:\S*/)?{script}:(\d+)", r"line \1", verdict.reason)
    return dataclasses.replace(
        verdict,
        path=path,
        reason=name_cell_lines(reason, program_lines(source)),
        shown=locate(verdict.finding, source),
        evidence={**verdict.evidence, "program_line": verdict.finding.line},
    )
