package template

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// sockaddrFuncs are the go-sockaddr template calls berth answers.
var sockaddrFuncs = []string{"GetPrivateIP", "GetPrivateIPs", "GetPublicIP", "GetPublicIPs", "GetInterfaceIP", "GetInterfaceIPs", "GetDefaultInterfaces"}

// privateNets are the ranges go-sockaddr calls private (RFC 1918, RFC
// 6598 shared address space, and IPv6 unique local).
var privateNets = func() []*net.IPNet {
	var out []*net.IPNet
	for _, c := range []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7"} {
		_, n, _ := net.ParseCIDR(c)
		out = append(out, n)
	}
	return out
}()

func isPrivate(ip net.IP) bool {
	for _, n := range privateNets {
		if n.Contains(ip) {
			return true
		}
	}
	return false
}

// sockaddr answers the single calls of go-sockaddr's template language
// that Nomad jobs use to find the node's address ({{ sockaddr
// "GetPrivateIP" }}, {{ sockaddr "GetInterfaceIP \"eth0\"" }}); its
// pipelines (GetAllInterfaces | include ...) are not supported.
func sockaddr(expr string) (string, error) {
	name, arg, err := parseSockaddr(expr)
	if err != nil {
		return "", err
	}
	ifs, err := interfaceAddrs()
	if err != nil {
		return "", fmt.Errorf("sockaddr: %w", err)
	}
	def := defaultInterfaces()
	switch name {
	case "GetPrivateIP", "GetPrivateIPs", "GetPublicIP", "GetPublicIPs":
		private := strings.HasPrefix(name, "GetPrivate")
		var ips []string
		// go-sockaddr prefers the default route's interface.
		for _, pass := range []bool{true, false} {
			for _, it := range ifs {
				if def[it.name] != pass || it.loopback || it.ip.To4() == nil || it.ip.IsLinkLocalUnicast() {
					continue
				}
				if isPrivate(it.ip) == private {
					ips = append(ips, it.ip.String())
				}
			}
		}
		if strings.HasSuffix(name, "IPs") {
			return strings.Join(ips, " "), nil
		}
		if len(ips) == 0 {
			return "", nil
		}
		return ips[0], nil
	case "GetInterfaceIP", "GetInterfaceIPs":
		var ips []string
		for _, it := range ifs {
			if it.name == arg && it.ip.To4() != nil {
				ips = append(ips, it.ip.String())
			}
		}
		if name == "GetInterfaceIPs" {
			return strings.Join(ips, " "), nil
		}
		if len(ips) == 0 {
			return "", fmt.Errorf("sockaddr: interface %q has no IPv4 address", arg)
		}
		return ips[0], nil
	case "GetDefaultInterfaces":
		var names []string
		for n := range def {
			names = append(names, n)
		}
		return strings.Join(names, " "), nil
	}
	return "", fmt.Errorf("sockaddr %q: berth answers only %s", expr, strings.Join(sockaddrFuncs, ", "))
}

func parseSockaddr(expr string) (name, arg string, err error) {
	expr = strings.TrimSpace(expr)
	if strings.Contains(expr, "|") {
		return "", "", fmt.Errorf("sockaddr %q: pipelines are not supported; berth answers %s", expr, strings.Join(sockaddrFuncs, ", "))
	}
	name, rest, _ := strings.Cut(expr, " ")
	rest = strings.TrimSpace(rest)
	if rest != "" {
		if arg, err = strconv.Unquote(rest); err != nil {
			return "", "", fmt.Errorf("sockaddr %q: the argument must be a quoted string", expr)
		}
	}
	if !contains(sockaddrFuncs, name) {
		return "", "", fmt.Errorf("sockaddr %q: berth answers only %s", expr, strings.Join(sockaddrFuncs, ", "))
	}
	if (name == "GetInterfaceIP" || name == "GetInterfaceIPs") && arg == "" {
		return "", "", fmt.Errorf("sockaddr %q: name the interface, e.g. %s \"eth0\"", expr, name)
	}
	return name, arg, nil
}

type ifAddr struct {
	name     string
	loopback bool
	ip       net.IP
}

// interfaceAddrs lists the addresses of the interfaces that are up, in
// interface order.
func interfaceAddrs() ([]ifAddr, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var out []ifAddr
	for _, i := range ifs {
		if i.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, err := i.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				out = append(out, ifAddr{name: i.Name, loopback: i.Flags&net.FlagLoopback != 0, ip: n.IP})
			}
		}
	}
	return out, nil
}

// defaultInterfaces are the interfaces of IPv4 default routes
// (/proc/net/route).
func defaultInterfaces() map[string]bool {
	out := map[string]bool{}
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 8 && fs[1] == "00000000" && fs[7] == "00000000" {
			out[fs[0]] = true
		}
	}
	return out
}
