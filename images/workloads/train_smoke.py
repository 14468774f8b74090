#!/usr/bin/env python3
"""gpufleet's training smoke job: a small data-parallel run that proves a pool can train.

It writes a small dataset to the shared file system (rank 0, atomically), reads it back on
every rank with a DataLoader, trains a small model for a fixed number of steps with gradients
averaged by an explicit all-reduce (timed on its own), then gathers a checksum of every rank's
parameters and prints ONE JSON line (rank 0) that infra/gpufleet/gates/parsers/train.py reads:
  {"gpufleet_smoke": 1, "world_size", "backend", "steps", "loss": [per step], "samples_per_second",
   "allreduce_ms": [per step], "data_loading_share", "ranks_agree", "checksums": [per rank], "hosts"}

Rank and world come from torchrun (RANK, WORLD_SIZE, LOCAL_RANK) or from srun (SLURM_PROCID,
SLURM_NTASKS, SLURM_LOCALID); the rendezvous from MASTER_ADDR/MASTER_PORT or, under srun, the
step's first node (its Slurm NodeAddr) and a port derived from the job id. NCCL on GPUs, gloo without them.
`--corrupt-gradient-rank N` adds a constant to rank N's gradients after the all-reduce: the
planted divergence the gate must catch.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

FEATURES = 32
NAME_BYTES = 64


def env_int(*names: str, default: int) -> int:
    for name in names:
        if os.environ.get(name):
            return int(os.environ[name])
    return default


def slurm_first_node_addr() -> str | None:
    """Rank 0's node address under srun: the step's first node, its NodeAddr as Slurm knows it.

    Not SLURM_LAUNCH_NODE_IPADDR: srun may run on a controller or login host outside the step.
    """
    nodelist = os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        return None
    try:
        hosts = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                               timeout=30, check=True).stdout.split()
        node = subprocess.run(["scontrol", "-o", "show", "node", hosts[0]], capture_output=True, text=True,
                              timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError, IndexError):
        return None
    addr = re.search(r"\bNodeAddr=(\S+)", node)
    return addr[1] if addr else hosts[0]


def rendezvous() -> tuple[int, int, int]:
    rank = env_int("RANK", "SLURM_PROCID", default=0)
    world = env_int("WORLD_SIZE", "SLURM_NTASKS", default=1)
    local = env_int("LOCAL_RANK", "SLURM_LOCALID", default=0)
    if "MASTER_ADDR" not in os.environ:
        os.environ["MASTER_ADDR"] = slurm_first_node_addr() or "127.0.0.1"
    # torch's customary range; the launcher should pass a port it knows is free (MASTER_PORT)
    os.environ.setdefault("MASTER_PORT", str(29500 + env_int("SLURM_JOB_ID", default=0) % 500))
    return rank, world, local


def write_dataset(path: Path, samples: int, seed: int) -> None:
    """y = x . w + small noise: learnable in a few steps, so a falling loss is a real signal."""
    if path.exists():
        return
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, FEATURES, generator=g)
    w = torch.randn(FEATURES, 1, generator=g)
    y = x @ w + 0.01 * torch.randn(samples, 1, generator=g)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save({"x": x, "y": y}, tmp)
    os.replace(tmp, path)  # readers never see a half-written file


class FileDataset(Dataset):
    def __init__(self, path: Path) -> None:
        data = torch.load(path)
        self.x, self.y = data["x"], data["y"]

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


def endless(loader: DataLoader, sampler: DistributedSampler):
    """Batches across epochs, reshuffled per epoch the same way on every rank."""
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def gather_names(name: str, world: int, device: torch.device) -> list[str]:
    """Every rank's node name, as fixed-width bytes (all_gather_object would need NumPy)."""
    raw = name.encode()[:NAME_BYTES].ljust(NAME_BYTES, b"\0")
    mine = torch.tensor(list(raw), dtype=torch.uint8, device=device)
    names = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(names, mine)
    return [bytes(n.tolist()).rstrip(b"\0").decode(errors="replace") for n in names]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True, type=Path, help="a folder on the shared file system")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--samples", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--corrupt-gradient-rank", type=int, default=-1)
    ap.add_argument("--timeout-s", type=float, default=300)
    args = ap.parse_args(argv)

    rank, world, local = rendezvous()
    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    device = torch.device(f"cuda:{local}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=args.timeout_s))

    args.data_dir.mkdir(parents=True, exist_ok=True)
    path = args.data_dir / f"smoke-dataset-{args.seed}-{args.samples}.pt"
    if rank == 0:
        write_dataset(path, args.samples, args.seed)
    dist.barrier()
    dataset = FileDataset(path)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)
    params = list(model.parameters())
    for p in params:  # every rank starts from rank 0's parameters
        dist.broadcast(p.data, src=0)
    opt = torch.optim.SGD(params, lr=args.lr)

    losses, allreduce_ms = [], []
    load_s = 0.0
    batches = endless(loader, sampler)
    started = time.perf_counter()
    for _ in range(args.steps):
        t0 = time.perf_counter()
        x, y = next(batches)
        x, y = x.to(device), y.to(device)
        load_s += time.perf_counter() - t0
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        if cuda:
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        dist.all_reduce(flat)
        if cuda:
            torch.cuda.synchronize()
        allreduce_ms.append((time.perf_counter() - t1) * 1000)
        flat /= world
        offset = 0
        for p in params:
            n = p.numel()
            p.grad.copy_(flat[offset:offset + n].view_as(p))
            offset += n
        if rank == args.corrupt_gradient_rank:
            for p in params:
                p.grad.add_(0.01)
        opt.step()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        losses.append(float(mean_loss) / world)
    elapsed = time.perf_counter() - started

    checksum = torch.stack([p.detach().double().sum() for p in params]).sum().reshape(1).to(device)
    checksums_t = [torch.zeros_like(checksum) for _ in range(world)]
    dist.all_gather(checksums_t, checksum)
    checksums = [float(c) for c in checksums_t]
    hosts = gather_names(os.environ.get("SLURMD_NODENAME") or socket.gethostname(), world, device)
    if rank == 0:
        print(json.dumps({
            "gpufleet_smoke": 1, "world_size": world, "backend": backend, "steps": args.steps,
            "loss": [round(x, 6) for x in losses],
            "samples_per_second": round(world * args.batch_size * args.steps / elapsed, 1),
            "allreduce_ms": [round(x, 3) for x in allreduce_ms],
            "data_loading_share": round(load_s / elapsed, 4),
            "ranks_agree": len(set(checksums)) == 1, "checksums": checksums,
            "hosts": hosts,
        }), flush=True)
    dist.barrier()  # no rank tears its pairs down while a peer is still in a collective
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # torch 2.x can abort in its static destructors at interpreter exit, after the process group is
    # gone ("terminate called without an active exception", about 1 run in 30 on two CPU ranks):
    # the result is printed and flushed by then, so leave without running them.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
