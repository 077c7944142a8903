"""``imageMirrors`` entries that name a host route registry look-ups: the mirror first, the
canonical registry after it (containerd's hosts.toml order), against two real registries on
127.0.0.1 (a mirror and an origin), from the client, ``cudasched image --config`` and
``explain --resolve-images --config``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.knowledge.mirrors import parse_mirrors
from cudasched.registry.auth import Credentials, Keychain
from cudasched.registry.client import Limits, RegistryClient
from cudasched.registry.distribution import RegistryError
from cudasched.registry.mirrors import Route, routes_of
from tests.harness.controlplane.processes import free_port
from tests.support.registry import Registry, run_registry


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


ORIGIN_ENV = ["CUDA_VERSION=12.4.1", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"]
MIRROR_ENV = ["CUDA_VERSION=12.4.1", "NVIDIA_REQUIRE_CUDA=cuda>=12.4", "MIRRORED=1"]
USERS = {"mirror-reader": "m1rror"}


@pytest.fixture(scope="module")
def origin() -> Iterator[Registry]:
    with run_registry() as registry:
        registry.push_image("ml/llm", "7", ORIGIN_ENV)
        registry.push_image("ml/only-origin", "1", ORIGIN_ENV)
        yield registry


@pytest.fixture(scope="module")
def mirror() -> Iterator[Registry]:
    with run_registry() as registry:
        registry.push_image("proxy/ml/llm", "7", MIRROR_ENV)
        yield registry


@pytest.fixture(scope="module")
def locked_mirror() -> Iterator[Registry]:
    with run_registry(basic=USERS) as registry:
        registry.push_image("proxy/ml/llm", "7", MIRROR_ENV)
        yield registry


def through(mirror_host: str, origin: Registry, **kw: object) -> RegistryClient:
    mirrors = parse_mirrors({f"{mirror_host}/proxy": origin.host}, "image mirrors")
    return RegistryClient(
        plain_http=[origin.host, mirror_host],
        mirrors=mirrors,
        limits=Limits(retries=0, deadline_seconds=5),
        **kw,  # type: ignore[arg-type]
    )


def test_routes_cover_whole_segments_of_the_canonical_prefix() -> None:
    mirrors = parse_mirrors(
        {
            "harbor.corp/ngc-proxy": "nvcr.io/nvidia",
            "harbor.corp/hub": "docker.io",
            "alaudadockerhub/tritonserver": "nvidia/tritonserver",  # a rename: no route
        },
        "image mirrors",
    )
    found = {
        "ngc": routes_of("nvcr.io", "nvidia/tritonserver", mirrors),
        "hub": routes_of("registry-1.docker.io", "library/nginx", mirrors),
        "other path": routes_of("nvcr.io", "nvidiax/tritonserver", mirrors),
        "other host": routes_of("ghcr.io", "nvidia/tritonserver", mirrors),
    }
    assert found == {
        "ngc": [Route("harbor.corp", "ngc-proxy/tritonserver")],
        "hub": [Route("harbor.corp", "hub/library/nginx")],
        "other path": [],
        "other host": [],
    }


SEGMENT = st.from_regex(r"[a-z0-9]{1,4}(?:-[a-z0-9]{1,3})?", fullmatch=True)
PATHS = st.lists(SEGMENT, min_size=0, max_size=3).map("/".join)


@given(mirror_path=PATHS, canonical_path=PATHS, rest=st.lists(SEGMENT, min_size=1, max_size=3))
def test_a_route_and_the_tables_rename_are_inverse(
    mirror_path: str, canonical_path: str, rest: list[str]
) -> None:
    """Whatever the prefixes: a look-up of canonical/REST is routed to mirror/REST, and the
    table reads mirror/REST back as canonical/REST (one entry, both directions)."""
    key = "/".join(p for p in ("harbor.corp:8443", mirror_path) if p)
    value = "/".join(p for p in ("nvcr.io", canonical_path) if p)
    (mirror,) = parse_mirrors({key: value}, "image mirrors")
    path = "/".join(p for p in (canonical_path, *rest) if p)
    (route,) = routes_of("nvcr.io", path, [mirror])
    assert route.host == "harbor.corp:8443"
    assert mirror.rename("harbor.corp:8443", route.path) == path


def test_the_mirror_answers_first(origin: Registry, mirror: Registry) -> None:
    with through(mirror.host, origin) as client:
        config = client.resolve(f"{origin.host}/ml/llm:7")
    assert config.mirror == f"{mirror.host}/proxy/ml/llm"
    assert config.env.get("MIRRORED") == "1"


def test_a_mirror_without_the_image_falls_back_to_the_origin(
    origin: Registry, mirror: Registry
) -> None:
    with through(mirror.host, origin) as client:
        config = client.resolve(f"{origin.host}/ml/only-origin:1")
    assert (config.mirror, config.env.get("CUDA_VERSION")) == ("", "12.4.1")
    assert "MIRRORED" not in config.env


def test_an_unreachable_mirror_falls_back_to_the_origin(origin: Registry) -> None:
    with through(f"127.0.0.1:{free_port()}", origin) as client:
        config = client.resolve(f"{origin.host}/ml/llm:7")
    assert config.mirror == "" and config.env.get("CUDA_VERSION") == "12.4.1"


def test_when_both_fail_the_error_names_both(origin: Registry, mirror: Registry) -> None:
    with through(mirror.host, origin) as client, pytest.raises(RegistryError) as failed:
        client.resolve(f"{origin.host}/ml/absent:1")
    text = str(failed.value)
    assert failed.value.kind == "not-found"
    assert f"{origin.host}/ml/absent" in text and f"mirror {mirror.host}/proxy/ml/absent" in text


def test_the_origins_credentials_are_never_sent_to_the_mirror(
    origin: Registry, locked_mirror: Registry
) -> None:
    """Credentials listed for the origin only: the locked mirror asks for its own, gets none,
    and the look-up goes on to the origin."""
    origin_only = Keychain([(origin.host, Credentials("origin-user", "origin-pass"))])
    with through(locked_mirror.host, origin, keychain=origin_only) as client:
        config = client.resolve(f"{origin.host}/ml/llm:7")
    assert config.mirror == ""
    mirror_too = Keychain([(locked_mirror.host, Credentials(*next(iter(USERS.items()))))])
    with through(locked_mirror.host, origin, keychain=mirror_too) as client:
        assert client.resolve(f"{origin.host}/ml/llm:7").mirror.startswith(locked_mirror.host)


def test_image_and_explain_go_through_the_mirrors_of_config(
    origin: Registry, mirror: Registry, tmp_path: Path
) -> None:
    settings = tmp_path / "webhook.yaml"
    settings.write_text(yaml.safe_dump({"imageMirrors": {f"{mirror.host}/proxy": origin.host}}))
    image = f"{origin.host}/ml/llm:7"
    plain = ["--plain-http", origin.host, "--plain-http", mirror.host]
    shown = invoke(*["image", image, "-o", "json", "--config", str(settings), *plain])
    assert shown.exit_code == 0, shown.output
    row = json.loads(shown.stdout)["images"][0]
    assert (
        row["status"] == "known"
        and f"read from mirror {mirror.host}/proxy/ml/llm" in (row["source"])
    )
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "llm", "namespace": "ml"},
                "spec": {
                    "containers": [
                        {
                            "name": "llm",
                            "image": image,
                            "resources": {"limits": {"nvidia.com/gpu": 1}},
                        }
                    ]
                },
            }
        )
    )
    explained = invoke(
        *[
            "explain",
            "--workload",
            str(pod),
            "-o",
            "json",
            "--resolve-images",
            "--config",
            str(settings),
            *plain,
        ]
    )
    assert explained.exit_code == 0, explained.output
    assert f"read from mirror {mirror.host}/proxy/ml/llm" in explained.stdout
