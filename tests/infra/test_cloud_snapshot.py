"""Each stack's registered resource graph against its reviewed snapshot.

A difference fails; to accept it, run `python -m gpufleet.program.snapshot --update` and review
the diff of tests/infra/snapshots/. Nothing here ever rewrites a snapshot.
"""

from __future__ import annotations

import json

from gpufleet.program.snapshot import render, snapshot_of, snapshot_path


def test_graph_matches_snapshot(cap):
    path = snapshot_path(cap.stack)
    assert path.is_file(), f"no snapshot for {cap.stack}: run python -m gpufleet.program.snapshot --update {cap.stack}"
    expected = json.loads(path.read_text())
    actual = json.loads(render(snapshot_of(cap)))
    if actual != expected:
        want = {(r["type"], r["name"]): r for r in expected["resources"]}
        got = {(r["type"], r["name"]): r for r in actual["resources"]}
        changed = sorted(k for k in want.keys() & got.keys() if want[k] != got[k])
        raise AssertionError(f"{cap.stack}: added {sorted(got.keys() - want.keys())[:5]}, "
                             f"removed {sorted(want.keys() - got.keys())[:5]}, changed {changed[:5]}; "
                             "if intended: python -m gpufleet.program.snapshot --update")


def test_snapshot_is_deterministic(full_capture):
    from gpufleet.program.capture import capture_program

    again = capture_program("dev", target_batch=100_000)
    assert render(snapshot_of(again)) == render(snapshot_of(full_capture("dev")))
