"""The `progressivesync.io/v1alpha1` API: the pydantic models (the source of truth), the CRD
generated from them, offline validation with messages a person can act on, the pure status
transitions the steps apply (`rollout_status`), and every name, label, annotation and patch body
progressive-sync writes on objects (`metadata`).

May import: `orchestrator.core`. Never a client: nothing here talks to an API server.
"""
