"""The image_prepull role for real (ansible-playbook on localhost) against a stand-in `docker`
CLI that keeps pulled images in a folder: the first run pulls, the second pulls nothing, check
mode pulls nothing, a tag without a digest is refused; the preflight part adds the two bundle
commands that image_checks reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
IMAGE = "public.ecr.aws/hpc-cloud/nccl-tests@sha256:" + "5e" * 32

FAKE_DOCKER = """#!/bin/sh
# a stand-in for the docker CLI: images are files named after their reference
store="{store}"; echo "$*" >> "{log}"
case "$1 $2" in
  "image inspect") ref="$3"; [ "$3" = "--format" ] && ref="$5"; f="$store/$(echo "$ref" | tr '/:@' '___')"
                   [ -f "$f" ] && {{ echo "$ref"; exit 0; }}; echo "Error: No such image: $ref" >&2; exit 1 ;;
  "pull "*) mkdir -p "$store"; touch "$store/$(echo "$2" | tr '/:@' '___')"; echo "pulled $2" ;;
  *) exit 2 ;;
esac
"""

PLAY = """---
- name: Pre-pull
  hosts: localhost
  gather_facts: false
  roles:
    - role: image_prepull
- name: Preflight commands
  hosts: localhost
  gather_facts: false
  vars:
    gpufleet_commands: [{{name: existing.txt, timeout: 5, cmd: "true"}}]
  tasks:
    - name: Add the image checks
      ansible.builtin.include_role: {{name: image_prepull, tasks_from: preflight}}
    - name: Show the command list
      ansible.builtin.copy:
        dest: "{out}"
        content: "{{{{ gpufleet_commands | to_json }}}}"
        mode: "0644"
"""


def _run(tmp_path: Path, image: str, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}{os.pathsep}{BIN}{os.pathsep}{os.environ['PATH']}",
               ANSIBLE_ROLES_PATH=str(ROOT / "playbooks" / "roles"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(tmp_path / "play.yml"),
                           "-e", json.dumps({"image_prepull_image": image, "image_prepull_runtime": "docker",
                                             "ansible_python_interpreter": sys.executable}), *extra],
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def setup(tmp_path: Path) -> Path:
    (tmp_path / "bin").mkdir()
    docker = tmp_path / "bin" / "docker"
    docker.write_text(FAKE_DOCKER.format(store=tmp_path / "images", log=tmp_path / "docker.log"))
    docker.chmod(0o755)
    (tmp_path / "play.yml").write_text(PLAY.format(out=tmp_path / "commands.json"))
    return tmp_path


def _pulls(tmp_path: Path) -> int:
    log = tmp_path / "docker.log"
    return sum(1 for line in log.read_text().splitlines() if line.startswith("pull ")) if log.exists() else 0


def _changed(proc: subprocess.CompletedProcess) -> int:
    recap = [line for line in proc.stdout.splitlines() if line.startswith("localhost")][-1]
    return int(recap.split("changed=")[1].split()[0])


def test_pulls_once_and_is_idempotent(setup):
    first = _run(setup, IMAGE)
    assert first.returncode == 0, first.stdout[-3000:]
    assert _pulls(setup) == 1 and _changed(first) == 2  # the pull and the preflight list file
    second = _run(setup, IMAGE)
    assert second.returncode == 0 and _pulls(setup) == 1 and _changed(second) == 0


def test_check_mode_pulls_nothing(setup):
    proc = _run(setup, IMAGE, "--check", "--diff")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert _pulls(setup) == 0


def test_a_tag_without_a_digest_is_refused(setup):
    proc = _run(setup, "public.ecr.aws/hpc-cloud/nccl-tests:latest")
    assert proc.returncode != 0 and "repo@sha256" in proc.stdout
    assert _pulls(setup) == 0


def test_preflight_adds_the_image_bundle_commands(setup):
    proc = _run(setup, IMAGE)
    assert proc.returncode == 0, proc.stdout[-3000:]
    commands = json.loads((setup / "commands.json").read_text())
    assert [c["name"] for c in commands] == ["existing.txt", "image-present.txt", "image-gpus.txt"]
    assert IMAGE in commands[2]["cmd"] and "--gpus all" in commands[2]["cmd"]
    present = subprocess.run(["bash", "-c", commands[1]["cmd"]], capture_output=True, text=True,
                             env=dict(os.environ, PATH=f"{setup / 'bin'}{os.pathsep}{os.environ['PATH']}"))
    assert IMAGE in present.stdout  # what image_checks looks for: the digest in image-present.txt
