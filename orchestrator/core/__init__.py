"""Things every layer uses and that depend on nothing of ours: time as a value (`clock`).

May import: the standard library only.
"""
