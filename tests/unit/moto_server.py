"""A real moto server for the boto3 tests (DESIGN.md section 10), shared by this folder's tests.

The server runs in a thread on a free local port; clients talk HTTP to it with dummy
credentials and a single attempt, so a moto gap fails fast instead of retrying.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import boto3
import pytest
from botocore.config import Config


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture()
def moto_client(moto_endpoint: str) -> Callable[..., Any]:
    """moto_client(service, region) -> a boto3 client bound to the moto server."""

    def make(service: str, region: str) -> Any:
        return boto3.client(service, region_name=region, endpoint_url=moto_endpoint,
                            aws_access_key_id="testing", aws_secret_access_key="testing",
                            aws_session_token="testing",
                            config=Config(retries={"max_attempts": 1}))

    return make
