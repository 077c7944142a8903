"""The node agent's label patch under the ValidatingAdmissionPolicy ``cudasched manifests``
installs, enforced by the real API server against a real node-bound ServiceAccount token.

The agent's ServiceAccount, RBAC, policy and binding are applied from ``cudasched manifests``.
A pod of that ServiceAccount is bound to one node (no kubelet runs it); a TokenRequest with
``boundObjectRef`` to that pod gives the token a kubelet would mount, whose user info carries
``authentication.kubernetes.io/node-name``. With it: the real ``cudasched agent --oneshot``
(nvidia-smi answered from a recorded H100 report) publishes its labels on its own node; its
own node's owned keys may change; another node, a foreign key, an annotation or the spec may not.
"""

from __future__ import annotations

import copy
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.harness.controlplane.plane import ControlPlane
from tests.harness.fleet import TEMPLATE_LABEL, cudasched_command
from tests.harness.kube import Api, ApiError
from tests.harness.webhook import manifests

NS = "cudasched"
SA = "cudasched-agent"
REPO = Path(__file__).resolve().parents[2]
SMI = REPO / "tests" / "data" / "nvidia-smi"


@dataclass
class Agent:
    api: Api
    token: str
    kubeconfig: Path
    node: str
    other: str


def _agent_objects() -> list[dict[str, object]]:
    kinds = {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    return [
        o
        for o in manifests("--self-signed")
        if o["kind"] == "Namespace" or (o["kind"] in kinds and "agent" in o["metadata"]["name"])  # type: ignore[index]
    ]


@pytest.fixture(scope="module")
def agent(
    plane: ControlPlane, api: Api, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Agent]:
    tmp = tmp_path_factory.mktemp("agent")
    objects = tmp / "agent.yaml"
    objects.write_text(yaml.safe_dump_all(_agent_objects()))
    plane.kubectl("apply", "--validate=strict", "-f", str(objects))
    api.wait_for(
        "the agent's ServiceAccount",
        lambda: api.exists(f"/api/v1/namespaces/{NS}/serviceaccounts/{SA}"),
    )
    nodes = list(api.list("/api/v1/nodes"))
    h100 = [
        n["metadata"]["name"]
        for n in nodes
        if n["metadata"]["labels"].get("nvidia.com/gpu.product") == "NVIDIA-H100-80GB-HBM3"
    ]
    node, other = h100[0], h100[1]
    saved = {n: copy.deepcopy(api.get(f"/api/v1/nodes/{n}")["metadata"]) for n in (node, other)}
    pod = api.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "agent-e2e", "namespace": NS},
            "spec": {
                "serviceAccountName": SA,
                "nodeName": node,
                "containers": [{"name": "agent", "image": "cudasched/cudasched:0.1.0"}],
                "terminationGracePeriodSeconds": 0,
            },
        }
    )
    issued = api.call(
        "POST",
        f"/api/v1/namespaces/{NS}/serviceaccounts/{SA}/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": 3600,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": "agent-e2e",
                    "uid": pod["metadata"]["uid"],
                },
            },
        },
    )
    token = issued["status"]["token"]
    kubeconfig = tmp / "agent.kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "e2e",
                        "cluster": {
                            "server": plane.server,
                            "certificate-authority": str(plane.pki.ca_cert),
                        },
                    }
                ],
                "users": [{"name": "agent", "user": {"token": token}}],
                "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "agent"}}],
                "current-context": "e2e",
            }
        )
    )
    with Api(plane.credentials().with_token(token)) as agent_api:
        # The API server enforces a new policy once its informers have the policy and its
        # binding and the CEL is compiled: eventually, not at once. Wait until a (dry-run)
        # change to another node is refused before any test relies on the policy.
        api.wait_for(
            "the agent's ValidatingAdmissionPolicy to be enforced",
            lambda: _refused_by_policy(agent_api, other),
        )
        yield Agent(agent_api, token, kubeconfig, node, other)
    api.call(
        "DELETE",
        f"/api/v1/namespaces/{NS}/pods/agent-e2e",
        params={"gracePeriodSeconds": "0"},
    )
    for name, meta in saved.items():  # give the nodes their label sets back
        current = api.get(f"/api/v1/nodes/{name}")["metadata"]
        patch = {k: None for k in current.get("labels", {}) if k not in meta["labels"]}
        patch.update(meta["labels"])
        api.patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": patch}})


def _refused_by_policy(agent_api: Api, node: str) -> bool:
    response = agent_api.send(
        "PATCH",
        f"/api/v1/nodes/{node}",
        body={"metadata": {"labels": {"cudasched.io/probe.status": "ok"}}},
        params={"dryRun": "All"},
        content_type="application/merge-patch+json",
    )
    return response.status_code == 403 and "cudasched-agent" in response.text


def _labels(api: Api, node: str, labels: dict[str, str | None]) -> dict[str, object]:
    return api.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": labels}})


def test_token_is_bound_to_the_node(agent: Agent) -> None:
    review = agent.api.call(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    user = review["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{NS}:{SA}"
    assert user["extra"]["authentication.kubernetes.io/node-name"] == [agent.node]


def test_the_real_agent_publishes_its_own_node(
    agent: Agent, api: Api, tmp_path: Path, plane: ControlPlane
) -> None:
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        f'if [ "$*" = "-q -x" ]; then cat {SMI / "xml-580-h100x2.xml"}; '
        f"else cat {SMI / 'plain-570-h100x2.txt'}; fi\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {
        "PATH": f"{fake.parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "KUBECONFIG": str(agent.kubeconfig),
    }
    done = subprocess.run(
        [
            *cudasched_command(),
            "agent",
            "--oneshot",
            "--node-name",
            agent.node,
            "--kubeconfig",
            str(agent.kubeconfig),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    labels = api.get(f"/api/v1/nodes/{agent.node}")["metadata"]["labels"]
    assert labels["cudasched.io/driver.version"] == "580.95.05"
    assert labels["cudasched.io/cuda.code"] == "13000"
    assert labels["cudasched.io/probe.status"] == "ok"
    assert labels[TEMPLATE_LABEL]  # a foreign label it did not touch is still there
    # and the same command for another node is refused by the policy
    refused = subprocess.run(
        [
            *cudasched_command(),
            "agent",
            "--oneshot",
            "--node-name",
            agent.other,
            "--kubeconfig",
            str(agent.kubeconfig),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert refused.returncode != 0
    assert "may only change the node it runs on" in refused.stderr + refused.stdout


def test_own_node_owned_keys_allowed(agent: Agent) -> None:
    node = _labels(agent.api, agent.node, {"cudasched.io/gpu.arch": "hopper"})
    assert node["metadata"]["labels"]["cudasched.io/gpu.arch"] == "hopper"  # type: ignore[index]
    node = _labels(agent.api, agent.node, {"cudasched.io/probe.reason": None})
    assert "cudasched.io/probe.reason" not in node["metadata"]["labels"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("where", "patch", "message"),
    [
        (
            "other",
            {"metadata": {"labels": {"cudasched.io/cuda.code": "99999"}}},
            "may only change the node it runs on",
        ),
        (
            "own",
            {"metadata": {"labels": {"nvidia.com/gpu.product": "NVIDIA-B200"}}},
            "may only change the labels it owns",
        ),
        (
            "own",
            {"metadata": {"labels": {"node-role.kubernetes.io/gpu": ""}}},
            "may only change the labels it owns",
        ),
        ("own", {"spec": {"unschedulable": True}}, "may only change node labels"),
        (
            "own",
            {"metadata": {"annotations": {"cudasched.io/probed-at": "never"}}},
            "may only change node labels",
        ),
    ],
    ids=["other-node", "foreign-key", "new-foreign-key", "spec", "annotation"],
)
def test_denied(agent: Agent, where: str, patch: dict[str, object], message: str) -> None:
    node = agent.node if where == "own" else agent.other
    with pytest.raises(ApiError) as denied:
        agent.api.patch(f"/api/v1/nodes/{node}", patch)
    assert denied.value.status_code == 403
    assert message in denied.value.message
    assert "cudasched-agent-cudasched-own-node" in denied.value.message
