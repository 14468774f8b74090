"""The Pulumi Automation API driver's reimage against the fake `PulumiCommand` of the provisioner
tests: the exact argv (one path-aware `config set-all` of the slots' overrides, one `up --target`
on their URNs), the config it leaves, the new instance read back from the state; a slot already
on the image is neither set nor targeted again; a bad AMI id or an update that leaves a slot on
its old image is an error naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.daytwo.reimage import Reimager
from gpufleet.errors import ConfigError, ProvisioningError
from gpufleet.rollout.pulumi_provisioner import slot_ami_key
from tests.rollout.test_pulumi_provisioner import (AFTER_UP, BATCH1, EXPORT, STACK, FakePulumi, _argv,
                                                   _provisioner)

EVENTS = Path(__file__).parent / "fixtures" / "pulumi_events"
OLD, NEW = "ami-0aaaaaaaaaaaaaaa1", "ami-0bbbbbbbbbbbbbbb2"
SLOT = BATCH1[1]  # gpu-b0000-n00001


class ReimagingPulumi(FakePulumi):
    """The provisioner tests' fake `pulumi`, plus `config set-all` (kept like `config set`)."""

    def _answer(self, a: list[str]) -> tuple[str, str, int]:
        if a[:2] == ["config", "set-all"]:
            for i, arg in enumerate(a):
                if a[i - 1] == "--plaintext":
                    key, value = arg.split("=", 1)
                    self.config[key] = value
            return "", "", 0
        return super()._answer(a)


def _deployed(ups) -> ReimagingPulumi:
    """Batch 1 deployed from OLD; `ups` replay the updates after that."""
    fake = ReimagingPulumi([(str(EVENTS / f) if f else None, code, err) for f, code, err in ups])
    fake.seed("up-batch1-created.jsonl")
    for r in fake.resources.values():
        r["outputs"]["ami"] = r["inputs"]["ami"] = OLD
    return fake


def test_it_sets_the_slots_override_path_aware_and_runs_up_targeting_only_them(tmp_path):
    fake = _deployed([("up-reimage-n00001.jsonl", 0, "")])
    p, _ = _provisioner(fake, tmp_path)
    assert isinstance(p, Reimager) and p.images() == {"gpu-b0000-n00000": OLD, "gpu-b0000-n00001": OLD}
    fake.calls.clear()
    result = p.reimage([SLOT], NEW)
    urn = p.instance_urn(SLOT.name)
    assert _argv(fake.calls) == [
        EXPORT,
        ["config", "set-all", "--stack", STACK, "--path", "--plaintext",
         f'gpufleet:image.slotAmis["gpu-b0000-n00001"]={NEW}'],
        ["up", "--yes", "--skip-preview", "--target", urn, "--color", "never", "--suppress-progress",
         "--continue-on-error", "--exec-kind", "auto.local", "--event-log", "<log>", "--stack", STACK],
        *AFTER_UP, EXPORT]
    assert fake.config == {slot_ami_key(SLOT.name): NEW}
    new = result.instances[SLOT.name]
    assert (new.slot, new.instance_id, new.private_ip) == (SLOT.name, "i-0c4d5e6f7a8b90311", "10.0.0.12")
    assert p.images() == {"gpu-b0000-n00000": OLD, "gpu-b0000-n00001": NEW}  # the other slot untouched


def test_a_slot_already_on_the_image_is_neither_set_nor_targeted_again(tmp_path):
    fake = _deployed([("up-reimage-n00001.jsonl", 0, ""), (None, 0, "")])
    p, _ = _provisioner(fake, tmp_path)
    p.reimage([SLOT], NEW)
    fake.calls.clear()
    with pytest.raises(ProvisioningError):  # the second update (scripted to change nothing) leaves it on NEW
        p.reimage(BATCH1, OLD)  # n00000 is on OLD already: only n00001 is set and targeted
    set_all, up = [c for c in fake.calls if c[0] != "stack"]
    assert set_all[-2:] == ["--plaintext", f'gpufleet:image.slotAmis["gpu-b0000-n00001"]={OLD}']
    assert up[up.index("--target") + 1] == p.instance_urn(SLOT.name) and up.count("--target") == 1


def test_a_repeated_call_after_the_update_only_reads_the_state(tmp_path):
    fake = _deployed([("up-reimage-n00001.jsonl", 0, "")])
    p, _ = _provisioner(fake, tmp_path)
    first = p.reimage([SLOT], NEW)
    fake.calls.clear()
    again = p.reimage([SLOT], NEW)  # a resumed upgrade asking again
    assert _argv(fake.calls) == [EXPORT] and again.instances == first.instances and again.duration_s == 0.0


def test_an_update_that_leaves_the_slot_on_its_old_image_is_an_error_naming_it(tmp_path):
    fake = _deployed([(None, 0, "")])  # the update ran and changed nothing
    p, _ = _provisioner(fake, tmp_path)
    with pytest.raises(ProvisioningError, match=r"1 slot\(s\) not on ami-0bbbbbbbbbbbbbbb2.*gpu-b0000-n00001") as err:
        p.reimage([SLOT], NEW)
    assert err.value.slots == (SLOT.name,) and not err.value.retryable


def test_a_malformed_ami_is_refused_before_any_pulumi_call(tmp_path):
    fake = _deployed([])
    p, _ = _provisioner(fake, tmp_path)
    fake.calls.clear()
    with pytest.raises(ConfigError, match="not an AMI id") as err:
        p.reimage([SLOT], "ami-XYZ")
    assert err.value.field == "gpufleet:image.slotAmis" and fake.calls == []
