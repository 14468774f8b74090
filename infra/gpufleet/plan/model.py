"""The ClusterPlan: everything the program, the rollout and the reports derive from a spec.

A plan is data (frozen pydantic), versioned by `schema_version` so stored plans and
`gpufleet plan --json` consumers can tell formats apart.
"""

from __future__ import annotations

from typing import Any, Callable

from pydantic import BaseModel, ConfigDict

from gpufleet.findings import Finding

PLAN_SCHEMA_VERSION = 2  # 2: an integer (the string "1" before issue 23 item 8)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class NodeSlot(_Frozen):
    """A stable node name. A replacement instance takes the slot of the one it replaces."""

    name: str
    index: int
    block: int
    batch: int
    units: tuple[int, ...]  # unit ids with at least one GPU on this node

    @property
    def blast_radius(self) -> int:
        return len(self.units)


class Unit(_Frozen):
    id: int
    block: int
    nodes: tuple[int, ...]  # node indexes the unit's GPUs sit on
    gpus: tuple[tuple[int, int], ...]  # (node index, local GPU index)
    partition: str | None = None


class Block(_Frozen):
    id: int
    nodes: tuple[int, ...]
    units: tuple[int, ...]
    partition: str | None = None


class UnitAlternative(_Frozen):
    unit_gpus: int
    units: int
    nodes_per_block: int
    units_per_block: int
    max_blast_radius: int


class Topology(_Frozen):
    gpus_per_node: int
    unit_gpus: int
    block_gpus: int
    nodes_per_block: int
    units_per_block: int
    nodes: int
    spare_nodes: int
    blocks: int
    units: int
    usable_gpus: int
    idle_gpus: int  # GPUs provisioned but in no unit
    max_blast_radius: int
    units_share_nodes: bool
    alternatives: tuple[UnitAlternative, ...] = ()


class PartitionAllocation(_Frozen):
    name: str
    mode: str
    requested_units: int
    units: int
    blocks: tuple[int, ...]
    gpus: int
    priority: int
    quota_units: int | None


class Batch(_Frozen):
    number: int  # 1 is the canary
    canary: bool
    blocks: tuple[int, ...]
    first_node: int
    last_node: int  # inclusive

    @property
    def node_count(self) -> int:
        return self.last_node - self.first_node + 1


class SubnetBudget(_Frozen):
    name: str
    cidr: str
    size: int
    reserved: int
    needed: int  # including reserved and headroom
    smallest_prefix: int
    fits: bool


class NetworkPlan(_Frozen):
    interface_ips_per_node: int
    pod_ips_per_node: int
    ips_per_node: int
    nodes_counted: int  # nodes + spares
    compute: SubnetBudget
    management: SubnetBudget
    availability_zone: str
    efa_interfaces_per_node: int


class StoragePlan(_Frozen):
    needed_tib: float
    capacity_gib: int | None  # None for INTELLIGENT_TIERING (elastic)
    increment_gib: int | None
    storage_class: str
    efa_enabled: bool
    throughput_per_tib: int | None
    aggregate_throughput_mbs: int
    client_throughput_mbs: int
    effective_throughput_mbs: int
    checkpoint_write_seconds: float
    target_checkpoint_write_seconds: float


class MemoryFit(_Frozen):
    parameters_billions: float
    bytes_per_parameter: float
    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    activations_gib: float
    total_gib: float
    unit_hbm_gib: float
    usable_gib: float  # unit HBM x 0.9
    fits: bool


class ClusterPlan(_Frozen):
    schema_version: int = PLAN_SCHEMA_VERSION
    cluster: str
    region: str
    availability_zone: str
    instance_type: str
    target_gpus: int
    topology: Topology
    nodes: tuple[NodeSlot, ...]
    units: tuple[Unit, ...]
    blocks: tuple[Block, ...]
    partitions: tuple[PartitionAllocation, ...]
    batches: tuple[Batch, ...]
    network: NetworkPlan
    storage: StoragePlan
    memory: MemoryFit | None
    findings: tuple[Finding, ...]

    def slot(self, index: int) -> NodeSlot:
        """The slot of a node index (what a Block's or Unit's `nodes` hold). Not `nodes[index]`:
        once a shrink released whole blocks, positions and indexes differ."""
        return self._slot_index()[index]

    def block(self, block_id: int) -> Block:
        """The block of an id (what a partition's or batch's `blocks` hold); not `blocks[id]`, for
        the same reason as `slot`."""
        return self._block_index()[block_id]

    def _slot_index(self) -> dict[int, NodeSlot]:
        return self._index("_by_index", self.nodes, lambda s: s.index)

    def _block_index(self) -> dict[int, Block]:
        return self._index("_by_block", self.blocks, lambda b: b.id)

    def _index(self, key: str, items: tuple[Any, ...], id_of: Callable[[Any], int]) -> dict[int, Any]:
        # frozen: a cache beside the fields (never serialised), tied to the very tuple it indexes,
        # since model_copy(update=...) carries it over to a copy with other nodes or blocks
        cached = self.__dict__.get(key)
        if cached is None or cached[0] is not items:
            cached = (items, {id_of(x): x for x in items})
            self.__dict__[key] = cached
        return cached[1]

    def batch_nodes(self, number: int) -> tuple[NodeSlot, ...]:
        batch = self.batches[number - 1]
        return self.nodes[batch.first_node: batch.last_node + 1]
