// Command yamltojson writes FILE.json next to each FILE.yaml given, with the same single document
// as JSON, converted the way Kubernetes' own tools convert manifests (sigs.k8s.io/yaml).
//
// hack/tools/build.sh runs it on the Argo Workflows and Argo CD CRDs it installs into the tool
// cache: they are megabytes of YAML, which Python parses in seconds and JSON in milliseconds.
package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: yamltojson FILE.yaml...")
		os.Exit(2)
	}
	for _, path := range os.Args[1:] {
		if err := convert(path); err != nil {
			fmt.Fprintf(os.Stderr, "yamltojson: %s: %v\n", path, err)
			os.Exit(1)
		}
	}
}

func convert(path string) error {
	if !strings.HasSuffix(path, ".yaml") {
		return fmt.Errorf("not a .yaml file")
	}
	source, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	body := bytes.TrimPrefix(source, []byte("---\n"))
	if bytes.Contains(body, []byte("\n---\n")) || bytes.HasSuffix(body, []byte("\n---")) {
		return fmt.Errorf("holds more than one YAML document; only one is supported")
	}
	converted, err := yaml.YAMLToJSON(body)
	if err != nil {
		return err
	}
	return os.WriteFile(strings.TrimSuffix(path, ".yaml")+".json", append(converted, '\n'), 0o644)
}
