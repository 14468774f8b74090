"""The node AMI build: Packer runs site.yml's roles with the same BOM extravars as live nodes.

`packer_invocation` only builds the argv (a CLI command prints or runs it); the extravars it
points at are written by `write_image_extravars`. Image builds enable services but start
nothing and load no modules: the builder has no GPU and no EFA.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.bom import Bom
from gpufleet.configure.extravars import configure_extravars
from gpufleet.project import Project, current_project

if TYPE_CHECKING:
    from gpufleet.spec import ClusterSpec

TEMPLATE_NAME = "gpufleet.pkr.hcl"


def packer_template(project: Project) -> Path:
    """The project's Packer template; it finds the playbooks as `../playbooks` from itself."""
    return project.images_dir / TEMPLATE_NAME


def extravars_file_for(stack: str, spec: "ClusterSpec", project: Project | None = None) -> Path:
    """Run state lives under the project's .gpufleet/<stack>/ (DESIGN section 6)."""
    return (project or current_project()).state_dir(stack) / "image" / f"{spec.image.os}-extravars.json"


def image_extravars(spec: "ClusterSpec", bom: Bom) -> dict[str, Any]:
    return configure_extravars(bom, spec.image.os, spec.cluster.instance, live=False, enable_services=True)


def write_image_extravars(spec: "ClusterSpec", bom: Bom, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(image_extravars(spec, bom), indent=2, sort_keys=True) + "\n")
    return path


def packer_invocation(spec: "ClusterSpec", bom: Bom, *, extravars_file: Path,
                      template: Path | None = None) -> list[str]:
    """argv of `packer build` for this stack's node OS and BOM (template: the current project's)."""
    template = template if template is not None else packer_template(current_project())
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
