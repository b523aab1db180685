"""``gradfix lsp``: a language server over stdio (pygls).

What the editor gets, all computed in memory from the buffer (nothing is written):

- diagnostics on open, change and save: one Warning per finding, ``code`` = the rule code,
  ``source`` = ``gradfix``;
- code actions: a quick fix per fix (only that fix applied, sent as minimal text edits),
  ``Suppress GFxxx with a comment`` (``# noqa: GFxxx``) and the source action
  ``source.fixAll.gradfix`` (every safe fix);
- hover over a finding: the rule's documentation.

The engine runs in a worker thread (each buffer text is checked once, whatever asks for
it) and a changed buffer is checked when typing pauses, so the server keeps answering
while a big file is checked.

Settings come from ``initializationOptions`` and the ``gradfix`` section of the workspace
configuration (``{"gradfix": {"select": [...], "ignore": [...], "verify": false}}``; a
flat ``{"select": ...}`` or dotted ``{"gradfix.verify": true}`` works too). With
``verify`` on, every fix of an opened or saved file is executed before and after by the
oracle (:func:`gradfix.proof.verify_fixes`, in a worker thread so the server stays
responsive) and the quick fixes and diagnostics say the verdict.

Finding positions are 1-based code points; LSP positions are 0-based in the encoding the
client negotiated (UTF-16 by default): pygls' position codec converts.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import difflib
import logging
import os
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from importlib.metadata import version as package_version
from typing import Any, TypeVar

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.workspace import PositionCodec, TextDocument

from gradfix.config import ConfigError, find_config, load_config, resolve_rules
from gradfix.engine import SingleFix, SourceError, lint_source, single_fixes
from gradfix.noqa import LINE, LINE_BREAK, noqa_edit
from gradfix.proof import FixVerdict, finding_key, torch_available, verify_fixes
from gradfix.registry import SelectionError, find_rule, select_rules
from gradfix.rule import Finding, Rule

SOURCE = "gradfix"
SECTION = "gradfix"
FIX_ALL_KIND = "source.fixAll.gradfix"
MAX_REASON = 80  # characters of a verdict's reason in a quick fix title
CHANGE_DELAY = 0.25  # seconds without a change before a changed buffer is checked
T = TypeVar("T")
logger = logging.getLogger(__name__)


# --- settings ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    select: tuple[str, ...] = ()  # empty: the rules enabled by default
    ignore: tuple[str, ...] = ()
    verify: bool = False


def read_settings(raw: object, base: Settings | None = None) -> Settings:
    """Settings from ``raw`` (nested ``{"gradfix": {...}}``, flat or dotted keys) over ``base``."""
    settings = base or Settings()
    if not isinstance(raw, Mapping):
        return settings
    values = dict(raw.get(SECTION) or {}) if isinstance(raw.get(SECTION), Mapping) else {}
    values.update(raw)
    values.update({k[len(SECTION) + 1 :]: v for k, v in raw.items() if k.startswith(SECTION + ".")})
    if "select" in values:
        settings = replace(settings, select=_codes(values["select"]))
    if "ignore" in values:
        settings = replace(settings, ignore=_codes(values["ignore"]))
    if "verify" in values:
        settings = replace(settings, verify=values["verify"] is True)
    return settings


def _codes(value: object) -> tuple[str, ...]:
    """A list of codes, or one comma-separated string of them."""
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, Iterable):
        return ()
    return tuple(str(code).strip() for code in value if str(code).strip())


# --- positions -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientText:
    """A text and the client's position encoding: turns 0-based code point positions into
    LSP positions. Lines end at ``\n``, ``\r\n`` or ``\r`` only (LSP's and LibCST's
    lines, unlike ``str.splitlines``, which also breaks at form feeds)."""

    source: str
    codec: PositionCodec = field(default_factory=PositionCodec)

    @cached_property
    def lines(self) -> list[str]:
        return LINE.findall(self.source)

    def position(self, line: int, character: int) -> types.Position:
        return self.codec.position_to_client_units(self.lines, types.Position(line, character))

    def range(self, start: tuple[int, int], end: tuple[int, int]) -> types.Range:
        return types.Range(self.position(*start), self.position(*end))


def finding_range(finding: Finding, text: ClientText) -> types.Range:
    """The finding's span (1-based lines and columns) in the client's units."""
    return text.range(
        (finding.line - 1, finding.col - 1), (finding.end_line - 1, finding.end_col - 1)
    )


# --- findings as LSP objects ---------------------------------------------------------------


def to_diagnostic(
    finding: Finding, text: ClientText, verdict: FixVerdict | None = None
) -> types.Diagnostic:
    message = finding.message
    if verdict is not None:
        message += f" (fix {verdict_note(verdict)})"
    return types.Diagnostic(
        range=finding_range(finding, text),
        message=message,
        severity=types.DiagnosticSeverity.Warning,
        code=finding.code,
        source=SOURCE,
    )


def verdict_note(verdict: FixVerdict) -> str:
    """``verified``, or the verdict with the first clause of its reason (a menu title)."""
    if verdict.status == "verified":
        return verdict.status
    reason = verdict.reason.split("; ")[0]
    if len(reason) > MAX_REASON:
        reason = reason[: MAX_REASON - 3].rstrip() + "..."
    return f"{verdict.status}: {reason}"


def syntax_diagnostics(error: SourceError, source: str) -> list[types.Diagnostic]:
    """Nothing for code Python rejects (the Python language server reports it, and it is
    what a buffer looks like while typing); one Error for code Python accepts but gradfix
    cannot parse, so the user knows why the file is not checked."""
    try:
        ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    line = max((error.line or 1) - 1, 0)
    span = types.Range(types.Position(line, 0), types.Position(line + 1, 0))
    return [
        types.Diagnostic(
            range=span,
            message=f"gradfix cannot check this file: {error}",
            severity=types.DiagnosticSeverity.Error,
            source=SOURCE,
        )
    ]


def overlaps(a: types.Range, b: types.Range) -> bool:
    """Whether two ranges share a position (touching counts: a cursor at a range's end)."""
    return (a.start.line, a.start.character) <= (b.end.line, b.end.character) and (
        b.start.line,
        b.start.character,
    ) <= (a.end.line, a.end.character)


# --- edits ---------------------------------------------------------------------------------


def text_edits(text: ClientText, new_source: str) -> list[types.TextEdit]:
    """Minimal edits turning ``text`` into ``new_source``: changed line blocks with their
    common leading and trailing characters trimmed."""
    old_lines, new_lines = text.lines, LINE.findall(new_source)
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    edits = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        old, new = "".join(old_lines[i1:i2]), "".join(new_lines[j1:j2])
        prefix, suffix = _common_ends(old, new)
        start = _advance(i1, 0, old[:prefix])
        end = _advance(start[0], start[1], old[prefix : len(old) - suffix])
        edits.append(types.TextEdit(text.range(start, end), new[prefix : len(new) - suffix]))
    return edits


def _common_ends(old: str, new: str) -> tuple[int, int]:
    """The lengths of the common prefix and suffix, never splitting a ``\r\n``."""
    prefix = _common_prefix(old, new)
    if old[prefix - 1 : prefix] == "\r":
        prefix -= 1
    suffix = _common_prefix(old[prefix:][::-1], new[prefix:][::-1])
    old_at, new_at = len(old) - suffix, len(new) - suffix
    if (
        suffix
        and old[old_at] == "\n"
        and "\r" in (old[old_at - 1 : old_at], new[new_at - 1 : new_at])
    ):
        suffix -= 1
    return prefix, suffix


def _common_prefix(a: str, b: str) -> int:
    length = 0
    for x, y in zip(a, b):
        if x != y:
            break
        length += 1
    return length


def _advance(line: int, character: int, text: str) -> tuple[int, int]:
    """The (line, code point) reached from (line, character) after ``text``."""
    *passed, last = LINE_BREAK.split(text)
    if not passed:
        return line, character + len(last)
    return line + len(passed), len(last)


def workspace_edit(uri: str, edits: list[types.TextEdit]) -> types.WorkspaceEdit:
    return types.WorkspaceEdit(changes={uri: edits})


# --- the server ----------------------------------------------------------------------------


@dataclass
class BufferLint:
    """What gradfix says about one text of a buffer; fixes are computed on first request
    (code actions come on every cursor move: each text is linted and fixed once)."""

    uri: str
    text: ClientText
    path: str
    rules: Sequence[type[Rule]]
    findings: list[Finding] = field(default_factory=list)
    error: SourceError | None = None
    _singles: list[SingleFix] | None = None
    _fixed_safe: str | None = None

    @classmethod
    def of(cls, uri: str, text: ClientText, path: str, rules: Sequence[type[Rule]]) -> BufferLint:
        lint = cls(uri, text, path, rules)
        try:
            result = lint_source(text.source, rules=rules, path=path)
        except SourceError as error:
            lint.error = error
        except Exception:  # a bug in the engine: no findings, the server goes on
            logger.exception("checking %s failed", path)
        else:
            lint.findings = result.findings  # a rule that raised: the others' findings
            for crash in result.crashes:
                logger.error("%s: %s\n%s", path, crash.line(), crash.traceback)
        return lint

    @property
    def source(self) -> str:
        return self.text.source

    def findings_at(self, span: types.Range) -> list[Finding]:
        return [f for f in self.findings if overlaps(finding_range(f, self.text), span)]

    def singles(self) -> list[SingleFix]:
        """Each fix applied alone (safe and unsafe)."""
        if self._singles is None:
            self._singles = []
            if self.error is None and any(f.fix for f in self.findings):
                try:
                    self._singles = single_fixes(self.source, rules=self.rules, path=self.path)
                except Exception:  # a bug in a fix: no quick fixes, the server goes on
                    logger.exception("fixing %s failed", self.path)
        return self._singles

    def fixed_safe(self) -> str:
        """The source with every safe fix applied (the source itself when there is none)."""
        if self._fixed_safe is None:
            self._fixed_safe = self.source
            if self.error is None and any(f.fix for f in self.findings):
                try:
                    result = lint_source(self.source, rules=self.rules, path=self.path, fix=True)
                    self._fixed_safe = result.source
                except Exception:  # a bug in a fix: no fix-all action, the server goes on
                    logger.exception("fixing %s failed", self.path)
        return self._fixed_safe


@dataclass
class VerificationState:
    """Verdicts of the fixes of one buffer text (keyed like ``fix --verify``)."""

    source: str
    verdicts: dict[tuple[int, int, str], FixVerdict] = field(default_factory=dict)
    done: bool = False
    error: str | None = None


class GradfixServer(LanguageServer):
    """The engine's work (lint, fixes) runs in one worker thread, so the event loop keeps
    reading messages while a big file is checked; verification runs in threads of its own."""

    def __init__(self) -> None:
        super().__init__(
            "gradfix", _version(), text_document_sync_kind=types.TextDocumentSyncKind.Full
        )
        self.settings = Settings()
        self.rules: list[type[Rule]] = select_rules()
        #: per buffer: the text and its lint (a future: awaited by every request on it)
        self.buffers: dict[str, tuple[str, asyncio.Future[BufferLint]]] = {}
        self.verification: dict[str, VerificationState] = {}
        self.pending_changes: dict[str, asyncio.TimerHandle] = {}
        self.tasks: set[asyncio.Future[None]] = set()
        self.engine = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gradfix-engine")
        self.verify_lock = threading.Lock()
        self.verify_threads: list[threading.Thread] = []
        self.shutdown_requested = False
        self.last_config_error: str | None = None

    # settings

    def apply_settings(self, settings: Settings) -> None:
        """Use ``settings`` from now on and lint every open buffer again."""
        if settings == self.settings:
            return
        self.settings = settings
        try:
            self.rules = select_rules(settings.select or None, settings.ignore)
        except SelectionError as error:
            self.rules = select_rules()
            self.notify(f"gradfix: {error} in the settings; using the default rules")
        if settings.verify and not torch_available():
            self.settings = replace(settings, verify=False)
            self.notify("gradfix: verification needs torch in the server's Python; it is off")
        self.buffers.clear()
        self.verification.clear()
        for uri in list(self.workspace.text_documents):
            self.spawn(self.lint(uri, verify=True))

    def rules_for(self, path: str) -> list[type[Rule]]:
        """The project's ``[tool.gradfix]`` (nearest to the file) with the editor's
        ``select`` / ``ignore`` on top; a bad configuration falls back to the settings."""
        try:
            config = load_config(find_config(os.path.dirname(os.path.abspath(path))))
            return resolve_rules(
                config, self.settings.select or None, self.settings.ignore, path=path
            )
        except (ConfigError, SelectionError) as error:
            message = f"gradfix: {error}; using the editor settings"
            if message != self.last_config_error:
                self.last_config_error = message
                self.notify(message)
            return list(self.rules)

    def notify(self, message: str) -> None:
        self.window_show_message(
            types.ShowMessageParams(type=types.MessageType.Warning, message=message)
        )

    # linting

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self.tasks.add(task)  # a task nobody references may be garbage-collected
        task.add_done_callback(self.tasks.discard)

    def in_engine(self, function: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        return asyncio.get_running_loop().run_in_executor(self.engine, partial(function, *args))

    def open_document(self, uri: str) -> TextDocument | None:
        """The open buffer (pygls would read a closed file from disk)."""
        return self.workspace.text_documents.get(uri)

    async def buffer(self, document: TextDocument) -> BufferLint:
        """The lint of the buffer's current text, computed once per text and settings."""
        source = document.source
        entry = self.buffers.get(document.uri)
        if entry is None or entry[0] != source:
            text = ClientText(source, document.position_codec)
            path = _path(document)
            future = self.in_engine(BufferLint.of, document.uri, text, path, self.rules_for(path))
            entry = self.buffers[document.uri] = (source, future)
        # shielded: a cancelled request must not cancel the lint other requests wait for
        return await asyncio.shield(entry[1])

    def lint_soon(self, uri: str) -> None:
        """Lint a changed buffer when typing pauses (a big file takes a while to check)."""
        pending = self.pending_changes.pop(uri, None)
        if pending is not None:
            pending.cancel()
        self.pending_changes[uri] = asyncio.get_running_loop().call_later(
            CHANGE_DELAY, lambda: self.spawn(self.lint(uri, verify=False))
        )

    async def lint(self, uri: str, *, verify: bool) -> None:
        """Publish the buffer's diagnostics; with ``verify``, start verifying its fixes."""
        document = self.open_document(uri)
        if document is None:
            return
        lint = await self.buffer(document)
        if self.open_document(uri) is not document or document.source != lint.source:
            return  # closed or changed meanwhile: the next lint publishes
        if lint.error is not None:
            self.publish(document, syntax_diagnostics(lint.error, lint.source))
            return
        self.publish(document, [self.diagnostic(lint, f) for f in lint.findings])
        if verify and self.settings.verify and any(f.fix is not None for f in lint.findings):
            self.start_verification(document)

    def publish(self, document: TextDocument, diagnostics: list[types.Diagnostic]) -> None:
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(
                uri=document.uri, version=document.version, diagnostics=diagnostics
            )
        )

    def forget(self, uri: str) -> None:
        """A closed buffer: no pending lint, no cache, no diagnostics."""
        pending = self.pending_changes.pop(uri, None)
        if pending is not None:
            pending.cancel()
        self.buffers.pop(uri, None)
        self.verification.pop(uri, None)
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri, []))

    # verification

    def start_verification(self, document: TextDocument) -> None:
        """Verify the buffer's fixes in a worker thread; the verdicts arrive on the event
        loop (:meth:`finish_verification`). ``exit`` does not wait for it (:func:`serve`)."""
        source, uri = document.source, document.uri
        state = self.verification.get(uri)
        if self.shutdown_requested or (state is not None and state.source == source):
            return  # running or done for this text
        self.verification[uri] = state = VerificationState(source)
        path, loop = _path(document), asyncio.get_running_loop()
        rules = self.rules_for(path)

        def verify() -> None:
            with self.verify_lock:  # one at a time: each runs two processes already
                if self.verification.get(uri) is not state:
                    return  # the buffer changed while this one waited
                try:
                    state.verdicts = {
                        finding_key(v.finding): v for v in verify_fixes(path, source, rules=rules)
                    }
                except Exception as error:  # a crash of the oracle: no verdicts
                    state.error = f"{type(error).__name__}: {error}"
                    logger.exception("verification of %s failed", path)
            state.done = True
            with contextlib.suppress(RuntimeError):  # the loop is closed: the server exited
                loop.call_soon_threadsafe(self.finish_verification, uri, state)

        thread = threading.Thread(target=verify, name="gradfix-verify", daemon=True)
        self.verify_threads = [t for t in self.verify_threads if t.is_alive()] + [thread]
        thread.start()

    def finish_verification(self, uri: str, state: VerificationState) -> None:
        if self.verification.get(uri) is state:
            self.spawn(self.lint(uri, verify=False))  # republish with the verdicts

    def diagnostic(self, lint: BufferLint, finding: Finding) -> types.Diagnostic:
        """The finding as published: with the verdict on its fix once there is one."""
        state = self.verification.get(lint.uri)
        verdict = None
        if state is not None and state.source == lint.source:
            verdict = state.verdicts.get(finding_key(finding))
        return to_diagnostic(finding, lint.text, verdict)

    def verdict_title(self, uri: str, source: str, finding: Finding) -> str:
        """`` (verified)`` and the like for a quick fix title; ``""`` without verification."""
        if not self.settings.verify:
            return ""
        state = self.verification.get(uri)
        if state is None or state.source != source:
            return " (not verified: save the file to verify)"
        if not state.done:
            return " (verifying...)"
        if state.error is not None:
            return " (not verified: the verifier failed)"
        verdict = state.verdicts.get(finding_key(finding))
        if verdict is None:
            return " (not verified)"
        return f" ({verdict_note(verdict)})"

    # code actions and hover (run in the engine thread: fixes take a while on big files)

    def code_actions(
        self, lint: BufferLint, wanted: types.Range, only: Sequence[str] | None
    ) -> list[types.CodeAction]:
        in_range = lint.findings_at(wanted)
        actions: list[types.CodeAction] = []
        if _wants(only, types.CodeActionKind.QuickFix) and in_range:
            actions += self.quick_fixes(lint, wanted)
            suppress = (suppress_action(lint, f, self.diagnostic(lint, f)) for f in in_range)
            actions += [action for action in suppress if action is not None]
        if _wants(only, FIX_ALL_KIND) and lint.fixed_safe() != lint.source:
            actions.append(
                types.CodeAction(
                    title="Fix all gradfix (safe fixes)",
                    kind=FIX_ALL_KIND,
                    edit=workspace_edit(lint.uri, text_edits(lint.text, lint.fixed_safe())),
                )
            )
        return actions

    def quick_fixes(self, lint: BufferLint, wanted: types.Range) -> list[types.CodeAction]:
        actions = []
        for single in lint.singles():
            hit = [f for f in single.findings if overlaps(finding_range(f, lint.text), wanted)]
            if not hit or single.source is None:
                continue
            first = hit[0]
            safety = " (unsafe)" if single.safety == "unsafe" else ""
            verdict = self.verdict_title(lint.uri, lint.source, first)
            actions.append(
                types.CodeAction(
                    title=f"Fix {first.code}: {single.description}{safety}{verdict}",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[self.diagnostic(lint, f) for f in hit],
                    is_preferred=single.safety == "safe" and "rejected" not in verdict,
                    edit=workspace_edit(lint.uri, text_edits(lint.text, single.source)),
                )
            )
        return actions


def hover_docs(lint: BufferLint, position: types.Position) -> types.Hover | None:
    """The docs of the rules whose findings cover ``position``."""
    hits = lint.findings_at(types.Range(position, position))
    if not hits:
        return None
    sections = []
    for code in dict.fromkeys(f.code for f in hits):
        rule = find_rule(code)
        sections.append(f"### {rule.code} {rule.name}\n\n{rule.docs()}")
    return types.Hover(
        contents=types.MarkupContent(
            kind=types.MarkupKind.Markdown, value="\n\n---\n\n".join(sections)
        ),
        range=finding_range(hits[0], lint.text),
    )


def suppress_action(
    lint: BufferLint, finding: Finding, diagnostic: types.Diagnostic
) -> types.CodeAction | None:
    insertion = noqa_edit(lint.source, finding.line, finding.code)
    if insertion is None:
        return None
    column, comment = insertion
    at = lint.text.position(finding.line - 1, column)
    return types.CodeAction(
        title=f"Suppress {finding.code} with a comment",
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[diagnostic],
        edit=workspace_edit(lint.uri, [types.TextEdit(types.Range(at, at), comment)]),
    )


def _wants(only: Sequence[str] | None, kind: str) -> bool:
    """LSP kinds are hierarchical: ``source.fixAll`` asks for ``source.fixAll.gradfix``."""
    return not only or any(kind == k or kind.startswith(k + ".") for k in only)


def _path(document: TextDocument) -> str:
    return document.path or document.filename or "<buffer>.py"


def _version() -> str:
    try:
        return package_version("gradfix")
    except Exception:  # running from a checkout without metadata
        return "0"


# --- protocol handlers ---------------------------------------------------------------------


def create_server() -> GradfixServer:
    """The server with every feature registered (not started)."""
    server = GradfixServer()

    @server.feature(types.INITIALIZE)
    def initialize(ls: GradfixServer, params: types.InitializeParams) -> None:
        ls.apply_settings(read_settings(params.initialization_options))

    @server.feature(types.INITIALIZED)
    async def initialized(ls: GradfixServer, params: types.InitializedParams) -> None:
        ls.apply_settings(await pull_settings(ls, ls.settings))

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(
        ls: GradfixServer, params: types.DidChangeConfigurationParams
    ) -> None:
        pushed = read_settings(params.settings, ls.settings)
        ls.apply_settings(await pull_settings(ls, pushed))

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    async def did_open(ls: GradfixServer, params: types.DidOpenTextDocumentParams) -> None:
        await ls.lint(params.text_document.uri, verify=True)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: GradfixServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.lint_soon(params.text_document.uri)  # never verified: that executes code

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE, types.SaveOptions(include_text=False))
    async def did_save(ls: GradfixServer, params: types.DidSaveTextDocumentParams) -> None:
        await ls.lint(params.text_document.uri, verify=True)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: GradfixServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.forget(params.text_document.uri)

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL_KIND]),
    )
    async def code_action(
        ls: GradfixServer, params: types.CodeActionParams
    ) -> list[types.CodeAction]:
        document = ls.open_document(params.text_document.uri)
        if document is None:
            return []
        lint = await ls.buffer(document)
        return await ls.in_engine(ls.code_actions, lint, params.range, params.context.only)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    async def hover(ls: GradfixServer, params: types.HoverParams) -> types.Hover | None:
        document = ls.open_document(params.text_document.uri)
        if document is None:
            return None
        return hover_docs(await ls.buffer(document), params.position)

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: GradfixServer, params: Any) -> None:
        ls.shutdown_requested = True
        ls.engine.shutdown(wait=False, cancel_futures=True)

    return server


async def pull_settings(ls: GradfixServer, base: Settings) -> Settings:
    """``base`` updated with the ``gradfix`` configuration section, when the client can
    answer ``workspace/configuration`` (clients that keep settings send no values)."""
    workspace = ls.client_capabilities.workspace
    if workspace is None or not workspace.configuration:
        return base
    try:
        answer = await ls.workspace_configuration_async(
            types.ConfigurationParams(items=[types.ConfigurationItem(section=SECTION)])
        )
    except Exception:  # a client that fails the request keeps the settings it pushed
        logger.exception("workspace/configuration failed")
        return base
    return read_settings(answer[0] if answer else None, base)


def serve() -> int:
    """Run the server on stdin/stdout until ``exit``; the LSP exit status (0 after
    ``shutdown``, 1 otherwise)."""
    logging.basicConfig(format="gradfix lsp: %(levelname)s: %(message)s")  # stderr
    server = create_server()
    server.start_io()
    status = 0 if server.shutdown_requested else 1
    if any(thread.is_alive() for thread in server.verify_threads):
        # the oracle's own worker threads would hold the exit until their runs end
        logging.shutdown()
        os._exit(status)  # stdout is flushed and closed by pygls at exit
    return status
