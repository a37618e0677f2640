"""Helpers shared by ``scripts/question_*.py``: the window configuration they study, a
deterministic heuristic plan, and scoring through the independent checker."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone

from ..check import check_plan
from ..errors import InputError
from .gap import machine
from .report import add_output_arguments, image_path, print_tables, write_outputs
from .suites import InstanceSpec

# the window the questions study: medium-sized, 8 DP slots (G = 1, 2, 4, 8 all divide D)
BASE = dict(model="ling-tiny-like", samples=64, dp=8, edp=2, ep=4, capacity=8192, layers=8, experts=16,
            median_frac=0.15)
QUICK_BASE = dict(model="ling-tiny-like", samples=16, dp=4, edp=2, ep=2, capacity=4096, layers=2, experts=4,
                  median_frac=0.3)


def base_spec(quick: bool, config: str, seed: int = 0, **changes) -> InstanceSpec:
    return InstanceSpec(config=config, seed=seed, **{**(QUICK_BASE if quick else BASE), **changes})


def heuristic_options(quick: bool) -> dict:
    """A fixed annealing schedule (deterministic for a seed; the time limit only caps it)."""
    if quick:
        return {"temperatures": 3, "steps_per_temperature": 10, "replicas": 4, "workers": 1, "report_baseline": False}
    return {"temperatures": 30, "steps_per_temperature": 20, "replicas": 16, "workers": 1, "report_baseline": False}


def plan(instance, solver: str = "heuristic", *, objective: str = "sync", quick: bool = False, seed: int = 0,
         **options):
    """A plan of ``instance`` by ``solver`` (the heuristic with the fixed schedule)."""
    from ..solvers import get_solver

    opts = dict(heuristic_options(quick)) if solver == "heuristic" else {}
    opts.update(options)
    result = get_solver(solver)(instance, objective=objective, time_limit=60.0, seed=seed, **opts)
    if result.plan is None:
        raise InputError("window", f"{solver} returned no plan ({result.status_text()})")
    return result.plan


def checked_score(instance, plan, objective: str = "sync") -> float:
    """Primary score of ``plan`` on ``instance`` recomputed by the checker (which must
    accept the plan: lengths and capacity of ``instance`` are those the plan was made for)."""
    report = check_plan(instance, plan.placement.to_list(), plan.layout.to_rows(), objective)
    if not report.valid:
        raise AssertionError(f"invalid plan: {report.violations[:3]}")
    return float(report.score[0])


def parser(doc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="one tiny seed (CI)")
    p.add_argument("--seeds", type=int, default=None, help="number of seeds / steps")
    add_output_arguments(p, "question_*")
    return p


def finish(args, name: str, tables: dict, data: dict, note: str = "") -> None:
    meta = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
            "command": " ".join(sys.argv), "quick": args.quick}
    data = {"meta": meta, **data}
    if args.out:
        write_outputs(args.out, name, tables, data, f"Measured {meta['date']} on {meta['machine']}. {note}")
    if args.json:
        from ..commands._common import emit_json
        emit_json(data)
    else:
        print_tables(tables)


def img_path(args, name: str) -> str | None:
    return image_path(args, name)
