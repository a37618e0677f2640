"""Gap tables from runner records: best bound per instance, gaps, per-solver summaries,
markdown output."""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict

from ..result import _jsonable
from .stats import pm

REL_TOL = 1e-6  # a bound within this relative distance of a score proves it


def instance_summary(records: list[dict]) -> dict[str, dict]:
    """Per instance: the best bound any solver proved, the best valid score, whether the
    optimum of the primary is known, and which solver proved it.

    Every solver's bound holds for the packing problem of the reference placement (exact
    and heuristic receive that placement; the other solvers report the placement-free
    analytic bound of MODEL.md), so the maximum is a valid bound for that problem.
    """
    out: dict[str, dict] = {}
    for rec in records:
        info = out.setdefault(rec["instance"], {"bound": None, "best": None, "best_solver": None,
                                                "proven_by": None, "config": rec.get("config"),
                                                "N": rec.get("N"), "G": rec.get("G"), "rows": None})
        if rec.get("bound") is not None and (info["bound"] is None or rec["bound"] > info["bound"]):
            info["bound"] = rec["bound"]
        if rec.get("valid") and rec.get("score") is not None:
            if info["best"] is None or rec["score"] < info["best"]:
                info["best"], info["best_solver"] = rec["score"], rec["solver"]
            info["rows"] = info["rows"] or rec.get("num_rows")
            if rec.get("primary_proven") and info["proven_by"] is None:
                info["proven_by"] = rec["solver"]
    for info in out.values():
        best, bound = info["best"], info["bound"]
        closed = best is not None and bound is not None and bound >= best * (1 - REL_TOL)
        info["optimal"] = bool(info["proven_by"] or closed)
    return out


def gap(score, reference) -> float | None:
    """(score - reference) / reference in percent (None when either is missing)."""
    if score is None or reference is None or reference <= 0:
        return None
    return 100.0 * (score - reference) / reference


def add_gaps(records: list[dict]) -> dict[str, dict]:
    """Add ``gap_bound`` and ``gap_best`` (percent) to every record; returns the instance summary."""
    summary = instance_summary(records)
    for rec in records:
        info = summary[rec["instance"]]
        ok = rec.get("valid") and rec.get("score") is not None
        rec["gap_bound"] = gap(rec["score"], info["bound"]) if ok else None
        rec["gap_best"] = gap(rec["score"], info["best"]) if ok else None
    return summary


def _fmt(value, digits=2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown(headers: list[str], rows: list[list]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def solvers_of(records: list[dict]) -> list[str]:
    seen = []
    for rec in records:
        if rec["solver"] not in seen:
            seen.append(rec["solver"])
    return seen


def per_instance_rows(records: list[dict]) -> tuple[list[str], list[list]]:
    """One row per instance: bound, optimum known, and per solver gap to bound % / seconds."""
    summary = add_gaps(records)
    solvers = solvers_of(records)
    by = {(r["instance"], r["solver"]): r for r in records}
    headers = ["instance", "R*", "best bound", "optimal", "best score"] + [f"{s}: gap% (s)" for s in solvers]
    rows = []
    for name, info in summary.items():
        row = [name, info["rows"], info["bound"], "yes" if info["optimal"] else "no", info["best"]]
        for s in solvers:
            rec = by.get((name, s))
            if rec is None:
                row.append("-")
            elif not rec.get("valid"):
                row.append(f"{rec.get('status')}")
            else:
                row.append(f"{rec['gap_bound']:.2f} ({rec['seconds']:.1f})")
        rows.append(row)
    return headers, rows


def per_solver_rows(records: list[dict], by_config: bool = False) -> tuple[list[str], list[list]]:
    """Per solver (and configuration): runs, valid, proven optimal, mean ± std of the gap to
    the best bound and to the best score (percent), mean seconds."""
    summary = add_gaps(records)
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for rec in records:
        key = (rec["config"], rec["solver"]) if by_config else (rec["solver"],)
        groups[key].append(rec)
    headers = (["config"] if by_config else []) + ["solver", "runs", "valid", "proven optimal",
                                                    "instances optimal", "gap to bound %", "gap to best %",
                                                    "seconds"]
    rows = []
    for key, recs in groups.items():
        valid = [r for r in recs if r.get("valid")]
        proven = sum(1 for r in valid if r.get("primary_proven"))
        opt = sum(1 for r in recs if summary[r["instance"]]["optimal"])
        rows.append(list(key) + [len(recs), len(valid), proven, opt,
                                 pm([r["gap_bound"] for r in valid]), pm([r["gap_best"] for r in valid]),
                                 pm([r.get("seconds") for r in valid], 1)])
    return headers, rows


def write_outputs(out_dir: str, name: str, tables: dict[str, tuple[list[str], list[list]]], data: dict,
                  preamble: str = "") -> str:
    """Write ``name.md`` (the tables) and ``name.json`` (``data``) into ``out_dir``; returns the md path."""
    os.makedirs(out_dir, exist_ok=True)
    parts = [preamble.strip()] if preamble.strip() else []
    for title, (headers, rows) in tables.items():
        parts.append(f"### {title}\n\n" + markdown(headers, rows))
    md_path = os.path.join(out_dir, f"{name}.md")
    with open(md_path, "w") as handle:
        handle.write("\n\n".join(parts) + "\n")
    with open(os.path.join(out_dir, f"{name}.json"), "w") as handle:
        json.dump(_jsonable(data), handle, indent=1, default=str)
    return md_path


def image_path(args, name: str) -> str | None:
    """Where a script writes picture ``name``: ``--img DIR`` when given, else ``OUT/img``
    (None without ``--out``)."""
    img = getattr(args, "img", None)
    if img:
        return os.path.join(img, f"{name}.png")
    out = getattr(args, "out", None)
    return os.path.join(out, "img", f"{name}.png") if out else None


def add_output_arguments(parser, name: str) -> None:
    """``--json``, ``--out DIR`` and ``--img DIR``."""
    parser.add_argument("--json", action="store_true", help="print the data as JSON")
    parser.add_argument("--out", metavar="DIR", help=f"write {name}.md (tables) and {name}.json here")
    parser.add_argument("--img", metavar="DIR", help="write pictures here (default OUT/img)")


def print_tables(tables: dict[str, tuple[list[str], list[list]]], file=None) -> None:
    for title, (headers, rows) in tables.items():
        print(f"\n{title}\n", file=file)
        print(markdown(headers, rows), file=file)
