package service

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/berth/berth/job/jobspec"
)

// ErrAddress: a service or check cannot be given an address (an unknown
// port label, address_mode "alloc" without a namespace, "driver" with a
// driver that has no network of its own).
var ErrAddress = errors.New("cannot resolve address")

// Port is one port label of an allocation.
type Port struct {
	Label    string
	HostPort int
	// To is the port inside the namespace (the host port when the group
	// maps none).
	To int
}

// AllocNet is what an allocation's network gives its services.
type AllocNet struct {
	// Mode is the group's network mode: "host", "none", "bridge", "cni/<name>".
	Mode string
	// HostIP is the host address ports are published on.
	HostIP string
	// AllocIP is the address inside the namespace; empty in host mode.
	AllocIP string
	// NetnsPath is the namespace's pinned path; empty in host mode.
	NetnsPath string
	Ports     []Port
	// DriverNet is set when the task's driver reports an address of its
	// own, the allocation's (a podman container in the group's namespace);
	// address_mode "driver" needs it.
	DriverNet bool
}

func (n AllocNet) port(label string) (Port, bool) {
	for _, p := range n.Ports {
		if p.Label == label {
			return p, true
		}
	}
	return Port{}, false
}

// ResolveService returns the address and port a service registers, as
// Nomad's for tasks that share the group's namespace: "auto" is "host",
// the host address and the label's host port;
// "alloc" and "driver" the namespace's address and the label's mapped
// port (or a number). A custom address (address, already interpolated)
// needs "auto" and takes the label's host port or a number.
func ResolveService(mode, address, port string, n AllocNet) (string, int, error) {
	if mode == "" {
		mode = "auto"
	}
	if address != "" {
		if mode != "auto" {
			return "", 0, fmt.Errorf("%w: a custom address needs address_mode \"auto\", not %q", ErrAddress, mode)
		}
		p, err := hostPort(port, n, true)
		return address, p, err
	}
	if mode == "auto" {
		mode = "host"
	}
	switch mode {
	case "host":
		p, err := hostPort(port, n, false)
		return n.HostIP, p, err
	case "alloc", "driver":
		if mode == "driver" && !n.DriverNet {
			return "", 0, fmt.Errorf("%w: address_mode \"driver\": the task's driver has no network of its own (use \"host\" or \"alloc\")", ErrAddress)
		}
		if n.AllocIP == "" {
			return "", 0, fmt.Errorf("%w: address_mode %q needs a network namespace (network mode %q has none; use \"host\")", ErrAddress, mode, n.Mode)
		}
		p, err := allocPort(port, n)
		return n.AllocIP, p, err
	}
	return "", 0, fmt.Errorf("%w: unknown address_mode %q", ErrAddress, mode)
}

func hostPort(port string, n AllocNet, numberOK bool) (int, error) {
	if port == "" {
		return 0, nil
	}
	if p, ok := n.port(port); ok {
		return p.HostPort, nil
	}
	if v, err := strconv.Atoi(port); err == nil && numberOK {
		return v, nil
	}
	return 0, fmt.Errorf("%w: port %q is not a port label of the group's network", ErrAddress, port)
}

func allocPort(port string, n AllocNet) (int, error) {
	if port == "" {
		return 0, nil
	}
	if p, ok := n.port(port); ok {
		if p.To > 0 {
			return p.To, nil
		}
		return p.HostPort, nil
	}
	if v, err := strconv.Atoi(port); err == nil && v > 0 && v < 65536 {
		return v, nil
	}
	return 0, fmt.Errorf("%w: port %q is neither a port label of the group's network nor a port number", ErrAddress, port)
}

// Target is where a check goes.
type Target struct {
	Address string
	Port    int
	// NetnsPath, when set, is the namespace the check dials from
	// (address_mode "alloc").
	NetnsPath string
}

// HostPort is "address:port".
func (t Target) HostPort() string {
	return netJoin(t.Address, t.Port)
}

// ResolveCheck returns where a check of a service goes, as Nomad's: the
// check's own address_mode ("host" unless set, never inherited), or the
// service's custom address when it has one and the check sets no mode;
// the check's port, else the service's.
func ResolveCheck(c *jobspec.Check, svcMode, svcAddress, svcPort string, n AllocNet) (Target, error) {
	port := c.Port
	if port == "" {
		port = svcPort
	}
	mode := c.AddressMode
	if mode == "" && svcAddress != "" && (svcMode == "" || svcMode == "auto") {
		p, err := hostPort(port, n, true)
		return Target{Address: svcAddress, Port: p}, err
	}
	if mode == "" {
		mode = "host"
	}
	switch mode {
	case "host":
		p, err := hostPort(port, n, false)
		if err == nil && p == 0 {
			err = fmt.Errorf("%w: the check has no port (set port on the check or its service)", ErrAddress)
		}
		return Target{Address: n.HostIP, Port: p}, err
	case "alloc", "driver":
		if mode == "driver" && !n.DriverNet {
			return Target{}, fmt.Errorf("%w: check address_mode \"driver\": the task's driver has no network of its own", ErrAddress)
		}
		if n.AllocIP == "" {
			return Target{}, fmt.Errorf("%w: check address_mode %q needs a network namespace (network mode %q has none)", ErrAddress, mode, n.Mode)
		}
		p, err := allocPort(port, n)
		if err == nil && p == 0 {
			err = fmt.Errorf("%w: the check has no port (set port on the check or its service)", ErrAddress)
		}
		return Target{Address: n.AllocIP, Port: p, NetnsPath: n.NetnsPath}, err
	}
	return Target{}, fmt.Errorf("%w: unknown check address_mode %q", ErrAddress, mode)
}
