"""The gates' `srun --mpi=` follows what the installed Slurm can load: on a local Slurm (srun runs on
this machine) PMIx only when the library the installed mpi/pmix plugin opens loads, else pmi2; a real
stack keeps `pool.srunMpi` (its head node has the PMIx the slurm role installs)."""

from __future__ import annotations

from pathlib import Path

from gpufleet.pool.slurm.mpi import choose_srun_mpi, pmix_library, pmix_loadable
from gpufleet.project import load_project
from gpufleet.rollout.wiring import gate_settings, srun_mpi
from gpufleet.spec import load_stack

REPO = Path(__file__).resolve().parents[2]


def test_a_local_slurm_stacks_gates_use_the_mpi_this_slurm_loads():
    spec = load_stack("local-slurm")
    assert spec.pool.srun_mpi == "pmix" and spec.simulated
    # this machine's answer, from the installed plugin and library (Debian: libpmix2 absent -> pmi2)
    want = choose_srun_mpi("pmix", pmix_loadable(), pmix_library())[0]
    assert srun_mpi(spec) == want
    assert gate_settings(spec, load_project(REPO)).srun_mpi == want
    if pmix_library() is not None and not pmix_loadable():
        assert want == "pmi2"


def test_a_real_slurm_stack_keeps_its_srun_mpi():
    spec = load_stack("dev")
    assert spec.pool.type == "slurm" and not spec.simulated
    assert srun_mpi(spec) == spec.pool.srun_mpi == "pmix"
    none = spec.model_copy(update={"pool": spec.pool.model_copy(update={"srun_mpi": "none"})})
    assert srun_mpi(none) == "none"
