// Command berth-supervisor is the per-task supervisor of berth's raw_exec
// and exec drivers: the task's parent, owner of its log files and writer of
// its exit status, so that a task outlives the berth that started it (see
// package driver/exec/supervisor). It is a binary of its own, with few
// imports, because one runs per task: ~2 MB RSS and ~0.6 MB PSS each,
// against ~10 MB RSS for a re-exec of berth. Artifacts are fetched by
// berth-fetch, not here: deps_test.go keeps HTTP, TLS and archive code out.
package main

import (
	"os"

	"github.com/berth/berth/task/driver/exec/supervisor"
)

func main() {
	os.Exit(supervisor.Main(os.Args))
}
