// Package network groups berth's network core: the library that gives a
// workload a pinned namespace wired through CNI and takes all of it away
// again, whatever died.
//
//   - evidence: the one reader of each host format that says what CNI and
//     the kernel hold (libcni's cache, leases, iptables rules, mountinfo,
//     /proc holders);
//   - netns: pinned namespaces, their holders and their removal;
//   - cni: libcni's ADD, CHECK and DEL with berth's ownership markers;
//   - hostclean: removal of what a plugin left on the host, by evidence;
//   - attach: the attachment lifecycle (setup, self-healing check,
//     teardown) that the runner, gc and the CLI call.
//
// Its packages may import the foundations (internal/..., store) and one
// another, never tasks, jobs, the node or the interfaces above them;
// layers_test.go holds them to it.
package network
