"""The words of the policy mode's ``PlacementTable`` that its writer (the policy controller)
and its readers (the MutatingAdmissionPolicy and its binding, ``install/policy``) share: the
label that selects the tables, and the bounds of one table object (the CRD's schema states them
and the controller shards by them)."""

from __future__ import annotations

from cudasched.vocab.labels import PREFIX

__all__ = ["MAX_KEYS", "MAX_PLACEMENTS", "TABLE_LABEL", "TABLE_VALUE"]

#: The label every table object carries, and its value for pod placements.
TABLE_LABEL = PREFIX + "placement-table"
TABLE_VALUE = "pods"
#: Pod keys and distinct placements in one table object at most.
MAX_KEYS = 4096
MAX_PLACEMENTS = 512
