"""The product's settings: the one configuration file (``config``) that ``cudasched webhook``
serves by and that ``audit``, ``explain``, ``report``, ``plan-drivers``, ``image``, ``mutate``
and ``demo`` read with ``--config``, so a command answers as the webhook in the cluster would.

Below the edges: the settings are data validated once (pydantic, unknown keys refused), read
from a file only through :mod:`cudasched.vocab.inputfiles`, and importing them loads no part of
the webhook, the Kubernetes client or the terminal.
"""
