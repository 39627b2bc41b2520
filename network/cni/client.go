package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// Timeouts bound each verb. A plugin that hangs is killed at the deadline;
// a caller's earlier deadline wins.
type Timeouts struct {
	Add, Del, Check, Other time.Duration
}

// DefaultTimeouts are long enough for iptables-heavy chains on a loaded
// host and short enough that a hung plugin does not hold an ID forever.
func DefaultTimeouts() Timeouts {
	return Timeouts{Add: 2 * time.Minute, Del: time.Minute, Check: time.Minute, Other: time.Minute}
}

// RuleRemover removes the host's firewall rules that carry an
// attachment's marker (and the per-attachment chains they jump to). DEL
// needs it where the plugins cannot find their own rules: see Client.Del.
// hostclean.Rules is the host's.
type RuleRemover interface {
	// RemoveAttachmentRules returns what it removed.
	RemoveAttachmentRules(ctx context.Context, network, containerID string) ([]string, error)
}

// Options configure a Client.
type Options struct {
	PluginPath []string
	CacheDir   string
	Timeouts   Timeouts
	// Exec runs and finds plugins; nil means libcni's default (fork/exec
	// from PluginPath). Tests may fake it; fault injection wraps it.
	Exec invoke.Exec
	// Rules removes an attachment's marked rules when DEL leaves them;
	// nil leaves them (for clients that never DEL on a real host).
	Rules  RuleRemover
	Logger *slog.Logger
}

// Client runs CNI verbs.
type Client struct {
	cni      *libcni.CNIConfig
	exec     invoke.Exec
	rules    RuleRemover
	path     []string
	cacheDir string
	to       Timeouts
	log      *slog.Logger
}

// NewClient returns a Client; zero options take the defaults.
func NewClient(o Options) *Client {
	if len(o.PluginPath) == 0 {
		o.PluginPath = DefaultPluginPath()
	}
	if o.CacheDir == "" {
		o.CacheDir = DefaultCacheDir
	}
	d := DefaultTimeouts()
	if o.Timeouts.Add <= 0 {
		o.Timeouts.Add = d.Add
	}
	if o.Timeouts.Del <= 0 {
		o.Timeouts.Del = d.Del
	}
	if o.Timeouts.Check <= 0 {
		o.Timeouts.Check = d.Check
	}
	if o.Timeouts.Other <= 0 {
		o.Timeouts.Other = d.Other
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Exec == nil {
		// libcni would create this lazily, racing when several goroutines
		// make their first call at once.
		o.Exec = &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}
	}
	return &Client{
		log:      o.Logger,
		cni:      libcni.NewCNIConfigWithCacheDir(o.PluginPath, o.CacheDir, withFaults(o.Exec)),
		exec:     o.Exec,
		rules:    o.Rules,
		path:     o.PluginPath,
		cacheDir: o.CacheDir,
		to:       o.Timeouts,
	}
}

// PluginPath is the list of directories searched for plugins.
func (c *Client) PluginPath() []string { return c.path }

// CacheDir is libcni's cache directory.
func (c *Client) CacheDir() string { return c.cacheDir }

// Attachment identifies one container's attachment to a network.
type Attachment struct {
	ContainerID string
	// NetNS is the pinned namespace path; empty on DEL when it is gone
	// (the spec allows it, and plugins then release what is outside the
	// namespace: IPAM, host veth, iptables).
	NetNS  string
	IfName string
	// Args become CNI_ARGS (with IgnoreUnknown=1, so plugins that do not
	// know a key do not fail).
	Args map[string]string
	// CapabilityArgs are runtimeConfig values, passed only to plugins that
	// declare the capability (portMappings, dns, ...).
	CapabilityArgs map[string]any
}

func (a *Attachment) runtimeConf() *libcni.RuntimeConf {
	ifname := a.IfName
	if ifname == "" {
		ifname = "eth0"
	}
	rt := &libcni.RuntimeConf{
		ContainerID:    a.ContainerID,
		NetNS:          a.NetNS,
		IfName:         ifname,
		CapabilityArgs: a.CapabilityArgs,
	}
	rt.Args = [][2]string{{"IgnoreUnknown", "1"}}
	keys := make([]string, 0, len(a.Args))
	for k := range a.Args {
		if k != "IgnoreUnknown" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		rt.Args = append(rt.Args, [2]string{k, a.Args[k]})
	}
	return rt
}

// withTimeout applies d unless ctx already ends sooner.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

func (c *Client) wrap(ctx context.Context, verb string, net *Network, id string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return fmt.Errorf("CNI %s network %q id %s: %w", verb, net.Name(), id, err)
}

// Add attaches and returns the raw result and its status summary. On
// error the chain may have done part of its work and no cache entry was
// written: the caller must Del.
func (c *Client) Add(ctx context.Context, net *Network, a *Attachment) (*Result, error) {
	ctx, cancel := withTimeout(ctx, c.to.Add)
	defer cancel()
	rt := a.runtimeConf()
	r, err := c.cni.AddNetworkList(ctx, net.List, rt)
	if err != nil && chainRace(err) && ctx.Err() == nil {
		// The firewall and portmap plugins create their shared chains
		// with check-then-create: two first ADDs at once (any runtimes)
		// and one fails. Undo the half and go again; the chain is there
		// now.
		if derr := c.Del(ctx, net, net.Name(), a); derr == nil {
			r, err = c.cni.AddNetworkList(ctx, net.List, rt)
		}
	}
	if err != nil {
		return nil, c.wrap(ctx, "ADD", net, a.ContainerID, err)
	}
	res, err := NewResult(r, rt.IfName)
	if err != nil {
		return nil, c.wrap(ctx, "ADD", net, a.ContainerID, err)
	}
	return res, nil
}

// chainRace says whether a plugin failed because another created a shared
// chain between its check and its create (iptables-nft says "CHAIN_USER_ADD
// failed (File exists)", iptables-legacy "Chain already exists").
func chainRace(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "CHAIN_USER_ADD failed (File exists)") || strings.Contains(msg, "Chain already exists")
}

// Check verifies an attachment against its cached result. A network that
// cannot be checked returns an error wrapping ErrCheckUnsupported.
func (c *Client) Check(ctx context.Context, net *Network, a *Attachment) error {
	if err := net.CheckSupport(); err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx, c.to.Check)
	defer cancel()
	return c.wrap(ctx, "CHECK", net, a.ContainerID, c.cni.CheckNetworkList(ctx, net.List, a.runtimeConf()))
}

// Del detaches. With an empty NetNS (the namespace is gone) it also
// removes the iptables rules marked for the attachment (Options.Rules),
// which plugins cannot find without the namespace; and a DEL that fails is
// retried once after removing them. When libcni has a cached configuration for the attachment
// it is used instead of net, so that DEL undoes exactly what ADD did even
// if the file changed since; args missing from a are taken from the cache
// too. A nil net is allowed when the cache has the attachment.
func (c *Client) Del(ctx context.Context, net *Network, netName string, a *Attachment) error {
	ctx, cancel := withTimeout(ctx, c.to.Del)
	defer cancel()
	rt := a.runtimeConf()
	if net != nil {
		netName = net.Name()
	}
	probe := &libcni.NetworkConfigList{Name: netName}
	if b, cachedRT, err := c.cni.GetNetworkListCachedConfig(probe, rt); err == nil && len(b) > 0 {
		if cached, err := ParseNetwork(b, "libcni cache"); err == nil {
			net = cached
			if cachedRT != nil {
				if len(a.Args) == 0 && len(cachedRT.Args) > 0 {
					rt.Args = cachedRT.Args
				}
				if len(a.CapabilityArgs) == 0 && cachedRT.CapabilityArgs != nil {
					rt.CapabilityArgs = cachedRT.CapabilityArgs
				}
			}
		}
	}
	if net == nil {
		return fmt.Errorf("CNI DEL network %q id %s: %w: no cached configuration and the network is not loaded", netName, a.ContainerID, ErrNetworkNotFound)
	}
	err := c.del(ctx, net, rt)
	if err != nil && ctx.Err() == nil {
		// A plugin whose state was changed behind its back can fail DEL:
		// the bridge plugin cannot delete its masquerade chain while a
		// jump to it remains that it no longer recognises (eth0 deleted or
		// re-addressed). Remove the rules that carry this attachment's
		// marker and try once more.
		removed, herr := c.removeRules(ctx, net.Name(), a.ContainerID)
		if herr == nil && len(removed) > 0 {
			c.log.Warn("CNI DEL failed; removed the attachment's iptables rules and retried", "network", net.Name(), "id", a.ContainerID, "err", err, "removed", len(removed))
			err = c.del(ctx, net, rt)
		}
	}
	if err == nil && a.NetNS == "" {
		// Without the namespace the bridge plugin skips its masquerade
		// teardown (it cannot read eth0's addresses) and still succeeds:
		// remove what carries this attachment's marker, so that a DEL
		// without namespace leaves nothing either.
		removed, herr := c.removeRules(ctx, net.Name(), a.ContainerID)
		if herr != nil {
			err = fmt.Errorf("remove iptables rules left by DEL without namespace: %w", herr)
		} else if len(removed) > 0 {
			c.log.Info("removed iptables rules the plugins left (DEL without namespace)", "network", net.Name(), "id", a.ContainerID, "removed", len(removed))
		}
	}
	return c.wrap(ctx, "DEL", net, a.ContainerID, err)
}

func (c *Client) removeRules(ctx context.Context, network, id string) ([]string, error) {
	if c.rules == nil {
		return nil, nil
	}
	return c.rules.RemoveAttachmentRules(ctx, network, id)
}

// GC asks the network's plugins to release everything not in valid. libcni
// first DELs every cached attachment of the network not in valid. valid
// must be the complete set: an empty one releases everything.
func (c *Client) GC(ctx context.Context, net *Network, valid []types.GCAttachment) error {
	ctx, cancel := withTimeout(ctx, c.to.Other)
	defer cancel()
	return c.wrap(ctx, "GC", net, "-", c.cni.GCNetworkList(ctx, net.List, &libcni.GCArgs{ValidAttachments: valid}))
}

// CachedResult returns the cached ADD result of an attachment, or nil.
func (c *Client) CachedResult(net *Network, a *Attachment) (*Result, error) {
	rt := a.runtimeConf()
	r, err := c.cni.GetNetworkListCachedResult(net.List, rt)
	if err != nil || r == nil {
		return nil, err
	}
	return NewResult(r, rt.IfName)
}

// PluginVersions asks a plugin binary which spec versions it supports.
func (c *Client) PluginVersions(ctx context.Context, pluginType string) (version.PluginInfo, error) {
	ctx, cancel := withTimeout(ctx, c.to.Other)
	defer cancel()
	pi, err := c.cni.GetVersionInfo(ctx, pluginType)
	if err != nil {
		return nil, fmt.Errorf("CNI VERSION of plugin %q: %w", pluginType, err)
	}
	return pi, nil
}

// FindPlugin returns the path of a plugin binary in the plugin path.
func (c *Client) FindPlugin(pluginType string) (string, error) {
	return c.exec.FindInPath(pluginType, c.path)
}

// Result is a CNI result and what berth reports of it.
type Result struct {
	Raw    json.RawMessage `json:"raw"`
	Status Status          `json:"status"`
}

// Status is what a workload's network looks like.
type Status struct {
	Interface string   `json:"interface"`
	MAC       string   `json:"mac,omitempty"`
	IPv4      []string `json:"ipv4,omitempty"`
	IPv6      []string `json:"ipv6,omitempty"`
	Gateway   []string `json:"gateway,omitempty"`
	DNS       DNS      `json:"dns"`
}

// DNS is the resolver configuration a result carries.
type DNS struct {
	Nameservers []string `json:"nameservers,omitempty"`
	Domain      string   `json:"domain,omitempty"`
	Search      []string `json:"search,omitempty"`
	Options     []string `json:"options,omitempty"`
}

// NewResult converts any spec version's result to the current one and
// picks out the addresses of ifname, the interface inside the namespace.
func NewResult(r types.Result, ifname string) (*Result, error) {
	cur, err := types100.GetResult(r)
	if err != nil {
		return nil, fmt.Errorf("convert CNI result: %w", err)
	}
	raw, err := json.Marshal(cur)
	if err != nil {
		return nil, fmt.Errorf("encode CNI result: %w", err)
	}
	res := &Result{Raw: raw}
	st := &res.Status
	st.Interface = ifname
	idx := -1
	for i, itf := range cur.Interfaces {
		if itf.Sandbox != "" && itf.Name == ifname {
			idx = i
			st.MAC = itf.Mac
		}
	}
	seenGW := map[string]bool{}
	for _, ip := range cur.IPs {
		// Addresses without an interface index belong to the attachment
		// as a whole (host-local alone, some IPAM-only chains).
		if ip.Interface != nil && idx >= 0 && *ip.Interface != idx {
			continue
		}
		if ip.Address.IP.To4() != nil {
			st.IPv4 = append(st.IPv4, ip.Address.String())
		} else {
			st.IPv6 = append(st.IPv6, ip.Address.String())
		}
		if ip.Gateway != nil && !seenGW[ip.Gateway.String()] {
			seenGW[ip.Gateway.String()] = true
			st.Gateway = append(st.Gateway, ip.Gateway.String())
		}
	}
	st.DNS = DNS{Nameservers: cur.DNS.Nameservers, Domain: cur.DNS.Domain, Search: cur.DNS.Search, Options: cur.DNS.Options}
	return res, nil
}

// ParseResult rebuilds a Result from its raw JSON (as stored).
func ParseResult(raw []byte, ifname string) (*Result, error) {
	r, err := types100.NewResult(raw)
	if err != nil {
		return nil, fmt.Errorf("parse stored CNI result: %w", err)
	}
	return NewResult(r, ifname)
}
