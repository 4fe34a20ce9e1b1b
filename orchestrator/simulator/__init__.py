"""The fleet simulator: plays Argo CD's application controller (and its ApplicationSet controller's
hold on metadata) against the API server, for the demo and the fast test tier (docs/simulator.md).

Modules, one job each: `config` (behaviour per cluster), `behaviours` (what Argo CD does next to one
Application: pure, with its pure parts `decision_types`, `application`, `sync_operation` and
`comparison`), `appset` (the ApplicationSet rewrite: pure), `windows` (AppProject sync windows:
pure), `git` (the simulated repository), `events` (the events log), `appcontroller` (the
list -> watch loop, the queue, the writes), `seed`.

May import: `orchestrator.core`, `orchestrator.kube`. Not `orchestrator.argocd`: the simulator
stands for Argo CD and must not share our reading of it.
"""
