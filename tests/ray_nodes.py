"""Test helper: Ray nodes on 127.0.0.1 started with the `ray` CLI (tests/test_ray.py,
tests/test_kill_resume.py): the CLI, the environment a token-authenticated cluster needs, a
free port, and a head node's start."""
from __future__ import annotations

import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

RAY_CLI = str(Path(sys.executable).parent / "ray")
# `ray start --head` turns token authentication on and refuses to start without a token (it
# found one only where an earlier in-process `ray.init` had written ~/.ray/auth_token: on a
# fresh machine the first cluster test failed or passed by test order); every node and client
# of these clusters gets this session's own token
CLUSTER_ENV = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32), "RAY_USAGE_STATS_ENABLED": "0"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_head(port: int, env: dict, num_cpus: int) -> subprocess.Popen:
    """`ray start --head --block` in its own session (ending that process stops this node's Ray
    processes and no other Ray instance), returned once its port answers (within 180 s)."""
    p = subprocess.Popen([RAY_CLI, "start", "--head", f"--port={port}", "--include-dashboard=false", "--block",
                          "--node-ip-address=127.0.0.1", f"--num-cpus={num_cpus}", "--disable-usage-stats"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    t0 = time.monotonic()
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return p
        except OSError:
            if time.monotonic() - t0 >= 180 or p.poll() is not None:
                p.kill()
                raise AssertionError("the Ray head node did not start")
            time.sleep(0.5)
