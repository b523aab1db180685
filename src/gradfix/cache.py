"""A content-hash cache of per-file results: a re-run over an unchanged tree is near-instant.

The key is a SHA-256 of the file's text, the rules that run on it (codes) and gradfix's
version, so any change to one of them misses. ``check`` and ``fix`` share the entry: it
holds the findings, and the fixed text of each fix mode computed so far (``safe`` /
``unsafe``); a file whose findings have no fix needs none, so ``fix`` after ``check``
lints only the files with something to fix. Entries are small JSON files under
``.gradfix_cache/`` (created with a ``.gitignore`` of ``*``), written atomically, so
parallel workers and interrupted runs never leave a torn entry.

The entries are not trusted: the folder sits in the project, where anything can edit or
ship it, and ``fix --write --no-verify`` writes an entry's fixed text as it is. Each
entry is signed with an HMAC-SHA256 of its key and text under a secret of the user's own
(:func:`cache_secret`, outside the project), and the runner checks each field's type,
the codes against the rules that ran and the hash of the source the entry was computed
from. An entry that fails any check is a miss: computed again and overwritten, never an
error and never written to a file. Without a secret (no writable user cache directory)
there is no cache.

    cache = ResultCache(".gradfix_cache")
    hit = cache.get(key)            # None on a miss
    cache.put(key, entry)
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import tempfile
from collections.abc import Collection, Sequence
from functools import lru_cache
from typing import Any, TypeVar

from gradfix.rule import Finding, FixSafety, FixSummary

CACHE_DIR_NAME = ".gradfix_cache"
#: the layout of an entry's file: ``{"gradfix_cache": 2, "digest": ..., "payload": ...}``
ENVELOPE_VERSION = 2
#: the secret's file, in the user's cache directory (``$XDG_CACHE_HOME`` or ``~/.cache``)
SECRET_NAME = os.path.join("gradfix", "cache-secret")
FIX_SAFETIES = frozenset(safety.value for safety in FixSafety)


class BadEntry(ValueError):
    """A cache entry that is not what gradfix writes (edited, of another layout): a miss."""


def secret_path() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, SECRET_NAME)


def cache_secret() -> bytes | None:
    """The user's key that signs cache entries, created on first use (32 random bytes,
    mode 0600, outside any project); None when it can neither be read nor created."""
    return _secret_at(secret_path())


@lru_cache(maxsize=4)
def _secret_at(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            secret = handle.read()
        if len(secret) >= 32:
            return secret
    except OSError:
        pass
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        handle_fd, temporary = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        try:
            with os.fdopen(handle_fd, "wb") as out:
                out.write(os.urandom(32))
            # linked, not renamed: of two first runs at once (pool workers), one secret
            # is created and both read it
            os.link(temporary, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(temporary)
        with open(path, "rb") as handle:
            secret = handle.read()
    except OSError:
        return None
    return secret if len(secret) >= 32 else None


def sign(name: str, payload: str) -> str | None:
    """The signed file text of ``payload`` (JSON) stored as ``name``; None without a secret."""
    secret = cache_secret()
    if secret is None:
        return None
    envelope = {"gradfix_cache": ENVELOPE_VERSION, "digest": _digest(secret, name, payload)}
    envelope["payload"] = payload
    return json.dumps(envelope)


def unsign(name: str, text: str) -> Any:
    """The JSON value signed in ``text`` as ``name``; raises :class:`BadEntry` when the
    file is not a signed entry of this name (edited, copied, another user's)."""
    secret = cache_secret()
    try:
        envelope = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise BadEntry("not JSON") from error
    if not isinstance(envelope, dict) or envelope.get("gradfix_cache") != ENVELOPE_VERSION:
        raise BadEntry("another layout")
    digest, payload = envelope.get("digest"), envelope.get("payload")
    if secret is None or not isinstance(digest, str) or not isinstance(payload, str):
        raise BadEntry("not signed")
    if not hmac.compare_digest(digest, _digest(secret, name, payload)):
        raise BadEntry("the digest does not match")
    try:
        return json.loads(payload)
    except (ValueError, RecursionError) as error:  # signed by us: cannot happen
        raise BadEntry("not JSON") from error


def _digest(secret: bytes, name: str, payload: str) -> str:
    message = f"{name}\0{payload}".encode("utf-8", "surrogatepass")
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def source_hash(text: str) -> str:
    """The hash of the source an entry was computed from (kept in the entry)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@lru_cache(maxsize=1)
def gradfix_version() -> str:
    """A fingerprint of the installed code (name, size and modification time of each
    module): a new release, a reinstall or an editable install that changed misses the
    cache. Not the release's number: ``importlib.metadata`` alone costs a warm run 5 %,
    and a new release writes new files."""
    import gradfix
    import gradfix.codemods

    fingerprint = hashlib.sha256()
    for package in (gradfix, gradfix.codemods):
        for directory in package.__path__:
            for root, _, files in sorted(os.walk(directory)):
                for name in sorted(f for f in files if f.endswith(".py")):
                    stat = os.stat(os.path.join(root, name))
                    fingerprint.update(f"{name}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return fingerprint.hexdigest()[:16]


def cache_key(text: str, codes: Sequence[str]) -> str:
    """The entry of ``text`` checked with the rules ``codes`` (fix options are not part of
    it: they do not change the findings)."""
    digest = hashlib.sha256()
    header = f"{gradfix_version()}\0{','.join(sorted(codes))}\0"
    digest.update(header.encode("utf-8"))
    digest.update(text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


class ResultCache:
    def __init__(self, directory: str) -> None:
        self.directory = directory

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, key[:2], key + ".json")

    def get(self, key: str) -> dict[str, Any] | None:
        """The entry stored as ``key``; None when there is none, or it is not signed with
        this user's secret for this key (see the module doc)."""
        try:
            with open(self._path(key), encoding="utf-8") as handle:
                entry = unsign(key, handle.read())
        except (OSError, ValueError):  # BadEntry is a ValueError; so are decoding errors
            return None
        return entry if isinstance(entry, dict) else None

    def put(self, key: str, entry: dict[str, Any]) -> None:
        """Store ``entry``; a cache that cannot be written is silently skipped."""
        text = sign(key, json.dumps(entry))
        if text is not None:
            _write_atomically(self._path(key), text, root=self)

    def ensure_root(self) -> None:
        marker = os.path.join(self.directory, ".gitignore")
        if not os.path.exists(marker):
            os.makedirs(self.directory, exist_ok=True)
            with open(marker, "w", encoding="utf-8") as handle:
                handle.write("# created by gradfix\n*\n")


def findings_to_json(findings: Sequence[Finding]) -> list[dict[str, Any]]:
    return [
        {
            "line": f.line,
            "col": f.col,
            "code": f.code,
            "name": f.name,
            "message": f.message,
            "end_line": f.end_line,
            "end_col": f.end_col,
            "fix": None if f.fix is None else [f.fix.safety, f.fix.description],
            "cell": f.cell,
        }
        for f in findings
    ]


def findings_from_json(items: object, codes: Collection[str] | None = None) -> list[Finding]:
    """The findings of a cache entry; raises :class:`BadEntry` on a field of the wrong
    type or range, or (given ``codes``, the rules that ran) a code no rule has."""
    if not isinstance(items, list):
        raise BadEntry("findings are not a list")
    return [_finding_from_json(item, codes) for item in items]


def _finding_from_json(item: object, codes: Collection[str] | None) -> Finding:
    if not isinstance(item, dict):
        raise BadEntry("a finding is not an object")
    code = expect(item.get("code"), str)
    if codes is not None and code not in codes:
        raise BadEntry(f"no rule that ran has the code {code!r}")
    fix = item.get("fix")
    if fix is not None:
        if not (isinstance(fix, list) and len(fix) == 2 and fix[0] in FIX_SAFETIES):
            raise BadEntry("a fix is not [safety, description]")
        fix = FixSummary(fix[0], expect(fix[1], str))
    cell = item.get("cell")
    return Finding(
        line=expect(item.get("line"), int, low=1),
        col=expect(item.get("col"), int, low=1),
        code=code,
        name=expect(item.get("name"), str),
        message=expect(item.get("message"), str),
        end_line=expect(item.get("end_line"), int, low=1),
        end_col=expect(item.get("end_col"), int, low=1),
        fix=fix,
        cell=None if cell is None else expect(cell, int, low=1),
    )


T = TypeVar("T")


def expect(value: object, kind: type[T], *, low: int | None = None) -> T:
    """``value`` if it is a ``kind`` (an int: not a bool, at least ``low``), else
    :class:`BadEntry`."""
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadEntry(f"{value!r:.40} is not a {kind.__name__}")
    if low is not None and value < low:  # type: ignore[operator]
        raise BadEntry(f"{value!r} is below {low}")
    return value


def expect_list(value: object, kind: type[T]) -> list[T]:
    """``value`` if it is a list of ``kind``, else :class:`BadEntry`."""
    if not isinstance(value, list):
        raise BadEntry(f"{value!r:.40} is not a list")
    return [expect(item, kind) for item in value]


class CleanIndex:
    """Files known to have nothing to report, by path, modification time and size.

    A warm run stats a file and, when nothing changed since it was found clean with the
    same rules, neither reads nor parses it (ruff's cache does the same); ``check`` and
    ``fix`` share the index (a file without findings has nothing to fix). Only clean
    files are listed: a file with findings, fixes or errors always goes through the
    content-hash cache, which gives back its text and results exactly.

        index = CleanIndex.open(cache_dir)
        if index.is_clean(path, codes): ...
        index.record(path, stat, codes); index.save()
    """

    def __init__(self, path: str, entries: dict[str, list[Any]]) -> None:
        self.path = path
        self.entries = entries
        self.dirty = False

    @classmethod
    def open(cls, directory: str) -> CleanIndex:
        digest = hashlib.sha256(gradfix_version().encode()).hexdigest()
        path = os.path.join(directory, f"clean-{digest[:16]}.json")
        try:
            with open(path, encoding="utf-8") as handle:
                entries = unsign(os.path.basename(path), handle.read())
        except (OSError, ValueError):  # unreadable, or not signed by this user: empty
            entries = {}
        return cls(path, entries if isinstance(entries, dict) else {})

    @staticmethod
    def signature(stat: os.stat_result) -> list[int]:
        return [stat.st_mtime_ns, stat.st_size, stat.st_ino]

    def lookup(self, path: str, stat: os.stat_result | None, codes: str) -> list[Any] | None:
        """The entry of ``path`` if it is still clean: ``[mtime, size, inode, codes, skipped]``."""
        entry = self.entries.get(os.path.abspath(path))
        if stat is None or not isinstance(entry, list) or len(entry) != 5:
            return None
        if entry[:3] != self.signature(stat) or entry[3] != codes:
            return None
        if entry[4] not in (None, "generated"):  # only these are recorded
            return None
        return entry

    def record(self, path: str, stat: os.stat_result, codes: str, skipped: str | None) -> None:
        self.entries[os.path.abspath(path)] = [*self.signature(stat), codes, skipped]
        self.dirty = True

    def forget(self, path: str) -> None:
        if self.entries.pop(os.path.abspath(path), None) is not None:
            self.dirty = True

    def save(self) -> None:
        """Write the index atomically; an index that cannot be written is skipped."""
        if not self.dirty:
            return
        directory = os.path.dirname(self.path)
        text = sign(os.path.basename(self.path), json.dumps(self.entries))
        if text is not None:
            _write_atomically(self.path, text, root=ResultCache(directory))


def _write_atomically(path: str, text: str, *, root: ResultCache) -> None:
    """Write ``text`` to ``path`` in one step (a temporary file renamed); a cache that
    cannot be written is silently skipped."""
    try:
        root.ensure_root()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except OSError:
        pass
