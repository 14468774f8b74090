"""The workload image on one node: present at the pinned digest, and a container of it sees every GPU.

Why a per-node gate: the stack pins its training image by digest (`acceptance.workloadImage`) and
configure pre-pulls it (role `image_prepull`), so the first job does not cold-start on 125 nodes
at once; a node that missed the pull, or holds the tag at another digest, or cannot give a
container of that image its GPUs, would fail that first job, so it is not admitted.
REMEDIATE, not QUARANTINE: a pull or a runtime restart fixes all three on a healthy node, and
the retest rule quarantines a node that fails twice.
A stack without a workload image has no image checks: `workload_image_checks` returns nothing
(the record holds no `image.*` result, rather than a PASS that was never measured).
"""

from __future__ import annotations

from gpufleet.gates import bundle as B
from gpufleet.gates.bundle import Bundle
from gpufleet.gates.parsers.common import first_line, missing_tool
from gpufleet.gates.parsers.images import DIGEST, ImageList, parse_image_list, split_reference
from gpufleet.gates.parsers.system import parse_nvidia_smi_l
from gpufleet.gates.verdict import CheckResult, Verdict, check_result, not_collected

# The runtime role image_prepull pulls with, per pool: containerd's CRI on Kubernetes nodes (the
# kubelet's images), enroot squashfs files for pyxis on Slurm nodes, containerd itself elsewhere.
RUNTIME_BY_POOL = {"kubernetes": "crictl", "slurm": "enroot"}
REF = "DESIGN.md section 6 (configure with image pre-pull); issue 13 item 4"
P, R = Verdict.PASS, Verdict.REMEDIATE


def _r(check_id: str, measured: str, expected: str, verdict: Verdict, code: str | None = None,
       message: str = "") -> CheckResult:
    return check_result(check_id, "R", measured, expected, verdict, code if verdict is not P else None,
                        message if verdict is not P else "", REF)


def image_runtime(pool: str | None) -> str:
    return RUNTIME_BY_POOL.get(pool or "", "ctr")


# Where role image_prepull keeps a Slurm node's images (its image_prepull_enroot_dir): one squashfs
# file per digest, which pyxis runs as it is (`srun --container-image=<file>`), pulling nothing.
ENROOT_DIR = "/var/lib/gpufleet/enroot"


def enroot_squashfs(image: str) -> str:
    """The squashfs file of the pinned `image` on a Slurm node."""
    return f"{ENROOT_DIR}/{pinned_digest(image)}.sqsh"


def pinned_digest(image: str) -> str:
    """The image's manifest digest; ValueError when the reference is not pinned by one."""
    _, _, digest = split_reference(image)
    if digest is None or not DIGEST.fullmatch(digest):
        raise ValueError(f"workload image {image!r} is not pinned by digest (repo@sha256:<64 hex>)")
    return digest


def presence(listing: ImageList, image: str) -> tuple[Verdict, str | None, str]:
    """(verdict, reason code, what was found) for the pinned image in one node's listing."""
    repo, _, digest = split_reference(image)
    if listing.runtime == "enroot":  # squashfs files are named by digest; no repository is recorded
        if digest is not None and listing.has_digest(digest):
            return P, None, digest
        return R, "image-missing", "; ".join(("no squashfs of it", *listing.problems))[:300]
    held = listing.digests_of(repo)
    if digest in held:
        return P, None, f"{repo}@{digest}"
    if listing.has_repository(repo):
        other = ", ".join(sorted(held)) or "tags only, no digest"
        return R, "image-digest-mismatch", f"{repo} at {other}"
    return R, "image-missing", f"{repo} absent ({len(listing.entries)} other repositories)"


def check_present(bundle: Bundle, image: str) -> CheckResult:
    cid, want = "image.present", pinned_digest(image)
    f = bundle.get(B.IMAGE_LIST)
    if not f.collected:
        return not_collected(cid, "R", want, B.IMAGE_LIST, REF)
    if (line := missing_tool(f.text, f.exit_code)) is not None:
        return _r(cid, f"tool missing: {line}", want, R, "image-runtime-missing",
                  f"the container runtime's CLI is not on the node ({line})")
    listing = parse_image_list(f.text)
    if listing.runtime is None:
        why = "; ".join(listing.problems)
        return _r(cid, f"unreadable listing (rc={f.exit_code}): {why[:200]}", want, R, "image-list-unreadable",
                  f"{B.IMAGE_LIST} is no image listing: {why}")
    verdict, code, found = presence(listing, image)
    messages = {"image-missing": f"{image} is not on the node; pull it again (role image_prepull)",
                "image-digest-mismatch": f"the node holds {found}, not the pinned {want}; pull the pinned digest"}
    return _r(cid, f"{listing.runtime}: {found}", want, verdict, code, messages.get(code or "", ""))


def check_gpus(bundle: Bundle, image: str, gpus: int) -> CheckResult:
    cid, want = "image.gpus", f"{gpus} GPUs"
    f = bundle.get(B.IMAGE_GPUS)
    if not f.collected:
        return not_collected(cid, "R", want, B.IMAGE_GPUS, REF)
    seen = len(parse_nvidia_smi_l(f.text).gpus)
    if seen == gpus:
        return _r(cid, f"{seen} GPUs", want, P)
    shown = f"{seen} GPUs; rc={f.exit_code}: {first_line(f.text)[:200]}" if seen == 0 else f"{seen} GPUs"
    return _r(cid, shown, want, R, "image-gpus-not-visible", f"a container of {image} sees {seen} of {gpus} GPUs")


def workload_image_checks(bundle: Bundle, image: str | None, gpus: int) -> list[CheckResult]:
    """Both image checks, or none when the stack pins no workload image (not applicable)."""
    if image is None:
        return []
    return [check_present(bundle, image), check_gpus(bundle, image, gpus)]
