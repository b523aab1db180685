"""``--executor ray`` keeps stdout for gradfix's report: Ray's own messages about the
cluster (``(raylet) A worker died ...``) go to stderr. A subprocess: it starts its own Ray."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("ray")

#: A worker dies under a RayExecutor; the script waits (at most a minute) until Ray's
#: driver has printed its message about it, on either stream, then says where it went.
WORKER_DIES = """
import os, sys, time
from gradfix.ray_executor import RayExecutor

class Watch:
    def __init__(self, stream):
        self.stream, self.raylet = stream, False
    def write(self, text):
        self.raylet = self.raylet or "(raylet)" in text
        return self.stream.write(text)
    def __getattr__(self, name):
        return getattr(self.stream, name)

sys.stdout, sys.stderr = Watch(sys.stdout), Watch(sys.stderr)
with RayExecutor(num_cpus=1) as executor:
    @executor.ray.remote(max_retries=0)
    def die():
        os._exit(1)
    try:
        executor.ray.get(die.remote())
    except Exception:
        pass
    deadline = time.monotonic() + 60
    while not (sys.stdout.raylet or sys.stderr.raylet) and time.monotonic() < deadline:
        time.sleep(0.2)
print("REPORT")
"""


def test_ray_messages_about_the_cluster_go_to_stderr() -> None:
    done = subprocess.run(
        [sys.executable, "-c", WORKER_DIES],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "(raylet)" in done.stderr and "A worker died" in done.stderr
    assert done.stdout == "REPORT\n"
