"""Test helper: the real ``cudasched webhook --cluster FILE`` server in its own process.

Attack and load tests measure what a deployment would see (memory of the process, latency over
real HTTPS), so they run the console command itself, not the server embedded in pytest's own
process. The server serves the bundled sample cluster unless a file is given. Starting, waiting
for ``/readyz`` and stopping are the end-to-end harness's (:mod:`tests.harness.webhook`), the one
way the suite runs the command.

Usage::

    with webhook_process(tmp_path, config={"decisionCacheBytes": 1048576}) as proc:
        httpx.post(proc.url + "/mutate/pods", content=body, verify=proc.ca_file)
        proc.rss_bytes()
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from tests.harness.webhook import LiveWebhook
from tests.harness.webhook import webhook_process as _webhook_process

__all__ = ["sample_cluster_file", "webhook_process"]

REPO = Path(__file__).resolve().parents[2]


def sample_cluster_file() -> Path:
    return REPO / "src" / "cudasched" / "data" / "sample-cluster.yaml"


def webhook_process(
    tmp: Path,
    *,
    config: dict[str, Any] | None = None,
    cluster: Path | None = None,
    startup_timeout: float = 60.0,
) -> contextlib.AbstractContextManager[LiveWebhook]:
    """The server on ``cluster`` (default: the bundled sample) for a ``with`` block: started,
    ready when it answers ``/readyz``, stopped with SIGTERM at the end."""
    cluster = cluster or sample_cluster_file()
    return _webhook_process(tmp, cluster=cluster, config=config, startup_timeout=startup_timeout)
