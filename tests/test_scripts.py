"""Every benchmark script not run elsewhere (tests/test_bench.py, test_planner.py,
test_rows.py) runs here as its user would run it, on settings that take seconds: the exit
status is 0 and the tables it prints hold the figures it promises. The scripts assert
inside that every plan they report passed the checker."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_script(name: str, *args: str, timeout: int = 180) -> str:
    """stdout of ``python scripts/NAME.py ARGS`` (fails the test on a non-zero exit)."""
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", f"{name}.py"), *args],
                         capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def table_rows(text: str, first: str) -> list[list[str]]:
    """The cells of the markdown table rows of ``text`` whose first cell is ``first``."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first:
            rows.append(cells)
    return rows


def test_bench_heuristic_all_parts(tmp_path):
    """Small windows against the exact solver, the production table (N = 256 here),
    the kernel and the scaling table: each prints its rows, the heuristic is below LPT +
    ffd, and nothing is cached outside ``--cache``."""
    out = run_script("bench_heuristic", "--small", "1", "--exact-time", "2", "--production", "--kernel",
                     "--kernel-seconds", "0.2", "--scaling", "--sizes", "128", "--samples", "128", "--time", "0.5",
                     "--cache", str(tmp_path))
    assert re.search(r"all 1 windows: median gap to the exact plan [0-9.]+ %", out)
    heuristic = table_rows(out, "heuristic")
    lpt = table_rows(out, "LPT+ffd")
    assert len(heuristic) == 1 and len(lpt) == 1
    assert float(heuristic[0][1]) <= float(lpt[0][1])
    assert re.search(r"anneal kernel \d+ proposed moves/s", out)
    assert len(table_rows(out, "screened (32 exact)")) == 2
    assert len(table_rows(out, "128")) == 1  # the scaling row
    assert sorted(os.listdir(tmp_path)) == ["rp_bench_ling_flash_128.npz"]


def test_bench_heuristic_routing_corr_window(tmp_path):
    """``--routing-corr`` builds (and caches) its own window beside the default one, in a
    ``--cache`` folder that did not exist yet (made, not a traceback after the window was
    built); the scaling table plans that window too (one window in the cache)."""
    cache = tmp_path / "new" / "cache"
    out = run_script("bench_heuristic", "--production", "--samples", "128", "--time", "0.3", "--routing-corr", "0",
                     "--scaling", "--sizes", "128", "--cache", str(cache))
    assert len(table_rows(out, "heuristic")) == 1
    assert len(table_rows(out, "128")) == 1  # the scaling row
    assert os.listdir(cache) == ["rp_bench_ling_flash_128_corr0.npz"]


def test_bench_exact_runs_and_joint():
    """Two packing runs (CP-SAT with symmetry breaking, HiGHS without) prove their tiny
    windows optimal with valid plans; the joint comparison prints its summary per G."""
    out = run_script("bench_exact", "--runs", "8:1:sync:cpsat:1", "8:2:shard:highs:0", "--time-limit", "10")
    rows = [line for line in out.splitlines() if line.startswith("|   8 |")]
    assert len(rows) == 2
    for row in rows:
        assert "| optimal " in row and row.rstrip().endswith("| True |")
    out = run_script("bench_exact", "--runs", "--joint", "1", "--time-limit", "5")
    assert len(re.findall(r"G=[12]: joint beats LPT-then-exact on \d+/\d+ windows", out)) == 2


def test_bench_exact_cubes():
    """``--cubes`` reaches the solver: a tiny two-shard window is proven optimal with a valid
    plan (small enough to end before any cube is split)."""
    out = run_script("bench_exact", "--runs", "8:2:shard:cpsat:1", "--time-limit", "10", "--cubes")
    rows = [line for line in out.splitlines() if line.startswith("|   8 |")]
    assert len(rows) == 1 and "| optimal " in rows[0] and rows[0].rstrip().endswith("| True |")


def test_bench_planner_two_steps():
    """Step 0 cold, step 1 warm-started from the previous layout."""
    out = run_script("bench_planner", "--sizes", "128", "--limits", "0.5")
    rows = table_rows(out, "128")
    assert [r[2] for r in rows] == ["0", "1"]
    assert [r[3] for r in rows] == ["none", "layout"]


@pytest.mark.parametrize("part", ["--skip-deepseek", "--skip-ling"])
def test_bench_placement_parts(part):
    """Each half of the placement report on a tiny setting; LPT removes most of the
    per-layer CV of identity placement on the Ling windows."""
    out = run_script("bench_placement", "--samples", "32", "--ranks", "8", "--backends", "highs", "--time-limit", "1",
                     "--mip-gaps", "1e-2", "--skews", "1.0", "--ling-seeds", "1", "--ling-ranks", "8", part)
    if part == "--skip-deepseek":
        lpt = [line.split() for line in out.splitlines() if re.match(r"\s*0\s+8\s+lpt\s", line)]
        assert len(lpt) == 1 and float(lpt[0][6]) > 90.0  # CV removed %
    else:
        assert re.search(r"^8\s+highs\s+0\.01\s", out, flags=re.M)


def test_bench_rows_and_score(tmp_path):
    """R* timing table on one window; scoring and checking a plan are timed."""
    out = run_script("bench_rows", "--samples", "64", "--dp", "4", "--seeds", "1", "--time-limit", "2")
    assert "windows 1, optimal 1" in out
    out = run_script("bench_score", "--samples", "64", "--layers", "4", "--repeat", "1", "--cache",
                     str(tmp_path / "w.npz"))
    assert re.search(r"N=64 L=4 E=256 R=\d+: score median [0-9.]+ s", out)
    assert (tmp_path / "w.npz").exists()


@pytest.mark.parametrize("name, args", [("bench_lumpiness", ["--time-limit", "1", "--swap-seconds", "0.1"]),
                                        ("bench_refine", ["--limits", "1"])])
def test_window_scripts_on_an_infeasible_window(tmp_path, name, args):
    """``--window`` with 8 samples for one row of D = 16 slots: the heuristic returns no plan
    (``infeasible``); the script says so in one line with the reason and exits 1 (it died
    with an AttributeError traceback on ``res.plan.placement`` inside the checker)."""
    from rp_opt.cli import main

    window = str(tmp_path / "w.npz")
    assert main(["gen", "--samples", "8", "--dp", "16", "--ep", "2", "--experts", "4", "--top-k", "2",
                 "--layers", "2", "--capacity", "4096", "-o", window]) == 0
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", f"{name}.py"), "--window", window, *args],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error")]
    assert errors == ["error: window: heuristic returned no plan (infeasible: window has 8 samples for 16 cells "
                      "(one row of D=16 slots); every cell needs a sample; use at most 8 DP slots or add 8 samples)"]


def test_bpplib_log_in_a_new_folder(tmp_path):
    """docs/bpplib.md's commands log to /tmp/rw/final.log: the folder need not exist."""
    log = tmp_path / "rw" / "final.log"
    out = run_script("bpplib", "--root", os.path.join(ROOT, "tests", "data", "bpplib"), "--folders", "scholl_1",
                     "--limit", "1", "--time-limit", "2", "--log", str(log), "--json")
    assert '"folder": "scholl_1"' in out and log.read_text().count("\n") == 1
