"""Who asked for a day-two change: the AWS caller identity where credentials are configured, else
the operating-system user at this host.

Why both: a CI runner or an operator with an assumed role is best named by the role ARN (the
cloud's audit trail names the same principal); a laptop or the simulator has no identity but its
login. Never raises: an unreachable STS falls back to user@host, which is still true.
"""

from __future__ import annotations

import getpass
import os
import socket
from typing import Any, Callable

ENV = "GPUFLEET_ACTOR"  # an explicit name (a CI job id, a ticket) wins over both


def os_actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (some containers)
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def aws_actor(client_factory: Callable[[], Any] | None = None) -> str | None:
    """The STS caller identity's ARN, or None when no credentials are configured or STS is unreachable."""
    try:
        if client_factory is None:
            import boto3

            session = boto3.session.Session()
            if session.get_credentials() is None:
                return None
            client = session.client("sts")
        else:
            client = client_factory()
        return str(client.get_caller_identity()["Arn"])
    except Exception:  # noqa: BLE001 - any failure means "no identity here", never an error
        return None


def who(simulated: bool, client_factory: Callable[[], Any] | None = None) -> str:
    """The actor recorded with every day-two event."""
    explicit = os.environ.get(ENV, "").strip()
    if explicit:
        return explicit
    if not simulated:
        arn = aws_actor(client_factory)
        if arn:
            return f"{arn} ({os_actor()})"
    return os_actor()
