"""Lazily parsed views of one bundle and one normalized record per GPU (no I/O).

Why one record from three sources: nvidia-smi --query-gpu, -q and the remap CSV each miss
fields on some drivers; every GPU check reads the same filled-in record.
"""

from __future__ import annotations

from functools import cached_property

from gpufleet.gates import bundle as B
from gpufleet.gates.bundle import Bundle
from gpufleet.gates.parsers import dcgm, efa, kernel_log, nccl_debug, nccl_tests, nvidia_smi, system
from gpufleet.gates.parsers.common import strip_unit, to_int, yes_no

# clocks_event_reasons bits (nvidia-smi; Azure azure_gpu_clock_throttling.nhc)
CLOCK_BITS = {0x1: "Idle", 0x2: "Applications Clocks Setting", 0x4: "SW Power Cap", 0x8: "HW Slowdown",
              0x10: "Sync Boost", 0x20: "SW Thermal Slowdown", 0x40: "HW Thermal Slowdown",
              0x80: "HW Power Brake Slowdown", 0x100: "Display Clock Setting"}
_CLOCK_NAME_TO_BIT = {v: k for k, v in CLOCK_BITS.items()}


class NodeEvidence:
    """Lazily parsed views of one bundle; a parser runs only when a check needs it."""

    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle

    def text(self, name: str) -> str | None:
        f = self.bundle.get(name)
        return f.text if f.collected else None

    @cached_property
    def query_table(self) -> nvidia_smi.QueryTable | None:
        t = self.text(B.QUERY_GPU)
        return nvidia_smi.read_query_table(t) if t is not None else None

    @cached_property
    def query(self) -> nvidia_smi.QueryCsv | None:
        return self.query_table.to_model() if self.query_table is not None else None

    @cached_property
    def smi_q(self) -> nvidia_smi.SmiQ | None:
        t = self.text(B.SMI_Q)
        return nvidia_smi.parse_q(t) if t is not None else None

    @cached_property
    def remapped_table(self) -> nvidia_smi.QueryTable | None:
        t = self.text(B.REMAPPED_ROWS)
        return nvidia_smi.read_query_table(t) if t is not None else None

    @cached_property
    def remapped(self) -> nvidia_smi.QueryCsv | None:
        return self.remapped_table.to_model() if self.remapped_table is not None else None

    @cached_property
    def nvlink(self) -> nvidia_smi.NvlinkStatus | None:
        t = self.text(B.NVLINK_S)
        return nvidia_smi.parse_nvlink_status(t) if t is not None else None

    @cached_property
    def topo(self) -> nvidia_smi.Topology | None:
        t = self.text(B.TOPO_M)
        return nvidia_smi.parse_topo(t) if t is not None else None

    @cached_property
    def dcgm(self) -> dcgm.DcgmDiag | None:
        t = self.text(B.DCGM_DIAG)
        return dcgm.parse_diag(t) if t is not None else None

    @cached_property
    def kernel(self) -> kernel_log.KernelLog | None:
        t = self.text(B.KERNEL_LOG)
        return kernel_log.parse_kernel_log(t) if t is not None else None

    @cached_property
    def fi_info(self) -> efa.FiInfo | None:
        t = self.text(B.FI_INFO)
        return efa.parse_fi_info(t) if t is not None else None

    @cached_property
    def lspci(self) -> efa.Lspci | None:
        t = self.text(B.LSPCI_EFA)
        return efa.parse_lspci(t) if t is not None else None

    @cached_property
    def versions(self) -> system.Versions | None:
        t = self.text(B.VERSIONS)
        return system.parse_versions(t) if t is not None else None

    @cached_property
    def _intra_read(self) -> tuple[str | None, nccl_tests.PerfResult | None]:
        """(the file read, its reading): the -J document when it has rows, else the text table."""
        t = self.text(B.NCCL_INTRA_JSON)
        if t is not None:
            res = nccl_tests.parse_json(t)
            if res.rows:
                return B.NCCL_INTRA_JSON, res
        t = self.text(B.NCCL_INTRA)
        return (B.NCCL_INTRA, nccl_tests.parse_text(t)) if t is not None else (None, None)

    @property
    def intra(self) -> nccl_tests.PerfResult | None:
        return self._intra_read[1]

    @property
    def intra_source(self) -> str | None:
        return self._intra_read[0]

    @property
    def intra_problems(self) -> tuple[str, ...]:
        """What the intra-node reading could not read: its problems and any result-like line
        that fits no column layout (a garbled row must not silently drop out of the sweep)."""
        res = self.intra
        if res is None:
            return ()
        extra = (f"{len(res.unparsed)} result line(s) in no known layout: {res.unparsed[0][:80]!r}",) \
            if res.unparsed else ()
        return tuple(p for p in res.problems if p != "no result rows") + extra

    @cached_property
    def fabric_table(self) -> nvidia_smi.QueryTable | None:
        t = self.text(B.FABRIC_QUERY)
        return nvidia_smi.read_query_table(t) if t is not None else None

    @cached_property
    def net(self) -> nccl_debug.NcclNet | None:
        t = self.text(B.NCCL_EFA_LOOPBACK)
        return nccl_debug.parse_net(t) if t is not None else None

    @cached_property
    def gpus(self) -> list[dict[str, object]]:
        """One normalized record per GPU from --query-gpu, gaps filled from -q and the remap CSV."""
        out: list[dict[str, object]] = []
        qt = self.query_table
        if qt is not None and qt.rows:
            out = [_from_csv(row) for row in qt.records()]
        need_q = not out or any(v is None for g in out for v in g.values())
        if need_q and self.smi_q is not None:  # parse -q only when the CSV leaves gaps
            qg = self.smi_q.gpus
            if not out:
                out = [{} for _ in qg]
            for g, q in zip(out, qg):
                for k, v in _from_q(q).items():
                    if g.get(k) is None:
                        g[k] = v
        rt = self.remapped_table
        if rt is not None and rt.rows and len(rt.rows) == len(out):
            for g, row in zip(out, rt.records()):  # units on: to_int / _yes_or_count strip them
                for k, f in (("remap_correctable", "remapped_rows.correctable"),
                             ("remap_uncorrectable", "remapped_rows.uncorrectable")):
                    if row.get(f) is not None:
                        g[k] = to_int(row[f])
                for k, f in (("remap_pending", "remapped_rows.pending"), ("remap_failure", "remapped_rows.failure")):
                    if row.get(f) is not None:
                        g[k] = _yes_or_count(row[f])
        return out


def _yes_or_count(v: str | None) -> bool | None:
    """Remap pending/failure read 'Yes'/'No' in --query-gpu and sometimes 0/1 counts elsewhere."""
    b = yes_no(v)
    if b is None and v is not None:
        n = to_int(v)
        return None if n is None else n > 0
    return b


def _from_csv(row: dict[str, str | None]) -> dict[str, object]:
    """One GPU's record from a QueryTable row (units still on the values).

    Text fields get strip_unit here, as QueryCsv.rows has them; to_int, yes_no and _yes_or_count
    give the same answer with or without it (to_int strips units itself; a number with a unit is
    never a yes/no word), so the numeric and flag fields skip it.
    """
    g = row.get

    def text(name: str) -> str | None:
        v = g(name)
        return None if v is None else strip_unit(v)

    clocks = g("clocks_event_reasons.active") or g("clocks_throttle_reasons.active")
    return {
        "name": text("name"), "bus_id": text("pci.bus_id") or text("gpu_bus_id"), "driver": text("driver_version"),
        "persistence": yes_no(g("persistence_mode")), "mig": yes_no(g("mig.mode.current")),
        "ecc_current": yes_no(g("ecc.mode.current")), "ecc_pending": yes_no(g("ecc.mode.pending")),
        "volatile_uncorrectable": to_int(g("ecc.errors.uncorrected.volatile.total")),
        "sram_threshold": yes_no(g("ecc.errors.uncorrected.aggregate.sram.thresholdExceeded")),
        "remap_correctable": to_int(g("remapped_rows.correctable")),
        "remap_uncorrectable": to_int(g("remapped_rows.uncorrectable")),
        "remap_pending": _yes_or_count(g("remapped_rows.pending")),
        "remap_failure": _yes_or_count(g("remapped_rows.failure")),
        "remap_histogram_none": to_int(g("remapped_rows.histogram.none")),
        "pcie_gen_current": to_int(g("pcie.link.gen.current")),
        "pcie_gen_max": to_int(g("pcie.link.gen.max")) or to_int(g("pcie.link.gen.gpumax")),
        "pcie_width_current": to_int(g("pcie.link.width.current")),
        "pcie_width_max": to_int(g("pcie.link.width.max")),
        "clocks_active": to_int(clocks),
        "hw_thermal_us": to_int(g("clocks_event_reasons_counters.hw_thermal_slowdown")),
        "hw_power_brake_us": to_int(g("clocks_event_reasons_counters.hw_power_brake_slowdown")),
        "recovery_action": text("gpu_recovery_action"),
        "fabric_state": text("fabric.state"), "fabric_status": text("fabric.status"),
    }


def _from_q(q: nvidia_smi.QGpu) -> dict[str, object]:
    remap = q.remapped
    pcie = q.pcie
    reasons = q.clock_event_reasons
    clocks = sum(bit for name, bit in _CLOCK_NAME_TO_BIT.items() if reasons.get(name)) if reasons else None
    ecc = q.ecc_mode
    state, status = q.fabric
    return {
        "name": q.product_name, "bus_id": q.bus_id, "persistence": q.persistence_mode,
        "mig": yes_no(q.get("MIG Mode/Current")), "ecc_current": ecc[0], "ecc_pending": ecc[1],
        "volatile_uncorrectable": q.volatile_uncorrectable,
        "sram_threshold": yes_no(q.get("ECC Errors/Aggregate/SRAM Threshold Exceeded")),
        "remap_correctable": remap["correctable"], "remap_uncorrectable": remap["uncorrectable"],
        "remap_pending": remap["pending"], "remap_failure": remap["failure"],
        "remap_histogram_none": remap["histogram_none"],
        "pcie_gen_current": pcie["gen_current"], "pcie_gen_max": pcie["gen_max"] or pcie["gen_device_max"],
        "pcie_width_current": pcie["width_current"], "pcie_width_max": pcie["width_max"],
        "clocks_active": clocks,
        "hw_thermal_us": to_int(q.get("Clocks Event Reasons Counters/HW Thermal Slowdown")),
        "hw_power_brake_us": to_int(q.get("Clocks Event Reasons Counters/HW Power Braking")),
        "recovery_action": q.recovery_action, "fabric_state": state, "fabric_status": status,
    }
