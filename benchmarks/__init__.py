"""cudasched benchmarks: measurement scripts only (admission over HTTPS, fleet-scale explain,
webhook memory, a real control plane, ...).

Run them from the repository root as modules (``python -m benchmarks.admission``); see
``benchmarks/README.md``. Their inputs come from ``tests.support.synth`` and the control plane
from ``tests.harness``; the package itself imports nothing from here.
"""
