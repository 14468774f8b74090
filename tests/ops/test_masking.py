"""The one masking function and the webhook's pure transport pieces (token check, rate limit, log
escaping)."""

from __future__ import annotations

import logging

from gpufleet import masking
from gpufleet.ops.server import RateLimit, SafeFormatter, bearer_ok

CANARY = "canary-5f1e0c7a-secret-value"


def test_secret_keys_environment_values_and_registered_secrets_are_masked() -> None:
    record = {"why": f"operator pasted {CANARY} here", "password": "hunter2-long", "api_token": 42,
              "evidence": {"annotations": {"secretAccessKey": "x" * 20, "summary": "ok"}},
              "list": [f"a {CANARY}"], "count": 3, "tokens": None, "session_reuse": False}
    out = masking.mask(record, [CANARY])
    assert CANARY not in repr(out)
    assert out["password"] == out["api_token"] == out["evidence"]["annotations"]["secretAccessKey"] == masking.MASK
    assert out["evidence"]["annotations"]["summary"] == "ok" and out["count"] == 3
    assert out["tokens"] is None and out["session_reuse"] is False  # nothing there to hide
    env = {"GPUFLEET_CANARY_TOKEN": CANARY, "HOME": "/home/someone-long"}
    assert CANARY in masking.secret_values(env) and "/home/someone-long" not in masking.secret_values(env)
    masking.register("registered-" + CANARY)
    assert masking.mask("x registered-" + CANARY, None) == "x " + masking.MASK


def test_control_characters_are_escaped_so_a_log_line_stays_one_line() -> None:
    assert masking.escape_controls("GpuXid\n2026-12-01 INFO forged\r\x1b[31m") == \
        "GpuXid\\x0a2026-12-01 INFO forged\\x0d\\x1b[31m"
    rec = logging.LogRecord("gpufleet.ops", logging.ERROR, __file__, 1, "PAGE alert=%s", ("a\nb",), None)
    assert "\n" not in SafeFormatter("%(message)s").format(rec)


def test_the_bearer_token_is_required_and_compared_whole() -> None:
    token = "t" * 43
    assert bearer_ok(f"Bearer {token}", token) and bearer_ok(f"bearer {token}", token)
    assert not bearer_ok(None, token) and not bearer_ok(f"Bearer {token[:-1]}", token)
    assert not bearer_ok(f"Basic {token}", token) and not bearer_ok("Bearer ", token)
    assert bearer_ok(None, None)  # --no-auth


def test_the_rate_limit_is_per_caller_with_a_burst_and_refills() -> None:
    now = [0.0]
    limits = RateLimit(rate=2, burst=3, clock=lambda: now[0])
    assert [limits.allow("a") for _ in range(4)] == [True, True, True, False]
    assert limits.allow("b")  # another caller has its own bucket
    now[0] += 0.5
    assert limits.allow("a") and not limits.allow("a")


def test_the_intake_retries_a_held_lock_and_applies_waiting_notifications_under_one_take() -> None:
    import threading as th

    from gpufleet.errors import LockHeld
    from gpufleet.ops.server import Intake
    from gpufleet.ops.webhook import Notification
    from tests.ops.alertmanager import alert, notification

    calls: list[int] = []
    gate, started = th.Event(), th.Event()

    def apply(note: Notification) -> dict[str, object]:
        started.set()
        gate.wait(10)
        calls.append(len(note.alerts))
        if len(calls) <= 2:
            raise LockHeld("held by pid 4242 on some-host")
        return {"quarantined": [a.labels["node"] for a in note.alerts][:1],
                "paged": [{"alertname": a.labels["alertname"], "slot": a.labels["node"], "why": "budget"}
                          for a in note.alerts][1:], "ignored": []}

    intake = Intake(apply, yield_s=0, backoff_s=(0.01,))
    first = intake.submit(Notification.model_validate(notification(alert("n1"))), "c")
    assert started.wait(10)  # the worker holds the first one (and retries it) while two more arrive
    rest = [intake.submit(Notification.model_validate(notification(alert(f"n{i}"))), "c") for i in (2, 3)]
    gate.set()
    assert first is not None and first.result(10) == {"quarantined": ["n1"], "paged": [], "ignored": []}
    answers = [f.result(10) for f in rest if f is not None]
    assert answers == [{"quarantined": ["n2"], "paged": [], "ignored": []},  # each caller: its own alerts' part
                       {"quarantined": [], "paged": [{"alertname": "GpuXidFatal", "slot": "n3", "why": "budget"}],
                        "ignored": []}]
    assert calls[:3] == [1, 1, 1] and calls[3] == 2  # two retries, then the waiting two under one take
    intake.stop()


def test_every_report_format_is_masked_and_private(tmp_path, monkeypatch) -> None:
    from gpufleet.reports import write as W
    from tests.reports.sample import sample_document

    canary = "canary-5e1f-report-do-not-leak"
    monkeypatch.setenv("GPUFLEET_REPORT_TOKEN", canary)
    doc = sample_document()
    doc = doc.model_copy(update={"title": f"Sample; token {canary}"})
    paths = W.write_report(doc, doc, tmp_path, "s")
    assert set(paths) == set(W.FORMATS)
    for fmt, path in paths.items():
        text = path.read_text()
        assert canary not in text and ("[redacted]" in text or fmt == "xml"), path  # JUnit carries no title
        assert path.stat().st_mode & 0o077 == 0, path
