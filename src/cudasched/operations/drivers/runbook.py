"""A driver plan as a runbook: a bash script (``plan-drivers -o script``) that rolls the plan out
wave by wave with the GPU Operator's controllers, not against them.

Why each step is there (NVIDIA/gpu-operator v26.7.0 and NVIDIA/k8s-driver-manager, recorded with
file references in docs/guide/drivers.md, "What the runbook relies on"):

1. **Cordon, then drain the GPU pods** of the wave's nodes through the Eviction API, so
   PodDisruptionBudgets hold (a blocked eviction is retried until the timeout). A GPU pod is one
   with a container limit under ``nvidia.com/`` or one whose DRA ResourceClaim NVIDIA's driver
   (``gpu.nvidia.com``) was allocated or whose request names its device class: a pod that gets
   its GPUs only through a claim holds the driver as much as one with ``nvidia.com/gpu``
   (:data:`GPU_PODS_JQ`, run with jq). A claim list that fails where the cluster serves
   ResourceClaims stops the script (only a cluster without the DRA API has no claims). The new
   driver
   pod's k8s-driver-manager must unload the running driver; with ``autoUpgrade: true`` it does
   not evict GPU pods itself (the upgrade policy supersedes it), and a driver in use cannot
   unload.
2. **Label** the nodes ``cudasched.io/driver-pool=<object>``.
3. **Create or touch the object.** The node-labeling controller assigns owners
   (``nvidia.com/gpu-operator.driver.owner``) when an NVIDIADriver is created or its generation
   changes, or when a key of the node's *current* owner's nodeSelector changes; a label change
   on a node the default object owns (no nodeSelector) triggers nothing. So the first wave of an
   object creates it, and each later wave changes its ``spec.upgradePolicy.maxParallelUpgrades``
   to the number of its nodes labelled so far (always a new value, so always a new generation,
   and a field that is not part of the driver pods). Before v26.7 the controller reconciles on
   any node label change, and objects have no upgrade policy: the label is enough.
4. **Wait** for the owner label (v26.7), for the driver pod of the object on each node to be
   Ready, for the node's ``nvidia.com/cuda.driver-version.full`` label to show the planned
   driver (GPU Feature Discovery rewrites it once the new driver runs: the upgrade state alone
   can read ``upgrade-done`` before that) and for the node to offer its GPUs again as it did
   when the wave started (recorded then): ``nvidia.com/gpu`` allocatable (the device plugin), or,
   on a node whose GPUs come only through DRA, every device of NVIDIA's DRA driver in the
   node's ResourceSlices (``spec.driver: gpu.nvidia.com``, ``spec.nodeName``) published with
   the planned driver as ``driverVersion``; then for the object to report ``ready``.
5. **Uncordon**, and only then start the next wave.

A pinned node keeps its driver; it only moves to another NVIDIADriver (re-owned), and its driver
pod restarts. From GPU Operator v26.3 a restarting driver pod keeps a loaded driver of the same
version and configuration (k8s-driver-manager's ``shouldSkipUninstall``, the operator's
``DRIVER_CONFIG_DIGEST``: ``gpu-operator.yaml`` ``restart_in_place``), so such nodes are neither
cordoned nor drained; with an older operator they are, since the driver is reinstalled.

Objects a plan replaces (immutable fields) or leaves without nodes are deleted after the last
wave. Pure: the plan in, text out.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING

from cudasched.operations.drivers.nvidiadriver import OWNER_LABEL
from cudasched.placement.dra import DEVICE_CLASS, DRIVER_DOMAIN
from cudasched.vocab import labels as L

if TYPE_CHECKING:
    from cudasched.operations.drivers.plan import DriverPlan

__all__ = ["GPU_PODS_JQ", "render_script"]

_HELPERS = r"""
set -euo pipefail
NS="${GPU_OPERATOR_NAMESPACE:-gpu-operator}"   # where the GPU Operator runs its driver pods
TIMEOUT="${CUDASCHED_TIMEOUT:-1800}"            # seconds each wait may take

EVICTION='{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"namespace":"%s","name":"%s"}}'
GPU_PODS_JQ=@GPU_PODS_JQ@

say() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# Every ResourceClaim of the cluster as JSON. A cluster that does not serve the resource (no
# DRA API) has none; a list that fails otherwise (RBAC, an unreachable API server) stops the
# rollout: reading it as "no claims" would leave the pods that get GPUs through DRA running,
# and the new driver could not unload.
resource_claims() {
  local claims served
  if claims=$(kubectl get resourceclaims.resource.k8s.io -A -o json); then
    printf '%s\n' "${claims}"; return 0
  fi
  if served=$(kubectl api-resources --api-group=resource.k8s.io -o name) \
      && ! printf '%s\n' "${served}" | grep -qx 'resourceclaims.resource.k8s.io'; then
    echo '{"items":[]}'; return 0
  fi
  say "cannot list ResourceClaims (resource.k8s.io), and the cluster does not show it lacks" \
    "the DRA API: the pods that get GPUs through DRA cannot be found to drain. Allow list on" \
    "resourceclaims for this user (or fix the API server connection) and run the script again."
  return 1
}

# The pods of a node that use NVIDIA GPUs, as namespace/name: a container limit under
# nvidia.com/, or a DRA ResourceClaim (the pod's own or made from its template) allocated by
# NVIDIA's DRA driver or asking for its device class. Clusters without DRA have no claims.
# The claims reach jq on its input, not as an argument (one argument holds at most 128 KiB).
gpu_pods() {
  local node="$1" claims
  claims=$(resource_claims) || return 1
  { printf '%s\n' "${claims}"
    kubectl get pods -A --field-selector "spec.nodeName=${node}" -o json; } \
    | jq -n -r --arg driver @DRIVER@ --arg class @CLASS@ \
        "input as \$claims | input | ${GPU_PODS_JQ}"
}

# Evict the pods of a node that use NVIDIA GPUs (gpu_pods), through the Eviction API so
# PodDisruptionBudgets hold; a refused eviction is retried until TIMEOUT.
drain_gpu_pods() {
  local node="$1" deadline=$(( $(date +%s) + TIMEOUT )) left
  while :; do
    left=$(gpu_pods "${node}") \
      || { say "not draining ${node}: its GPU pods are not known"; return 1; }
    [ -z "${left}" ] && return 0
    for pod in ${left}; do
      printf "${EVICTION}" "${pod%%/*}" "${pod##*/}" \
        | kubectl create --raw "/api/v1/namespaces/${pod%%/*}/pods/${pod##*/}/eviction" -f - \
          >/dev/null 2>&1 \
        || say "eviction of ${pod} refused for now (PodDisruptionBudget?), retrying"
    done
    [ "$(date +%s)" -ge "${deadline}" ] && { say "GPU pods still on ${node}: ${left}"; return 1; }
    sleep 10
  done
}

# Wait until a command prints the expected value.
wait_for() {
  local what="$1" want="$2" deadline=$(( $(date +%s) + TIMEOUT )) got; shift 2
  while :; do
    got=$("$@" 2>/dev/null || true)
    case "${got}" in ${want}) return 0 ;; esac
    if [ "$(date +%s)" -ge "${deadline}" ]; then
      say "timed out: ${what} is '${got}', want ${want}"; return 1
    fi
    sleep 10
  done
}

driver_pod_ready() {  # node object -> "True" once the object's driver pod on the node is Ready
  kubectl get pods -n "${NS}" -l "cudasched.io/driver-pool=$2" \
    --field-selector "spec.nodeName=$1" \
    -o jsonpath='{.items[*].status.conditions[?(@.type=="Ready")].status}'
}

node_label() {  # node key
  kubectl get node "$1" -o "jsonpath={.metadata.labels.$(printf '%s' "$2" | sed 's/\./\\./g')}"
}

allocatable_gpus() {  # node -> its allocatable nvidia.com/gpu (the device plugin's), 0 if none
  local n
  n=$(kubectl get node "$1" -o 'jsonpath={.status.allocatable.nvidia\.com/gpu}')
  case "${n}" in ''|*[!0-9]*) echo 0 ;; *) echo "${n}" ;; esac
}

# The driverVersion of each device NVIDIA's DRA driver publishes for a node, in its
# ResourceSlices (spec.driver, spec.nodeName), one per line.
dra_driver_versions() {
  kubectl get resourceslices.resource.k8s.io -o json \
    | jq -r --arg node "$1" --arg driver @DRIVER@ \
        '.items[]? | select(.spec.driver == $driver and .spec.nodeName == $node)
         | .spec.devices[]? | .attributes.driverVersion.version // empty'
}

# How each node offered GPUs as its wave started: "plugin" (nvidia.com/gpu allocatable) or
# "dra" (none allocatable, but NVIDIA's DRA driver published devices for it); kept in a
# variable named after the node's bytes in hex (no associative arrays: bash 3 has none).
gpu_source_var() {  # node -> the name of its variable
  printf 'GPU_SOURCE_%s' "$(printf '%s' "$1" | od -An -v -tx1 | tr -d ' \n')"
}
record_gpu_source() {  # node
  local offers=plugin
  if [ "$(allocatable_gpus "$1")" -eq 0 ] \
      && [ -n "$(dra_driver_versions "$1" 2>/dev/null || true)" ]; then
    offers=dra
  fi
  printf -v "$(gpu_source_var "$1")" '%s' "${offers}"
}

# node pattern -> "yes" once the node offers its GPUs again as it did before the wave: the
# device plugin's nvidia.com/gpu allocatable, or every device of NVIDIA's DRA driver on the
# node published with a driverVersion matching the pattern (the planned driver).
gpus_offered() {
  local v seen=no var
  var=$(gpu_source_var "$1")
  if [ "${!var:-plugin}" != dra ]; then
    [ "$(allocatable_gpus "$1")" -gt 0 ] && echo yes || echo no
    return 0
  fi
  for v in $(dra_driver_versions "$1"); do
    case "${v}" in $2) seen=yes ;; *) echo no; return 0 ;; esac
  done
  echo "${seen}"
}
"""


#: The jq program ``gpu_pods`` runs over a node's PodList (``$claims``: every ResourceClaim,
#: jq's first input; ``$driver``/``$class``: NVIDIA's DRA driver and device class,
#: ``placement.dra``): the pods with a container or init-container limit under
#: ``nvidia.com/``, or with a claim in their namespace
#: (``spec.resourceClaims[].resourceClaimName``, or the claim made from a template,
#: ``status.resourceClaimStatuses[].resourceClaimName``) that NVIDIA's driver was allocated
#: (``status.allocation.devices.results[].driver``) or that requests its device class. Pods that
#: ended (``Succeeded``, ``Failed``) hold no GPU and are left alone.
GPU_PODS_JQ = r"""
[ ($claims.items // [])[]
  | select(
      any(.status.allocation.devices.results[]?; .driver == $driver)
      or any(.spec.devices.requests[]?
             | (.exactly.deviceClassName // empty), (.firstAvailable[]?.deviceClassName // empty);
             . == $class))
  | "\(.metadata.namespace)/\(.metadata.name)" ] as $gpu_claims
| .items[]
| select(.status.phase != "Succeeded" and .status.phase != "Failed")
| .metadata.namespace as $ns
| select(
    any((.spec.containers[]?, .spec.initContainers[]?) | (.resources.limits // {}) | keys[];
        startswith("nvidia.com/"))
    or any((.spec.resourceClaims[]?.resourceClaimName // empty),
           (.status.resourceClaimStatuses[]?.resourceClaimName // empty);
           "\($ns)/\(.)" as $claim | any($gpu_claims[]; . == $claim)))
| "\(.metadata.namespace)/\(.metadata.name)"
""".strip()


def _helpers() -> str:
    """The script's shell functions, with the jq program and NVIDIA's DRA names filled in."""
    return (
        _HELPERS.replace("@GPU_PODS_JQ@", _q(GPU_PODS_JQ))
        .replace("@DRIVER@", _q(DRIVER_DOMAIN))
        .replace("@CLASS@", _q(DEVICE_CLASS))
    )


def _dra_version(version: str) -> str:
    """The pattern NVIDIA's DRA driver's ``driverVersion`` attribute has for a planned driver
    ``version``: the plugin writes it as semver (``semver.MustParse(...).String()``,
    kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin/deviceinfo.go``), so
    ``580.95.05`` is ``580.95.5`` and a branch ``580`` is ``580.*``."""
    parts = version.split(".")
    if not all(p.isdigit() for p in parts):
        return version
    numbers = [str(int(p)) for p in parts]
    if len(numbers) == 1:
        return f"{numbers[0]}.*"
    if len(numbers) == 2:
        numbers.append("0")
    return ".".join(numbers)


def _q(text: str) -> str:
    return shlex.quote(text)


def _comment(text: str) -> str:
    """``text`` on one comment line: a line break in a name must not end the comment."""
    return " ".join(text.splitlines())


def _manifest_json(manifest: Mapping[str, object]) -> str:
    return json.dumps(manifest, indent=2, sort_keys=False)


def render_script(plan: DriverPlan, source: str) -> str:
    """The runbook of ``plan`` (module docstring) as a bash script."""
    op = plan.operator
    owners = op.accepts("default")  # v26.7: owner labels, touched objects
    lines = [
        "#!/usr/bin/env bash",
        f"# cudasched plan-drivers runbook: {_comment(source)} (policy {plan.policy.value}, as of "
        f"{plan.today.isoformat()}, GPU Operator {op.version})",
        "# Run it with a kubeconfig for the cluster; every wave waits for its nodes before the",
        "# next one starts. Read the plan first: cudasched plan-drivers (-o json for everything).",
    ]
    for note in plan.notes:
        lines.append(f"# NOTE: {_comment(note)}")
    for warning in plan.warnings:
        lines.append(f"# WARNING: {_comment(warning)}")
    lines.append(_helpers().strip("\n"))
    if not plan.objects:
        lines.append('say "no pool the GPU Operator drives changes: nothing to roll out"')
        return "\n".join(lines) + "\n"
    lines += _preflight(owners)
    object_of = {n: labels[L.DRIVER_POOL] for n, labels in plan.node_labels.items()}
    manifests = {o.name: o.manifest for o in plan.objects}
    # A pinned node keeps its driver: where the operator's driver pods keep a loaded driver of
    # the same version and configuration across a restart, re-owning it needs no drain.
    in_place = {o.name for o in plan.objects if o.pin and op.restart_in_place}
    created: dict[str, int] = {}
    for number, wave in enumerate(plan.waves, start=1):
        nodes = " ".join(_q(n) for n in wave)
        drained = [n for n in wave if object_of[n] not in in_place]
        lines += ["", f"# ---- wave {number} of {len(plan.waves)}: {len(wave)} node(s)"]
        lines.append(f'for node in {nodes}; do record_gpu_source "${{node}}"; done')
        if drained:
            cordoned = " ".join(_q(n) for n in drained)
            lines.append(
                f'say "wave {number}: cordon and drain the GPU pods of {len(drained)} node(s)"'
            )
            lines.append(f'for node in {cordoned}; do kubectl cordon "${{node}}"; done')
            lines.append(f'for node in {cordoned}; do drain_gpu_pods "${{node}}"; done')
        if len(drained) < len(wave):
            kept = len(wave) - len(drained)
            lines.append(
                f'say "wave {number}: {kept} node(s) keep their driver: re-owned, not drained"'
            )
        by_object: dict[str, list[str]] = {}
        for node in wave:
            by_object.setdefault(object_of[node], []).append(node)
        lines += _label_and_apply(by_object, manifests, created, owners)
        lines += _waits(by_object, manifests, owners)
        if drained:
            lines.append(f'for node in {cordoned}; do kubectl uncordon "${{node}}"; done')
        lines.append(f'say "wave {number} done"')
    if plan.replaced:
        lines += ["", "# ---- objects this plan replaces or leaves without nodes"]
        for r in plan.replaced:
            lines.append(
                f"kubectl delete nvidiadriver {_q(r.name)} --ignore-not-found   # {_comment(r.why)}"
            )
    lines.append('say "rollout complete"')
    return "\n".join(lines) + "\n"


def _preflight(owners: bool) -> list[str]:
    """The checks before the first wave: jq, NVIDIADriver mode, a CRD that knows the fields."""
    lines = [
        "",
        "# Preflight: jq (GPU pods are found with it), NVIDIADriver mode, and a CRD that knows",
        "# the fields these objects use.",
        'command -v jq >/dev/null || { say "jq is needed to find the GPU pods to drain"; exit 1; }',
        "mode=$(kubectl get clusterpolicies.nvidia.com -o "
        "jsonpath='{.items[0].spec.driver.useNvidiaDriverCRD}')",
        '[ "${mode}" = "true" ] || { say "ClusterPolicy spec.driver.useNvidiaDriverCRD is not '
        'true: enable NVIDIADriver mode first (docs/guide/drivers.md)"; exit 1; }',
    ]
    if owners:
        lines.append(
            "kubectl get crd nvidiadrivers.nvidia.com -o jsonpath="
            "'{.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.upgradePolicy.type}'"
            ' | grep -q object || { say "the NVIDIADriver CRD has no spec.upgradePolicy: GPU '
            'Operator v26.7 or newer is needed (plan with --gpu-operator-version)"; exit 1; }'
        )
    return lines


def _label_and_apply(
    by_object: Mapping[str, list[str]],
    manifests: Mapping[str, Mapping[str, object]],
    created: dict[str, int],
    owners: bool,
) -> list[str]:
    """A wave's nodes labelled for their object; the object created the first time, else (with
    owner labels) patched so that the operator assigns owners again. ``created``: nodes per
    object so far, updated."""
    lines: list[str] = []
    for obj, members in by_object.items():
        names = " ".join(_q(n) for n in members)
        lines.append(f"kubectl label node {names} {L.DRIVER_POOL}={_q(obj)} --overwrite")
        count = created.get(obj, 0) + len(members)
        manifest = manifests[obj]
        if obj not in created:
            lines.append(f"kubectl apply -f - <<'EOF'\n{_manifest_json(manifest)}\nEOF")
        elif owners:
            patch = json.dumps({"spec": {"upgradePolicy": {"maxParallelUpgrades": count}}})
            lines.append(
                f"kubectl patch nvidiadriver {_q(obj)} --type merge -p {_q(patch)}"
                "   # a new generation: the operator assigns owners again"
            )
        created[obj] = count
    return lines


def _waits(
    by_object: Mapping[str, list[str]], manifests: Mapping[str, Mapping[str, object]], owners: bool
) -> list[str]:
    """What a wave waits for on each node (its owner, the driver pod, the driver version, the
    GPUs offered), then each object ready."""
    lines: list[str] = []
    for obj, members in by_object.items():
        version = str(manifests[obj]["spec"]["version"])  # type: ignore[index]
        want = f"{version}*" if "." not in version else version
        for node in members:
            n = _q(node)
            if owners:
                lines.append(
                    f"wait_for {_q(f'owner of {node}')} {_q(obj)} node_label {n} {OWNER_LABEL}"
                )
            lines.append(
                f"wait_for {_q(f'driver pod on {node}')} True driver_pod_ready {n} {_q(obj)}"
            )
            lines.append(
                f"wait_for {_q(f'driver on {node}')} {_q(want)} node_label {n} "
                "nvidia.com/cuda.driver-version.full"
            )
            lines.append(
                f"wait_for {_q(f'GPUs on {node}')} yes gpus_offered {n} {_q(_dra_version(version))}"
            )
    for obj in by_object:
        lines.append(
            f"kubectl wait nvidiadriver/{_q(obj)} --for=jsonpath='{{.status.state}}'=ready "
            '--timeout="${TIMEOUT}s"'
        )
    return lines
