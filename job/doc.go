// Package job groups what turns a Nomad job file into running
// allocations:
//
//   - jobspec: the job-file parser and its evaluation budget (jobspectest:
//     test inputs);
//   - runner: allocations from start to teardown, restarts, periodic and
//     re-adoption after an agent restart;
//   - service: native service registration and checks.
//
// Its packages may import tasks and drivers, the network core and the
// foundations (internal/..., store), never the node or the interfaces
// above them; layers_test.go holds them to it.
package job
