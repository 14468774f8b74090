"""The SSM transport against botocore's Stubber: the exact SendCommand request, the polling of
GetCommandInvocation, and what each answer becomes (SlurmCli's errors naming the node).

moto's SSM accepts `AWS-RunShellScript` but never runs the script: every invocation succeeds at
once with empty output, so neither polling, nor a failure's stderr, nor truncation could be seen
there. The scripts the transport sends are run for real with `sh` here instead: what the
controller's agent would run.
"""

from __future__ import annotations

import io
import json
import subprocess

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber

from gpufleet.errors import PoolError
from gpufleet.pool.slurm.cli import SlurmCli
from gpufleet.pool.slurm.transport import SSM_OUTPUT_LIMIT, SsmTransport, Status

INSTANCE = "i-0c0ffee0c0ffee000"
BUCKET = "dev-data-1a2b3c4d"
CMD = "5a7f3b2c-1e0d-4c1a-9f00-00000000000"  # SSM command ids are UUIDs (+ the last digit)


class Clock:
    """A virtual clock: the transport's sleeps advance it, so deadlines are exact and instant."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _client(service: str):
    return boto3.client(service, region_name="us-east-1", aws_access_key_id="testing",
                        aws_secret_access_key="testing")


@pytest.fixture
def ssm():
    client = _client("ssm")
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


def _transport(ssm, clock: Clock, **kw) -> SsmTransport:
    return SsmTransport(INSTANCE, ssm[0], sleep=clock.sleep, clock=clock, **kw)


def _sent(stub: Stubber, expected: dict | None = None, command_id: str = CMD + "1") -> None:
    stub.add_response("send_command", {"Command": {"CommandId": command_id}}, expected)


def _invocation(stub: Stubber, status: str, *, code: int = -1, stdout: str = "", stderr: str = "",
                details: str | None = None, command_id: str = CMD + "1", **extra) -> None:
    stub.add_response("get_command_invocation", {
        "CommandId": command_id, "InstanceId": INSTANCE, "Status": status, "StatusDetails": details or status,
        "ResponseCode": code, "StandardOutputContent": stdout, "StandardErrorContent": stderr, **extra},
        {"CommandId": command_id, "InstanceId": INSTANCE})


def test_send_command_request_and_polling_until_success(ssm):
    client, stub = ssm
    clock = Clock()
    t = _transport(ssm, clock, bucket=BUCKET)
    argv = ["scontrol", "update", "NodeName=dev-b0-n000", "State=DRAIN", "Reason=gpufleet: pending gates"]
    script = t.script(argv, {"SLURM_CONF": "/etc/slurm/slurm.conf"}, None, 10, False)
    assert script == ("env SLURM_CONF=/etc/slurm/slurm.conf timeout -k 2 10 scontrol update NodeName=dev-b0-n000 "
                      "State=DRAIN 'Reason=gpufleet: pending gates' </dev/null")
    _sent(stub, {"InstanceIds": [INSTANCE], "DocumentName": "AWS-RunShellScript",
                 "Comment": "gpufleet: scontrol update NodeName=dev-b0-n000", "TimeoutSeconds": 30,
                 "Parameters": {"commands": [script], "executionTimeout": ["17"]},
                 "OutputS3BucketName": BUCKET, "OutputS3KeyPrefix": "gpufleet/slurm"})
    stub.add_client_error("get_command_invocation", "InvocationDoesNotExist", http_status_code=400)
    _invocation(stub, "Pending")
    _invocation(stub, "InProgress")
    _invocation(stub, "Success", code=0, stdout="ok\n")

    cli = SlurmCli(conf="/etc/slurm/slurm.conf", transport=t)  # type: ignore[arg-type]
    assert cli.run(argv) == "ok\n"
    assert t.calls == ["send_command", *["get_command_invocation"] * 4]
    assert clock.sleeps == [0.5, 1.0, 2.0, 4.0]  # doubling, from the first poll on


def test_a_failed_command_is_a_pool_error_with_its_stderr_naming_the_node(ssm):
    client, stub = ssm
    clock = Clock()
    _sent(stub)
    _invocation(stub, "Failed", code=1, details="Failed",
                stderr="scontrol: error: Invalid node name specified\n")
    cli = SlurmCli(transport=_transport(ssm, clock))
    with pytest.raises(PoolError, match=r"dev-b0-n009.*`scontrol show node \.\.\.` failed: "
                                        r"scontrol: error: Invalid node name specified"):
        cli.run(["scontrol", "show", "node", "dev-b0-n009"], node="dev-b0-n009")


def test_throttling_is_retried_with_backoff(ssm):
    client, stub = ssm
    clock = Clock()
    stub.add_client_error("send_command", "ThrottlingException", http_status_code=400)
    stub.add_client_error("send_command", "ThrottlingException", http_status_code=400)
    _sent(stub)
    stub.add_client_error("get_command_invocation", "ThrottlingException", http_status_code=400)
    _invocation(stub, "Success", code=0, stdout="done")
    t = _transport(ssm, clock)
    done = t.execute(["sinfo"], env={}, stdin=None, timeout_s=10)
    assert (done.status, done.exit_code, done.stdout) == (Status.DONE, 0, "done")
    assert t.calls == ["send_command"] * 3 + ["get_command_invocation"] * 2
    assert clock.sleeps == [0.5, 1.0, 0.5, 0.5]  # two send backoffs; the first poll, one poll backoff


def test_a_command_past_its_deadline_is_cancelled_and_a_bounded_timeout(ssm):
    client, stub = ssm
    clock = Clock()
    t = _transport(ssm, clock, delivery_s=30)
    _sent(stub)
    for _ in range(10):  # deadline = 4 s limit + 2 s kill grace + 30 s delivery = 36 s after sending
        _invocation(stub, "InProgress")
    stub.add_response("cancel_command", {}, {"CommandId": CMD + "1", "InstanceIds": [INSTANCE]})
    cli = SlurmCli(transport=t, timeout_s=4)
    with pytest.raises(PoolError, match=r"dev-b0-n001.*did not answer `sinfo \.\.\.` within 4 s on SSM "
                                        rf"i-0c0ffee0c0ffee000.*command {CMD}1 still InProgress"):
        cli.run(["sinfo"], node="dev-b0-n001")
    assert clock.sleeps == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0, 5.0, 3.5]  # capped at 5 s, the last cut short
    assert clock.now == 1000 + 36  # never past the deadline, never short of it
    assert t.calls[-1] == "cancel_command"


def test_an_instance_without_an_agent_is_unreachable_not_a_command_failure(ssm):
    client, stub = ssm
    stub.add_client_error("send_command", "InvalidInstanceId", "Instances [[i-0c0ffee0c0ffee000]] not in a valid state",
                          http_status_code=400)
    cli = SlurmCli(transport=_transport(ssm, Clock()))
    with pytest.raises(PoolError, match=r"dev-b0-n002.*cannot reach the Slurm controller \(SSM i-0c0ffee0c0ffee000\)"
                                        r".*InvalidInstanceId.*SSM agent online"):
        cli.run(["sinfo"], node="dev-b0-n002")


def test_an_undelivered_command_is_unreachable(ssm):
    client, stub = ssm
    _sent(stub)
    _invocation(stub, "TimedOut", details="DeliveryTimedOut")
    done = _transport(ssm, Clock()).execute(["sinfo"], env={}, stdin=None, timeout_s=10)
    assert done.status is Status.UNREACHABLE and "DeliveryTimedOut" in done.detail


def test_truncated_output_without_a_bucket_is_reported_never_parsed(ssm):
    client, stub = ssm
    _sent(stub)
    _invocation(stub, "Success", code=0, stdout="x" * SSM_OUTPUT_LIMIT)
    cli = SlurmCli(transport=_transport(ssm, Clock()))
    with pytest.raises(PoolError, match=r"`scontrol show node \.\.\.` on SSM i-0c0ffee0c0ffee000: SSM returned only "
                                        r"the first 24,000 characters.*ssmBucket"):
        cli.run(["scontrol", "show", "node", "--json"])


def test_truncated_output_is_read_whole_from_the_output_bucket(ssm):
    client, stub = ssm
    s3 = _client("s3")
    full = ("y" * 30_000 + "\n").encode()
    key = f"gpufleet/slurm/{CMD}1/{INSTANCE}/awsrunShellScript/0.awsrunShellScript/stdout"
    _sent(stub, {"InstanceIds": [INSTANCE], "DocumentName": "AWS-RunShellScript", "Comment": "gpufleet: sinfo --json",
                 "TimeoutSeconds": 30, "OutputS3BucketName": BUCKET, "OutputS3KeyPrefix": "gpufleet/slurm",
                 "Parameters": {"commands": ["timeout -k 2 10 sinfo --json </dev/null"], "executionTimeout": ["17"]}})
    _invocation(stub, "Success", code=0, stdout=full.decode()[:SSM_OUTPUT_LIMIT],
                StandardOutputUrl=f"https://s3.us-east-1.amazonaws.com/{BUCKET}/{key}")
    with Stubber(s3) as s3_stub:
        s3_stub.add_response("get_object", {"Body": StreamingBody(io.BytesIO(full), len(full))},
                             {"Bucket": BUCKET, "Key": key})
        t = _transport(ssm, Clock(), s3=s3, bucket=BUCKET)
        assert SlurmCli(transport=t).run(["sinfo", "--json"]) == full.decode()
        s3_stub.assert_no_pending_responses()


def test_big_stdin_goes_in_line_aligned_pieces_each_under_the_limit(ssm):
    client, stub = ssm
    lines = [f"update NodeName=dev-b0-n{i:03d} Comment=\"gpufleet f=0 d=sha256:{'ab' * 8}\"\n" for i in range(6)]
    t = _transport(ssm, Clock(), max_stdin_chars=len(lines[0]) * 2 + 1)
    for n in range(3):
        _sent(stub, command_id=f"{CMD}{n}")
        _invocation(stub, "Success", code=0, stdout=f"piece {n};", command_id=f"{CMD}{n}")
    cli = SlurmCli(transport=t)
    assert cli.run(["scontrol"], stdin="".join(lines)) == "piece 0;piece 1;piece 2;"
    assert cli.calls == 3


def test_the_scripts_keep_every_argument_whole_and_carry_stdin(tmp_path):
    """Run what the agent would run: a reason with quotes, blanks, $ and backticks stays one argument."""
    t = SsmTransport(INSTANCE, ssm=None)
    argv = ["python3", "-c", "import json,os,sys; print(json.dumps([sys.argv[1:], os.environ['SLURM_CONF'], "
                             "sys.stdin.read()]))", 'Reason=GPU 3 "fell off" it\'s $HOME `id`', "x y"]
    stdin = "update NodeName=a Comment=\"b c\"\nsecond line ' \" $x\n"
    script = t.script(argv, {"SLURM_CONF": "/etc/slurm conf/slurm.conf"}, stdin, 10, merge_stderr=True)
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [['Reason=GPU 3 "fell off" it\'s $HOME `id`', "x y"],
                                      "/etc/slurm conf/slurm.conf", stdin]
    failing = t.script(["sh", "-c", "echo to-err >&2; exit 7"], {}, None, 10, merge_stderr=True)
    out = subprocess.run(["sh", "-c", failing], capture_output=True, text=True, timeout=30)
    assert (out.returncode, out.stdout, out.stderr) == (7, "to-err\n", "")  # stderr merged, exit code kept
