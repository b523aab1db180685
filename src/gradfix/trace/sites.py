"""Where in the user's code something happened: the innermost frame of a user file.

A *user file* is any Python file that is not part of torch, the standard library, an
installed package (site-packages / dist-packages) or gradfix itself. The answer per file
name is cached, so finding the site of an op walks a few frames and does dict lookups.

Imported in the traced process only; needs nothing but the standard library.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from types import CodeType, FrameType

Site = tuple[str, int]  # (absolute file name, 1-based line)

_GRADFIX = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    roots.add(_GRADFIX)
    return tuple(os.path.realpath(root) + os.sep for root in roots)


class UserFrames:
    """Finds the innermost frame that belongs to the user's code."""

    def __init__(self) -> None:
        self._roots = _library_roots()
        self._gradfix = os.path.realpath(_GRADFIX) + os.sep
        self._is_user: dict[str, bool] = {}

    def is_user_file(self, filename: str) -> bool:
        known = self._is_user.get(filename)
        if known is None:
            known = self._is_user[filename] = self._classify(filename)
        return known

    def is_gradfix_file(self, filename: str) -> bool:
        return os.path.realpath(filename).startswith(self._gradfix)

    def _classify(self, filename: str) -> bool:
        if filename.startswith("<") or not filename.endswith(".py"):
            return False
        path = os.path.realpath(filename)
        if any(part in path for part in ("site-packages", "dist-packages")):
            return False
        return not any(path.startswith(root) for root in self._roots)

    def site(self, depth: int = 1) -> Site | None:
        """The user frame that (directly or through libraries) called our caller."""
        frame = self.frame(depth + 1)
        return None if frame is None else (frame.f_code.co_filename, frame.f_lineno)

    def frame(self, depth: int = 1) -> FrameType | None:
        """The innermost user frame that called our caller."""
        frame: FrameType | None = sys._getframe(depth + 1)
        while frame is not None:
            if self.is_user_file(frame.f_code.co_filename):
                return frame
            frame = frame.f_back
        return None

    def traceback_site(self, tb: object) -> Site | None:
        """The innermost user frame of a traceback (where the program's error surfaced)."""
        found: Site | None = None
        while tb is not None:
            frame = tb.tb_frame  # type: ignore[attr-defined]
            if self.is_user_file(frame.f_code.co_filename):
                found = (frame.f_code.co_filename, tb.tb_lineno)  # type: ignore[attr-defined]
            tb = tb.tb_next  # type: ignore[attr-defined]
        return found


def line_in(frame: FrameType | None, code: CodeType, limit: int = 32) -> Site | None:
    """Where the frame running ``code`` (a loop's function) is, if it is ``frame`` or one
    of its callers."""
    while frame is not None and limit:
        if frame.f_code is code:
            return (code.co_filename, frame.f_lineno)
        frame, limit = frame.f_back, limit - 1
    return None
