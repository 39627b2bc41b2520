package attach

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"

	"github.com/berth/berth/internal/flock"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/hostclean"
)

// DefaultLockDir holds berth's cross-process locks, shared by every berth
// process on the host whatever its data dir: one per network (ADD and DEL
// hold it shared, gc exclusive, so a sweep never races an attachment in
// flight), one per attachment ID (its setup, check and teardown are
// serialised across processes), and the host lock.
const DefaultLockDir = "/run/berth/lock"

// lockNetwork takes what ADD and DEL need: the network's lock and the host
// lock, both shared, in that order (every holder takes them in that order,
// so they cannot deadlock). The returned func releases both.
func (m *Manager) lockNetwork(ctx context.Context, network string) (func(), error) {
	unlockNet, err := LockNetwork(ctx, m.o.LockDir, network, false)
	if err != nil {
		return nil, err
	}
	unlockHost, err := m.lockHost(ctx, false)
	if err != nil {
		unlockNet()
		return nil, err
	}
	return func() { unlockHost(); unlockNet() }, nil
}

// lockID serialises all work on one attachment ID, in this process and
// across processes: a second `net up` of an ID another berth is creating
// waits for it, then finds the record and CHECKs. The in-process mutex
// comes first so that goroutines queue without polling the file.
func (m *Manager) lockID(ctx context.Context, id string) (func(), error) {
	unlock := m.locks.Lock(id)
	unlockFile, err := LockAttachment(ctx, m.o.LockDir, id)
	if err != nil {
		unlock()
		return nil, err
	}
	return func() { unlockFile(); unlock() }, nil
}

// LockAttachment is the cross-process lock of one attachment ID (in lock
// dir dir, DefaultLockDir if empty): its setup, CHECK and teardown take
// it. A holder outside berth (a test) holds them off.
func LockAttachment(ctx context.Context, dir, id string) (func(), error) {
	if dir == "" {
		dir = DefaultLockDir
	}
	l, err := flock.Acquire(ctx, filepath.Join(dir, "id", sanitize(id)+".lock"), flock.Options{Exclusive: true, Transient: true})
	if err != nil {
		return nil, fmt.Errorf("attachment %s: %w", id, err)
	}
	return l.Unlock, nil
}

// LockNetwork is the cross-process lock of a network (see DefaultLockDir).
func LockNetwork(ctx context.Context, dir, network string, exclusive bool) (func(), error) {
	return lockFile(ctx, dir, "net-"+sanitize(network)+".lock", "network "+network, exclusive)
}

// LockHost guards what all networks share: the firewall and portmap
// plugins' chains (CNI-FORWARD, CNI-HOSTPORT-*). ADD and DEL of any network
// hold it shared; removing those chains needs it exclusive, because a
// plugin that found them a moment ago fails when they vanish under it.
// Take it after any network lock. It always lives in DefaultLockDir,
// whatever dir the network locks use: the chains are the host's, so every
// berth process (and test) on the host must agree on it.
func LockHost(ctx context.Context, _ string, exclusive bool) (func(), error) {
	return lockFile(ctx, DefaultLockDir, "host.lock", "host CNI chains", exclusive)
}

// lockHost is LockHost in the Manager's host lock dir.
func (m *Manager) lockHost(ctx context.Context, exclusive bool) (func(), error) {
	return lockFile(ctx, m.hostLockDir, "host.lock", "host CNI chains", exclusive)
}

func lockFile(ctx context.Context, dir, name, what string, exclusive bool) (func(), error) {
	if dir == "" {
		dir = DefaultLockDir
	}
	l, err := flock.Acquire(ctx, filepath.Join(dir, name), flock.Options{Exclusive: exclusive})
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", what, err)
	}
	return l.Unlock, nil
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			b[i] = '_'
		}
	}
	return string(b)
}

// TidyReport lists what TidyNetwork removed (in a dry run, would remove).
type TidyReport struct {
	Network string   `json:"network"`
	Skipped string   `json:"skipped,omitempty"`
	Removed []string `json:"removed,omitempty"`
	// Kept says what stayed because something else uses it.
	Kept []string `json:"kept,omitempty"`
}

// TidyNetwork removes what the network's plugins leave on the host by
// design once its last attachment is gone: its bridge, its host-local
// directory, and the shared firewall/portmap chains when no attachment of
// any network uses them. It does nothing while berth still has an
// attachment on the network. A dry run (p.DryRun) changes nothing and
// reports what a real run would remove once the attachments p names are
// gone (see hostclean.Plan).
func (m *Manager) TidyNetwork(ctx context.Context, net *cni.Network, p hostclean.Plan) (*TidyReport, error) {
	rep := &TidyReport{Network: net.Name()}
	unlock, err := LockNetwork(ctx, m.o.LockDir, net.Name(), true)
	if err != nil {
		return rep, err
	}
	defer unlock()
	recs, err := m.o.Store.ListAttachments(ctx)
	if err != nil {
		return rep, fmt.Errorf("tidy network %q: %w", net.Name(), err)
	}
	for _, r := range recs {
		if r.Network == net.Name() && !(p.DryRun && p.GoingIDs[r.ID]) {
			rep.Skipped = "attachment " + r.ID + " still uses it"
			return rep, nil
		}
	}
	var errs []error
	for _, pl := range net.List.Plugins {
		errs = append(errs, m.tidyPlugin(ctx, net.Name(), pl, p, rep))
	}
	removed, err := m.TidySharedChains(ctx, p)
	rep.Removed = append(rep.Removed, removed...)
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return rep, fmt.Errorf("tidy network %q: %w", net.Name(), err)
	}
	return rep, nil
}

// tidyPlugin removes what one plugin of network leaves by design: a
// bridge plugin's bridge, host-local's directory in its default place.
func (m *Manager) tidyPlugin(ctx context.Context, network string, p *libcni.PluginConfig, plan hostclean.Plan, rep *TidyReport) error {
	var conf struct {
		Bridge string `json:"bridge"`
		IPAM   struct {
			Type    string `json:"type"`
			DataDir string `json:"dataDir"`
		} `json:"ipam"`
	}
	if err := json.Unmarshal(p.Bytes, &conf); err != nil {
		return nil // libcni parsed it already; nothing of ours to find
	}
	var errs []error
	if p.Network.Type == "bridge" {
		if conf.Bridge == "" {
			conf.Bridge = "cni0"
		}
		ports, err := m.o.Host.RemoveBridgeIfUnused(ctx, conf.Bridge, plan)
		errs = append(errs, err)
		switch {
		case err != nil:
		case ports == 0:
			rep.Removed = append(rep.Removed, "bridge "+conf.Bridge)
		case ports > 0:
			rep.Kept = append(rep.Kept, fmt.Sprintf("bridge %s has %d interface(s) of another runtime attached", conf.Bridge, ports))
		}
	}
	if conf.IPAM.Type == "host-local" && conf.IPAM.DataDir == "" {
		ok, err := m.o.Host.RemoveHostLocalDirIfEmpty(ctx, network, plan)
		errs = append(errs, err)
		if ok {
			rep.Removed = append(rep.Removed, "host-local dir of "+network)
		}
	}
	return errors.Join(errs...)
}

// TidySharedChains removes the plugins' shared chains when nothing uses
// them, holding the host lock exclusively so that no ADD or DEL of any
// network is in flight meanwhile.
func (m *Manager) TidySharedChains(ctx context.Context, p hostclean.Plan) ([]string, error) {
	unlock, err := m.lockHost(ctx, true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return m.o.Host.TidySharedChains(ctx, p)
}
