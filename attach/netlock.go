package attach

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/berth/berth/cni"
	"github.com/berth/berth/hostclean"
	"golang.org/x/sys/unix"
)

// DefaultLockDir holds one lock file per network, shared by every berth
// process on the host: ADD and DEL hold it shared, GC and tidying hold it
// exclusive, so a sweep never races an attachment in flight.
const DefaultLockDir = "/run/berth/lock"

// lockNetwork takes what ADD and DEL need: the network's lock and the host
// lock, both shared, in that order (every holder takes them in that order,
// so they cannot deadlock). The returned func releases both.
func (m *Manager) lockNetwork(ctx context.Context, network string, exclusive bool) (func(), error) {
	unlockNet, err := LockNetwork(ctx, m.o.LockDir, network, exclusive)
	if err != nil {
		return nil, err
	}
	unlockHost, err := LockHost(ctx, m.o.LockDir, false)
	if err != nil {
		unlockNet()
		return nil, err
	}
	return func() { unlockHost(); unlockNet() }, nil
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

func lockFile(ctx context.Context, dir, name, what string, exclusive bool) (func(), error) {
	if dir == "" {
		dir = DefaultLockDir
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("lock %s: %w", what, err)
	}
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", what, err)
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	wait := time.Millisecond
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s (%s): %w", what, path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("lock %s (%s): %w", what, path, ctx.Err())
		case <-time.After(wait):
		}
		if wait < 50*time.Millisecond {
			wait *= 2
		}
	}
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

// TidyReport lists what TidyNetwork removed.
type TidyReport struct {
	Network string   `json:"network"`
	Skipped string   `json:"skipped,omitempty"`
	Removed []string `json:"removed,omitempty"`
}

// TidyNetwork removes what the network's plugins leave on the host by
// design once its last attachment is gone: its bridge, its host-local
// directory, and the shared firewall/portmap chains when no attachment of
// any network uses them. It does nothing while berth still has an
// attachment on the network.
func (m *Manager) TidyNetwork(ctx context.Context, net *cni.Network) (*TidyReport, error) {
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
		if r.Network == net.Name() {
			rep.Skipped = "attachment " + r.ID + " still uses it"
			return rep, nil
		}
	}
	var errs []error
	for _, p := range net.List.Plugins {
		var conf struct {
			Bridge string `json:"bridge"`
			IPAM   struct {
				Type    string `json:"type"`
				DataDir string `json:"dataDir"`
			} `json:"ipam"`
		}
		if err := json.Unmarshal(p.Bytes, &conf); err != nil {
			continue
		}
		if p.Network.Type == "bridge" {
			if conf.Bridge == "" {
				conf.Bridge = "cni0"
			}
			ok, err := hostclean.RemoveBridgeIfUnused(ctx, conf.Bridge)
			errs = append(errs, err)
			if ok {
				rep.Removed = append(rep.Removed, "bridge "+conf.Bridge)
			}
		}
		if conf.IPAM.Type == "host-local" && conf.IPAM.DataDir == "" {
			ok, err := hostclean.RemoveHostLocalDirIfEmpty(ctx, net.Name())
			errs = append(errs, err)
			if ok {
				rep.Removed = append(rep.Removed, "host-local dir of "+net.Name())
			}
		}
	}
	removed, err := m.TidySharedChains(ctx)
	rep.Removed = append(rep.Removed, removed...)
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return rep, fmt.Errorf("tidy network %q: %w", net.Name(), err)
	}
	return rep, nil
}

// TidySharedChains removes the plugins' shared chains when nothing uses
// them, holding the host lock exclusively so that no ADD or DEL of any
// network is in flight meanwhile.
func (m *Manager) TidySharedChains(ctx context.Context) ([]string, error) {
	unlock, err := LockHost(ctx, m.o.LockDir, true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return hostclean.TidySharedChains(ctx)
}
