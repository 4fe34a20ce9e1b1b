"""How far the suite's own kube-apiservers may grow before their garbage collector must run.

The dev stack starts every kube-apiserver with `GOGC=400 GOMEMLIMIT=1200MiB`
(`orchestrator.devenv.controlplane.APISERVER_GO_ENVIRONMENT`): a developer's machine keeps its
memory. The suite's long-lived API servers hit that limit early and then collect whenever their heap
nears it: the session planes (one per worker, every test's objects kept all session) and the real
stack's (every real-engine test's pods, Workflows and events). On this 2-core machine CPU, not
memory, bounds the suite, so they may grow to 3000 MiB (docs/design/dev-stack.md, "A session
plane's heap over a session"):

- a session plane, 181 tests on one worker: 208.6 -> 169.0 CPU-s (-19 %), RSS up to 2.8 GB; over
  the whole warm `make test` the two busy planes went from 252 and 250 to 196 and 186 CPU-s, with
  10.6 GB used on the machine at most;
- the real stack's: in the suite its RSS sits at the 1200 MiB limit (64 collections in its first
  28 minutes); six real-engine scenarios on a fresh stack, two runs each way, alternated: 53.4 and
  50.4 CPU-s at 1200 MiB, 47.2 and 51.3 at 3000 MiB (-5 %, within the spread of a short run).

Deleting each test's objects instead did not help (the same number of collections).
"""

from __future__ import annotations

TEST_APISERVER_MEMORY_LIMIT = "3000MiB"
