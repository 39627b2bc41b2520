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
	"path/filepath"
	"strings"

	"github.com/coreos/go-iptables/iptables"

	"github.com/berth/berth/network/evidence"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Plan says how a tidy runs. A dry run changes nothing and reports what a
// real run would remove once the attachments a collection is about to
// reclaim are gone: their bridge ports, leases and firewall rules are not
// counted as uses (gc's plan tidies after its reclaims, as its real run
// does).
type Plan struct {
	DryRun bool
	// GoingIDs are the container IDs whose leases will be released first.
	GoingIDs map[string]bool
	// GoingIPs are their addresses: the firewall rules naming them go with them.
	GoingIPs []string
	// GoingPorts is how many bridge ports go with them.
	GoingPorts int
}

// goingRule says whether an iptables rule line is one of an attachment
// the plan reclaims first (it names one of its addresses).
func (p Plan) goingRule(line string) bool {
	for _, ip := range p.GoingIPs {
		for _, f := range strings.Fields(line) {
			if f == ip || strings.HasPrefix(f, ip+"/") {
				return true
			}
		}
	}
	return false
}

// RemoveBridgeIfUnused deletes the bridge called name when no interface (of
// any runtime) is attached to it. It reports how many are: 0 when it
// deleted the bridge (or, in a dry run, would), more when it kept it, -1
// when there was no bridge of that name.
func RemoveBridgeIfUnused(ctx context.Context, name string, p Plan) (ports int, err error) {
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
	if p.DryRun {
		ports = max(ports-p.GoingPorts, 0)
	}
	if ports > 0 || p.DryRun {
		return ports, nil
	}
	if err := netlink.LinkDel(br); err != nil {
		return -1, fmt.Errorf("delete unused bridge %s: %w", name, err)
	}
	return 0, nil
}

// RemoveHostLocalDirIfEmpty deletes a network's host-local directory when
// it holds no lease (only host-local's lock and last-reserved markers),
// under host-local's own lock. A dry run reports whether it would, leases
// of the plan's GoingIDs not counting.
func RemoveHostLocalDirIfEmpty(ctx context.Context, network string, p Plan) (bool, error) {
	if network == "" || strings.ContainsAny(network, "/") || network == "." || network == ".." {
		return false, fmt.Errorf("remove host-local dir: bad network name %q", network)
	}
	dir := filepath.Join(evidence.HostLocalDir, network)
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
		if n == "lock" || strings.HasPrefix(n, "last_reserved_ip") {
			continue
		}
		if p.DryRun && !de.IsDir() {
			if id, _, err := evidence.ReadLease(filepath.Join(dir, n)); err == nil && p.GoingIDs[id] {
				continue
			}
		}
		return false, nil
	}
	if p.DryRun {
		return true, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return false, fmt.Errorf("remove host-local dir %s: %w", dir, err)
	}
	return true, nil
}

// RemoveLease deletes a host-local lease file if it still names the same
// holder, under host-local's lock on its directory as host-local itself
// takes it: the address may have been released and handed to another
// container since l was read. A lease already gone is not an error.
func RemoveLease(ctx context.Context, l evidence.Lease) error {
	if _, err := os.Stat(l.Path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	lockPath := filepath.Join(l.Dir, "lock")
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open host-local lock %s: %w", lockPath, err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock host-local dir %s: %w", l.Dir, err)
	}
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN)
	id, _, err := evidence.ReadLease(l.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read lease %s: %w", l.Path, err)
	}
	if id != l.ID {
		return nil
	}
	if err := os.Remove(l.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove lease %s: %w", l.Path, err)
	}
	return nil
}

// TidySharedChains removes the firewall plugin's CNI-FORWARD/CNI-ADMIN and
// the portmap plugin's CNI-HOSTPORT-* chains, with the jumps to them, when
// no attachment uses them: CNI-FORWARD holds only the jump to an empty
// CNI-ADMIN, and CNI-HOSTPORT-DNAT is empty with no CNI-DN-* chain left.
// Operator rules in CNI-ADMIN keep everything. It returns what it removed.
func TidySharedChains(ctx context.Context, p Plan) ([]string, error) {
	var removed []string
	var errs []error
	for _, proto := range []iptables.Protocol{iptables.ProtocolIPv4, iptables.ProtocolIPv6} {
		ipt, err := iptables.NewWithProtocol(proto)
		if err != nil {
			continue // no ip6tables on this host
		}
		r, err := tidyFilter(ipt, p)
		removed = append(removed, r...)
		errs = append(errs, err)
		r, err = tidyNat(ipt, p)
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

func tidyFilter(ipt *iptables.IPTables, p Plan) ([]string, error) {
	admin, adminOK, err := rules(ipt, "filter", "CNI-ADMIN")
	if err != nil || len(admin) > 0 {
		return nil, err
	}
	fwd, fwdOK, err := rules(ipt, "filter", "CNI-FORWARD")
	if err != nil {
		return nil, err
	}
	for _, r := range fwd {
		if !strings.HasSuffix(r, "-j CNI-ADMIN") && !(p.DryRun && p.goingRule(r)) {
			return nil, nil // an attachment still has rules
		}
	}
	var removed []string
	if p.DryRun {
		if fwdOK {
			removed = append(removed, protoName(ipt)+" filter CNI-FORWARD")
		}
		if adminOK {
			removed = append(removed, protoName(ipt)+" filter CNI-ADMIN")
		}
		return removed, nil
	}
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

func tidyNat(ipt *iptables.IPTables, p Plan) ([]string, error) {
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
	if p.DryRun {
		for _, c := range []string{"CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-SETMARK", "CNI-HOSTPORT-MASQ"} {
			if ok, err := ipt.ChainExists("nat", c); err != nil {
				return removed, err
			} else if ok {
				removed = append(removed, protoName(ipt)+" nat "+c)
			}
		}
		return removed, nil
	}
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
	marker := evidence.Marker(network, id)
	return RemoveRulesMatching(ctx, func(line string) bool {
		return strings.Contains(line, marker)
	})
}

// Rules removes berth-marked rules from the host's iptables: the
// cni.RuleRemover that CNI DEL uses for what the plugins leave.
type Rules struct{}

// RemoveAttachmentRules is the function of the same name.
func (Rules) RemoveAttachmentRules(ctx context.Context, network, id string) ([]string, error) {
	return RemoveAttachmentRules(ctx, network, id)
}

// Host is what attach uses to tidy a network once its last attachment is
// gone: the functions of the same names, as methods so that tests can put
// a fake in their place.
type Host struct{}

// RemoveBridgeIfUnused is the function of the same name.
func (Host) RemoveBridgeIfUnused(ctx context.Context, name string, p Plan) (int, error) {
	return RemoveBridgeIfUnused(ctx, name, p)
}

// RemoveHostLocalDirIfEmpty is the function of the same name.
func (Host) RemoveHostLocalDirIfEmpty(ctx context.Context, network string, p Plan) (bool, error) {
	return RemoveHostLocalDirIfEmpty(ctx, network, p)
}

// TidySharedChains is the function of the same name.
func (Host) TidySharedChains(ctx context.Context, p Plan) ([]string, error) {
	return TidySharedChains(ctx, p)
}

// RemoveRulesMatching deletes every CNI rule for which match is true, and
// the non-shared CNI-* chains they jump to once those are empty.
func RemoveRulesMatching(ctx context.Context, match func(line string) bool) ([]string, error) {
	var removed []string
	var errs []error
	for _, fam := range evidence.Families() {
		proto := iptables.ProtocolIPv4
		if fam == evidence.IPv6 {
			proto = iptables.ProtocolIPv6
		}
		ipt, err := iptables.NewWithProtocol(proto)
		if err != nil {
			continue // no ip6tables on this host
		}
		set, err := evidence.ReadRuleset(ctx, fam)
		if errors.Is(err, evidence.ErrNoTool) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rs := set.Rules
		targets := map[string]bool{}
		removedLine := map[string]bool{}
		// Delete from the last rule backwards so that earlier indexes stay valid.
		for i := len(rs) - 1; i >= 0; i-- {
			r := rs[i]
			if !r.CNI() || !match(r.Line) {
				continue
			}
			if t := r.Jump(); strings.HasPrefix(t, "CNI-") && !sharedChain(t) {
				targets[r.Table+"/"+t] = true
			}
			if err := deleteRule(ipt, r.Table, r.Line); err != nil {
				errs = append(errs, fmt.Errorf("%s: delete rule of %s/%s: %w", protoName(ipt), r.Table, r.Chain, err))
				continue
			}
			removedLine[r.Table+" "+r.Line] = true
			removed = append(removed, fmt.Sprintf("%s %s rule %s", protoName(ipt), r.Table, r.Line))
		}
		// A chain a marked rule jumped to is the attachment's own (the
		// bridge plugin's CNI-<hash>, portmap's CNI-DN-<hash>): its rules
		// need not carry the marker (portmap's do not). It goes once
		// nothing jumps to it any more.
		jumped := map[string]bool{}
		for _, r := range rs {
			if t := r.Jump(); targets[r.Table+"/"+t] && !removedLine[r.Table+" "+r.Line] {
				jumped[r.Table+"/"+t] = true
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
