"""The pure parts of a reimage upgrade: which method and image an upgrade uses, which slots it
reimages, and how the journal folds a reimage (an intent, then its result, only at the stages
where one may happen)."""

from __future__ import annotations

import pytest

from gpufleet.daytwo.reimage import stale_images, target_image, unknown_images
from gpufleet.daytwo.state import DayTwoState, DayTwoTransitionError, apply
from gpufleet.errors import ConfigError
from gpufleet.spec import load_stack

AMI = "ami-0123456789abcdef0"


def _spec(method: str, ami: str | None):
    spec = load_stack("dev")
    image = spec.image.model_copy(update={"ami_id": ami})
    return spec.model_copy(update={"image": image, "upgrade": spec.upgrade.model_copy(update={"method": method})})


@pytest.mark.parametrize("method, ami, want", [("auto", AMI, AMI), ("auto", None, None), ("inplace", AMI, None),
                                               ("reimage", AMI, AMI)])
def test_the_target_image_is_the_pinned_ami_unless_the_method_is_inplace(method, ami, want):
    assert target_image(_spec(method, ami)) == want


def test_reimage_without_a_pinned_ami_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match="pinned") as err:
        target_image(_spec("reimage", None))
    assert err.value.field == "gpufleet:image.amiId"


def test_stale_and_unknown_images():
    images = {"a": AMI, "b": "ami-00000000000000001", "c": None}
    assert stale_images(["a", "b", "c", "d"], images, AMI) == ["b", "c", "d"]
    assert unknown_images(["b", "c", "d"], images) == ["c", "d"]


def _state():
    state = DayTwoState()
    apply(state, {"type": "upgrade", "to": "started", "target_digest": "sha256:b", "target_bom": "b.yaml",
                  "previous": {}, "method": "reimage", "target_ami": AMI,
                  "groups": [{"number": 1, "blocks": [0], "slots": ["s1", "s2"]}]})
    return state


def _to(state, to, **e):
    apply(state, {"type": "upgrade", "to": to, "group": 1, **e})


def test_a_reimage_folds_as_intent_then_result_inside_the_drained_stage():
    state = _state()
    assert (state.upgrade.method, state.upgrade.target_ami) == ("reimage", AMI)
    _to(state, "group-started", previous={"s1": {"ami": "ami-00000000000000001"}})
    with pytest.raises(DayTwoTransitionError, match="while started"):  # not before the group is drained
        _to(state, "reimage-requested", purpose="upgrade", ami=AMI, slots=["s1"])
    _to(state, "group-drained")
    with pytest.raises(DayTwoTransitionError, match="without a request"):
        _to(state, "reimaged", purpose="upgrade", ami=AMI, instances={"s1": "i-1"})
    _to(state, "reimage-requested", purpose="upgrade", ami=AMI, slots=["s1"], **{"from": {"s1": "i-0"}})
    with pytest.raises(DayTwoTransitionError, match="requested already"):  # a resumed upgrade never asks twice
        _to(state, "reimage-requested", purpose="upgrade", ami=AMI, slots=["s1"])
    g = state.upgrade.groups[1]
    assert g.stage == "drained" and g.reimage_requested("upgrade", AMI) and not g.reimaged("upgrade", AMI)
    assert g.reimages["upgrade:" + AMI]["from"] == {"s1": "i-0"}
    _to(state, "reimaged", purpose="upgrade", ami=AMI, instances={"s1": "i-1"}, seconds=90)
    assert g.reimaged("upgrade", AMI) and g.reimaged_slots() == {"s1"} and g.seconds == 90
    with pytest.raises(DayTwoTransitionError, match="rollback reimage while drained"):
        _to(state, "reimage-requested", purpose="rollback", ami="ami-00000000000000001", slots=["s1"])
    _to(state, "group-gated", result="fail", reason="busbw")
    _to(state, "reimage-requested", purpose="rollback", ami="ami-00000000000000001", slots=["s1"])
    _to(state, "reimaged", purpose="rollback", ami="ami-00000000000000001", instances={"s1": "i-2"})
    assert g.reimaged("rollback", "ami-00000000000000001") and g.stage == "gated"
