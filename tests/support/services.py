"""Real services on 127.0.0.1 for tests: PostgreSQL (Debian's, started by `.ci/run`), moto's
standalone S3 server, and an `mlflow server` with basic auth on PostgreSQL + S3.

Every credential is generated per test session and handed over in environment variables
(MLFLOW_TRACKING_USERNAME/PASSWORD, AWS_*); the auth server reads its admin password and auth
database URI from an ini file readable only by this user (MLflow's `MLFLOW_AUTH_CONFIG_PATH`).
Nothing listens beyond loopback. Fixtures skip, naming the reason, where PostgreSQL cannot be
reached or administered (not root, not installed); CI installs and starts it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = [
    "MlflowServer",
    "PgDatabase",
    "free_port",
    "start_moto",
    "start_plain_mlflow",
    "wait_http",
]

BIN = Path(sys.executable).parent
#: No job runner: MLflow 3 otherwise starts seven `huey_consumer` processes per server (each
#: imports mlflow: tens of CPU seconds on 2 cores) for GenAI jobs and trace roll-ups, which
#: nothing here uses.
NO_JOBS = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port free on `host` right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_http(
    url: str, proc: subprocess.Popen, what: str, timeout: float = 120.0, log: Path | None = None
) -> None:
    """Wait until `url` answers (any HTTP status); fail with the process log if it dies."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except urllib.error.HTTPError:
            return  # it answered (e.g. 401 from an auth server)
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text()[-3000:] if log and log.exists() else ""
                pytest.fail(f"{what} did not come up at {url} (exit {proc.poll()}):\n{tail}")
            time.sleep(0.3)


def stop(proc: subprocess.Popen) -> None:
    """Terminate a server process started here and wait for it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def start_moto(
    log: Path | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
    netns: str | None = None,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen, str]:
    """Start moto's standalone S3 server on host:port (optionally inside network namespace
    `netns`); return (process, endpoint URL).

    `log` receives the server's output (discarded when None); `env` adds variables to its
    environment, e.g. {"INITIAL_NO_AUTH_ACTION_COUNT": "0"} makes it check credentials
    (unknown access keys get HTTP 403 InvalidAccessKeyId).
    """
    port = port or free_port(host if netns is None else "127.0.0.1")
    cmd = [str(BIN / "moto_server"), "-H", host, "-p", str(port)]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    out = log.open("ab") if log is not None else subprocess.DEVNULL
    proc = subprocess.Popen(
        cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
    )
    endpoint = f"http://{host}:{port}"
    if netns is None:
        wait_http(f"{endpoint}/", proc, "moto S3 server", log=log)
    return proc, endpoint


@dataclass(frozen=True)
class PgDatabase:
    """A role + databases created for one test session on the local PostgreSQL."""

    user: str
    password: str
    databases: tuple[str, ...]
    host: str = "127.0.0.1"
    port: int = 5432

    def uri(self, database: str) -> str:
        """SQLAlchemy URI of `database` (psycopg2 driver)."""
        return (
            f"postgresql+psycopg2://{self.user}:{self.password}@{self.host}:{self.port}/{database}"
        )


def _psql_admin(sql: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["runuser", "-u", "postgres", "--", "psql", "-v", "ON_ERROR_STOP=1", "-q", "-c", sql],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _pg_isready() -> str | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_isready"))
    return str(found[-1]) if found else shutil.which("pg_isready")


def pg_unavailable_reason() -> str | None:
    """Why no local PostgreSQL can be used here, or None when it can."""
    isready = _pg_isready()
    if isready is None:
        return (
            "PostgreSQL is not installed (CI installs it: `apt-get install -y postgresql`, "
            "see .ci/run)"
        )
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        return "creating a PostgreSQL role needs root (runuser -u postgres psql); CI runs as root"
    if subprocess.run([isready, "-h", "127.0.0.1", "-p", "5432"], capture_output=True).returncode:
        return (
            "PostgreSQL is installed but not running on 127.0.0.1:5432 (start it with "
            "`pg_ctlcluster <version> main start`, as .ci/run does)"
        )
    return None


def create_pg_database(names: tuple[str, ...]) -> PgDatabase:
    """Create a login role with a random password owning fresh databases `names` (suffixed)."""
    suffix = secrets.token_hex(4)
    db = PgDatabase(
        user=f"drivetrain_test_{suffix}",
        password=secrets.token_urlsafe(24),
        databases=tuple(f"{n}_{suffix}" for n in names),
    )
    done = _psql_admin(f"CREATE ROLE {db.user} LOGIN PASSWORD '{db.password}'")
    if done.returncode != 0:
        pytest.fail(f"cannot create a PostgreSQL role: {done.stderr.strip()}")
    for name in db.databases:
        done = _psql_admin(f"CREATE DATABASE {name} OWNER {db.user}")
        if done.returncode != 0:
            pytest.fail(f"cannot create database {name}: {done.stderr.strip()}")
    return db


def drop_pg_database(db: PgDatabase) -> None:
    """Drop the databases and the role of `db`."""
    for name in db.databases:
        _psql_admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    _psql_admin(f"DROP ROLE IF EXISTS {db.user}")


@dataclass(frozen=True)
class MlflowServer:
    """An `mlflow server --app-name basic-auth` on 127.0.0.1."""

    url: str
    admin_user: str
    admin_password: str
    s3_endpoint: str
    bucket: str
    log: Path
    db: PgDatabase


def start_mlflow(
    tmp: Path, db: PgDatabase, s3_endpoint: str, bucket: str
) -> tuple[subprocess.Popen, MlflowServer]:
    """Start MLflow with auth (NO_PERMISSIONS default) on PostgreSQL, artifacts in S3."""
    admin_password = secrets.token_urlsafe(24)
    config = tmp / "mlflow-auth.ini"
    config.touch(mode=0o600)
    config.write_text(
        "[mlflow]\n"
        "default_permission = NO_PERMISSIONS\n"
        f"database_uri = {db.uri(db.databases[1])}\n"
        "admin_username = admin\n"
        f"admin_password = {admin_password}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
    )
    port = free_port()
    env = {
        **os.environ,
        "MLFLOW_AUTH_CONFIG_PATH": str(config),
        "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(32),
        "MLFLOW_S3_ENDPOINT_URL": s3_endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        **NO_JOBS,
    }
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        env.pop(name, None)
    log = tmp / "mlflow-server.log"
    proc = subprocess.Popen(
        [
            str(BIN / "mlflow"),
            "server",
            "--app-name",
            "basic-auth",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            db.uri(db.databases[0]),
            "--artifacts-destination",
            f"s3://{bucket}/mlartifacts",
            "--workers",
            "1",
        ],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/health", proc, "mlflow server", timeout=180, log=log)
    return proc, MlflowServer(
        url=url,
        admin_user="admin",
        admin_password=admin_password,
        s3_endpoint=s3_endpoint,
        bucket=bucket,
        log=log,
        db=db,
    )


def start_plain_mlflow(root: Path, store_uri: str) -> tuple[subprocess.Popen, str]:
    """Start a plain `mlflow server` (no auth) on 127.0.0.1; return (process, URL).

    `store_uri` is its backend store (e.g. the `mlflow_db` fixture's copy of a migrated empty
    SQLite store, so the server does not run every migration again); artifacts are served from
    `root/artifacts`, its log is `root/server.log`. Its environment holds no MLFLOW_* or AWS_*
    variable (no secret of the test reaches it).
    """
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "AWS_"))}
    log = root / "server.log"
    proc = subprocess.Popen(
        [
            str(BIN / "mlflow"),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            store_uri,
            "--artifacts-destination",
            str(root / "artifacts"),
            "--workers",
            "1",
        ],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        env={**env, **NO_JOBS},
        cwd=root,
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/health", proc, "mlflow server", timeout=180, log=log)
    return proc, url
