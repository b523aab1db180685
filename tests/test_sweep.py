"""The robustness sweep (bench/sweep.py) over real code from PyPI wheels.

- ``test_sweep_of_the_ci_sample``: a fixed sample of the pinned corpus
  (``bench/corpus_sample.txt``: every file where ``--select ALL`` has a fix, and a seeded
  random draw of the others), in the default run;
- ``test_sweep_of_the_whole_corpus``: every file of transformers, timm and diffusers,
  marked slow (``--run-slow`` or ``GRADFIX_SLOW=1``).

The wheels are downloaded once with ``pip download --no-deps`` into ``$GRADFIX_CORPUS``
(default ``~/.cache/gradfix-corpus``). Without network the tests skip, except in CI
(``CI=true``), where a sweep that silently did not run would be a lie: they fail.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
SAMPLE = BENCH / "corpus_sample.txt"


def load_bench(name: str) -> ModuleType:
    """``bench/NAME.py`` (a script directory, not a package) as a module."""
    spec = importlib.util.spec_from_file_location(f"gradfix_bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


corpus = load_bench("corpus")
sweep = load_bench("sweep")


def fetch_corpus(packages: list[str]) -> Path:
    """The pinned wheels of ``packages``, unpacked; the root the sample paths start from."""
    specs = [f"{name}=={corpus.PINNED[name]}" for name in packages]
    try:
        corpus.fetch(specs, corpus.cache_dir())
    except (subprocess.CalledProcessError, OSError, zipfile.BadZipFile) as error:
        message = f"cannot download the corpus ({', '.join(specs)}): {error}"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(message)  # CI must run the sweep, not skip it
        pytest.skip(message)
    return corpus.cache_dir() / "src"


def packages_of(files: list[str]) -> list[str]:
    """The pinned packages whose unpacked wheels (``name-version-py3-none-any/``) hold
    ``files``."""
    tops = {path.split("/", 1)[0] for path in files}
    return [
        name
        for name, version in corpus.PINNED.items()
        if any(top.startswith(f"{name}-{version}-") for top in tops)
    ]


def assert_sweep_passes(root: Path, files: list[str], work: Path) -> None:
    report = sweep.sweep(root, files, work, jobs=2)
    print(report.summary())
    assert report.problems == []
    assert report.changed, "the files no longer exercise fix --write (regenerate the sample)"


def test_sweep_of_the_ci_sample(tmp_path: Path) -> None:
    files = sweep.read_sample(SAMPLE)
    root = fetch_corpus(packages_of(files))
    assert_sweep_passes(root, files, tmp_path)


@pytest.mark.slow
def test_sweep_of_the_whole_corpus(tmp_path: Path) -> None:
    root = fetch_corpus(list(corpus.PINNED))
    files = [
        f"{directory.name}/{relative}"
        for directory in sorted(root.iterdir())
        if directory.name in {f"{n}-{v}-py3-none-any" for n, v in corpus.PINNED.items()}
        for relative in sweep.python_files(directory)
    ]
    assert_sweep_passes(root, files, tmp_path)


def test_the_sweep_reports_a_violation(tmp_path: Path) -> None:
    """The sweep can fail: a file gradfix cannot parse makes ``check`` exit 2."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "ok.py").write_text("import torch\nx = torch.ones(2)\n", encoding="utf-8")
    (source / "broken.py").write_text("def f(:\n", encoding="utf-8")
    report = sweep.sweep(source, ["broken.py", "ok.py"], tmp_path / "work", jobs=1)
    assert [problem.split(": ")[:2] for problem in report.problems] == [
        ["check", "exit 2"],
        ["fix --write", "exit 2"],
    ]
    assert report.changed == []
    assert (tmp_path / "work" / "broken.py").read_bytes() == b"def f(:\n"


def test_stderr_lines_must_name_a_file(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("x = 1\n", encoding="utf-8")
    stderr = (
        "m.py: syntax error at line 1: invalid syntax\n"
        "warning: docs: no Python files found\n"
        "m.py: internal error: KeyError: 'x' (run with --verbose for the traceback)\n"
        "Traceback (most recent call last):\n"
        "gone.py: no such file or directory\n"
    )
    assert sweep.bad_stderr_lines("check", stderr, tmp_path) == [
        "check: stderr: m.py: internal error: KeyError: 'x' (run with --verbose for the traceback)",
        "check: stderr: Traceback (most recent call last):",
        "check: stderr: gone.py: no such file or directory",
    ]
