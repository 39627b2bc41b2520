package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/berth/berth/network/attach"
)

func newNetCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "net",
		Short: "Create, check, remove and list network namespaces wired with CNI",
	}
	cmd.AddCommand(newNetUpCmd(g), newNetCheckCmd(g), newNetDownCmd(g), newNetLsCmd(g))
	return cmd
}

// withManager opens the node and runs fn with its attachment manager.
func (g *Globals) withManager(ctx context.Context, fn func(*attach.Manager) error) error {
	n, err := g.openNode(ctx)
	if err != nil {
		return err
	}
	defer g.closeNode(ctx, n)
	// Finish what a crashed berth left half-done (a few µs when nothing is).
	g.ReplayPending(ctx, n)
	return fn(n.Attach)
}

// ParsePort reads HOST:CONTAINER[/PROTO] into a CNI portMappings entry.
func ParsePort(s string) (map[string]any, error) {
	spec, proto, _ := strings.Cut(s, "/")
	if proto == "" {
		proto = "tcp"
	}
	if proto != "tcp" && proto != "udp" && proto != "sctp" {
		return nil, fmt.Errorf("port %q: protocol must be tcp, udp or sctp", s)
	}
	hs, cs, ok := strings.Cut(spec, ":")
	if !ok {
		return nil, fmt.Errorf("port %q: use HOST:CONTAINER[/PROTO], e.g. 8080:80/tcp", s)
	}
	hp, err1 := strconv.Atoi(hs)
	cp, err2 := strconv.Atoi(cs)
	if err1 != nil || err2 != nil || hp < 1 || hp > 65535 || cp < 1 || cp > 65535 {
		return nil, fmt.Errorf("port %q: ports must be numbers from 1 to 65535", s)
	}
	return map[string]any{"hostPort": hp, "containerPort": cp, "protocol": proto}, nil
}

func newNetUpCmd(g *Globals) *cobra.Command {
	var network, ifname string
	var ports, args []string
	cmd := &cobra.Command{
		Use:   "up ID --network NAME",
		Short: "Give ID a network namespace attached to a CNI network (or CHECK and heal an existing one)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if network == "" {
				return errors.New("--network is required: name a network from " + g.CNIConfigDir)
			}
			req := attach.Request{ID: a[0], Network: network, IfName: ifname, Args: map[string]string{}}
			var pm []map[string]any
			for _, p := range ports {
				m, err := ParsePort(p)
				if err != nil {
					return err
				}
				pm = append(pm, m)
			}
			if len(pm) > 0 {
				req.CapabilityArgs = map[string]any{"portMappings": pm}
			}
			for _, kv := range args {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return fmt.Errorf("--arg %q: use KEY=VALUE", kv)
				}
				req.Args[k] = v
			}
			return g.withManager(cmd.Context(), func(m *attach.Manager) error {
				st, err := m.Setup(cmd.Context(), req)
				if err != nil {
					return err
				}
				return g.printStatus(st)
			})
		},
	}
	cmd.Flags().StringVar(&network, "network", "", "CNI network name (from --cni-config-dir)")
	cmd.Flags().StringVar(&ifname, "ifname", "eth0", "interface name inside the namespace")
	cmd.Flags().StringArrayVarP(&ports, "port", "p", nil, "port mapping HOST:CONTAINER[/PROTO] (repeatable; needs the portmap plugin)")
	cmd.Flags().StringArrayVar(&args, "arg", nil, "extra CNI_ARGS KEY=VALUE (repeatable)")
	return cmd
}

func (g *Globals) printStatus(st *attach.Status) error {
	if g.JSON {
		return g.PrintJSON(st)
	}
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "id\t%s\n", st.ID)
	fmt.Fprintf(w, "netns\t%s\n", st.NetnsPath)
	fmt.Fprintf(w, "network\t%s\n", st.Network)
	fmt.Fprintf(w, "interface\t%s\n", st.Interface)
	fmt.Fprintf(w, "ipv4\t%s\n", strings.Join(st.IPv4, ", "))
	if len(st.IPv6) > 0 {
		fmt.Fprintf(w, "ipv6\t%s\n", strings.Join(st.IPv6, ", "))
	}
	fmt.Fprintf(w, "gateway\t%s\n", strings.Join(st.Gateway, ", "))
	if len(st.DNS.Nameservers) > 0 {
		fmt.Fprintf(w, "dns\t%s\n", strings.Join(st.DNS.Nameservers, ", "))
	}
	switch {
	case st.Healed != "":
		fmt.Fprintf(w, "state\trecreated: CHECK had failed: %s\n", st.Healed)
	case st.Created:
		fmt.Fprintf(w, "state\tcreated\n")
	case st.CheckSkipped != "":
		fmt.Fprintf(w, "state\texists (not checked: %s)\n", st.CheckSkipped)
	default:
		fmt.Fprintf(w, "state\texists, CHECK passed\n")
	}
	return w.Flush()
}

func newNetCheckCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "check ID",
		Short: "Run CNI CHECK on ID's attachment (exit 1 if it is misconfigured; `net up` heals it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			return g.withManager(cmd.Context(), func(m *attach.Manager) error {
				st, err := m.Check(cmd.Context(), a[0])
				if err != nil {
					if errors.Is(err, attach.ErrCheckFailed) {
						return fmt.Errorf("%w\nto recreate it: berth net up %s --network %s", err, a[0], st.Network)
					}
					return err
				}
				return g.printStatus(st)
			})
		},
	}
}

func newNetDownCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "down ID",
		Short: "DEL ID's CNI attachment and remove its namespace (idempotent)",
		Long: `down runs CNI DEL while the namespace still exists, then removes the namespace
and berth's record. What the network's plugins keep for every attachment by design
(the bridge, the shared CNI-FORWARD/CNI-ADMIN chains) stays, as with every CNI
runtime; berth gc removes it once no interface of any runtime uses it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx := cmd.Context()
			return g.withManager(ctx, func(m *attach.Manager) error {
				rep, err := m.Teardown(ctx, a[0])
				if err != nil {
					return err
				}
				if g.JSON {
					return g.PrintJSON(map[string]any{"teardown": rep})
				}
				switch {
				case rep.Nothing:
					fmt.Fprintf(g.stdout, "%s: nothing to remove\n", a[0])
				default:
					fmt.Fprintf(g.stdout, "%s: removed (network %s, DEL %.1f ms, remove %.1f ms)\n", a[0], rep.Network, rep.Timings.Del, rep.Timings.Remove)
					if rep.Busy {
						fmt.Fprintf(g.stdout, "  namespace was busy, detached; holders: %s\n", strings.Join(rep.Holders, "; "))
					}
				}
				return nil
			})
		},
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
