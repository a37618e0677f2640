"""rp-opt export: write a plan as JSON + .npz (phy2log, log2phy, per-slot microbatches)."""

from __future__ import annotations

import os
import zipfile
import zlib

import numpy as np

from ..errors import InputError, require
from ..io import COST_FINGERPRINT_KEY, FINGERPRINT_KEY, plan_from_dict, read_plan_file, window_fingerprint
from ._common import (add_json, check_output, check_plan_data, compare_claimed, emit_json, open_instance,
                      require_same_window, write_output)


def register(sub) -> None:
    p = sub.add_parser("export", help="export a plan for a trainer: PREFIX.json + PREFIX.npz (phy2log, log2phy, "
                                      "microbatch lists)")
    p.add_argument("file", help="instance .npz the plan is for")
    p.add_argument("plan", help="plan .json")
    p.add_argument("-o", "--output", required=True, metavar="OUT_PREFIX",
                   help="writes OUT_PREFIX.json and OUT_PREFIX.npz: a path whose directory exists (-o "
                        "runs/step3, or runs/step3.json or .npz, writes runs/step3.json and runs/step3.npz); "
                        "an existing directory is refused, not written into or beside")
    p.add_argument("--previous", metavar="EXPORT.npz",
                   help="export of the placement in force: the plan's ranks are relabelled per layer (same "
                        "cost) so that the most experts stay on their rank, and those keep their slot; "
                        "'identity' when slot e holds expert e (a trainer's first step); without it each "
                        "rank's slots are filled anew")
    add_json(p)
    p.set_defaults(run=run)


def _read_previous(path: str) -> dict:
    """The arrays of the ``--previous`` export; :class:`InputError` on ``--previous`` when
    the file is missing, empty, corrupted or not an archive (one line, never a traceback)."""
    from ..export import load_export

    try:
        return load_export(path)
    except InputError as exc:
        raise InputError("--previous", exc.message) from None
    except (EOFError, zipfile.BadZipFile, zlib.error) as exc:  # empty file, damaged members
        raise InputError("--previous", f"{path} is not an export .npz ({type(exc).__name__})") from None


def run(args) -> int:
    from ..export import checked_phy2log, export_plan, relabel_to_previous

    if args.output.endswith((".json", ".npz")):
        # -o step3.json means the prefix step3 (it wrote step3.json.json and step3.json.npz)
        args.output = os.path.splitext(args.output)[0]
    name = os.path.basename(args.output)
    require(name not in ("", ".", ".."), "-o", f"must end in a file name (the prefix of .json and .npz), "
                                               f"got {args.output!r}")
    # -o DIR wrote DIR.json and DIR.npz beside the directory (-o /tmp: /tmp.json), surely
    # not what was meant; a prefix inside it says where the files go
    example = os.path.join(args.output, "export")
    require(not os.path.isdir(args.output), "-o",
            f"{args.output} is a directory; -o takes a file prefix (-o {example} writes {example}.json and "
            f"{example}.npz)")
    for suffix in (".json", ".npz"):
        check_output(args.output + suffix, inputs={"window": args.file, "plan": args.plan})
    instance, path = open_instance(args.file)
    data = read_plan_file(args.plan, "plan")
    require_same_window(data, instance, "plan", args.plan)
    report = check_plan_data(instance, data, data.get("objective", "sync"))
    claim = {}
    if report.valid:
        plan = plan_from_dict(instance, data)   # a malformed score or stats: bad input (exit 2) first
        claim = compare_claimed(report.score, data, plan.objective, instance)
    if not report.valid or claim.get("score_matches") is False:
        # a claimed score this window does not give: a plan of another window (a file
        # without a fingerprint) or an edited one; exported, it would be stamped with
        # this window's fingerprint and keep the false score
        violations = list(report.violations) or [
            f"the plan file claims score {claim['claimed_score']}, the plan scores {list(report.score)} on this "
            "window (a plan for another window?)"]
        out = {"valid": False, "violations": violations, "file": path, "plan": args.plan}
        if args.json:
            emit_json(out)
        else:
            print("valid: false")
            for v in violations:
                print(f"  violation: {v}")
            print("nothing exported")
        return 1
    previous = None
    if args.previous == "identity":
        previous = np.tile(np.arange(plan.placement.num_experts), (plan.placement.num_layers, 1))
    elif args.previous:
        arrays = _read_previous(args.previous)
        require("phy2log" in arrays, "--previous", f"{args.previous} has no phy2log array")
        ranks = plan.placement.num_ranks
        if "placement" in arrays and np.asarray(arrays["placement"]).size:
            theirs = np.asarray(arrays["placement"])
            require(theirs.dtype.kind in "iu" or (theirs.dtype.kind == "f" and bool(np.all(np.isfinite(theirs)))),
                    "--previous", f"{args.previous} has a placement that is not ranks (dtype {theirs.dtype})")
            # a balanced placement uses every rank: its largest rank + 1 is the export's P
            theirs = int(theirs.max()) + 1
            require(theirs == ranks, "--previous",
                    f"{args.previous} is an export for P={theirs} EP ranks, this plan's cluster has P={ranks}")
        # checked here, before anything is written (the writer's own check reads as '-o')
        previous = checked_phy2log(arrays["phy2log"], plan.placement.num_layers, plan.placement.num_experts,
                                   "--previous", f"{args.previous}: phy2log ")
    relabelled = None
    if previous is not None:
        # rank labels are symmetric: relabel so that the most experts stay where they are
        plan, relabelled = relabel_to_previous(plan, previous)
    written: list[str] = []
    # a write that fails after the checks (disk full) is one line, and the summary still prints
    # the export is a plan file too: stamped with its window, as plan -o writes them (the
    # plan's own stamp, when it has one, was checked against this window above)
    stamp = {FINGERPRINT_KEY: data.get(FINGERPRINT_KEY) or window_fingerprint(instance.window)}
    if data.get(COST_FINGERPRINT_KEY) is not None:  # the plan's score stays under its own cost model
        stamp[COST_FINGERPRINT_KEY] = data[COST_FINGERPRINT_KEY]
    extra = {**stamp, "relabelled": relabelled} if relabelled else stamp
    error = write_output(lambda prefix: written.extend(export_plan(plan, prefix, previous, extra, relabel_ranks=False)),
                         args.output)
    json_path, npz_path = written if not error else (None, None)
    out = {"valid": True, "json": json_path, "npz": npz_path, "num_rows": plan.num_rows,
           "num_layers": plan.placement.num_layers, "num_experts": plan.placement.num_experts,
           "num_ranks": plan.placement.num_ranks}
    if relabelled:
        out["relabelled"] = relabelled
    if error:
        out["write_error"] = error
    if args.json:
        emit_json(out)
    else:
        print(f"{'not written' if error else f'wrote {json_path} and {npz_path}'} ({plan.num_rows} rows x "
              f"{instance.cluster.dp} slots, {plan.placement.num_layers} layers x {plan.placement.num_experts} "
              f"experts on {plan.placement.num_ranks} ranks)")
        if relabelled:
            print(f"experts on the rank that holds them now: {relabelled['kept_on_rank']} of {relabelled['experts']} "
                  f"(ranks relabelled; {relabelled['kept_without_relabelling']} as planned)")
    return 2 if error else 0
