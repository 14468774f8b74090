"""The DCGM exporter counters file gpufleet deploys: upstream's defaults, kept verbatim, plus every
field the generated rules read, so no rule waits on a metric the exporter never exports."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ConfigError, GpufleetError
from gpufleet.monitoring import counters as mc, metrics
from gpufleet.monitoring.rules import Thresholds, dcgm_metrics, rules_document
from gpufleet.spec import OpsConfig

FIXTURES = Path(__file__).parent / "fixtures"


def test_the_packaged_defaults_are_upstreams_file_verbatim() -> None:
    assert mc.UPSTREAM_DEFAULTS == (FIXTURES / "dcgm-exporter-default-counters.csv").read_text()


@pytest.mark.parametrize("dcgm", ["4.2.3", "3.2.6"])
def test_every_metric_the_rules_read_is_in_the_deployed_counters_file(dcgm: str) -> None:
    """The generated rules (with and without Lustre, old and new DCGM) against the parsed file."""
    deployed = mc.parse(mc.deployed_csv(dcgm), "deployed")
    for lustre in ("/fsx", None):
        doc = rules_document(Thresholds(OpsConfig(), 512, dcgm, lustre), "s")
        read = dcgm_metrics(doc)
        assert metrics.XID in read and metrics.clock_events_field(dcgm) in read
        assert read <= deployed.fields, read - deployed.fields


def test_the_defaults_stay_and_the_fields_upstream_ships_off_are_switched_on_with_its_type_and_help() -> None:
    upstream = mc.parse(mc.UPSTREAM_DEFAULTS, "upstream")
    deployed = mc.parse(mc.deployed_csv("4.2.3"), "deployed")
    assert set(upstream.enabled) <= set(deployed.enabled)  # nothing upstream exports is dropped
    switched_on = {c.field for c in upstream.commented} & deployed.fields
    assert switched_on == {metrics.ECC_DBE_VOLATILE, metrics.NVLINK_CRC_FLIT}
    for c in upstream.commented:
        if c.field in switched_on:
            assert deployed.get(c.field) == c
    added = deployed.fields - upstream.fields - switched_on
    assert added == {metrics.CLOCK_EVENTS}
    assert deployed.get(metrics.CLOCK_EVENTS).kind == "gauge"
    assert metrics.CLOCK_THROTTLE_LEGACY not in deployed.fields  # only the BOM's DCGM's name


def test_the_parser_reads_upstreams_spacing_and_names_a_bad_line() -> None:
    parsed = mc.parse("# Format\nDCGM_FI_DEV_DEC_UTIL ,     gauge, Decoder utilization (in %).\n\n"
                      "# DCGM_FI_DEV_RETIRED_SBE,     counter, Total number of retired pages.\n", "x.csv")
    assert parsed.enabled == (mc.Counter("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),)
    assert [c.field for c in parsed.commented] == ["DCGM_FI_DEV_RETIRED_SBE"]
    with pytest.raises(ConfigError, match=r"x\.csv: line 2 is not") as err:
        mc.parse("DCGM_FI_DEV_GPU_UTIL, gauge, ok\nDCGM_FI_DEV_FB_USED, histogram, nope\n", "x.csv")
    assert "gauge, counter, label" in str(err.value)


def test_rules_reading_a_field_the_exporter_does_not_export_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    full = mc.deployed("4.2.3")
    without_xid = mc.CountersFile(tuple(c for c in full.enabled if c.field != metrics.XID), full.commented)
    monkeypatch.setattr(mc, "deployed", lambda version: without_xid)
    with pytest.raises(GpufleetError, match=metrics.XID):
        rules_document(Thresholds(OpsConfig(), 512, "4.2.3", None), "s")
