"""``--executor ray``: lint and fix the files of a run on a Ray cluster (issue 15).

The driver (the ``gradfix`` process) reads every file, asks the cache, writes every fixed
file and keeps the order of the results; Ray workers only compute: source text travels
to them in batches and results come back, so no shared filesystem is needed. The results
are the local executor's, byte for byte (the same :func:`gradfix.runner.process_text`).

    with RayExecutor(address=None) as executor:         # None: RAY_ADDRESS, else a local Ray
        run = process_paths(paths, options, executor=executor)

Faults: a batch whose worker or node dies is retried by Ray (``max_retries``); a batch
that keeps failing is split and each of its files tried alone, and a file that still
fails gets a one-line error while the run goes on. Ctrl-C cancels the tasks in flight;
a file is written by the driver once its whole result is back, atomically, or not at all.

Ray is an optional extra (``pip install 'gradfix[ray]'``), imported only here.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gradfix.engine import cyclic_gc_paused
from gradfix.runner import (
    CacheMiss,
    FileResult,
    RunOptions,
    cache_lookup,
    cache_store,
    finish_file,
    internal_error,
    process_text,
    read_for_run,
)

if TYPE_CHECKING:
    from gradfix.fileio.files import SourceFile

#: characters of source text per task: enough to make a task's overhead small, small
#: enough to spread a run over the cluster's CPUs
BATCH_CHARS = 200_000
BATCH_FILES = 32
#: tasks in flight per CPU of the cluster: the driver keeps the workers busy while it
#: reads the next files, without holding the whole tree's text at once
IN_FLIGHT_PER_CPU = 4
#: Ray retries a task whose worker or node died this many times
MAX_RETRIES = 3
#: the error of a file that failed alone after its batch kept failing
CRASHED = "crashed a Ray worker {attempts} times (skipped; the run goes on)"
#: runs of the files on a cluster that failed itself (its raylet, its connection): the
#: second on a Ray started again
CLUSTER_ATTEMPTS = 2


class ClusterFailed(Exception):
    """The Ray cluster itself failed during the run (one line for the user)."""


def _one_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


class RayMissing(Exception):
    """``ray`` cannot be imported (one line for the user)."""


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayMissing(
            "--executor ray needs Ray: pip install 'gradfix[ray]' (or pip install ray)"
        ) from None
    return ray


@dataclass
class _Pending:
    """A file read by the driver and sent to the cluster."""

    position: int
    source: SourceFile
    miss: CacheMiss


@dataclass
class _Batch:
    items: list[_Pending] = field(default_factory=list)
    chars: int = 0


class RayExecutor:
    """Runs the files of a run on Ray (see the module docstring). As a context manager it
    connects to ``address`` (``None``: ``RAY_ADDRESS``, else a Ray started for the run and
    stopped after it)."""

    def __init__(
        self, address: str | None = None, num_cpus: int | None = None, ship: str | None = None
    ) -> None:
        """``ship``: the project directory the cluster's workers run in (verification
        executes the project's code where it expects its files), shipped once when the
        run connects (Ray's ``runtime_env`` working directory)."""
        self.address = address
        self.num_cpus = num_cpus
        self.ray = import_ray()
        self._started = False
        self.ship = None if ship is None else os.path.abspath(ship)
        #: the directory the workers run in, when it was shipped
        self.shipped: str | None = None
        self._restore_stdout: Callable[[], None] = lambda: None
        self._init_kwargs: dict[str, Any] = {}

    def __enter__(self) -> RayExecutor:
        ray = self.ray
        self._restore_stdout = ray_messages_to_stderr(ray)
        if not ray.is_initialized():
            address = self.address or os.environ.get("RAY_ADDRESS") or None
            if address is not None:
                _check_reachable(address)
            if self.ship is not None:
                _check_snapshot(self.ship)
            self._init_kwargs = self._kwargs(address)
            ray.init(**self._init_kwargs)
            self._started = True
            self.shipped = self.ship
        self._warm_workers()
        return self

    def _kwargs(self, address: str | None) -> dict[str, Any]:
        """``ray.init``'s arguments for this run."""
        kwargs: dict[str, Any] = {
            "address": address,
            "include_dashboard": False,
            "log_to_driver": False,  # the workers print nothing the user needs
            "logging_level": logging.ERROR,  # nor do Ray's own start-up notes
        }
        if address is None:
            # a Ray started for this run: no metrics for a dashboard nobody opens (its
            # agents took about a tenth of two cores during a run)
            kwargs["_system_config"] = {"enable_metrics_collection": False}
        if address is None and self.num_cpus is not None:
            kwargs["num_cpus"] = self.num_cpus
        if self.ship is not None:
            excludes = list(SNAPSHOT_EXCLUDES)
            kwargs["runtime_env"] = {"working_dir": self.ship, "excludes": excludes}
        return kwargs

    def restart(self) -> None:
        """Start the Ray of this run again (or connect to its cluster again) after the
        cluster itself failed; only for a connection this executor made."""
        ray = self.ray
        try:
            ray.shutdown()
        except Exception:  # what is left of the failed cluster: its own to clean up
            logging.getLogger(__name__).debug("ray.shutdown after a failure", exc_info=True)
        ray.init(**self._init_kwargs)
        self._warm_workers()

    def _warm_workers(self) -> None:
        """Start one worker per CPU and import the rules there now, while the cluster
        comes up, not during the first batches of the run (a fresh Ray worker does not
        inherit the driver's modules as a forked pool worker does)."""
        warm = self.ray.remote(_import_rules)
        self.ray.get([warm.remote() for _ in range(self.cpus())])

    def __exit__(self, *exc: object) -> None:
        if self._started:
            self.ray.shutdown()
        self._restore_stdout()

    def cpus(self) -> int:
        return max(1, int(self.ray.cluster_resources().get("CPU", 1)))

    def map(
        self, paths: Sequence[str], options: RunOptions, tick: Callable[[], None]
    ) -> list[FileResult]:
        """One result per path, in order (see :class:`gradfix.runner.Executor`). When the
        cluster itself fails (:class:`ClusterFailed`) and this executor started or
        connected it, it is started again once and the files without a result are sent
        again (those done, and written, are kept)."""
        results: list[FileResult | None] = [None] * len(paths)
        for attempt in range(CLUSTER_ATTEMPTS):
            todo = [position for position, result in enumerate(results) if result is None]
            try:
                self._map_into(paths, todo, options, tick, results)
                break
            except ClusterFailed as failure:
                if attempt + 1 == CLUSTER_ATTEMPTS or not self._started:
                    raise
                print(
                    f"gradfix: the Ray cluster failed ({failure}); starting it again for "
                    f"the {sum(r is None for r in results)} files left",
                    file=sys.stderr,
                )
                try:
                    self.restart()
                except Exception as error:  # Ray's own, whatever they are: one line
                    again = f"{failure}; starting it again: {_one_line(error)}"
                    raise ClusterFailed(again) from error
        return [r for r in results if r is not None]

    def _map_into(
        self,
        paths: Sequence[str],
        todo: Sequence[int],
        options: RunOptions,
        tick: Callable[[], None],
        results: list[FileResult | None],
    ) -> None:
        """The results of the paths at the positions ``todo``, into ``results``."""
        ray = self.ray
        options_ref = ray.put(options)
        remote = ray.remote(max_retries=MAX_RETRIES, retry_exceptions=False)(_lint_batch)
        in_flight: dict[Any, _Batch] = {}
        limit = IN_FLIGHT_PER_CPU * self.cpus()

        def settle(batch: _Batch, computed: list[FileResult]) -> None:
            for item, result in zip(batch.items, computed):
                cache_store(item.miss, result, options)
                results[item.position] = finish_file(item.source, result, options)
                tick()

        def collect(block: bool) -> None:
            ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=None if block else 0)
            for ref in ready:
                batch = in_flight.pop(ref)
                settle(batch, self._batch_results(ref, batch, options_ref, remote))

        try:
            for batch in self._batches(paths, options, results, tick, todo):
                in_flight[remote.remote(_payload(batch), options_ref)] = batch
                while len(in_flight) >= limit:
                    collect(block=True)
            while in_flight:
                collect(block=True)
        except KeyboardInterrupt:
            for ref in in_flight:
                ray.cancel(ref, force=True)
            raise
        except self._cluster_failures() as error:
            raise ClusterFailed(_one_line(error)) from error

    def _cluster_failures(self) -> tuple[type[BaseException], ...]:
        """What Ray raises when the cluster, not a task or a worker, failed."""
        exceptions = self.ray.exceptions
        return (
            exceptions.LocalRayletDiedError,
            exceptions.RaySystemError,
            exceptions.RpcError,
            ConnectionError,
        )

    def _batches(
        self,
        paths: Sequence[str],
        options: RunOptions,
        results: list[FileResult | None],
        tick: Callable[[], None],
        todo: Sequence[int] | None = None,
    ) -> Iterator[_Batch]:
        """The files to compute (at the positions ``todo``; None: all), read by the
        driver, in batches; the others (unreadable, too large, generated, cached) get
        their result here."""
        batch = _Batch()
        for position in range(len(paths)) if todo is None else todo:
            path = paths[position]
            source = read_for_run(path, options)
            if isinstance(source, FileResult):
                results[position] = source
                tick()
                continue
            lookup = cache_lookup(source.text, path, options, source.encoding)
            if isinstance(lookup, FileResult):
                results[position] = finish_file(source, lookup, options)
                tick()
                continue
            batch.items.append(_Pending(position, source, lookup))
            batch.chars += len(source.text)
            if batch.chars >= BATCH_CHARS or len(batch.items) >= BATCH_FILES:
                yield batch
                batch = _Batch()
        if batch.items:
            yield batch

    def _batch_results(
        self, ref: Any, batch: _Batch, options_ref: Any, remote: Any
    ) -> list[FileResult]:
        """The batch's results; when it kept failing, each file tried alone."""
        ray = self.ray
        try:
            computed: list[FileResult] = ray.get(ref)
            return computed
        except self._cluster_failures():
            raise  # not the batch's fault: :meth:`map` starts the cluster again
        except (ray.exceptions.RayError, OSError):
            if len(batch.items) == 1:
                item = batch.items[0]
                crashed = CRASHED.format(attempts=MAX_RETRIES + 1)
                return [FileResult(item.source.path, error=crashed)]
        alone = []
        for item in batch.items:
            single = _Batch([item], len(item.source.text))
            alone += self._batch_results(
                remote.remote(_payload(single), options_ref), single, options_ref, remote
            )
        return alone


#: seconds to wait for a cluster's address to answer (Ray itself would wait for minutes)
CONNECT_TIMEOUT = 5.0


def ray_messages_to_stderr(ray: Any) -> Callable[[], None]:
    """Send the messages Ray's driver prints for the cluster (``(raylet) A worker died
    ...``, node deaths) to stderr, and return what undoes it.

    Ray prints them on stdout even with ``log_to_driver=False``, and stdout is gradfix's
    report (``--format json``, SARIF, a diff). They go through ``print_to_stdstream`` of
    ``ray._private.worker``, looked up at each message; a Ray without it is left as is."""
    module: Any = getattr(getattr(ray, "_private", None), "worker", None)
    original = getattr(module, "print_to_stdstream", None)
    if original is None or getattr(original, "gradfix_stderr", False):
        return lambda: None

    def to_stderr(data: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        return original({**data, "is_err": True}, *args, **kwargs)

    to_stderr.gradfix_stderr = True  # type: ignore[attr-defined]
    module.print_to_stdstream = to_stderr

    def restore() -> None:
        module.print_to_stdstream = original

    return restore


def _import_rules() -> int:
    from gradfix.registry import all_rules

    return len(all_rules())


def _check_reachable(address: str) -> None:
    """Raise :class:`ConnectionError` when nothing answers at ``host:port`` (also
    ``ray://host:port``); ``auto`` and ``local`` are Ray's to resolve."""
    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT).close()
    except OSError as error:
        raise ConnectionError(f"nothing answers at {address} ({error.strerror or error})") from None


def _payload(batch: _Batch) -> list[tuple[str, str, str]]:
    return [(i.source.path, i.source.text, i.source.encoding) for i in batch.items]


def _lint_batch(items: list[tuple[str, str, str]], options: RunOptions) -> list[FileResult]:
    """Run on a Ray worker: each (path, text, encoding) linted and fixed as
    :func:`gradfix.runner.process_text` does, nothing read or written."""
    results = []
    with cyclic_gc_paused():
        for path, text, encoding in items:
            try:
                results.append(process_text(text, path, options, encoding=encoding))
            except Exception as error:  # whatever happens to one file, the run goes on
                results.append(internal_error(FileResult(path), error))
    return results


# --- verification on the cluster --------------------------------------------------------

#: the project shipped to the cluster for verification, at most (Ray's working directory)
MAX_SNAPSHOT_BYTES = 100 * 2**20
#: never shipped: version control, caches, environments
SNAPSHOT_EXCLUDES = (
    ".git",
    ".hg",
    ".gradfix_cache",
    "__pycache__",
    ".venv",
    "venv",
    "node_modules",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".tox",
)


class SnapshotTooLarge(Exception):
    """The project is too large to ship to the cluster (one line for the user)."""


def snapshot_bytes(root: str) -> int:
    """The bytes of ``root`` that would be shipped (:data:`SNAPSHOT_EXCLUDES` left out)."""
    total = 0
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = [d for d in subdirectories if d not in SNAPSHOT_EXCLUDES]
        for name in files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_size
            except OSError:
                continue
    return total


def _verify_file(
    relative: str,
    source: str,
    rules: Sequence[type],
    unsafe: bool,
    limits: dict[str, Any],
    command: tuple[str, float, int, int | None] | None,
    together: tuple[Sequence[type], bool, bool] | None = None,
) -> tuple[list[Any], list[Any]] | Exception:
    """Run on a Ray worker, in the shipped project: :func:`gradfix.proof.verify_fixes` of
    one file, and the changes it proved (:func:`gradfix.proof.proven_changes`, which the
    driver need not run again: with ``together``, the file's accepted fixes together as
    well, see :func:`gradfix.proof.prove_accepted_together`); an error of the file (it
    does not parse, a bad ``--entry``) is returned."""
    from gradfix.proof import one_run, prove_accepted_together, proven_changes, verify_fixes
    from gradfix.verify.command import CommandHarness

    harness = None
    if command is not None:
        text, timeout, seed, max_steps = command
        harness = CommandHarness(text, timeout=timeout, seed=seed, max_steps=max_steps)
    try:
        with one_run():
            found = verify_fixes(
                relative, source, rules=rules, unsafe=unsafe, jobs=1, command=harness, **limits
            )
            if together is not None:
                file_rules, unsafe_fixes, unverified = together
                prove_accepted_together(
                    relative,
                    source,
                    found,
                    rules=file_rules,
                    unsafe_fixes=unsafe_fixes,
                    unverified=unverified,
                    command=harness,
                    **limits,
                )
            return found, proven_changes(relative)
    except Exception as error:  # SourceError, EntryError: the driver reports them
        return error
    finally:
        if harness is not None:
            harness.close()


def _check_snapshot(root: str) -> None:
    size = snapshot_bytes(root)
    if size > MAX_SNAPSHOT_BYTES:
        raise SnapshotTooLarge(
            f"{root} is {size / 2**20:.0f} MB, over the {MAX_SNAPSHOT_BYTES // 2**20} MB "
            "that can be shipped to the cluster for verification: verify from a "
            "subdirectory, or without --executor ray"
        )


def verify_on(
    executor: RayExecutor,
    files: Sequence[tuple[str, str]],
    *,
    rules: Sequence[type],
    unsafe: bool,
    limits: dict[str, Any],
    judged: Callable[[int], None] = lambda count: None,
    together: Sequence[tuple[Sequence[type], bool, bool]] | None = None,
) -> list[list[Any] | Exception | None]:
    """:func:`gradfix.proof.verify_fixes` of each (path, source) on the cluster, in the
    project the executor shipped (each program runs where it expects its files); the
    verdicts name the driver's paths. ``None`` for a file the cluster cannot run (outside
    the shipped directory, or nothing shipped: a Ray started by someone else in this
    process): the caller verifies it here. ``judged(n)`` is called as each file's n
    verdicts come back, in the order the cluster finishes them. ``together``, for each
    file (its rules, ``--unsafe-fixes``, whether unverified fixes are accepted): its
    accepted fixes together are proven there too, as the caller will ask."""
    ray = executor.ray
    root = executor.shipped
    if root is None:
        return [None] * len(files)
    limits = dict(limits)
    harness = limits.pop("command", None)
    command = None
    if harness is not None:
        command = (harness.command, harness.timeout, harness.seed, harness.max_steps)
    remote = ray.remote(max_retries=MAX_RETRIES, retry_exceptions=False)(_verify_file)
    from gradfix.proof import remember_proven

    remember = functools.partial(remember_proven, **limits, command=harness)
    results: list[list[Any] | Exception | None] = [None] * len(files)
    pending: dict[Any, int] = {}
    for index, (path, source) in enumerate(files):
        relative = os.path.relpath(os.path.abspath(path), root)
        if not relative.startswith(os.pardir + os.sep):
            accept = None if together is None else together[index]
            ref = remote.remote(relative, source, rules, unsafe, limits, command, accept)
            pending[ref] = index
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        index = pending.pop(done[0])
        found = _verdicts_of(ray, done[0], files[index], remember)
        if isinstance(found, list):
            judged(len(found))
        results[index] = found
    return results


def _verdicts_of(
    ray: Any, ref: Any, file: tuple[str, str], remember: Callable[..., None]
) -> list[Any] | Exception:
    """The verdicts of one file's remote verification, naming the driver's path, or its
    error (a worker lost more often than Ray retries, one line); the changes the worker
    proved are ``remember``-ed as proven in the driver's run."""
    path, source = file
    try:
        found = ray.get(ref)
    except ray.exceptions.RayError as error:
        return RuntimeError(f"crashed a Ray worker while verifying: {type(error).__name__}")
    if isinstance(found, Exception):
        return found
    verdicts, proven = found
    remember(path, source, proven)
    return [dataclasses.replace(v, path=path) for v in verdicts]
