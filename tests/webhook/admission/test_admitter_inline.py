"""First-seen pods decided on the event loop when every costly step is remembered (issue 22).

``Admitter.answer_inline`` decides a pod on the event loop only when its compiled terms,
whether any node fits them and their merge with the pod's own affinity are all remembered;
otherwise it gives up (``None``) before telling anyone anything, and the review thread decides.
The answers must be exactly those of the thread path, warnings given once included.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest

from cudasched.knowledge import KnowledgeBase
from cudasched.settings.config import WebhookConfig
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.server.app import POD_PATH
from cudasched.webhook.server.assembly import build_app
from cudasched.webhook.state.clusterstate import ClusterState
from cudasched.webhook.state.source import StaticStateSource
from tests.support import synth


@pytest.fixture(scope="module")
def cluster() -> Any:
    return synth.make_cluster(300, 40, 200)


@pytest.fixture(scope="module")
def state(cluster: Any, kb: KnowledgeBase) -> ClusterState:
    return ClusterState.from_objects(
        cluster.nodes,
        cluster.inference_services,
        cluster.serving_runtimes,
        cluster.cluster_serving_runtimes,
        kb=kb,
    )


@pytest.mark.parametrize("memo", [True, False], ids=["memo", "no-memo"])
def test_inline_answers_are_the_thread_answers(
    cluster: Any, state: ClusterState, kb: KnowledgeBase, memo: bool
) -> None:
    """Every review twice: where the inline path answers, its answer is byte for byte the one
    an Admitter that always decides in full gives at the same point (its warnings said once
    included); where it gives up, the full decision follows as the server does."""
    settings = {} if memo else {"decisionCacheBytes": 0}
    fast = Admitter.from_config(WebhookConfig.from_mapping(settings), kb)
    full = Admitter.from_config(WebhookConfig.from_mapping({"decisionCacheBytes": 0}), kb)
    bodies = synth.review_bodies(cluster, 400)
    inline = deferred = 0
    for body in bodies * 2:
        expected = full.review("pod", body, state)
        found = fast.recall_body("pod", body, state)
        if found is None:
            prepared = fast.prepare("pod", body)
            found = fast.recall(prepared, state)
            if found is None:
                found = fast.answer_inline(prepared, state)
                if found is None:
                    deferred += 1
                    found = fast.answer(prepared, state)
                else:
                    inline += 1
        assert found[0] == expected
    assert deferred > 0  # the first pods of each requirement and affinity
    assert inline > len(bodies) // 2 if not memo else inline > 0


def test_a_deferred_attempt_says_nothing_once(
    cluster: Any, state: ClusterState, kb: KnowledgeBase
) -> None:
    """A pod whose decision carries a warning given once per process, its terms compiled and
    fitted but their merge with its affinity not remembered: the inline attempt gets as far as
    the merge and gives up there, and the thread's decision still carries the warning (it is
    only recorded as said once nothing can be deferred any more)."""
    full = Admitter.from_config(WebhookConfig.from_mapping({"decisionCacheBytes": 0}), kb)
    bodies = synth.review_bodies(cluster, 200)
    warned = next(
        (b for b in bodies if b"using cuda" in full.review("pod", b, state)),
        None,
    )
    assert warned is not None, "the synthetic cluster has runtimes whose label and image differ"
    fresh = Admitter.from_config(WebhookConfig(), kb)
    compile_ = fresh.placer.compile
    reached: list[str] = []

    def compile_in_full(*args: Any) -> Any:  # as if compiled and fitted before
        reached.append("compile")
        return contextvars.Context().run(compile_, *args)

    fresh.placer.compile = compile_in_full  # type: ignore[method-assign]
    prepared = fresh.prepare("pod", warned)
    assert fresh.answer_inline(prepared, state) is None  # the merge is not remembered
    assert reached == ["compile"]
    answer, _ = fresh.answer(prepared, state)
    assert b"using cuda" in answer


def test_the_server_decides_known_kinds_of_pods_on_the_loop(
    cluster: Any, state: ClusterState, kb: KnowledgeBase
) -> None:
    """Through the application with the decision memo off: the first pass hands the pods whose
    steps are new to review threads; the second pass, every step remembered, none."""
    config = WebhookConfig.from_mapping({"decisionCacheBytes": 0})
    app = build_app(config, StaticStateSource(state), kb=kb)
    handed: list[Any] = []
    submit = app._executor.submit

    def counted(*args: Any, **kwargs: Any) -> Any:
        handed.append(args)
        return submit(*args, **kwargs)

    app._executor.submit = counted  # type: ignore[method-assign]
    bodies = synth.review_bodies(cluster, 400)

    async def replay() -> list[int]:
        statuses = []
        for body in bodies:
            sent: list[dict[str, Any]] = []
            messages = [{"type": "http.request", "body": body, "more_body": False}]

            async def receive(messages: list[dict[str, Any]] = messages) -> dict[str, Any]:
                return messages.pop(0) if messages else {"type": "http.disconnect"}

            async def send(message: dict[str, Any], sent: list[dict[str, Any]] = sent) -> None:
                sent.append(message)

            scope = {
                "type": "http",
                "method": "POST",
                "path": POD_PATH,
                "headers": [(b"content-length", str(len(body)).encode())],
            }
            await app(scope, receive, send)
            statuses.append(sent[0]["status"])
        return statuses

    try:
        assert set(asyncio.run(replay())) == {200}
        first = len(handed)
        handed.clear()
        assert set(asyncio.run(replay())) == {200}
    finally:
        app.close()
    assert first > 0
    assert handed == []


def test_never_inline_with_the_image_resolver_on(
    cluster: Any, state: ClusterState, kb: KnowledgeBase
) -> None:
    """An image-config look-up may wait for a resolution in flight: with a config source the
    inline path always gives up, even for a pod whose every step is remembered."""

    class Configs:
        def config_for(self, image: str) -> None:
            return None

    adm = Admitter.from_config(WebhookConfig.from_mapping({"decisionCacheBytes": 0}), kb)
    resolving = Admitter(adm.config, kb, adm.images.with_configs(Configs()))  # type: ignore[arg-type]
    body = synth.review_bodies(cluster, 1)[0]
    adm.review("pod", body, state)  # every step remembered
    resolving.review("pod", body, state)  # the same steps, remembered the same way
    assert adm.answer_inline(adm.prepare("pod", body), state) is not None
    assert resolving.answer_inline(resolving.prepare("pod", body), state) is None
