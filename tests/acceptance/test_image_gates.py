"""The workload image as a per-node gate: the listing parser over each runtime's format, the
check's three reason codes, "not applicable" without an image, the simulator's evidence in
those formats with a seeded `image-missing` node, and a simulated rollout quarantining exactly
that node while admitting the rest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpufleet.bom import load_bom
from gpufleet.errors import ConfigError
from gpufleet.gates import bundle as B, synth
from gpufleet.gates.bundle import Bundle, FileRecord, Manifest
from gpufleet.gates.checks.container import check_workload_image
from gpufleet.gates.checks.evidence import NodeEvidence
from gpufleet.gates.evaluate import check_node
from gpufleet.gates.image import image_runtime
from gpufleet.gates.parsers.images import normalise, parse_image_list, split_reference
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import Verdict
from gpufleet.sim.faults import EFFECTS, check_image_faults, place_faults
from gpufleet.sim.render import NodeLook, render_files
from gpufleet.plan import build_plan
from gpufleet.spec import load_stack_path

from tests.rollout.e2e import journal_state, rollout
from tests.rollout.project import make_project

REPO = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "5e" * 32
OTHER = "sha256:" + "a1" * 32
IMAGE = f"public.ecr.aws/hpc-cloud/nccl-tests@{DIGEST}"
SMI_L = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08d}-aaaa-bbbb-cccc-dddddddddddd)\n" for i in range(8))


def bundle(files: dict[str, str], rc: dict[str, int] | None = None) -> Bundle:
    records = {n: FileRecord(command=n, exit_code=(rc or {}).get(n, 0)) for n in files}
    return Bundle(path="n1", manifest=Manifest(slot="n1", files=records), files=files)


def checks(files: dict[str, str], image: str | None = IMAGE, rc: dict[str, int] | None = None):
    return check_workload_image(NodeEvidence(bundle(files, rc)), GateSettings(workload_image=image))


def codes(files: dict[str, str], **kw) -> list[str | None]:
    return [c.reason_code for c in checks(files, **kw)]


# --- the parser, one runtime's listing at a time -------------------------------------------

def test_references_normalise_as_docker_does():
    assert normalise("busybox") == "docker.io/library/busybox"
    assert normalise("acme/train") == "docker.io/acme/train"
    assert normalise("localhost:5000/x") == "localhost:5000/x"
    assert split_reference(f"registry:5000/a/b:v1@{DIGEST}") == ("registry:5000/a/b", "v1", DIGEST)
    assert split_reference("registry:5000/a/b") == ("registry:5000/a/b", None, None)


@pytest.mark.parametrize("runtime", ["crictl", "ctr", "enroot"])
def test_each_rendered_listing_parses_to_the_pinned_digest(runtime):
    listing = parse_image_list(synth.image_list(IMAGE, runtime))
    assert listing.runtime == runtime and listing.problems == ()
    assert listing.has_digest(DIGEST) and listing.has_digest(synth.PAUSE_IMAGE[1]) is (runtime != "enroot")
    gone = parse_image_list(synth.image_list(IMAGE, runtime, present=False))
    assert not gone.has_digest(DIGEST)


def test_crictl_json_has_the_cri_list_images_shape():
    doc = json.loads(synth.image_list(IMAGE, "crictl"))
    image = doc["images"][1]
    assert set(image) == {"id", "repoTags", "repoDigests", "size", "username", "pinned"}
    assert image["repoDigests"] == [IMAGE] and image["repoTags"] == [] and isinstance(image["size"], str)


def test_ctr_rows_and_image_id_references():
    text = synth.image_list(IMAGE, "ctr")
    assert text.splitlines()[0].split() == ["REF", "TYPE", "DIGEST", "SIZE", "PLATFORMS", "LABELS"]
    listing = parse_image_list(text)
    assert {e.repository for e in listing.entries} == {synth.PAUSE_IMAGE[0], "public.ecr.aws/hpc-cloud/nccl-tests"}
    assert listing.digests_of("public.ecr.aws/hpc-cloud/nccl-tests") == {DIGEST}


def test_crictl_before_protojson_printed_unset_messages_as_null():
    doc = {"images": [{"id": "sha256:" + "0" * 64, "repoTags": [], "repoDigests": [IMAGE], "size": "9876543210",
                       "uid": None, "username": "", "spec": None, "pinned": False}]}
    listing = parse_image_list(json.dumps(doc, indent=2))
    assert listing.runtime == "crictl" and listing.digests_of("public.ecr.aws/hpc-cloud/nccl-tests") == {DIGEST}


def test_docker_json_lines_and_podman_arrays():
    line = {"Containers": "N/A", "Digest": DIGEST, "ID": "sha256:" + "0" * 64,
            "Repository": "public.ecr.aws/hpc-cloud/nccl-tests", "Tag": "<none>", "Size": "9.88GB"}
    docker = parse_image_list(json.dumps(line) + "\n" + json.dumps({**line, "Repository": "busybox", "Digest": OTHER}))
    assert docker.runtime == "docker" and docker.digests_of("docker.io/library/busybox") == {OTHER}
    podman = parse_image_list(json.dumps([{"Id": "x", "Names": ["public.ecr.aws/hpc-cloud/nccl-tests:v1"],
                                           "RepoDigests": [IMAGE], "Digest": DIGEST}]))
    assert podman.runtime == "podman" and podman.entries[0].tags == ("v1",) and podman.has_digest(DIGEST)


def test_an_empty_squashfs_is_a_failed_import_not_an_image():
    listing = parse_image_list(f"0\t/var/lib/gpufleet/enroot/{DIGEST}.sqsh\n")
    assert listing.runtime == "enroot" and not listing.has_digest(DIGEST) and "failed enroot import" in listing.problems[0]
    out = checks({B.IMAGE_LIST: f"0\t/var/lib/gpufleet/enroot/{DIGEST}.sqsh\n", B.IMAGE_GPUS: SMI_L})
    assert out[0].reason_code == "image-missing" and "failed enroot import" in out[0].measured


# --- the check ------------------------------------------------------------------------------

def test_present_and_all_gpus_pass():
    for runtime in ("crictl", "ctr", "enroot"):
        out = checks({B.IMAGE_LIST: synth.image_list(IMAGE, runtime), B.IMAGE_GPUS: SMI_L})
        assert [(c.check_id, c.verdict) for c in out] == [("image.present", Verdict.PASS), ("image.gpus", Verdict.PASS)]


def test_missing_image_and_a_container_that_cannot_start():
    gpus, rc = synth.image_gpus(IMAGE, "ctr", "NVIDIA H100 80GB HBM3", 8, present=False)
    out = checks({B.IMAGE_LIST: synth.image_list(IMAGE, "ctr", present=False), B.IMAGE_GPUS: gpus},
                 rc={B.IMAGE_GPUS: rc})
    assert [c.reason_code for c in out] == ["image-missing", "image-gpus-not-visible"]
    assert all(c.verdict is Verdict.REMEDIATE for c in out)
    assert "not found" in out[1].measured and "rc=1" in out[1].measured


def test_the_tag_at_another_digest_is_a_mismatch_naming_both():
    stale = synth.image_list(IMAGE.replace(DIGEST, OTHER), "crictl")
    out = checks({B.IMAGE_LIST: stale, B.IMAGE_GPUS: SMI_L})
    assert out[0].reason_code == "image-digest-mismatch"
    assert OTHER in out[0].measured and DIGEST in out[0].message


def test_a_container_that_sees_fewer_gpus():
    out = checks({B.IMAGE_LIST: synth.image_list(IMAGE, "ctr"), B.IMAGE_GPUS: SMI_L.split("\n", 1)[1]})
    assert out[1].reason_code == "image-gpus-not-visible" and "7 of 8" in out[1].message


def test_evidence_that_is_absent_unreadable_or_from_a_missing_tool():
    assert codes({}) == ["missing-image-list", "missing-image-gpus"]
    assert codes({B.IMAGE_LIST: "Segmentation fault\n", B.IMAGE_GPUS: SMI_L})[0] == "image-list-unreadable"
    assert codes({B.IMAGE_LIST: "bash: line 1: crictl: command not found\n", B.IMAGE_GPUS: SMI_L},
                 rc={B.IMAGE_LIST: 127})[0] == "image-runtime-missing"
    assert codes({B.IMAGE_LIST: "", B.IMAGE_GPUS: SMI_L})[0] == "image-missing"  # docker/enroot with no image


def test_without_a_workload_image_the_checks_do_not_apply():
    assert checks({}, image=None) == []  # no image.* result at all, rather than an unmeasured PASS
    with pytest.raises(ValueError):
        GateSettings(workload_image="public.ecr.aws/hpc-cloud/nccl-tests:latest")


# --- the simulator --------------------------------------------------------------------------

def look(pool: str, fault: str | None = None, image: str | None = IMAGE) -> NodeLook:
    versions = tuple(sorted(synth.bom_versions(load_bom(REPO / "images" / "bom.yaml"), "al2023").items()))
    return NodeLook(instance_type="p5.48xlarge", os="al2023", versions=versions, fault=fault, systemic="none",
                    factor=1.0, dcgm_level=2, workload_image=image, pool=pool)


def _image_results(files: dict[str, str], rc: dict[str, int], image: str | None = IMAGE):
    b = Bundle(path="n1", manifest=Manifest(slot="n1", files={n: FileRecord(command=n, exit_code=rc.get(n, 0))
                                                               for n in files}), files=files)
    step = check_node(b, GateSettings(workload_image=image, expected_by_os={}, expect_lustre=True))
    return [r for r in step.results if r.check_id.startswith("image.")]


@pytest.mark.parametrize("pool", ["kubernetes", "slurm", "sim"])
def test_simulated_nodes_carry_the_evidence_in_their_pool_runtime_format(pool):
    files, rc = render_files(look(pool))
    assert parse_image_list(files[B.IMAGE_LIST]).runtime == image_runtime(pool)
    assert [r.verdict for r in _image_results(files, rc)] == [Verdict.PASS, Verdict.PASS]
    files, rc = render_files(look(pool, fault="image-missing"))
    assert [r.reason_code for r in _image_results(files, rc)] == list(EFFECTS["image-missing"].reason_codes)


def test_a_stack_without_an_image_renders_no_evidence_and_gets_no_image_checks():
    files, rc = render_files(look("sim", image=None))
    assert B.IMAGE_LIST not in files and _image_results(files, rc, image=None) == []


def test_an_image_fault_needs_a_pinned_image():
    spec = load_stack_path(REPO / "tests" / "fixtures" / "stacks" / "Pulumi.crash40.yaml")
    with pytest.raises(ConfigError, match="pins no workload image"):
        check_image_faults(spec.simulator.model_copy(update={"faults": {"image-missing": 1}}), None)
    check_image_faults(spec.simulator.model_copy(update={"faults": {"image-missing": 1}}), IMAGE)


# --- a simulated rollout ---------------------------------------------------------------------

def _image_stack(project: Path, image: str | None) -> None:
    doc = yaml.safe_load((project / "stacks" / "Pulumi.crash40.yaml").read_text())
    cfg = doc["config"]
    cfg["gpufleet:cluster"]["name"] = "imagecheck"
    if image is not None:
        cfg["gpufleet:acceptance"] = {"workloadImage": image}
    cfg["gpufleet:simulator"] = {"seed": 3, "faults": {"image-missing": 1}}
    (project / "stacks" / "Pulumi.imagecheck.yaml").write_text(yaml.safe_dump(doc))


def test_an_image_fault_without_an_image_is_refused_before_anything_is_launched(tmp_path):
    project = make_project(tmp_path / "p")
    _image_stack(project, None)
    result = rollout(project, "imagecheck")
    assert result.exit_code == 2 and "pins no workload image" in result.output
    assert "Pulumi.imagecheck.yaml" in result.output
    assert not (project / ".gpufleet" / "imagecheck" / "sim" / "ledger.jsonl").exists()


@pytest.mark.slow  # a whole simulated rollout, ~9 s
def test_a_simulated_rollout_quarantines_exactly_the_node_that_missed_the_pull(tmp_path):
    project = make_project(tmp_path / "p")
    _image_stack(project, IMAGE)
    result = rollout(project, "imagecheck")
    assert result.exit_code == 0, result.output
    state = journal_state(project, "imagecheck")
    quarantined = {s: [h[2] for h in n.history if h[0] == "quarantined"] for s, n in state.nodes.items()}
    quarantined = {s: c for s, c in quarantined.items() if c}
    spec = load_stack_path(project / "stacks" / "Pulumi.imagecheck.yaml")
    seeded = place_faults(build_plan(spec), spec.simulator).faults
    assert set(quarantined) == set(seeded) and [c[0] for c in quarantined.values()] == ["image-missing"]
    assert state.finished and not state.halted


# --- `gpufleet gate --workload-image` -------------------------------------------------------

def test_the_gate_command_checks_the_image_it_is_given(tmp_path):
    from click.testing import CliRunner

    from gpufleet.cli import main

    d = tmp_path / "bundles"
    for slot, present in (("has", True), ("lacks", False)):
        folder = synth.write_node(d / slot, synth.NodeSpec(slot=slot))
        gpus, _ = synth.image_gpus(IMAGE, "crictl", "NVIDIA H100 80GB HBM3", 8, present)
        (folder / B.IMAGE_LIST).write_text(synth.image_list(IMAGE, "crictl", present))
        (folder / B.IMAGE_GPUS).write_text(gpus)
    r = CliRunner().invoke(main, ["gate", str(d), "--json", "--workload-image", IMAGE])
    assert r.exit_code == 0, r.output  # REMEDIATE is a retest, not a quarantine
    records = {x["slot"]: x for x in json.loads(r.stdout[:r.stdout.rindex("}") + 1])["records"]}
    assert records["has"]["action"] == "admit"
    assert records["lacks"]["action"] == "retest" and records["lacks"]["reason_codes"][:2] == [
        "image-missing", "image-gpus-not-visible"]
    plain = CliRunner().invoke(main, ["gate", str(d), "--json"])  # no image named: the checks do not apply
    assert all(x["action"] == "admit" for x in json.loads(plain.stdout[:plain.stdout.rindex("}") + 1])["records"])
    text = CliRunner().invoke(main, ["gate", str(d)])
    assert "workload image: not applicable" in text.output and "image." not in text.output
    bad = CliRunner().invoke(main, ["gate", str(d), "--workload-image", "nccl-tests:latest"])
    assert bad.exit_code == 2 and "not pinned by digest" in bad.output
    project = make_project(tmp_path / "p")
    _image_stack(project, IMAGE)  # -s STACK: the stack's acceptance.workloadImage
    by_stack = CliRunner().invoke(main, ["--project", str(project), "gate", str(d), "--json", "-s", "imagecheck"])
    assert by_stack.exit_code == 0, by_stack.output
    records = {x["slot"]: x for x in json.loads(by_stack.stdout[:by_stack.stdout.rindex("}") + 1])["records"]}
    assert records["lacks"]["reason_codes"][0] == "image-missing" and records["has"]["action"] == "admit"


def test_the_stack_executor_hands_the_image_to_configure_and_preflight():
    from gpufleet.configure.executor import stack_executor
    from gpufleet.configure.inventory import SshConnection
    from gpufleet.project import find_project
    from gpufleet.spec import load_stack

    project = find_project(REPO)
    spec = load_stack("dev", project.stacks_dir)
    assert spec.pool.type == "slurm"
    without = stack_executor(spec, project, "dev", SshConnection(user="ubuntu"))
    assert "image_prepull_image" not in without.site_vars and "image_prepull_image" not in without.preflight_vars
    spec = spec.model_copy(update={"acceptance": spec.acceptance.model_copy(update={"workload_image": IMAGE})})
    ex = stack_executor(spec, project, "dev", SshConnection(user="ubuntu"))
    want = {"image_prepull_image": IMAGE, "image_prepull_runtime": "enroot"}  # pyxis images on a Slurm pool
    assert want.items() <= ex.site_vars.items() and want.items() <= ex.preflight_vars.items()
