// Package service is berth's native service catalog (Nomad's provider
// "nomad") on one node: the Registry of registrations, kept in the store
// so that every berth process on the data dir and the next agent see
// them, and the Checker that runs their http and tcp checks with Nomad's
// (and Consul's) semantics on per-check timers with bounded concurrency.
//
// Resolve turns a service block of a running allocation into the address
// and port it registers (address_mode auto, host, alloc, driver) and its
// checks into targets, dialled from the host or, for address_mode
// "alloc", inside the allocation's network namespace.
package service
