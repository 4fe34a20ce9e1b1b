// Command argocd runs one of the three Argo CD components the dev stack needs, chosen by the name
// it is invoked under: hack/tools/build.sh puts a symlink per component next to the binary. Only
// these components are linked (no API server, UI, dex or CLI), which keeps the build smaller.
//
// Invoked as plain `argocd`, it prints the Argo CD version it was built from (`argocd version`) or
// says which names it answers to.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	appcontroller "github.com/argoproj/argo-cd/v3/cmd/argocd-application-controller/commands"
	appsetcontroller "github.com/argoproj/argo-cd/v3/cmd/argocd-applicationset-controller/commands"
	reposerver "github.com/argoproj/argo-cd/v3/cmd/argocd-repo-server/commands"
	"github.com/argoproj/argo-cd/v3/common"
	argolog "github.com/argoproj/argo-cd/v3/util/log"
)

// The environment variable Argo CD's own multi-call binary reads to override the invoked name.
const nameOverrideVariable = "ARGOCD_BINARY_NAME"

var components = map[string]func() *cobra.Command{
	common.CommandApplicationController:    appcontroller.NewCommand,
	common.CommandApplicationSetController: appsetcontroller.NewCommand,
	common.CommandRepoServer:               reposerver.NewCommand,
}

func main() {
	// klog (client-go's logger) writes through Argo CD's logrus setup, as in Argo CD's own binary.
	klog.SetLogger(argolog.NewLogrusLogger(argolog.NewWithCurrentConfig()))

	name := filepath.Base(os.Args[0])
	if override := os.Getenv(nameOverrideVariable); override != "" {
		name = override
	}
	newCommand, known := components[name]
	if !known {
		os.Exit(withoutComponent(name, os.Args[1:]))
	}
	if err := newCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

// withoutComponent handles an invocation under a name that is no component: `version`, or usage.
func withoutComponent(name string, args []string) int {
	if len(args) == 1 && args[0] == "version" {
		fmt.Println(common.GetVersion().Version)
		return 0
	}
	names := make([]string, 0, len(components))
	for component := range components {
		names = append(names, component)
	}
	slices.Sort(names)
	fmt.Fprintf(os.Stderr, "%s: run this binary under one of the names %s (symlinks to it), "+
		"or set %s to one of them; `%s version` prints the Argo CD version\n",
		name, strings.Join(names, ", "), nameOverrideVariable, name)
	return 2
}
