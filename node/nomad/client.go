package nomad

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	napi "github.com/hashicorp/nomad/api"
)

// ErrUnknownAlloc: Nomad does not know the allocation (it answered 404):
// it was garbage-collected, or never existed in this cluster.
var ErrUnknownAlloc = errors.New("allocation unknown to Nomad")

// ErrNotClient: the agent at the address is not a Nomad client, or not
// this host's.
var ErrNotClient = errors.New("not this host's Nomad client agent")

// Calls, as counted in APIError.
const (
	CallAgentSelf   = "agent_self"
	CallNodeAllocs  = "node_allocations"
	CallAllocation  = "allocation"
	CallEventStream = "event_stream"
)

// Calls are every call, for a metric's label values (metrics.NomadCalls).
var Calls = []string{CallAgentSelf, CallNodeAllocs, CallAllocation, CallEventStream}

// requestTimeout bounds every call but the event stream.
const requestTimeout = 15 * time.Second

// Observer is told about calls to Nomad that failed (metrics.Metrics is
// one); nil is allowed.
type Observer interface {
	NomadAPIError(call string)
}

// Client talks to one Nomad agent's HTTP API.
type Client struct {
	api  *napi.Client
	set  Settings
	obs  Observer
	addr string
}

// NewClient makes a client for the checked settings; nothing is sent.
func NewClient(s Settings, obs Observer) (*Client, error) {
	cfg := &napi.Config{
		Address:  s.Address,
		Region:   s.Region,
		SecretID: s.Token,
		TLSConfig: &napi.TLSConfig{
			CACert:        s.CACert,
			ClientCert:    s.ClientCert,
			ClientKey:     s.ClientKey,
			TLSServerName: s.TLSServerName,
		},
	}
	c, err := napi.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("nomad client for %s: %w", s.Address, err)
	}
	return &Client{api: c, set: s, obs: obs, addr: s.Address}, nil
}

// Address is the agent's address.
func (c *Client) Address() string { return c.addr }

func (c *Client) failed(call string, err error) error {
	if c.obs != nil && !errors.Is(err, ErrUnknownAlloc) && !errors.Is(err, context.Canceled) {
		c.obs.NomadAPIError(call)
	}
	return err
}

func (c *Client) query(ctx context.Context, call, path string, out any, q *napi.QueryOptions) (*napi.QueryMeta, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	if q == nil {
		q = &napi.QueryOptions{}
	}
	qm, err := c.api.Raw().Query(path, out, q.WithContext(ctx))
	if err != nil {
		return nil, c.failed(call, fmt.Errorf("nomad %s: GET %s: %w", c.addr, path, err))
	}
	return qm, nil
}

// Node is what berth needs to know of the local Nomad client.
type Node struct {
	ID      string
	Name    string
	Version string
	// DataDir and StateDir are the agent's data dir (as configured for
	// berth) and the client's state dir (<data dir>/client).
	DataDir, StateDir string
	// Host is the client as this host knows it (node ID, process).
	Host *ClientHost
	// CNIConfigDir holds the networks of `network { mode = "cni/<name>" }`.
	CNIConfigDir string
	// Bridge* configure `network { mode = "bridge" }`.
	BridgeName, BridgeSubnet string
	BridgeHairpin            bool
}

// Nomad's client defaults, for settings its agent reports empty.
const (
	nomadCNIConfigDir = "/opt/cni/config"
	nomadBridgeName   = "nomad"
	nomadBridgeSubnet = "172.26.64.0/20"
	// BridgeNetwork is the CNI network name of Nomad's bridge mode (its
	// bridge interface is BridgeName).
	BridgeNetwork = "nomad"
	// NetnsDir is where Nomad pins an allocation's namespace, named by
	// the allocation ID.
	NetnsDir = "/var/run/netns"
)

// selfResponse is the part of GET /v1/agent/self berth reads.
type selfResponse struct {
	Config struct {
		DataDir string
		Version struct{ Version string }
		Client  *struct {
			Enabled                  bool
			StateDir                 string
			CNIConfigDir             string
			BridgeNetworkName        string
			BridgeNetworkSubnet      string
			BridgeNetworkHairpinMode bool
		}
	} `json:"config"`
	Member struct{ Name string } `json:"member"`
	Stats  map[string]map[string]string
}

// Self asks the agent who it is. It fails with ErrNotClient unless the
// agent runs a client whose node ID is the one recorded in the client
// state under the data dir the operator configured (Settings.DataDir),
// root's alone, and it is served by the process that holds that state
// open: another node's allocations, or a stand-in that answers on the
// address, must never judge this host. Paths the API names are only
// compared with the configured ones.
func (c *Client) Self(ctx context.Context) (*Node, error) {
	var r selfResponse
	if _, err := c.query(ctx, CallAgentSelf, "/v1/agent/self", &r, nil); err != nil {
		return nil, err
	}
	cl := r.Config.Client
	id := r.Stats["client"]["node_id"]
	if cl == nil || !cl.Enabled || id == "" {
		return nil, fmt.Errorf("nomad %s (%s): %w: the agent runs no client; point NOMAD_ADDR at this node's client agent", c.addr, r.Member.Name, ErrNotClient)
	}
	host, err := ReadClientHost(ctx, c.set.DataDir)
	if err != nil {
		return nil, fmt.Errorf("nomad %s is the client agent of node %s, but this host's Nomad state in data dir %s says nothing of it (%w): %w; run berth on the node whose client agent NOMAD_ADDR names, with Nomad's data_dir (--nomad-data-dir, data_dir)", c.addr, id, c.set.DataDir, err, ErrNotClient)
	}
	if host.NodeID != id {
		return nil, fmt.Errorf("nomad %s is the client agent of node %s, but %s says this host is node %s: %w", c.addr, id, filepath.Join(host.StateDir(), "client-id"), host.NodeID, ErrNotClient)
	}
	for _, p := range []struct{ name, api, want string }{
		{"data_dir", r.Config.DataDir, host.DataDir},
		{"client.state_dir", cl.StateDir, host.StateDir()},
	} {
		if p.api != "" && !sameDir(p.api, p.want) {
			return nil, fmt.Errorf("nomad %s reports %s %s, but the data dir configured for berth is %s: %w; give berth Nomad's data_dir", c.addr, p.name, p.api, host.DataDir, ErrNotClient)
		}
	}
	if err := host.servesAPI(c.addr); err != nil {
		return nil, fmt.Errorf("nomad %s: %w", c.addr, err)
	}
	n := &Node{
		ID: id, Name: r.Member.Name, Version: r.Config.Version.Version,
		DataDir: host.DataDir, StateDir: host.StateDir(), Host: host,
		CNIConfigDir: cl.CNIConfigDir,
		BridgeName:   cl.BridgeNetworkName, BridgeSubnet: cl.BridgeNetworkSubnet, BridgeHairpin: cl.BridgeNetworkHairpinMode,
	}
	if n.CNIConfigDir == "" {
		n.CNIConfigDir = nomadCNIConfigDir
	}
	if n.BridgeName == "" {
		n.BridgeName = nomadBridgeName
	}
	if n.BridgeSubnet == "" {
		n.BridgeSubnet = nomadBridgeSubnet
	}
	return n, nil
}

// Alloc is the part of a Nomad allocation berth judges by.
type Alloc struct {
	ID, Namespace, NodeID, JobID, TaskGroup string
	ClientStatus, DesiredStatus             string
	ModifyIndex                             uint64
	// ModifyTime is when the server last changed it (Unix nanoseconds):
	// for a terminal allocation, about when it turned terminal.
	ModifyTime int64
}

// Terminal reports whether Nomad's client is done with the allocation
// (complete, failed or lost). "unknown" (a disconnected client) is not.
func (a *Alloc) Terminal() bool {
	switch a.ClientStatus {
	case napi.AllocClientStatusComplete, napi.AllocClientStatusFailed, napi.AllocClientStatusLost:
		return true
	}
	return false
}

// Modified is ModifyTime as a time.
func (a *Alloc) Modified() time.Time { return time.Unix(0, a.ModifyTime) }

// NodeAllocations lists the node's allocations (those Nomad has not
// garbage-collected), with the index of the state they were read at.
func (c *Client) NodeAllocations(ctx context.Context, nodeID string) ([]*Alloc, uint64, error) {
	var out []*Alloc
	qm, err := c.query(ctx, CallNodeAllocs, "/v1/node/"+nodeID+"/allocations", &out, nil)
	if err != nil {
		return nil, 0, err
	}
	return out, qm.LastIndex, nil
}

// Allocation reads one allocation by ID, in any namespace; ErrUnknownAlloc
// when Nomad does not know it.
func (c *Client) Allocation(ctx context.Context, id string) (*Alloc, error) {
	var a Alloc
	_, err := c.query(ctx, CallAllocation, "/v1/allocation/"+id, &a, nil)
	var ure napi.UnexpectedResponseError
	if errors.As(err, &ure) && ure.StatusCode() == http.StatusNotFound {
		return nil, fmt.Errorf("allocation %s: %w", id, ErrUnknownAlloc)
	}
	if err != nil {
		return nil, err
	}
	return &a, nil
}

// AllocEvent is one allocation change from the event stream.
type AllocEvent struct {
	Index uint64
	Type  string
	Alloc *Alloc
}

// Follow streams this cluster's allocation events from index on (of the
// configured namespace, every one by default) until ctx ends or the
// stream breaks: the channel is then closed after a batch whose Err says
// why.
func (c *Client) Follow(ctx context.Context, index uint64) (<-chan AllocBatch, error) {
	q := &napi.QueryOptions{Namespace: c.set.Namespace}
	ch, err := c.api.EventStream().Stream(ctx, map[napi.Topic][]string{napi.TopicAllocation: {"*"}}, index, q)
	if err != nil {
		return nil, c.failed(CallEventStream, fmt.Errorf("nomad %s: event stream: %w", c.addr, err))
	}
	out := make(chan AllocBatch)
	go func() {
		defer close(out)
		for evs := range ch {
			b := AllocBatch{}
			if evs.Err != nil {
				b.Err = c.failed(CallEventStream, fmt.Errorf("nomad %s: event stream: %w", c.addr, evs.Err))
			}
			for _, ev := range evs.Events {
				if ev.Topic != napi.TopicAllocation {
					continue
				}
				a, err := decodeAlloc(ev.Payload)
				if err != nil {
					continue
				}
				b.Events = append(b.Events, AllocEvent{Index: ev.Index, Type: ev.Type, Alloc: a})
			}
			select {
			case out <- b:
			case <-ctx.Done():
				return
			}
			if b.Err != nil {
				return
			}
		}
	}()
	return out, nil
}

// AllocBatch is what one message of the stream carried.
type AllocBatch struct {
	Events []AllocEvent
	Err    error
}

func decodeAlloc(payload map[string]any) (*Alloc, error) {
	raw, ok := payload["Allocation"]
	if !ok {
		return nil, errors.New("no allocation in the event")
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	var a Alloc
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, err
	}
	if a.ID == "" {
		return nil, errors.New("allocation without ID")
	}
	return &a, nil
}
