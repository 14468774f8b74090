"""A ValidatingAdmissionPolicy that makes every Job in a queue's namespace go through Kueue the way
the stack says: through that namespace's LocalQueue, at the partition's priority, within its run time.

Why a policy on the Jobs and not only Kueue's `manageJobsWithoutQueueName`: Kueue then suspends an
unlabelled Job and it waits forever with no word to its author; refusing it at `kubectl apply`
says what to add. Why the namespace's labels carry the rules (`gpufleet.io/priority-class`,
`gpufleet.io/max-exec-time-seconds`, written by `queues.namespace`): one policy serves every
queue, and a team cannot change them (its Role grants nothing on namespaces).
Why refuse rather than default the priority class: a MutatingAdmissionPolicy is alpha in
Kubernetes 1.33 (the stack's default; EKS serves no alpha APIs) and Kueue v0.19.2 has no
per-LocalQueue default class, so the only enforceable default is the refusal that names it.
The labels are on the object's own metadata for every kind Kueue manages here (Job, MPIJob), so one
rule set covers both. The patrol's class (`gpufleet-patrol`, the lowest) is the one other class a Job
may name, and only in an operators' namespace (no `gpufleet.io/team` label; teams have no RBAC
there): the patrol's hold Jobs go there (`patrol_job`), and no team can take a node at that class. CREATE and UPDATE: a label removed later would take the Job out of its queue.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from gpufleet.pool.kubernetes.chart_values import KUEUE_FRAMEWORKS
from gpufleet.pool.kubernetes.manifests import MANAGED_BY
from gpufleet.pool.kubernetes.queues import (KUEUE_MANAGED_LABEL, MAX_EXEC_LABEL, MAX_EXEC_NAMESPACE_LABEL,
                                             PATROL_PRIORITY_CLASS, PRIORITY_LABEL, PRIORITY_NAMESPACE_LABEL,
                                             QUEUE_LABEL, TEAM_NAMESPACE_LABEL)

POLICY = "gpufleet-submit-through-queues"
# the API versions of the kinds in KUEUE_FRAMEWORKS (Kueue's framework names are <group>/<kind>)
FRAMEWORK_RESOURCES = {"batch/job": ("batch", "v1", "jobs"), "kubeflow.org/mpijob": ("kubeflow.org", "v2beta1", "mpijobs")}


def _lit(text: str) -> str:
    return json.dumps(text)


def variables() -> list[dict[str, str]]:
    labels = "object.metadata.labels"
    ns = "namespaceObject.metadata.labels"

    def label(where: str, key: str) -> str:
        return f"has({where}) && {_lit(key)} in {where} ? {where}[{_lit(key)}] : \"\""
    return [{"name": "queue", "expression": label(labels, QUEUE_LABEL)},
            {"name": "priorityClass", "expression": label(labels, PRIORITY_LABEL)},
            {"name": "maxExec", "expression": label(labels, MAX_EXEC_LABEL)},
            {"name": "wantClass", "expression": label(ns, PRIORITY_NAMESPACE_LABEL)},
            {"name": "capExec", "expression": label(ns, MAX_EXEC_NAMESPACE_LABEL)},
            {"name": "team", "expression": label(ns, TEAM_NAMESPACE_LABEL)}]


def validations() -> list[dict[str, str]]:
    ns_name = "namespaceObject.metadata.name"
    return [
        {"expression": f"variables.queue == {ns_name}",
         "messageExpression": f"{_lit('submit through this namespace' + chr(39) + 's LocalQueue: label the job ')} + "
                              f"{_lit(QUEUE_LABEL + '=')} + {ns_name} + "
                              f"(variables.queue == \"\" ? {_lit(' (it has no queue label)')} : "
                              f"{_lit(' (it names ')} + variables.queue + {_lit(')')})",
         "reason": "Forbidden"},
        {"expression": "variables.wantClass == \"\" || variables.priorityClass == variables.wantClass || "
                       f"(variables.priorityClass == {_lit(PATROL_PRIORITY_CLASS)} && variables.team == \"\")",
         "messageExpression": f"{_lit('jobs here run at their partition' + chr(39) + 's priority: label the job ')} + "
                              f"{_lit(PRIORITY_LABEL + '=')} + variables.wantClass",
         "reason": "Forbidden"},
        {"expression": "variables.capExec == \"\" || (variables.maxExec.matches('^[1-9][0-9]{0,8}$') && "
                       "int(variables.maxExec) <= int(variables.capExec))",
         "messageExpression": f"{_lit('jobs here have a run-time limit: label the job ')} + "
                              f"{_lit(MAX_EXEC_LABEL + '=<seconds>')} + {_lit(', at most ')} + variables.capExec",
         "reason": "Forbidden"},
    ]


def submission_policy(frameworks: Sequence[str] = KUEUE_FRAMEWORKS) -> list[dict[str, Any]]:
    """The policy and its binding to every namespace Kueue manages (`gpufleet.io/kueue-managed`)."""
    rules = [{"apiGroups": [group], "apiVersions": [version], "operations": ["CREATE", "UPDATE"], "resources": [res]}
             for group, version, res in (FRAMEWORK_RESOURCES[f] for f in frameworks)]
    policy = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
              "metadata": {"name": POLICY, "labels": dict(MANAGED_BY)},
              "spec": {"failurePolicy": "Fail",
                       "matchConstraints": {"matchPolicy": "Equivalent", "resourceRules": rules},
                       "variables": variables(), "validations": validations()}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": POLICY, "labels": dict(MANAGED_BY)},
               "spec": {"policyName": POLICY, "validationActions": ["Deny"],
                        "matchResources": {"namespaceSelector": {"matchLabels": {KUEUE_MANAGED_LABEL: "true"}}}}}
    return [policy, binding]
