"""Configuration: ``[tool.gradfix]`` in the nearest ``pyproject.toml``, or ``gradfix.toml``.

    [tool.gradfix]
    select = ["GF1", "GF2"]          # instead of the rules enabled by default
    extend-select = ["GF205"]        # added to the selection
    ignore = ["GF106"]
    exclude = ["build/*", "legacy/**/*.py"]
    unsafe-fixes = false
    max-file-size = 5_000_000        # bytes; larger files are skipped with a note (0: no limit)
    [tool.gradfix.per-file-ignores]
    "tests/*" = ["GF201"]

The nearest file is searched from the current directory upwards (a ``gradfix.toml``
beats a ``pyproject.toml`` in the same directory; a ``pyproject.toml`` without a
``[tool.gradfix]`` table is skipped). ``--config KEY=VALUE`` overrides one key, the value
written in TOML (``--config "ignore=['GF106']"``, ``--config unsafe-fixes=true``). An
unknown key, a value of the wrong type or an unknown rule code is a :class:`ConfigError`
with a one-line message, never ignored. Patterns are matched with ``fnmatch`` against the
path relative to the configuration's directory and against the file name.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gradfix.fileio.files import MAX_FILE_BYTES

if TYPE_CHECKING:
    from gradfix.rule import Rule

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python < 3.11
    import tomli as tomllib

LIST_KEYS = ("select", "extend-select", "ignore", "exclude")
KNOWN_KEYS = (*LIST_KEYS, "per-file-ignores", "unsafe-fixes", "max-file-size")


class ConfigError(ValueError):
    """A bad configuration; ``str()`` is a one-line message naming where."""


@dataclass
class Config:
    select: list[str] | None = None
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    unsafe_fixes: bool = False
    #: Python files larger than this many bytes are skipped with a note; 0: no limit
    max_file_size: int = MAX_FILE_BYTES
    #: where it came from (for messages and relative patterns); None: no file
    path: str | None = None
    #: the keys set by ``--config`` overrides (not by the file)
    overridden: frozenset[str] = frozenset()

    @property
    def root(self) -> str:
        return os.path.dirname(os.path.abspath(self.path)) if self.path else os.getcwd()

    def origin(self, key: str) -> str:
        """Where ``key`` was set, for messages: ``pyproject.toml [tool.gradfix] ignore``,
        ``gradfix.toml ignore``, ``--config ignore=...``."""
        if key in self.overridden or self.path is None:
            return f"--config {key}=..."
        table = "" if self.path.endswith("gradfix.toml") else " [tool.gradfix]"
        return f"{_shown(self.path)}{table} {key}"

    def is_excluded(self, path: str) -> bool:
        return _matches(path, self.exclude, self.root)

    def ignored_for(self, path: str) -> list[str]:
        """The codes ``per-file-ignores`` turns off for ``path``."""
        codes: list[str] = []
        for pattern, ignored in self.per_file_ignores.items():
            if _matches(path, [pattern], self.root):
                codes += ignored
        return codes


def resolve_rules(
    config: Config,
    select: Sequence[str] | None = None,
    ignore: Sequence[str] = (),
    path: str | None = None,
) -> list[type[Rule]]:
    """The rules to run: ``select`` (the command line's or the editor's) replaces the
    configuration's, ``ignore`` adds to it, ``extend-select`` adds rules, and with ``path``
    its ``per-file-ignores`` apply. Raises :class:`gradfix.registry.SelectionError` on an
    unknown code anywhere."""
    from gradfix.registry import select_rules

    _check_codes(config)
    chosen = select if select is not None else config.select
    ignored = [*config.ignore, *ignore, *(config.ignored_for(path) if path else [])]
    rules = select_rules(chosen, ignored)
    if config.extend_select:
        extra = select_rules(config.extend_select, ignored)
        rules = sorted({*rules, *extra}, key=lambda rule: rule.code)
    return rules


def _check_codes(config: Config) -> None:
    """Unknown codes in the configuration are errors that name the key they are in (the
    command line's own are checked by :func:`select_rules`)."""
    from gradfix.registry import all_rules, parse_selectors

    known = all_rules()
    for key, codes in (
        ("select", config.select),
        ("extend-select", config.extend_select),
        ("ignore", config.ignore),
    ):
        parse_selectors(codes, known, config.origin(key))
    for pattern, codes in config.per_file_ignores.items():
        parse_selectors(codes, known, f"{config.origin('per-file-ignores')} {pattern!r}")


def find_config(start: str | None = None) -> str | None:
    """The nearest ``gradfix.toml`` or ``pyproject.toml`` with ``[tool.gradfix]``."""
    directory = os.path.abspath(start or os.getcwd())
    while True:
        candidate = os.path.join(directory, "gradfix.toml")
        if os.path.isfile(candidate):
            return candidate
        candidate = os.path.join(directory, "pyproject.toml")
        if os.path.isfile(candidate) and _has_gradfix_table(candidate):
            return candidate
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def load_config(path: str | None = None, overrides: Sequence[str] = ()) -> Config:
    """Read ``path`` (default: :func:`find_config`) and apply ``--config`` overrides."""
    path = path if path is not None else find_config()
    table: dict[str, Any] = {}
    if path is not None:
        data = _read_toml(path)
        table = data if path.endswith("gradfix.toml") else data.get("tool", {}).get("gradfix", {})
        table = dict(table)
    overridden = set()
    for override in overrides:
        key, value = _parse_override(override)
        table[key] = value
        overridden.add(key)
    return dataclasses.replace(_from_table(table, path), overridden=frozenset(overridden))


def _shown(path: str) -> str:
    """``path`` relative to the current directory when it is inside it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _read_toml(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: invalid TOML: {error}") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror}") from None


def _has_gradfix_table(path: str) -> bool:
    try:
        return "gradfix" in _read_toml(path).get("tool", {})
    except ConfigError:
        return True  # report the broken file rather than skip it silently


def _parse_override(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep:
        raise ConfigError(f"--config {text!r}: expected KEY=VALUE (e.g. unsafe-fixes=true)")
    try:
        parsed = tomllib.loads(f"value = {value.strip()}")["value"]
    except tomllib.TOMLDecodeError:
        raise ConfigError(
            f"--config {text!r}: the value must be TOML, e.g. \"ignore=['GF106']\""
        ) from None
    return key.strip(), parsed


def _from_table(table: dict[str, Any], path: str | None) -> Config:
    where = path or "--config"
    unknown = sorted(set(table) - set(KNOWN_KEYS))
    if unknown:
        known = ", ".join(KNOWN_KEYS)
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} in [tool.gradfix] (known: {known})")
    config = Config(path=path)
    for key in LIST_KEYS:
        if key in table:
            setattr(config, key.replace("-", "_"), _string_list(table[key], key, where))
    if "per-file-ignores" in table:
        value = table["per-file-ignores"]
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: per-file-ignores must be a table of pattern = [codes]")
        config.per_file_ignores = {
            str(pattern): _string_list(codes, f"per-file-ignores.{pattern}", where)
            for pattern, codes in value.items()
        }
    if "unsafe-fixes" in table:
        if not isinstance(table["unsafe-fixes"], bool):
            raise ConfigError(f"{where}: unsafe-fixes must be true or false")
        config.unsafe_fixes = table["unsafe-fixes"]
    if "max-file-size" in table:
        value = table["max-file-size"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{where}: max-file-size must be a number of bytes (0: no limit)")
        config.max_file_size = value
    return config


def _string_list(value: Any, key: str, where: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: {key} must be a list of strings")
    return list(value)


def _matches(path: str, patterns: Sequence[str], root: str) -> bool:
    if not patterns:
        return False
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute, root).replace(os.sep, "/")
    name = os.path.basename(absolute)
    for pattern in patterns:
        pattern = pattern.rstrip("/")
        if fnmatch.fnmatch(relative, pattern) or fnmatch.fnmatch(name, pattern):
            return True
        if relative.startswith(pattern + "/"):  # a directory name excludes what it holds
            return True
    return False
