package evidence

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"sync"
)

// Family is an iptables address family, named by its command.
type Family string

const (
	IPv4 Family = "iptables"
	IPv6 Family = "ip6tables"
)

// Families are both, IPv4 first.
func Families() []Family { return []Family{IPv4, IPv6} }

// SaveTool is the family's dump command.
func (f Family) SaveTool() string { return string(f) + "-save" }

// ErrNoTool: the family's save command is not installed (a host without
// ip6tables); callers skip that family.
var ErrNoTool = errors.New("not installed")

// Rule is one "-A" line of iptables-save.
type Rule struct {
	Family Family
	Table  string
	Chain  string
	// Index is the rule's 1-based position in its chain at the time of
	// the snapshot.
	Index int
	// Line is the rule as iptables-save prints it, comments quoted with
	// backslashes: -A POSTROUTING ... --comment "name: \"n\" id: \"c\"" ...
	Line string
}

// CNI reports whether the rule mentions CNI: every rule the plugins make
// does, in its chain, its target or its comment.
func (r Rule) CNI() bool { return strings.Contains(r.Line, "CNI") }

// Jump is the chain the rule jumps or goes to ("-j X", "-g X"), if any.
func (r Rule) Jump() string {
	f := strings.Fields(r.Line)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "-j" || f[i] == "-g" {
			return f[i+1]
		}
	}
	return ""
}

// Ruleset is one family's snapshot.
type Ruleset struct {
	Family Family
	// Chains are the chains of each table, in the order saved.
	Chains map[string][]string
	Rules  []Rule
}

// ReadRuleset takes a snapshot of one family with its save command. The
// command is run without -w: iptables-save (1.8.9, Debian 12's) refuses
// it, and needs no lock, since each table is read in one call.
func ReadRuleset(ctx context.Context, f Family) (*Ruleset, error) {
	tool := f.SaveTool()
	if _, err := exec.LookPath(tool); err != nil {
		return nil, fmt.Errorf("%s: %w", tool, ErrNoTool)
	}
	out, err := exec.CommandContext(ctx, tool).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			return nil, fmt.Errorf("%s: %w: %s", tool, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	return ParseSave(f, out), nil
}

// ReadRulesets takes a snapshot of each family whose save command is
// installed. The families it could read are returned with the errors of
// the others.
func ReadRulesets(ctx context.Context) ([]*Ruleset, error) {
	var out []*Ruleset
	var errs []error
	for _, f := range Families() {
		rs, err := ReadRuleset(ctx, f)
		switch {
		case errors.Is(err, ErrNoTool):
		case err != nil:
			errs = append(errs, err)
		default:
			out = append(out, rs)
		}
	}
	return out, errors.Join(errs...)
}

// ParseSave parses iptables-save output.
func ParseSave(f Family, out []byte) *Ruleset {
	rs := &Ruleset{Family: f, Chains: map[string][]string{}}
	count := map[string]int{}
	table := ""
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = strings.TrimSpace(line[1:])
		case strings.HasPrefix(line, ":"):
			if fs := strings.Fields(line[1:]); len(fs) > 0 {
				rs.Chains[table] = append(rs.Chains[table], fs[0])
			}
		case strings.HasPrefix(line, "-A "):
			fs := strings.Fields(line)
			if len(fs) < 2 {
				continue
			}
			key := table + "/" + fs[1]
			count[key]++
			rs.Rules = append(rs.Rules, Rule{Family: f, Table: table, Chain: fs[1], Index: count[key], Line: line})
		}
	}
	return rs
}

// CNIRules are the rules of every ruleset that mention CNI.
func CNIRules(sets []*Ruleset) []Rule {
	var out []Rule
	for _, rs := range sets {
		for _, r := range rs.Rules {
			if r.CNI() {
				out = append(out, r)
			}
		}
	}
	return out
}

// Marker is the comment the bridge (ipMasq) and portmap plugins put on
// the rules of one attachment, as iptables-save prints it.
func Marker(network, id string) string {
	return fmt.Sprintf(`name: \"%s\" id: \"%s\"`, network, id)
}

// markerRe matches Marker's format anywhere in a line (portmap prefixes
// it: "dnat name: ...").
var markerRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`name: \\"([^"\\]+)\\" id: \\"([^"\\]+)\\"`) })

// ParseMarker returns the network and container ID a rule line is
// marked with.
func ParseMarker(line string) (network, id string, ok bool) {
	m := markerRe().FindStringSubmatch(line)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// firewallRe matches the two per-address rules the firewall plugin's
// iptables backend puts in CNI-FORWARD; they carry no marker, only the
// address.
var firewallRe = sync.OnceValue(func() *regexp.Regexp { // compiled on first use, not at every command's start
	return regexp.MustCompile(`^-A CNI-FORWARD -[ds] ([0-9A-Fa-f.:]+)/(?:32|128) .*-j ACCEPT$`)
})

// FirewallIP returns the address of a firewall plugin rule.
func FirewallIP(line string) (net.IP, bool) {
	m := firewallRe().FindStringSubmatch(line)
	if m == nil {
		return nil, false
	}
	ip := net.ParseIP(m[1])
	return ip, ip != nil
}
