"""The `progressive-sync` command line: `main` assembles one module per subcommand.

May import: everything. Nothing imports the CLI.
"""
