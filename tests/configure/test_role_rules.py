"""Rules every role follows, read from the role files themselves.

Why each: a pinned apt install on a long-lived node asks for a version its lists (refreshed only
when a source file changed) have never seen: "No package matching ... is available" on the first
BOM bump (node-config-review M2). So every apt task that installs a pinned version (name=version)
refreshes lists older than an hour.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[2] / "playbooks" / "roles"
# the roles a GPU or Slurm node runs (site.yml), whose pins move with every BOM
NODE_ROLES = ("nvidia_driver", "nccl_tuning", "container_runtime", "lustre_client", "dcgm", "slurm",
              "monitoring_exporters")


def _tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always"):
            yield from _tasks(node.get(key, []))


def _pinned_apt_installs():
    for path in sorted(p for role in NODE_ROLES for p in (ROLES / role / "tasks").glob("*.yml")):
        for task in _tasks(yaml.safe_load(path.read_text()) or []):
            apt = task.get("ansible.builtin.apt")
            if isinstance(apt, dict) and "name" in apt and ("=" in str(apt["name"]) or "apt_packages" in str(apt["name"])):
                yield f"{path.relative_to(ROLES)}: {task.get('name')}", apt


PINNED = list(_pinned_apt_installs())


def test_the_roles_have_pinned_apt_installs():
    assert len(PINNED) >= 4  # driver, NCCL, containerd/toolkit, Lustre: the rule below reads real tasks


@pytest.mark.parametrize("where, apt", PINNED, ids=[w for w, _ in PINNED])
def test_every_pinned_apt_install_refreshes_stale_lists(where, apt):
    assert apt.get("update_cache") is True and int(apt.get("cache_valid_time", 0)) <= 3600, where
