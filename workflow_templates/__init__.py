"""Hera definitions of the rollout Workflow and its WorkflowTemplates, and their rendered YAML."""
