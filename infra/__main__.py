"""Pulumi entry point: the real program (never under mocks). All wiring is in `infra.cloud.program`."""

from infra.cloud.program import run_program

run_program(mocked=False)
