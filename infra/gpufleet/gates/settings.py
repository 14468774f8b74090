"""What the gates expect of a cohort: SKU, BOM versions, DCGM level, baseline thresholds.

Why separate: the CLI, the rollout and the simulator build it from different sources
(options, `GatesConfig`, the BOM); the checks only read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from gpufleet import catalog
from gpufleet.catalog import InstanceType

GIB = 2**30
FLOOR_SHARE = 0.9  # a floor is 0.9 x a healthy measured figure (research (b): 330 = 0.9 x 364.7 on p5en)


@dataclass(frozen=True)
class BusbwCurve:
    """A published all_reduce busbw curve over node counts for one instance type, and its source.

    Why a curve: the busbw a healthy ring reaches falls with the node count (p5 over EFA at 8 GiB:
    477.7 GB/s on 2 nodes, ~356 on 4-16, 321.1 on 32), so one floor for 2+ nodes either admits a
    slow small group or quarantines a healthy large ring. `points` are (nodes, GB/s, algorithm):
    "default" is NCCL's own choice, which on 2 nodes is tree/NVLS and exceeds the NIC rate, so it
    does not bound a ring (the gates' runs force NCCL_ALGO=Ring, gpufleet.gates.launch).
    """

    message_bytes: int
    points: tuple[tuple[int, float, str], ...]
    source: str

    def measured(self, nodes: int, ring: bool = True) -> float:
        """The figure a healthy run on `nodes` reaches, read conservatively off the curve: the lower
        of the nearest measured counts at or below and at or above `nodes`, the ends held flat."""
        pts = [(n, gbs) for n, gbs, algo in self.points if not (ring and algo == "default" and n <= 2)]
        below = [g for n, g in pts if n <= nodes]
        above = [g for n, g in pts if n >= nodes]
        near = ([below[-1]] if below else []) + ([above[0]] if above else [])
        return min(near)


# crazyguitar/aws-gpu-communication-benchmark, data/nccl_all_reduce.csv: nccl-tests all_reduce
# out-of-place busbw on p5.48xlarge over EFA (SageMaker HyperPod EKS), default algorithm, at 1 GiB
# and 8 GiB (/work/shared/reference/field-data.md "Bandwidth and latency").
_P5_SOURCE = "crazyguitar/aws-gpu-communication-benchmark data/nccl_all_reduce.csv (p5.48xlarge, EFA, out-of-place busbw"
MULTI_NODE_CURVES: dict[str, tuple[BusbwCurve, ...]] = {
    "p5.48xlarge": (
        BusbwCurve(message_bytes=1 * GIB,
                   points=((2, 435.0, "default"), (4, 280.0, "default"), (8, 274.0, "default"),
                           (16, 269.0, "default"), (32, 220.0, "default")),
                   source=_P5_SOURCE + " at 1 GiB: 2 nodes 435, 4 280, 8 274, 16 269, 32 220 GB/s)"),
        BusbwCurve(message_bytes=8 * GIB,
                   points=((2, 477.7, "default"), (4, 357.0, "default"), (8, 355.4, "default"),
                           (16, 356.3, "default"), (32, 321.1, "default")),
                   source=_P5_SOURCE + " at 8 GiB: 2 nodes 477.7, 4 357.0, 8 355.4, 16 356.3, 32 321.1 GB/s)"),
    ),
}
# The message size the gates' multi-node runs use (gpufleet.gates.launch.launch_spec's default).
RUN_MESSAGE_BYTES = 4 * GIB


def curve_for(instance_type: str, message_bytes: int) -> BusbwCurve | None:
    """The measured curve at the largest size not above the run's: busbw grows with the message,
    so a curve measured at a larger size than the run would set the floor too high."""
    fits = [c for c in MULTI_NODE_CURVES.get(instance_type, ()) if c.message_bytes <= message_bytes]
    return max(fits, key=lambda c: c.message_bytes) if fits else None


class GateSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    instance_type: str = "p5.48xlarge"
    expected_versions: dict[str, str] = Field(default_factory=dict)  # BOM keys: nvidia_driver, cuda, ...
    # per node OS (gpufleet.gates.versions.expectations_by_os): wins over expected_versions; the node's
    # /etc/os-release picks the entry (one entry: it applies to every node)
    expected_by_os: dict[str, dict[str, str]] = Field(default_factory=dict)
    pool: str | None = None  # kubernetes | slurm | sim: which pool agent (kubelet, slurmd) must be there
    bom_digest: str = "none"
    dcgm_level: int = Field(default=2, ge=1, le=4)
    intra_node_busbw_floor_gbs: float | None = Field(default=None, gt=0)  # None: the catalog's floor
    multi_node_busbw_floor_gbs: float | None = Field(default=None, gt=0)
    cohort_outlier_fraction: float = Field(default=0.1, gt=0, lt=1)
    cohort_min_size: int = Field(default=3, ge=2)  # a median of fewer nodes says nothing
    baseline_min_bytes: int = Field(default=GIB, ge=1)  # gate on rows at least this large
    remap_uncorrectable_limit: int = 512
    expect_lustre: bool = True
    expect_container_runtime: bool = True
    srun_mpi: str = "pmix"  # `srun --mpi=` of the multi-node runs on Slurm (the stack's pool.srunMpi)
    # the stack's acceptance.workloadImage (repo@sha256:...): every node must hold it and run it
    # with all GPUs (gpufleet.gates.image); None: the image checks do not apply
    workload_image: str | None = Field(default=None, pattern=r"@sha256:[0-9a-f]{64}$")

    @property
    def sku(self) -> InstanceType:
        return catalog.get(self.instance_type)

    @property
    def intra_floor(self) -> float:
        return self.intra_node_busbw_floor_gbs or self.sku.intra_node_busbw_floor_gbs

    @property
    def multi_floor(self) -> float:
        return self.multi_node_busbw_floor_gbs or self.sku.multi_node_busbw_floor_gbs

    def busbw_floor(self, nodes: int, ring: bool = True, message_bytes: int = RUN_MESSAGE_BYTES) -> float:
        """The all_reduce busbw floor for a run over `nodes` nodes of this SKU: the intra-node floor
        for one node; beyond, the stack's multi-node floor when it sets one, else 0.9 x the
        instance type's measured curve at that node count and the run's message size
        (MULTI_NODE_CURVES; the curve at the largest measured size not above `message_bytes`), else
        the catalog's one multi-node floor (research (b): p5e/p5en >= ~330, p4d >= ~38).
        `busbw_floor_source` says which."""
        if nodes <= 1:
            return self.intra_floor
        if self.multi_node_busbw_floor_gbs:
            return self.multi_node_busbw_floor_gbs
        curve = curve_for(self.instance_type, message_bytes)
        if curve is not None:
            return round(FLOOR_SHARE * curve.measured(nodes, ring), 1)
        return self.sku.multi_node_busbw_floor_gbs

    def busbw_floor_source(self, nodes: int, ring: bool = True, message_bytes: int = RUN_MESSAGE_BYTES) -> str:
        """Where busbw_floor(nodes) comes from, for records and reports."""
        if nodes <= 1:
            return "intra-node floor (stack setting)" if self.intra_node_busbw_floor_gbs else \
                f"catalog intra-node floor for {self.instance_type} (gates-research.md (b))"
        if self.multi_node_busbw_floor_gbs:
            return "the stack's gates.multiNodeBusbwFloorGbs"
        curve = curve_for(self.instance_type, message_bytes)
        if curve is not None:
            return (f"{FLOOR_SHARE:g} x {curve.measured(nodes, ring):g} GB/s measured at {nodes} node(s), "
                    f"{curve.message_bytes // GIB} GiB"
                    f"{' (Ring)' if ring else ''}: {curve.source}")
        return f"catalog multi-node floor for {self.instance_type} (gates-research.md (b); no published curve)"

    @classmethod
    def from_config(cls, gates_config, instance_type: str, expected_versions: dict[str, str] | None = None,
                    bom_digest: str = "none", **extra) -> "GateSettings":
        """From the stack's `GatesConfig` (gpufleet.spec)."""
        return cls(instance_type=instance_type, expected_versions=dict(expected_versions or {}),
                   bom_digest=bom_digest, dcgm_level=gates_config.dcgm_level,
                   intra_node_busbw_floor_gbs=gates_config.intra_node_busbw_floor_gbs,
                   multi_node_busbw_floor_gbs=gates_config.multi_node_busbw_floor_gbs,
                   cohort_outlier_fraction=gates_config.cohort_outlier_fraction, **extra)
