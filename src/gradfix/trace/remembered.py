"""The findings of the last ``gradfix trace`` of each file, kept for the editor.

``remember(findings, command, cache_dir=...)`` stores what a traced run found in the
project's ``.gradfix_cache/`` (the content-hash cache's directory, written atomically), one
entry per file: its findings, each with the text of its line, and the command that found
them. A new run of the same command replaces what that command found before, in every file.

``remembered(path, source)`` gives back the findings of ``path`` that still stand in
``source`` (the editor's buffer): a finding is shown while its line's text is unchanged;
when the line moved (lines added above it), on the one line that holds that text; when the
text is gone or ambiguous, not at all. The cache is looked for in the file's directory and
its parents, so the language server finds it wherever it runs.

    remember(result.findings, ["python", "train.py"], cache_dir=".gradfix_cache")
    for finding in remembered("/project/train.py", buffer_text):
        finding.line, finding.code, finding.message, finding.command

Needs nothing but the standard library (no torch).
"""

from __future__ import annotations

import hashlib
import os
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gradfix.cache import CACHE_DIR_NAME, ResultCache
from gradfix.noqa import LINE
from gradfix.trace.launch import RuntimeFinding

#: The entry's key in :class:`gradfix.cache.ResultCache` (a fixed name, not a hash).
ENTRY = "trace-last-run"
VERSION = 1


@dataclass(frozen=True)
class RememberedFinding:
    """A finding of the last trace of a file, placed on its line in the current text."""

    line: int  # 1-based, in the current text
    code: str
    kind: str
    message: str
    step: int | None
    command: str  # the traced command, as the user would type it


def remember(
    findings: Sequence[RuntimeFinding], command: Sequence[str], *, cache_dir: str, cwd: str = "."
) -> None:
    """Store a traced run's findings in ``cache_dir`` (a ``.gradfix_cache``, see the module
    doc); ``cwd``: where the command ran (relative paths of findings start there). A cache
    that cannot be written is skipped."""
    cache = ResultCache(cache_dir)
    ran = shlex.join(command)
    files = _files(cache.get(ENTRY))
    for path in list(files):
        kept = [f for f in files[path] if f.get("command") != ran]
        if kept:
            files[path] = kept
        else:
            del files[path]
    for finding in findings:
        path = os.path.abspath(os.path.join(cwd, finding.path))
        line = _line_text(path, finding.line)
        if line is not None:
            files.setdefault(path, []).append(_record(finding, line, ran))
    cache.put(ENTRY, {"version": VERSION, "files": files})


def remembered(path: str, source: str) -> list[RememberedFinding]:
    """The last trace's findings of ``path`` whose line ``source`` still holds."""
    entry = _find_entry(os.path.dirname(os.path.abspath(path)))
    records = _files(entry).get(os.path.abspath(path), [])
    if not records:
        return []
    lines = [line.rstrip("\r\n") for line in LINE.findall(source)]
    places: dict[str, list[int]] = {}
    for number, text in enumerate(lines, start=1):
        places.setdefault(_digest(text), []).append(number)
    found = []
    for record in records:
        line = _placed(record, lines, places)
        if line is not None:
            found.append(
                RememberedFinding(
                    line,
                    str(record.get("code")),
                    str(record.get("kind")),
                    str(record.get("message")),
                    record.get("step"),
                    str(record.get("command")),
                )
            )
    return found


def _record(finding: RuntimeFinding, line: str, command: str) -> dict[str, Any]:
    return {
        "line": finding.line,
        "line_hash": _digest(line),
        "code": finding.code,
        "kind": finding.kind,
        "message": finding.message,
        "step": finding.step,
        "command": command,
    }


def _placed(record: dict[str, Any], lines: list[str], places: dict[str, list[int]]) -> int | None:
    """The record's line if its text is unchanged there, else the one line holding it."""
    line, digest = record.get("line"), record.get("line_hash")
    if isinstance(line, int) and 0 < line <= len(lines) and _digest(lines[line - 1]) == digest:
        return line
    moved = places.get(str(digest), [])
    return moved[0] if len(moved) == 1 else None


def _files(entry: dict[str, Any] | None) -> dict[str, list[dict[str, Any]]]:
    if entry is None or entry.get("version") != VERSION or not isinstance(entry.get("files"), dict):
        return {}
    return {
        path: [r for r in records if isinstance(r, dict)]
        for path, records in entry["files"].items()
        if isinstance(records, list)
    }


def _find_entry(directory: str) -> dict[str, Any] | None:
    """The entry of the nearest ``.gradfix_cache`` that has one, from ``directory`` up."""
    for folder in _parents(directory):
        entry = ResultCache(os.path.join(folder, CACHE_DIR_NAME)).get(ENTRY)
        if entry is not None:
            return entry
    return None


def _parents(directory: str) -> Iterator[str]:
    while True:
        yield directory
        parent = os.path.dirname(directory)
        if parent == directory:
            return
        directory = parent


def _line_text(path: str, line: int) -> str | None:
    try:
        with open(path, encoding="utf-8", newline="") as source:
            lines = LINE.findall(source.read())
    except (OSError, UnicodeDecodeError):
        return None
    return lines[line - 1].rstrip("\r\n") if 0 < line <= len(lines) else None


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
