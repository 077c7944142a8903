"""PolicyReports written to the cluster: server-side apply, one field manager, every report
whole (the audit owns them), so the last audit's results replace the previous ones."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from typing import Any

from cudasched.kube.client import make_client
from cudasched.kube.resources import resource_of
from cudasched.vocab.errors import InputError, one_line
from cudasched.vocab.kinds import CLUSTER_POLICY_REPORT, POLICY_REPORT

__all__ = ["FIELD_MANAGER", "apply_reports"]

FIELD_MANAGER = "cudasched-audit"


def apply_reports(
    reports: Sequence[Mapping[str, Any]],
    *,
    kubeconfig: str | os.PathLike[str] | None = None,
    timeout: float = 10.0,
) -> None:
    """Apply ``reports`` (PolicyReports and ClusterPolicyReports). Raises ``InputError`` with
    one line naming the first report the API server refused."""

    async def run() -> None:
        client = make_client(kubeconfig=kubeconfig, timeout=timeout, field_manager=FIELD_MANAGER)
        kinds = {k.kind: resource_of(k) for k in (POLICY_REPORT, CLUSTER_POLICY_REPORT)}
        try:
            for report in reports:
                resource = kinds[str(report["kind"])]
                meta = report.get("metadata") or {}
                try:
                    # A namespaced object is applied in its metadata's namespace.
                    await client.apply(resource.from_dict(dict(report)), force=True)
                except Exception as exc:  # one line, whatever the transport said
                    where = "/".join(p for p in (meta.get("namespace"), meta.get("name")) if p)
                    why = one_line(exc)
                    raise InputError(f"cannot apply {report['kind']} {where}: {why}") from None
        finally:
            await client.close()

    asyncio.run(run())
