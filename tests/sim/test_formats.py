"""The simulator's output against REAL captures (tests/fixtures/real, see its SOURCES.md): a healthy
simulated node must read, through the gates' own parsers, exactly like the real H100 captures,
its DCGM JSON must satisfy NVIDIA's schema, and its multi-node output must have the shape of the
real 2x p5 nccl-tests run. Parsers, fixtures and simulator cannot drift into agreeing only with
each other."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from gpufleet.gates import bundle as B
from gpufleet.gates.checks.evidence import _from_csv, _from_q
from gpufleet.gates.launch import launch_spec
from gpufleet.gates.parsers import dcgm, efa, kernel_log, nccl_debug, nccl_tests, nvidia_smi
from gpufleet.gates.parsers.common import strip_rank_prefix

from .conftest import make_project, make_spec, open_cloud

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
NODE_SPECIFIC = {"bus_id", "driver"}  # a single-GPU VM on driver 590 vs GPU i of an HGX board on the BOM's driver


def real(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def healthy_files(tmp_path_factory):
    """One healthy node's bundle, as the executor writes it."""
    root = tmp_path_factory.mktemp("proj")
    cloud = open_cloud(make_spec(target_gpus=80), make_project(root))
    prov = cloud.provisioner.provision(1, cloud.plan.batch_nodes(1))
    inst = next(iter(prov.instances.values()))
    dest = root / "bundles"
    cloud.executor.preflight([inst], dest)
    bundle = B.read_bundle(dest / inst.slot)
    return cloud, inst, bundle


def test_query_gpu_csv_parses_to_the_real_h100_fields(healthy_files):
    _, _, bundle = healthy_files
    ours = [_from_csv(r) for r in nvidia_smi.read_query_table(bundle.files[B.QUERY_GPU]).records()]
    theirs = _from_csv(next(iter(nvidia_smi.read_query_table(
        real("nvidia_smi_query_gpu_full__h100_drv590__nvidia_gpu_exporter_capture.csv")).records())))
    assert len(ours) == 8
    assert all(None not in g.values() for g in ours)
    for gpu in ours:
        assert {k: v for k, v in gpu.items() if k not in NODE_SPECIFIC} == \
               {k: v for k, v in theirs.items() if k not in NODE_SPECIFIC}


def test_smi_q_parses_to_the_real_h100_fields(healthy_files):
    _, _, bundle = healthy_files
    ours = nvidia_smi.parse_q(bundle.files[B.SMI_Q])
    q = nvidia_smi.parse_q(real("nvidia_smi_q__h100_1gpu_drv590__nvidia_gpu_exporter_capture.txt"))
    theirs = _from_q(q.gpus[0])
    assert len(ours.gpus) == 8
    for g in ours.gpus:
        mine = _from_q(g)
        assert {k: v for k, v in mine.items() if k not in NODE_SPECIFIC} == \
               {k: v for k, v in theirs.items() if k not in NODE_SPECIFIC}


def test_nvlink_status_matches_the_real_h100_links(healthy_files):
    _, _, bundle = healthy_files
    theirs = nvidia_smi.parse_nvlink_status(real("nvidia_smi_nvlink_s__h100_drv590__nvidia_gpu_exporter_capture.txt"))
    ours = nvidia_smi.parse_nvlink_status(bundle.files[B.NVLINK_S])
    assert len(ours.gpus) == 8 and not ours.problems
    assert all(g.links == theirs.gpus[0].links for g in ours.gpus)


def test_dcgm_json_satisfies_nvidias_4x_schema_and_reads_back(healthy_files):
    cloud, _, bundle = healthy_files
    doc = json.loads(bundle.files[B.DCGM_DIAG])
    schema = json.loads(real("dcgm_diag_json_schema__dcgm4.x__NVIDIA_DCGM_testing.json"))
    jsonschema.Draft7Validator(schema).validate(doc)
    diag = dcgm.parse_diag(bundle.files[B.DCGM_DIAG])
    assert diag.results and all(r.status_norm == "pass" for r in diag.results)
    assert diag.version == cloud.versions["dcgm"]
    assert bundle.manifest.files[B.DCGM_DIAG].command == f"dcgmi diag -r {cloud.spec.gates.dcgm_level} -j"


def test_faulty_dcgm_and_kernel_lines_read_like_the_real_ones(cloud_for, tmp_path):
    cloud = cloud_for(make_spec(target_gpus=80, faults={"xid-119": 1}))
    prov = cloud.provisioner.provision(len(cloud.plan.batches), cloud.plan.nodes)
    slot = next(iter(cloud.truth().faulty))
    cloud.executor.preflight([prov.instances[slot]], tmp_path)
    text = (tmp_path / slot / B.KERNEL_LOG).read_text()
    log = kernel_log.parse_kernel_log(text)
    assert [e.xid for e in log.xids] == [119] and not log.problems
    # the research's real Xid 119 line carries the same text after the code
    assert log.xids[0].text.endswith("Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4).")
    assert f"{prov.instances[slot].private_ip.replace('.', '-')} kernel:" in text  # this node's host name


def test_efa_outputs_parse_like_the_real_ones(healthy_files, cloud_for, tmp_path):
    cloud, _, bundle = healthy_files
    fi = efa.parse_fi_info(bundle.files[B.FI_INFO])
    assert fi.provider_ok and fi.devices == cloud.sku.efa_interfaces
    assert efa.parse_lspci(bundle.files[B.LSPCI_EFA]).efa_devices == cloud.sku.efa_interfaces
    net = nccl_debug.parse_net(bundle.files[B.NCCL_EFA_LOOPBACK])
    assert net.efa_used and net.nics == cloud.sku.efa_interfaces
    missing = cloud_for(make_spec(target_gpus=80, faults={"efa-missing": 1}))
    prov = missing.provisioner.provision(len(missing.plan.batches), missing.plan.nodes)
    slot = next(iter(missing.truth().faulty))
    missing.executor.preflight([prov.instances[slot]], tmp_path)
    ours = efa.parse_fi_info((tmp_path / slot / B.FI_INFO).read_text())
    negative = efa.parse_fi_info(real("fi_info_p_efa__no_efa_negative__aws_hpc_tutorials.txt"))
    assert (ours.provider_ok, ours.error_code) == (negative.provider_ok, negative.error_code) == (False, -61)


def test_manifest_is_the_documented_bundle_manifest(healthy_files):
    cloud, inst, bundle = healthy_files
    m = bundle.manifest
    assert (m.slot, m.instance_id, m.batch, m.block, m.stack, m.collected_by) == (
        inst.slot, inst.instance_id, inst.batch, inst.block, "local", "sim")
    assert m.instance_type == cloud.sku.name and not bundle.problems
    assert set(m.files) == set(bundle.files) - {B.MANIFEST}
    assert all(r.exit_code == 0 and r.started and r.ended and r.started <= r.ended for r in m.files.values())


def test_multinode_output_has_the_real_2x_p5_shape(healthy_files):
    """The rows' fields as the 2x p5 run reads; the header lines byte for byte as nccl-tests
    2.19.6 prints them (the project's own 2.19.6 capture: the 2x p5 README run is an older
    nccl-tests, one space narrower before #wrong)."""
    cloud, _, _ = healthy_files
    nodes = [s.name for s in cloud.plan.batch_nodes(1)][:2]
    spec = launch_spec("slurm", nodes, cloud.sku, cloud.versions, message_bytes=2**30)
    result = cloud.launcher.run([spec], timeout_s=600)[0]
    assert result.exit_code == 0 and result.nodes == tuple(nodes)
    ref = real("nccl_all_reduce_perf__2x_p5__aws_readme.txt").splitlines()
    ours = result.output.splitlines()
    v219 = real("nccl_all_reduce_perf__1gpu_h200_nccl2.28.9_debug_info__captured.txt").splitlines()
    header = [line for line in v219 if line.lstrip("#").lstrip().startswith(("size", "(B)", "out-of-place"))]
    assert [strip_rank_prefix(line) for line in ours if strip_rank_prefix(line).lstrip("#").lstrip()
            .startswith(("size", "(B)", "out-of-place"))] == header
    assert all(line.startswith("0: ") for line in ours if line and "NCCL INFO" not in line)
    perf, ref_perf = nccl_tests.parse_text(result.output), nccl_tests.parse_text("\n".join(ref))
    assert len(perf.rows) == 1 and perf.rows[0].size == 2**30 and perf.wrong_total == 0 and perf.out_of_bounds == 0
    assert set(perf.rows[0].out_of_place.model_dump()) == set(ref_perf.rows[-1].out_of_place.model_dump())
    ranks = [line for line in ours if "#  Rank" in line]
    assert len(ranks) == 2 * cloud.sku.gpus
    assert all(cloud.launcher.cloud.ledger.current()[n].private_ip.replace(".", "-") in " ".join(ranks) for n in nodes)
    assert nccl_debug.parse_net(result.output).efa_used


def test_a_gpu_off_the_bus_is_gone_from_every_listing(cloud_for, tmp_path):
    cloud = cloud_for(make_spec(target_gpus=80, faults={"xid-79": 1}))
    prov = cloud.provisioner.provision(len(cloud.plan.batches), cloud.plan.nodes)
    slot = next(iter(cloud.truth().faulty))
    cloud.executor.preflight([prov.instances[slot]], tmp_path)
    b = B.read_bundle(tmp_path / slot)
    seen = cloud.sku.gpus - 1
    assert len(nvidia_smi.read_query_table(b.files[B.QUERY_GPU]).rows) == seen
    assert len(nvidia_smi.parse_q(b.files[B.SMI_Q]).gpus) == seen
    assert len(nvidia_smi.parse_nvlink_status(b.files[B.NVLINK_S]).gpus) == seen
    assert len(b.files[B.CONTAINER_GPUS].splitlines()) == seen
    doc = json.loads(b.files[B.DCGM_DIAG])
    schema = json.loads(real("dcgm_diag_json_schema__dcgm4.x__NVIDIA_DCGM_testing.json"))
    jsonschema.Draft7Validator(schema).validate(doc)
    assert {r.gpu for r in dcgm.parse_diag(b.files[B.DCGM_DIAG]).results} == set(range(cloud.sku.gpus)) - {3}
    assert [e.xid for e in kernel_log.parse_kernel_log(b.files[B.KERNEL_LOG]).xids] == [79]
