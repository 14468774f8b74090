"""ansible-runner must not take the process's Ctrl-C and SIGTERM away for good.

ansible_runner.run, called on the main thread without a cancel_callback, installs its own
handlers through ansible_runner.utils.signal_handler and never restores them: a rollout then
ignored SIGINT and CI's `timeout --signal=INT` after its first configure. The fake `run` below
calls that vendor function itself, so the test meets the vendor's real behaviour."""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace

import ansible_runner
import pytest
from ansible_runner.utils import signal_handler

from gpufleet.configure.runner import _ansible_runner_run


def _fake_run(status: str, deliver: int | None = None):
    def run(**kwargs):
        cancelled = signal_handler()  # what ansible_runner.interface.run does without a cancel_callback
        if deliver is not None:
            os.kill(os.getpid(), deliver)  # the operator's Ctrl-C, or CI's timeout, during the playbook
        assert deliver is None or cancelled(), "the vendor's handler took the signal during the run"
        return SimpleNamespace(status=status, rc=0 if status == "successful" else 254)
    return run


def test_the_process_handlers_are_back_after_a_run(monkeypatch):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(ansible_runner, "run", _fake_run("successful"))
    assert _ansible_runner_run(playbook="site.yml").status == "successful"
    assert {s: signal.getsignal(s) for s in before} == before
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C works again after the run
        os.kill(os.getpid(), signal.SIGINT)


def test_a_run_cancelled_by_a_signal_stops_the_command(monkeypatch):
    before = signal.getsignal(signal.SIGINT)
    monkeypatch.setattr(ansible_runner, "run", _fake_run("canceled", deliver=signal.SIGINT))
    with pytest.raises(KeyboardInterrupt, match="cancelled by a signal"):
        _ansible_runner_run(playbook="site.yml")
    assert signal.getsignal(signal.SIGINT) is before


def test_a_callers_own_cancel_callback_keeps_its_result(monkeypatch):
    monkeypatch.setattr(ansible_runner, "run", lambda **kw: SimpleNamespace(status="canceled", rc=254))
    assert _ansible_runner_run(playbook="site.yml", cancel_callback=lambda: True).status == "canceled"
