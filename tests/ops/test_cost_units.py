"""The cost report's pure parts: intervals, sacct parsing, window clipping, pool history, idle
units, pricing, Kueue Workloads, Prometheus answers, and the report built from all of them."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet import catalog
from gpufleet.cli import main
from gpufleet.catalog_prices import PRICES
from gpufleet.pool.slurm.hostlist import expand_hostlist
from gpufleet.cost import intervals as iv
from gpufleet.cost import kueue, prometheus, sacct
from gpufleet.cost.document import cost_document
from gpufleet.cost.pool_history import ADMITTED, QUARANTINED, by_state, transitions
from gpufleet.cost.pricing import OVERRIDE_FIELD, resolve
from gpufleet.cost.shipped_prices import DATED, OFFER_FILE, SHIPPED
from gpufleet.cost.report import UnitNodes, build, idle_units
from gpufleet.cost.usage import JobUsage, Window, gpu_hours, held, parse_when
from gpufleet.reports.write import write_report
from gpufleet.spec import ClusterSpec
from tests.ops.cost_helpers import REPO, at, s, workload
from tests.pool.conftest import small_spec

# --- intervals: each operation against a per-second brute force -------------------------------

spans = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)).map(lambda t: (float(min(t)), float(max(t)))),
                 max_size=8)


def _seconds(intervals) -> set[int]:
    return {x for a, b in intervals for x in range(int(a), int(b))}


@settings(max_examples=200, deadline=None)
@given(spans, spans)
def test_interval_operations_match_a_per_second_brute_force(a, b) -> None:
    ma, mb = iv.merged(a), iv.merged(b)
    assert _seconds(ma) == _seconds(a)
    assert all(x[1] < y[0] for x, y in zip(ma, ma[1:]))  # sorted, disjoint, not touching
    assert _seconds(iv.intersect(ma, mb)) == _seconds(a) & _seconds(b)
    assert _seconds(iv.subtract(ma, mb)) == _seconds(a) - _seconds(b)
    assert iv.total(ma) == len(_seconds(a))


# --- sacct ------------------------------------------------------------------------------------

SACCT = "\n".join([
    # JobID|JobName|Account|Partition|AllocTRES|Start|End|Elapsed|State|NodeList
    "101|pretrain|vision|train|billing=16,cpu=16,gres/gpu=16,mem=64G,node=2|2026-11-01T02:00:00|2026-11-01T04:00:00|02:00:00|COMPLETED|gpu-[01-02]",
    "102_3|sweep|speech|debug|cpu=2,gres/gpu:h100=1,gres/gpu:a100=1,node=1|2026-11-01T03:00:00|Unknown|01:00:00|RUNNING|gpu-03",
    "102_[4-9]|sweep|speech|debug||Unknown|Unknown|00:00:00|PENDING|None assigned",
    "103+0|het|vision|train|cpu=1,gres/gpu=8,node=1|2026-10-31T23:00:00|2026-11-01T01:00:00|02:00:00|CANCELLED by 0|gpu-04",
    "104|a|b|c|d|vision|train|cpu=1,node=1|2026-11-01T05:00:00|2026-11-01T06:00:00|01:00:00|FAILED|gpu-05",
])


def test_sacct_lines_become_allocations_with_their_gpus_nodes_and_running_state() -> None:
    jobs, skipped = sacct.parse(SACCT)
    by_id = {j.job_id: j for j in jobs}
    assert set(by_id) == {"101", "102_3", "103+0", "104"}
    assert by_id["101"].gpus == 16 and by_id["101"].nodes == ("gpu-01", "gpu-02") and by_id["101"].team == "vision"
    assert by_id["102_3"].gpus == 2 and by_id["102_3"].running and by_id["102_3"].end is None  # typed gres summed
    assert by_id["103+0"].state == "CANCELLED" and by_id["103+0"].start == at(-1)
    assert by_id["104"].name == "a|b|c|d" and by_id["104"].gpus == 0  # a name with pipes keeps the columns right
    assert [k.line for k in skipped] == [3] and "never started" in skipped[0].why


def test_a_truncated_sacct_line_is_an_error_naming_the_line_not_a_silent_drop() -> None:
    with pytest.raises(ValueError, match="sacct line 2: 3 fields"):
        sacct.parse(SACCT.splitlines()[0] + "\n101|x|y\n")


def test_hostlists_expand_like_slurm() -> None:
    assert expand_hostlist("gpu-[01-03,07],login") == ("gpu-01", "gpu-02", "gpu-03", "gpu-07", "login")
    assert expand_hostlist("b[8-10]") == ("b8", "b9", "b10")
    assert expand_hostlist("None assigned") == ()
    with pytest.raises(ValueError, match="bad hostlist range"):
        sacct.expand_hostlist("gpu-[a-b]")


def test_sacct_command_failure_is_an_error_that_says_so() -> None:
    def down(argv, env):
        assert env["TZ"] == "UTC" and argv[:5] == ["sacct", "-a", "-X", "-P", "-n"]
        return 1, "", "sacct: error: Problem talking to the database: Connection refused\n"

    with pytest.raises(sacct.SacctError, match="unreachable.*Connection refused"):
        sacct.SacctSource(runner=down, env={}).jobs(at(0), at(24))


# --- clipping -----------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.integers(-48, 72), st.integers(0, 48), st.booleans(), st.integers(1, 16))
def test_gpu_hours_are_clipped_to_the_window_and_running_jobs_end_now(start_h, length_h, running, gpus) -> None:
    window, now = Window(at(0), at(24)), at(20)
    job = JobUsage("1", "j", "t", "p", gpus, at(start_h), None if running else at(start_h + length_h), "X")
    end_h = 20 if running else start_h + length_h
    expected = max(0, min(end_h, 24, 20 if running else 24) - max(start_h, 0)) * gpus
    assert gpu_hours(job, window, now) == pytest.approx(expected)
    assert held(job, window, now) is None or held(job, window, now)[0] >= window.seconds[0]


def test_a_job_of_zero_seconds_inside_the_window_is_counted_with_no_gpu_hours() -> None:
    """sacct has one-second resolution: a gate run that started and ended in the same second is a
    job all the same (found on a fast CI runner: the report counted 10 of sacct's 11 jobs)."""
    window, now = Window(at(0), at(24)), at(20)
    zero = JobUsage("7", "gpufleet-gate-x", "root", "train", 0, at(3), at(3), "COMPLETED", ("a", "b"))
    outside = JobUsage("8", "j", "root", "train", 8, at(30), at(30), "COMPLETED", ("a",))
    assert held(zero, window, now) == (s(3), s(3)) and gpu_hours(zero, window, now) == 0
    assert held(outside, window, now) is None
    report = build(stack="x", pool="slurm", window=window, now=now, instance_type="p5.48xlarge", gpus_per_node=8,
                   price=None, missing_price="no price", jobs=[zero, outside], skipped=[], units=[], history=None,
                   history_note="", utilisation=None, utilisation_note="", low_util_percent=30,
                   min_idle_minutes=60, problems=[])
    assert [(g.name, g.jobs, g.gpu_hours) for g in report.by_partition] == [("train", 1, 0)]


def test_when_takes_iso_times_and_ages_and_names_what_it_expected() -> None:
    now = at(0)
    assert parse_when("30d", now) == now - timedelta(days=30)
    assert parse_when("2026-10-01", now) == datetime(2026, 10, 1, tzinfo=timezone.utc)
    with pytest.raises(ValueError, match="not an ISO date"):
        parse_when("last tuesday", now)


# --- pool history and idle units ------------------------------------------------------------

ROLLOUT = [
    {"type": "nodes", "to": "provisioned", "at": at(-2).isoformat(), "nodes": {"n1": {}, "n2": {}, "n3": {}}},
    {"type": "nodes", "to": "admitted", "at": at(0).isoformat(), "nodes": {"n1": {}, "n2": {}}},
    {"type": "nodes", "to": "quarantined", "at": at(1).isoformat(), "nodes": {"n3": {"reason_code": "xid-79"}}},
]
DAYTWO = [
    {"type": "pool", "slot": "n2", "action": "quarantine", "state": "quarantined", "at": at(10).isoformat()},
    {"type": "replace", "slot": "n3", "to": "requested", "at": at(5).isoformat()},
    {"type": "patrol", "at": at(6).isoformat()},
]


def test_pool_history_gives_each_slot_its_admitted_and_quarantined_time() -> None:
    history = transitions(ROLLOUT, DAYTWO)
    window = (s(0), s(24))
    assert by_state(history, ADMITTED, window, s(20)) == {"n1": [(s(0), s(20))], "n2": [(s(0), s(10))]}
    assert by_state(history, QUARANTINED, window, s(20)) == {"n2": [(s(10), s(20))], "n3": [(s(1), s(5))]}


def test_a_unit_is_idle_only_while_all_its_nodes_are_admitted_and_none_runs_a_job() -> None:
    unit = UnitNodes(0, "train", ("n1", "n2"), 16)
    admitted = {"n1": [(s(0), s(20))], "n2": [(s(2), s(20))]}
    busy = {"n1": [(s(4), s(6))], "n2": [(s(8), s(8.1))]}
    [(u, stretches)] = idle_units([unit], admitted, busy, min_idle_s=15 * 60)
    assert stretches == [(s(2), s(4)), (s(6), s(8)), (s(8.1), s(20))]
    assert idle_units([unit], admitted, {"n1": [(s(0), s(20))]}, 0) == []  # a job on one node keeps the unit busy
    assert idle_units([unit], {"n1": admitted["n1"]}, {}, 0) == []  # n2 never admitted: not an idle unit


# --- pricing ----------------------------------------------------------------------------------

def _spec(**cost: object) -> ClusterSpec:
    raw = small_spec().model_dump(by_alias=True, mode="json", exclude_none=True)
    raw["cost"] = cost
    return ClusterSpec.from_raw(raw, source="test")


def test_every_catalog_price_names_its_source_and_date_and_a_catalog_instance_type() -> None:
    for p in PRICES:
        assert p.instance_type in catalog.CATALOG and p.source.startswith("http") and p.dated and p.usd_per_hour > 0


def test_price_follows_the_capacity_basis_the_override_and_says_what_to_set_when_unknown() -> None:
    spec = _spec()  # p5.48xlarge on-demand in us-east-1: the shipped Price List snapshot's row
    assert spec.cluster.instance_type == "p5.48xlarge" and spec.cluster.region == "us-east-1"
    price, missing = resolve(spec)
    assert missing is None and price.usd_per_instance_hour == 55.04 and price.source == OFFER_FILE
    assert price.dated == DATED and "SKU 3D4V8UAYEMB38GU2" in price.note
    raw = small_spec().model_dump(by_alias=True, mode="json", exclude_none=True)
    raw["cluster"] = {**raw["cluster"], "region": "eu-north-1", "availabilityZone": "eu-north-1a"}
    price, missing = resolve(ClusterSpec.from_raw(raw, source="test"))  # a region no snapshot holds
    assert price is None and OVERRIDE_FIELD in missing and "p5.48xlarge (on-demand, eu-north-1" in missing
    price, missing = resolve(_spec(pricing="capacity-block"))  # none shipped: read from AWS or set
    assert price is None and "gpufleet prices" in missing and "p5.48xlarge (capacity-block" in missing
    price, _ = resolve(_spec(pricing="reservation", pricePerInstanceHour=50.0))
    assert price.usd_per_instance_hour == 50.0 and price.source.startswith(OVERRIDE_FIELD) and price.basis == "reservation"
    assert catalog.price("p5en.48xlarge", "reservation", "us-east-1").usd_per_hour == 63.296  # billed at on-demand


def test_the_shipped_snapshot_prices_p5_p5en_p4d_p4de_p6_b200_from_the_price_list_and_yields_to_the_stack() -> None:
    on_demand = {p.instance_type: p for p in SHIPPED if p.basis == "on-demand"}
    assert set(on_demand) == {"p5.48xlarge", "p5en.48xlarge", "p4d.24xlarge", "p4de.24xlarge", "p6-b200.48xlarge"}
    for p in SHIPPED:  # AWS's own offer file, dated by its version; no third-party site
        assert p.source.startswith(OFFER_FILE) and p.dated == DATED and p.usd_per_hour > 0 and p.region == "us-east-1"
    reserved = {p.instance_type: p.usd_per_hour for p in SHIPPED if p.basis == "reservation"}
    assert reserved == {k: v.usd_per_hour for k, v in on_demand.items()}  # billed at the On-Demand rate
    from gpufleet.catalog_prices import Price
    fetched = Price("p5.48xlarge", "on-demand", "us-east-1", 54.0, "AWS Price List API (pricing:GetProducts, AmazonEC2)",
                    "fetched 2026-12-01T00:00:00+00:00; 2026-11-30T00:00:00Z")
    price, _ = resolve(_spec(), [fetched])  # the stack's own snapshot (`gpufleet prices`) wins
    assert price.usd_per_instance_hour == 54.0 and price.source.startswith("AWS Price List API")
    price, _ = resolve(_spec(pricePerInstanceHour=40.0), [fetched])  # and the stack file over both
    assert price.usd_per_instance_hour == 40.0


def test_a_stack_whose_instance_has_no_price_anywhere_exits_2_naming_the_field(tmp_path) -> None:
    from tests.rollout.project import make_project
    root = make_project(tmp_path / "p")
    stack_file = root / "stacks" / "Pulumi.local.yaml"
    stack_file.write_text(stack_file.read_text().replace("us-east-1", "eu-north-1"))
    result = CliRunner().invoke(main, ["--project", str(root), "cost", "-s", "local", "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and "gpufleet:cost.pricePerInstanceHour" in result.output, result.output
    assert "gpufleet prices" in result.output


# --- Kueue Workloads --------------------------------------------------------------------------

def test_admitted_workloads_hold_their_admitted_pods_gpus_from_admission_to_finish() -> None:
    u = kueue.to_usage(workload("a", finished="2026-11-01T03:00:00Z", admitted_count=1, hosts=("n1", "n2"), team="vision"))
    assert (u.gpus, u.start, u.end, u.team, u.partition, u.nodes, u.state) == (
        8, at(1), at(3), "vision", "train", ("n1", "n2"), "Finished")
    running = kueue.to_usage(workload("b"))
    assert running.running and running.gpus == 16 and running.team == "train" and running.nodes == ()
    assert kueue.to_usage(workload("pending", admitted=None)) is None
    lost = kueue.to_usage(workload("evicted", admitted_status="False"))
    assert isinstance(lost, str) and "not recorded" in lost
    with pytest.raises(ValueError, match="workload train/bad"):
        kueue.to_usage(workload("bad", gpus="many"))


# --- Prometheus answers -------------------------------------------------------------------------

def test_a_query_range_matrix_gives_each_job_its_nodes_mean_utilisation() -> None:
    answer = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"node": "n1"}, "values": [[s(0), "90"], [s(1), "80"], [s(2), "NaN"]]},
        {"metric": {"node": "n2"}, "values": [[s(0), "10"], [s(1), "20"]]},
        {"metric": {}, "values": [[s(0), "1"]]}]}}
    series = prometheus.parse_matrix(answer)
    assert set(series) == {"n1", "n2"}
    assert prometheus.job_utilisation(series, ["n1", "n2"], (s(0), s(1))) == pytest.approx(50.0)
    assert prometheus.job_utilisation(series, ["n1"], (s(5), s(6))) is None  # no sample: not measured, never 0
    with pytest.raises(prometheus.PrometheusError, match="bad_data"):
        prometheus.parse_matrix({"status": "error", "errorType": "bad_data", "error": "parse error"})


def test_the_step_keeps_a_month_under_prometheus_points_limit() -> None:
    assert prometheus.step_for((0, 3600)) == 300
    month = 31 * 86400
    assert month / prometheus.step_for((0, month)) < prometheus.MAX_POINTS
    step = prometheus.step_for((0, month), series=1250)  # the whole fleet's answer stays within the budget
    assert 1250 * month / step <= prometheus.POINT_BUDGET and step < 1800


# --- the report -------------------------------------------------------------------------------

def test_the_report_prices_usage_finds_idle_units_low_utilisation_and_quarantine_cost(tmp_path) -> None:
    jobs, _ = sacct.parse("\n".join([
        "1|big|vision|train|gres/gpu=16|2026-11-01T00:00:00|2026-11-01T08:00:00|08:00:00|COMPLETED|n[1-2]",
        "2|small|speech|debug|gres/gpu=8|2026-11-01T12:00:00|Unknown|08:00:00|RUNNING|n1"]))
    price, _ = resolve(_spec(pricePerInstanceHour=80.0))
    series = prometheus.parse_matrix({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"node": "n1"}, "values": [[s(h), "95" if h < 10 else "5"] for h in range(24)]},
        {"metric": {"node": "n2"}, "values": [[s(h), "85"] for h in range(24)]}]}})
    report = build(stack="t", pool="slurm", window=Window(at(0), at(24)), now=at(20), instance_type="p5.48xlarge",
                   gpus_per_node=8, price=price, missing_price=None, jobs=jobs, skipped=[],
                   units=[UnitNodes(0, "train", ("n1", "n2"), 16)], history=transitions(ROLLOUT, DAYTWO),
                   history_note="", utilisation=series, utilisation_note="test", low_util_percent=30,
                   min_idle_minutes=15, problems=[])
    assert report.gpu_hours == pytest.approx(16 * 8 + 8 * 8) and report.cost_usd == pytest.approx(192 * 10)
    assert [(g.name, g.gpu_hours) for g in report.by_team] == [("vision", 128), ("speech", 64)]
    [idle] = report.idle_units  # both nodes admitted 0-10 (n2 quarantined at 10), job 1 ran 0-8
    assert (idle.idle_hours, idle.stretches, idle.cost_usd) == (pytest.approx(2), 1, pytest.approx(2 * 16 * 10))
    assert [j.job_id for j in report.low_util_jobs] == ["2"] and report.low_util_jobs[0].util_percent == 5.0
    assert {q.slot: q.hours for q in report.quarantined} == {"n2": 10.0, "n3": 4.0}
    assert report.quarantined_cost_usd == pytest.approx(14 * 80)
    assert report.admitted_gpu_hours == pytest.approx((20 + 10) * 8)
    doc = cost_document(report)
    paths = write_report(doc, report, tmp_path, "cost")
    assert json.loads(paths["json"].read_text())["by_team"][0]["name"] == "vision"
    assert "gpufleet:cost.pricePerInstanceHour" in paths["md"].read_text()  # the price's source is shown


def test_unknown_usage_is_never_reported_as_zero() -> None:
    report = build(stack="t", pool="slurm", window=Window(at(0), at(24)), now=at(20), instance_type="p5.48xlarge",
                   gpus_per_node=8, price=None, missing_price="no price for p5.48xlarge", jobs=None, skipped=[],
                   units=[], history=None, history_note="no journal", utilisation=None, utilisation_note="not read",
                   low_util_percent=30, min_idle_minutes=15, problems=["Slurm accounting unreachable: refused"])
    assert report.gpu_hours is None and report.cost_usd is None and not report.complete
    doc = cost_document(report)
    assert doc.status.value == "error" and "unknown GPU-hours" in doc.title
    assert any(c.status.value == "error" and "refused" in c.message for c in doc.test_cases())


# --- the command's usage errors -----------------------------------------------------------------

@pytest.mark.parametrize("args, names", [
    (["--since", "yesterday"], "--since"),
    (["--since", "1d", "--until", "2d"], "--since"),
    (["--format", "json,pdf"], "--format"),
])
def test_bad_flags_and_a_stack_without_a_price_exit_2_naming_what_to_fix(args, names, tmp_path) -> None:
    result = CliRunner().invoke(main, ["--project", str(REPO), "cost", "-s", "local", "--out", str(tmp_path), *args])
    assert result.exit_code == 2 and names in result.output, result.output
