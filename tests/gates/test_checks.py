"""Verdict tables per check (PASS / WARN / REMEDIATE / QUARANTINE), the retest rule, taint codes."""

from __future__ import annotations


import pytest

from gpufleet.gates import bundle as B, checks, synth
from gpufleet.gates.evaluate import gate_cohort
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import Action, CheckResult, Verdict, is_taint_value, node_outcome

from .conftest import OWN

P, W, R, Q = Verdict.PASS, Verdict.WARN, Verdict.REMEDIATE, Verdict.QUARANTINE
SETTINGS = GateSettings(expected_versions=synth.DEFAULT_VERSIONS)


def _bundle(spec: synth.NodeSpec, replace: dict[str, str] | None = None, drop: tuple[str, ...] = ()) -> B.Bundle:
    files = synth.node_files(spec)
    files.update(replace or {})
    for d in drop:
        files.pop(d, None)
    return B.Bundle(path="mem", manifest=synth.manifest(spec, files), files=files)


def _results(spec=None, settings=SETTINGS, **kw) -> dict[str, CheckResult]:
    _, res = checks.run_checks(_bundle(spec or synth.NodeSpec(slot="n0"), **kw), settings)
    return {r.check_id: r for r in res}


def test_healthy_node_passes_every_check():
    res = _results()
    assert {k: v.verdict for k, v in res.items() if v.verdict is not P} == {}
    assert len(res) >= 30
    assert all(r.research_ref for r in res.values())


# (faults, xids, replace, check_id, verdict, reason_code)
TABLE = [
    (set(), (), {}, "gpu.count", P, None),
    (set(), (), {B.QUERY_GPU: "\n".join(synth.query_gpu_csv(synth.NodeSpec(slot="n")).splitlines()[:8])}, "gpu.count", Q, "gpu-count"),
    (set(), (), {}, "gpu.model", P, None),
    ({"version_skew"}, (), {}, "versions.nccl", Q, "version-nccl"),
    (set(), (), {B.VERSIONS: "{}"}, "versions.kernel", R, "missing-version-kernel"),
    (set(), (), {B.VERSIONS: "{}"}, "versions.nccl", P, None),  # read from NCCL's own INFO line instead
    (set(), (), {B.QUERY_GPU: synth.query_gpu_csv(synth.NodeSpec(slot="n")).replace(", Enabled, Disabled,", ", Disabled, Disabled,", 1)},
     "gpu.persistence_mode", W, "persistence-off"),
    ({"ecc_uncorrectable"}, (), {}, "ecc.volatile_uncorrectable", R, "ecc-uncorrectable"),
    (set(), (), {}, "ecc.volatile_uncorrectable", P, None),
    ({"remap_pending"}, (), {}, "ecc.row_remap", R, "row-remap-pending"),
    ({"remap_failure"}, (), {}, "ecc.row_remap", Q, "row-remap-failure"),
    (set(), (), {}, "ecc.row_remap", P, None),
    (set(), (79,), {}, "kernel.xid", Q, "xid-79"),
    (set(), (48,), {}, "kernel.xid", Q, "xid-48"),
    (set(), (119,), {}, "kernel.xid", R, "xid-119"),
    (set(), (13,), {}, "kernel.xid", W, "xid-13"),
    (set(), (13, 119, 79), {}, "kernel.xid", Q, "xid-79"),
    (set(), (63,), {}, "kernel.xid", W, "xid-63"),
    ({"remap_pending"}, (63,), {}, "kernel.xid", R, "xid-63"),
    (set(), (), {}, "kernel.xid", P, None),
    ({"nvlink_down"}, (), {}, "nvlink.status", Q, "nvlink-down"),
    (set(), (), {B.TOPO_M: synth.topo_m(synth.NodeSpec(slot="n")).replace("NV18", "NV16", 1)}, "nvlink.status", Q, "nvlink-topology"),
    ({"fabricmanager_inactive"}, (), {}, "fabric_manager", R, "fabricmanager-inactive"),
    ({"thermal"}, (), {}, "clocks.event_reasons", W, "clock-thermal"),
    (set(), (), {B.QUERY_GPU: synth.query_gpu_csv(synth.NodeSpec(slot="n")).replace(", 0 us, 0 us,", ", 1200 us, 0 us,", 1)},
     "clocks.event_reasons", R, "clock-thermal"),
    ({"dcgm_fail"}, (), {}, "dcgm.diag", Q, "dcgm-isolate"),
    (set(), (), {B.DCGM_DIAG: (OWN / "dcgm-diag__3x_pcie_fail_reset_339.json").read_text()}, "dcgm.diag", R, "dcgm-reset"),
    (set(), (), {B.DCGM_DIAG: (OWN / "dcgm-diag__3x_pcie_fail_isolate_326.json").read_text()}, "dcgm.diag", Q, "dcgm-isolate"),
    (set(), (), {B.DCGM_DIAG: (OWN / "dcgmi-diag__text_fail.txt").read_text()}, "dcgm.diag", Q, "dcgm-fail"),
    (set(), (), {B.DCGM_DIAG: '{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [{"name": "pcie", "results": [{"status": "Warn", "gpu_id": "1"}]}]}]}, "version": "3.3.9"}'},
     "dcgm.diag", W, "dcgm-warn"),
    ({"efa_missing"}, (), {}, "efa.count", Q, "efa-missing"),
    ({"efa_missing"}, (), {}, "efa.provider", Q, "efa-provider"),
    (set(), (), {B.LSPCI_EFA: synth.lspci(synth.NodeSpec(slot="n")).rsplit("\n", 2)[0] + "\n"}, "efa.count", Q, "efa-missing"),
    ({"socket_fallback"}, (), {}, "efa.nccl_net", Q, "efa-socket-fallback"),
    ({"lustre_unmounted"}, (), {}, "lustre.mount", R, "lustre-unmounted"),
    (set(), (), {B.LUSTRE: "mount: /fsx x@tcp:/y\nwritable: no\n"}, "lustre.mount", R, "lustre-readonly"),
    (set(), (), {B.CONTAINER_GPUS: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n"}, "container.gpus", R, "container-gpus"),
    ({"wrong_counts"}, (), {}, "nccl.intra.correctness", Q, "nccl-wrong-results"),
    (set(), (), {B.NCCL_INTRA: (OWN / "nccl-all-reduce__c0_na_v219.txt").read_text()}, "nccl.intra.correctness", R, "nccl-unchecked"),
    (set(), (), {B.NCCL_INTRA: (OWN / "nccl-all-reduce__mpi_wrong_counts.txt").read_text()}, "nccl.intra.correctness", Q, "nccl-wrong-results"),
    (set(), (), {B.NCCL_INTRA: (OWN / "nccl-all-reduce__mpi_wrong_counts.txt").read_text().replace("    512", "      0")},
     "nccl.intra.correctness", Q, "nccl-out-of-bounds"),
    (set(), (), {B.NCCL_INTRA: (OWN / "nccl-all-reduce__mpi_wrong_counts.txt").read_text()}, "nccl.intra.busbw", P, None),
    (set(), (), {B.NCCL_INTRA_JSON: (OWN / "nccl-all-reduce__j.json").read_text()}, "nccl.intra.busbw", P, None),
]


@pytest.mark.parametrize("faults, xids, replace, check_id, verdict, code", TABLE)
def test_verdict_table(faults, xids, replace, check_id, verdict, code):
    res = _results(synth.NodeSpec(slot="n0", faults=frozenset(faults), xids=xids), replace=replace)
    r = res[check_id]
    assert (r.verdict, r.reason_code) == (verdict, code), r.message


def test_every_verdict_reachable_by_the_table():
    assert {row[4] for row in TABLE} == {P, W, R, Q}


def test_busbw_floor_uses_large_rows_not_the_average():
    slow = synth.NodeSpec(slot="n0", intra_busbw=300.0)
    assert _results(slow)["nccl.intra.busbw"].verdict is Q
    override = SETTINGS.model_copy(update={"intra_node_busbw_floor_gbs": 250.0})
    assert _results(slow, settings=override)["nccl.intra.busbw"].verdict is P
    # a sweep whose largest rows are fine but whose footer average is tiny still passes
    res = _results(replace={B.NCCL_INTRA: synth.nccl_intra(synth.NodeSpec(slot="n")).replace(
        "# Avg bus bandwidth    : 456.0000", "# Avg bus bandwidth    : 52.9753")})
    assert res["nccl.intra.busbw"].verdict is P


def test_baseline_on_the_real_2x_p5_table(real):
    from gpufleet.gates import baseline
    from gpufleet.gates.parsers import nccl_tests

    perf = nccl_tests.parse_text(real("nccl_all_reduce_perf__2x_p5__aws_readme.txt"))
    assert baseline.large_message_busbw(perf) == 487.09
    assert baseline.large_message_busbw(perf, min_bytes=2**40) is None
    assert baseline.check_floor(487.09, 430.0).verdict is P
    assert baseline.check_correctness(perf).verdict is P


@pytest.mark.parametrize("name", [B.DCGM_DIAG, B.NVLINK_S, B.KERNEL_LOG, B.FI_INFO, B.NCCL_INTRA, B.NCCL_EFA_LOOPBACK,
                                  B.LUSTRE, B.CONTAINER_GPUS, B.FABRICMANAGER])
def test_missing_file_is_an_explicit_not_collected_remediate(name):
    res = _results(drop=(name,))
    missing = [r for r in res.values() if r.reason_code and r.reason_code.startswith("missing-")]
    assert missing and all(r.verdict is R for r in missing)
    assert any(name.rsplit(".", 1)[0] in r.reason_code for r in missing)


def test_nothing_collected_at_all_does_not_crash():
    b = B.Bundle(path="mem", manifest=B.Manifest(slot="empty"), files={})
    _, res = checks.run_checks(b, SETTINGS)
    assert res and all(r.verdict is R for r in res if r.verdict is not P)
    assert node_outcome(res).action is Action.RETEST


def test_dcgm_level_lower_than_configured_remediates():
    hi = SETTINGS.model_copy(update={"dcgm_level": 3})
    r = _results(settings=hi)["dcgm.diag"]
    assert (r.verdict, r.reason_code) == (R, "dcgm-level-low")


def test_p4d_expectations_come_from_the_catalog():
    spec = synth.NodeSpec(slot="a", instance_type="p4d.24xlarge")
    res = _results(spec, settings=SETTINGS.model_copy(update={"instance_type": "p4d.24xlarge"}))
    assert res["nvlink.status"].expected == "8 GPUs x 12 active links"
    assert res["efa.count"].expected == "4"
    assert {k for k, v in res.items() if v.verdict is not P} == set()


# ------------------------------------------------------------------ retest rule and node outcome

def _cr(v: Verdict, code: str | None = None) -> CheckResult:
    return CheckResult(check_id="x", severity="Q", measured="m", expected="e", verdict=v, reason_code=code,
                       research_ref="r")


def test_node_outcome_is_the_worst_check():
    o = node_outcome([_cr(P), _cr(W, "persistence-off"), _cr(Q, "xid-79"), _cr(R, "ecc-uncorrectable")])
    assert (o.verdict, o.action, o.reason_codes) == (Q, Action.QUARANTINE, ("xid-79",))
    assert node_outcome([_cr(P), _cr(W, "persistence-off")]).action is Action.ADMIT


def test_remediate_once_then_quarantine():
    first = node_outcome([_cr(R, "row-remap-pending")])
    assert (first.action, first.attempt) == (Action.RETEST, 1)
    healed = node_outcome([_cr(P)], previous=first)
    assert (healed.action, healed.attempt) == (Action.ADMIT, 2)
    again = node_outcome([_cr(R, "row-remap-pending")], previous=first)
    assert (again.verdict, again.action, again.attempt, again.reason_codes) == (Q, Action.QUARANTINE, 2,
                                                                                  ("row-remap-pending",))


def test_non_pass_needs_a_taint_safe_reason_code():
    with pytest.raises(ValueError):
        _cr(Q)
    with pytest.raises(ValueError):
        _cr(Q, "has space")
    with pytest.raises(ValueError):
        _cr(Q, "x" * 64)


def test_every_reason_code_the_gates_emit_is_a_taint_value():
    specs = [synth.NodeSpec(slot=f"n{i}", faults=frozenset({f}), xids=(x,)) for i, (f, x) in
             enumerate(zip(sorted(synth.FAULTS), [79, 48, 64, 74, 95, 119, 13, 154, 63, 92, 999, 46]))]
    records = gate_cohort([_bundle(s) for s in specs] + [B.Bundle(path="m", manifest=B.Manifest(slot="e"), files={})],
                          SETTINGS)
    codes = {c.reason_code for r in records for c in r.checks if c.reason_code} | {
        code for r in records for code in r.reason_codes}
    assert len(codes) > 20
    assert all(is_taint_value(c) and len(c) <= 63 for c in codes), sorted(c for c in codes if not is_taint_value(c))


def test_cohort_outlier_remediates_and_floor_quarantines():
    specs = [synth.NodeSpec(slot=f"n{i}", intra_busbw=480.0 + i) for i in range(6)]
    specs.append(synth.NodeSpec(slot="slow", intra_busbw=440.0))  # above the 430 floor, 9% under the median
    specs.append(synth.NodeSpec(slot="slower", intra_busbw=400.0))
    recs = {r.slot: r for r in gate_cohort([_bundle(s) for s in specs],
                                           SETTINGS.model_copy(update={"cohort_outlier_fraction": 0.05}))}
    assert recs["n0"].action is Action.ADMIT
    assert (recs["slow"].verdict, recs["slow"].reason_codes) == (R, ("busbw-outlier",))
    assert recs["slower"].verdict is Q and "busbw-below-floor" in recs["slower"].reason_codes
    assert recs["n0"].busbw.cohort_median_gbs == pytest.approx(481.5)
