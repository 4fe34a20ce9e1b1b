"""The step programs a rollout Workflow runs: select, sync, wait-healthy, record, finalize.

Each is a typed function in its own module (`steps.select_stage`, `steps.sync`,
`steps.wait_healthy`, `steps.record`, `steps.finalize`) and runs as `python -m steps <step>`
through the thin entrypoint in `steps.cli`, in a container under Argo Workflows, as a subprocess of
the local executor, or by hand. The options, outputs and exit codes are fixed in docs/design/CONTRACTS.md.
"""
