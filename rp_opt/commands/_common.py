"""Helpers shared by the subcommands: instance loading, JSON output, tables, progress."""

from __future__ import annotations

import json
import os
import sys
import time
from importlib import resources

from ..errors import InputError
from ..io import load_instance
from ..result import _jsonable
from ..window import Instance

DEFAULT_INSTANCE = "default.npz"


def default_instance_path() -> str:
    """Path of the embedded default instance (shipped in ``instances/``)."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    candidates = [os.path.join(here, "instances", DEFAULT_INSTANCE)]
    try:
        candidates.append(str(resources.files("rp_opt").joinpath("data", DEFAULT_INSTANCE)))
    except (ModuleNotFoundError, TypeError):  # pragma: no cover
        pass
    for path in candidates:
        if os.path.exists(path):
            return path
    raise InputError("file", f"the default instance {DEFAULT_INSTANCE} is not installed; pass a FILE.npz")


def open_instance(path: str | None) -> tuple[Instance, str]:
    """Load ``path`` (or the embedded default when None) and return it with its path."""
    path = path or default_instance_path()
    return load_instance(path), path


def add_json(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print a JSON summary on stdout instead of tables")


def emit_json(data: dict) -> None:
    json.dump(_jsonable(data), sys.stdout, indent=1)
    sys.stdout.write("\n")


def table(headers: list[str], rows: list[list], file=None) -> str:
    """A plain aligned text table."""
    cells = [[str(h) for h in headers]] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(r[k]) for r in cells) for k in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    text = "\n".join(lines)
    if file is not None:
        print(text, file=file)
    return text


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


class Progress:
    """A one-line progress indicator on stderr (only on a terminal, or when forced)."""

    def __init__(self, total: int, label: str, enabled: bool | None = None):
        self.total, self.label, self.done = total, label, 0
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.start = time.perf_counter()

    def step(self, note: str = "") -> None:
        self.done += 1
        if self.enabled:
            elapsed = time.perf_counter() - self.start
            sys.stderr.write(f"\r{self.label} {self.done}/{self.total} {elapsed:6.1f}s {note[:40]:<40}")
            sys.stderr.flush()
            if self.done >= self.total:
                sys.stderr.write("\n")
