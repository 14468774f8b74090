"""Pulumi entry point (`main: infra/` in Pulumi.yaml): the real program, never under mocks.

All wiring is in `gpufleet.program.cluster`; the package sits beside this file (infra/gpufleet/), and
Pulumi's Python host puts this folder first on sys.path.
"""

from gpufleet.program.cluster import run_program

run_program(mocked=False)
