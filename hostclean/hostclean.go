// Package hostclean removes what CNI plugins leave on a host by design
// once nothing uses it any more: a bridge without ports, the shared
// iptables chains of the firewall and portmap plugins, an empty host-local
// directory. The plugins create these on first use and never remove them;
// berth promises to leave a host as it found it.
package hostclean

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/coreos/go-iptables/iptables"

	"github.com/berth/berth/internal/hostlocal"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// HostLocalDir is where host-local keeps its leases, one directory per network.
const HostLocalDir = hostlocal.DefaultDir

// RemoveBridgeIfUnused deletes the bridge called name when no interface (of
// any runtime) is attached to it. It reports how many are: 0 when it
// deleted the bridge, more when it kept it, -1 when there was no bridge of
// that name.
func RemoveBridgeIfUnused(ctx context.Context, name string) (ports int, err error) {
	if name == "" {
		return -1, nil
	}
	br, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return -1, nil
		}
		return -1, fmt.Errorf("find bridge %s: %w", name, err)
	}
	if br.Type() != "bridge" {
		return -1, nil
	}
	links, err := netlink.LinkList()
	if err != nil {
		return -1, fmt.Errorf("list links: %w", err)
	}
	for _, l := range links {
		if l.Attrs().MasterIndex == br.Attrs().Index {
			ports++
		}
	}
	if ports > 0 {
		return ports, nil
	}
	if err := netlink.LinkDel(br); err != nil {
		return -1, fmt.Errorf("delete unused bridge %s: %w", name, err)
	}
	return 0, nil
}

// RemoveHostLocalDirIfEmpty deletes a network's host-local directory when
// it holds no lease (only host-local's lock and last-reserved markers),
// under host-local's own lock.
func RemoveHostLocalDirIfEmpty(ctx context.Context, network string) (bool, error) {
	if network == "" || strings.ContainsAny(network, "/") || network == "." || network == ".." {
		return false, fmt.Errorf("remove host-local dir: bad network name %q", network)
	}
	dir := filepath.Join(HostLocalDir, network)
	lock, err := os.Open(filepath.Join(dir, "lock"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("open host-local lock of %s: %w", network, err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return false, fmt.Errorf("lock host-local dir %s: %w", dir, err)
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return false, fmt.Errorf("read host-local dir %s: %w", dir, err)
	}
	for _, de := range des {
		n := de.Name()
		if n != "lock" && !strings.HasPrefix(n, "last_reserved_ip") {
			return false, nil
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return false, fmt.Errorf("remove host-local dir %s: %w", dir, err)
	}
	return true, nil
}

// TidySharedChains removes the firewall plugin's CNI-FORWARD/CNI-ADMIN and
// the portmap plugin's CNI-HOSTPORT-* chains, with the jumps to them, when
// no attachment uses them: CNI-FORWARD holds only the jump to an empty
// CNI-ADMIN, and CNI-HOSTPORT-DNAT is empty with no CNI-DN-* chain left.
// Operator rules in CNI-ADMIN keep everything. It returns what it removed.
func TidySharedChains(ctx context.Context) ([]string, error) {
	var removed []string
	var errs []error
	for _, proto := range []iptables.Protocol{iptables.ProtocolIPv4, iptables.ProtocolIPv6} {
		ipt, err := iptables.NewWithProtocol(proto)
		if err != nil {
			continue // no ip6tables on this host
		}
		r, err := tidyFilter(ipt)
		removed = append(removed, r...)
		errs = append(errs, err)
		r, err = tidyNat(ipt)
		removed = append(removed, r...)
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}

func protoName(ipt *iptables.IPTables) string {
	if ipt.Proto() == iptables.ProtocolIPv6 {
		return "ip6tables"
	}
	return "iptables"
}

// rules lists a chain's rules without its "-N" line; a missing chain is empty.
func rules(ipt *iptables.IPTables, table, chain string) ([]string, bool, error) {
	ok, err := ipt.ChainExists(table, chain)
	if err != nil || !ok {
		return nil, false, err
	}
	all, err := ipt.List(table, chain)
	if err != nil {
		return nil, true, err
	}
	var out []string
	for _, r := range all {
		if strings.HasPrefix(r, "-A ") {
			out = append(out, r)
		}
	}
	return out, true, nil
}

// deleteJumps removes the rules of table/chain that jump to target.
func deleteJumps(ipt *iptables.IPTables, table, chain, target string) error {
	rs, ok, err := rules(ipt, table, chain)
	if err != nil || !ok {
		return err
	}
	for i := len(rs) - 1; i >= 0; i-- {
		if strings.HasSuffix(rs[i], "-j "+target) {
			if err := deleteRule(ipt, table, rs[i]); err != nil {
				return fmt.Errorf("delete jump %s/%s -> %s: %w", table, chain, target, err)
			}
		}
	}
	return nil
}

// deleteRule deletes the rule an "-A CHAIN ..." line describes, by its
// specification rather than its position: positions shift when another
// process changes the chain meanwhile, and deleting by a stale index would
// remove someone else's rule. A rule already gone is not an error.
func deleteRule(ipt *iptables.IPTables, table, line string) error {
	args, err := splitRule(line)
	if err != nil {
		return err
	}
	if len(args) < 2 || args[0] != "-A" {
		return fmt.Errorf("not a rule: %q", line)
	}
	err = ipt.Delete(table, args[1], args[2:]...)
	var e *iptables.Error
	if errors.As(err, &e) && e.IsNotExist() {
		return nil
	}
	return err
}

// splitRule splits an iptables-save rule line into arguments, undoing
// its double quotes and backslash escapes ("name: \"x\"").
func splitRule(line string) ([]string, error) {
	var args []string
	var cur strings.Builder
	inQuote, have := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
			have = true
		case c == '"':
			inQuote = !inQuote
			have = true
		case (c == ' ' || c == '\t') && !inQuote:
			if have {
				args = append(args, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if inQuote {
		return nil, fmt.Errorf("unbalanced quotes in rule %q", line)
	}
	if have {
		args = append(args, cur.String())
	}
	return args, nil
}

func tidyFilter(ipt *iptables.IPTables) ([]string, error) {
	admin, adminOK, err := rules(ipt, "filter", "CNI-ADMIN")
	if err != nil || len(admin) > 0 {
		return nil, err
	}
	fwd, fwdOK, err := rules(ipt, "filter", "CNI-FORWARD")
	if err != nil {
		return nil, err
	}
	for _, r := range fwd {
		if !strings.HasSuffix(r, "-j CNI-ADMIN") {
			return nil, nil // an attachment still has rules
		}
	}
	var removed []string
	if fwdOK {
		if err := deleteJumps(ipt, "filter", "FORWARD", "CNI-FORWARD"); err != nil {
			return removed, err
		}
		if err := ipt.ClearAndDeleteChain("filter", "CNI-FORWARD"); err != nil {
			return removed, fmt.Errorf("%s: delete chain CNI-FORWARD: %w", protoName(ipt), err)
		}
		removed = append(removed, protoName(ipt)+" filter CNI-FORWARD")
	}
	if adminOK {
		if err := ipt.ClearAndDeleteChain("filter", "CNI-ADMIN"); err != nil {
			return removed, fmt.Errorf("%s: delete chain CNI-ADMIN: %w", protoName(ipt), err)
		}
		removed = append(removed, protoName(ipt)+" filter CNI-ADMIN")
	}
	return removed, nil
}

func tidyNat(ipt *iptables.IPTables) ([]string, error) {
	chains, err := ipt.ListChains("nat")
	if err != nil {
		return nil, fmt.Errorf("%s: list nat chains: %w", protoName(ipt), err)
	}
	for _, c := range chains {
		if strings.HasPrefix(c, "CNI-DN-") {
			return nil, nil
		}
	}
	dnat, dnatOK, err := rules(ipt, "nat", "CNI-HOSTPORT-DNAT")
	if err != nil || len(dnat) > 0 {
		return nil, err
	}
	var removed []string
	if dnatOK {
		for _, from := range []string{"PREROUTING", "OUTPUT"} {
			if err := deleteJumps(ipt, "nat", from, "CNI-HOSTPORT-DNAT"); err != nil {
				return removed, err
			}
		}
	}
	if err := deleteJumps(ipt, "nat", "POSTROUTING", "CNI-HOSTPORT-MASQ"); err != nil {
		return removed, err
	}
	for _, c := range []string{"CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-SETMARK", "CNI-HOSTPORT-MASQ"} {
		ok, err := ipt.ChainExists("nat", c)
		if err != nil {
			return removed, err
		}
		if !ok {
			continue
		}
		if err := ipt.ClearAndDeleteChain("nat", c); err != nil {
			return removed, fmt.Errorf("%s: delete chain %s: %w", protoName(ipt), c, err)
		}
		removed = append(removed, protoName(ipt)+" nat "+c)
	}
	return removed, nil
}

// AttachmentMarker is the comment CNI plugins (bridge ipMasq, portmap)
// put on the iptables rules of one attachment, as iptables-save prints it.
func AttachmentMarker(network, id string) string {
	return fmt.Sprintf(`name: \"%s\" id: \"%s\"`, network, id)
}

// savedRule is one "-A" line of iptables-save with its position.
type savedRule struct {
	table, chain string
	index        int // 1-based within chain
	line         string
}

// readSave parses iptables-save (or ip6tables-save) output.
func readSave(ctx context.Context, tool string) (rules []savedRule, chains map[string][]string, err error) {
	out, err := exec.CommandContext(ctx, tool, "-w").Output()
	if err != nil {
		out, err = exec.CommandContext(ctx, tool).Output()
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", tool, err)
		}
	}
	chains = map[string][]string{}
	count := map[string]int{}
	table := ""
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, ":"):
			f := strings.Fields(line[1:])
			if len(f) > 0 {
				chains[table] = append(chains[table], f[0])
			}
		case strings.HasPrefix(line, "-A "):
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			key := table + "/" + f[1]
			count[key]++
			rules = append(rules, savedRule{table: table, chain: f[1], index: count[key], line: line})
		}
	}
	return rules, chains, nil
}

// jumpTarget is the chain a rule jumps to ("-j X"), if any.
func jumpTarget(line string) string {
	f := strings.Fields(line)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "-j" || f[i] == "-g" {
			return f[i+1]
		}
	}
	return ""
}

// sharedChains are created by plugins for all attachments; they are never
// one attachment's.
func sharedChain(c string) bool {
	return strings.HasPrefix(c, "CNI-HOSTPORT-") || c == "CNI-FORWARD" || c == "CNI-ADMIN"
}

// RemoveAttachmentRules deletes the iptables rules that carry the
// attachment's marker comment, and the per-attachment CNI-* chains they
// jump to once empty. The bridge plugin leaves these behind when its DEL
// runs without the namespace (after a reboot, or a namespace removed
// behind berth's back). Returns what it removed.
func RemoveAttachmentRules(ctx context.Context, network, id string) ([]string, error) {
	return RemoveRulesMatching(ctx, func(line string) bool {
		return strings.Contains(line, AttachmentMarker(network, id))
	})
}

// Rules removes berth-marked rules from the host's iptables: the
// cni.RuleRemover that CNI DEL uses for what the plugins leave.
type Rules struct{}

// RemoveAttachmentRules is the function of the same name.
func (Rules) RemoveAttachmentRules(ctx context.Context, network, id string) ([]string, error) {
	return RemoveAttachmentRules(ctx, network, id)
}

// RemoveRulesMatching deletes every CNI rule for which match is true, and
// the non-shared CNI-* chains they jump to once those are empty.
func RemoveRulesMatching(ctx context.Context, match func(line string) bool) ([]string, error) {
	var removed []string
	var errs []error
	for _, proto := range []iptables.Protocol{iptables.ProtocolIPv4, iptables.ProtocolIPv6} {
		tool := "iptables-save"
		if proto == iptables.ProtocolIPv6 {
			tool = "ip6tables-save"
		}
		if _, err := exec.LookPath(tool); err != nil {
			continue
		}
		ipt, err := iptables.NewWithProtocol(proto)
		if err != nil {
			continue
		}
		rs, _, err := readSave(ctx, tool)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		targets := map[string]bool{}
		removedLine := map[string]bool{}
		// Delete from the last rule backwards so that earlier indexes stay valid.
		for i := len(rs) - 1; i >= 0; i-- {
			r := rs[i]
			if !strings.Contains(r.line, "CNI") || !match(r.line) {
				continue
			}
			if t := jumpTarget(r.line); strings.HasPrefix(t, "CNI-") && !sharedChain(t) {
				targets[r.table+"/"+t] = true
			}
			if err := deleteRule(ipt, r.table, r.line); err != nil {
				errs = append(errs, fmt.Errorf("%s: delete rule of %s/%s: %w", protoName(ipt), r.table, r.chain, err))
				continue
			}
			removedLine[r.table+" "+r.line] = true
			removed = append(removed, fmt.Sprintf("%s %s rule %s", protoName(ipt), r.table, r.line))
		}
		// A chain a marked rule jumped to is the attachment's own (the
		// bridge plugin's CNI-<hash>, portmap's CNI-DN-<hash>): its rules
		// need not carry the marker (portmap's do not). It goes once
		// nothing jumps to it any more.
		jumped := map[string]bool{}
		for _, r := range rs {
			if t := jumpTarget(r.line); targets[r.table+"/"+t] && !removedLine[r.table+" "+r.line] {
				jumped[r.table+"/"+t] = true
			}
		}
		for tc := range targets {
			table, chain, _ := strings.Cut(tc, "/")
			if jumped[tc] {
				continue
			}
			if ok, err := ipt.ChainExists(table, chain); err != nil || !ok {
				continue
			}
			if err := ipt.ClearAndDeleteChain(table, chain); err != nil {
				errs = append(errs, fmt.Errorf("%s: delete chain %s/%s: %w", protoName(ipt), table, chain, err))
				continue
			}
			removed = append(removed, fmt.Sprintf("%s %s chain %s", protoName(ipt), table, chain))
		}
	}
	return removed, errors.Join(errs...)
}
