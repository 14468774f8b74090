"""The bill of materials: one pinned version of every node component, per node OS.

`images/bom.yaml` is the single source the roles install from, the image is built from, and
the gates compare nodes against; `images/compat.yaml` holds the compatibility rules between
those versions as data, each table citing its source; what the vendors ship together (the EFA
installer's libfabric and aws-ofi-nccl, driver branches, DCGM packages, FSx's Lustre clients) is
`gpufleet.vendor_releases`, their published release data, which the BOM must match. Schema errors raise ConfigError (the
file is unusable); broken compatibility comes back as ERROR findings, like every validator.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpufleet import strict_yaml
from gpufleet.errors import ConfigError, ConfigErrors
from gpufleet.findings import Finding, error
from gpufleet.project import Project, current_project
from gpufleet.vendor_releases import DCGM_4, DRIVER_BRANCHES, EFA_INSTALLER, lustre_series

if TYPE_CHECKING:
    from gpufleet.spec import ClusterSpec

NodeOs = Literal["al2023", "ubuntu-22.04", "ubuntu-24.04"]
COMPONENT_KEYS = ("kernel", "nvidia_driver", "fabric_manager", "cuda", "dcgm", "nccl", "aws_ofi_nccl",
                  "efa_installer", "libfabric", "gdrcopy", "containerd", "nvidia_container_toolkit",
                  "lustre_client", "kubelet", "slurm")
_VERSION = r"^[0-9][0-9A-Za-z.+~_-]*$"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Pin(_Frozen):
    version: str = Field(pattern=_VERSION)


class DriverPin(_Frozen):
    branch: str = Field(pattern=r"^\d{3}$")
    version: str = Field(pattern=_VERSION)
    kernel_modules: Literal["open", "proprietary"]


class EfaInstallerPin(_Frozen):
    version: str = Field(pattern=_VERSION)
    libfabric: str = Field(pattern=_VERSION)


class KernelPin(_Frozen):
    family: str = Field(pattern=r"^\d+\.\d+$")
    minimum: str = Field(pattern=_VERSION)


class Components(_Frozen):
    nvidia_driver: DriverPin
    fabric_manager: Pin
    cuda: Pin
    dcgm: Pin
    nccl: Pin
    aws_ofi_nccl: Pin
    efa_installer: EfaInstallerPin
    gdrcopy: Pin
    nvidia_container_toolkit: Pin


class OsPins(_Frozen):
    kernel: KernelPin
    containerd: str = Field(pattern=_VERSION)
    lustre_client: str = Field(pattern=_VERSION)
    kubelet: str = Field(pattern=_VERSION)
    slurm: str = Field(pattern=_VERSION)


class MonitoringPins(_Frozen):
    """The monitoring agents (roles monitoring_exporters, monitoring_server): pinned like the rest,
    but not node-gated versions (a skewed exporter slows no job), so not in `component_versions`."""

    dcgm_exporter: str = Field(pattern=_VERSION)  # NVIDIA's datacenter-gpu-manager-exporter, paired with dcgm
    node_exporter: str = Field(pattern=_VERSION)
    prometheus: str = Field(pattern=_VERSION)
    alertmanager: str = Field(pattern=_VERSION)


class SlurmContainerPins(_Frozen):
    """enroot and pyxis on Slurm nodes (roles enroot, pyxis), for jobs in the workload image
    (`srun --container-image`): pinned, but not node-gated versions, like the monitoring agents."""

    enroot: str = Field(pattern=_VERSION)
    pyxis: str = Field(pattern=_VERSION)


class Bom(_Frozen):
    schema_version: Literal[1] = Field(alias="schema")
    name: str
    components: Components
    os: dict[NodeOs, OsPins]
    monitoring: MonitoringPins | None = None
    slurm_containers: SlurmContainerPins | None = None

    def for_os(self, os: str) -> OsPins:
        try:
            return self.os[os]  # type: ignore[index]
        except KeyError:
            raise ConfigError(f"the BOM pins nothing for node OS {os!r}", field=f"os.{os}",
                              expected="one of " + ", ".join(self.os)) from None

    def component_versions(self, os: str) -> dict[str, str]:
        """Versions in the node-fact key names; `kernel` is the family (6.8), matched by prefix."""
        c, o = self.components, self.for_os(os)
        return {
            "kernel": o.kernel.family, "nvidia_driver": c.nvidia_driver.version,
            "fabric_manager": c.fabric_manager.version, "cuda": c.cuda.version,
            "dcgm": c.dcgm.version, "nccl": c.nccl.version, "aws_ofi_nccl": c.aws_ofi_nccl.version,
            "efa_installer": c.efa_installer.version, "libfabric": c.efa_installer.libfabric,
            "gdrcopy": c.gdrcopy.version, "containerd": o.containerd,
            "nvidia_container_toolkit": c.nvidia_container_toolkit.version,
            "lustre_client": o.lustre_client, "kubelet": o.kubelet, "slurm": o.slurm,
        }

    def canonical(self) -> str:
        """The BOM as sorted, compact JSON. An optional section the BOM does not set is left out
        rather than written as null, so a gpufleet that adds a new optional section (as
        `monitoring` and `slurm_containers` were) leaves the digest of a BOM without it unchanged:
        nodes admitted under it do not all look out of date after an upgrade of gpufleet itself."""
        data = {k: v for k, v in self.model_dump(mode="json", by_alias=True).items() if v is not None}
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    def digest(self) -> str:
        """sha256 of the canonical JSON form: YAML comments and key order do not change it."""
        return "sha256:" + hashlib.sha256(self.canonical().encode()).hexdigest()


# --- compatibility rules (images/compat.yaml) ------------------------------------------------

class _Cited(_Frozen):
    source: str = Field(min_length=10)


class CudaDriverRule(_Cited):
    table: dict[str, str]


class OfiRelease(_Frozen):
    nccl_min: str
    nccl_max: str
    libfabric_min: str
    ref: str


class OfiRule(_Cited):
    releases: dict[str, OfiRelease]


class EfaLibfabricRule(_Cited):
    table: dict[str, str]


class LustreRow(_Frozen):
    os: NodeOs
    kernel: str
    lustre: str


class LustreRule(_Cited):
    table: tuple[LustreRow, ...]


class CompatRules(_Frozen):
    schema_version: Literal[1] = Field(alias="schema")
    cuda_minimum_driver: CudaDriverRule
    aws_ofi_nccl: OfiRule
    fabric_manager_matches_driver: _Cited
    # Superseded by gpufleet.vendor_releases (the vendors' release rows); still accepted so an older
    # project's compat.yaml loads, never read.
    efa_installer_libfabric: EfaLibfabricRule | None = None
    lustre_client_kernel: LustreRule | None = None


# --- loading ---------------------------------------------------------------------------------

def _load_yaml_model(path: Path, model: type[BaseModel]) -> Any:
    try:
        # strict: a key written twice is an error naming both lines (safe_load kept the last),
        # and every schema error below says its line (issue 23 item 5)
        raw = strict_yaml.load(path.read_text(encoding="utf-8"), source=str(path))
    except FileNotFoundError:
        raise ConfigError("file not found", path=str(path)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", path=str(path)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc}", path=str(path)) from None
    if not isinstance(raw, dict):
        raise ConfigError("expected a mapping at the top level", path=str(path))
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise ConfigErrors([
            ConfigError(e["msg"].removeprefix("Value error, ") + _got(e), path=str(path),
                        field=".".join(str(p) for p in e["loc"]), line=strict_yaml.line_of(raw, e["loc"]))
            for e in exc.errors()
        ]) from None


def _got(err: dict[str, Any]) -> str:
    value = err.get("input")
    if err["type"] in ("missing", "extra_forbidden") or isinstance(value, (dict, list)):
        return ""
    return f" (got {value!r})"


def load_bom(path: Path | None = None) -> Bom:
    """The BOM at `path`; without one, the current project's `images/bom.yaml`."""
    return _load_yaml_model(Path(path) if path is not None else current_project().default_bom, Bom)


def load_compat(path: Path | None = None) -> CompatRules:
    """The rules at `path`; without one, the current project's `images/compat.yaml`."""
    return _load_yaml_model(Path(path) if path is not None else current_project().default_compat, CompatRules)


# --- version order ---------------------------------------------------------------------------

def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """rpm-like order: digit runs compare as numbers and beat letters; 2.1.0 < 2.1.0amzn3.0."""
    return tuple((1, int(t)) if t.isdigit() else (0, t) for t in re.findall(r"\d+|[A-Za-z]+", version))


def version_lt(a: str, b: str) -> bool:
    return version_key(a) < version_key(b)


def series(version: str, parts: int = 2) -> str:
    """The leading `parts` numbers: series('12.8.1') == '12.8'."""
    return ".".join(re.findall(r"\d+", version)[:parts])


# --- checks ----------------------------------------------------------------------------------

def check_compatibility(bom: Bom, os: str, rules: CompatRules | None = None) -> list[Finding]:
    """One ERROR finding per violated rule for the BOM as installed on node OS `os`."""
    rules = rules or load_compat()
    c = bom.components
    out: list[Finding] = []
    drv = c.nvidia_driver.version
    if series(drv, 1) != c.nvidia_driver.branch:
        out.append(error("BOM_DRIVER_BRANCH", "bom.nvidia_driver.version",
                         f"driver {drv} is not on branch R{c.nvidia_driver.branch}"))
    if c.fabric_manager.version != drv:
        out.append(error("BOM_FABRIC_MANAGER_MISMATCH", "bom.fabric_manager.version",
                         f"fabric manager {c.fabric_manager.version} must equal driver {drv} "
                         f"({rules.fabric_manager_matches_driver.source.strip()})"))
    cuda_minor = series(c.cuda.version)
    need = rules.cuda_minimum_driver.table.get(cuda_minor)
    if need is None:
        out.append(error("BOM_CUDA_UNKNOWN", "bom.cuda.version",
                         f"CUDA {cuda_minor} is not in compat.yaml cuda_minimum_driver; add its driver floor"))
    elif version_lt(drv, need):
        out.append(error("BOM_CUDA_DRIVER", "bom.nvidia_driver.version",
                         f"CUDA {c.cuda.version} needs driver >= {need}, the BOM pins {drv}"))
    out += _check_ofi(bom, rules)
    out += _check_vendor_sets(bom)
    if os not in bom.os:
        out.append(error("BOM_OS_MISSING", f"bom.os.{os}", f"the BOM pins nothing for node OS {os}"))
        return out
    out += _check_os(bom.os[os], os, rules)  # type: ignore[index]
    return out


def _check_ofi(bom: Bom, rules: CompatRules) -> list[Finding]:
    c = bom.components
    rel = rules.aws_ofi_nccl.releases.get(c.aws_ofi_nccl.version)
    if rel is None:
        return [error("BOM_OFI_UNKNOWN", "bom.aws_ofi_nccl.version",
                      f"aws-ofi-nccl {c.aws_ofi_nccl.version} is not in compat.yaml aws_ofi_nccl")]
    out = []
    nccl = c.nccl.version
    if version_lt(nccl, rel.nccl_min) or version_lt(rel.nccl_max, nccl):
        out.append(error("BOM_NCCL_RANGE", "bom.nccl.version",
                         f"aws-ofi-nccl {c.aws_ofi_nccl.version} supports NCCL {rel.nccl_min} to "
                         f"{rel.nccl_max} ({rel.ref}), the BOM pins {nccl}"))
    if version_lt(c.efa_installer.libfabric, rel.libfabric_min):
        out.append(error("BOM_OFI_LIBFABRIC", "bom.efa_installer.libfabric",
                         f"aws-ofi-nccl {c.aws_ofi_nccl.version} needs libfabric >= {rel.libfabric_min}, "
                         f"the EFA installer brings {c.efa_installer.libfabric}"))
    return out


def _check_vendor_sets(bom: Bom) -> list[Finding]:
    """The BOM pins what the vendors ship together (gpufleet.vendor_releases), each rule with its row's source."""
    c = bom.components
    out = []
    installer = c.efa_installer
    release = EFA_INSTALLER.get(installer.version)
    if release is None:
        out.append(error("BOM_EFA_UNKNOWN", "bom.efa_installer.version",
                         f"EFA installer {installer.version} is not in gpufleet.vendor_releases.EFA_INSTALLER "
                         f"(known: {', '.join(EFA_INSTALLER)}); add its release-notes row"))
    else:
        where = f"({', '.join(release.sources)}, {release.date})"
        if release.libfabric != installer.libfabric:
            out.append(error("BOM_EFA_LIBFABRIC", "bom.efa_installer.libfabric",
                             f"EFA installer {installer.version} ships libfabric {release.libfabric}, "
                             f"the BOM says {installer.libfabric} {where}"))
        if release.aws_ofi_nccl != c.aws_ofi_nccl.version:
            bundling = [r.version for r in EFA_INSTALLER.values() if r.aws_ofi_nccl == c.aws_ofi_nccl.version]
            out.append(error("BOM_EFA_OFI_NCCL", "bom.aws_ofi_nccl.version",
                             f"EFA installer {installer.version} installs aws-ofi-nccl (libnccl-ofi) "
                             f"{release.aws_ofi_nccl}, the BOM pins {c.aws_ofi_nccl.version}, which "
                             + (f"installers {', '.join(bundling)} bundle" if bundling else "no installer bundles")
                             + f"; nothing else installs the plugin {where}"))
    branch = DRIVER_BRANCHES.get(c.nvidia_driver.branch)
    if branch is None:
        out.append(error("BOM_DRIVER_BRANCH_UNKNOWN", "bom.nvidia_driver.branch",
                         f"driver branch R{c.nvidia_driver.branch} is not in gpufleet.vendor_releases.DRIVER_BRANCHES "
                         f"(known: {', '.join(DRIVER_BRANCHES)})"))
    if series(c.dcgm.version, 1) == "4" and series(c.cuda.version, 1) not in DCGM_4:
        out.append(error("BOM_DCGM_CUDA", "bom.dcgm.version",
                         f"DCGM 4 publishes packages for CUDA {', '.join(DCGM_4)}, not CUDA "
                         f"{series(c.cuda.version, 1)} ({next(iter(DCGM_4.values())).source})"))
    return out


def _check_os(pins: OsPins, os: str, rules: CompatRules) -> list[Finding]:
    out = []
    if series(pins.kernel.minimum) != pins.kernel.family:
        out.append(error("BOM_KERNEL_FAMILY", f"bom.os.{os}.kernel.minimum",
                         f"minimum kernel {pins.kernel.minimum} is not in family {pins.kernel.family}"))
    shipped = lustre_series(os, pins.kernel.family)  # FSx's published clients (gpufleet.vendor_releases)
    if not shipped:
        out.append(error("BOM_LUSTRE_KERNEL", f"bom.os.{os}.kernel.family",
                         f"FSx publishes no Lustre client for {os} on kernel {pins.kernel.family}"))
    elif series(pins.lustre_client) not in shipped:
        out.append(error("BOM_LUSTRE_CLIENT", f"bom.os.{os}.lustre_client",
                         f"{os} kernel {pins.kernel.family} takes Lustre client "
                         f"{', '.join(sorted(shipped))}.x, the BOM pins {pins.lustre_client}"))
    return out


def resolve_bom_path(spec: "ClusterSpec", project: Project | None = None) -> Path:
    """`image.bom` as written in the stack file: relative paths start at the project root."""
    return (project or current_project()).path(spec.image.bom)


def bom_findings(spec: "ClusterSpec", project: Project | None = None) -> list[Finding]:
    """`gpufleet validate`'s BOM check: an unusable BOM or rules file is an ERROR finding.

    The rules are the project's `images/compat.yaml` whichever BOM a stack names: they are
    facts about the upstream releases, not about one BOM.
    """
    project = project or current_project()
    try:
        bom = load_bom(resolve_bom_path(spec, project))
        rules = load_compat(project.default_compat)
    except ConfigError as exc:
        return [error("BOM_INVALID", "gpufleet:image.bom", exc.render())]
    return check_compatibility(bom, spec.image.os, rules)
