"""An API server's refusal as lightkube raises it: the HTTP status in ``status.code``, which is
all :func:`cudasched.kube.reflector.status_code` reads. For client fakes that fail a call with a
given status (404 gone, 403 forbidden, 409 conflict...)."""

from __future__ import annotations

from types import SimpleNamespace


class ApiError(Exception):
    """A call refused with HTTP ``code``."""

    def __init__(self, code: int) -> None:
        super().__init__(f"HTTP {code}")
        self.status = SimpleNamespace(code=code)
