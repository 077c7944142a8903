"""cudasched benchmarks: admission over HTTPS, fleet-scale explain, webhook memory.

Run them from the repository root as modules (``python -m benchmarks.admission``); see
``benchmarks/README.md``. Nothing here is imported by the package itself.
"""
