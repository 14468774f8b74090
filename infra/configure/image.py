"""The node AMI build: Packer runs site.yml's roles with the same BOM extravars as live nodes.

`packer_invocation` only builds the argv (a CLI command prints or runs it); the extravars it
points at are written by `write_image_extravars`. Image builds enable services but start
nothing and load no modules: the builder has no GPU and no EFA.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.bom import Bom
from infra.configure.extravars import configure_extravars

if TYPE_CHECKING:
    from infra.spec import ClusterSpec

PROJECT_ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = PROJECT_ROOT / "images" / "gpufleet.pkr.hcl"


def extravars_file_for(stack: str, spec: "ClusterSpec") -> Path:
    """Run state lives under .gpufleet/<stack>/ (DESIGN section 6)."""
    return PROJECT_ROOT / ".gpufleet" / stack / "image" / f"{spec.image.os}-extravars.json"


def image_extravars(spec: "ClusterSpec", bom: Bom) -> dict[str, Any]:
    return configure_extravars(bom, spec.image.os, spec.cluster.instance, live=False, enable_services=True)


def write_image_extravars(spec: "ClusterSpec", bom: Bom, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(image_extravars(spec, bom), indent=2, sort_keys=True) + "\n")
    return path


def packer_invocation(spec: "ClusterSpec", bom: Bom, *, extravars_file: Path,
                      template: Path = TEMPLATE) -> list[str]:
    """argv of `packer build` for this stack's node OS and BOM."""
    variables = {
        "os": spec.image.os,
        "region": spec.cluster.region,
        "bom_name": bom.name,
        "bom_digest": bom.digest(),
        "extravars_file": str(extravars_file),
    }
    argv = ["packer", "build"]
    for key, value in variables.items():
        argv += ["-var", f"{key}={value}"]
    return argv + [str(template)]
