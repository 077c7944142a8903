"""Core commands: ``check`` and ``affinity``."""
