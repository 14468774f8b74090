"""The cloud layer's pure parts: engine steps folded per resource, secrets masked at any depth,
detailedDiff paths, and security-group rules normalized across the state's and EC2's shapes."""

from __future__ import annotations

from gpufleet.reports import drift_cloud as dc

URN = "urn:pulumi:gpu::gpufleet::gpufleet:compute:Compute$aws:ec2/instance:Instance::gpu-b0000-n00000"
SIG = dc.SECRET_SIG_KEY


def test_a_replacements_three_steps_are_one_replace_with_its_fields():
    old = {"ami": "ami-1", "tags": {"gpufleet.io/slot": "gpu-b0000-n00000"}}
    new = {"ami": "ami-2", "tags": {"gpufleet.io/slot": "gpu-b0000-n00000"}}
    steps = [dc.StepView(op, URN, dc.INSTANCE_TYPE, detailed={"ami": ("update-replace", True)}, old_inputs=old,
                         new_inputs=new) for op in ("create-replacement", "replace", "delete-replaced")]
    [change] = dc.resource_changes(steps, refresh=False)
    assert change.op == "replace" and change.name == "gpu-b0000-n00000"
    assert change.fields == (dc.FieldChange("ami", "update-replace", "ami-1", "ami-2"),)
    [f] = dc.change_findings([change], refresh=False)
    assert (f.expected, f.found, f.severity.value) == ("ami-2", "ami-1", "critical")  # code is the expectation
    assert "would replace it" in f.message


def test_same_and_read_steps_and_the_stack_are_no_change():
    steps = [dc.StepView("same", URN, dc.INSTANCE_TYPE), dc.StepView("read", URN, dc.INSTANCE_TYPE),
             dc.StepView("update", "urn:pulumi:gpu::gpufleet::pulumi:pulumi:Stack::gpufleet-gpu", dc.STACK_TYPE,
                         diffs=("outputs",)),
             dc.StepView("refresh", URN, dc.INSTANCE_TYPE)]  # a refresh with no diff: the cloud agrees
    assert dc.resource_changes(steps, refresh=False) == [] and dc.resource_changes(steps, refresh=True) == []


def test_secrets_are_masked_at_any_depth_and_never_shown():
    secret = {SIG: "1b47061264138c4ac30d75fd1eb44270", "plaintext": '"canary-9d1e"'}
    assert dc.mask({"a": [1, {"b": secret}], "c": "[secret]"}) == {"a": [1, {"b": "[secret]"}], "c": "[secret]"}
    doc = {"env": {"vars": secret}, "list": [{"k": "v"}]}
    assert dc.value_at(doc, "env.vars.TOKEN") == "[secret]"  # below a secret container: the container's mark
    step = dc.StepView("update", URN, dc.INSTANCE_TYPE, detailed={"env": ("update", True)},
                       old_inputs={"env": {"vars": {"A": "1"}}}, new_inputs=doc)
    [change] = dc.resource_changes([step], refresh=False)
    assert change.fields[0].old == "[secret]" and change.fields[0].new == "[secret]"  # either side secret: both hidden
    assert "canary" not in repr(change)


def test_detailed_diff_paths_and_long_values():
    assert dc.path_tokens('tags["gpufleet.io/slot"]') == ["tags", "gpufleet.io/slot"]
    assert dc.path_tokens("ingress[0].cidrBlocks[1]") == ["ingress", 0, "cidrBlocks", 1]
    doc = {"ingress": [{"cidrBlocks": ["10.0.0.0/16", "0.0.0.0/0"]}], "tags": {"gpufleet.io/slot": "s"}}
    assert dc.value_at(doc, "ingress[0].cidrBlocks[1]") == "0.0.0.0/0"
    assert dc.value_at(doc, 'tags["gpufleet.io/slot"]') == "s"
    assert dc.show(dc.value_at(doc, "ingress[3]")) is None
    long = dc.show("x" * 500)
    assert long is not None and len(long) == dc.MAX_VALUE_CHARS and long.endswith("...")


def test_rules_normalize_across_the_state_and_ec2():
    sg = "sg-0abc"
    state = {"deployment": {"resources": [
        {"type": dc.SG_TYPE, "id": sg, "urn": "urn:x::gpu-node", "outputs": {
            "ingress": [{"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["10.1.0.0/24"]}],
            "egress": [{"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True}]}},
        {"type": dc.VPC_INGRESS_TYPE, "id": "sgr-1", "urn": "urn:x::r1", "outputs": {
            "securityGroupId": sg, "ipProtocol": "6", "fromPort": 988, "toPort": 988,
            "referencedSecurityGroupId": "sg-0fsx"}},
        {"type": dc.SG_RULE_TYPE, "id": "sgrule-2", "urn": "urn:x::r2", "outputs": {
            "type": "egress", "securityGroupId": sg, "protocol": "udp", "fromPort": 53, "toPort": 53,
            "cidrBlocks": ["10.0.0.2/32"]}},
        {"type": dc.SG_TYPE, "id": "sg-gone", "urn": "urn:x::old", "outputs": {"ingress": [], "egress": []},
         "delete": True},
    ]}}
    view = dc.state_view(state)
    assert list(view.security_groups) == [sg]  # a resource pending deletion is not the state
    ec2 = {"GroupId": sg, "IpPermissions": [
        {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "10.1.0.0/24"}]},
        {"IpProtocol": "tcp", "FromPort": 988, "ToPort": 988, "UserIdGroupPairs": [{"GroupId": "sg-0fsx"}]}],
        "IpPermissionsEgress": [
        {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": sg}]},
        {"IpProtocol": "udp", "FromPort": 53, "ToPort": 53, "IpRanges": [{"CidrIp": "10.0.0.2/32"}]}]}
    assert dc.ec2_rules(ec2) == view.security_groups[sg]
    scan = dc.CloudScan(instances={}, rules={sg: dc.ec2_rules(ec2)[1:]}, templates={}, reservations=())
    [missing] = dc.rule_findings(view, scan)
    assert (missing.check, missing.expected) == (dc.SG_MISSING, "egress all traffic all ports to sg-0abc")
