"""Every chart and manifest the Kubernetes pool installs, pinned in one place with its source.

Why one place: a version bump is one reviewed line here, never a value buried in a component,
and `gpufleet preview` shows the same pins the cluster gets. Kueue's chart version must match
the CRD schemas the tests validate against (tests/fixtures/schemas/kueue-v0.19.2).
"""

from __future__ import annotations

from dataclasses import dataclass

KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"  # served and stored by Kueue v0.19.2 (CRD files)


@dataclass(frozen=True)
class Chart:
    """A Helm chart release: `repo` is an HTTP chart repository, or None when `chart` is an OCI URL."""

    release: str
    chart: str
    version: str
    namespace: str
    source: str
    repo: str | None = None


@dataclass(frozen=True)
class Manifest:
    """A release manifest applied as-is (projects that publish no Helm chart)."""

    name: str
    url: str
    version: str
    namespace: str
    source: str


KUEUE = Chart(
    release="kueue", chart="oci://registry.k8s.io/kueue/charts/kueue", version="0.19.2", namespace="kueue-system",
    source="kubernetes-sigs/kueue v0.19.2 (charts/kueue; installation docs: helm install kueue "
           "oci://registry.k8s.io/kueue/charts/kueue --version=<release without v>)")
NVIDIA_DEVICE_PLUGIN = Chart(
    release="nvidia-device-plugin", chart="nvidia-device-plugin", version="0.18.0", namespace="kube-system",
    repo="https://nvidia.github.io/k8s-device-plugin",
    source="NVIDIA/k8s-device-plugin chart 0.18.0 (the Helm repository on nvidia.github.io)")
EFA_DEVICE_PLUGIN = Chart(
    release="aws-efa-k8s-device-plugin", chart="aws-efa-k8s-device-plugin", version="v0.5.21", namespace="kube-system",
    repo="https://aws.github.io/eks-charts",
    source="aws/eks-charts stable/aws-efa-k8s-device-plugin (eks-charts v0.0.244 bumped it to v0.5.21, PR #1366)")
DCGM_EXPORTER = Chart(
    release="dcgm-exporter", chart="dcgm-exporter", version="4.2.3", namespace="gpu-monitoring",
    repo="https://nvidia.github.io/dcgm-exporter/helm-charts",
    source="NVIDIA/dcgm-exporter helm-charts; the chart line that matches the BOM's DCGM 4.2.3")
FSX_CSI_DRIVER = Chart(
    release="aws-fsx-csi-driver", chart="aws-fsx-csi-driver", version="1.17.0", namespace="kube-system",
    repo="https://kubernetes-sigs.github.io/aws-fsx-csi-driver",
    source="kubernetes-sigs/aws-fsx-csi-driver release helm-chart-aws-fsx-csi-driver-1.17.0")
MPI_OPERATOR = Manifest(
    name="mpi-operator", version="v0.6.0", namespace="mpi-operator",
    url="https://raw.githubusercontent.com/kubeflow/mpi-operator/v0.6.0/deploy/v2beta1/mpi-operator.yaml",
    source="kubeflow/mpi-operator v0.6.0 deploy/v2beta1/mpi-operator.yaml (the project publishes no chart); "
           "serves kubeflow.org/v2beta1 MPIJob, the kind gpufleet.gates.launch emits")
MPI_OPERATOR_DEPLOYMENT = "mpi-operator"  # the Deployment in that manifest (its namespace is the manifest's)

CHARTS = (KUEUE, NVIDIA_DEVICE_PLUGIN, EFA_DEVICE_PLUGIN, DCGM_EXPORTER, FSX_CSI_DRIVER)
