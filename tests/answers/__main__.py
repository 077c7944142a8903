"""``python -m tests.answers --check|--write``: compare the answers with the recording, or
record them anew (:mod:`tests.answers.recorder`)."""

from __future__ import annotations

from tests.answers.recorder import main

if __name__ == "__main__":
    raise SystemExit(main())
