"""A hostile training script: 23 ways to change its project, its machine or the verifier.

It has one fixable bug (GF101, `torch.tensor()` of tensors), so `gradfix fix --write`
verifies it by running it. Each attempt is tried, its error swallowed; bench/safety.py and
tests/verify/test_sandbox.py then look at what changed. It finds the project as an
attacker would: through the links of the mirror it runs in.
"""

import ctypes
import glob
import json
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import torch

PROJECT = os.path.dirname(os.path.realpath("victim_remove.txt"))
P = Path(PROJECT)
if not (P / "HOSTILE_COPY").exists():  # never on the repository's own files
    raise SystemExit("run the hostile script only on a copy (bench/safety.py makes one)")


def libc_open():
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.open(str(P / "evil_ctypes.txt").encode(), os.O_CREAT | os.O_WRONLY, 0o644)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "libc open failed")
    os.close(fd)


def dir_fd_open():
    directory = os.open(PROJECT, os.O_RDONLY)
    os.close(os.open("evil_dirfd.txt", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=directory))


def verifier_request():
    """Ask the warm verifier for a runner whose output files land in the project."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", tempfile.gettempdir())
    found = glob.glob(os.path.join(runtime, "gradfix*", "*.sock"))
    found += glob.glob(f"/tmp/gradfix-{os.getuid()}*/*.sock")
    if not found:
        raise FileNotFoundError("no verifier socket")
    spec = {"socket": "/nonexistent.sock", "cwd": PROJECT, "memory_limit": 0, "project": None,
            "stdout": str(P / "evil_socket_stdout.txt"), "stderr": str(P / "evil_socket_stderr.txt")}
    keys = glob.glob(os.path.join(os.path.dirname(found[0]), "*.key"))
    secret = Path(keys[0]).read_text() if keys else ""
    for address in found:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(5)
            conn.connect(address)
            for request in (spec, {"secret": secret, "spec": spec}):
                conn.sendall(json.dumps(request).encode() + b"\n")


ATTEMPTS = {
    "open for writing": lambda: open(P / "evil_open.txt", "w").write("x"),
    "os.open with dir_fd": dir_fd_open,
    "os.system": lambda: os.system(f"touch {P / 'evil_system.txt'}"),
    "subprocess": lambda: subprocess.run(["touch", str(P / "evil_subprocess.txt")], check=True),
    "ctypes libc open": libc_open,
    "os.mkdir": lambda: os.mkdir(P / "evil_dir"),
    "os.link": lambda: os.link(P / "victim_link.txt", P / "evil_hardlink.txt"),
    "os.symlink": lambda: os.symlink("/etc/passwd", P / "evil_symlink"),
    "os.rename": lambda: os.rename(P / "victim_rename.txt", P / "evil_renamed.txt"),
    "os.remove": lambda: os.remove(P / "victim_remove.txt"),
    "pathlib unlink": lambda: (P / "victim_unlink.txt").unlink(),
    "shutil.rmtree": lambda: shutil.rmtree(P / "victim_dir"),
    "os.chmod": lambda: os.chmod(P / "victim_chmod.txt", 0o777),
    "os.utime": lambda: os.utime(P / "victim_utime.txt", (0, 0)),
    "os.truncate": lambda: os.truncate(P / "victim_truncate.txt", 0),
    "pathlib write_text": lambda: (P / "evil_pathlib.txt").write_text("x"),
    "os.system rm": lambda: os.system(f"rm -f {P / 'victim_system_rm.txt'}"),
    "os.replace": lambda: os.replace(P / "victim_replace.txt", P / "victim_rename.txt"),
    "torch.save": lambda: torch.save(torch.zeros(1), str(P / "evil_torch.pt")),
    "posix_spawn": lambda: os.waitpid(os.posix_spawn(
        "/bin/sh", ["sh", "-c", f"echo x > {P / 'evil_spawn.txt'}"], dict(os.environ)), 0),
    "write in the home directory": lambda: (Path.home() / "gradfix-hostile-home.txt").write_text("x"),
    "write beside the project": lambda: (P.parent / "gradfix-hostile-sibling.txt").write_text("x"),
    "the verifier's socket": verifier_request,
}

for name, attempt in ATTEMPTS.items():
    try:
        attempt()
    except BaseException as error:  # noqa: BLE001 - each attempt is on its own
        print(f"{name}: {type(error).__name__}")

w = torch.randn(3, requires_grad=True)
a = torch.tensor([w[0] * 2, w[1]])
(a.sum() + w.sum()).backward()
print(w.grad)
