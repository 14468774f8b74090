"""What the gates expect of a cohort: SKU, BOM versions, DCGM level, baseline thresholds.

Why separate: the CLI, the rollout and the simulator build it from different sources
(options, `GatesConfig`, the BOM); the checks only read it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from gpufleet import catalog
from gpufleet.catalog import InstanceType

GIB = 2**30


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

    def busbw_floor(self, nodes: int) -> float:
        """The all_reduce busbw floor for a run over `nodes` nodes of this SKU: the intra-node floor
        for one node, the multi-node ring floor (research (b): p5* >= ~330, p4d >= ~38) beyond."""
        return self.intra_floor if nodes <= 1 else self.multi_floor

    @classmethod
    def from_config(cls, gates_config, instance_type: str, expected_versions: dict[str, str] | None = None,
                    bom_digest: str = "none", **extra) -> "GateSettings":
        """From the stack's `GatesConfig` (gpufleet.spec)."""
        return cls(instance_type=instance_type, expected_versions=dict(expected_versions or {}),
                   bom_digest=bom_digest, dcgm_level=gates_config.dcgm_level,
                   intra_node_busbw_floor_gbs=gates_config.intra_node_busbw_floor_gbs,
                   multi_node_busbw_floor_gbs=gates_config.multi_node_busbw_floor_gbs,
                   cohort_outlier_fraction=gates_config.cohort_outlier_fraction, **extra)
