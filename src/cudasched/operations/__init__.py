"""Operations over a whole cluster: ``audit/`` (what is wrong right now), ``report/`` (the
compatibility matrix and the HTML report), ``drivers/`` (which driver each pool should run, as
GPU Operator objects and rollout waves) and the modules they share (``pools``, ``reach``,
``refs``, ``runtimes``, ``nodelabels``). Pure: snapshots and fleets in, data (and HTML) out."""
