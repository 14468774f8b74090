"""The pool contract against the Kubernetes adapter, over the fake API server (tests/pool/kubernetes_fake_api.py)."""

from __future__ import annotations

import random
import socket

import pytest

from gpufleet.pool.kubernetes.adapter import KubernetesPool
from gpufleet.pool.kubernetes.api import KubeApi
from gpufleet.pool.kubernetes.retry import RetryPolicy
from gpufleet.pool.protocol import PendingNode

from . import contract
from .fakes import RecordingLauncher
from .kubernetes_fake_api import FakeApiServer, FakeTime, api_client_for

SLOTS = [PendingNode(slot=f"ct-b{i // 2:04d}-n{i:05d}", block=i // 2, partition="train" if i < 4 else "debug",
                     instance_id=f"i-{i:017x}") for i in range(6)]


def policy(deadline_s: float = 30.0) -> RetryPolicy:
    t = FakeTime()
    return RetryPolicy(deadline_s=deadline_s, sleep=t.sleep, clock=t.clock, rng=random.Random(7))


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def make_subject():
    servers: list[FakeApiServer] = []

    def make(failures_before_blacklist: int) -> contract.Subject:
        server = FakeApiServer().__enter__()
        servers.append(server)
        for i, n in enumerate(SLOTS):
            server.kube.add_node(f"ip-10-64-0-{10 + i}.us-east-2.compute.internal", n.slot, instance_id=n.instance_id)

        def pool(url: str) -> KubernetesPool:
            return KubernetesPool(KubeApi(api_client_for(url), policy()), partitions=["train", "debug"],
                                  failures_before_blacklist=failures_before_blacklist, launcher=RecordingLauncher())
        return contract.Subject(pool=pool(server.url), nodes=SLOTS, missing_partition="inference",
                                down=lambda: pool(dead_url()))

    yield make
    for server in servers:
        server.__exit__(None, None, None)


@pytest.mark.parametrize("check", contract.CHECKS, ids=contract.check_id)
def test_contract(check, make_subject):
    check(make_subject)
