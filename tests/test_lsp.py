"""``gradfix lsp``: JSON-RPC round trips with the server as a subprocess, and its helpers.

The client below frames messages with ``Content-Length`` headers (no LSP client library):
a reader thread queues what the server sends and answers the server's own requests.
Every wait has a timeout and the process is killed in a ``finally``.
"""

from __future__ import annotations

import ast
import json
import queue
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lsprotocol import types
from pygls.workspace import PositionCodec

from gradfix.engine import SourceError, lint_source
from gradfix.lsp import (
    BufferLint,
    ClientText,
    NotebookCheck,
    Settings,
    carried,
    finding_range,
    noqa_edit,
    read_settings,
    syntax_diagnostics,
    text_edits,
    verdict_note,
)
from gradfix.proof import FixVerdict
from gradfix.registry import select_rules
from gradfix.rule import Finding, FixSafety, Rule

BUGGY = """import torch
a = torch.nn.Parameter(torch.rand(5))
a0 = a[0] * 2
a1 = torch.log(a[1] + 1)
A = torch.tensor([a0, a1])  # keep me
A.sum().backward()
"""
FIXED = BUGGY.replace("torch.tensor([a0, a1])", "torch.stack([a0, a1])")
SUPPRESSED = BUGGY.replace("# keep me", "# keep me  # noqa: GF101")
CLEAN = "import torch\nx = torch.tensor([1.0, 2.0])\n"
SYNTAX_ERROR = "import torch\nx = torch.tensor([1,\n"
LSP_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")  # a line as LSP counts it
TIMEOUT = 30.0  # seconds for any one answer (the server answers in well under one)


class LspClient:
    """A minimal LSP client over the server's stdin/stdout."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self.stdin: BinaryIO = process.stdin
        self.messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.pending: list[dict[str, Any]] = []  # notifications read while waiting
        self.next_id = 0
        self.configuration: Any = None  # the answer to workspace/configuration
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, args=(process.stdout,), daemon=True)
        self.reader.start()

    # framing

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        with self.lock:
            self.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            self.stdin.flush()

    def _read(self, stdout: BinaryIO) -> None:
        while True:
            headers: dict[str, str] = {}
            while (line := stdout.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                headers[name.strip().lower()] = value.strip()
            if not line:
                self.messages.put(None)  # the server closed its stdout
                return
            message = json.loads(stdout.read(int(headers["content-length"])))
            if "method" in message and "id" in message:
                self._answer(message)
            else:
                self.messages.put(message)

    def _answer(self, request: dict[str, Any]) -> None:
        """The server's requests: ``configuration`` for each configuration item, else null."""
        items = request.get("params", {}).get("items", [])
        result = None
        if request["method"] == "workspace/configuration":
            result = [self.configuration] * len(items)
        self.send({"id": request["id"], "result": result})

    # requests and notifications

    def notify(self, method: str, params: Any) -> None:
        self.send({"method": method, "params": params})

    def request(self, method: str, params: Any) -> Any:
        self.next_id += 1
        wanted = self.next_id
        self.send({"id": wanted, "method": method, "params": params})
        answer = self._next(lambda m: m.get("id") == wanted, f"the answer to {method}")
        assert "error" not in answer, answer
        return answer["result"]

    def wait_for(self, method: str, accept: Callable[[Any], bool] = lambda _: True) -> Any:
        """The params of the next ``method`` notification that ``accept`` takes."""
        message = self._next(
            lambda m: m.get("method") == method and accept(m["params"]), f"a {method}"
        )
        return message["params"]

    def _next(self, matches: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        for index, message in enumerate(self.pending):
            if matches(message):
                return self.pending.pop(index)
        while True:
            try:
                message = self.messages.get(timeout=TIMEOUT)
            except queue.Empty:
                raise AssertionError(f"no {what} within {TIMEOUT}s") from None
            if message is None:
                raise AssertionError(f"the server exited while waiting for {what}")
            if matches(message):
                return message
            self.pending.append(message)

    # conveniences

    def initialize(self, root: Path, options: Any = None, capabilities: Any = None) -> Any:
        result = self.request(
            "initialize",
            {
                "processId": None,
                "rootUri": root.as_uri(),
                "capabilities": capabilities or {},
                "initializationOptions": options,
            },
        )
        self.notify("initialized", {})
        return result

    def open(self, uri: str, text: str) -> None:
        self.notify(
            "textDocument/didOpen",
            {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}},
        )

    def change(self, uri: str, version: int, text: str) -> None:
        self.notify(
            "textDocument/didChange",
            {"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]},
        )

    def diagnostics(self, uri: str, version: int | None = None) -> list[dict[str, Any]]:
        params = self.wait_for(
            "textDocument/publishDiagnostics",
            lambda p: p["uri"] == uri and (version is None or p.get("version") == version),
        )
        return params["diagnostics"]

    def code_actions(self, uri: str, span: dict[str, Any], only: list[str] | None = None) -> Any:
        context: dict[str, Any] = {"diagnostics": []}
        if only is not None:
            context["only"] = only
        return self.request(
            "textDocument/codeAction",
            {"textDocument": {"uri": uri}, "range": span, "context": context},
        )

    def stop(self) -> int:
        assert self.request("shutdown", None) is None
        self.notify("exit", None)
        return self.process.wait(timeout=TIMEOUT)


@pytest.fixture
def server(tmp_path: Path):
    process = subprocess.Popen(
        [sys.executable, "-m", "gradfix", "lsp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    try:
        yield LspClient(process)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=TIMEOUT)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()


def apply(text: str, edits: list[dict[str, Any]]) -> str:
    """Apply LSP text edits (positions in UTF-16 code units) to ``text``."""
    lines = LSP_LINE.findall(text)

    def offset(position: dict[str, int]) -> int:
        before = "".join(lines[: position["line"]])
        line = lines[position["line"]] if position["line"] < len(lines) else ""
        units = line.encode("utf-16-le")[: 2 * position["character"]].decode("utf-16-le")
        return len(before) + len(units)

    spans = [(offset(e["range"]["start"]), offset(e["range"]["end"]), e["newText"]) for e in edits]
    for start, end, new in sorted(spans, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def edits_of(action: dict[str, Any], uri: str) -> list[dict[str, Any]]:
    return action["edit"]["changes"][uri]


def titled(actions: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
    matching = [a for a in actions if a["title"].startswith(prefix)]
    assert len(matching) == 1, [a["title"] for a in actions]
    return matching[0]


# --- round trips ---------------------------------------------------------------------------


def test_round_trip(server: LspClient, tmp_path: Path) -> None:
    uri = (tmp_path / "train.py").as_uri()
    capabilities = server.initialize(tmp_path)["capabilities"]
    assert capabilities["codeActionProvider"]["codeActionKinds"] == [
        "quickfix",
        "source.fixAll.gradfix",
    ]
    assert capabilities["hoverProvider"]

    server.open(uri, BUGGY)
    [diagnostic] = server.diagnostics(uri)
    assert diagnostic["code"] == "GF101"
    assert diagnostic["source"] == "gradfix"
    assert diagnostic["severity"] == types.DiagnosticSeverity.Warning
    assert diagnostic["message"].startswith("`torch.tensor()` of tensors cuts the autograd graph")
    # `torch.tensor([a0, a1])` on line 5 (0-based 4), columns 4 to 26
    span = {"start": {"line": 4, "character": 4}, "end": {"line": 4, "character": 26}}
    assert diagnostic["range"] == span

    actions = server.code_actions(uri, span)
    quick_fix = titled(actions, "Fix GF101: Use `torch.stack`")
    assert quick_fix["kind"] == "quickfix" and quick_fix["isPreferred"]
    assert quick_fix["diagnostics"] == [diagnostic]  # the diagnostic as published
    # the minimal edit: `tensor` -> `stack`, nothing else of the line is resent
    assert edits_of(quick_fix, uri) == [
        {
            "range": {"start": {"line": 4, "character": 10}, "end": {"line": 4, "character": 16}},
            "newText": "stack",
        }
    ]
    assert apply(BUGGY, edits_of(quick_fix, uri)) == FIXED
    suppress = titled(actions, "Suppress GF101 with a comment")
    assert apply(BUGGY, edits_of(suppress, uri)) == SUPPRESSED
    fix_all = titled(actions, "Fix all gradfix")
    assert fix_all["kind"] == "source.fixAll.gradfix"
    assert apply(BUGGY, edits_of(fix_all, uri)) == FIXED

    # an editor's "fix all on save" asks for source.fixAll only, anywhere in the file
    anywhere = {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}
    [only_fix_all] = server.code_actions(uri, anywhere, only=["source.fixAll"])
    assert only_fix_all["kind"] == "source.fixAll.gradfix"
    assert server.code_actions(uri, anywhere, only=["quickfix"]) == []

    hover = server.request(
        "textDocument/hover",
        {"textDocument": {"uri": uri}, "position": {"line": 4, "character": 12}},
    )
    assert hover["contents"]["kind"] == "markdown"
    assert hover["contents"]["value"].startswith("### GF101 tensor-from-tensors")
    assert "## What it does" in hover["contents"]["value"]
    assert hover["range"] == span
    away = {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 3}}
    assert server.request("textDocument/hover", away) is None

    server.change(uri, 2, CLEAN)
    assert server.diagnostics(uri, version=2) == []
    server.change(uri, 3, BUGGY)
    assert [d["code"] for d in server.diagnostics(uri, version=3)] == ["GF101"]
    # what a buffer looks like while typing; the line of the finding is gone
    server.change(uri, 4, SYNTAX_ERROR)
    assert server.diagnostics(uri, version=4) == []
    assert server.code_actions(uri, span) == []
    server.notify("textDocument/didSave", {"textDocument": {"uri": uri}})
    assert server.diagnostics(uri, version=4) == []
    server.change(uri, 5, BUGGY)
    assert [d["code"] for d in server.diagnostics(uri, version=5)] == ["GF101"]
    server.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    assert server.diagnostics(uri) == []  # a closed file keeps no warnings
    assert server.code_actions(uri, span) == []

    assert server.stop() == 0


def test_a_buffer_that_does_not_parse_keeps_the_findings_of_its_unchanged_lines(
    server: LspClient, tmp_path: Path
) -> None:
    uri = (tmp_path / "train.py").as_uri()
    server.initialize(tmp_path)
    server.open(uri, BUGGY)
    [good] = server.diagnostics(uri, version=1)
    # a line being typed above the finding: the finding moves down with its line
    typing = BUGGY.replace("a0 = a[0] * 2\n", "a0 = a[0] * 2\nfor x in\n")
    server.change(uri, 2, typing)
    [kept] = server.diagnostics(uri, version=2)
    shifted = {side: {**good["range"][side], "line": 5} for side in ("start", "end")}
    assert kept == {**good, "range": shifted}
    logged = server.wait_for("window/logMessage", lambda p: "train.py" in p["message"])
    assert "line 4" in logged["message"] and "no quick fixes" in logged["message"]
    # no fix is offered for a buffer that does not parse: it would apply to another text
    assert server.code_actions(uri, shifted) == []
    # the finding's own line changed: it goes; the buffer still does not parse
    server.change(uri, 3, typing.replace("a1])", "a1, x])"))
    assert server.diagnostics(uri, version=3) == []
    # once the buffer parses, its own findings are published
    server.change(uri, 4, typing.replace("for x in\n", "for x in a:\n    pass\n"))
    [fresh] = server.diagnostics(uri, version=4)
    assert fresh["range"]["start"]["line"] == 6
    assert server.stop() == 0


# a leaf made in cell 1 and initialised in place in cell 3 (as tests/test_notebooks.py);
# IPython lines in cells 1 and 3, a markdown cell 2
NOTEBOOK_CELLS = [
    "%matplotlib inline\nimport torch\n\nw = torch.FloatTensor(10)\nw.requires_grad = True",
    "## Initialise",
    "x = torch.linspace(0.0, 1.0, 10)\n!nvidia-smi\nw.normal_()  # in place on a leaf",
    "(w * x).sum().backward()\nprint(w.grad)",
]
FIXED_CELL_3 = (
    "x = torch.linspace(0.0, 1.0, 10)\n!nvidia-smi\n"
    "with torch.no_grad():\n    w.normal_()  # in place on a leaf"
)


def open_notebook(server: LspClient, tmp_path: Path) -> tuple[str, list[str]]:
    """Open NOTEBOOK_CELLS as VS Code does; the notebook's URI and its cells' URIs."""
    notebook = (tmp_path / "train.ipynb").as_uri()
    # VS Code's cell URIs: the notebook's path and a quoted fragment
    cells = [f"vscode-notebook-cell:{tmp_path}/train.ipynb#W{n}sZmlsZQ%3D%3D" for n in range(4)]
    kinds = [types.NotebookCellKind.Code, types.NotebookCellKind.Markup] + [
        types.NotebookCellKind.Code
    ] * 2
    languages = ["python", "markdown", "python", "python"]
    server.notify(
        "notebookDocument/didOpen",
        {
            "notebookDocument": {
                "uri": notebook,
                "notebookType": "jupyter-notebook",
                "version": 1,
                "cells": [{"kind": k, "document": uri} for k, uri in zip(kinds, cells)],
            },
            "cellTextDocuments": [
                {"uri": uri, "languageId": language, "version": 1, "text": text}
                for uri, language, text in zip(cells, languages, NOTEBOOK_CELLS)
            ],
        },
    )
    return notebook, cells


def change_cell(server: LspClient, notebook: str, version: int, cell: str, text: str) -> None:
    server.notify(
        "notebookDocument/didChange",
        {
            "notebookDocument": {"uri": notebook, "version": version},
            "change": {
                "cells": {
                    "textContent": [
                        {"document": {"uri": cell, "version": version}, "changes": [{"text": text}]}
                    ]
                }
            },
        },
    )


def test_notebook_cells_are_checked_as_one_program(server: LspClient, tmp_path: Path) -> None:
    synchronization = {"notebookDocument": {"synchronization": {}}}
    capabilities = server.initialize(tmp_path, capabilities=synchronization)["capabilities"]
    [selector] = capabilities["notebookDocumentSync"]["notebookSelector"]
    assert selector["cells"] == [{"language": "python"}]
    notebook, cells = open_notebook(server, tmp_path)

    # the leaf of cell 1 is found misused in cell 3, in the cell's own lines
    assert server.diagnostics(cells[0], version=1) == []
    assert server.diagnostics(cells[1], version=1) == []  # markdown
    [diagnostic] = server.diagnostics(cells[2], version=1)
    assert server.diagnostics(cells[3], version=1) == []
    assert diagnostic["code"] == "GF201"
    span = {"start": {"line": 2, "character": 0}, "end": {"line": 2, "character": 11}}
    assert diagnostic["range"] == span

    actions = server.code_actions(cells[2], span)
    quick_fix = titled(actions, "Fix GF201")
    assert list(quick_fix["edit"]["changes"]) == [cells[2]]  # an edit of the cell, not the file
    assert apply(NOTEBOOK_CELLS[2], edits_of(quick_fix, cells[2])) == FIXED_CELL_3
    suppress = titled(actions, "Suppress GF201 with a comment")
    assert apply(NOTEBOOK_CELLS[2], edits_of(suppress, cells[2])) == NOTEBOOK_CELLS[2].replace(
        "leaf", "leaf  # noqa: GF201"
    )
    [fix_all] = server.code_actions(cells[2], span, only=["source.fixAll"])
    assert apply(NOTEBOOK_CELLS[2], edits_of(fix_all, cells[2])) == FIXED_CELL_3
    assert server.code_actions(cells[3], span, only=["source.fixAll"]) == []
    hover = server.request(
        "textDocument/hover",
        {"textDocument": {"uri": cells[2]}, "position": {"line": 2, "character": 3}},
    )
    assert hover["contents"]["value"].startswith("### GF201 leaf-inplace")

    # a line being typed in cell 3 above the finding: kept, one line down, no fixes
    change_cell(server, notebook, 2, cells[2], "for i in\n" + NOTEBOOK_CELLS[2])
    [kept] = server.diagnostics(cells[2], version=2)
    assert kept["range"]["start"]["line"] == 3 and kept["code"] == "GF201"
    assert server.code_actions(cells[2], kept["range"]) == []
    logged = server.wait_for("window/logMessage", lambda p: "train.ipynb" in p["message"])
    assert "cell 3: syntax error at line 1" in logged["message"]
    # the comment the suppress action adds silences the finding
    change_cell(
        server, notebook, 3, cells[2], apply(NOTEBOOK_CELLS[2], edits_of(suppress, cells[2]))
    )
    assert server.diagnostics(cells[2], version=3) == []
    change_cell(server, notebook, 4, cells[2], NOTEBOOK_CELLS[2])
    assert server.diagnostics(cells[2], version=4) == [diagnostic]

    # cell 1 no longer makes a leaf that requires grad: cell 3 has nothing to say
    change_cell(server, notebook, 5, cells[0], NOTEBOOK_CELLS[0].replace("w.requires_grad", "w.x"))
    assert server.diagnostics(cells[2], version=4) == []

    server.notify(
        "notebookDocument/didClose",
        {"notebookDocument": {"uri": notebook}, "cellTextDocuments": [{"uri": c} for c in cells]},
    )
    assert server.code_actions(cells[2], span) == []
    assert server.stop() == 0


def test_notebook_cells_added_and_deleted(server: LspClient, tmp_path: Path) -> None:
    server.initialize(tmp_path, capabilities={"notebookDocument": {"synchronization": {}}})
    notebook, cells = open_notebook(server, tmp_path)
    assert [d["code"] for d in server.diagnostics(cells[2], version=1)] == ["GF201"]
    # cell 3 replaced by a new cell with the same bug on its first line
    added = f"vscode-notebook-cell:{tmp_path}/train.ipynb#W9sZmlsZQ%3D%3D"
    structure = {
        "array": {"start": 2, "deleteCount": 1, "cells": [{"kind": 2, "document": added}]},
        "didOpen": [{"uri": added, "languageId": "python", "version": 1, "text": "w.zero_()"}],
        "didClose": [{"uri": cells[2]}],
    }
    server.notify(
        "notebookDocument/didChange",
        {
            "notebookDocument": {"uri": notebook, "version": 2},
            "change": {"cells": {"structure": structure}},
        },
    )
    assert server.diagnostics(cells[2]) == []  # a deleted cell keeps no warnings
    [diagnostic] = server.diagnostics(added, version=1)
    assert diagnostic["range"]["start"] == {"line": 0, "character": 0}
    server.notify("notebookDocument/didSave", {"notebookDocument": {"uri": notebook}})
    assert server.diagnostics(added, version=1) == [diagnostic]
    # new settings check the notebook again, its cells as cells (alone, `w` is unknown)
    server.notify("workspace/didChangeConfiguration", {"settings": {"gradfix.ignore": ["GF101"]}})
    assert server.diagnostics(added, version=1) == [diagnostic]
    server.notify("workspace/didChangeConfiguration", {"settings": {"gradfix.ignore": ["GF201"]}})
    assert server.diagnostics(added, version=1) == []
    assert server.stop() == 0


def test_a_file_name_that_is_quoted_in_its_uri(server: LspClient, tmp_path: Path) -> None:
    uri = (tmp_path / "my train.py").as_uri()  # .../my%20train.py
    server.initialize(tmp_path)
    server.open(uri, BUGGY)
    [diagnostic] = server.diagnostics(uri)
    assert titled(server.code_actions(uri, diagnostic["range"]), "Fix GF101")
    assert server.stop() == 0


def test_settings_select_and_ignore(server: LspClient, tmp_path: Path) -> None:
    uri = (tmp_path / "train.py").as_uri()
    pull = {"workspace": {"configuration": True}}
    server.initialize(tmp_path, options={"gradfix": {"ignore": ["GF101"]}}, capabilities=pull)
    server.open(uri, BUGGY)
    assert server.diagnostics(uri) == []

    # a client that keeps its settings: it says "changed", the server asks for the section
    server.configuration = {"ignore": []}
    server.notify("workspace/didChangeConfiguration", {"settings": None})
    assert [d["code"] for d in server.diagnostics(uri)] == ["GF101"]

    # pushed settings with dotted keys; an unknown code: a message, and the default rules
    server.notify("workspace/didChangeConfiguration", {"settings": {"gradfix.select": ["GF999"]}})
    shown = server.wait_for("window/showMessage")
    assert "'GF999' in the editor setting gradfix.select" in shown["message"]
    assert "--select" not in shown["message"]
    assert [d["code"] for d in server.diagnostics(uri)] == ["GF101"]
    server.notify("workspace/didChangeConfiguration", {"settings": {"gradfix.select": ["GF2"]}})
    assert server.diagnostics(uri, version=1) == []
    assert server.stop() == 0


def test_exit_without_shutdown_is_status_1(server: LspClient, tmp_path: Path) -> None:
    server.initialize(tmp_path)
    server.notify("exit", None)
    assert server.process.wait(timeout=TIMEOUT) == 1


def send_raw(server: LspClient, data: bytes) -> None:
    with server.lock:
        server.stdin.write(data)
        server.stdin.flush()


def body(message: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **message}).encode()


def test_a_bad_header_is_answered_and_the_server_goes_on(server: LspClient, tmp_path: Path) -> None:
    """``Content-Length: abc`` once wedged the server (alive, never answering again): a
    request framed wrong gets a parse error, anything else framed wrong is skipped, and
    the next well-formed message is answered."""
    uri = (tmp_path / "train.py").as_uri()
    hover = {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 0}}
    send_raw(server, b"Content-Length: abc\r\n\r\n" + body({"id": "bad", "method": "initialize"}))
    answer = server._next(lambda m: m.get("id") == "bad", "the answer to the bad header")
    assert answer["error"]["code"] == -32700
    server.initialize(tmp_path)
    server.open(uri, BUGGY)
    assert server.diagnostics(uri)
    bad = [
        b"Content-Length: abc\r\n\r\n" + body({"id": 7, "method": "textDocument/hover"}),
        b"Content-Length: -5\r\n\r\n" + body({"method": "initialized", "params": {}}),
        b"Content-Length: 99999999999999\r\n\r\n",
        b"Content-Type: text/plain\r\n\r\n" + body({"id": 8, "method": "x", "params": "{[\\"}),
        b"garbage without a header\r\n\r\n",
        b"Content-Length: 5\r\n\r\n{nope",
    ]
    for data in bad:
        send_raw(server, data)
    for wanted in (7, 8):
        answer = server._next(lambda m, wanted=wanted: m.get("id") == wanted, f"answer {wanted}")
        assert answer["error"]["code"] == -32700
    server.request("textDocument/hover", hover)  # answered, without an error
    actions = server.code_actions(
        uri, {"start": {"line": 4, "character": 4}, "end": {"line": 4, "character": 26}}
    )
    assert titled(actions, "Fix GF101")
    assert server.stop() == 0


def test_verify_setting_puts_the_verdict_in_the_quick_fix(
    server: LspClient, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    path = tmp_path / "train.py"
    path.write_text(BUGGY)
    server.initialize(tmp_path, options={"gradfix": {"verify": True}})
    server.open(path.as_uri(), BUGGY)
    [first] = server.diagnostics(path.as_uri())
    assert first["message"].endswith("use `torch.stack()`")  # static result at once
    # the verdict arrives later (the oracle runs in subprocesses) with new diagnostics
    [proven] = server.diagnostics(path.as_uri())
    assert proven["message"].endswith("(fix verified)")
    quick_fix = titled(server.code_actions(path.as_uri(), first["range"]), "Fix GF101")
    assert quick_fix["title"] == "Fix GF101: Use `torch.stack` (verified)"
    assert quick_fix["diagnostics"] == [proven]  # the diagnostic as published
    assert apply(BUGGY, edits_of(quick_fix, path.as_uri())) == FIXED
    assert server.stop() == 0


def test_the_last_trace_of_the_file_is_shown_until_its_line_changes(
    server: LspClient, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    from gradfix.trace import run_trace
    from gradfix.trace.remembered import remember

    # a dict of losses kept by a method: static analysis does not see it, a run does
    history = (Path(__file__).parent / "data" / "trace" / "trainer_history.py").read_text()
    path = tmp_path / "train.py"
    path.write_text(history)
    command = [sys.executable, "train.py"]
    result = run_trace(command, stdout=subprocess.DEVNULL, cwd=str(tmp_path))
    remember(
        result.findings, command, cache_dir=str(tmp_path / ".gradfix_cache"), cwd=str(tmp_path)
    )
    uri = path.as_uri()
    server.initialize(tmp_path)
    server.open(uri, history)
    [ran] = server.diagnostics(uri, version=1)  # no static finding: the run's only
    assert (ran["source"], ran["code"]) == ("gradfix trace", "GF403")
    assert ran["message"].startswith("the dict `self.history` keeps the graphs")
    assert ran["message"].endswith(f"(from a run of `{sys.executable} train.py`, step 3)")
    line = "        self.history[i] = loss * 1.0  # GF403: a dict of graphs"
    assert ran["range"] == {"start": {"line": 11, "character": 8},
                            "end": {"line": 11, "character": len(line)}}  # fmt: skip
    moved = "# a comment above\n" + history  # the finding moves down with its line
    server.change(uri, 2, moved)
    [down] = server.diagnostics(uri, version=2)
    assert down["range"]["start"]["line"] == 12
    server.change(uri, 3, history.replace("loss * 1.0", "loss.item()"))
    assert server.diagnostics(uri, version=3) == []  # the line changed: the run is stale
    server.change(uri, 4, history)
    assert [d["source"] for d in server.diagnostics(uri, version=4)] == ["gradfix trace"]
    assert server.stop() == 0


# --- helpers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "line", "expected"),
    [
        ("x = f(a)\n", 1, "x = f(a)  # noqa: GF101\n"),
        ("x = f(a)   \n", 1, "x = f(a)  # noqa: GF101   \n"),
        ("x = f(a)  # why\n", 1, "x = f(a)  # why  # noqa: GF101\n"),
        ("x = f(a)  # noqa: E501\n", 1, "x = f(a)  # noqa: E501, GF101\n"),
        ("x = f(a)  # noqa: E501 W291\n", 1, "x = f(a)  # noqa: E501 W291, GF101\n"),
        ("x = f(a)  # noqa:E501,W291  # why\n", 1, "x = f(a)  # noqa:E501,W291, GF101  # why\n"),
        ("x = f(a)  # gradfix: ignore[GF201]\n", 1, "x = f(a)  # gradfix: ignore[GF201, GF101]\n"),
        ("x = f(\n    a,\n)\n", 1, "x = f(  # noqa: GF101\n    a,\n)\n"),
        ("x = f(a)", 1, "x = f(a)  # noqa: GF101"),
        ("s = 'é'; x = f(a)\n", 1, "s = 'é'; x = f(a)  # noqa: GF101\n"),
        ("\x0c\nx = f(a)  # why\r\n", 2, "\x0c\nx = f(a)  # why  # noqa: GF101\r\n"),
    ],
)
def test_noqa_edit(source: str, line: int, expected: str) -> None:
    edit = noqa_edit(source, line, "GF101")
    assert edit is not None
    column, text = edit
    lines = LSP_LINE.findall(source)
    lines[line - 1] = lines[line - 1][:column] + text + lines[line - 1][column:]
    assert "".join(lines) == expected


@pytest.mark.parametrize(
    "source",
    [
        "x = f(a)  # noqa: GF101\n",  # suppressed already
        "x = f(a)  # NOQA\n",  # every code is
        "x = f(a)  # gradfix: ignore[gf101]\n",
        "x = f(a)  # gradfix: ignore\n",
        "x = f(a)  # noqa: E501 GF101\n",
        "x = f(a) + \\\n    g(b)\n",  # a comment after a line continuation breaks the code
        "x = f('''\n''')\n",  # inside a string
    ],
)
def test_noqa_edit_refuses(source: str) -> None:
    assert noqa_edit(source, 1, "GF101") is None


def test_read_settings() -> None:
    assert read_settings(None) == Settings()
    nested = read_settings(
        {"gradfix": {"select": ["GF1"], "ignore": "GF101, GF104", "verify": True}}
    )
    assert nested == Settings(select=("GF1",), ignore=("GF101", "GF104"), verify=True)
    assert read_settings({"verify": True}) == Settings(verify=True)
    assert read_settings({"gradfix.verify": True, "gradfix.select": ["GF2"]}) == Settings(
        select=("GF2",), verify=True
    )
    # a later source only overrides the keys it has; "true" as a string is not a boolean
    assert read_settings({"gradfix": {"verify": "true"}}, nested).verify is False
    assert read_settings({"gradfix": {"ignore": []}}, nested).select == ("GF1",)


def as_json(edits: list[types.TextEdit]) -> list[dict[str, Any]]:
    return [
        {
            "range": {
                "start": {"line": e.range.start.line, "character": e.range.start.character},
                "end": {"line": e.range.end.line, "character": e.range.end.character},
            },
            "newText": e.new_text,
        }
        for e in edits
    ]


def test_text_edits_are_minimal_and_count_utf16_units() -> None:
    old = "import os\ns = '😋'; x = torch.tensor([a, b])\ny = 1\n"
    new = "import torch\nimport os\ns = '😋'; x = torch.stack([a, b])\ny = 1\n"
    edits = text_edits(ClientText(old), new)
    assert [(e.range.start, e.range.end, e.new_text) for e in edits] == [
        (types.Position(0, 0), types.Position(0, 0), "import torch\n"),
        # the emoji is two UTF-16 code units: `tensor` starts at code point 19, unit 20
        (types.Position(1, 20), types.Position(1, 26), "stack"),
    ]
    assert apply(old, as_json(edits)) == new
    assert text_edits(ClientText(old), old) == []
    # a client that negotiated UTF-32 counts code points
    utf32 = ClientText(old, PositionCodec(types.PositionEncodingKind.Utf32))
    assert text_edits(utf32, new)[1].range.start == types.Position(1, 19)


PIECES = st.sampled_from(["a", "b", " ", "😋", "é", "\n", "\r\n", "\r", "\x0c", "\t"])


@given(st.lists(PIECES, max_size=30), st.lists(PIECES, max_size=30))
def test_text_edits_turn_any_text_into_any_other(old: list[str], new: list[str]) -> None:
    edits = text_edits(ClientText("".join(old)), "".join(new))
    assert apply("".join(old), as_json(edits)) == "".join(new)


def test_finding_positions_follow_lsp_lines_and_utf16() -> None:
    # a form feed is no line break for LSP and LibCST (str.splitlines breaks there)
    source = (
        "import torch\n\x0c\na = torch.nn.Parameter(torch.rand(2))\n"
        "s = '😋'; A = torch.tensor([a[0], a[1]])\n"
    )
    [finding] = lint_source(source, rules=select_rules(["GF101"])).findings
    assert (finding.line, finding.col, finding.end_col) == (4, 14, 40)
    span = finding_range(finding, ClientText(source))
    # 0-based line 3; the emoji is two UTF-16 units: code points 13 to 39 are units 14 to 40
    assert (span.start, span.end) == (types.Position(3, 14), types.Position(3, 40))


class Crashes(Rule):
    """A rule with a bug."""

    code = "GF999"
    name = "crashes"
    message = "never reported"
    fix_safety = FixSafety.SAFE

    def visit_Call(self, node: ast.Call) -> None:
        raise RuntimeError("a bug in a rule")


def test_a_crashing_rule_leaves_the_buffer_without_findings() -> None:
    lint = BufferLint.of("file:///t.py", ClientText(BUGGY), "t.py", [Crashes])
    assert lint.findings == [] and lint.error is None
    assert lint.singles() == [] and lint.fixed_safe() == BUGGY


def test_carried_findings_follow_their_unchanged_lines() -> None:
    def at(line: int, end_line: int) -> Finding:
        return Finding(line, 1, "GF101", "n", "m", end_line, 3)

    old = "a\nb\nc\nd\ne"
    findings = [at(1, 1), at(2, 3), at(4, 4), at(5, 5)]
    assert carried(findings, old, old) == findings
    # a line inserted above b, c changed, the last line gets a line break and more text
    new = "a\nnew\nb\nC\nd\ne\nf("
    assert carried(findings, old, new) == [at(1, 1), at(5, 5), at(6, 6)]
    # d deleted: e moves up; a two-line finding survives when both its lines do
    assert carried([at(2, 3), at(5, 5)], old, "a\nb\nc\r\ne") == [at(2, 3), at(4, 4)]
    # a line inserted inside a two-line finding: its lines are no longer one span
    assert carried([at(2, 3)], old, "a\nb\nx\nc\nd\ne") == []
    assert carried(findings, old, "") == []


LINES = st.lists(st.sampled_from(["a\n", "b\n", "c\r\n", "\n", "d"]), max_size=12)


@given(LINES, LINES)
def test_carried_findings_stay_on_their_own_text(old: list[str], new: list[str]) -> None:
    def lines(pieces: list[str]) -> list[str]:
        return [line.rstrip("\r\n") for line in LSP_LINE.findall("".join(pieces))]

    old_lines, new_lines = lines(old), lines(new)
    # one finding per line, its column says which line it was found on
    findings = [Finding(n, n, "GF101", "n", "m", n, n) for n in range(1, len(old_lines) + 1)]
    kept = carried(findings, "".join(old), "".join(new))
    assert all(new_lines[f.line - 1] == old_lines[f.col - 1] for f in kept)
    assert [f.line for f in kept] == sorted({f.line for f in kept})  # in order, one a line
    if old_lines == new_lines:
        assert kept == findings


def notebook_check(cells: list[str]) -> tuple[NotebookCheck, list[str]]:
    """``cells`` checked as a notebook's (``md:`` ones are markdown); the cells' URIs."""
    uris = [f"cell:{number}" for number in range(len(cells))]
    texts = [None if text.startswith("md:") else ClientText(text) for text in cells]
    return NotebookCheck.of("nb:", list(zip(uris, texts)), "nb.ipynb", select_rules()), uris


def test_notebook_fixes_are_edits_of_the_cells_they_change() -> None:
    # an import the fix needs goes into the first cell: one edit of two cells
    cells = [
        "%matplotlib inline\nfrom torch import nn",
        "md:text",
        "p = nn.Parameter(nn.Linear(2, 2).weight.detach())\np.normal_()\n(p * 2).sum().backward()",
    ]
    check, uris = notebook_check(cells)
    lint = check.cell(uris[2])
    assert lint is not None and check.cell(uris[1]) is None
    [single] = [s for s in lint.singles() if s.findings[0].code == "GF201"]
    edit = lint.fix_edit(single)
    assert edit is not None and edit.changes is not None
    assert sorted(edit.changes) == [uris[0], uris[2]]
    assert apply(cells[0], as_json(edit.changes[uris[0]])) == "import torch\n" + cells[0]
    fixed = apply(cells[2], as_json(edit.changes[uris[2]]))
    assert "with torch.no_grad():\n    p.normal_()" in fixed


def test_a_notebook_fix_that_would_join_two_cells_is_not_offered() -> None:
    # GF201 wraps the last statement of cell 1 and the first of cell 2 in one block
    cells = [
        "import torch\nw = torch.empty(3, requires_grad=True)\n"
        "b = torch.empty(3, requires_grad=True)\nw.normal_()",
        "b.zero_()\n(w * b).sum().backward()",
        "v = torch.empty(2, requires_grad=True)\nv.uniform_()\n(v * 1).sum().backward()",
    ]
    check, uris = notebook_check(cells)
    first, third = check.cell(uris[0]), check.cell(uris[2])
    assert first is not None and third is not None
    [joining] = first.singles()
    assert first.fix_edit(joining) is None and first.fix_all_edit() is None
    fix_all = third.fix_all_edit()
    assert (
        fix_all is not None and fix_all.changes is not None and list(fix_all.changes) == [uris[2]]
    )
    assert apply(cells[2], as_json(fix_all.changes[uris[2]])) == cells[2].replace(
        "v.uniform_()", "with torch.no_grad():\n    v.uniform_()"
    )


def test_a_notebook_cell_that_does_not_parse_is_left_out() -> None:
    check, uris = notebook_check(
        ["import torch\nw = torch.ones(2, requires_grad=True)", "w.(", "w.zero_()"]
    )
    assert check.broken == {uris[1]: "cell 2: syntax error at line 1: invalid syntax"}
    assert [(f.cell, f.code) for f in check.findings] == [(3, "GF201")]


def test_verdict_note_keeps_titles_short() -> None:
    [finding] = lint_source(BUGGY, rules=select_rules(["GF101"])).findings
    verified = FixVerdict("t.py", finding, "verified", "forward results match; ...", "safe", "")
    assert verdict_note(verified) == "verified"
    reason = "a forward result changed: " + "x" * 100 + "; max difference 1.0"
    rejected = replace(verified, status="rejected", reason=reason)
    note = verdict_note(rejected)
    assert note.startswith("rejected: a forward result changed: xxx") and note.endswith("...")
    assert len(note) == len("rejected: ") + 80


def test_syntax_diagnostics() -> None:
    # code Python rejects: the Python language server says so, gradfix stays quiet
    assert syntax_diagnostics(SourceError("syntax error at line 2", 2), SYNTAX_ERROR) == []
    # code Python accepts and gradfix cannot parse: one Error, so the user knows why
    error = SourceError("syntax error at line 2: ... (LibCST cannot parse this syntax)", 2)
    [diagnostic] = syntax_diagnostics(error, CLEAN)
    assert diagnostic.severity == types.DiagnosticSeverity.Error
    assert diagnostic.range == types.Range(types.Position(1, 0), types.Position(2, 0))
    assert diagnostic.message.startswith("gradfix cannot check this file: syntax error at line 2")


def test_project_configuration_applies_under_the_editor_settings(
    server: LspClient, tmp_path: Path
) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.gradfix]\nignore = ["GF201"]\n[tool.gradfix.per-file-ignores]\n'
        '"legacy_*" = ["GF101"]\n',
        encoding="utf-8",
    )
    server.initialize(tmp_path)
    legacy, current = (tmp_path / "legacy_train.py").as_uri(), (tmp_path / "train.py").as_uri()
    server.open(legacy, BUGGY)
    assert server.diagnostics(legacy) == []  # per-file-ignores of the project
    server.open(current, BUGGY + "a.normal_()\n")
    assert [d["code"] for d in server.diagnostics(current)] == ["GF101"]  # GF201 ignored
    assert server.stop() == 0


def test_a_change_is_linted_at_once_and_changes_meanwhile_together() -> None:
    """No fixed delay after a change: the lint starts at once; changes that arrive while
    it runs are checked by one more lint right after it (not one per keystroke)."""
    import asyncio

    from gradfix.lsp import create_server

    server = create_server()
    linted: list[str] = []

    async def lint(uri: str, *, verify: bool) -> None:
        linted.append(uri)
        if len(linted) == 1:
            for _ in range(3):
                server.lint_soon(uri)  # typing goes on while the first lint runs
        await asyncio.sleep(0)

    server.lint = lint  # type: ignore[method-assign]

    async def typing() -> None:
        server.lint_soon("file:///a.py")
        server.lint_soon("file:///b.py")
        await asyncio.sleep(0)  # the lints start without waiting for a pause in typing
        assert linted == ["file:///a.py", "file:///b.py"]
        while server.tasks:
            await asyncio.gather(*list(server.tasks))

    asyncio.run(typing())
    assert linted.count("file:///a.py") == 2 and linted.count("file:///b.py") == 1
    assert not server.linting and not server.changed_again


# --- start-up (issue 32): initialize answered before the server is imported -------------

CLIENTS = [
    {},
    {"general": {"positionEncodings": ["utf-8", "utf-16"]}},
    {"general": {"positionEncodings": ["utf-32"]}},
    {"general": {"positionEncodings": ["latin-1"]}},
    {"general": {}},
    {"notebookDocument": {"synchronization": {"dynamicRegistration": True}}},
    {"textDocument": {"synchronization": {"willSave": True, "willSaveWaitUntil": False}}},
    {"workspace": {"workspaceFolders": True, "configuration": True}},
]


def test_the_early_answer_to_initialize_is_the_servers_own() -> None:
    """pygls' own answer (the server started without :func:`gradfix.lsp.serve`) for each
    client is the one ``serve`` sends before importing it."""
    from gradfix.lsp import initialize_result

    for capabilities in CLIENTS:
        params = {"processId": None, "rootUri": None, "capabilities": capabilities}
        process = subprocess.Popen(
            [sys.executable, "-c", "from gradfix.lsp_server import run; run()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        client = LspClient(process)
        try:
            assert client.request("initialize", params) == initialize_result(params), capabilities
            client.stop()
        finally:
            if process.poll() is None:
                process.kill()


def test_initialize_is_answered_without_the_server() -> None:
    """With pygls unimportable, ``gradfix lsp`` still answers ``initialize`` (then fails
    to start the server): the answer does not wait for the imports."""
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "initialize",
            "params": {"processId": None, "capabilities": {}},
        }
    ).encode()
    script = "import sys; sys.modules['pygls'] = None; from gradfix.lsp import serve; serve()"
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=b"Content-Length: %d\r\n\r\n" % len(body) + body,
        capture_output=True,
        timeout=TIMEOUT,
    )
    assert b"ModuleNotFoundError" in done.stderr and b"pygls" in done.stderr
    header, _, answer = done.stdout.partition(b"\r\n\r\n")
    assert json.loads(answer)["id"] == 7
    assert json.loads(answer)["result"]["capabilities"]["positionEncoding"] == "utf-16"


def test_importing_the_server_loads_neither_the_engine_nor_torch() -> None:
    """``gradfix.lsp`` loads no pygls; the server itself (created) no LibCST, torch, rules
    or engine: they come with the first lint."""
    script = """
import sys
heavy = ("libcst", "torch", "gradfix.codemods", "gradfix.engine", "gradfix.proof")
def loaded(names):
    return sorted(m for m in sys.modules if m.split(".")[0] in names or m in names)
import gradfix.lsp
print(loaded(("pygls", "lsprotocol", *heavy)))
from gradfix.lsp import BufferLint, ClientText, create_server
create_server()
print(loaded(heavy))
BufferLint.of("file:///m.py", ClientText("import torch\\n"), "m.py", create_server().rules)
print(loaded(("libcst", "gradfix.codemods", "gradfix.engine")))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=TIMEOUT * 4, text=True
    )
    assert done.returncode == 0, done.stderr
    bare, server, linted = done.stdout.splitlines()
    assert bare == "[]"
    assert server == "[]"
    assert "libcst" in linted and "gradfix.engine" in linted and "gradfix.codemods" in linted


def test_typing_back_to_a_text_is_not_a_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    """The full lint after an incremental one waits for the buffer to stay at the linted
    version: an undo back to the linted text meanwhile is typing, not a pause."""
    import asyncio
    from types import SimpleNamespace

    import gradfix.lsp_server
    from gradfix.lsp import create_server

    monkeypatch.setattr(gradfix.lsp_server, "CONFIRM_DELAY", 0)
    server = create_server()
    document = SimpleNamespace(version=5, source=BUGGY)  # versions 4 and 5: away and back
    server.open_document = lambda uri: document  # type: ignore[method-assign]
    confirmed: list[int] = []
    lint = SimpleNamespace(
        source=BUGGY,
        incremental=True,
        snapshot=None,
        findings=[],
        confirm=lambda: confirmed.append(1),
    )

    async def in_engine(function: Any, *args: Any) -> Any:
        return function(*args)

    server.in_engine = in_engine  # type: ignore[method-assign,assignment]
    asyncio.run(server.confirm_soon("file:///m.py", lint, 3))  # type: ignore[arg-type]
    assert confirmed == []
    asyncio.run(server.confirm_soon("file:///m.py", lint, 5))  # type: ignore[arg-type]
    assert confirmed == [1]
