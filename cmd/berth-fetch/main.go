// Command berth-fetch is berth's artifact fetcher: the sandboxed child that
// the runner starts for each artifact, as the task's user with no
// capabilities under Landlock (package artifact). It is a binary of its
// own so that berth-supervisor, which stays resident for every running
// task, links none of its HTTP, TLS and archive code.
package main

import (
	"fmt"
	"os"

	"github.com/berth/berth/task/artifact"
)

func main() {
	if len(os.Args) < 2 || !artifact.IsStage(os.Args[1]) {
		fmt.Fprintf(os.Stderr, "%s is started by berth to fetch an artifact (%s %s ALLOC TASK, with its descriptors); it is not run by hand\n", artifact.Binary, artifact.Binary, artifact.StageCommand)
		os.Exit(2)
	}
	os.Exit(artifact.ChildMain(os.Args))
}
