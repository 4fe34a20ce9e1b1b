"""The `progressivesync.io/v1alpha1` API: the pydantic models (the source of truth), the CRD
generated from them, offline validation with messages a person can act on, and the pure status
transitions the steps apply (`rollout_status`).

May import: `orchestrator.core`. Never a client: nothing here talks to an API server.
"""
