"""Analysis gates, pure: the AnalysisRun a stage's analysis makes (`run`) and what its status says
(`verdict`). No client, no clock: the `analyze` step (steps/analyze.py) reads and writes."""
