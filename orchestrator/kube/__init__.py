"""The Kubernetes adapter: the only package that imports `kubernetes` (for kubeconfigs with auth plugins).

`client` owns every API call, its timeouts and its error types, over `transport` (HTTP, urllib3)
to the `endpoint` a kubeconfig (`kubeconfig`) or a pod's service account names; `informer` is the
list → watch → resume → re-list-on-410 loop with a cache; `status_writer` writes a
ProgressiveSync's status without lost updates; `argo_server` submits Workflows through the Argo
Server; `crds` installs CRDs.

May import: `orchestrator.core`, `orchestrator.api`.
"""
