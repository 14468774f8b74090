"""The NCCL/EFA environment derivation (gates-research appendix rules)."""

from __future__ import annotations

from hypothesis import given, strategies as st

from gpufleet.bom import load_bom
from gpufleet.configure.nccl_env import derive_nccl_env, nccl_env_for


def test_current_stack_sets_only_what_is_still_needed():
    env = nccl_env_for(load_bom())
    want = {"NCCL_SOCKET_IFNAME": "^lo,docker,veth", "NCCL_NET": "Libfabric", "NCCL_NET_PLUGIN": "ofi"}
    assert env.job_env == want
    assert env.nccl_conf == want


def test_socket_interface_filter_matches_a_pods_eth0_and_a_hosts_ens():
    """node-config-review F7: `en` is a prefix filter no VPC-CNI pod interface (eth0) matches."""
    ifname = derive_nccl_env(aws_ofi_nccl="1.16.3", libfabric="2.1.0amzn5.0").job_env["NCCL_SOCKET_IFNAME"]
    assert ifname.startswith("^")  # an exclusion list (NCCL: '^' excludes the prefixes that follow)
    excluded = ifname[1:].split(",")
    for interface in ("eth0", "ens32", "enp71s0"):
        assert not any(interface.startswith(p) for p in excluded), interface
    for interface in ("lo", "docker0", "veth1a2b"):
        assert any(interface.startswith(p) for p in excluded), interface


def test_the_plugin_is_named_so_a_socket_fallback_fails():
    """node-config-review F4: NCCL falls back to sockets silently when it cannot load the plugin."""
    new = derive_nccl_env(aws_ofi_nccl="1.15.0", libfabric="2.1.0amzn3.0").job_env
    assert new["NCCL_NET_PLUGIN"] == "ofi" and new["NCCL_NET"] == "Libfabric"
    old = derive_nccl_env(aws_ofi_nccl="1.14.2", libfabric="2.1.0amzn2.0").job_env
    assert "NCCL_NET" not in old and "NCCL_NET_PLUGIN" not in old
    assert not {"NCCL_NET", "NCCL_NET_PLUGIN"} & derive_nccl_env(aws_ofi_nccl="1.16.3", libfabric="2.1.0amzn5.0",
                                                                 efa=False).job_env.keys()


def test_legacy_plugin_needs_provider_and_simple_protocol():
    env = derive_nccl_env(aws_ofi_nccl="1.5.0", libfabric="1.15.1amzn1.0")
    assert env.job_env["FI_PROVIDER"] == "efa" and env.job_env["NCCL_PROTO"] == "simple"
    assert env.job_env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert "FI_PROVIDER" not in env.nccl_conf  # /etc/nccl.conf holds NCCL_* only


def test_device_rdma_only_below_libfabric_1_18_or_plugin_1_7():
    assert "FI_EFA_USE_DEVICE_RDMA" in derive_nccl_env(aws_ofi_nccl="1.7.4", libfabric="1.17.0").job_env
    assert "FI_EFA_USE_DEVICE_RDMA" in derive_nccl_env(aws_ofi_nccl="1.6.0", libfabric="1.18.0").job_env
    assert "FI_EFA_USE_DEVICE_RDMA" not in derive_nccl_env(aws_ofi_nccl="1.7.0", libfabric="1.18.0").job_env


def test_buffer_sizes_until_the_plugin_sets_its_own():
    assert derive_nccl_env(aws_ofi_nccl="1.12.0", libfabric="1.22.0").nccl_conf["NCCL_BUFFSIZE"] == "8388608"
    assert "NCCL_BUFFSIZE" not in derive_nccl_env(aws_ofi_nccl="1.16.0", libfabric="2.1.0amzn3.0").nccl_conf


def test_no_efa_means_no_libfabric_settings():
    env = derive_nccl_env(aws_ofi_nccl="1.5.0", libfabric="1.15.0", efa=False)
    assert not [k for k in env.job_env if k.startswith("FI_")]


versions = st.tuples(st.integers(0, 3), st.integers(0, 30), st.integers(0, 9)).map(lambda t: ".".join(map(str, t)))


@given(ofi=versions, fabric=versions, efa=st.booleans())
def test_never_fork_safety_knobs_and_conf_is_a_subset(ofi, fabric, efa):
    env = derive_nccl_env(aws_ofi_nccl=ofi, libfabric=fabric, efa=efa)
    assert not [k for k in env.job_env if k.startswith("RDMAV_") or k == "FI_EFA_FORK_SAFE"]
    assert "NCCL_MIN_CHANNELS" not in env.job_env
    assert env.nccl_conf.items() <= env.job_env.items()
    assert all(k.startswith("NCCL_") for k in env.nccl_conf)
