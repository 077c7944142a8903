"""The words of the policy mode's ``PlacementTable`` that its writer (the policy controller,
``webhook/policy/table``) and its readers (the MutatingAdmissionPolicy and its binding,
``install/policy``) share: the label that selects the tables, the bounds of one table object
(the CRD's schema states them and the controller shards by them), and how ``spec.pods`` holds
the keys.

``spec.pods`` is text, not a map: one line per pod key, ``<key>\t<placement id>``, each line
between newlines (the text starts and ends with one). The policy finds a key by splitting the
text once at ``\n<key>\t`` (Go's ``strings.SplitN``: no copy of the text), and the API server,
which converts the whole parameter object through JSON for every CEL activation, converts one
string instead of a map of thousands of entries (``docs/design.md``, sixth pass)."""

from __future__ import annotations

from cudasched.vocab.labels import PREFIX

__all__ = [
    "KEY_END",
    "KEY_START",
    "MAX_KEYS",
    "MAX_PLACEMENTS",
    "MAX_PODS_TEXT",
    "TABLE_LABEL",
    "TABLE_VALUE",
]

#: The label every table object carries, and its value for pod placements.
TABLE_LABEL = PREFIX + "placement-table"
TABLE_VALUE = "pods"
#: Pod keys and distinct placements in one table object at most.
MAX_KEYS = 4096
MAX_PLACEMENTS = 512
#: Characters of the ``pods`` text at most (the controller keeps a whole object under 900,000
#: bytes of JSON).
MAX_PODS_TEXT = 900_000
#: What starts and ends a key in the ``pods`` text: a key holding either is never stored.
KEY_START = "\n"
KEY_END = "\t"
