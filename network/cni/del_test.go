package cni

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/version"
)

// fakeExec stands in for the plugin binaries: it finds every plugin and
// answers each DEL call with the next scripted error (nil once the script
// is used up).
type fakeExec struct {
	mu      sync.Mutex
	addErrs []error
	adds    []string // plugin type of each ADD, in call order
	delErrs []error
	dels    []string // plugin type of each DEL, in call order
	block   bool     // DEL waits for the context to end
}

func (f *fakeExec) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	if hasEnv(environ, "CNI_COMMAND=ADD") {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.adds = append(f.adds, filepath.Base(pluginPath))
		if len(f.addErrs) > 0 {
			err := f.addErrs[0]
			f.addErrs = f.addErrs[1:]
			if err != nil {
				return nil, err
			}
		}
		return []byte(`{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"address":"10.199.1.2/24","interface":0}]}`), nil
	}
	if !hasEnv(environ, "CNI_COMMAND=DEL") {
		return nil, fmt.Errorf("fake plugin: only ADD and DEL are scripted, got %v", environ)
	}
	if f.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dels = append(f.dels, filepath.Base(pluginPath))
	if len(f.delErrs) == 0 {
		return nil, nil
	}
	err := f.delErrs[0]
	f.delErrs = f.delErrs[1:]
	return nil, err
}

func (f *fakeExec) FindInPath(plugin string, paths []string) (string, error) {
	return "/fake/" + plugin, nil
}

func (f *fakeExec) Decode(b []byte) (version.PluginInfo, error) {
	return version.PluginSupports("1.1.0"), nil
}

func hasEnv(environ []string, kv string) bool {
	for _, e := range environ {
		if e == kv {
			return true
		}
	}
	return false
}

// fakeRules records the removals DEL asks for and answers as scripted.
type fakeRules struct {
	removed []string
	err     error
	calls   []string // "network/id"
}

func (r *fakeRules) RemoveAttachmentRules(ctx context.Context, network, id string) ([]string, error) {
	r.calls = append(r.calls, network+"/"+id)
	return r.removed, r.err
}

func TestDelRemovesMarkedRules(t *testing.T) {
	boom := errors.New("plugin bridge: cannot delete chain CNI-abc: jump still there")
	rulesErr := errors.New("iptables-save: exit status 1")
	// Two plugins: DEL runs them last to first, one call each per attempt.
	const oneRound = "fwd,br"
	tests := []struct {
		name     string
		netns    string
		delErrs  []error
		removed  []string
		rulesErr error
		noRules  bool

		wantDels  string // plugin types DELed, in order
		wantCalls int    // RemoveAttachmentRules calls
		wantErr   []error
		wantMsg   string
	}{
		{name: "with namespace, DEL succeeds: no rule surgery", netns: "/nonexistent/netns/x",
			wantDels: oneRound, wantCalls: 0},
		{name: "without namespace, DEL succeeds: marked rules removed", removed: []string{"ipv4 nat rule -A POSTROUTING ..."},
			wantDels: oneRound, wantCalls: 1},
		{name: "without namespace, nothing marked left", wantDels: oneRound, wantCalls: 1},
		{name: "without namespace, removal fails", rulesErr: rulesErr,
			wantDels: oneRound, wantCalls: 1, wantErr: []error{rulesErr}, wantMsg: "left by DEL without namespace"},
		{name: "DEL fails, marked rules removed, retry succeeds", netns: "/nonexistent/netns/x",
			delErrs: []error{boom}, removed: []string{"r"},
			wantDels: oneRound + "," + oneRound, wantCalls: 1},
		{name: "DEL fails without namespace, retried, then leftovers removed",
			delErrs: []error{boom}, removed: []string{"r"},
			wantDels: oneRound + "," + oneRound, wantCalls: 2},
		{name: "DEL fails, nothing marked: no retry", netns: "/nonexistent/netns/x",
			delErrs:  []error{boom},
			wantDels: oneRound, wantCalls: 1, wantErr: []error{boom}},
		{name: "DEL fails, removal fails: no retry", netns: "/nonexistent/netns/x",
			delErrs: []error{boom}, rulesErr: rulesErr, removed: []string{"r"},
			wantDels: oneRound, wantCalls: 1, wantErr: []error{boom}},
		{name: "DEL fails twice", netns: "/nonexistent/netns/x",
			delErrs: []error{boom, nil, boom}, removed: []string{"r"},
			wantDels: oneRound + "," + oneRound, wantCalls: 1, wantErr: []error{boom}},
		{name: "no RuleRemover: DEL alone", noRules: true, wantDels: oneRound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fe := &fakeExec{delErrs: tc.delErrs}
			fr := &fakeRules{removed: tc.removed, err: tc.rulesErr}
			o := Options{PluginPath: []string{"/fake"}, CacheDir: t.TempDir(), Exec: fe, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			if !tc.noRules {
				o.Rules = fr
			}
			c := NewClient(o)
			net := fakeNetwork(t)
			err := c.Del(context.Background(), net, "", &Attachment{ContainerID: "id-1", NetNS: tc.netns})

			if got := strings.Join(fe.dels, ","); got != tc.wantDels {
				t.Errorf("DELs %q, want %q", got, tc.wantDels)
			}
			if len(fr.calls) != tc.wantCalls {
				t.Errorf("RemoveAttachmentRules called %d times (%v), want %d", len(fr.calls), fr.calls, tc.wantCalls)
			}
			for _, call := range fr.calls {
				if call != "fakenet/id-1" {
					t.Errorf("RemoveAttachmentRules(%s), want fakenet/id-1", call)
				}
			}
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Del: %v", err)
				}
				return
			}
			for _, want := range tc.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("Del = %v, want it to wrap %v", err, want)
				}
			}
			if err != nil && (!strings.Contains(err.Error(), `network "fakenet" id id-1`) || !strings.Contains(err.Error(), tc.wantMsg)) {
				t.Errorf("Del = %q, want it to name the network and id and say %q", err, tc.wantMsg)
			}
		})
	}
}

// A DEL cut by its deadline is not followed by rule surgery: the plugins
// may still be running.
func TestDelTimeoutNoRuleSurgery(t *testing.T) {
	fe := &fakeExec{block: true}
	fr := &fakeRules{removed: []string{"r"}}
	c := NewClient(Options{PluginPath: []string{"/fake"}, CacheDir: t.TempDir(), Exec: fe, Rules: fr,
		Timeouts: Timeouts{Del: 20 * time.Millisecond}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	err := c.Del(context.Background(), fakeNetwork(t), "", &Attachment{ContainerID: "id-1"})
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("Del = %v, want ErrTimeout", err)
	}
	if len(fr.calls) != 0 {
		t.Errorf("RemoveAttachmentRules called after a timed-out DEL: %v", fr.calls)
	}
}

func fakeNetwork(t *testing.T) *Network {
	t.Helper()
	n, err := ParseNetwork([]byte(`{"cniVersion":"1.1.0","name":"fakenet","plugins":[{"type":"br"},{"type":"fwd"}]}`), "test.conflist")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAddRetriesChainRace: a plugin that lost the race to create a shared
// chain (another ADD made it between its check and its create) fails ADD;
// Add undoes the half and ADDs again, once.
func TestAddRetriesChainRace(t *testing.T) {
	race := errors.New("running [/usr/sbin/iptables -t filter -N CNI-ADMIN --wait]: exit status 4: iptables v1.8.9 (nf_tables):  CHAIN_USER_ADD failed (File exists): chain CNI-ADMIN")
	other := errors.New("no such device")
	tests := []struct {
		name              string
		addErrs           []error
		wantAdds, wantDel string
		wantErr           bool
	}{
		{"no race", nil, "br,fwd", "", false},
		{"race, then fine", []error{nil, race}, "br,fwd,br,fwd", "fwd,br", false},
		{"race twice: no third try", []error{nil, race, nil, race}, "br,fwd,br,fwd", "fwd,br", true},
		{"another failure: not retried", []error{nil, other}, "br,fwd", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fe := &fakeExec{addErrs: tc.addErrs}
			c := NewClient(Options{PluginPath: []string{"/fake"}, CacheDir: t.TempDir(), Exec: fe, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			_, err := c.Add(context.Background(), fakeNetwork(t), &Attachment{ContainerID: "id-1", NetNS: "/nonexistent/netns/x"})
			if (err != nil) != tc.wantErr {
				t.Fatalf("Add: %v, want error %v", err, tc.wantErr)
			}
			if got := strings.Join(fe.adds, ","); got != tc.wantAdds {
				t.Errorf("ADDs %q, want %q", got, tc.wantAdds)
			}
			if got := strings.Join(fe.dels, ","); got != tc.wantDel {
				t.Errorf("DELs %q, want %q", got, tc.wantDel)
			}
		})
	}
}
