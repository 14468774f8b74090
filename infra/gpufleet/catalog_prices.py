"""Per-instance prices for the cost report, each with the source that states it and that source's date.

Why a table of sourced figures instead of a live price lookup: the report must say where a rate
came from and when, and must run offline (CI, an air-gapped head node). Why so few entries: a
price is recorded only where a source was found that states it for that instance type, basis
and region; every other combination is absent, and `gpufleet cost` then asks for
`gpufleet:cost.pricePerInstanceHour` instead of guessing. A negotiated rate (Savings Plans,
private pricing) is the operator's to set there too.

Bases:
  on-demand       the published On-Demand rate (Linux).
  reservation     an On-Demand Capacity Reservation: billed at the On-Demand rate whether used or
                  not [odcr], so it is the on-demand entry, re-labelled with both sources.
  capacity-block  EC2 Capacity Blocks for ML: the effective instance hourly rate of an offering's
                  upfront fee. None is shipped: AWS changes the rate with demand and a block keeps
                  the rate it was bought at, so it is read from AWS (`gpufleet prices`, EC2
                  DescribeCapacityBlockOfferings) into the stack's snapshot, or set per stack.

Sources:
  [dstack-4110]  github.com/dstackai/dstack/pull/4110 (2026-08-06): `dstack offer -b aws
                 --instance-type p5en.48xlarge` output, on-demand rows (dstack's gpuhunt price
                 catalog). The PR is dated after AWS's June 2025 GPU price reduction; it does not
                 itself mention the reduction. The same figure appears in dstack PR #4069
                 (2026-07-27).
  [odcr]         AWS EC2 User Guide, "Capacity Reservation pricing and billing": "Capacity
                 Reservations are charged at the equivalent On-Demand rate whether you run
                 instances in reserved capacity or not."

Not found in a citable source (absent on purpose): On-Demand rates after the June 2025 reduction
for p4d/p4de/p5/p5e.48xlarge and p6-b200.48xlarge. `gpufleet prices -s STACK` reads them from the
AWS Price List API into the stack's dated snapshot (gpufleet.cost.price_list), which the cost
report prefers to this table; the Capacity Block rates once here came from a third-party copy of
AWS's page and were removed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

Basis = Literal["on-demand", "reservation", "capacity-block"]
BASES: tuple[Basis, ...] = ("on-demand", "reservation", "capacity-block")


@dataclass(frozen=True)
class Price:
    """USD per instance-hour for one instance type, basis and region, and where it comes from."""

    instance_type: str
    basis: Basis
    region: str
    usd_per_hour: float
    source: str  # where the figure is stated (URL)
    dated: str  # the source's own date, or what the source says about when the rate applies
    note: str = ""


_DSTACK = "https://github.com/dstackai/dstack/pull/4110"
_DSTACK_DATE = "2026-08-06"
ODCR_SOURCE = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-reservations-pricing-billing.html"


def _od(instance_type: str, region: str, usd: float) -> Price:
    return Price(instance_type, "on-demand", region, usd, _DSTACK, _DSTACK_DATE,
                 "dstack offer on-demand row (gpuhunt catalog)")


PRICES: tuple[Price, ...] = (
    _od("p5en.48xlarge", "us-east-1", 63.296),  # [dstack-4110] aws (us-east-1) ... p5en.48xlarge $63.296
    _od("p5en.48xlarge", "us-east-2", 63.296),  # [dstack-4110] aws (us-east-2)
    _od("p5en.48xlarge", "us-west-2", 63.296),  # [dstack-4110] aws (us-west-2)
)

_BY_KEY = {(p.instance_type, p.basis, p.region): p for p in PRICES}


def price(instance_type: str, basis: Basis, region: str) -> Price | None:
    """The sourced price, or None: the caller must then ask for a price, never assume one."""
    if basis == "reservation":
        od = _BY_KEY.get((instance_type, "on-demand", region))
        if od is None:
            return None
        return replace(od, basis="reservation", source=f"{od.source}; {ODCR_SOURCE}",
                       note="a Capacity Reservation is billed at the On-Demand rate")
    return _BY_KEY.get((instance_type, basis, region))
