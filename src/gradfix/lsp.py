"""``gradfix lsp``: the language server (:mod:`gradfix.lsp_server`) and how it starts.

Importing pygls' protocol types alone takes 0.4-0.7 s, LibCST and the rules as long
again: an editor would wait for all of it before the answer to ``initialize``. So
:func:`serve` reads the ``initialize`` request itself, answers it at once with the
capabilities the server has (:func:`initialize_result`, the same JSON that pygls builds
for the same client: ``tests/test_lsp.py`` compares them), then imports the server and
hands it the request (its answer is dropped: the client has one) and the rest of stdin.
The engine is imported by the first lint (:mod:`gradfix.lsp_server`). A request that is
not an ``initialize`` this module can answer goes to the server as it came.

The server's names (``BufferLint``, ``create_server``...) are importable from here as
before (imported from :mod:`gradfix.lsp_server` when first asked for).
"""

from __future__ import annotations

import json
import sys
from typing import IO, Any

#: what the server registers (``create_server``): the parts of its capabilities that do not
#: depend on the client
TEXT_DOCUMENT_SYNC = {"openClose": True, "change": 1, "save": {"includeText": False}}
NOTEBOOK_DOCUMENT_SYNC = {"notebookSelector": [{"cells": [{"language": "python"}]}], "save": True}
STATIC_CAPABILITIES = {
    "codeActionProvider": {"codeActionKinds": ["quickfix", "source.fixAll.gradfix"]},
    "executeCommandProvider": {"commands": []},
    "hoverProvider": True,
    "workspace": {
        "fileOperations": {},
        "workspaceFolders": {"supported": True, "changeNotifications": True},
    },
}
ENCODINGS = ("utf-8", "utf-16", "utf-32")  # the position encodings pygls supports


def initialize_result(params: Any) -> dict[str, Any] | None:
    """The answer to ``initialize`` with these params, as the server gives it; ``None``
    when the params are not of the usual shape (the server answers then)."""
    if not isinstance(params, dict) or not isinstance(params.get("capabilities"), dict):
        return None
    if "processId" not in params:
        return None
    client = params["capabilities"]
    general = client.get("general")
    encodings = general.get("positionEncodings") if isinstance(general, dict) else None
    if general is not None and not isinstance(general, dict):
        return None
    if encodings is not None and not isinstance(encodings, list):
        return None
    encoding = next((e for e in encodings or () if e in ENCODINGS), "utf-16")
    text_document = client.get("textDocument")
    synchronization = (text_document or {}).get("synchronization")
    if not isinstance(text_document or {}, dict) or not isinstance(synchronization or {}, dict):
        return None
    sync: dict[str, Any] = dict(TEXT_DOCUMENT_SYNC)
    for name in ("willSave", "willSaveWaitUntil"):  # the server handles neither
        if (synchronization or {}).get(name) is not None:
            sync[name] = False
    capabilities: dict[str, Any] = {
        **STATIC_CAPABILITIES,
        "positionEncoding": encoding,
        "textDocumentSync": sync,
    }
    if client.get("notebookDocument") is not None:
        capabilities["notebookDocumentSync"] = NOTEBOOK_DOCUMENT_SYNC
    return {"capabilities": capabilities, "serverInfo": {"name": "gradfix", "version": _version()}}


def _version() -> str:
    from importlib.metadata import version

    try:
        return version("gradfix")
    except Exception:  # running from a checkout without metadata
        return "0"


def read_message(stream: IO[bytes]) -> tuple[bytes, Any]:
    """One JSON-RPC message: its bytes as read (header and body) and its JSON (``None``
    when it is not one)."""
    raw = b""
    length = None
    while True:
        line = stream.readline()
        raw += line
        if not line or line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode("ascii", "replace").partition(":")
        if name.strip().lower() == "content-length" and value.strip().isdigit():
            length = int(value.strip())
    if length is None or not line:
        return raw, None
    body = stream.read(length)
    raw += body
    try:
        return raw, json.loads(body)
    except ValueError:
        return raw, None


def frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class Replayed:
    """stdin for the server: the bytes read already, then the rest of ``stream``."""

    def __init__(self, read: bytes, stream: IO[bytes]) -> None:
        self.buffered = read
        self.stream = stream

    def readline(self) -> bytes:
        if not self.buffered:
            return self.stream.readline()
        end = self.buffered.find(b"\n") + 1
        if end == 0:  # no line break in what was read: the line goes on in the stream
            line, self.buffered = self.buffered, b""
            return line + self.stream.readline()
        line, self.buffered = self.buffered[:end], self.buffered[end:]
        return line

    def read(self, size: int = -1) -> bytes:
        if not self.buffered:
            return self.stream.read(size)
        if size < 0:
            data, self.buffered = self.buffered, b""
            return data + self.stream.read()
        data, self.buffered = self.buffered[:size], self.buffered[size:]
        if len(data) < size:
            data += self.stream.read(size - len(data))
        return data


class Answered:
    """stdout for the server: drops its answer to the request answered already."""

    def __init__(self, stream: IO[bytes], answered: Any) -> None:
        self.stream = stream
        self.answered = answered  # the id of the ``initialize`` answered; None: none

    def write(self, data: bytes) -> int:
        if self.answered is not None:
            _, _, body = data.partition(b"\r\n\r\n")
            try:
                message = json.loads(body)
            except ValueError:
                message = None
            if isinstance(message, dict) and message.get("id") == self.answered:
                self.answered = None
                if "error" in message:  # pygls refused what this module accepted
                    print(f"gradfix lsp: initialize: {message['error']}", file=sys.stderr)
                return len(data)
        written = self.stream.write(data)
        return len(data) if written is None else written

    def flush(self) -> None:
        self.stream.flush()

    def close(self) -> None:
        self.stream.close()


def serve() -> int:
    """Run the server on stdin/stdout until ``exit``; the LSP exit status (0 after
    ``shutdown``, 1 otherwise). ``initialize`` is answered before the server is imported
    (see the module docstring)."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    raw, message = read_message(stdin)
    answered = None
    if isinstance(message, dict) and message.get("method") == "initialize" and "id" in message:
        result = initialize_result(message.get("params"))
        if result is not None:
            stdout.write(frame({"jsonrpc": "2.0", "id": message["id"], "result": result}))
            stdout.flush()
            answered = message["id"]
    from gradfix.lsp_server import run

    return run(Replayed(raw, stdin), Answered(stdout, answered))


def __getattr__(name: str) -> Any:
    """The server's names, from :mod:`gradfix.lsp_server` (imported when first asked;
    not for ``__path__`` and the like, which the import system asks for)."""
    if name.startswith("__"):
        raise AttributeError(f"module 'gradfix.lsp' has no attribute {name!r}")
    import gradfix.lsp_server

    try:
        return getattr(gradfix.lsp_server, name)
    except AttributeError:
        raise AttributeError(f"module 'gradfix.lsp' has no attribute {name!r}") from None
