"""MariaDB and slurmdbd for the local Slurm, so `sacct`, `sacctmgr` and QOS limits are real there.

Why: a local-slurm stack without slurmdbd keeps no accounting (`gpufleet cost` had nothing to read)
and no QOS (a partition's limits could not be shown applying). Started the way the accounting tests
start them (tests/ops/test_slurm_accounting.py): a throwaway MariaDB datadir, socket and port
under `<root>/db`, slurmdbd with auth/none on 127.0.0.1, both with pid files under `<root>/run`
so `LocalSlurm.down` stops them with the Slurm daemons. Debian's `mariadb-server` and `slurmdbd`.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from gpufleet.errors import PoolError

INSTALL_HINT = "install them with `apt-get install mariadb-server slurmdbd` (Debian/Ubuntu)"


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def socket_path(db_port: int) -> Path:
    """Under /tmp, not the state dir: a unix socket path holds 107 bytes, and a project's
    `.gpufleet/<stack>/slurm/run/` under a deep folder exceeded it (mariadbd then exits after
    opening its TCP port, and slurmdbd finds no database)."""
    return Path("/tmp") / f"gpufleet-mariadb-{db_port}.sock"


def slurmdbd_conf(root: Path, dbd_port: int, db_port: int) -> str:
    return "\n".join([
        "# gpufleet local test cluster: slurmdbd on 127.0.0.1, auth/none, its MariaDB under the same root",
        "AuthType=auth/none", "DbdHost=localhost", "DbdAddr=127.0.0.1", f"DbdPort={dbd_port}", "SlurmUser=root",
        "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1", f"StoragePort={db_port}",
        "StorageUser=root", "StorageLoc=slurm_acct_db", f"PidFile={root / 'run' / 'slurmdbd.pid'}",
        f"LogFile={root / 'log' / 'slurmdbd.log'}", "DebugLevel=info"]) + "\n"


def start(root: Path, etc: Path, env: dict[str, str], dbd_port: int, db_port: int, deadline_s: float = 90) -> None:
    """MariaDB (a fresh datadir when none is there) then slurmdbd reading `etc`/slurmdbd.conf; both
    answer on their ports when this returns."""
    for tool in ("mariadb-install-db", "mariadbd", "slurmdbd"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            raise PoolError(f"{tool} is not installed; {INSTALL_HINT}")
    db = root / "db"
    if not (db / "mysql").is_dir():
        db.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mariadb-install-db", f"--datadir={db}", "--user=root",
                               "--auth-root-authentication-method=normal", "--skip-test-db"],
                              capture_output=True, text=True, timeout=180)
        if done.returncode != 0:
            raise PoolError(f"mariadb-install-db failed: {(done.stderr or done.stdout).strip()[-300:]}")
    log = root / "log"
    subprocess.Popen(["mariadbd", f"--datadir={db}", "--user=root", f"--port={db_port}", "--bind-address=127.0.0.1",
                      f"--socket={socket_path(db_port)}", f"--pid-file={root / 'run' / 'mariadbd.pid'}",
                      f"--log-error={log / 'mariadb.log'}"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    _wait(lambda: listening(db_port), time.monotonic() + deadline_s, "mariadbd", log / "mariadb.log")
    conf = etc / "slurmdbd.conf"
    conf.write_text(slurmdbd_conf(root, dbd_port, db_port), encoding="utf-8")
    conf.chmod(0o600)  # slurmdbd refuses a readable slurmdbd.conf
    done = subprocess.run(["slurmdbd"], env=env, capture_output=True, text=True, timeout=60)  # daemonizes
    if done.returncode != 0:
        raise PoolError(f"slurmdbd would not start: {(done.stderr or done.stdout).strip()[-300:]} "
                        f"(log: {log / 'slurmdbd.log'})")
    _wait(lambda: listening(dbd_port), time.monotonic() + deadline_s, "slurmdbd", log / "slurmdbd.log")


def _wait(ok, deadline: float, what: str, log: Path) -> None:
    while time.monotonic() < deadline:
        if ok():
            return
        time.sleep(0.3)
    tail = log.read_text(errors="replace")[-500:] if log.exists() else "no log"
    raise PoolError(f"{what} did not come up (log {log}): {tail}")
