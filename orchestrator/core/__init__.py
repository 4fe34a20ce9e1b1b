"""Things every layer uses and that depend on nothing of ours: time as a value (`clock`), SIGTERM
and SIGINT answered off the signal handler (`stop_signals`).

May import: the standard library only.
"""
