"""The one factory of Kubernetes API clients: where the configuration comes from, and one
line that says what is wrong with it when it is unusable.

Sources, first match wins:

1. ``server``: an API server URL used without credentials and without the environment's
   proxies (``kubectl proxy``, a test API server);
2. ``kubeconfig``: that file, with ``context`` or else the file's ``current-context``;
3. the in-cluster service account: ``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT`` set
   and a token mounted in the service-account directory (skipped when a ``context`` is asked
   for: a context names a kubeconfig entry);
4. ``$KUBECONFIG``: the listed files that exist, merged as kubectl merges them (the first file
   to set a map key of ``clusters``, ``contexts`` or ``users`` wins, the entry kept whole; the
   first ``current-context`` set wins; a relative path in an entry is relative to the file it
   is in): :func:`merged_kubeconfig`;
5. ``~/.kube/config``.

A context without a user connects anonymously, as kubectl does. Every problem raises
:class:`ClusterConfigError`, an :class:`~cudasched.vocab.errors.InputError` whose message is one
line naming the file or context and what is wrong with it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from cudasched.vocab.errors import InputError, one_line

if TYPE_CHECKING:
    # re-exported: the client type the webhook's watch cache annotates with
    from lightkube import AsyncClient as AsyncClient
    from lightkube.config.kubeconfig import KubeConfig, SingleConfig

__all__ = [
    "DEFAULT_KUBECONFIG",
    "SERVICE_ACCOUNT_DIR",
    "ClientConfig",
    "ClusterConfigError",
    "configured",
    "load_config",
    "make_client",
    "merged_kubeconfig",
]

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_KUBECONFIG = "~/.kube/config"
DEFAULT_TIMEOUT_SECONDS = 10.0


class ClusterConfigError(InputError):
    """No usable Kubernetes configuration; ``problem`` says where and what, in one line."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(f"no usable Kubernetes configuration: {problem}")


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """A resolved configuration: lightkube's single-context ``settings`` and ``origin``, the
    words naming where they came from (``context 'prod' of kubeconfig file '/x'``)."""

    settings: SingleConfig
    origin: str


def load_config(
    *,
    kubeconfig: str | os.PathLike[str] | None = None,
    context: str | None = None,
    server: str | None = None,
    service_account_dir: str | os.PathLike[str] = SERVICE_ACCOUNT_DIR,
) -> ClientConfig:
    """Resolve the configuration from the sources in the module's order (the environment is
    read now). Raises :class:`ClusterConfigError`."""
    if server is not None:
        return _from_server(server)
    if kubeconfig is not None:
        path = Path(kubeconfig).expanduser()
        return _from_file(path, f"kubeconfig file {str(kubeconfig)!r}", context)
    environ = os.environ
    if context is None:
        in_cluster = _from_service_account(Path(service_account_dir), environ)
        if isinstance(in_cluster, ClientConfig):
            return in_cluster
        searched = f"not in a cluster ({in_cluster})"
    else:
        searched = f"context {context!r} was asked for"
    listed = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        existing = [entry for entry in listed if Path(entry).expanduser().exists()]
        if len(existing) == 1:
            path = Path(existing[0]).expanduser()
            return _from_file(path, f"kubeconfig file {existing[0]!r} (from $KUBECONFIG)", context)
        if existing:
            return _from_files(existing, context)
        if len(listed) == 1:
            raise ClusterConfigError(
                f"kubeconfig file {listed[0]!r} (from $KUBECONFIG) does not exist"
            )
        raise ClusterConfigError(
            f"none of the kubeconfig files in $KUBECONFIG exists ({', '.join(listed)})"
        )
    default = Path(DEFAULT_KUBECONFIG).expanduser()
    if default.exists():
        return _from_file(default, f"kubeconfig file {str(default)!r}", context)
    raise ClusterConfigError(
        f"{searched}, $KUBECONFIG is not set and {str(default)!r} does not exist"
    )


def configured(
    service_account_dir: str | os.PathLike[str] = SERVICE_ACCOUNT_DIR,
) -> bool:
    """Whether a cluster is configured at all, as kubectl would find one: a kubeconfig file
    that exists (one of ``$KUBECONFIG``'s when it is set, else ``~/.kube/config``) or the
    in-cluster service account. Only existence is looked at: a configured but broken file is
    configured, and :func:`load_config` says what is wrong with it."""
    environ = os.environ
    if not isinstance(_from_service_account(Path(service_account_dir), environ), str):
        return True
    listed = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        return any(Path(p).expanduser().exists() for p in listed)
    return Path(DEFAULT_KUBECONFIG).expanduser().exists()


def make_client(
    *,
    kubeconfig: str | os.PathLike[str] | None = None,
    context: str | None = None,
    server: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    field_manager: str | None = None,
    service_account_dir: str | os.PathLike[str] = SERVICE_ACCOUNT_DIR,
) -> AsyncClient:
    """A lightkube ``AsyncClient`` for the resolved configuration (see :func:`load_config`).

    ``timeout`` bounds each API call (watches have no read timeout); ``field_manager`` is sent
    with every write; a request the server asks to send again (429, or a 5xx with
    ``Retry-After``) is sent again after the wait it names (:mod:`cudasched.kube.retryafter`).
    Certificate and key files are loaded now, so a broken one is reported here, not at the
    first request. Raises :class:`ClusterConfigError`.
    """
    resolved = load_config(
        kubeconfig=kubeconfig,
        context=context,
        server=server,
        service_account_dir=service_account_dir,
    )
    from httpx2 import AsyncHTTPTransport, Timeout  # lightkube (>= 1.0) is built on httpx2
    from lightkube import AsyncClient, ConfigError
    from lightkube.config.client_adapter import verify_cluster
    from lightkube.config.models import User

    from cudasched.kube.retryafter import RetryAfterTransport

    settings = resolved.settings
    trust_env = server is None
    try:
        # A transport of our own (requests the server asks to send again are sent again)
        # carries the TLS lightkube would give its own: the cluster's CA, the user's
        # certificate.
        user = settings.user or User()
        tls = verify_cluster(settings.cluster, user, settings.abs_file, trust_env)
        return AsyncClient(
            settings,
            timeout=Timeout(timeout),
            field_manager=field_manager,
            trust_env=trust_env,
            transport=RetryAfterTransport(AsyncHTTPTransport(verify=tls)),
        )
    except (ConfigError, OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise ClusterConfigError(f"cannot use {resolved.origin}: {one_line(exc)}") from None


# --------------------------------------------------------------------------- sources


def _from_server(server: str) -> ClientConfig:
    from lightkube.config.kubeconfig import KubeConfig
    from lightkube.config.models import Cluster, User

    if not server.startswith(("http://", "https://")):
        raise ClusterConfigError(f"API server {server!r} is not an http:// or https:// URL")
    # An anonymous user: lightkube insists on one, a proxy or test API server needs none.
    config = KubeConfig.from_one(cluster=Cluster(server=server), user=User(), namespace="default")
    return ClientConfig(_select(config, None, f"API server {server!r}"), f"API server {server}")


def _from_service_account(directory: Path, environ: Mapping[str, str]) -> ClientConfig | str:
    """The in-cluster configuration, or why this process is not in a cluster."""
    from lightkube.config.kubeconfig import KubeConfig
    from lightkube.config.models import Cluster, User

    host = environ.get("KUBERNETES_SERVICE_HOST")
    port = environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        return "KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set"
    token = directory / "token"
    if not token.is_file():
        return f"no service account token at {str(token)!r}"
    try:
        namespace = (directory / "namespace").read_text(encoding="utf-8").strip() or None
    except OSError:
        namespace = None
    if ":" in host:  # IPv6
        host = f"[{host}]"
    cluster = Cluster(server=f"https://{host}:{port}", certificate_auth=str(directory / "ca.crt"))
    # The token is read from its file on every 401: the kubelet rotates it.
    config = KubeConfig.from_one(
        cluster=cluster, user=User(token_file=str(token)), namespace=namespace
    )
    origin = f"the in-cluster service account ({directory})"
    return ClientConfig(_select(config, None, origin), origin)


def _from_file(path: Path, label: str, context: str | None) -> ClientConfig:
    config = _read_kubeconfig(path, label)
    settings = _select(config, context, label)
    return ClientConfig(settings, f"context {settings.context_name!r} of {label}")


def _from_files(entries: list[str], context: str | None) -> ClientConfig:
    """Several ``$KUBECONFIG`` files, merged; the origin names the file that defines the
    context used."""
    from lightkube.config.kubeconfig import KubeConfig

    labelled = [
        (f"kubeconfig file {e!r} (from $KUBECONFIG)", Path(e).expanduser()) for e in entries
    ]
    merged, defined_in = merged_kubeconfig(
        [(label, _kubeconfig_data(path, label, absolute=True)) for label, path in labelled]
    )
    label = f"the kubeconfig files of $KUBECONFIG ({', '.join(entries)})"
    try:
        config = KubeConfig.from_dict(merged, fname=Path(entries[0]).expanduser())
    except Exception as exc:  # msgspec.ValidationError: a field of the wrong type
        raise ClusterConfigError(f"{label}: not a kubeconfig: {one_line(exc)}") from None
    settings = _select(config, context, label)
    origin = defined_in.get(settings.context_name, label)
    return ClientConfig(settings, f"context {settings.context_name!r} of {origin}")


def merged_kubeconfig(
    files: list[tuple[str, dict[str, Any]]],
) -> tuple[dict[str, Any], dict[str, str]]:
    """Kubeconfig documents merged as kubectl merges ``$KUBECONFIG``'s files (Kubernetes'
    "Organizing Cluster Access Using kubeconfig Files", merging rules): the first file to set a
    map key wins and the entry it set is kept whole (a later ``red-user`` is dropped even where
    it adds fields); the first file to set ``current-context`` sets it. ``files``: each file's
    label and document, in ``$KUBECONFIG``'s order. Returns the merged document and, per
    context name, the label of the file that defined it."""
    merged: dict[str, Any] = {"apiVersion": "v1", "kind": "Config"}
    defined_in: dict[str, str] = {}
    for key in _ENTRY_LISTS:
        seen: dict[str, dict[str, Any]] = {}
        for label, data in files:
            for entry in data.get(key) or []:
                if entry["name"] not in seen:
                    seen[entry["name"]] = entry
                    if key == "contexts":
                        defined_in[entry["name"]] = label
        merged[key] = list(seen.values())
    current = next((d["current-context"] for _, d in files if d.get("current-context")), None)
    if current:
        merged["current-context"] = current
    return merged, defined_in


def _read_kubeconfig(path: Path, label: str) -> KubeConfig:
    from lightkube.config.kubeconfig import KubeConfig

    data = _kubeconfig_data(path, label)
    try:
        return KubeConfig.from_dict(data, fname=path)
    except Exception as exc:  # msgspec.ValidationError: a field of the wrong type
        raise ClusterConfigError(f"{label} is not a kubeconfig: {one_line(exc)}") from None


#: The kubeconfig's lists of named entries, and the one key each entry holds.
_ENTRY_LISTS = ("clusters", "contexts", "users")

#: File references of an entry, per list: relative to the file that holds them (``exec``'s
#: command only when it names a path, as client-go resolves it; else it is found on ``PATH``).
_FILE_FIELDS = {
    "clusters": ("certificate-authority",),
    "users": ("client-certificate", "client-key", "tokenFile"),
}


def _kubeconfig_data(path: Path, label: str, *, absolute: bool = False) -> dict[str, Any]:
    """One kubeconfig file read and checked to the shape of its entry lists; ``absolute``:
    its relative file references made absolute (for merging with other files)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ClusterConfigError(f"{label} does not exist") from None
    except IsADirectoryError:
        raise ClusterConfigError(f"{label} is a directory, not a file") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else one_line(exc)
        raise ClusterConfigError(f"cannot read {label}: {reason}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ClusterConfigError(f"{label} is not valid YAML: {_yaml_problem(exc)}") from None
    if not isinstance(data, dict):
        raise ClusterConfigError(
            f"{label} is not a kubeconfig (expected a mapping with clusters, contexts and users)"
        )
    lists = {key: data.get(key) or [] for key in _ENTRY_LISTS}
    for key, entries in lists.items():
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise ClusterConfigError(f"{label} is not a kubeconfig: {key} is not a list of entries")
        for entry in entries:
            if not isinstance(entry.get("name"), str) or not isinstance(entry.get(key[:-1]), dict):
                raise ClusterConfigError(
                    f"{label} is not a kubeconfig: an entry of {key} lacks its name or "
                    f"its {key[:-1]} mapping"
                )
    if absolute:
        lists = {key: [_absolute(key, e, path.parent) for e in lists[key]] for key in lists}
    return {**data, **lists}


def _absolute(key: str, entry: dict[str, Any], base: Path) -> dict[str, Any]:
    """``entry`` with its relative file references resolved against ``base``."""
    body = dict(entry[key[:-1]])
    for field in _FILE_FIELDS.get(key, ()):
        value = body.get(field)
        if isinstance(value, str) and value and not Path(value).is_absolute():
            body[field] = str(base.absolute() / value)
    run = body.get("exec") if key == "users" else None
    command = run.get("command") if isinstance(run, dict) else None
    named_path = isinstance(command, str) and "/" in command and not Path(command).is_absolute()
    if isinstance(run, dict) and named_path:
        body["exec"] = {**run, "command": str(base.absolute() / str(command))}
    return {**entry, key[:-1]: body}


def _select(config: KubeConfig, context: str | None, label: str) -> SingleConfig:
    """One context of ``config``, checked so that every gap gets its own message."""
    from lightkube.config.models import User

    name = context if context is not None else config.current_context
    known = ", ".join(sorted(config.contexts)) or "none"
    if not name:
        raise ClusterConfigError(
            f"{label} sets no current-context and none was chosen (contexts: {known})"
        )
    ctx = config.contexts.get(name)
    if ctx is None:
        raise ClusterConfigError(f"{label} has no context {name!r} (contexts: {known})")
    if ctx.cluster not in config.clusters:
        raise ClusterConfigError(
            f"context {name!r} of {label} names cluster {ctx.cluster!r}, which is not defined"
        )
    if ctx.user is not None and ctx.user not in config.users:
        raise ClusterConfigError(
            f"context {name!r} of {label} names user {ctx.user!r}, which is not defined"
        )
    settings = config.get(name)
    assert settings is not None  # get() returns None only when given a default
    if settings.user is None:
        settings = settings._replace(user=User())
    return settings


def _yaml_problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None) or type(exc).__name__
    mark = getattr(exc, "problem_mark", None)
    return f"{problem} at line {mark.line + 1}" if mark is not None else str(problem)
