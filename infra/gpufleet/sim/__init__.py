"""The embedded simulated cloud and fleet behind the `local` stacks: real plan, real Pulumi program
under mocks, node outputs in the real tools' formats, a fabric model and a virtual clock.

One entry point::

    cloud = SimulatedCloud.open(spec, plan, project, stack)   # opens or resumes <state_dir>/sim/
    cloud.provisioner   # gpufleet.ports.Provisioner: provision(batch, slots), replace(slot, action), inventory()
    cloud.executor      # gpufleet.ports.Executor: configure, preflight (bundles under dest/<slot>/), remediate
    cloud.launcher      # gpufleet.pool.protocol.Launcher: run(specs, timeout_s) -> nccl-tests output per spec
    cloud.ledger        # what the cloud did (launch/stop/terminate/shortfall), fsync'd JSONL, sim/ledger.jsonl
    cloud.clock         # VirtualClock: now(); the rollout advances it by the modelled durations
    cloud.truth()       # the seeded ground truth: faulty slots with expected reason codes, bad links as pairs
    cloud.node_outputs(slot)  # a node's raw tool outputs (file -> (output, rc)) for stub tools on real hosts

The simulator never decides: the real parsers and gates judge what it renders. Its state (the
ledger, the remediations applied, the captured program) survives a killed process; reopening
with the same spec gives the same fleet, faults and answers.
"""

from gpufleet.sim.cloud import SimulatedCloud
from gpufleet.sim.fleet import NodeProfile
from gpufleet.sim.clock import EPOCH, VirtualClock
from gpufleet.sim.faults import EFFECTS, FaultEffect, SlotTruth, Truth

__all__ = ["SimulatedCloud", "NodeProfile", "VirtualClock", "EPOCH", "Truth", "SlotTruth", "FaultEffect", "EFFECTS"]
