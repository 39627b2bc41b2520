// Command berth runs workloads in their own network namespaces, wired with
// CNI, and guarantees nothing of them outlives the workload.
package main

import (
	"os"

	"github.com/berth/berth/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
