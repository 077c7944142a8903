"""The client factory: where the configuration comes from, in order, and one-line errors.

Kubeconfig files, service-account directories and the environment are made in ``tmp_path``;
the clients built talk HTTP to the kmock API server where a request is needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from cudasched.kube.client import ClusterConfigError, load_config, make_client
from cudasched.vocab.errors import InputError


def write_kubeconfig(
    path: Path,
    *,
    current: str | None = "dev",
    contexts: dict[str, dict[str, Any]] | None = None,
    clusters: dict[str, str] | None = None,
    users: dict[str, dict[str, Any]] | None = None,
) -> Path:
    clusters = clusters or {"dev": "https://dev.example:6443", "prod": "https://prod.example:6443"}
    contexts = contexts or {
        "dev": {"cluster": "dev", "user": "me"},
        "prod": {"cluster": "prod", "user": "me", "namespace": "ml"},
    }
    users = users if users is not None else {"me": {"token": "t0ken"}}
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": n, "cluster": {"server": s}} for n, s in clusters.items()],
        "contexts": [{"name": n, "context": c} for n, c in contexts.items()],
        "users": [{"name": n, "user": u} for n, u in users.items()],
    }
    if current is not None:
        doc["current-context"] = current
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No in-cluster variables, no $KUBECONFIG, an empty home: each test adds what it needs."""
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def service_account(directory: Path, namespace: str | None = "cudasched") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text("sa-token\n")
    if namespace is not None:
        (directory / "namespace").write_text(namespace)
    return directory


def in_cluster(monkeypatch: pytest.MonkeyPatch, host: str = "10.96.0.1") -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")


def problem(exc_info: pytest.ExceptionInfo[ClusterConfigError]) -> str:
    message = str(exc_info.value)
    assert "\n" not in message
    assert message.startswith("no usable Kubernetes configuration: ")
    assert isinstance(exc_info.value, InputError)
    return exc_info.value.problem


# --------------------------------------------------------------------------- explicit file


def test_explicit_file_uses_its_current_context(env: Path, tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc")
    resolved = load_config(kubeconfig=path)
    assert resolved.settings.cluster.server == "https://dev.example:6443"
    assert resolved.settings.namespace == "default"
    assert resolved.origin == f"context 'dev' of kubeconfig file {str(path)!r}"


def test_explicit_context_selects_another_cluster(env: Path, tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc")
    resolved = load_config(kubeconfig=str(path), context="prod")
    assert resolved.settings.cluster.server == "https://prod.example:6443"
    assert resolved.settings.namespace == "ml"


def test_explicit_file_wins_over_in_cluster_and_environment(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sa = service_account(tmp_path / "sa")
    in_cluster(monkeypatch)
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "env-kc", current="prod")))
    path = write_kubeconfig(tmp_path / "kc")
    resolved = load_config(kubeconfig=path, service_account_dir=sa)
    assert resolved.settings.cluster.server == "https://dev.example:6443"


def test_unknown_context_names_file_and_known_contexts(env: Path, tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc")
    with pytest.raises(ClusterConfigError) as exc_info:
        load_config(kubeconfig=path, context="staging")
    assert problem(exc_info) == (
        f"kubeconfig file {str(path)!r} has no context 'staging' (contexts: dev, prod)"
    )


def test_unknown_current_context(env: Path, tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", current="gone")
    with pytest.raises(ClusterConfigError) as exc_info:
        load_config(kubeconfig=path)
    assert "has no context 'gone'" in problem(exc_info)


def test_missing_file(env: Path, tmp_path: Path) -> None:
    path = tmp_path / "nope"
    with pytest.raises(ClusterConfigError) as exc_info:
        load_config(kubeconfig=path)
    assert problem(exc_info) == f"kubeconfig file {str(path)!r} does not exist"


def test_directory_instead_of_file(env: Path, tmp_path: Path) -> None:
    with pytest.raises(ClusterConfigError) as exc_info:
        load_config(kubeconfig=tmp_path)
    assert problem(exc_info).endswith("is a directory, not a file")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("clusters: [\n", "is not valid YAML: "),
        ("- just\n- a list\n", "is not a kubeconfig (expected a mapping"),
        ("clusters: {a: b}\n", "clusters is not a list of entries"),
        ("contexts: [{context: {cluster: a}}]\n", "an entry of contexts lacks its name"),
        (
            "clusters: [{name: a, cluster: {server: 5}}]\ncontexts: []\n",
            "is not a kubeconfig: ",
        ),
    ],
    ids=["yaml", "not-a-mapping", "clusters-mapping", "nameless-context", "server-type"],
)
def test_malformed_files(env: Path, tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "kc"
    path.write_text(text)
    with pytest.raises(ClusterConfigError) as exc_info:
        load_config(kubeconfig=path, context="x")
    assert needle in problem(exc_info)


def test_no_current_context(env: Path, tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", current=None)
    with pytest.raises(ClusterConfigError) as exc_info:
        load_config(kubeconfig=path)
    assert problem(exc_info) == (
        f"kubeconfig file {str(path)!r} sets no current-context and none was chosen "
        "(contexts: dev, prod)"
    )


def test_context_naming_undefined_cluster_or_user(env: Path, tmp_path: Path) -> None:
    path = write_kubeconfig(
        tmp_path / "kc",
        contexts={"dev": {"cluster": "lost"}, "prod": {"cluster": "prod", "user": "ghost"}},
    )
    with pytest.raises(ClusterConfigError) as exc_info:
        load_config(kubeconfig=path)
    assert problem(exc_info) == (
        f"context 'dev' of kubeconfig file {str(path)!r} names cluster 'lost', which is not defined"
    )
    with pytest.raises(ClusterConfigError) as exc_info:
        load_config(kubeconfig=path, context="prod")
    assert "names user 'ghost', which is not defined" in problem(exc_info)


def test_context_without_user_is_anonymous(env: Path, tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", contexts={"dev": {"cluster": "dev"}}, users={})
    resolved = load_config(kubeconfig=path)
    assert resolved.settings.user is not None and resolved.settings.user.token is None


# --------------------------------------------------------------------------- in-cluster


def test_in_cluster_service_account(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sa = service_account(tmp_path / "sa")
    in_cluster(monkeypatch)
    # In a pod the in-cluster configuration wins over $KUBECONFIG and ~/.kube/config.
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kc")))
    write_kubeconfig(env / ".kube" / "config")
    resolved = load_config(service_account_dir=sa)
    settings = resolved.settings
    assert settings.cluster.server == "https://10.96.0.1:443"
    assert settings.cluster.certificate_auth == str(sa / "ca.crt")
    assert settings.user is not None and settings.user.token_file == str(sa / "token")
    assert settings.namespace == "cudasched"
    assert resolved.origin == f"the in-cluster service account ({sa})"


def test_in_cluster_ipv6_host_and_missing_namespace_file(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sa = service_account(tmp_path / "sa", namespace=None)
    in_cluster(monkeypatch, host="fd00::1")
    settings = load_config(service_account_dir=sa).settings
    assert settings.cluster.server == "https://[fd00::1]:443"
    assert settings.namespace == "default"


def test_in_cluster_needs_both_variables_and_a_token(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kc = write_kubeconfig(tmp_path / "kc")
    monkeypatch.setenv("KUBECONFIG", str(kc))
    sa = service_account(tmp_path / "sa")
    # A token but no service variables: not in a cluster.
    assert "(from $KUBECONFIG)" in load_config(service_account_dir=sa).origin
    # Service variables but no token: not in a cluster either.
    in_cluster(monkeypatch)
    empty = tmp_path / "empty-sa"
    empty.mkdir()
    assert "(from $KUBECONFIG)" in load_config(service_account_dir=empty).origin


def test_context_skips_in_cluster(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sa = service_account(tmp_path / "sa")
    in_cluster(monkeypatch)
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kc")))
    resolved = load_config(context="prod", service_account_dir=sa)
    assert resolved.settings.cluster.server == "https://prod.example:6443"


def test_in_cluster_without_ca_file_fails_when_the_client_is_made(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sa = service_account(tmp_path / "sa")
    in_cluster(monkeypatch)
    with pytest.raises(ClusterConfigError) as exc_info:
        make_client(service_account_dir=sa)
    assert problem(exc_info).startswith(f"cannot use the in-cluster service account ({sa}): ")


# --------------------------------------------------------------------------- $KUBECONFIG, ~


def test_kubeconfig_variable(env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kc = write_kubeconfig(tmp_path / "kc", current="prod")
    write_kubeconfig(env / ".kube" / "config")  # not read: $KUBECONFIG wins
    monkeypatch.setenv("KUBECONFIG", str(kc))
    resolved = load_config(service_account_dir=tmp_path / "no-sa")
    assert resolved.settings.cluster.server == "https://prod.example:6443"
    assert resolved.origin == f"context 'prod' of kubeconfig file {str(kc)!r} (from $KUBECONFIG)"


def test_kubeconfig_variable_list_skips_missing_files(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kc = write_kubeconfig(tmp_path / "second", current="prod")
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'first'}:{kc}")
    resolved = load_config(service_account_dir=tmp_path / "no-sa")
    assert resolved.settings.cluster.server == "https://prod.example:6443"


def test_kubeconfig_variable_naming_missing_files(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_kubeconfig(env / ".kube" / "config")  # no fallback to it, as with kubectl
    missing = tmp_path / "missing"
    monkeypatch.setenv("KUBECONFIG", str(missing))
    with pytest.raises(ClusterConfigError) as exc_info:
        load_config(service_account_dir=tmp_path / "no-sa")
    assert (
        problem(exc_info) == f"kubeconfig file {str(missing)!r} (from $KUBECONFIG) does not exist"
    )
    monkeypatch.setenv("KUBECONFIG", f"{missing}:{tmp_path / 'other'}")
    with pytest.raises(ClusterConfigError) as exc_info:
        load_config(service_account_dir=tmp_path / "no-sa")
    assert problem(exc_info).startswith("none of the kubeconfig files in $KUBECONFIG exists (")


def test_home_kube_config(env: Path, tmp_path: Path) -> None:
    kc = write_kubeconfig(env / ".kube" / "config")
    resolved = load_config(service_account_dir=tmp_path / "no-sa")
    assert resolved.settings.cluster.server == "https://dev.example:6443"
    assert resolved.origin == f"context 'dev' of kubeconfig file {str(kc)!r}"


def test_no_configuration_found(env: Path, tmp_path: Path) -> None:
    with pytest.raises(ClusterConfigError) as exc_info:
        load_config(service_account_dir=tmp_path / "no-sa")
    assert problem(exc_info) == (
        "not in a cluster (KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set), "
        f"$KUBECONFIG is not set and {str(env / '.kube' / 'config')!r} does not exist"
    )


def test_no_configuration_found_in_a_pod_without_token(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_cluster(monkeypatch)
    with pytest.raises(ClusterConfigError) as exc_info:
        load_config(service_account_dir=tmp_path / "no-sa")
    assert problem(exc_info).startswith(
        f"not in a cluster (no service account token at {str(tmp_path / 'no-sa' / 'token')!r})"
    )


def test_no_configuration_found_for_a_context(env: Path, tmp_path: Path) -> None:
    with pytest.raises(ClusterConfigError) as exc_info:
        load_config(context="prod", service_account_dir=tmp_path / "no-sa")
    assert problem(exc_info).startswith("context 'prod' was asked for, $KUBECONFIG is not set")


# --------------------------------------------------------------------------- server, client


def test_server_is_anonymous_and_ignores_everything_else(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kc")))
    resolved = load_config(server="http://127.0.0.1:8001", kubeconfig=tmp_path / "kc")
    assert resolved.settings.cluster.server == "http://127.0.0.1:8001"
    assert resolved.settings.user is not None and resolved.settings.user.token is None
    assert resolved.origin == "API server http://127.0.0.1:8001"
    with pytest.raises(ClusterConfigError) as exc_info:
        load_config(server="127.0.0.1:8001")
    assert problem(exc_info) == "API server '127.0.0.1:8001' is not an http:// or https:// URL"


def test_broken_client_certificate_is_reported_with_its_context(env: Path, tmp_path: Path) -> None:
    path = write_kubeconfig(
        tmp_path / "kc",
        users={"me": {"client-certificate": "missing.crt", "client-key": "missing.key"}},
    )
    with pytest.raises(ClusterConfigError) as exc_info:
        make_client(kubeconfig=path)
    assert problem(exc_info).startswith(
        f"cannot use context 'dev' of kubeconfig file {str(path)!r}: "
    )


async def test_client_talks_to_the_configured_server_with_its_field_manager(
    env: Path, tmp_path: Path, kmock: Any
) -> None:
    from lightkube.resources.core_v1 import Node
    from lightkube.types import PatchType

    kmock.objects[kmock.resource("v1/nodes"), None, "n1"] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1"},
    }
    path = write_kubeconfig(
        tmp_path / "kc",
        clusters={"mock": str(kmock.url).rstrip("/")},
        contexts={"mock": {"cluster": "mock", "user": "me"}},
        current="mock",
    )
    client = make_client(kubeconfig=path, field_manager="cudasched-test", timeout=3.0)
    try:
        patch = {"metadata": {"labels": {"a": "b"}}}
        await client.patch(Node, "n1", patch, patch_type=PatchType.MERGE)
    finally:
        await client.close()
    (request,) = [r for r in kmock if str(r.method).lower().endswith("patch")]
    assert request.url.query.get("fieldManager") == "cudasched-test"
    assert request.headers["Authorization"] == "Bearer t0ken"


# --------------------------------------------------------------------------- merged $KUBECONFIG


def test_kubeconfig_variable_files_are_merged_as_kubectl_merges_them(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27: ``--context other`` of the second file works; the first file's entries win."""
    first = write_kubeconfig(
        tmp_path / "a" / "config",
        current="dev",
        clusters={"dev": "https://dev.example:6443"},
        contexts={"dev": {"cluster": "dev", "user": "me"}},
        users={"me": {"token": "first-token"}},
    )
    second = write_kubeconfig(
        tmp_path / "b" / "config",
        current="other",  # not used: the first file set current-context
        clusters={"dev": "https://shadowed.example:6443", "other": "https://other.example:6443"},
        contexts={
            "dev": {"cluster": "other", "user": "me"},  # shadowed by the first file's
            "other": {"cluster": "other", "user": "me", "namespace": "ml"},
        },
        users={"me": {"token": "second-token", "tokenFile": "t"}},  # shadowed whole
    )
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'missing'}::{second}")
    default = load_config(service_account_dir=tmp_path / "no-sa")
    assert default.settings.context_name == "dev"
    assert default.settings.cluster.server == "https://dev.example:6443"
    assert default.origin == f"context 'dev' of kubeconfig file {str(first)!r} (from $KUBECONFIG)"
    other = load_config(context="other", service_account_dir=tmp_path / "no-sa")
    assert other.settings.cluster.server == "https://other.example:6443"
    assert other.settings.namespace == "ml"
    assert other.settings.user.token == "first-token"
    assert other.settings.user.token_file is None
    assert other.origin == f"context 'other' of kubeconfig file {str(second)!r} (from $KUBECONFIG)"


def test_merged_current_context_comes_from_the_first_file_that_sets_it(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = write_kubeconfig(tmp_path / "a", current=None)
    second = write_kubeconfig(tmp_path / "b", current="prod")
    monkeypatch.setenv("KUBECONFIG", f"{first}:{second}")
    resolved = load_config(service_account_dir=tmp_path / "no-sa")
    assert resolved.settings.context_name == "prod"
    with pytest.raises(ClusterConfigError) as exc_info:
        load_config(context="nope", service_account_dir=tmp_path / "no-sa")
    assert problem(exc_info) == (
        f"the kubeconfig files of $KUBECONFIG ({first}, {second}) has no context 'nope' "
        "(contexts: dev, prod)"
    )


def test_merged_relative_paths_stay_relative_to_their_own_file(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = write_kubeconfig(
        tmp_path / "a" / "config",
        current="dev",
        contexts={"dev": {"cluster": "dev", "user": "me"}},
        clusters={"dev": "https://dev.example:6443"},
    )
    second = tmp_path / "b" / "config"
    second.parent.mkdir()
    second.write_text(
        yaml.safe_dump(
            {
                "clusters": [
                    {
                        "name": "ca",
                        "cluster": {
                            "server": "https://ca.example",
                            "certificate-authority": "ca.crt",
                        },
                    }
                ],
                "users": [
                    {
                        "name": "cert",
                        "user": {
                            "client-certificate": "certs/me.crt",
                            "client-key": "/abs/me.key",
                            "exec": {"apiVersion": "v1", "command": "./bin/login"},
                        },
                    },
                    {"name": "path", "user": {"exec": {"apiVersion": "v1", "command": "aws"}}},
                ],
                "contexts": [{"name": "ca", "context": {"cluster": "ca", "user": "cert"}}],
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", f"{first}:{second}")
    resolved = load_config(context="ca", service_account_dir=tmp_path / "no-sa")
    assert resolved.settings.cluster.certificate_auth == str(second.parent / "ca.crt")
    assert resolved.settings.user.client_cert == str(second.parent / "certs/me.crt")
    assert resolved.settings.user.client_key == "/abs/me.key"
    assert resolved.settings.user.exec.command == str(second.parent / "bin/login")


def test_a_merged_file_that_is_not_a_kubeconfig_is_named(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = write_kubeconfig(tmp_path / "a")
    broken = tmp_path / "b"
    broken.write_text("clusters: 3\n")
    monkeypatch.setenv("KUBECONFIG", f"{first}:{broken}")
    with pytest.raises(ClusterConfigError) as exc_info:
        load_config(service_account_dir=tmp_path / "no-sa")
    assert problem(exc_info) == (
        f"kubeconfig file {str(broken)!r} (from $KUBECONFIG) is not a kubeconfig: clusters is "
        "not a list of entries"
    )
