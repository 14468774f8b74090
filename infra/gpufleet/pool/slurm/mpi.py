"""Which `srun --mpi=` plugin the installed Slurm can really load: PMIx only when its library is there.

Why probe: Slurm's mpi/pmix plugin is packaged without the PMIx library it opens at run time
(Debian's slurm-wlm ships mpi_pmix_v4.so, libpmix2 is a separate package), and then every
`srun --mpi=pmix` fails ("pmi/pmix: can not load PMIx library", seen in slurmctld's log here). The
plugin holds the directory it opens libpmix.so from as a string; the probe loads that library.
Without it the choice falls back to pmi2, which Slurm builds in, with a finding that says why.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

from gpufleet.findings import Finding, warning

PLUGIN_DIRS = (Path("/usr/lib/x86_64-linux-gnu/slurm-wlm"), Path("/usr/lib64/slurm"), Path("/usr/lib/slurm"))
FALLBACK = "pmi2"


def pmix_library(plugin_dirs: tuple[Path, ...] = PLUGIN_DIRS) -> Path | None:
    """The libpmix.so the installed mpi/pmix plugin opens, None without that plugin."""
    for d in plugin_dirs:
        for plugin in sorted(d.glob("mpi_pmix*.so")) if d.is_dir() else ():
            found = re.search(rb"\x00(/[A-Za-z0-9_./+-]*pmix[A-Za-z0-9_./+-]*/lib)\x00", plugin.read_bytes())
            if found:
                return Path(found.group(1).decode()) / "libpmix.so"
    return None


def pmix_loadable(plugin_dirs: tuple[Path, ...] = PLUGIN_DIRS) -> bool:
    lib = pmix_library(plugin_dirs)
    if lib is None:
        return False
    try:
        ctypes.CDLL(str(lib))
    except OSError:
        return False
    return True


def choose_srun_mpi(requested: str, loadable: bool, library: Path | None) -> tuple[str, list[Finding]]:
    """Pure: the requested plugin, or pmi2 with a finding when it is PMIx and PMIx cannot load."""
    if not requested.startswith("pmix") or loadable:
        return requested, []
    where = f"{library} is missing or does not load" if library else "this Slurm has no mpi/pmix plugin"
    return FALLBACK, [warning("SLURM_PMIX_NOT_LOADABLE", "gpufleet:pool.srunMpi",
                              f"srun --mpi={requested} cannot work here: {where}; using --mpi={FALLBACK} "
                              "(install the PMIx library, e.g. libpmix2, to use PMIx)")]
