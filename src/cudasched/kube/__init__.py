"""Kubernetes API access shared by the webhook, the node agent and the cluster readers.

One idea per module: ``client`` builds the API client from a kubeconfig or the in-cluster
service account, ``resources`` turns a kind declared in :mod:`cudasched.vocab.kinds` into the
client's resource class, ``reflector`` mirrors one kind with list+watch, ``events`` records
Kubernetes Events. Objects are plain ``dict``s as the API returns them; nothing here knows
about admission or labels.
"""
