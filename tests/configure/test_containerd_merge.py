"""containerd 1.7 reads config.toml and then its imports, replacing each plugin's table whole.

Why: `mergeConfig` in containerd 1.7 (services/server/config/config.go) merges maps by key with
values "replaced entirely" (`for k, v := range from.Plugins { to.Plugins[k] = v }`): the drop-in's
`[plugins."io.containerd.grpc.v1.cri"]` table replaced config.toml's, and with it runc's
`SystemdCgroup = true` (node-config-review M4). This merges the role's two rendered files the way
containerd 1.7 does and reads the runtimes a pod gets.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).resolve().parents[2] / "playbooks/roles/container_runtime/templates"


def _render(name: str) -> dict:
    return tomllib.loads(jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(
        (TEMPLATES / name).read_text()).render())


def _merge_1_7(base: dict, imported: dict) -> dict:
    merged = dict(base)
    merged["plugins"] = dict(base.get("plugins", {})) | imported.get("plugins", {})  # a plugin's table whole
    return merged


def test_runc_keeps_the_systemd_cgroup_driver_after_the_nvidia_drop_in():
    config = _merge_1_7(_render("config.toml.j2"), _render("nvidia-runtime.toml.j2"))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    runtimes = cri["containerd"]["runtimes"]
    assert runtimes["runc"]["options"]["SystemdCgroup"] is True
    assert runtimes["nvidia"]["options"]["SystemdCgroup"] is True
    assert cri["containerd"]["default_runtime_name"] == "nvidia" and cri["enable_cdi"] is True
