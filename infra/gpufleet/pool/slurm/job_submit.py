"""job_submit.lua generated from the plan: slurmctld itself holds every job to whole units inside blocks.

Why a job_submit plugin: `--switches=1` is a request the caller may forget, and without a wait
Slurm gives up after `max_switch_wait` (300 s by default) and spreads the job across blocks. The
plugin runs inside slurmctld for every allocation (sbatch, salloc, srun outside a job), so no
client can skip it: in a unit partition it refuses a shape that is not whole units (the message
names the unit size and the shape to ask), and for a job that fits one block it forces one leaf
switch (`topology/tree`) with a wait of `SWITCH_WAIT_S` (slurm.conf raises `max_switch_wait` to
the same), so the job waits for a whole block rather than ever starting across two. A job of
several blocks gets exactly as many switches as blocks, so it takes whole blocks.

Exempt: gpufleet's own gate runs, which use a `gpufleet-*` maintenance reservation on pending
nodes (`gpufleet.pool.slurm.adapter.SlurmLauncher`) and test nodes, not units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from gpufleet.plan.model import ClusterPlan
from gpufleet.pool.slurm.nodes import GATES_PARTITION

SWITCH_WAIT_S = 365 * 24 * 3600  # a year: effectively unbounded, and a number Slurm's uint32 holds
GATE_RESERVATION_PREFIX = "gpufleet-"


@dataclass(frozen=True)
class UnitShape:
    """What one job of `units` whole units asks: nodes, GPUs and leaf switches (blocks)."""

    units: int
    nodes: int
    gpus: int
    switches: int


def nodes_for_units(plan: ClusterPlan, units: int) -> int:
    """Nodes the first `units` units of a block span (units are packed from the block's start)."""
    t = plan.topology
    whole, rest = divmod(units, t.units_per_block)
    return whole * t.nodes_per_block + math.ceil(rest * t.unit_gpus / t.gpus_per_node)


def unit_shape(plan: ClusterPlan, units: int) -> UnitShape | None:
    """The only shape `units` units may take, or None when they cannot be whole blocks (more than a
    block's units that are not a multiple of it: under tree topology Slurm cannot keep a partial
    block's units packed)."""
    t = plan.topology
    if units < 1:
        return None
    if units <= t.units_per_block:
        return UnitShape(units=units, nodes=nodes_for_units(plan, units), gpus=units * t.unit_gpus, switches=1)
    if units % t.units_per_block:
        return None
    blocks = units // t.units_per_block
    return UnitShape(units=units, nodes=blocks * t.nodes_per_block, gpus=units * t.unit_gpus, switches=blocks)


def _lua_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def job_submit_lua(plan: ClusterPlan, kind: str, team_qos: Mapping[tuple[str, str], str] | None = None,
                   patrol_qos: str | None = None) -> str:
    """The plugin's source for this plan; `kind` is the topology plugin ("tree" or "block");
    `team_qos`: (account, partition) -> the QOS a job there gets when it names none (the team's
    QOS for that partition, which the partition's AllowQos lets in). `patrol_qos`: the patrol's hold
    QOS (with accounting only: slurmdbd's associations keep it to the patrol's account), let through
    whole: a hold is one idle node asking no GPUs."""
    qos_rows = ", ".join(f"[{_lua_str(a + ':' + p)}] = {_lua_str(q)}" for (a, p), q in sorted((team_qos or {}).items()))
    t = plan.topology
    partitions = [p.name for p in plan.partitions if p.blocks] or ["all"]
    default = partitions[0]
    nodes_for = ", ".join(f"[{u}] = {nodes_for_units(plan, u)}" for u in range(1, t.units_per_block + 1))
    return f"""-- gpufleet: generated from the plan; do not edit by hand (gpufleet.pool.slurm.job_submit)
-- Every job in a unit partition is whole units of {t.unit_gpus} GPUs inside whole blocks of
-- {t.nodes_per_block} nodes ({t.units_per_block} units a block); one that fits a block waits for one.
local UNIT_GPUS = {t.unit_gpus}
local GPUS_PER_NODE = {t.gpus_per_node}
local UNITS_PER_BLOCK = {t.units_per_block}
local NODES_PER_BLOCK = {t.nodes_per_block}
local NODES_FOR_UNITS = {{ {nodes_for} }}
local SWITCH_WAIT = {SWITCH_WAIT_S}
local TREE = {'true' if kind == 'tree' else 'false'}
local DEFAULT_PARTITION = {_lua_str(default)}
local UNIT_PARTITIONS = {{ {', '.join(f'[{_lua_str(p)}] = true' for p in partitions)} }}
local TEAM_QOS = {{ {qos_rows} }}
-- the patrol's holds: one idle node each, no GPUs asked (--exclusive holds the node), preempted by any job
local PATROL_QOS = {_lua_str(patrol_qos) if patrol_qos else 'nil'}
local GATE_RESERVATION = {_lua_str('^' + GATE_RESERVATION_PREFIX.replace('-', '%-'))}
local GATES_PARTITION = {_lua_str(GATES_PARTITION)}

local NO_VAL, NO_VAL16 = 4294967294, 65534  -- Slurm's "not given" for 32- and 16-bit fields

local function unset(v)
  return v == nil or v == NO_VAL or v == NO_VAL16 or v == 0
end

-- GPUs in a TRES string: "gres:gpu:20", "gres/gpu:h100:8", "gpu:8"; nil when none is named
local function gpus_in(tres)
  if tres == nil then return nil end
  for item in string.gmatch(tres, "[^,]+") do
    if string.find(item, "gpu") then
      return tonumber(string.match(item, ":(%d+)$") or "1")
    end
  end
  return nil
end

local function expected(units)
  local n = NODES_FOR_UNITS[units]
  if n ~= nil then return n, 1 end
  if units % UNITS_PER_BLOCK == 0 then
    local blocks = units / UNITS_PER_BLOCK
    return blocks * NODES_PER_BLOCK, blocks
  end
  return nil, nil
end

local function how(partition)
  return "gpufleet: partition " .. partition .. " takes whole units of " .. UNIT_GPUS .. " GPUs (" ..
    UNITS_PER_BLOCK .. " units in a block of " .. NODES_PER_BLOCK .. " nodes of " .. GPUS_PER_NODE ..
    " GPUs): up to a block ask --nodes=N --gpus=" .. UNIT_GPUS .. "xU (1 unit: --nodes=" .. NODES_FOR_UNITS[1] ..
    " --gpus=" .. UNIT_GPUS .. "), more than a block whole blocks (--nodes=" .. NODES_PER_BLOCK ..
    "xB --gpus-per-node=" .. GPUS_PER_NODE .. " --exclusive); `gpufleet pool units` prints them"
end

-- nil and the switches (blocks) of a unit shape, or the reason it is not one
local function check(job)
  local nodes = job.min_nodes
  if unset(nodes) then return "it gives no --nodes" end
  if not unset(job.max_nodes) and job.max_nodes ~= nodes then return "it asks a node range" end
  local gpus = gpus_in(job.tres_per_job)
  if gpus == nil then
    local per_node = gpus_in(job.tres_per_node)
    if per_node ~= nil then gpus = per_node * nodes end
  end
  if gpus == nil or gpus == 0 then return "it asks no GPUs" end
  if gpus % UNIT_GPUS ~= 0 then return "it asks " .. gpus .. " GPUs, not a multiple of " .. UNIT_GPUS end
  local units = gpus / UNIT_GPUS
  local want, switches = expected(units)
  if want == nil then
    return units .. " units are more than a block and not whole blocks (a multiple of " .. UNITS_PER_BLOCK .. ")"
  end
  if nodes ~= want then
    return units .. " unit(s) span " .. want .. " node(s), it asks " .. nodes
  end
  return nil, switches
end

function slurm_job_submit(job, part_list, submit_uid)
  if job.reservation ~= nil and string.find(job.reservation, GATE_RESERVATION) then
    return slurm.SUCCESS
  end
  local partition = job.partition or DEFAULT_PARTITION
  for name in string.gmatch(partition, "[^,]+") do
    if name == GATES_PARTITION then
      slurm.log_user("gpufleet: partition %s is gpufleet's own, for its gate runs on pending nodes; submit to %s",
                     GATES_PARTITION, DEFAULT_PARTITION)
      return slurm.ERROR
    end
  end
  if PATROL_QOS ~= nil and job.qos == PATROL_QOS then
    return slurm.SUCCESS
  end
  for name in string.gmatch(partition, "[^,]+") do
    if UNIT_PARTITIONS[name] then
      local why, switches = check(job)
      if why ~= nil then
        slurm.log_user("%s; %s", how(name), why)
        slurm.log_info("gpufleet: refused a job of uid %u in %s: %s", submit_uid, name, why)
        return slurm.ERROR
      end
      if TREE then
        job.req_switch = switches
        job.wait4switch = SWITCH_WAIT
      end
      local account = job.account or job.default_account
      if job.qos == nil and account ~= nil and TEAM_QOS[account .. ":" .. name] ~= nil then
        job.qos = TEAM_QOS[account .. ":" .. name]
      end
    end
  end
  return slurm.SUCCESS
end

function slurm_job_modify(job, job_rec, part_list, modify_uid)
  if TREE and (not unset(job.req_switch) or not unset(job.wait4switch)) and job_rec.wait4switch == SWITCH_WAIT then
    slurm.log_user("gpufleet: a unit job's switch count and wait are fixed (one block per %d units)", UNITS_PER_BLOCK)
    return slurm.ERROR
  end
  return slurm.SUCCESS
end

slurm.log_info("gpufleet job_submit.lua loaded: units of %d GPUs, blocks of %d nodes", UNIT_GPUS, NODES_PER_BLOCK)
return slurm.SUCCESS
"""
