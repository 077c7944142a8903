"""Fakes for the policy controller's unit tests: a lightkube AsyncClient over plain dicts
(resourceVersions, conflicts, refusals by namespace) and a watch cache that holds one
snapshot, with the builders of GPU pods and listed sources those tests share."""

from __future__ import annotations

from typing import Any

from cudasched.knowledge import KnowledgeBase
from cudasched.vocab.kinds import PLACEMENT_TABLE, POD
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.policy.controller import PolicyController
from cudasched.webhook.policy.sources import SOURCE_KINDS, SourceIndex
from cudasched.webhook.state.clusterstate import ClusterState
from tests.support.apierror import ApiError

JSON = dict[str, Any]


class _Obj:
    def __init__(self, data: JSON) -> None:
        self.data = data

    def to_dict(self) -> JSON:
        return dict(self.data)


class FakeApi:
    """get/list/create/replace/delete over plain dicts with resourceVersions (lightkube's
    AsyncClient, as far as the controller uses it)."""

    def __init__(self) -> None:
        self.store: dict[tuple[str, str, str], JSON] = {}
        self.version = 0
        self.writes = 0
        #: (verb, metadata as sent) of every create and replace, in order.
        self.sent: list[tuple[str, JSON]] = []
        #: namespace -> the refusal of every create there.
        self.refuse: dict[str, Exception] = {}

    @staticmethod
    def _kind(resource: Any) -> str:
        return str(resource._api_info.resource.kind)

    def _put(self, obj: JSON) -> _Obj:
        self.version += 1
        self.writes += 1
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.version)}}
        meta = obj["metadata"]
        self.store[(obj["kind"], meta.get("namespace") or "", meta["name"])] = obj
        return _Obj(obj)

    async def get(self, resource: Any, name: str, namespace: str | None = None) -> _Obj:
        found = self.store.get((self._kind(resource), namespace or "", name))
        if found is None:
            raise ApiError(404)
        return _Obj(found)

    async def create(self, obj: Any) -> _Obj:
        data = obj.to_dict()
        meta = data["metadata"]
        self.sent.append(("create", meta))
        if (refusal := self.refuse.get(meta.get("namespace") or "")) is not None:
            raise refusal
        if (data["kind"], meta.get("namespace") or "", meta["name"]) in self.store:
            raise ApiError(409)
        return self._put(data)

    async def replace(self, obj: Any) -> _Obj:
        data = obj.to_dict()
        meta = data["metadata"]
        self.sent.append(("replace", meta))
        old = self.store.get((data["kind"], meta.get("namespace") or "", meta["name"]))
        if old is None:
            raise ApiError(404)
        if meta.get("resourceVersion") != old["metadata"]["resourceVersion"]:
            raise ApiError(409)
        return self._put(data)

    async def delete(self, resource: Any, name: str, namespace: str | None = None) -> None:
        if self.store.pop((self._kind(resource), namespace or "", name), None) is None:
            raise ApiError(404)
        self.writes += 1

    async def list(self, resource: Any, labels: Any = None, namespace: Any = None) -> Any:
        for (kind, _, _), obj in list(self.store.items()):
            if kind == self._kind(resource):
                yield _Obj(obj)

    def tables(self) -> dict[str, JSON]:
        """The tables by ``namespace/name``."""
        return {f"{k[1]}/{k[2]}": v for k, v in self.store.items() if k[0] == PLACEMENT_TABLE.kind}


class FakeCache:
    """A synced watch cache of one snapshot; a knowledge swap rebuilds it with ``rebuild``
    (none: the snapshot stays) and bumps the generation, as the real cache does."""

    def __init__(self, state: ClusterState, rebuild: Any = None) -> None:
        self.state = state
        self.synced = True
        self.generation = 1
        self.rebuild = rebuild

    def use_knowledge(self, kb: KnowledgeBase) -> None:
        if self.rebuild is not None:
            self.state = self.rebuild(kb)
        self.generation += 1


def gpu_pod(name: str, image: str, namespace: str = "team") -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "serviceAccountName": "default",
            "containers": [
                {"name": "m", "image": image, "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
        },
    }


def controller_of(
    api: FakeApi, admitter: Admitter, state: ClusterState | FakeCache, who: str
) -> Any:
    """A replica named ``who`` over ``api``, deciding with ``admitter`` on ``state`` (a
    snapshot, or a cache that follows the knowledge)."""
    controller = PolicyController(
        admitter,
        FakeCache(state) if isinstance(state, ClusterState) else state,
        api,
        namespace="cudasched",
        identity=who,  # type: ignore[arg-type]
    )
    return controller


def listed(sources: SourceIndex, *pods: JSON) -> None:
    """Every source kind listed, the Pods being ``pods``."""
    for kind in SOURCE_KINDS:
        stored = (
            {
                (p["metadata"]["namespace"], p["metadata"]["name"]): SourceIndex.transform(p)
                for p in pods
            }
            if kind is POD
            else {}
        )
        sources.on_listed(kind, {}, stored)
