"""The local engine: runs our rollout Workflows on one machine the way Argo Workflows would.

`operator` is one pure pass over a Workflow (decide the new status and the processes to start);
`executor` owns the API calls, the processes and the clock; `warm_python` forks step processes from
a launcher that imported the steps once.

May import: `orchestrator.core`, `orchestrator.api`, `orchestrator.kube`, `orchestrator.workflows`,
`workflow_templates`.
"""
