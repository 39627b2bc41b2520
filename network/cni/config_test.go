package cni

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	types100 "github.com/containernetworking/cni/pkg/types/100"
)

const listJSON = `{"cniVersion":"1.1.0","name":"alpha","plugins":[{"type":"bridge","bridge":"x"},{"type":"portmap","capabilities":{"portMappings":true}}]}`

func TestParseNetwork(t *testing.T) {
	cases := []struct {
		name, src string
		wantErr   string
		wantName  string
		plugins   []string
	}{
		{name: "list", src: listJSON, wantName: "alpha", plugins: []string{"bridge", "portmap"}},
		{name: "single conf is upconverted", src: `{"cniVersion":"1.0.0","name":"beta","type":"bridge"}`, wantName: "beta", plugins: []string{"bridge"}},
		{name: "not JSON", src: `{`, wantErr: "parse CNI config"},
		{name: "list without name", src: `{"cniVersion":"1.0.0","plugins":[{"type":"bridge"}]}`, wantErr: "name"},
		{name: "neither list nor plugin", src: `{"cniVersion":"1.0.0","name":"x"}`, wantErr: `neither "plugins"`},
		{name: "plugin without type in list", src: `{"cniVersion":"1.0.0","name":"x","plugins":[{}]}`, wantErr: "type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, err := ParseNetwork([]byte(tc.src), "test.conflist")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "test.conflist") {
					t.Fatalf("err = %v, want one naming the file and mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n.Name() != tc.wantName || strings.Join(pluginTypes(n), ",") != strings.Join(tc.plugins, ",") {
				t.Errorf("got %s %v", n.Name(), pluginTypes(n))
			}
		})
	}
}

func pluginTypes(n *Network) []string {
	out := make([]string, 0, len(n.List.Plugins))
	for _, p := range n.List.Plugins {
		out = append(out, p.Network.Type)
	}
	return out
}

func TestLoadNetwork(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("10-alpha.conflist", listJSON)
	write("20-alpha-dup.conflist", strings.Replace(listJSON, `"x"`, `"y"`, 1))
	write("30-gamma.json", `{"cniVersion":"1.0.0","name":"gamma","type":"bridge"}`)
	write("40-delta.conf", `{"cniVersion":"0.4.0","name":"delta","type":"bridge"}`)
	write("50-broken.conflist", `{"name":`)
	write("README.txt", `not a config`)
	ctx := context.Background()

	n, err := LoadNetwork(ctx, dir, "alpha")
	if err != nil || filepath.Base(n.File) != "10-alpha.conflist" {
		t.Errorf("alpha: first file in name order must win: %v %v", n, err)
	}
	for _, name := range []string{"gamma", "delta"} {
		if _, err := LoadNetwork(ctx, dir, name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	_, err = LoadNetwork(ctx, dir, "nope")
	if !errors.Is(err, ErrNetworkNotFound) {
		t.Fatalf("nope: %v", err)
	}
	for _, want := range []string{`"nope"`, dir, "alpha", "gamma", "50-broken.conflist"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	_, err = LoadNetwork(ctx, filepath.Join(dir, "missing"), "alpha")
	if !errors.Is(err, ErrNetworkNotFound) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing dir: %v", err)
	}
}

func TestSupport(t *testing.T) {
	cases := []struct {
		version      string
		disableCheck bool
		check, gc    bool
	}{
		{"0.3.1", false, false, false},
		{"0.4.0", false, true, false},
		{"1.0.0", false, true, false},
		{"1.1.0", false, true, true},
		{"1.1.0", true, false, true},
	}
	for _, tc := range cases {
		src := `{"cniVersion":"` + tc.version + `","name":"n","plugins":[{"type":"bridge"}]`
		if tc.disableCheck {
			src += `,"disableCheck":true`
		}
		n, err := ParseNetwork([]byte(src+"}"), "t")
		if err != nil {
			t.Fatal(err)
		}
		if got := n.CheckSupport() == nil; got != tc.check {
			t.Errorf("%s disableCheck=%v: check supported = %v", tc.version, tc.disableCheck, got)
		}
		if err := n.CheckSupport(); err != nil && !errors.Is(err, ErrCheckUnsupported) {
			t.Errorf("check error %v is not ErrCheckUnsupported", err)
		}
		if got := n.GCSupport() == nil; got != tc.gc {
			t.Errorf("%s: gc supported = %v", tc.version, got)
		}
	}
}

func TestRuntimeConfArgs(t *testing.T) {
	a := &Attachment{ContainerID: "c", Args: map[string]string{"Z": "1", "A": "2", "IgnoreUnknown": "0"}}
	rt := a.runtimeConf()
	got := []string{}
	for _, kv := range rt.Args {
		got = append(got, kv[0]+"="+kv[1])
	}
	if strings.Join(got, ";") != "IgnoreUnknown=1;A=2;Z=1" || rt.IfName != "eth0" {
		t.Errorf("args %v ifname %s", got, rt.IfName)
	}
}

func TestNewResult(t *testing.T) {
	_, a4, _ := net.ParseCIDR("10.199.9.5/24")
	a4.IP = net.ParseIP("10.199.9.5")
	_, a6, _ := net.ParseCIDR("fd00::5/64")
	a6.IP = net.ParseIP("fd00::5")
	gw := net.ParseIP("10.199.9.1")
	r := &types100.Result{
		CNIVersion: "1.1.0",
		Interfaces: []*types100.Interface{{Name: "br0"}, {Name: "veth1"}, {Name: "eth0", Sandbox: "/run/netns/x", Mac: "aa:bb:cc:dd:ee:ff"}},
		IPs: []*types100.IPConfig{
			{Address: *a4, Gateway: gw, Interface: types100.Int(2)},
			{Address: *a6, Interface: types100.Int(2)},
			{Address: *a4, Interface: types100.Int(0)},
		},
	}
	r.DNS.Nameservers = []string{"10.199.9.1"}
	res, err := NewResult(r, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	st := res.Status
	if st.MAC != "aa:bb:cc:dd:ee:ff" || len(st.IPv4) != 1 || st.IPv4[0] != "10.199.9.5/24" || len(st.IPv6) != 1 || st.Gateway[0] != "10.199.9.1" || st.DNS.Nameservers[0] != "10.199.9.1" {
		t.Errorf("status %+v", st)
	}
	again, err := ParseResult(res.Raw, "eth0")
	if err != nil || again.Status.IPv4[0] != st.IPv4[0] {
		t.Errorf("ParseResult round trip: %+v %v", again, err)
	}
}
