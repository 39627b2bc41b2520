// Command berth runs workloads in their own network namespaces, wired with
// CNI, and guarantees nothing of them outlives the workload.
package main

import (
	"os"

	"github.com/berth/berth/cli"
	"github.com/berth/berth/internal/inherited"
)

func main() {
	// What berth inherited reaches none of its children (CNI plugins,
	// the podman service, task supervisors).
	_ = inherited.CloseOnExec(3)
	os.Exit(cli.Main(os.Args[1:]))
}
