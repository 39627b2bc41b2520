package supervisor

import (
	"errors"

	"github.com/berth/berth/internal/helperbin"
)

// PathEnv names the supervisor binary for processes that cannot be told
// otherwise (tests, a berth run from a build directory).
const PathEnv = "BERTH_SUPERVISOR"

// ErrNotFound is returned when the berth-supervisor binary is not found.
var ErrNotFound = errors.New(Binary + " not found")

// Find locates the supervisor binary: explicit, $BERTH_SUPERVISOR, beside
// the running executable (an installed berth), then $PATH. The drivers
// run tasks with it; artifacts are fetched by another binary
// (berth-fetch, package artifact), so that this one, resident once per
// task, links no HTTP, TLS or archive code.
func Find(explicit string) (string, error) {
	return helperbin.Find(explicit, Binary, PathEnv, ErrNotFound)
}
