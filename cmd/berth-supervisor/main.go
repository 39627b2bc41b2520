// Command berth-supervisor is the per-task supervisor of berth's raw_exec
// and exec drivers: the task's parent, owner of its log files and writer of
// its exit status, so that a task outlives the berth that started it (see
// package driver/exec/supervisor). It is a binary of its own, with few
// imports, because one runs per task: ~2 MB RSS and ~0.6 MB PSS each,
// against ~10 MB RSS for a re-exec of berth. It is also the sandboxed
// fetcher of artifacts ("fetch", package artifact).
package main

import (
	"os"

	"github.com/berth/berth/artifact"
	"github.com/berth/berth/driver/exec/supervisor"
)

func main() {
	if len(os.Args) >= 2 && artifact.IsStage(os.Args[1]) {
		os.Exit(artifact.ChildMain(os.Args))
	}
	os.Exit(supervisor.Main(os.Args))
}
