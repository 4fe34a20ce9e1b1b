"""The `progressive-sync` command line: `main` assembles one module per subcommand; `manifest`
declares the options `plan` and `render` share.

May import: everything. Nothing imports the CLI.
"""
