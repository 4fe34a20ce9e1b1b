"""The `progressive-sync` subcommands, one module each; `orchestrator.cli` assembles them."""
