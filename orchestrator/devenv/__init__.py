"""The development environment: a real local control plane (`controlplane`) and the demo
(`demo`) that runs the whole product on one machine.

May import: every package but `cli`.
"""
