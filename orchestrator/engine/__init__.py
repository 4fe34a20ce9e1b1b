"""The local engine: runs our rollout Workflows on one machine the way Argo Workflows would.

`operator` is one pure pass over a Workflow (decide the new status and the processes to start),
put together from one module per job: `nodes` (the pass's state, node bookkeeping, limits),
`pods`, `retries`, `dag`, `lifecycle` (mutex, deadline, stop, suspend, exit handler, end), with the
pure parts in `expressions` (variables, durations, the retry expression) and `supported` (the subset
of Argo we run) and the types it exchanges with the executor in `interface`. `executor` owns the API
calls, the processes and the clock, with its parts `executor_settings`, `workflow_worker` (one
Workflow's loop) and `step_process` (one step's process); `warm_python` forks step processes from a
launcher that imported the steps once, and holds the executor's client for it (`WarmLauncher`).

May import: `orchestrator.core`, `orchestrator.api`, `orchestrator.kube`, `orchestrator.workflows`,
`workflow_templates`.
"""
