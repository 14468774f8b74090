"""Prices from AWS through botocore's Stubber, which checks every request's parameters and every
response against the services' own models (pricing 2017-10-15, ec2 2016-11-15)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from gpufleet.cost import price_list as pl
from gpufleet.cost.pricing import resolve
from gpufleet.errors import ExternalCommandFailed

EXAMPLE = json.loads((Path(__file__).parent / "fixtures" / "aws" / "pricing-get-products-example.json").read_text())


def _client(service: str, region: str) -> Any:
    return boto3.client(service, region_name=region, aws_access_key_id="testing", aws_secret_access_key="testing")


def test_the_price_list_items_on_demand_dimension_is_read_in_its_unit() -> None:
    items = EXAMPLE["output"]["PriceList"]
    assert pl.on_demand_usd(items, unit="GB-Mo") == (0.138, "2017-09-01T18:22:01Z")
    assert pl.on_demand_usd(items) is None  # a storage price is not an hourly instance price


def test_get_products_is_asked_for_the_instance_and_region_and_answered_as_the_api_answers() -> None:
    pricing = _client("pricing", pl.PRICING_REGION)
    with Stubber(pricing) as stub:
        stub.add_response("get_products", EXAMPLE["output"] | {"NextToken": "page-2"},
                          {"ServiceCode": "AmazonEC2", "FormatVersion": "aws_v1",
                           "Filters": pl.on_demand_filters("p5.48xlarge", "us-east-1")})
        stub.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": []},
                          {"ServiceCode": "AmazonEC2", "FormatVersion": "aws_v1", "NextToken": "page-2",
                           "Filters": pl.on_demand_filters("p5.48xlarge", "us-east-1")})
        assert pl.fetch_on_demand(pricing, "p5.48xlarge", "us-east-1") is None  # both pages read, no hourly rate
        stub.assert_no_pending_responses()


def test_an_unreachable_or_refusing_price_api_is_an_error_never_a_price() -> None:
    pricing = _client("pricing", pl.PRICING_REGION)
    with Stubber(pricing) as stub:
        stub.add_client_error("get_products", "AccessDeniedException", "not authorized to perform pricing:GetProducts")
        with pytest.raises(ExternalCommandFailed, match="AccessDenied"):
            pl.fetch_on_demand(pricing, "p5.48xlarge", "us-east-1")
    ec2 = _client("ec2", "us-east-2")
    with Stubber(ec2) as stub:
        stub.add_client_error("describe_capacity_block_offerings", "UnauthorizedOperation", "no")
        with pytest.raises(ExternalCommandFailed, match="UnauthorizedOperation"):
            pl.fetch_capacity_block(ec2, "p5.48xlarge", "us-east-2")


def test_the_capacity_block_rate_is_the_cheapest_offerings_fee_over_hours_and_instances() -> None:
    ec2 = _client("ec2", "us-east-2")
    start = datetime(2026, 12, 3, 11, 30, tzinfo=timezone.utc)
    offer = {"CapacityBlockOfferingId": "cb-0123456789abcdef0", "InstanceType": "p5.48xlarge",
             "AvailabilityZone": "us-east-2a", "InstanceCount": 1, "StartDate": start, "EndDate": start,
             "CapacityBlockDurationHours": 24, "Tenancy": "default", "CurrencyCode": "USD"}
    with Stubber(ec2) as stub:
        stub.add_response("describe_capacity_block_offerings",
                          {"CapacityBlockOfferings": [offer | {"UpfrontFee": "1000.00"},
                                                      offer | {"UpfrontFee": "960.00", "AvailabilityZone": "us-east-2b"}]},
                          {"InstanceType": "p5.48xlarge", "InstanceCount": 1, "CapacityDurationHours": 24})
        price = pl.fetch_capacity_block(ec2, "p5.48xlarge", "us-east-2")
    assert price is not None and price.usd_per_hour == 40.0 and price.basis == "capacity-block"
    assert price.source == pl.CAPACITY_BLOCKS and "2026-12-03T11:30" in price.dated


def test_the_snapshot_is_dated_with_its_source_and_the_report_uses_it(tmp_path: Path) -> None:
    from tests.ops.test_cost_units import _spec

    fetched = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
    spec = _spec(pricing="capacity-block")
    it, region = spec.cluster.instance_type, spec.cluster.region
    path = pl.write_snapshot(tmp_path / pl.SNAPSHOT, [pl.Price(it, "capacity-block", region, 41.5, pl.CAPACITY_BLOCKS,
                                                               "an offering starting 2026-12-03")], fetched)
    prices = pl.read_snapshot(path)
    used, missing = resolve(spec, prices)
    assert missing is None and used is not None and used.usd_per_instance_hour == 41.5
    assert used.source == pl.CAPACITY_BLOCKS and used.dated.startswith("fetched 2026-12-01T12:00:00+00:00")
    assert pl.read_snapshot(tmp_path / "none.json") == []
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(Exception, match="not a gpufleet price snapshot"):
        pl.read_snapshot(tmp_path / "bad.json")
