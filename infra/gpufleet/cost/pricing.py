"""Which price the report uses: the stack's own rate, else the catalog's sourced one for the basis.

The basis is `gpufleet:cost.pricing`, or follows how the capacity is bought
(`cluster.capacity.type`): on-demand -> on-demand, capacity-reservation -> reservation,
capacity-block -> capacity-block. No sourced price and no override: None and the sentence that
tells the operator what to set (the command exits 2 after writing the report).
"""

from __future__ import annotations

from typing import Sequence

from gpufleet import catalog
from gpufleet.catalog_prices import Price
from gpufleet.cost.price_list import find
from gpufleet.cost.report import PriceUsed
from gpufleet.cost.shipped_prices import SHIPPED
from gpufleet.spec import CapacityType, ClusterSpec

OVERRIDE_FIELD = "gpufleet:cost.pricePerInstanceHour"
_BASIS = {CapacityType.ON_DEMAND: "on-demand", CapacityType.CAPACITY_RESERVATION: "reservation",
          CapacityType.CAPACITY_BLOCK: "capacity-block"}


def basis_for(spec: ClusterSpec) -> str:
    return spec.cost.pricing or _BASIS[spec.cluster.capacity.type]


def resolve(spec: ClusterSpec, snapshot: Sequence[Price] = ()) -> tuple[PriceUsed | None, str | None]:
    """(price, None) or (None, what to set). The stack's own rate wins, then the stack's snapshot
    from AWS (`gpufleet prices`), then the shipped Price List snapshot, then the catalog."""
    it, region, basis = spec.cluster.instance_type, spec.cluster.region, basis_for(spec)
    gpus = catalog.get(it).gpus
    if spec.cost.price_per_instance_hour is not None:
        rate = spec.cost.price_per_instance_hour
        return PriceUsed(instance_type=it, basis=basis, region=region, usd_per_instance_hour=rate,
                         usd_per_gpu_hour=rate / gpus, source=f"{OVERRIDE_FIELD} (the stack file)",
                         dated="as set in the stack"), None
    found = (find(snapshot, it, basis, region) or find(SHIPPED, it, basis, region)
             or catalog.price(it, basis, region))  # type: ignore[arg-type]
    if found is None:
        return None, (f"no price for {it} ({basis}, {region}) in the catalog or the stack's price snapshot: "
                      f"run `gpufleet prices -s STACK` with AWS credentials, or set {OVERRIDE_FIELD} "
                      f"(USD per instance-hour)")
    return PriceUsed(instance_type=it, basis=basis, region=region, usd_per_instance_hour=found.usd_per_hour,
                     usd_per_gpu_hour=found.usd_per_hour / gpus, source=found.source, dated=found.dated,
                     note=found.note), None
