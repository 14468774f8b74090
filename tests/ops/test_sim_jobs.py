"""The simulated pool's job stream (gpufleet.sim.jobs) and the cost report's reading of it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from gpufleet.cost.simulated import sim_jobs
from gpufleet.cost.usage import Window, gpu_hours
from gpufleet.sim.jobs import MODES, Unit, stream, unit_spans

T0 = datetime(2026, 12, 1, tzinfo=timezone.utc).timestamp()
UNITS = [Unit(f"u{i}", part, (f"n{2 * i}", f"n{2 * i + 1}"), 16)
         for i, part in enumerate(["train"] * 6 + ["infer"] * 3 + ["debug"] * 3)]


def _admitted(until: float | None = None) -> dict[str, list[tuple[float, float]]]:
    end = until if until is not None else float("inf")
    return {s: [(T0 + 60 * i, end)] for i, u in enumerate(UNITS) for s in u.slots}


def test_a_unit_works_only_while_all_its_slots_are_admitted() -> None:
    admitted = {"a": [(0.0, 100.0), (200.0, 300.0)], "b": [(50.0, 250.0)]}
    assert unit_spans(Unit("u", "p", ("a", "b"), 8), admitted) == [(50.0, 100.0), (200.0, 250.0)]
    assert unit_spans(Unit("u", "p", ("a", "c"), 8), admitted) == []


def test_the_stream_is_seeded_covers_every_partition_and_runs_until_now() -> None:
    now = T0 + 6 * 3600
    jobs = stream(UNITS, _admitted(), now, seed=7)
    assert jobs == stream(UNITS, _admitted(), now, seed=7)  # the same seed: the same jobs
    assert {j.partition for j in jobs} == {"train", "infer", "debug"} and {j.mode for j in jobs} <= set(MODES)
    assert all(j.start < now and (j.end is None or j.end <= now) for j in jobs)
    assert any(j.end is None and j.state == "RUNNING" for j in jobs)
    seeds = {tuple(sorted({j.mode for j in stream(UNITS, _admitted(), now, seed=s)})) for s in range(12)}
    assert len({m for ms in seeds for m in ms}) == 3  # all three modes appear over seeds


def test_work_ends_when_the_nodes_leave_the_pool() -> None:
    left = T0 + 3600
    jobs = stream(UNITS, _admitted(until=left), T0 + 5 * 3600, seed=7)
    assert jobs and all(j.end is not None and j.end <= left for j in jobs)
    assert {j.state for j in jobs} <= {"COMPLETED", "CANCELLED"}


def test_the_cost_report_reads_gpu_hours_per_partition_and_team_from_it() -> None:
    from gpufleet.cost.pool_history import ADMITTED

    history = {s: [(a, ADMITTED)] for s, spans in _admitted().items() for a, _ in spans}
    now = datetime.fromtimestamp(T0, timezone.utc) + timedelta(hours=2)
    window = Window(now - timedelta(days=1), now)
    jobs = sim_jobs(UNITS, history, window, now, seed=3)
    hours: dict[tuple[str, str], float] = {}
    for j in jobs:
        hours[(j.partition, j.team)] = hours.get((j.partition, j.team), 0.0) + gpu_hours(j, window, now)
    by_part = {p: sum(h for (q, _), h in hours.items() if q == p) for p in ("train", "infer", "debug")}
    assert all(h > 0 for h in by_part.values()), by_part
    # every unit is busy from its admission on: 12 units x 16 GPUs, each admitted 60 s after the last
    assert sum(by_part.values()) <= 12 * 16 * 2 + 1e-6


def test_the_streams_utilisation_is_seeded_per_job_sampled_over_its_time_and_one_sample_for_a_short_job() -> None:
    from gpufleet.sim.jobs import UTIL_LEVELS, SimJob, utilisation

    long = SimJob("j1", "a", "t", "p", 8, 1000.0, None, "RUNNING", ("n1", "n2"), "all-units")
    short = SimJob("j2", "b", "t", "p", 8, 5000.0, 5030.0, "COMPLETED", ("n3",), "unit-jobs")
    series = utilisation([long, short], (0.0, 10_000.0), 4000.0, 300.0, seed=7)
    assert set(series) == {"n1", "n2", "n3"}
    assert [t for t, _ in series["n1"]] == [1000.0 + 300 * i for i in range(11)]  # to `now`, not past it
    assert len(series["n3"]) == 1 and series["n3"][0][0] == 5000.0  # shorter than a step: one sample
    for samples in series.values():
        level = min(UTIL_LEVELS, key=lambda lv: abs(lv - samples[0][1]))
        assert all(abs(v - level) <= 3 for _, v in samples)
    assert utilisation([long, short], (0.0, 10_000.0), 4000.0, 300.0, seed=7) == series
    assert utilisation([long], (2000.0, 2500.0), 4000.0, 300.0, seed=7)["n1"][0][0] == 2000.0  # clipped to the window


def test_the_stream_leaves_seeded_idle_gaps_with_the_busy_share_its_mixes_give() -> None:
    """Jobs start at admission, then run with gaps; over 90 days each mode's measured busy share is
    near mean run / (mean run + mean gap) of its mixes (the module docstring's figures)."""
    from statistics import mean

    from gpufleet.sim import jobs as J

    horizon = 90 * 86400.0
    admitted = {s: [(T0, T0 + horizon)] for u in UNITS for s in u.slots}
    expected = {"unit-jobs": (J.DURATIONS_S, J.GAPS_S), "all-units": (J.TRAIN_RUNS_S, J.TRAIN_GAPS_S),
                "prefill-decode": (J.SERVE_RUNS_S, J.SERVE_GAPS_S)}
    held: dict[str, list[float]] = {m: [] for m in expected}
    for seed in range(12):
        jobs = stream(UNITS, {s: [(T0 + 60 * i, T0 + horizon)] for i, s in enumerate(admitted)}, T0 + horizon + 1,
                      seed=seed)
        by_nodes: dict[tuple[str, ...], list[J.SimJob]] = {}
        for j in jobs:
            by_nodes.setdefault(j.nodes, []).append(j)
        for nodes, mine in by_nodes.items():
            mine.sort(key=lambda j: j.start)
            first = max(T0 + 60 * list(admitted).index(n) for n in nodes)
            assert mine[0].start == first  # the first job starts when its nodes are all admitted
            gaps = [b.start - a.end for a, b in zip(mine, mine[1:]) if a.end is not None]
            assert gaps and all(g > 0 for g in gaps)  # never back to back
            held[mine[0].mode].append(sum((j.end or T0 + horizon) - j.start for j in mine) / (T0 + horizon - first))
    for mode, (runs, gaps) in expected.items():
        assert held[mode], mode
        share = mean(runs) / (mean(runs) + mean(gaps))
        assert abs(mean(held[mode]) - share) < 0.05, (mode, mean(held[mode]), share)
