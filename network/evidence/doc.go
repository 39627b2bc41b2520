// Package evidence reads what the host shows about CNI attachments:
// libcni's results cache, the ownership markers berth puts in CNI_ARGS
// (and the one test of them), the iptables rules the plugins made with
// their marker comments, host-local's leases, mountinfo and the /proc
// entries that say who holds a namespace.
//
// It is the one reader of each of those formats. Nothing here changes the
// host and nothing is kept between calls: every function reads afresh, so
// a caller that needs a consistent view takes its own lock first (gc reads
// under a network's exclusive lock).
package evidence
