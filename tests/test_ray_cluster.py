"""``--executor ray`` on a cluster of simulated nodes (ray.cluster_utils.Cluster): a node
that dies mid-run loses nothing. Its own module: it starts its own Ray."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from crashing_rule import KillsWorker  # noqa: E402
from test_ray_executor import RUNTIME_ENV  # noqa: E402

from gradfix.ray_executor import RayExecutor  # noqa: E402
from gradfix.registry import select_rules  # noqa: E402
from gradfix.runner import RunOptions, process_paths  # noqa: E402


def test_a_node_killed_mid_run_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray.cluster_utils import Cluster

    from gradfix import ray_executor

    monkeypatch.setattr(ray_executor, "BATCH_FILES", 2)  # tasks on every node

    for number in range(36):
        (tmp_path / f"m{number}.py").write_text(
            "import torch\nw = torch.randn(3, requires_grad=True)\nw.normal_()  # slow-file\n"
        )
    options = RunOptions(rules=[*select_rules(), KillsWorker])
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0}, connect=False)
    nodes = [cluster.add_node(num_cpus=1) for _ in range(3)]
    ray.init(address=cluster.address, log_to_driver=False, runtime_env=RUNTIME_ENV)
    try:
        killer = threading.Timer(1.5, lambda: cluster.remove_node(nodes[0]))
        killer.start()
        started = time.monotonic()
        with RayExecutor() as executor:
            run = process_paths([str(tmp_path)], options, executor=executor)
        killer.join()
        assert time.monotonic() - started > 1.5  # the node died while files were in flight
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert len(run.files) == 36
    assert all(r.error is None and [f.code for f in r.findings] == ["GF201"] for r in run.files)
