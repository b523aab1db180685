"""A content-hash cache of per-file results: a re-run over an unchanged tree is near-instant.

The key is a SHA-256 of the file's text, the rules that run on it (codes) and gradfix's
version, so any change to one of them misses. ``check`` and ``fix`` share the entry: it
holds the findings, and the fixed text of each fix mode computed so far (``safe`` /
``unsafe``); a file whose findings have no fix needs none, so ``fix`` after ``check``
lints only the files with something to fix. Entries are small JSON files under
``.gradfix_cache/`` (created with a ``.gitignore`` of ``*``), written atomically, so
parallel workers and interrupted runs never leave a torn entry; an unreadable entry is
a miss.

    cache = ResultCache(".gradfix_cache")
    hit = cache.get(key)            # None on a miss
    cache.put(key, entry)
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from gradfix.rule import Finding, FixSummary

CACHE_DIR_NAME = ".gradfix_cache"


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
        try:
            with open(self._path(key), encoding="utf-8") as handle:
                entry = json.load(handle)
        except (OSError, ValueError):
            return None
        return entry if isinstance(entry, dict) else None

    def put(self, key: str, entry: dict[str, Any]) -> None:
        """Store ``entry``; a cache that cannot be written is silently skipped."""
        path = self._path(key)
        try:
            self._ensure_root()
            os.makedirs(os.path.dirname(path), exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(entry, out)
            os.replace(temporary, path)
        except OSError:
            pass

    def _ensure_root(self) -> None:
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


def findings_from_json(items: Sequence[dict[str, Any]]) -> list[Finding]:
    return [
        Finding(
            line=item["line"],
            col=item["col"],
            code=item["code"],
            name=item["name"],
            message=item["message"],
            end_line=item["end_line"],
            end_col=item["end_col"],
            fix=None if item["fix"] is None else FixSummary(*item["fix"]),
            cell=item.get("cell"),
        )
        for item in items
    ]


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
                entries = json.load(handle)
        except (OSError, ValueError):
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
        try:
            ResultCache(directory)._ensure_root()
            handle, temporary = tempfile.mkstemp(dir=directory, suffix=".tmp")
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(self.entries, out)
            os.replace(temporary, self.path)
        except OSError:
            pass
