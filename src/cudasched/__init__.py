"""cudasched: make Kubernetes schedule GPU inference services by CUDA compatibility."""

__version__ = "0.1.0"
