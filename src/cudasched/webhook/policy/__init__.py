"""The policy mode's controller: which pod keys the cluster creates (``sources``), the webhook's
decision on each read back as a placement and kept in PlacementTable objects (``table``), and
the leader-elected loop that writes them (``controller``), and its probes and metrics
(``health``). It serves no admission request; it sits above the server room, whose assembly
builds the admission it asks and whose serving runs its plain-HTTP endpoint."""
