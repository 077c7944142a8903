"""``cudasched agent`` (the node agent) and ``cudasched probe`` (one probe, printed).

``probe`` is the same discovery and label code the agent runs, so ``cudasched probe -o labels``
on a node (or on a saved ``nvidia-smi`` output) shows exactly what the agent would publish.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from cudasched.cli.app import EXIT_INCOMPATIBLE, EXIT_OK, app, fail, versioned
from cudasched.vocab.errors import InputError

__all__ = ["agent", "probe"]

_OUTPUTS = ("json", "labels")
_AGENT_OUTPUTS = ("node", "nfd")


def _knowledge() -> Any:
    """The knowledge base (``cudasched --knowledge``'s, else the built-in one), or ``None``
    when it cannot load (probing must still work)."""
    try:
        from cudasched.cli.inputs import load_knowledge

        return load_knowledge()
    except InputError:
        raise  # a key or overlay that cannot be read: bad input
    except Exception as exc:  # a broken KB must not stop a node from being labelled
        logging.getLogger("cudasched.agent").warning("knowledge base unavailable: %s", exc)
        return None


def _followed(interval: float) -> tuple[Any, Any]:
    """What the agent labels with (``None``: no knowledge could load) and the follower of the
    registry reference ``cudasched --knowledge`` names (``None``: nothing to follow; else
    started by the caller): each probe then reads the knowledge the follower holds."""
    from cudasched.agent.knowledge import FollowedCatalog
    from cudasched.cli.app import take_notes
    from cudasched.cli.inputs import follow_knowledge

    log = logging.getLogger("cudasched.agent")
    try:
        knowledge, plan = follow_knowledge()
    except InputError:
        raise
    except Exception as exc:  # a broken KB must not stop a node from being labelled
        log.warning("knowledge base unavailable: %s", exc)
        return None, None
    for message in take_notes():
        log.warning("%s", message)
    if plan is None:
        return knowledge.kb, None

    def said(outcome: Any) -> None:
        failed = outcome.result.value in ("refused", "unreachable")
        log.log(logging.WARNING if failed else logging.INFO, "knowledge: %s", outcome.message)

    follower = plan.follower(knowledge, interval_seconds=interval, on_outcome=said)
    return FollowedCatalog(lambda: follower.current.kb), follower


def _read_input(path: Path) -> str:
    """A saved ``nvidia-smi`` output, through :mod:`cudasched.vocab.inputfiles` (regular file or
    stdin, size cap, UTF-8)."""
    from cudasched.vocab import inputfiles

    expected = "a saved nvidia-smi output"
    try:
        if str(path) == "-":
            raw = inputfiles.read_stdin("standard input", inputfiles.SETTINGS)
            return inputfiles.decode(raw, "standard input", expected=expected)
        return inputfiles.read_text(path, str(path), inputfiles.SETTINGS, expected=expected)
    except InputError as exc:
        fail(str(exc))


def probe_document(facts: Any, labels: dict[str, str]) -> dict[str, Any]:
    """The JSON contract of ``cudasched probe -o json``."""
    doc: dict[str, Any] = facts.to_json()
    doc["labels"] = labels
    doc["source"] = facts.source
    doc["host"] = facts.host.to_json() if facts.host is not None else None
    return doc


@app.command("probe")
def probe(
    from_nvidia_smi: Annotated[
        Path | None,
        typer.Option(
            "--from-nvidia-smi",
            help="Read a saved nvidia-smi output (plain table, -q or -q -x; '-' for stdin) "
            "instead of probing this machine.",
        ),
    ] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="json or labels")] = "json",
    gfd_compatible: Annotated[
        bool, typer.Option("--gfd-compatible", help="Also show GFD-compatible labels.")
    ] = False,
) -> None:
    """Print the driver, CUDA and GPU facts of this machine (or a saved nvidia-smi output) and
    the labels the agent would publish. Exit 2 when there is nothing to read."""
    from cudasched.agent.discovery import default_discovery
    from cudasched.agent.nvidia_smi import parse_nvidia_smi
    from cudasched.agent.nvml import NvmlSession
    from cudasched.nodes.hostfacts import DiscoveryError
    from cudasched.nodes.labelers import build_labels, enrich

    if output not in _OUTPUTS:
        fail(f"invalid output {output!r}: expected one of {', '.join(_OUTPUTS)}")
    try:
        kb = _knowledge()
    except InputError as exc:
        fail(str(exc))
    try:
        if from_nvidia_smi is not None:
            facts = enrich(parse_nvidia_smi(_read_input(from_nvidia_smi)), kb)
        else:
            with NvmlSession() as session:
                facts = default_discovery(kb=kb, session=session).probe()
    except DiscoveryError as exc:
        where = f"{from_nvidia_smi}: " if from_nvidia_smi is not None else ""
        fail(f"{where}{exc} [{exc.reason}]")
    labels = build_labels(facts, archs=kb, gfd_compatible=gfd_compatible)
    if output == "labels":
        sys.stdout.write("".join(f"{k}={v}\n" for k, v in labels.items()))
    else:
        doc = versioned(probe_document(facts, labels))
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    raise typer.Exit(EXIT_OK)


async def _host_facts(client: Any, node_name: str | None) -> Any:
    """Kernel and OS of this node, read once: from the Node object when the agent has API
    access (the DaemonSet mounts nothing from the host), else the kernel alone (the
    container's own /etc/os-release would describe the image, not the host)."""
    from cudasched.agent.host import host_from_node, read_host
    from cudasched.nodes.hostfacts import HostFacts

    if client is not None and node_name:
        from cudasched.kube.nodes import read_node

        try:
            return host_from_node(await read_node(client, node_name))
        except Exception as exc:  # informational only: never stop labelling for it
            logging.getLogger("cudasched.agent").warning("node %s not read: %s", node_name, exc)
    return HostFacts(kernel_release=read_host(os_release_paths=()).kernel_release)


def _check_options(output: str, interval: float, jitter: float, node_name: str | None) -> None:
    """Fail on options ``agent`` cannot run with."""
    if output not in _AGENT_OUTPUTS:
        fail(f"invalid --output {output!r}: expected one of {', '.join(_AGENT_OUTPUTS)}")
    if interval <= 0:
        fail(f"invalid --interval {interval}: expected a positive number of seconds")
    if jitter < 0:
        fail(f"invalid --jitter {jitter}: expected a fraction >= 0")
    if output == "node" and not node_name:
        fail("--node-name (or NODE_NAME) is required with --output node")


def _publishing(
    output: str, node_name: str | None, kubeconfig: str | None, nfd_path: Path | None
) -> tuple[Any, Any, Any]:
    """The Kubernetes client (``None``: none needed or, for NFD, none reachable), where the
    labels go (the Node, or the NFD features.d file) and where Events go (the Node, or the
    log)."""
    from cudasched.agent.publish import (
        EVENT_COMPONENT,
        LogEvents,
        NfdFilePublisher,
        NodeEvents,
        NodePublisher,
    )
    from cudasched.kube.client import make_client
    from cudasched.nodes.labelers import DEFAULT_NFD_PATH

    client: Any = None
    if output == "node" or node_name:
        try:
            client = make_client(kubeconfig=kubeconfig, field_manager=EVENT_COMPONENT)
        except InputError as exc:
            if output == "node":
                fail(str(exc))
            # NFD mode without API access: events go to the log instead.
    node_api = NodePublisher(client, node_name) if client is not None and node_name else None
    publisher: Any = (
        node_api if output == "node" else NfdFilePublisher(nfd_path or DEFAULT_NFD_PATH)
    )
    events: Any = NodeEvents(client, node_api) if node_api is not None else LogEvents()
    return client, publisher, events


@app.command("agent")
def agent(
    node_name: Annotated[
        str | None,
        typer.Option("--node-name", envvar="NODE_NAME", help="This node's name (downward API)."),
    ] = None,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between probes.")] = 60.0,
    jitter: Annotated[
        float,
        typer.Option("--jitter", help="Add up to this fraction of the interval at random."),
    ] = 0.1,
    oneshot: Annotated[
        bool, typer.Option("--oneshot", help="Probe and publish once, then exit.")
    ] = False,
    output: Annotated[
        str, typer.Option("--output", help="node (patch the Node) or nfd (features.d file)")
    ] = "node",
    nfd_path: Annotated[
        Path | None, typer.Option("--nfd-path", help="features.d file for --output nfd.")
    ] = None,
    gfd_compatible: Annotated[
        bool,
        typer.Option("--gfd-compatible", help="Also publish GFD's keys (clusters without GFD)."),
    ] = False,
    kubeconfig: Annotated[
        str | None,
        typer.Option(
            "--kubeconfig",
            help="Kubeconfig file; default: in-cluster service account, then $KUBECONFIG, "
            "then ~/.kube/config.",
        ),
    ] = None,
    log_level: Annotated[str, typer.Option("--log-level", help="debug, info, warning")] = "info",
    knowledge_interval: Annotated[
        float,
        typer.Option(
            "--knowledge-interval",
            help="Seconds between checks of the knowledge bundle 'cudasched --knowledge REF' "
            "names (a registry reference is followed; a path is read once).",
            min=10,
        ),
    ] = 3600.0,
) -> None:
    """Discover driver/CUDA/GPU facts on this node and publish them as labels, every
    --interval seconds until SIGTERM (or once with --oneshot)."""
    from cudasched.agent.discovery import default_discovery
    from cudasched.agent.loop import Agent, run_forever
    from cudasched.agent.nvml import NvmlSession

    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    _check_options(output, interval, jitter, node_name)
    client, publisher, events = _publishing(output, node_name, kubeconfig, nfd_path)
    try:
        kb, follower = _followed(knowledge_interval)
    except InputError as exc:
        fail(str(exc))

    async def main() -> int:
        host = await _host_facts(client, node_name)
        if follower is not None and not oneshot:
            follower.start()
        with NvmlSession() as session:
            the_agent = Agent(
                default_discovery(kb=kb, session=session, host=lambda: host),
                publisher,
                events,
                gfd_compatible=gfd_compatible,
                archs=kb,
            )
            try:
                if oneshot:
                    result = await the_agent.step()
                    return EXIT_OK if result.ok else EXIT_INCOMPATIBLE
                await run_forever(the_agent, interval=interval, jitter=jitter)
                return EXIT_OK
            finally:
                if follower is not None:
                    await asyncio.to_thread(follower.stop)
                if client is not None:
                    await client.close()

    try:
        code = asyncio.run(main())
    except InputError as exc:
        fail(str(exc))
    except Exception as exc:  # oneshot API failures: one line, not a traceback
        fail(f"publishing failed: {exc}", code=EXIT_INCOMPATIBLE)
    raise typer.Exit(code)
