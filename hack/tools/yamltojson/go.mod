// Module that builds yamltojson (main.go), which hack/tools/build.sh runs on the CRDs it installs.
module progressive-sync/hack/tools/yamltojson

go 1.26.0

require sigs.k8s.io/yaml v1.6.0

require go.yaml.in/yaml/v2 v2.4.2 // indirect
