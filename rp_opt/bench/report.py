"""Gap tables from runner records: best bound per instance, gaps, per-solver summaries,
markdown output, and the JSON files of the benchmarks (strict JSON: a NaN or an infinity
is written as ``null``, see :func:`rp_opt.result.strict_json`)."""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict

from ..result import strict_json
from .stats import pm

REL_TOL = 1e-6  # a bound within this relative distance of a score proves it


def usable(rec: dict) -> bool:
    """A record whose plan counts: valid by the checker, with a score (the checker's
    recomputed score agreeing with it where the runner compared them)."""
    return bool(rec.get("valid")) and rec.get("score") is not None and rec.get("check_agrees") is not False


def plan_rows(rec: dict):
    """Rows of the record's plan (None without a plan)."""
    return rec.get("num_rows")


def bound_rows(rec: dict):
    """Rows the record's bound holds for (runner: ``bound_rows``; older records: the plan's)."""
    return rec.get("bound_rows", rec.get("num_rows"))


def plan_placement(rec: dict):
    """Name of the fixed placement the record's plan was made for (the task's
    ``placement``), or None when the solver chose its own."""
    return rec.get("placement")


def bound_applies(bound_rec: dict, rec: dict) -> bool:
    """Whether ``bound_rec``'s bound is a lower bound for ``rec``'s plan: the same row count
    and a bound for every placement, or for the fixed placement ``rec``'s plan uses (a
    bound for a placement the solver chose itself holds for that run alone)."""
    if bound_rows(bound_rec) != plan_rows(rec):
        return False
    scope = bound_rec.get("bound_placement")
    if scope is None:
        return True
    if scope == "own":
        return bound_rec is rec
    return scope == plan_placement(rec)


def _lex_less(a, b, tol: float = 1e-9) -> bool:
    """Lexicographic a < b of two score tuples, levels within ``tol`` (relative) equal."""
    for x, y in zip(a, b):
        if x < y - tol * max(1.0, abs(y)):
            return True
        if x > y + tol * max(1.0, abs(y)):
            return False
    return False


def instance_summary(records: list[dict]) -> dict[str, dict]:
    """Per instance, for its problem (packing at ``rows`` rows, the fewest any valid plan
    uses: R* when a solver planned at R*, under any placement): the best bound, the best
    valid score, whether the optimum of the primary is known, and which solver proved it.

    A bound holds only for the rows and placements it was proven for (``bound_rows``,
    ``bound_placement`` of the runner): a bound for a fixed placement (``exact``) is no
    bound for a plan with another placement, nor a bound for R rows one for R + 1 rows.
    ``bound`` is the largest bound valid for every placement at ``rows`` rows;
    ``placement_bounds`` the largest per fixed placement (at least ``bound``), and
    ``proven_for`` the fixed placements whose packing problem at ``rows`` rows some run
    proved optimal (no proof of the instance's optimum). ``best`` is the least primary of
    the valid plans with ``rows`` rows, ``best_solver`` the lexicographically best of them.
    """
    out: dict[str, dict] = {}
    by_instance: dict[str, list[dict]] = defaultdict(list)
    for rec in records:
        by_instance[rec["instance"]].append(rec)
    for name, recs in by_instance.items():
        first = recs[0]
        info = {"bound": None, "best": None, "best_solver": None, "proven_by": None, "config": first.get("config"),
                "N": first.get("N"), "G": first.get("G"), "rows": None, "placement_bounds": {}, "proven_for": []}
        planned = [r for r in recs if usable(r)]
        rows = [plan_rows(r) for r in planned if plan_rows(r) is not None]
        if rows:
            info["rows"] = min(rows)
        elif any(bound_rows(r) is not None for r in recs if r.get("bound") is not None):
            info["rows"] = min(bound_rows(r) for r in recs if r.get("bound") is not None and bound_rows(r) is not None)
        at_rows = [r for r in planned if plan_rows(r) == info["rows"]]
        if at_rows:
            info["best"] = min(r["score"] for r in at_rows)
            near = [r for r in at_rows if not _lex_less((info["best"],), (r["score"],))]
            top = near[0]
            for r in near[1:]:
                if _lex_less(r.get("score_levels") or (r["score"],), top.get("score_levels") or (top["score"],)):
                    top = r
            info["best_solver"] = top["solver"]
        placement_best: dict[str, float] = {}
        for r in at_rows:
            if plan_placement(r) is not None:
                key = plan_placement(r)
                placement_best[key] = min(placement_best.get(key, r["score"]), r["score"])
        for r in recs:
            if r.get("bound") is None or bound_rows(r) != info["rows"]:
                continue
            scope = r.get("bound_placement")
            if scope is None:
                if info["bound"] is None or r["bound"] > info["bound"]:
                    info["bound"] = r["bound"]
            elif scope != "own":
                old = info["placement_bounds"].get(scope)
                info["placement_bounds"][scope] = r["bound"] if old is None else max(old, r["bound"])
        for key, value in info["placement_bounds"].items():
            if info["bound"] is not None:
                info["placement_bounds"][key] = max(value, info["bound"])
        for r in at_rows:
            if not r.get("primary_proven"):
                continue
            scope = r.get("bound_placement")
            if scope is None and info["proven_by"] is None:
                info["proven_by"] = r["solver"]
            elif scope not in (None, "own") and scope not in info["proven_for"]:
                info["proven_for"].append(scope)
        for key, value in info["placement_bounds"].items():
            best_p = placement_best.get(key)
            if key not in info["proven_for"] and best_p is not None and value >= best_p * (1 - REL_TOL):
                info["proven_for"].append(key)
        best, bound = info["best"], info["bound"]
        # a bound above a valid plan's score is no bound: some solver's certificate is wrong
        # (for every placement: above the best plan; for a fixed one: above its best plan)
        crossed = [key for key, value in info["placement_bounds"].items()
                   if placement_best.get(key) is not None and value > placement_best[key] * (1 + REL_TOL)]
        if best is not None and bound is not None and bound > best * (1 + REL_TOL):
            crossed.insert(0, "every placement")
        # at other row counts (a baseline's rule may need more rows than the fewest): any
        # bound above a valid plan it applies to (:func:`bound_applies`)
        for r in planned:
            if plan_rows(r) == info["rows"]:
                continue
            above = [b["solver"] for b in recs if b.get("bound") is not None and bound_applies(b, r)
                     and b["bound"] > r["score"] * (1 + REL_TOL)]
            if above:
                crossed.append(f"R={plan_rows(r)}: {', '.join(above)}'s bound above {r['solver']}'s plan")
        info["bound_above_best"] = bool(crossed)
        info["crossed_bounds"] = crossed
        closed = best is not None and bound is not None and bound >= best * (1 - REL_TOL)
        # nothing is proven while a certificate is wrong
        info["optimal"] = bool(info["proven_by"] or closed) and not crossed
        if crossed:
            info["proven_for"] = []
        out[name] = info
    return out


def gap(score, reference) -> float | None:
    """(score - reference) / reference in percent (None when either is missing)."""
    if score is None or reference is None or reference <= 0:
        return None
    return 100.0 * (score - reference) / reference


def record_bound(rec: dict, records: list[dict]):
    """The largest bound valid for ``rec``'s plan among ``records`` of its instance
    (:func:`bound_applies`); None when none is."""
    bounds = [r["bound"] for r in records if r.get("bound") is not None and r["instance"] == rec["instance"]
              and bound_applies(r, rec)]
    return max(bounds) if bounds else None


def add_gaps(records: list[dict]) -> dict[str, dict]:
    """Add ``gap_bound_pct`` (to the best bound valid for the record's own plan: its rows, its
    placement when fixed) and ``gap_best_pct`` (to the instance's best score), in percent, and
    ``ref_bound`` (that bound) to every record; returns the instance summary."""
    summary = instance_summary(records)
    by_instance: dict[str, list[dict]] = defaultdict(list)
    for rec in records:
        by_instance[rec["instance"]].append(rec)
    for rec in records:
        info = summary[rec["instance"]]
        ok = usable(rec)
        # a bound above a valid plan is wrong, and then no bound of the instance is trusted
        # (the instance says which): no gap to a bound there
        rec["ref_bound"] = record_bound(rec, by_instance[rec["instance"]]) if ok and not info["crossed_bounds"] \
            else None
        rec["gap_bound_pct"] = gap(rec["score"], rec["ref_bound"]) if ok else None
        rec["gap_best_pct"] = gap(rec["score"], info["best"]) if ok else None
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


def _optimal_text(info: dict) -> str:
    if info.get("crossed_bounds"):
        return "? (a bound above a valid plan: " + ", ".join(info["crossed_bounds"]) + ")"
    if info["optimal"]:
        return "yes"
    if info.get("proven_for"):
        return "no (" + ", ".join(f"{p} placement: yes" for p in info["proven_for"]) + ")"
    return "no"


def _cell(rec: dict | None, rows=None) -> str:
    """A solver's cell of the per-instance table: gap % (seconds), and ``[R=...]`` when its
    plan has other rows than the instance's ``rows`` (its gap is then to a bound for its
    own rows, and its plan is not one of the instance's column)."""
    if rec is None:
        return "-"
    if not usable(rec):
        if rec.get("status") in ("optimal", "feasible"):
            return "invalid" if not rec.get("valid") else "score != checker's"
        return f"{rec.get('status')}"
    gap_text = "-" if rec.get("gap_bound_pct") is None else f"{rec['gap_bound_pct']:.2f}"
    seconds = rec.get("seconds")
    more = f" [R={plan_rows(rec)}]" if rows is not None and plan_rows(rec) != rows else ""
    return gap_text + ("" if seconds is None else f" ({seconds:.1f})") + more


def per_instance_rows(records: list[dict]) -> tuple[list[str], list[list]]:
    """One row per instance: rows, best bound (every placement), best bounds of fixed
    placements, optimum known, best score, and per solver the gap % to the best bound valid
    for its plan / seconds."""
    summary = add_gaps(records)
    solvers = solvers_of(records)
    by = {(r["instance"], r["solver"]): r for r in records}
    headers = (["instance", "R", "best bound", "fixed-placement bound", "optimal", "best score"]
               + [f"{s}: gap% (s)" for s in solvers])
    rows = []
    for name, info in summary.items():
        fixed = ", ".join(f"{p}: {_fmt(float(b))}" for p, b in info["placement_bounds"].items()) or "-"
        row = [name, info["rows"], info["bound"], fixed, _optimal_text(info), info["best"]]
        for s in solvers:
            row.append(_cell(by.get((name, s)), info["rows"]))
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
        valid = [r for r in recs if usable(r)]
        proven = sum(1 for r in valid if r.get("primary_proven"))
        opt = sum(1 for r in recs if summary[r["instance"]]["optimal"])
        rows.append(list(key) + [len(recs), len(valid), proven, opt,
                                 pm([r["gap_bound_pct"] for r in valid]), pm([r["gap_best_pct"] for r in valid]),
                                 pm([r.get("seconds") for r in valid], 1)])
    return headers, rows


def write_outputs(out_dir: str, name: str, tables: dict[str, tuple[list[str], list[list]]], data: dict,
                  preamble: str = "") -> str:
    """Write ``name.md`` (the tables) and ``name.json`` (``data``) into ``out_dir``.

    The JSON file is strict JSON (:func:`strict_json`): NaN and infinities are ``null``;
    an object JSON has no type for is written as its ``str``.

    Returns
    -------
    str
        The path of the markdown file.
    """
    os.makedirs(out_dir, exist_ok=True)
    parts = [preamble.strip()] if preamble.strip() else []
    for title, (headers, rows) in tables.items():
        parts.append(f"### {title}\n\n" + markdown(headers, rows))
    md_path = os.path.join(out_dir, f"{name}.md")
    with open(md_path, "w") as handle:
        handle.write("\n\n".join(parts) + "\n")
    with open(os.path.join(out_dir, f"{name}.json"), "w") as handle:
        # allow_nan=False: a non-finite float that strict_json missed fails here, not in a reader
        json.dump(strict_json(data), handle, indent=1, default=str, allow_nan=False)
    return md_path


def wrong_plans(records: list[dict]) -> list[dict]:
    """Records of plans the checker rejects, or scores differently from their solver: a
    defect, so the benchmarks exit 1 (a disagreement used to leave only the gaps). A
    returned plan that :func:`usable` would not count."""
    return [r for r in records if r.get("status") in ("optimal", "feasible") and not usable(r)]


def problems(records: list[dict], instances: dict[str, dict]) -> list[str]:
    """One line per kind of defect in a benchmark's runs (for stderr; the benchmark then
    exits 1): runs that failed, plans invalid or scored differently by the checker, bounds
    above a valid plan's score (a wrong certificate)."""
    lines = []
    errors = [r for r in records if r.get("status") == "error"]
    if errors:
        reasons: dict[str, int] = {}
        for record in errors:
            reason = " ".join(str(record.get("error", "unknown error")).split())
            reasons[reason] = reasons.get(reason, 0) + 1
        every = "every run" if len(errors) == len(records) else f"{len(errors)} of {len(records)} runs"
        shown = [f"{reason} ({n}x)" for reason, n in list(reasons.items())[:3]]
        more = f"; and {len(reasons) - 3} other reasons (see --json)" if len(reasons) > 3 else ""
        lines.append(f"{every} failed: " + "; ".join(shown) + more)
    invalid = wrong_plans(records)
    if invalid:
        lines.append(f"{len(invalid)} plan(s) invalid or scored differently by the checker (see --json: valid, "
                     "check_agrees)")
    crossed = sorted(name for name, info in instances.items() if info.get("bound_above_best"))
    if crossed:
        lines.append(f"a reported bound exceeds a valid plan's score on {', '.join(crossed[:5])} (a wrong "
                     "certificate; see --json)")
    return lines


def check_out_folder(path: str, flag: str, name: str) -> None:
    """Before the runs: :class:`~rp_opt.errors.InputError` naming ``flag`` unless ``path`` is
    a directory (created when missing) in which ``name``.md, ``name``.json and the picture
    folder ``img`` can be written (a failure after the runs would lose them)."""
    from ..commands._common import check_output
    from ..errors import InputError, require

    require(not os.path.exists(path) or os.path.isdir(path), flag, f"{path} is not a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise InputError(flag, f"cannot create directory {path} ({exc.strerror or type(exc).__name__})") from None
    for suffix in (".md", ".json"):
        check_output(os.path.join(path, name + suffix), flag)
    img = os.path.join(path, "img")
    require(not os.path.exists(img) or os.path.isdir(img), flag, f"{img} is not a directory (the pictures go there)")


def check_out_folders(args, name: str) -> None:
    """:func:`check_out_folder` of ``--out`` and ``--img`` when given (``name``: the files'
    stem), before the runs."""
    for flag, folder in (("--out", getattr(args, "out", None)), ("--img", getattr(args, "img", None))):
        if folder:
            check_out_folder(folder, flag, name)


def interrupted_message(runs: int, planned: int, wrote_nothing: bool) -> str:
    """The one line a benchmark prints (exit 130) after a Ctrl-C cut its suite short."""
    return (f"error: interrupted (Ctrl-C): {runs} of {planned} runs done, the last cut short"
            + ("; nothing written" if wrote_nothing else ""))


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
