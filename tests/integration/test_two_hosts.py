"""Multi-node training across two hosts on one machine: two network namespaces joined by a
veth pair, one torch elastic agent in each (c10d rendezvous, nnodes=2, nproc_per_node=1),
checkpoints on an S3-compatible store (moto) that both hosts reach over the veth link.

Shows: the rendezvous assigns global ranks 0 and 1 to the two hosts; the loss of every step
equals a single-node run with the same global batch (2 workers x the same per-rank batch);
only global rank 0 returns a result; when one host's agent is killed mid-run (SIGKILL of the
agent and its worker while its rank is stalled before a step), the surviving agent restarts
its workers, a replacement host joins, and both resume from the last checkpoint in S3.

Needs root and iproute2 (CI runs as root; `.ci/run` installs iproute2). Addresses are a private
/30 that exists only inside the two namespaces; both namespaces are deleted in `finally`.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from services import start_moto, stop

from platform_lib.shards.build import BuildConfig, build_dataset
from platform_lib.sources.synthetic import SyntheticConfig, write_synthetic_logs
from platform_lib.training.launch import launch_local
from platform_lib.training.overrides import resolve_train_config

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(600)]

TINY = SyntheticConfig(
    num_logs=2,
    frames_per_log=6,
    image_width=64,
    image_height=48,
    lidar_beams=8,
    lidar_azimuth_bins=64,
)
MAX_STEPS, HANG_STEP = 8, 6
OVERRIDES = {
    "max_steps": MAX_STEPS,
    "warmup_steps": 0,
    "batch_size": 1,
    "num_workers": 0,
    "checkpoint.interval": 2,
    "metrics.log_interval": 1,
}
BUCKET = "drivetrain"


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@pytest.fixture
def two_hosts():
    """Two network namespaces joined by a veth pair; yields (ns_a, addr_a, ns_b, addr_b, tag);
    the veth ends are `va<tag>` (in ns_a) and `vb<tag>` (in ns_b)."""
    if os.geteuid() != 0:
        pytest.skip("creating network namespaces needs root (CI runs as root)")
    if shutil.which("ip") is None:
        pytest.skip("iproute2 (`ip`) is not installed; `.ci/run` installs it")
    tag = secrets.token_hex(3)
    ns_a, ns_b = f"dt-a-{tag}", f"dt-b-{tag}"
    subnet = 4 * secrets.randbelow(64)  # 10.251.<x>.<subnet>/30: a private range, namespaces only
    third = secrets.randbelow(256)
    addr_a, addr_b = f"10.251.{third}.{subnet + 1}", f"10.251.{third}.{subnet + 2}"
    created = []
    try:
        for ns in (ns_a, ns_b):
            _ip("netns", "add", ns)
            created.append(ns)
        _ip("link", "add", f"va{tag}", "type", "veth", "peer", "name", f"vb{tag}")
        for ns, dev, addr in ((ns_a, f"va{tag}", addr_a), (ns_b, f"vb{tag}", addr_b)):
            _ip("link", "set", dev, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{addr}/30", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
    except RuntimeError as exc:
        for ns in created:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", f"va{tag}"], capture_output=True)
        pytest.skip(f"network namespaces are not available here: {exc}")
    try:
        yield ns_a, addr_a, ns_b, addr_b, tag
    finally:  # deleting a namespace deletes its end of the veth pair, and with it the pair
        for ns in created:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def _in_ns(ns: str, code: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _agent(ns: str, args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "platform_lib.training.node", *args]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=log.open("ab"),
        env=env,
        text=True,
        start_new_session=True,
    )


def _tails(folder: Path) -> str:
    """The last lines of every agent log (skipping C++ stack frames), for failure messages."""
    text = []
    for log in sorted(folder.glob("*.log")):
        lines = [
            x
            for x in log.read_text(errors="replace").splitlines()
            if x.strip() and not x.startswith(("frame #", " "))
        ]
        text.append(f"--- {log.name}\n" + "\n".join(lines[-15:]))
    return "\n".join(text)


def _metrics(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _ranks(out: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (out / "ranks").glob("*.json")}


def test_two_hosts_rendezvous_match_single_node_and_survive_a_host_kill(
    two_hosts, tmp_path: Path
) -> None:
    ns_a, addr_a, ns_b, addr_b, tag = two_hosts
    raw, dataset = tmp_path / "raw", tmp_path / "dataset"
    write_synthetic_logs(TINY, raw, progress=False)
    build_dataset("synthetic", raw, dataset, BuildConfig(val_fraction=0.0, progress=False))

    # reference: one node, 2 workers, same per-rank batch -> the same global batch
    reference = launch_local(
        resolve_train_config("small", OVERRIDES, 0), str(dataset), str(tmp_path / "single"), nproc=2
    )
    ref_loss = {r["step"]: r["loss"] for r in _metrics(tmp_path / "single")}
    assert sorted(ref_loss) == list(range(1, MAX_STEPS + 1))

    moto, endpoint = start_moto(tmp_path / "moto.log", host=addr_a, port=9000, netns=ns_a)
    agents: list[subprocess.Popen] = []
    try:
        env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint,
            "PYTHONUNBUFFERED": "1",
        }
        env.pop("DRIVETRAIN_FAULTS", None)
        _in_ns(
            ns_b,
            "import time, boto3\n"  # host b reaches the store on host a
            "for _ in range(120):\n"
            "    try:\n"
            f"        boto3.client('s3').create_bucket(Bucket='{BUCKET}'); break\n"
            "    except Exception: time.sleep(0.5)\n"
            "else: raise SystemExit('moto unreachable')\n",
            env,
        )
        run_id = f"two-hosts-{secrets.token_hex(3)}"
        overrides = {**OVERRIDES, "checkpoint.folder": f"s3://{BUCKET}/{run_id}/checkpoints"}
        common = [
            "--nnodes",
            "2",
            "--nproc-per-node",
            "1",
            "--rdzv-endpoint",
            f"{addr_a}:29400",
            "--run-id",
            run_id,
            "--max-restarts",
            "2",
            "--preset",
            "small",
            "--overrides",
            json.dumps(overrides),
            "--dataset",
            str(dataset),
        ]
        out = {ns_a: tmp_path / "host-a", ns_b: tmp_path / "host-b"}
        # host b's worker (whatever rank the rendezvous gives it) stalls before step
        # HANG_STEP: a fixed point to kill host b at. Host a keeps running: it hosts the c10d
        # rendezvous store (the endpoint's host), which a restart needs.
        stall = json.dumps([{"kind": "hang", "rank": r, "step": HANG_STEP} for r in (0, 1)])
        serves = {ns_a: "--rdzv-host", ns_b: "--no-rdzv-host"}  # the store lives on host a
        addr = {ns_a: addr_a, ns_b: addr_b}
        # each host advertises its veth address (MASTER_ADDR when it holds rank 0) and gloo
        # binds to its veth device: the hostname resolves to no address inside a namespace
        host_env = {
            ns_a: {**env, "GLOO_SOCKET_IFNAME": f"va{tag}"},
            ns_b: {**env, "GLOO_SOCKET_IFNAME": f"vb{tag}"},
        }
        procs = {
            ns: _agent(
                ns,
                [*common, serves[ns], "--local-addr", addr[ns], "--output", str(out[ns])],
                {**host_env[ns], "DRIVETRAIN_FAULTS": stall} if ns == ns_b else host_env[ns],
                tmp_path / f"{ns}.log",
            )
            for ns in (ns_a, ns_b)
        }
        agents.extend(procs.values())

        deadline = time.monotonic() + 300
        while not any(r["step"] >= HANG_STEP - 1 for o in out.values() for r in _metrics(o)):
            problem = (
                "the two-host run did not reach the stall"
                if time.monotonic() > deadline
                else "an agent exited early"
                if any(p.poll() is not None for p in procs.values())
                else ""
            )
            assert not problem, f"{problem}:\n" + _tails(tmp_path)
            time.sleep(0.5)
        first = {ns: _ranks(out[ns]) for ns in out}
        assert {ns: sorted(r) for ns, r in first.items()} in (
            {ns_a: ["attempt-0-rank-0"], ns_b: ["attempt-0-rank-1"]},
            {ns_a: ["attempt-0-rank-1"], ns_b: ["attempt-0-rank-0"]},
        )
        for ranks in first.values():
            (record,) = ranks.values()
            assert record["WORLD_SIZE"] == "2" and record["LOCAL_RANK"] == "0"
            assert record["GROUP_RANK"] == record["RANK"]  # one worker per host
            assert record["MASTER_ADDR"] in (addr_a, addr_b)
        victim, survivor = ns_b, ns_a
        os.killpg(procs[victim].pid, signal.SIGKILL)  # the whole host: agent and worker
        procs[victim].wait(timeout=30)

        # the replacement host: same command, no fault; it joins the survivor's re-rendezvous
        procs[victim] = _agent(
            victim,
            [*common, serves[victim], "--local-addr", addr[victim], "--output", str(out[victim])],
            host_env[victim],
            tmp_path / f"{victim}-replacement.log",
        )
        agents.append(procs[victim])
        lines = {}
        for ns, proc in procs.items():
            stdout, _ = proc.communicate(timeout=400)
            log = (tmp_path / f"{ns}.log").read_text()[-3000:]
            assert proc.returncode == 0, f"{ns} agent failed:\n{log}\n" + _tails(tmp_path)
            lines[ns] = json.loads(stdout.strip().splitlines()[-1])
    finally:
        for proc in agents:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        stop(moto)

    workers = [w for line in lines.values() for w in line["workers"]]
    assert sorted(w["rank"] for w in workers) == [0, 1]
    assert [w["result"] is not None for w in sorted(workers, key=lambda w: w["rank"])] == [
        True,
        False,
    ]
    (result,) = [w["result"] for w in workers if w["rank"] == 0]
    assert result["num_steps"] == MAX_STEPS and result["world_size"] == 2
    # the survivor's workers were restarted (attempt 1) and everyone resumed from a checkpoint
    assert any(name.startswith("attempt-1-") for name in _ranks(out[survivor]))
    restarts = [
        json.loads(line)
        for o in out.values()
        if (o / "restarts.jsonl").exists()
        for line in (o / "restarts.jsonl").read_text().splitlines()
    ]
    assert restarts and restarts[-1]["restored_step"] >= 2
    assert restarts[-1]["restored_step"] % 2 == 0 and restarts[-1]["restored_step"] < HANG_STEP
    # every step's loss, before and after the restart, equals the single-node run's
    losses = {r["step"]: r["loss"] for o in out.values() for r in _metrics(o)}
    assert sorted(losses) == list(range(1, MAX_STEPS + 1))
    for step, loss in losses.items():
        assert loss == pytest.approx(ref_loss[step], rel=1e-5, abs=1e-6), step
    assert reference.world_size == 2
