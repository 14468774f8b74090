"""Prices from AWS itself: the Price List API (`pricing` GetProducts) and EC2's
DescribeCapacityBlockOfferings, into a dated snapshot that says where each figure came from.

Why a snapshot and not a lookup per report: the report must run offline (CI, an air-gapped head
node) and say which rate it used and when that rate was read; `gpufleet cost prices -s STACK`
refreshes it when AWS is reachable, and an unreachable API is an error (exit 1), never a zero.

Bases: on-demand is the Linux, shared-tenancy, no-pre-installed-software On-Demand hourly rate
(`capacitystatus` Used); a Capacity Reservation is billed at that rate [odcr], so `reservation`
reuses it; a Capacity Block's rate is an offering's upfront fee over its hours and instances (the
cheapest offering found; a block keeps the rate it was bought at).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Protocol

from gpufleet.catalog_prices import ODCR_SOURCE, Price
from gpufleet.durable import write_atomic
from gpufleet.errors import ConfigError, ExternalCommandFailed

PRICE_LIST = "AWS Price List API (pricing:GetProducts, AmazonEC2)"
CAPACITY_BLOCKS = "EC2 DescribeCapacityBlockOfferings"
PRICING_REGION = "us-east-1"  # the Price List API's endpoint
SNAPSHOT = "prices.json"
FORMAT = 1
HOURLY = "Hrs"


class PricingClient(Protocol):
    def get_paginator(self, name: str) -> Any: ...


class Ec2Client(Protocol):
    def describe_capacity_block_offerings(self, **kw: Any) -> dict[str, Any]: ...


def on_demand_filters(instance_type: str, region: str) -> list[dict[str, str]]:
    return [{"Type": "TERM_MATCH", "Field": f, "Value": v} for f, v in (
        ("instanceType", instance_type), ("regionCode", region), ("operatingSystem", "Linux"),
        ("tenancy", "Shared"), ("preInstalledSw", "NA"), ("capacitystatus", "Used"))]


def on_demand_usd(price_list: Iterable[str], unit: str = HOURLY) -> tuple[float, str] | None:
    """(USD per `unit`, the offer's publication date) from GetProducts' PriceList items (JSON
    strings): the On-Demand term's price dimension in that unit. None: no such price."""
    found: list[tuple[float, str]] = []
    for raw in price_list:
        item = json.loads(raw)
        for term in (item.get("terms") or {}).get("OnDemand", {}).values():
            for dim in term.get("priceDimensions", {}).values():
                usd = (dim.get("pricePerUnit") or {}).get("USD")
                if dim.get("unit") == unit and usd is not None and float(usd) > 0:
                    found.append((float(usd), str(item.get("publicationDate") or term.get("effectiveDate", ""))))
    if len({u for u, _ in found}) > 1:
        raise ExternalCommandFailed("pricing:GetProducts", f"{len(found)} different On-Demand rates matched: "
                                                           f"{sorted({u for u, _ in found})}")
    return found[0] if found else None


def fetch_on_demand(client: PricingClient, instance_type: str, region: str) -> Price | None:
    items: list[str] = []
    try:
        for page in client.get_paginator("get_products").paginate(
                ServiceCode="AmazonEC2", FormatVersion="aws_v1", Filters=on_demand_filters(instance_type, region)):
            items += page.get("PriceList", [])
    except Exception as exc:  # botocore's ClientError, EndpointConnectionError, NoCredentialsError
        raise ExternalCommandFailed("pricing:GetProducts", f"{type(exc).__name__}: {exc}") from exc
    got = on_demand_usd(items)
    if got is None:
        return None
    usd, published = got
    return Price(instance_type, "on-demand", region, usd, PRICE_LIST, published, "Linux, shared tenancy")


def capacity_block_usd(offerings: Iterable[dict[str, Any]], instance_type: str) -> tuple[float, str] | None:
    """(effective USD per instance-hour, the offering's start) of the cheapest offering in USD."""
    rates = []
    for o in offerings:
        if o.get("InstanceType") != instance_type or o.get("CurrencyCode", "USD") != "USD":
            continue
        hours, count = int(o.get("CapacityBlockDurationHours") or 0), int(o.get("InstanceCount") or 0)
        if hours > 0 and count > 0 and o.get("UpfrontFee"):
            start = o.get("StartDate")
            rates.append((float(o["UpfrontFee"]) / (hours * count),
                          start.isoformat() if isinstance(start, datetime) else str(start or "")))
    return min(rates) if rates else None


def fetch_capacity_block(client: Ec2Client, instance_type: str, region: str, *, hours: int = 24,
                         count: int = 1) -> Price | None:
    try:
        answer = client.describe_capacity_block_offerings(InstanceType=instance_type, InstanceCount=count,
                                                          CapacityDurationHours=hours)
    except Exception as exc:  # noqa: BLE001 - every botocore failure is the API's
        raise ExternalCommandFailed("ec2:DescribeCapacityBlockOfferings", f"{type(exc).__name__}: {exc}") from exc
    got = capacity_block_usd(answer.get("CapacityBlockOfferings", []), instance_type)
    if got is None:
        return None
    usd, start = got
    return Price(instance_type, "capacity-block", region, usd, CAPACITY_BLOCKS, f"an offering starting {start}",
                 f"cheapest {hours} h x {count} offering: upfront fee / (hours x instances)")


def reservation(on_demand: Price) -> Price:
    return Price(on_demand.instance_type, "reservation", on_demand.region, on_demand.usd_per_hour,
                 f"{on_demand.source}; {ODCR_SOURCE}", on_demand.dated,
                 "a Capacity Reservation is billed at the On-Demand rate")


def snapshot_document(prices: Iterable[Price], fetched_at: datetime) -> dict[str, Any]:
    return {"format": FORMAT, "fetched_at": fetched_at.isoformat(timespec="seconds"),
            "prices": [asdict(p) for p in prices]}


def write_snapshot(path: Path, prices: Iterable[Price], fetched_at: datetime) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(snapshot_document(prices, fetched_at), indent=1, sort_keys=True) + "\n")
    return path


def read_snapshot(path: Path) -> list[Price]:
    """A snapshot's prices, each dated `fetched <when>; <the source's own date>`."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("format") != FORMAT:
            raise ValueError(f"format {doc.get('format')!r}")
        fetched = str(doc["fetched_at"])
        return [Price(**{**p, "dated": f"fetched {fetched}; {p['dated']}"}) for p in doc["prices"]]
    except FileNotFoundError:
        return []
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: not a gpufleet price snapshot ({exc})", path=str(path),
                          expected=f"format {FORMAT}, as `gpufleet cost prices` writes it") from None


def find(prices: Iterable[Price], instance_type: str, basis: str, region: str) -> Price | None:
    for p in prices:
        if (p.instance_type, p.basis, p.region) == (instance_type, basis, region):
            return p
    return None
