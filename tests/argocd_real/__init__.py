"""The real-Argo-CD tests: a package, so that conftest.py's package-scoped `argocd_stack` stops after
the last of them (without this file pytest scoped it to `tests`, and the stack ran to the session's end)."""
