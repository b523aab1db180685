"""Output formats of ``gradfix check`` beyond plain lines: GitHub annotations, SARIF 2.1.0,
and ``--statistics``. Pure functions from findings to text.

    print(github_annotations([("src/a.py", finding)]))
    print(json.dumps(sarif_log([("src/a.py", finding)], rules)))

Both locate a notebook's finding in the file's JSON text (the line of the cell's
``source`` that holds the code), given each notebook's :data:`Positions` (from
:func:`gradfix.notebook.source_position`), and name the cell and its line in the
message.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from gradfix.rule import Finding, Rule

if TYPE_CHECKING:
    from gradfix.engine import SingleFix

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/gradfix/gradfix"

Located = tuple[str, Finding]
#: path of a notebook -> ``(cell, line, col)`` -> ``(line, col)`` in its JSON text
Positions = Mapping[str, Callable[[int, int, int], tuple[int, int]]]


def file_region(path: str, f: Finding, positions: Positions | None) -> tuple[int, int, int, int]:
    """``(line, col, end_line, end_col)`` of ``f`` in the file ``path`` itself: for a
    notebook finding, where its code is written in the JSON text (lines of the cell when
    the notebook's positions are unknown)."""
    position = None if f.cell is None or positions is None else positions.get(path)
    if position is None or f.cell is None:
        return f.line, f.col, f.end_line, f.end_col
    line, col = position(f.cell, f.line, f.col)
    end_line, end_col = position(f.cell, f.end_line, f.end_col)
    return line, col, end_line, end_col


def github_annotations(findings: Sequence[Located], positions: Positions | None = None) -> str:
    """One ``::warning`` workflow command per finding (GitHub Actions annotations)."""
    lines = []
    for path, f in findings:
        line, col, end_line, end_col = file_region(path, f, positions)
        properties = ",".join(
            [
                f"file={_escape_property(path)}",
                f"line={line}",
                f"col={col}",
                f"endLine={end_line}",
                f"endColumn={end_col}",
                f"title={_escape_property(f'gradfix {f.code} ({f.name}){_cell(f)}')}",
            ]
        )
        message = f"{f.code} {_in_cell(f)}{f.message}"
        lines.append(f"::warning {properties}::{_escape_data(message)}")
    return "\n".join(lines)


def _cell(f: Finding) -> str:
    """Notebook findings count lines from their cell's first line: say which cell."""
    return "" if f.cell is None else f" in cell {f.cell}"


def _in_cell(f: Finding) -> str:
    """``cell 3, line 2: `` before a notebook finding's message."""
    return "" if f.cell is None else f"cell {f.cell}, line {f.line}: "


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def sarif_log(
    findings: Sequence[Located],
    rules: Sequence[type[Rule]],
    version: str = "0",
    positions: Positions | None = None,
) -> dict[str, Any]:
    """A SARIF 2.1.0 log with one run: the rules that ran and one result per finding."""
    index = {rule.code: i for i, rule in enumerate(rules)}
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "gradfix",
                        "version": version,
                        "informationUri": INFORMATION_URI,
                        "rules": [_sarif_rule(rule) for rule in rules],
                    }
                },
                "columnKind": "unicodeCodePoints",
                "results": [_sarif_result(path, f, index, positions) for path, f in findings],
            }
        ],
    }


def _sarif_rule(rule: type[Rule]) -> dict[str, Any]:
    riskiest = rule.riskiest_safety()
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.message},
        "fullDescription": {"text": rule.description()},
        "help": {"text": rule.docs(), "markdown": rule.docs()},
        "defaultConfiguration": {"level": "warning", "enabled": rule.default_enabled},
        "properties": {
            "fixSafety": None if riskiest is None else riskiest.value,
            "fix": rule.fix_label(),
            "fixAvailability": rule.fix_availability.value,
            "fixSafeties": [safety.value for safety in rule.offered_safeties()],
        },
    }


def _sarif_result(
    path: str, f: Finding, index: dict[str, int], positions: Positions | None
) -> dict[str, Any]:
    line, col, end_line, end_col = file_region(path, f, positions)
    result: dict[str, Any] = {
        "ruleId": f.code,
        "level": "warning",
        "message": {"text": f.message},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": {"uri": PurePath(path).as_posix()},
                    "region": {
                        "startLine": line,
                        "startColumn": col,
                        "endLine": end_line,
                        "endColumn": end_col,
                    },
                }
            }
        ],
    }
    if f.code in index:
        result["ruleIndex"] = index[f.code]
    properties: dict[str, Any] = {}
    if f.fix is not None:
        properties["fix"] = {"safety": f.fix.safety, "description": f.fix.description}
    if f.cell is not None:
        properties["cell"] = f.cell  # and where in it: the region is the JSON file's
        properties["cellLine"], properties["cellColumn"] = f.line, f.col
        result["message"]["text"] = f"{_in_cell(f)}{f.message}"
    if properties:
        result["properties"] = properties
    return result


STATISTICS_LEGEND = "[*] every finding of the rule has a safe fix: `gradfix fix --write` fixes them"


def statistics(findings: Sequence[Located], rules: Sequence[type[Rule]]) -> str:
    """Per-rule counts, most frequent first (ruff's ``--statistics``), a total row and the
    legend of ``[*]``, which marks rules whose findings here all have a safe fix;
    ``No findings.`` without any."""
    if not findings:
        return "No findings."
    counts = Counter(f.code for _, f in findings)
    names = {rule.code: rule.name for rule in rules}
    fixable = {
        code: all(
            f.fix is not None and f.fix.safety == "safe" for _, f in findings if f.code == code
        )
        for code in counts
    }
    width = len(str(len(findings)))
    rows = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    lines = [
        f"{n:>{width}}  {code}  {'[*]' if fixable[code] else '[ ]'} {names.get(code, '')}"
        for code, n in rows
    ]
    code_width = max(len(code) for code in counts)
    total = f"{len(findings):>{width}}  {'':{code_width}}  total"
    return "\n".join([*lines, total, STATISTICS_LEGEND])


def code_frames(
    path: str,
    source: str,
    findings: Sequence[Finding],
    rules: Sequence[type[Rule]],
    singles: Sequence[SingleFix] | None = None,
) -> dict[tuple[int, int, str], list[str]]:
    """For ``check``'s text output: per finding (``(line, col, code)``), the lines under
    its location line: the source line with carets under the finding, and the diff of its
    fix applied alone (``= fix (safe): ...`` then ``-``/``+`` lines). ``singles``: the
    fixes applied alone from the lint that found ``findings`` (else the source is linted
    again for them)."""
    from gradfix.engine import SourceError, single_fixes
    from gradfix.fileio.text import LINE

    lines = LINE.findall(source)  # broken where the tokenizer breaks lines (a lone \r too)
    if singles is None:
        try:
            singles = single_fixes(source, rules=rules, path=path)
        except SourceError:
            singles = []
    fixes = {(f.line, f.col, f.code): single for single in singles for f in single.findings}
    #: the finding whose frame shows each fix's diff: a fix shared by N findings (one
    #: ``no_grad`` block around N updates) is diffed and printed once, not N times
    shown: dict[int, Finding] = {}
    frames: dict[tuple[int, int, str], list[str]] = {}
    for f in findings:
        if f.cell is not None or not 1 <= f.line <= len(lines):
            continue
        text = lines[f.line - 1].rstrip("\r\n")
        width = len(str(f.line))
        end = f.end_col if f.end_line == f.line else len(text) + 1
        carets = " " * (f.col - 1) + "^" * max(1, end - f.col)
        frame = [f"{' ' * width} |", f"{f.line} | {text}", f"{' ' * width} | {carets}"]
        single = fixes.get((f.line, f.col, f.code))
        if single is not None and single.source is not None:
            first = shown.setdefault(id(single), f)
            fix_line = f"{' ' * width} = fix ({single.safety}): {single.description}"
            if first is not f:
                frame.append(f"{fix_line} (shared with line {first.line}, shown there)")
            else:
                frame.append(fix_line)
                frame += _fix_diff(source, single.source, path, width)
        frames[(f.line, f.col, f.code)] = frame
    return frames


def _fix_diff(source: str, fixed: str, path: str, width: int) -> list[str]:
    """The ``-``/``+`` lines of a fix in a code frame, indented under ``width``."""
    from gradfix.fileio.diff import unified_diff

    diff = unified_diff(source, fixed, path, context=0).splitlines()
    return [
        f"{' ' * width}   {line}"
        for line in diff
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
