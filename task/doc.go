// Package task groups what runs a task and what it finds around it:
//
//   - driver: the driver interface, and driver/exec (raw_exec and exec,
//     with their per-task supervisor, driver/exec/supervisor) and
//     driver/podman;
//   - allocdir: allocation and task directories;
//   - artifact: artifact fetching, sandboxed;
//   - template: template rendering.
//
// Its packages may import the network core and the foundations
// (internal/..., store), never jobs, the node or the interfaces above
// them; layers_test.go holds them to it.
package task
