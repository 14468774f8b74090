"""The image_prepull role for real (ansible-playbook on localhost) against a stand-in `docker`
CLI that keeps pulled images in a folder: the first run pulls, the second pulls nothing, check
mode pulls nothing, a tag without a digest is refused; the preflight part adds the two bundle
commands, whose output (run as preflight.yml runs them) the real image gate passes, and fails
with `image-missing` once the image is gone."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.gates import bundle as B
from gpufleet.gates.bundle import Bundle, FileRecord, Manifest, read_bundle, write_bundle
from gpufleet.gates.checks.container import check_workload_image
from gpufleet.gates.checks.evidence import NodeEvidence
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import Verdict

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # real ansible-playbook runs, ~25 s each
BIN = Path(sys.executable).parent
IMAGE = "public.ecr.aws/hpc-cloud/nccl-tests@sha256:" + "5e" * 32

FAKE_DOCKER = r"""#!/bin/sh
# a stand-in for the docker CLI: each pulled image is a file holding its `docker images
# --format '{{json .}}'` line (docker 24's fields), named after its reference
store="{store}"; echo "$*" >> "{log}"
file() {{ echo "$store/$(echo "$1" | tr '/:@' '___')"; }}
case "$1" in
  image) [ -f "$(file "$3")" ] && exit 0; echo "Error: No such image: $3" >&2; exit 1 ;;
  pull) mkdir -p "$store"; repo="${{2%@*}}"; digest="${{2#*@}}"
        printf '{{"Containers":"N/A","CreatedAt":"2025-06-02 10:11:12 +0000 UTC","CreatedSince":"5 months ago",''"Digest":"%s","ID":"sha256:%s","Repository":"%s","SharedSize":"N/A","Size":"9.88GB","Tag":"<none>",''"UniqueSize":"N/A","VirtualSize":"9.876GB"}}
' "$digest" "$(echo "$digest" | cut -c8- | rev)" "$repo" > "$(file "$2")"
        echo "pulled $2" ;;
  images) cat "$store"/* 2>/dev/null; exit 0 ;;
  run) [ -f "$(file "$6")" ] || {{ echo "docker: Error response from daemon: No such image: $6." >&2; exit 125; }}
       for i in 0 1 2 3 4 5 6 7; do echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-0000000$i-aaaa-bbbb-cccc-dddddddddddd)"; done ;;
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


def _collect(setup: Path, commands: list[dict]) -> Bundle:
    """Run the preflight's image commands as preflight.yml does (output and rc per file)."""
    files, records = {}, {}
    for c in commands[1:]:
        proc = subprocess.run(["bash", "-c", f"timeout {c['timeout']} bash -c {shlex.quote(c['cmd'])} 2>&1"],
                              capture_output=True, text=True, env=dict(os.environ, PATH=f"{setup / 'bin'}{os.pathsep}"
                                                                                           f"{os.environ['PATH']}"))
        files[c["name"]] = proc.stdout
        records[c["name"]] = FileRecord(command=c["cmd"], exit_code=proc.returncode)
    return read_bundle(write_bundle(setup / "bundle", files, Manifest(slot="n1", files=records)))


def test_preflight_evidence_goes_through_the_real_gate(setup):
    proc = _run(setup, IMAGE)
    assert proc.returncode == 0, proc.stdout[-3000:]
    commands = json.loads((setup / "commands.json").read_text())
    assert [c["name"] for c in commands] == ["existing.txt", B.IMAGE_LIST, B.IMAGE_GPUS]
    assert "--pull=never" in commands[2]["cmd"]  # the probe must not pull what the pre-pull missed
    settings = GateSettings(workload_image=IMAGE)
    ok = check_workload_image(NodeEvidence(_collect(setup, commands)), settings)
    assert [(c.check_id, c.verdict) for c in ok] == [("image.present", Verdict.PASS), ("image.gpus", Verdict.PASS)]
    assert ok[0].measured.startswith("docker: public.ecr.aws/hpc-cloud/nccl-tests@sha256:")
    for pulled in (setup / "images").iterdir():  # the node loses the image
        pulled.unlink()
    gone = check_workload_image(NodeEvidence(_collect(setup, commands)), settings)
    assert [c.reason_code for c in gone] == ["image-missing", "image-gpus-not-visible"]
    assert "No such image" in gone[1].measured
