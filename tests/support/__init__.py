"""Helpers shared by the tests: builders, waiting on conditions, running real kubectl."""
