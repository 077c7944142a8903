#!/usr/bin/env bash
# Cross-check `cudasched probe` against nvidia-smi on a machine with an NVIDIA GPU.
#
# Installs nothing. Runs `cudasched probe -o json` (live: NVML first) and compares
#   - the driver version with `nvidia-smi --query-gpu=driver_version --format=csv,noheader`,
#   - the CUDA version with the one in the plain `nvidia-smi` header
#     ("CUDA Version: X.Y" or, on R610+, "CUDA UMD Version: X.Y"; "N/A" must give null),
#   - the GPU count and names with `nvidia-smi --query-gpu=name --format=csv,noheader`.
# Exit 0 when everything agrees, 1 on a mismatch, 2 when a tool is missing or fails.
#
# Usage: scripts/gpu-check.sh            (uses .venv/bin/cudasched, else cudasched on PATH)
#        CUDASCHED=/path/to/cudasched PYTHON=/path/to/python3 scripts/gpu-check.sh
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cudasched="${CUDASCHED:-}"
if [[ -z "$cudasched" ]]; then
  if [[ -x "$here/.venv/bin/cudasched" ]]; then cudasched="$here/.venv/bin/cudasched"; else cudasched="cudasched"; fi
fi
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x "$here/.venv/bin/python" ]]; then python="$here/.venv/bin/python"; else python="python3"; fi
fi

die() { echo "gpu-check: $*" >&2; exit 2; }
command -v nvidia-smi >/dev/null 2>&1 || die "nvidia-smi not found: run this on a machine with an NVIDIA GPU"
command -v "$cudasched" >/dev/null 2>&1 || die "cudasched not found ($cudasched); set CUDASCHED"
command -v "$python" >/dev/null 2>&1 || die "python not found ($python); set PYTHON"

smi_drivers="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1)" \
  || die "nvidia-smi --query-gpu=driver_version failed: $(printf '%s\n' "$smi_drivers" | head -n 1)"
smi_driver="$(printf '%s\n' "$smi_drivers" | head -n 1 | tr -d '[:space:]')"
smi_names="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>&1)" \
  || die "nvidia-smi --query-gpu=name failed: $(printf '%s\n' "$smi_names" | head -n 1)"
smi_header="$(nvidia-smi 2>&1)" || die "nvidia-smi failed: $(printf '%s\n' "$smi_header" | head -n 1)"
smi_cuda="$(printf '%s\n' "$smi_header" | sed -n -E 's/.*CUDA( UMD)? Version: *([0-9]+\.[0-9]+|N\/A).*/\2/p' | head -n 1)"
[[ -n "$smi_cuda" ]] || smi_cuda="N/A"

probe_json="$("$cudasched" probe -o json)" || die "cudasched probe failed (exit $?)"

PROBE_JSON="$probe_json" SMI_DRIVER="$smi_driver" SMI_CUDA="$smi_cuda" SMI_NAMES="$smi_names" \
"$python" - <<'PY'
import json, os, sys

doc = json.loads(os.environ["PROBE_JSON"])
want_driver = os.environ["SMI_DRIVER"]
want_cuda = os.environ["SMI_CUDA"]
want_names = [n.strip() for n in os.environ["SMI_NAMES"].splitlines() if n.strip()]

def same_driver(a: str, b: str) -> bool:
    """Compare numerically: 570.124.06 == 570.124.6."""
    try:
        return [int(x) for x in a.split(".")] == [int(x) for x in b.split(".")]
    except ValueError:
        return a == b

checks = [
    ("driver version", doc["driver_version"], want_driver, same_driver(doc["driver_version"], want_driver)),
    (
        "CUDA version",
        doc["cuda_version"],
        None if want_cuda == "N/A" else want_cuda,
        (doc["cuda_version"] is None) if want_cuda == "N/A" else doc["cuda_version"] == want_cuda,
    ),
    ("GPU count", len(doc["gpus"]), len(want_names), len(doc["gpus"]) == len(want_names)),
    ("GPU names", [g["name"] for g in doc["gpus"]], want_names, [g["name"] for g in doc["gpus"]] == want_names),
]
failed = False
for what, got, want, ok in checks:
    print(f"{'ok  ' if ok else 'FAIL'} {what}: cudasched={got!r} nvidia-smi={want!r}")
    failed |= not ok
print(f"source: {doc.get('source')}; labels: {len(doc.get('labels', {}))}")
sys.exit(1 if failed else 0)
PY
