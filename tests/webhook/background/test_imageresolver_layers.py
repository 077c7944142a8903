"""The webhook's image resolver reads layers (issue 29): over HTTPS against the real webhook
server and the real registry, an Ollama-style image whose config names no CUDA is answered
"unknown" at once, its layers are read in the background, and its replicas are then placed on
the nodes its oldest runner needs; a layer that trickles never holds a review, and the metrics
show the reads and their budgets."""

from __future__ import annotations

import base64
import http.server
import random
import ssl
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.settings.config import WebhookConfig
from cudasched.vocab.nodeaffinity import RequiredNodeAffinity
from cudasched.webhook.admission.review import creation_review
from cudasched.webhook.server.serving import serve_in_thread
from cudasched.webhook.state.clusterstate import ClusterState
from tests.support.admission import recorded_only
from tests.support.builders import pod
from tests.support.layers import RUNNERS, layer, push_layered
from tests.support.registry import Registry, run_registry, serving

BASE = layer({"etc/os-release": b"ID=ubuntu\n"})


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    with run_registry() as running:
        push_layered(running, "acme/ollama-build", "0.12.3", [BASE, RUNNERS])
        yield running


@pytest.fixture(scope="module")
def state(kb: KnowledgeBase) -> ClusterState:
    return ClusterState.from_snapshot(bundled_snapshot(), kb=kb)


def gpu_pod(image: str) -> dict[str, Any]:
    """An Ollama replica as its controller creates it, asking one GPU."""
    return pod(
        None,
        "ml",
        image=image,
        container="ollama",
        labels={"app": "ollama"},
        generate_name="ollama-",
    )


def config(*plain_http: str, **layers: Any) -> WebhookConfig:
    return WebhookConfig.from_mapping(
        {
            "imageResolver": {"enabled": True, "plainHttp": list(plain_http), "layers": layers},
            "server": {"requestTimeoutSeconds": 0.5},
        }
    )


def admit(client: httpx.Client, pod: dict[str, Any]) -> dict[str, Any]:
    reply = client.post(
        "/mutate/pods", content=orjson.dumps(creation_review(pod, uid=str(uuid.uuid4())))
    )
    assert reply.status_code == 200, reply.text
    return reply.json()["response"]


def eligible(state: ClusterState, pod: dict[str, Any], response: dict[str, Any]) -> set[str]:
    import jsonpatch

    patched = jsonpatch.apply_patch(pod, orjson.loads(base64.b64decode(response["patch"])))
    affinity = RequiredNodeAffinity.from_pod_spec(patched["spec"])
    return {n.name for n in state.nodes if affinity.match(n)}


def unknown_recorded(pod: dict[str, Any], response: dict[str, Any]) -> bool:
    """The answer constrains nothing and records the requirement as unknown (issue 27 item 4)."""
    return recorded_only({"request": {"object": pod}}, response).startswith("unknown (")


def test_layers_answer_the_replicas_of_an_image_whose_config_names_no_cuda(
    registry: Registry, state: ClusterState, kb: KnowledgeBase
) -> None:
    pod = gpu_pod(f"{registry.host}/acme/ollama-build:0.12.3")
    with serve_in_thread(state, config=config(registry.host), kb=kb) as server:
        tls = ssl.create_default_context(cadata=server.ca_pem.decode("ascii"))
        with httpx.Client(base_url=server.url, verify=tls, timeout=10) as client:
            first = admit(client, pod)
            resolver = server.app.image_resolver
            assert resolver is not None and resolver.wait_idle(30)
            second = admit(client, pod)
            metrics = client.get("/metrics").text
    assert first["allowed"] and unknown_recorded(pod, first)
    assert any("CUDA unknown" in w for w in first.get("warnings", ()))
    assert second["allowed"] and second.get("patch") and not second.get("warnings")
    # The runners are alternatives: the oldest (CUDA 12.8) is what a node must run.
    from cudasched.explain.eligibility import explain
    from cudasched.vocab.requirements import Requirement
    from cudasched.vocab.versions import parse_cuda

    wanted = explain(pod, state.fleet, "strict", kb, requirement=Requirement(parse_cuda("12.8")))
    assert eligible(state, pod, second) == {n.node for n in wanted.nodes if n.eligible}
    record = orjson.loads(base64.b64decode(second["patch"])).__repr__()
    assert "runners cuda_v12, cuda_v13 under /usr/lib/ollama" in record
    assert 'cudasched_webhook_image_layer_reads_total{outcome="answered"} 1.0' in metrics
    assert 'cudasched_webhook_image_layer_budget{limit="bytes"} 2.147483648e+09' in metrics
    assert 'cudasched_webhook_image_layer_budget{limit="concurrency"} 1.0' in metrics
    assert "cudasched_webhook_image_layer_bytes_total 0.0" not in metrics


def test_a_trickling_layer_never_holds_a_review(
    registry: Registry, state: ClusterState, kb: KnowledgeBase
) -> None:
    # A front that serves manifests at once and layer blobs 4 KiB per 50 ms (a stalled CDN):
    # the read runs into its deadline in the background while reviews are answered at once.
    noise = layer({"data/weights.bin": random.Random(4).randbytes(600_000)})
    push_layered(registry, "ml/trickle", "1", [BASE, RUNNERS, noise])
    target = registry.host

    class Trickle(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return

        def do_GET(self) -> None:
            reply = httpx.get(f"http://{target}{self.path}", headers=dict(self.headers))
            self.send_response(reply.status_code)
            for key in ("content-type", "docker-content-digest"):
                if key in reply.headers:
                    self.send_header(key, reply.headers[key])
            self.send_header("content-length", str(len(reply.content)))
            self.end_headers()
            step = 4096 if "/blobs/" in self.path else len(reply.content) or 1
            for at in range(0, len(reply.content), step):
                try:
                    self.wfile.write(reply.content[at : at + step])
                    self.wfile.flush()
                except OSError:
                    return
                if step == 4096:
                    time.sleep(0.05)

    with serving(Trickle) as port:
        front = f"127.0.0.1:{port}"
        pod = gpu_pod(f"{front}/ml/trickle:1")
        settings = config(front, deadlineSeconds=2)
        with serve_in_thread(state, config=settings, kb=kb) as server:
            tls = ssl.create_default_context(cadata=server.ca_pem.decode("ascii"))
            with httpx.Client(base_url=server.url, verify=tls, timeout=10) as client:
                took = []
                answers = []
                for _ in range(6):
                    started = time.monotonic()
                    answers.append(admit(client, pod))
                    took.append(time.monotonic() - started)
                    time.sleep(0.2)
                resolver = server.app.image_resolver
                assert resolver is not None and resolver.wait_idle(30)
                last = admit(client, pod)
                metrics = client.get("/metrics").text
    assert all(a["allowed"] and unknown_recorded(pod, a) for a in answers)
    assert not any("exceeded" in w for a in answers for w in a.get("warnings", ()))
    assert max(took) < 0.5  # the review's own deadline: none was answered by the failure mode
    assert unknown_recorded(pod, last)
    assert any("CUDA unknown" in w for w in last.get("warnings", ()))
    assert 'cudasched_webhook_image_layer_reads_total{outcome="unknown"} 1.0' in metrics
    assert 'reason="timeout"' not in metrics
