"""``gradfix lsp``: the language server (:mod:`gradfix.lsp_server`) and how it starts.

Importing pygls' protocol types alone takes 0.4-0.7 s, LibCST and the rules as long
again: an editor would wait for all of it before the answer to ``initialize``. So
:func:`serve` reads the ``initialize`` request itself, answers it at once with the
capabilities the server has (:func:`initialize_result`, the same JSON that pygls builds
for the same client: ``tests/test_lsp.py`` compares them), then imports the server and
hands it the request (its answer is dropped: the client has one) and the rest of stdin.
The engine is imported by the first lint (:mod:`gradfix.lsp_server`). A request that is
not an ``initialize`` this module can answer goes to the server as it came.

Between the client and the server sits :class:`Framed`: pygls' reader trusts each header,
and one message framed wrong (``Content-Length: abc``) made it read every later body as a
header, alive and never answering again. :class:`Framed` hands the server only well-framed
messages; a request whose header is bad is answered with a JSON-RPC parse error, anything
else that cannot be framed is skipped (a line on stderr), and the next well-formed message
is answered as usual.

The server's names (``BufferLint``, ``create_server``...) are importable from here as
before (imported from :mod:`gradfix.lsp_server` when first asked for).
"""

from __future__ import annotations

import json
import re
import sys
import threading
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
            if length > MAX_BODY:
                return raw, None  # not read here: :class:`Framed` skips it
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


#: JSON-RPC's code for a message that cannot be read
PARSE_ERROR = -32700
#: the largest body a header may announce (a larger one is a bad header, not a wait for
#: gigabytes that never come)
MAX_BODY = 256 * 1024 * 1024
#: a Content-Length header, also at the end of a line that began with a bad message's body
LENGTH_HEADER = re.compile(rb"content-length[ \t]*:[ \t]*([^\r\n]*?)[ \t]*\r?\n\Z", re.I)
WHITESPACE = b" \t\r\n"


class Framed:
    """stdin for the server: only well-framed messages, as ``Content-Length: N`` and body.

    A header block without a Content-Length that is a number (``abc``, ``-5``, missing,
    larger than :data:`MAX_BODY`) is followed by the JSON value that comes next, read by
    its brackets: a request among it is answered with a parse error through ``answer``
    (:class:`Answered`); anything else is skipped. A line that ends in a Content-Length
    header starts the next message whatever came before it on the line.
    """

    def __init__(self, stream: Any, answer: Answered) -> None:
        self.stream = stream
        self.answer = answer
        self.unread = b""  # read ahead from ``stream`` and given back
        self.framed = b""  # the next message for the server, framed anew

    def readline(self) -> bytes:
        if not self.framed:
            self.framed = self._next_message()
        end = self.framed.find(b"\n") + 1 or len(self.framed)
        line, self.framed = self.framed[:end], self.framed[end:]
        return line

    def read(self, size: int = -1) -> bytes:
        if not self.framed:
            self.framed = self._next_message()
        if size < 0:
            size = len(self.framed)
        data, self.framed = self.framed[:size], self.framed[size:]
        return data

    def _next_message(self) -> bytes:
        """The next well-framed message; ``b""`` at the end of the input."""
        while True:
            length, ended = self._headers()
            if ended:
                return b""
            if length is None:
                self._bad_header()
                continue
            body = self._read(length)
            if len(body) < length:
                return b""  # the input ended inside the body
            # a body that is not JSON is pygls' to refuse (framed right, it goes on)
            return b"Content-Length: %d\r\n\r\n" % length + body

    def _headers(self) -> tuple[int | None, bool]:
        """The length a header block announces (None: none that can be used) and whether
        the input ended before its blank line."""
        length: int | None = None
        seen = False
        while True:
            line = self._readline()
            if not line:
                return None, True
            if line.strip(WHITESPACE) == b"":
                if seen:
                    return length, False
                continue  # blank lines between messages
            seen = True
            match = LENGTH_HEADER.search(line)
            if match is not None:
                value = match.group(1)
                length = int(value) if value.isdigit() and int(value) <= MAX_BODY else None
                if length is None:
                    _warn(f"bad header {line.strip().decode('ascii', 'replace')[-80:]!r}")

    def _bad_header(self) -> None:
        """Read the JSON value after a bad header; answer it if it is a request."""
        body = self._json_value()
        if body is None:
            return
        try:
            message = json.loads(body)
        except (ValueError, RecursionError):
            return
        if isinstance(message, dict) and "id" in message and "method" in message:
            self.answer.error(message["id"], PARSE_ERROR, "bad Content-Length header")

    def _json_value(self) -> bytes | None:
        """The bytes of the JSON object or array that comes next, found by its brackets
        (None, nothing read, when something else comes next)."""
        first = self._read(1)
        while first and first in WHITESPACE:
            first = self._read(1)
        if first not in (b"{", b"["):
            self.unread = first + self.unread
            return None
        value, depth, in_string, escaped = bytearray(first), 1, False, False
        while depth and len(value) <= MAX_BODY:
            byte = self._read(1)
            if not byte:
                return None
            value += byte
            if escaped:
                escaped = False
            elif in_string:
                escaped, in_string = byte == b"\\", byte != b'"'
            elif byte == b'"':
                in_string = True
            elif byte in (b"{", b"["):
                depth += 1
            elif byte in (b"}", b"]"):
                depth -= 1
        return bytes(value) if depth == 0 else None

    def _readline(self) -> bytes:
        if not self.unread:
            return bytes(self.stream.readline())
        end = self.unread.find(b"\n") + 1
        if end == 0:
            line, self.unread = self.unread, b""
            return line + self.stream.readline()
        line, self.unread = self.unread[:end], self.unread[end:]
        return line

    def _read(self, size: int) -> bytes:
        data, self.unread = self.unread[:size], self.unread[size:]
        while len(data) < size:
            more = self.stream.read(size - len(data))
            if not more:
                break
            data += more
        return data


def _warn(what: str) -> None:
    print(f"gradfix lsp: {what}", file=sys.stderr, flush=True)


class Answered:
    """stdout for the server: drops its answer to the request answered already; one
    message at a time (:class:`Framed` answers from the reading thread)."""

    def __init__(self, stream: IO[bytes], answered: Any) -> None:
        self.stream = stream
        self.answered = answered  # the id of the ``initialize`` answered; None: none
        self.lock = threading.Lock()

    def error(self, id: Any, code: int, message: str) -> None:
        """Answer the request ``id`` with an error."""
        error = {"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}
        with self.lock:
            self.stream.write(frame(error))
            self.stream.flush()

    def write(self, data: bytes) -> int:
        with self.lock:
            return self._write(data)

    def _write(self, data: bytes) -> int:
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

    writer = Answered(stdout, answered)
    return run(Framed(Replayed(raw, stdin), writer), writer)


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
