"""Process paths into per-file results: the library behind the CLI, an LSP and batch runs.

Nothing here prints. Every problem with one file (missing, undecodable, binary, syntax
error, a crash inside a rule) becomes that file's ``error`` (one line, without the path);
the other files are processed as usual.

    options = RunOptions(rules=select_rules(), fix=True)
    run = process_paths(["src/"], options)
    for result in run.files:
        print(result.path, result.findings, result.error)
"""

from __future__ import annotations

import functools
import gc
import os
import pickle
import re
import signal
import traceback
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from gradfix.config import Config
from gradfix.engine import (
    MAX_PASSES,
    FileLint,
    LintResult,
    RuleCrash,
    SingleFix,
    SourceError,
    cyclic_gc_paused,
    lint_source,
)
from gradfix.fileio.files import (
    MAX_FILE_BYTES,
    Candidate,
    FileError,
    FileTooLarge,
    SourceFile,
    check_write_target,
    decode_source,
    discover,
    is_notebook,
    read_source,
    write_source,
    write_tree,
)
from gradfix.rule import Finding, FixSafety, Rule

if TYPE_CHECKING:
    from gradfix.cache import CleanIndex

T = TypeVar("T")

#: fewer files per worker than this and starting the workers costs more than it saves
MIN_FILES_PER_WORKER = 8
#: what sending an unpicklable rule (defined in a function, say) to a worker raises
PICKLING_ERRORS = (pickle.PicklingError, AttributeError, TypeError)


@dataclass(frozen=True)
class RunOptions:
    rules: Sequence[type[Rule]]
    #: compute the fixed source (``FileResult.fixed``)
    fix: bool = False
    unsafe_fixes: bool = False
    #: write fixed sources back to their files (implies ``fix``)
    write: bool = False
    #: ``exclude`` and ``per-file-ignores`` of the configuration
    config: Config | None = None
    #: where per-file results are cached (``.gradfix_cache``); None: no cache
    cache_dir: str | None = None
    #: skip files git ignores when walking directories
    respect_gitignore: bool = True
    #: only these files (absolute paths; ``--changed-since``); None: every file
    changed: frozenset[str] | None = None
    #: also each fix applied alone (``FileResult.singles``: the code frames of ``check``'s
    #: text format), from the same lint
    singles: bool = False
    #: functions the other files of the run call only under ``no_grad``
    #: (:mod:`gradfix.project`): a file linted with them is not cached
    no_grad_callers: frozenset[str] = frozenset()
    #: with ``write``: leave unwritten the files whose findings other files may decide
    #: (``FileResult.open_callers``); :func:`process_paths` writes them after its pass
    #: over the project
    defer_open: bool = False
    #: with ``write``: the real paths files may be written in (a symbolic link to a file
    #: elsewhere is not written through); :func:`process_paths` sets it from the paths it
    #: is given and the project's root; empty: anywhere
    tree: tuple[str, ...] = ()

    def rules_for(self, path: str) -> Sequence[type[Rule]]:
        """The rules to run on ``path``: ``per-file-ignores`` removes some."""
        ignored = self.config.ignored_for(path) if self.config is not None else []
        if not ignored:
            return self.rules
        from gradfix.registry import select_rules

        return select_rules(["ALL"], ignored, rules=self.rules)


@dataclass
class FileResult:
    path: str
    #: findings on the source as read
    findings: list[Finding] = field(default_factory=list)
    #: findings left after fixing, positions in the fixed source (== findings without fix)
    remaining: list[Finding] = field(default_factory=list)
    original: str | None = None
    #: the source after the applicable fixes (== original when nothing applies)
    fixed: str | None = None
    encoding: str = "utf-8"
    #: one line per fix the engine dropped because it broke the syntax
    dropped: list[str] = field(default_factory=list)
    #: one-line reason the file could not be processed (or written)
    error: str | None = None
    #: the traceback of an unexpected exception, for ``--verbose``
    traceback: str | None = None
    written: bool = False
    #: why the file was not looked at: ``generated`` (it says ``@generated``, skipped
    #: silently), or a one-line reason shown as a note (the file is too large)
    skipped: str | None = None
    #: fixes applied to make ``fixed``, over all passes (one fix may resolve several
    #: findings, or a later pass fix what an earlier fix left); None: not counted
    #: (notebooks)
    applied: int | None = None
    #: notebook code cells left out because they do not parse, one line each without
    #: the path (``cell 4: skipped: syntax error at line 1: ...``); the other cells were
    #: checked and fixed
    skipped_cells: list[str] = field(default_factory=list)
    #: each fix applied alone to ``original`` (with ``RunOptions.singles``; None: not
    #: computed)
    singles: list[SingleFix] | None = None
    #: functions around findings whose grad mode only other files' callers decide
    #: (:mod:`gradfix.project`)
    open_callers: tuple[str, ...] = ()
    #: why each remaining finding with an applicable fix was not fixed, one short reason
    #: per finding (``rejected by verification``...): set by verification
    held: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.fixed is not None and self.fixed != self.original

    @property
    def fixed_count(self) -> int:
        """Findings the fixes removed."""
        return max(0, len(self.findings) - len(self.remaining)) if self.changed else 0

    @property
    def applied_count(self) -> int:
        """Fixes applied to the file (where they are not counted, its fixed findings)."""
        if not self.changed:
            return 0
        return self.fixed_count if self.applied is None else self.applied

    def unsafe_remaining(self) -> list[Finding]:
        """Remaining findings that ``unsafe_fixes`` would fix."""
        return [f for f in self.remaining if f.fix and f.fix.safety == FixSafety.UNSAFE.value]


@dataclass
class RunResult:
    files: list[FileResult] = field(default_factory=list)
    #: one line per given path that holds nothing to process (``docs: no Python files found``)
    warnings: list[str] = field(default_factory=list)
    #: where the run may write (:attr:`RunOptions.tree`): for :func:`write_result`
    tree: tuple[str, ...] = ()

    @property
    def errors(self) -> list[FileResult]:
        return [result for result in self.files if result.error is not None]

    @property
    def failed(self) -> bool:
        """Something could not be processed: a file, or a notebook cell (exit status 2,
        like a syntax error in a Python file)."""
        return bool(self.errors) or any(result.skipped_cells for result in self.files)


#: ``progress(total)`` is called once the files are known and returns ``advance()``,
#: called after each file (a progress bar); None: no progress reporting.
Progress = Callable[[int], Callable[[], None]]


class Executor(Protocol):
    """Where the files of a run are linted: this machine's process pool (the default,
    :func:`process_files`' ``jobs``) or a cluster (:mod:`gradfix.ray_executor`). It
    returns one result per path, in order; the run reads the cache's clean index and
    goes over the project afterwards."""

    def map(
        self, paths: Sequence[str], options: RunOptions, tick: Callable[[], None]
    ) -> list[FileResult]: ...


def process_paths(
    paths: Iterable[str],
    options: RunOptions,
    *,
    jobs: int = 1,
    progress: Progress | None = None,
    executor: Executor | None = None,
) -> RunResult:
    """Discover the Python files under ``paths`` and process each of them.

    With ``jobs`` > 1, files are processed in that many worker processes when there are
    enough of them to pay for starting the workers; results keep the discovery order.
    """
    slots: list[FileResult | None] = []
    to_process: list[str] = []
    paths = list(paths)
    if not options.tree:
        options = replace(options, tree=_write_tree(paths, options))
    run = RunResult(tree=options.tree)
    candidates = discover(paths)
    skipped = _skipped(candidates, paths, options)
    for candidate in candidates:
        if candidate.path in skipped:
            if candidate.path in paths and _is_excluded(candidate.path, options):
                # named on the command line: say why it is not looked at
                slots.append(FileResult(candidate.path, skipped=_excluded_note(options)))
            continue
        if candidate.warning is not None:
            run.warnings.append(f"{candidate.path}: {candidate.warning}")
        elif candidate.error is not None:
            slots.append(FileResult(candidate.path, error=candidate.error))
        else:
            slots.append(None)
            to_process.append(candidate.path)
    advance = progress(len(to_process)) if progress is not None else None
    first = replace(options, defer_open=options.write)
    processed = iter(
        process_files(to_process, first, jobs=jobs, advance=advance, executor=executor)
    )
    run.files = [slot if slot is not None else next(processed) for slot in slots]
    _across_files(run, to_process, paths, options)
    return run


def _write_tree(paths: Sequence[str], options: RunOptions) -> tuple[str, ...]:
    """The paths named and the root of the project's configuration file."""
    config = options.config
    root = config.root if config is not None and config.path is not None else None
    return write_tree(paths, root)


def _across_files(
    run: RunResult, paths: Sequence[str], arguments: Sequence[str], options: RunOptions
) -> None:
    """Lint again, knowing what the other files of their project say, the few files with
    a finding in a function that only those files call (:mod:`gradfix.project`); with
    ``write``, they are written now (not before: :attr:`RunOptions.defer_open`)."""
    from gradfix.project import no_grad_callers, project_of

    if not any(r.open_callers for r in run.files if r.findings):
        return
    by_project: dict[str, list[str]] = {}
    for path in paths:
        by_project.setdefault(project_of(path, arguments), []).append(path)
    for position, result in enumerate(run.files):
        if not (result.findings and result.open_callers):
            continue
        project = by_project.get(project_of(result.path, arguments), [])
        known = no_grad_callers(result.open_callers, result.path, project)
        if known or (options.write and result.changed):
            informed = replace(options, no_grad_callers=frozenset(known))
            run.files[position] = process_file(result.path, informed)


def _skipped(
    candidates: Sequence[Candidate], given: Sequence[str], options: RunOptions
) -> set[str]:
    """Paths not to process: ``exclude`` of the configuration, files git ignores (found by
    walking a directory; a file named on the command line is always taken), and with
    ``changed_since`` every file git does not list as changed. What a walk found that
    cannot be read (a broken link, a link loop, a FIFO) is skipped like a file."""
    explicit = set(given)
    walked = [c.path for c in candidates if c.path not in explicit]
    files = [c.path for c in candidates if c.error is None and c.warning is None]
    skipped = set()
    skipped |= {c.path for c in candidates if _is_excluded(c.path, options)}
    if options.respect_gitignore:
        from gradfix.fileio.gitfiles import ignored_paths

        skipped |= ignored_paths(walked)
    if options.changed is not None:
        considered = {*walked, *files}
        skipped |= {path for path in considered if os.path.abspath(path) not in options.changed}
    return skipped


def _is_excluded(path: str, options: RunOptions) -> bool:
    return options.config is not None and options.config.is_excluded(path)


#: how the note of a file left out by ``exclude`` starts (:attr:`FileResult.skipped`)
EXCLUDED_NOTE = "excluded by "


def skipped_on_purpose(reason: str) -> bool:
    """A :attr:`FileResult.skipped` reason the configuration or the file asked for
    (``exclude``, ``@generated``), not a file gradfix could not take (too large)."""
    return reason == "generated" or reason.startswith(EXCLUDED_NOTE)


def _excluded_note(options: RunOptions) -> str:
    """Why a file named on the command line was not looked at (shown as a note)."""
    assert options.config is not None
    where = options.config.origin("exclude")
    return f'{EXCLUDED_NOTE}{where} (to check it anyway: --config "exclude=[]")'


def process_files(
    paths: Sequence[str],
    options: RunOptions,
    *,
    jobs: int = 1,
    advance: Callable[[], None] | None = None,
    executor: Executor | None = None,
) -> list[FileResult]:
    """:func:`process_file` over ``paths``, in order, in up to ``jobs`` processes (or on
    ``executor``).

    Files the cache's clean index knows unchanged are not read at all; the others are
    handed out largest first, so no worker is left with a big file at the end. A file
    that kills its worker process (a crash in native code, the memory limit) is reported
    as that file's error and the batch goes on in a new pool."""
    tick = advance or (lambda: None)
    index = _clean_index(options)
    results: list[FileResult | None] = [None] * len(paths)
    stats: dict[int, os.stat_result | None] = {}
    for position, path in enumerate(paths):
        if index is not None:
            stat = _stat(path)
            entry = index.lookup(path, stat, _codes(options, path))
            if entry is not None:
                results[position] = FileResult(path, skipped=entry[4])
                tick()
                continue
            stats[position] = stat
        else:
            stats[position] = None
    todo = sorted(stats, key=lambda i: -_size(paths[i], stats[i]))
    pending = [paths[i] for i in todo]
    if executor is not None:
        done = executor.map(pending, options, tick)
    else:
        done = _process_all(pending, options, jobs, tick)
    for position, result in zip(todo, done):
        results[position] = result
        if index is not None:
            _remember(index, result, stats[position], options)
    if index is not None:
        index.save()
    return [result for result in results if result is not None]


def _process_all(
    paths: Sequence[str], options: RunOptions, jobs: int, tick: Callable[[], None]
) -> list[FileResult]:
    workers = min(jobs, len(paths) // MIN_FILES_PER_WORKER)
    if workers > 1:
        try:
            return _in_workers(paths, options, workers, tick)
        except (OSError, NotImplementedError, *PICKLING_ERRORS):
            pass  # no worker processes here (sandbox, unpicklable rule): do it in this one
    results = []
    for path in paths:
        results.append(process_file(path, options))
        tick()
    return results


def _clean_index(options: RunOptions) -> CleanIndex | None:
    if options.cache_dir is None:
        return None
    from gradfix.cache import CleanIndex

    return CleanIndex.open(options.cache_dir)


def _codes(options: RunOptions, path: str) -> str:
    if options.config is None or not options.config.per_file_ignores:
        return _all_codes(tuple(options.rules))  # the same for every file
    return ",".join(sorted(rule.code for rule in options.rules_for(path)))


@functools.lru_cache(maxsize=8)
def _all_codes(rules: tuple[type[Rule], ...]) -> str:
    return ",".join(sorted(rule.code for rule in rules))


def _remember(
    index: CleanIndex, result: FileResult, stat: os.stat_result | None, options: RunOptions
) -> None:
    """List ``result``'s file as clean when there was nothing to report; the stat taken
    before reading makes a file changed meanwhile miss next time."""
    clean = (
        result.skipped in (None, "generated")  # a size limit is an option, not the file's
        and result.error is None
        and result.traceback is None
        and not result.findings
        and not result.dropped
        and not result.skipped_cells
        and not result.changed
        and not result.written
    )
    if clean and stat is not None:
        index.record(result.path, stat, _codes(options, result.path), result.skipped)
    else:
        index.forget(result.path)


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _size(path: str, stat: os.stat_result | None) -> int:
    stat = stat or _stat(path)
    return stat.st_size if stat is not None else 0


def _in_workers(
    paths: Sequence[str], options: RunOptions, workers: int, tick: Callable[[], None]
) -> list[FileResult]:
    results: list[FileResult] = []
    while len(results) < len(paths):
        rest = paths[len(results) :]
        try:
            with ProcessPoolExecutor(
                max_workers=workers, initializer=_start_worker, initargs=(options, os.getpid())
            ) as pool:
                try:
                    chunk = max(1, min(CHUNK_FILES, len(rest) // (workers * 8)))
                    for result in pool.map(_process_in_worker, rest, chunksize=chunk):
                        results.append(result)
                        tick()
                except KeyboardInterrupt:
                    # Ctrl-C: the files in progress finish (each write is atomic), no
                    # other file is started
                    pool.shutdown(wait=True, cancel_futures=True)
                    raise
        except BrokenProcessPool:
            # the first file without a result was running when its worker died: prove it
            # alone, then go on with the others in a new pool
            results.append(_isolated(rest[len(results) - (len(paths) - len(rest))], options))
            tick()
    return results


#: files a worker is handed at once (fewer round trips); small enough that the largest
#: files, handed out first, do not leave one worker busy alone at the end
CHUNK_FILES = 4
_worker_options: RunOptions | None = None  # a worker's options, sent once when it starts


def _start_worker(options: RunOptions, parent: int) -> None:
    global _worker_options
    _worker_options = options
    _start_isolated(parent)
    gc.freeze()  # what the worker inherited is never garbage: no collection walks it again


def _process_in_worker(path: str) -> FileResult:
    assert _worker_options is not None
    return process_file(path, _worker_options)


def _start_isolated(parent: int) -> None:
    """A worker ends with the main process ``parent`` (:mod:`gradfix.lifeline`) and
    leaves Ctrl-C to it, which stops the batch cleanly (a worker interrupted on its own
    would print a traceback)."""
    from gradfix.lifeline import die_with_parent

    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _isolated(path: str, options: RunOptions) -> FileResult:
    """Process one file in a worker of its own; its death is the file's error."""
    try:
        with ProcessPoolExecutor(
            max_workers=1, initializer=_start_isolated, initargs=(os.getpid(),)
        ) as pool:
            return pool.submit(process_file, path, options).result()
    except BrokenProcessPool:
        return FileResult(path, error="crashed the worker process (skipped; the batch goes on)")


def process_file(path: str, options: RunOptions) -> FileResult:
    """Read, lint, fix and (with ``options.write``) write back one file."""
    try:
        with cyclic_gc_paused():  # reading, linting, building fixes: see the function
            return _process_file(path, options)
    except Exception as error:  # whatever happens to one file, the run goes on
        return internal_error(FileResult(path), error)


def _process_file(path: str, options: RunOptions) -> FileResult:
    source = read_for_run(path, options)
    if isinstance(source, FileResult):
        return source
    result = _cached_process_text(source.text, path, options, encoding=source.encoding)
    return finish_file(source, result, options)


def read_for_run(path: str, options: RunOptions) -> SourceFile | FileResult:
    """The file as read, or its result when it is not linted: too large, unreadable,
    generated."""
    try:
        source = read_source(path, _size_limit(path, options))
    except FileTooLarge as error:
        return FileResult(path, skipped=str(error))
    except FileError as error:
        return FileResult(path, error=str(error))
    if is_generated(source.text):
        return FileResult(path, original=source.text, fixed=source.text, skipped="generated")
    return source


def finish_file(source: SourceFile, result: FileResult, options: RunOptions) -> FileResult:
    """Write the fixed text (with ``options.write``) where the process that read the
    file is; drop the texts when there is nothing to show."""
    deferred = options.defer_open and bool(result.open_callers)
    if options.write and result.error is None and result.changed and not deferred:
        _write(source, result, options.tree)
    if not result.findings and not result.changed:
        # nothing to show: the text need not travel back from a worker (a batch over a
        # large tree would hold every file's text in the parent)
        result.original = result.fixed = None
    return result


def _size_limit(path: str, options: RunOptions) -> int:
    """``max-file-size`` for Python files; a notebook's size is mostly its outputs, which
    are never parsed, so it has no limit."""
    if is_notebook(path):
        return 0
    return options.config.max_file_size if options.config is not None else MAX_FILE_BYTES


#: generated files say so near their top (the ``@generated`` convention of Meta, Fixit)
GENERATED_MARKER = "@" + "generated"  # split, so this file is not taken for one


def is_generated(text: str) -> bool:
    return GENERATED_MARKER in text[:2048]


def process_bytes(data: bytes, path: str, options: RunOptions) -> FileResult:
    """Decode and process source bytes (e.g. stdin); ``options.write`` is ignored."""
    try:
        decoded = decode_source(data)
    except FileError as error:
        return FileResult(path, error=str(error))
    try:
        return process_text(decoded.text, path, options, encoding=decoded.encoding)
    except Exception as error:
        return internal_error(FileResult(path), error)


def process_text(
    text: str, path: str, options: RunOptions, *, encoding: str = "utf-8"
) -> FileResult:
    """Lint (and fix) decoded source ``text``; ``path`` only names it (a ``.ipynb`` name
    makes ``text`` a notebook, :mod:`gradfix.notebook`). No I/O."""
    if is_notebook(path):
        return _process_notebook(text, path, options, encoding)
    result = FileResult(path, original=text, encoding=encoding)
    fix = options.fix or options.write
    try:
        file_lint = FileLint(
            text,
            rules=options.rules_for(path),
            path=path,
            no_grad_callers=options.no_grad_callers,
        )
        lint = file_lint.fixed(unsafe_fixes=options.unsafe_fixes) if fix else file_lint.result()
        if options.singles and any(f.fix is not None for f in file_lint.findings):
            result.singles = file_lint.singles()
    except SourceError as error:
        result.error = str(error) + python2_hint(text, error.line)
        return result
    except Exception as error:  # a bug in a rule or the engine must not stop the run
        return internal_error(result, error)
    result.findings = sorted(lint.findings)
    result.remaining = sorted(lint.remaining if fix else lint.findings)
    result.fixed = lint.source if fix else text
    result.dropped = [*lint.dropped, *(n for n in file_lint.notes if n not in lint.dropped)]
    result.applied = lint.applied
    result.open_callers = file_lint.open_callers
    if lint.crashes:
        _rule_crashes(result, lint.crashes)
    return result


def _rule_crashes(result: FileResult, crashes: Sequence[RuleCrash]) -> None:
    """A rule that raised makes the file's error (one line; the tracebacks for
    ``--verbose``); the other rules' findings stay, and nothing is fixed (a fix is only
    applied to a file every rule could read)."""
    result.error = "; ".join(crash.line() for crash in crashes)
    result.traceback = "\n".join(crash.traceback for crash in crashes)
    result.fixed, result.remaining = result.original, list(result.findings)


#: Python 2 statements and literals that Python 3 rejects, matched on the line of a syntax
#: error: ``print "x"``, ``exec "code"``, ``except E, e:``, ``raise E, "msg"``, ``a <> b``,
#: backquotes, ``0777``, ``ur"..."``
PYTHON2_SYNTAX = re.compile(
    r"^\s*(print|exec)\s+[\w\"'>]"
    r"|^\s*except\s+[\w.]+\s*,\s*\w+\s*:"
    r"|^\s*raise\s+[\w.]+\s*,"
    r"|\w\s*<>\s*\w"
    r"|`[\w.()\[\]]+`"
    r"|(?<![\w.])0\d+(?![\w.])"
    r"|(?<!\w)[uU][rR][\"']"
)


def python2_hint(text: str, line: int | None) -> str:
    """`` (Python 2 code? gradfix reads Python 3 only)`` when the line of a syntax error
    looks like Python 2, else ``""``."""
    lines = text.splitlines()
    if line is None or not 1 <= line <= len(lines):
        return ""
    if PYTHON2_SYNTAX.search(lines[line - 1]) is None:
        return ""
    return " (this looks like Python 2: gradfix reads Python 3; port the file or exclude it)"


def _cached_process_text(text: str, path: str, options: RunOptions, *, encoding: str) -> FileResult:
    """:func:`process_text` through the content-hash cache of ``options.cache_dir``: one
    entry per text and rules serves ``check`` and ``fix`` (see :mod:`gradfix.cache`)."""
    lookup = cache_lookup(text, path, options, encoding)
    if isinstance(lookup, FileResult):
        return lookup
    result = process_text(text, path, options, encoding=encoding)
    cache_store(lookup, result, options)
    return result


@dataclass
class CacheMiss:
    """Where the result of a text the cache lacks goes (:func:`cache_store`)."""

    key: str | None = None  # None: no cache in this run
    entry: dict[str, Any] | None = None  # an entry without what this run needs


def cache_lookup(
    text: str, path: str, options: RunOptions, encoding: str
) -> FileResult | CacheMiss:
    """The cached result of ``text``, or where to store it once computed. An entry that
    fails a check (:mod:`gradfix.cache`) is a miss, overwritten once computed."""
    if options.cache_dir is None or options.no_grad_callers:
        return CacheMiss()
    from gradfix.cache import BadEntry, ResultCache, cache_key, source_hash

    codes = [rule.code for rule in options.rules_for(path)]
    key = cache_key(text, codes)
    entry = ResultCache(options.cache_dir).get(key)
    if entry is None:
        return CacheMiss(key)
    result = FileResult(path, original=text, encoding=encoding)
    try:
        if entry.get("source") != source_hash(text):
            raise BadEntry("computed from another source")
        cached = _from_entry(entry, result, options, frozenset(codes))
    except (BadEntry, RecursionError):
        return CacheMiss(key)  # nothing of it is kept
    return cached if cached is not None else CacheMiss(key, entry)


def cache_store(miss: CacheMiss, result: FileResult, options: RunOptions) -> None:
    if miss.key is None or options.cache_dir is None or result.traceback is not None:
        return  # no cache; an internal error is not a property of the file
    from gradfix.cache import ResultCache

    ResultCache(options.cache_dir).put(miss.key, _to_entry(result, miss.entry, options))


def _fix_mode(options: RunOptions) -> str | None:
    """The key of the fixed text in a cache entry; None when not fixing."""
    if not (options.fix or options.write):
        return None
    return "unsafe" if options.unsafe_fixes else "safe"


def _has_fixes(findings: Sequence[Finding], mode: str) -> bool:
    """Some finding has a fix that ``mode`` applies (else fixing changes nothing)."""
    safe = FixSafety.SAFE.value
    return any(f.fix is not None and (mode == "unsafe" or f.fix.safety == safe) for f in findings)


def _from_entry(
    entry: dict[str, Any], result: FileResult, options: RunOptions, codes: frozenset[str]
) -> FileResult | None:
    """``result`` filled from a cache entry; None when the entry lacks the fixed text this
    run needs (the file must be linted with fixes). Raises :class:`gradfix.cache.BadEntry`
    on a field of the wrong type or a code none of the rules ``codes`` has."""
    from gradfix.cache import expect, expect_list, findings_from_json

    result.findings = findings_from_json(entry.get("findings"), codes)
    result.remaining, result.fixed = list(result.findings), result.original
    result.error = _optional(entry.get("error"), str)
    result.skipped_cells = expect_list(entry.get("skipped_cells", []), str)
    result.open_callers = tuple(expect_list(entry.get("open_callers"), str))
    if options.singles and any(f.fix is not None for f in result.findings):
        if entry.get("singles") is None:
            return None  # linted without them: lint again
        result.singles = _singles_from_json(entry["singles"], codes)
    mode = _fix_mode(options)
    if mode is None or result.error is not None or not _has_fixes(result.findings, mode):
        return result
    fixed = expect(entry.get("fixes"), dict).get(mode)
    if fixed is None:
        return None
    fixed = expect(fixed, dict)
    result.remaining = findings_from_json(fixed.get("remaining"), codes)
    text = _optional(fixed.get("text"), str)
    result.fixed = result.original if text is None else text
    result.dropped = expect_list(fixed.get("dropped"), str)
    result.applied = _optional(fixed.get("applied"), int)
    return result


def _optional(value: object, kind: type[T]) -> T | None:
    from gradfix.cache import expect

    return None if value is None else expect(value, kind)


def _to_entry(
    result: FileResult, previous: dict[str, Any] | None, options: RunOptions
) -> dict[str, Any]:
    """The cache entry of ``result``, keeping the fixed texts of ``previous`` (other modes)."""
    from gradfix.cache import findings_to_json, source_hash

    fixes = dict(previous["fixes"]) if previous is not None else {}
    mode = _fix_mode(options)
    if mode is not None and _has_fixes(result.findings, mode):
        fixes[mode] = {
            "text": result.fixed if result.changed else None,
            "remaining": findings_to_json(result.remaining),
            "dropped": result.dropped,
            "applied": result.applied,
        }
    singles = None if result.singles is None else _singles_to_json(result.singles)
    if singles is None and previous is not None:
        singles = previous.get("singles")  # computed by an earlier run: kept
    return {
        "source": source_hash(result.original or ""),
        "findings": findings_to_json(result.findings),
        "error": result.error,
        "skipped_cells": result.skipped_cells,
        "open_callers": list(result.open_callers),
        "fixes": fixes,
        "singles": singles,
    }


def _singles_to_json(singles: Sequence[SingleFix]) -> list[dict[str, Any]]:
    from gradfix.cache import findings_to_json

    return [
        {
            "findings": findings_to_json(single.findings),
            "safety": single.safety,
            "description": single.description,
            "source": single.source,
        }
        for single in singles
    ]


def _singles_from_json(items: object, codes: frozenset[str]) -> list[SingleFix]:
    from gradfix.cache import FIX_SAFETIES, BadEntry, expect, findings_from_json

    singles = []
    for item in expect(items, list):
        item = expect(item, dict)
        if item.get("safety") not in FIX_SAFETIES:
            raise BadEntry("a fix's safety is not one gradfix has")
        singles.append(
            SingleFix(
                findings_from_json(item.get("findings"), codes),
                item["safety"],
                expect(item.get("description"), str),
                _optional(item.get("source"), str),
            )
        )
    return singles


def _process_notebook(text: str, path: str, options: RunOptions, encoding: str) -> FileResult:
    """Like :func:`process_text`; ``original`` / ``fixed`` are the notebook file texts."""
    from gradfix.notebook import lint_notebook  # only for notebooks

    result = FileResult(path, original=text, fixed=text, encoding=encoding)
    try:
        lint = lint_notebook(
            text,
            rules=options.rules_for(path),
            path=path,
            fix=options.fix or options.write,
            unsafe_fixes=options.unsafe_fixes,
        )
    except SourceError as error:
        result.error = str(error)
        return result
    except Exception as error:  # a bug in a rule or the engine must not stop the run
        return internal_error(result, error)
    result.findings, result.remaining = sorted(lint.findings), sorted(lint.remaining)
    result.fixed, result.dropped = lint.text, lint.dropped
    result.skipped_cells = lint.skipped
    if lint.crashes:
        _rule_crashes(result, lint.crashes)
    return result


def refix_selected(
    result: FileResult, options: RunOptions, keep: Callable[[Finding], bool]
) -> None:
    """Recompute ``result.fixed`` with only the fixes whose findings ``keep`` accepts.
    ``fix --verify`` uses it to apply proven fixes only, then :func:`write_result`.

    The first pass applies the accepted fixes of the original; two of them that overlap
    (GF103 and GF105 on one call) cannot be applied in one pass, so later passes apply
    the fixes of the findings still reported on the line of an accepted finding, with its
    code (lines followed through the edits), unless a finding refused there has that
    code too: what the engine's passes do without ``keep``, limited to what was accepted.
    The caller proves the accepted fixes together."""
    if result.original is None or result.error is not None:
        return
    if is_notebook(result.path):
        from gradfix.notebook import lint_notebook

        notebook = lint_notebook(
            result.original,
            rules=options.rules_for(result.path),
            path=result.path,
            fix=True,
            unsafe_fixes=options.unsafe_fixes,
            keep=keep,
        )
        result.fixed = notebook.text
        result.remaining = sorted(notebook.remaining)
        result.applied = None  # counted from the findings fixed
        return
    rules = options.rules_for(result.path)

    def lint(text: str, chosen: Callable[[Finding], bool]) -> LintResult:
        return lint_source(
            text,
            rules=rules,
            path=result.path,
            fix=True,
            unsafe_fixes=options.unsafe_fixes,
            keep=chosen,
        )

    done = lint(result.original, keep)
    source, applied = done.source, done.applied
    refused = {(f.line, f.code) for f in result.findings if not keep(f)}
    wanted = {(f.line, f.code) for f in result.findings if keep(f)} - refused
    origin: list[int | None] = list(range(1, result.original.count("\n") + 2))  # -> original
    previous = result.original
    for _ in range(MAX_PASSES - 1):
        if source == previous or not wanted:
            break
        origin = [
            origin[line - 1] if line is not None else None
            for line in _line_origins(previous, source)
        ]

        def follow(finding: Finding, origin: list[int | None] = origin) -> bool:
            line = origin[finding.line - 1] if finding.line <= len(origin) else None
            return (line, finding.code) in wanted

        if not any(follow(f) for f in done.remaining):
            break
        previous, done = source, lint(source, follow)
        source, applied = done.source, applied + done.applied
    result.fixed = source
    result.remaining = sorted(done.remaining)
    result.applied = applied


def _line_origins(before: str, after: str) -> list[int | None]:
    """For each line of ``after``, the line of ``before`` it comes from (1-based; None for
    a line an edit inserted; a line of a rewritten block maps to the block's line of the
    same rank, or its last)."""
    import difflib

    old, new = before.split("\n"), after.split("\n")
    origins: list[int | None] = [None] * len(new)
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("equal", "replace"):
            for j in range(j1, j2):
                origins[j] = i1 + min(j - j1, i2 - i1 - 1) + 1
    return origins


def write_result(result: FileResult, tree: Sequence[str] = ()) -> None:
    """Write ``result.fixed`` over the file unless it changed on disk since it was read
    (``tree``: :attr:`RunResult.tree`, where the run may write)."""
    if result.error is not None or not result.changed or result.original is None:
        return
    try:
        source = read_source(result.path)
    except FileError as error:
        result.error = str(error)
        return
    if source.text != result.original:
        result.error = "changed on disk while it was being verified; not written"
        result.fixed, result.remaining = result.original, list(result.findings)
        return
    _write(source, result, tree)


def refuse_unwritable(run: RunResult) -> None:
    """Before proving the fixes that ``write_result`` will write: each changed file that
    would not be written (a link out of the tree, other hard links) gets its error now,
    and keeps its findings, so that none of its code is run for nothing."""
    for result in run.files:
        if result.error is not None or not result.changed:
            continue
        try:
            check_write_target(result.path, run.tree)
        except FileError as error:
            result.error = str(error)
            result.fixed, result.remaining = result.original, list(result.findings)


def _write(source: SourceFile, result: FileResult, tree: Sequence[str]) -> None:
    assert result.fixed is not None
    try:
        write_source(source, result.fixed, tree=tree)
    except FileError as error:
        result.error = str(error)
        result.remaining = list(result.findings)  # nothing was fixed on disk
        result.fixed = result.original
        return
    result.written = True


def internal_error(result: FileResult, error: Exception) -> FileResult:
    """``result`` failed on a bug of gradfix: one line, the traceback for ``--verbose``."""
    lines = str(error).strip().splitlines()
    detail = f": {lines[0]}" if lines else ""
    result.error = f"internal error: {type(error).__name__}{detail}; please report"
    result.traceback = traceback.format_exc()
    return result
