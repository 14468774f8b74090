"""The dated price snapshot gpufleet ships for offline use: On-Demand rates from AWS's own Price
List (the AmazonEC2 offer file of the bulk Price List API), so a fresh project's `gpufleet cost`
prices the shipped stacks' instance types without AWS credentials.

Why a shipped snapshot besides `gpufleet prices`: the quickstart runs offline, and the instance
type of every shipped stack (p5.48xlarge) had no price at all; the report must still say which
rate it used and from when. Order of preference (`gpufleet.cost.pricing.resolve`): the stack's
own `gpufleet:cost.pricePerInstanceHour`, then the stack's snapshot from AWS (`gpufleet prices
-s STACK`, today's rate), then this file, then the catalog's other sourced figures.

The figures are the offer file's rows for Linux, shared tenancy, `capacitystatus` Used,
`marketoption` OnDemand, pre-installed software NA, in us-east-1 (the only region whose rows were
read; other regions are read with `gpufleet prices` or set per stack). They were transcribed
from offer file version 20260728175247, not fetched by this installation; the SKU is given where
it was read, so each row can be checked against that file. A Capacity Reservation is billed at
the On-Demand rate [ODCR_SOURCE], so the reservation rows reuse them. No Capacity Block rate is
shipped: AWS changes it with demand and a block keeps the rate it was bought at.
"""

from __future__ import annotations

from gpufleet.catalog_prices import Price
from gpufleet.cost.price_list import reservation

OFFER_VERSION = "20260728175247"
OFFER_FILE = f"https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/{OFFER_VERSION}/us-east-1/index.csv"
DATED = f"AWS Price List offer file version {OFFER_VERSION} (published 2026-07-28T17:52:47Z)"
_TERMS = "Linux, shared tenancy, capacitystatus Used, marketoption OnDemand"


def _od(instance_type: str, usd: float, sku: str = "") -> Price:
    note = f"{_TERMS}{f', SKU {sku}' if sku else ''}; shipped snapshot: `gpufleet prices -s STACK` reads today's rate"
    return Price(instance_type, "on-demand", "us-east-1", usd, OFFER_FILE, DATED, note)


ON_DEMAND: tuple[Price, ...] = (
    _od("p5.48xlarge", 55.04, "3D4V8UAYEMB38GU2"),
    _od("p5en.48xlarge", 63.296),
    _od("p4d.24xlarge", 21.957642, "H7NGEAC6UEHNTKSJ"),
    _od("p4de.24xlarge", 27.44705),
    _od("p6-b200.48xlarge", 113.9328),
)
SHIPPED: tuple[Price, ...] = ON_DEMAND + tuple(reservation(p) for p in ON_DEMAND)
