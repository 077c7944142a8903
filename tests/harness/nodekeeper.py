"""Keep the harness's fake nodes Ready, the way kwok does for nodes without a kubelet.

A kubelet renews its node's Lease in ``kube-node-lease`` every 10 s and posts its status at
least every 5 minutes; kube-controller-manager's node lifecycle controller marks a node whose
Lease and Ready heartbeat are both older than its grace period NotReady and taints it, after
which the scheduler places nothing there. This process does the kubelet's part for every node
labelled ``e2e.cudasched.io/fleet``: creates the missing Leases, renews them every 10 s and
refreshes the Ready heartbeat every 60 s. Nodes added later are picked up on the next pass.

Run: ``python -m tests.harness.nodekeeper CONTROL_PLANE_DIR`` (the harness starts it).
"""

from __future__ import annotations

import datetime as dt
import json
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from tests.harness.fleet import FLEET_LABEL, now_rfc3339, ready_conditions
from tests.harness.kube import Api, ApiError, Credentials
from tests.harness.pki import Pki

__all__ = ["keep", "main"]

LEASE_SECONDS = 40
RENEW_EVERY = 10.0
STATUS_EVERY = 60.0
_LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


def _micro_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _lease(name: str, uid: str) -> dict[str, object]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": "kube-node-lease",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}],
        },
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": _micro_now(),
        },
    }


def keep(api: Api, *, stop: list[bool], once: bool = False) -> None:
    """Renew until ``stop[0]`` is set (or one pass with ``once``)."""
    leased: set[str] = set()
    last_status = 0.0
    while not stop[0]:
        began = time.monotonic()
        nodes = list(api.list("/api/v1/nodes", labelSelector=FLEET_LABEL))
        post_status = began - last_status >= STATUS_EVERY
        for node in nodes:
            name = node["metadata"]["name"]
            try:
                if name not in leased:
                    try:
                        api.create(_lease(name, node["metadata"]["uid"]))
                    except ApiError as exc:
                        if exc.status_code != 409:
                            raise
                    leased.add(name)
                else:
                    api.patch(f"{_LEASES}/{name}", {"spec": {"renewTime": _micro_now()}})
                if post_status:
                    api.patch(
                        f"/api/v1/nodes/{name}/status",
                        {"status": {"conditions": ready_conditions(now_rfc3339())}},
                        kind="strategic",
                    )
            except ApiError as exc:
                if exc.status_code == 404:  # node deleted meanwhile
                    leased.discard(name)
                    continue
                print(f"nodekeeper: {name}: {exc}", file=sys.stderr, flush=True)
        if post_status:
            last_status = began
        if once:
            return
        while not stop[0] and time.monotonic() - began < RENEW_EVERY:
            time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tests.harness.nodekeeper CONTROL_PLANE_DIR", file=sys.stderr)
        return 2
    directory = Path(args[0])
    state = json.loads((directory / "state.json").read_text())
    pki = Pki(directory / "pki")
    stop = [False]

    def on_signal(_signo: int, _frame: FrameType | None) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    credentials = Credentials(state["server"], pki.ca_cert, pki.cert("admin"), pki.key("admin"))
    with Api(credentials, user_agent="cudasched-e2e-nodekeeper") as api:
        while not stop[0]:
            try:
                keep(api, stop=stop)
            except Exception as exc:  # the API server restarting: retry, never die
                print(f"nodekeeper: {exc}; retrying", file=sys.stderr, flush=True)
                time.sleep(1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
