// The dev node's pause (sandbox) program; no dependencies.
module progressive-sync/hack/images/pause

go 1.22
