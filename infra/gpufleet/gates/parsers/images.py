"""A node's container image listing, in the format of whichever runtime printed it.

Why one parser for five listings: the preflight records the runtime's own full listing (the
collector decides nothing, so no grep on the node), and the gate needs the same three facts
from each: which repositories are present, under which tags and which manifest digests.
Formats (the preflight's commands, `playbooks/roles/image_prepull/tasks/preflight.yml`):
- `crictl images --digests -o json`: cri-tools prints the CRI ListImagesResponse as JSON
  (`{"images": [{"id", "repoTags", "repoDigests", "size", "uid", "username", "spec", "pinned"}]}`;
  the size is a string: protobuf JSON writes uint64 as a string);
- `ctr -n k8s.io images ls`: containerd's table `REF TYPE DIGEST SIZE PLATFORMS LABELS`, one row
  per reference; a pull by digest has `repo@sha256:...` as its REF;
- `docker images --digests --no-trunc --format '{{json .}}'`: one JSON object per line
  (`Repository`, `Tag`, `Digest`, `ID`, ...);
- `podman images --digests --format json` (and `docker image inspect`): a JSON array of
  objects with `RepoTags`/`RepoDigests` (podman also `Names`, `Digest`);
- enroot on Slurm nodes: `find <dir> -maxdepth 1 -name '*.sqsh' -printf '%s\\t%p\\n'` over the
  role's squashfs folder, where each image is `<dir>/<manifest digest>.sqsh` (enroot itself
  keeps no registry metadata, so the file name is the digest record); size 0 is a failed import.
"""

from __future__ import annotations

import json
import re

from gpufleet.gates.parsers.common import ParseModel

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
Ref = tuple[str, str | None, str | None]  # (normalised repository, tag, digest)
_SQSH = re.compile(r"^(\d+)\t(.*?)(sha256:[0-9a-f]{64})\.sqsh$")
_CTR_HEADER = re.compile(r"^REF\s+TYPE\s+DIGEST\s+")
DEFAULT_REGISTRY = "docker.io"


class ImageEntry(ParseModel):
    repository: str  # normalised: registry/path, without tag or digest
    tags: tuple[str, ...] = ()
    digests: tuple[str, ...] = ()  # manifest digests (sha256:<64 hex>) this repository holds


class ImageList(ParseModel):
    runtime: str | None = None  # crictl | ctr | docker | podman | enroot | empty; None when unrecognised
    entries: tuple[ImageEntry, ...] = ()
    problems: tuple[str, ...] = ()

    def digests_of(self, repository: str) -> set[str]:
        return {d for e in self.entries if e.repository == repository for d in e.digests}

    def has_repository(self, repository: str) -> bool:
        return any(e.repository == repository for e in self.entries)

    def has_digest(self, digest: str) -> bool:
        return any(digest in e.digests for e in self.entries)


def normalise(repository: str) -> str:
    """`busybox` -> `docker.io/library/busybox`, `acme/x` -> `docker.io/acme/x` (Docker's rule:
    the first path element is a registry only when it has a dot or a port, or is localhost)."""
    first, _, rest = repository.partition("/")
    if not rest:
        return f"{DEFAULT_REGISTRY}/library/{first}"
    if "." in first or ":" in first or first == "localhost":
        return repository
    return f"{DEFAULT_REGISTRY}/{repository}"


def split_reference(ref: str) -> tuple[str, str | None, str | None]:
    """`repo[:tag][@sha256:...]` -> (normalised repository, tag, digest)."""
    name, _, digest = ref.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = None
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
    return normalise(name), tag, (digest or None)


def _entries(refs: list[Ref]) -> tuple[ImageEntry, ...]:
    by_repo: dict[str, tuple[list[str], list[str]]] = {}
    for repo, tag, digest in refs:
        tags, digests = by_repo.setdefault(repo, ([], []))
        if tag and tag != "<none>" and tag not in tags:
            tags.append(tag)
        if digest and DIGEST.fullmatch(digest) and digest not in digests:
            digests.append(digest)
    return tuple(ImageEntry(repository=r, tags=tuple(t), digests=tuple(d)) for r, (t, d) in by_repo.items())


def _from_cri(images: list) -> list[Ref]:
    refs: list[Ref] = []
    for image in images:
        if not isinstance(image, dict):
            continue
        for ref in image.get("repoTags") or image.get("RepoTags") or image.get("Names") or []:
            refs.append(split_reference(str(ref)))
        for ref in image.get("repoDigests") or image.get("RepoDigests") or []:
            refs.append(split_reference(str(ref)))
    return refs


def _from_docker_line(doc: dict) -> Ref:
    repo = normalise(str(doc.get("Repository", "")))
    return repo, doc.get("Tag") or None, doc.get("Digest") or None


def _from_ctr(lines: list[str]) -> tuple[list[Ref], list[str]]:
    refs: list[Ref] = []
    problems: list[str] = []
    for i, line in enumerate(lines[1:], 2):
        cells = line.split()
        if not cells:
            continue
        if len(cells) < 3 or not DIGEST.fullmatch(cells[2]):
            problems.append(f"line {i}: not a `ctr images ls` row: {line[:120]!r}")
            continue
        if DIGEST.fullmatch(cells[0]):  # the CRI plugin's image-id reference: names no repository
            continue
        repo, tag, digest = split_reference(cells[0])
        refs.append((repo, tag, digest or cells[2]))  # the DIGEST column: the manifest (list) digest
    return refs, problems


def _from_sqsh(lines: list[str]) -> tuple[list[Ref], list[str]]:
    refs: list[Ref] = []
    problems: list[str] = []
    for line in lines:
        m = _SQSH.match(line)
        if m is None:
            problems.append(f"not a squashfs listing line: {line[:120]!r}")
        elif int(m.group(1)) == 0:
            problems.append(f"{m.group(2)}{m.group(3)}.sqsh is empty (a failed enroot import)")
        else:
            refs.append((f"enroot:{m.group(3)}", None, m.group(3)))
    return refs, problems


def parse_image_list(text: str) -> ImageList:
    """The listing's repositories, tags and digests; the runtime is recognised from the format."""
    stripped = text.strip()
    if not stripped:  # docker and the squashfs listing print nothing when the node holds no image
        return ImageList(runtime="empty")
    if stripped[0] in "[{":
        try:
            doc = json.loads(stripped)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("images"), list):
            return ImageList(runtime="crictl", entries=_entries(_from_cri(doc["images"])))
        if isinstance(doc, list):
            return ImageList(runtime="podman", entries=_entries(_from_cri(doc)))
        if doc is None or isinstance(doc, dict):
            return _docker_lines(stripped)
    lines = [line.rstrip() for line in stripped.splitlines() if line.strip()]
    if _CTR_HEADER.match(lines[0]):
        refs, problems = _from_ctr(lines)
        return ImageList(runtime="ctr", entries=_entries(refs), problems=tuple(problems))
    if _SQSH.match(lines[0]):
        refs, problems = _from_sqsh(lines)
        return ImageList(runtime="enroot", entries=_entries(refs), problems=tuple(problems))
    return ImageList(problems=(f"not an image listing: {lines[0][:200]!r}",))


def _docker_lines(text: str) -> ImageList:
    refs: list[Ref] = []
    problems: list[str] = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            problems.append(f"line {i}: not JSON: {line[:120]!r}")
            continue
        if isinstance(doc, dict) and "Repository" in doc:
            refs.append(_from_docker_line(doc))
        else:
            problems.append(f"line {i}: no Repository field")
    return ImageList(runtime="docker" if refs else None, entries=_entries(refs), problems=tuple(problems))

