package template

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

type fakeCatalog map[string][]*Service

func (f fakeCatalog) Instances(ns, name string) []*Service { return f[ns+"/"+name] }

func (f fakeCatalog) Names(ns string) []ServiceSummary {
	var out []ServiceSummary
	for k, v := range f {
		n, name, _ := strings.Cut(k, "/")
		if n == ns && len(v) > 0 {
			out = append(out, ServiceSummary{Name: name, Namespace: ns, Tags: v[0].Tags})
		}
	}
	return out
}

func TestRender(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("from file"), 0o644); err != nil {
		t.Fatal(err)
	}
	cat := fakeCatalog{"default/web": {
		{ID: "a", Name: "web", Address: "10.199.140.2", Port: 8080, Tags: ServiceTags{"v1", "prod"}},
		{ID: "b", Name: "web", Address: "10.199.140.3", Port: 8080, Tags: ServiceTags{"v1"}},
	}}
	ctx := Context{Env: map[string]string{"NOMAD_PORT_http": "8080", "X": "a,b,c"}, Sandbox: dir, Namespace: "default", Catalog: cat}
	for _, tc := range []struct {
		name, text, want string
		services         bool
	}{
		{"env", `port={{ env "NOMAD_PORT_http" }} missing={{ env "NOPE" }}`, "port=8080 missing=", false},
		{"envOrDefault", `{{ envOrDefault "NOPE" "d" }}`, "d", false},
		{"file", `{{ file "in.txt" }}`, "from file", false},
		{"split join", `{{ env "X" | split "," | join ";" }}`, "a;b;c", false},
		{"case", `{{ "Ab" | toLower }}{{ "ab" | toUpper }}`, "abAB", false},
		{"replaceAll", `{{ "foo" | replaceAll "o" "0" }}`, "f00", false},
		{"regexMatch", `{{ if "abc123" | regexMatch "^[a-z]+[0-9]+$" }}yes{{ end }}`, "yes", false},
		{"base64", `{{ "hi" | base64Encode }} {{ "aGk=" | base64Decode }}`, "aGk= hi", false},
		{"sha256Hex", `{{ "abc" | sha256Hex }}`, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", false},
		{"json", `{{ with parseJSON "{\"a\":[1,2]}" }}{{ toJSON .a }}{{ end }}`, "[1,2]", false},
		{"arith", `{{ 2 | add 3 }} {{ 10 | subtract 4 }} {{ 7 | modulo 4 }}`, "5 6 3", false},
		{"loop", `{{ range loop 3 }}{{ . }}{{ end }}`, "012", false},
		{"contains", `{{ if "b" | in (env "X" | split ",") }}in{{ end }}`, "in", false},
		{"timestamp unix", `{{ if gt (len (timestamp "unix")) 9 }}ok{{ end }}`, "ok", false},
		{"nomadService", `{{ range nomadService "web" }}{{ .Address }}:{{ .Port }} {{ end }}`, "10.199.140.2:8080 10.199.140.3:8080 ", true},
		{"nomadService tag", `{{ range nomadService "prod.web" }}{{ .ID }}{{ end }}`, "a", true},
		{"nomadService subset", `{{ len (nomadService 1 "alloc-1" "web") }}`, "1", true},
		{"nomadService none", `[{{ range nomadService "nope" }}x{{ end }}]`, "[]", true},
		{"tags contains", `{{ range nomadService "web" }}{{ if .Tags.Contains "prod" }}{{ .ID }}{{ end }}{{ end }}`, "a", true},
		{"nomadServices", `{{ range nomadServices }}{{ .Name }}{{ end }}`, "web", true},
		{"define", `{{ define "x" }}[{{ . }}]{{ end }}{{ executeTemplate "x" "v" }}`, "[v]", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Render(Input{Name: tc.name, Text: tc.text}, ctx)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			if string(res.Output) != tc.want || res.UsesServices != tc.services {
				t.Errorf("got %q (services %v), want %q (%v)", res.Output, res.UsesServices, tc.want, tc.services)
			}
		})
	}
}

func TestRenderErrors(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	ctx := Context{Env: map[string]string{}, Sandbox: dir}
	for _, tc := range []struct {
		name, text, want string
		missingKey       bool
	}{
		{"file outside", `{{ file "` + outside + `" }}`, "outside the task directory", false},
		{"file through a link", `{{ file "link" }}`, "outside the task directory", false},
		{"file escape", `{{ file "../x" }}`, "no such file", false},
		{"mustEnv", `{{ mustEnv "NOPE" }}`, "NOPE is not set", false},
		{"missing key", `{{ $m := parseJSON "{}" }}{{ index $m "a" }}{{ $m.b }}`, "map has no entry", true},
		{"sockaddr pipeline", `{{ sockaddr "GetAllInterfaces | include \"flags\" \"up\"" }}`, "pipelines are not supported", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Render(Input{Name: tc.name, Text: tc.text, ErrorOnMissingKey: tc.missingKey}, ctx)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestRenderDelimiters(t *testing.T) {
	res, err := Render(Input{Text: `[[ env "A" ]] {{ literal }}`, Left: "[[", Right: "]]"}, Context{Env: map[string]string{"A": "x"}})
	if err != nil || string(res.Output) != "x {{ literal }}" {
		t.Errorf("got %q, %v", res.Output, err)
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		line, col  int
		want       string // "" for no issue
	}{
		{"native", `{{ range nomadService "web" }}{{ .Address }}{{ end }}{{ env "X" }}`, 0, 0, ""},
		{"consul key", "a\n  {{ key \"x/y\" }}", 2, 6, "reads Consul, and no Consul is configured"},
		{"consul service", `{{ range service "web" }}{{ end }}`, 1, 10, "reads Consul"},
		{"vault", "{{ with secret \"db/creds\" }}{{ .Data.u }}{{ end }}", 1, 9, "reads Vault, and no Vault is configured"},
		{"pkiCert in if", "{{ if true }}\n{{ pkiCert \"x\" }}{{ end }}", 2, 4, "reads Vault"},
		{"nomadVar", `{{ with nomadVar "nomad/jobs/x" }}{{ .k }}{{ end }}{{ range nomadVarList }}{{ .Path }}{{ end }}`, 0, 0, ""},
		{"plugin", `{{ plugin "x" }}`, 1, 4, "function_denylist"},
		{"unknown", "x\n{{ sprig_upper \"a\" }}", 2, 0, `"sprig_upper" does not exist`},
		{"syntax", "{{ if }}", 1, 0, "missing value for if"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			iss := Check(tc.text, "", "")
			if tc.want == "" {
				if len(iss) != 0 {
					t.Errorf("issues %v, want none", iss)
				}
				return
			}
			if len(iss) == 0 || !strings.Contains(iss[0].Summary, tc.want) || iss[0].Line != tc.line || iss[0].Column != tc.col {
				t.Errorf("issues %+v, want %d:%d %q", iss, tc.line, tc.col, tc.want)
			}
		})
	}
}

func TestParseEnv(t *testing.T) {
	got, err := ParseEnv([]byte("# comment\nA=1\nexport B = two words\nC=\"q\\tx\"\nD='lit $x'\n\nE=\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"A": "1", "B": "two words", "C": "q\tx", "D": "lit $x", "E": ""}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if _, err := ParseEnv([]byte("A=1\nnot a pair\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad line: %v", err)
	}
}

type testVars map[string]map[string]string

func (v testVars) Var(path string) (map[string]string, bool, error) {
	if path == "denied" {
		return nil, false, errors.New("access denied")
	}
	items, ok := v[path]
	return items, ok, nil
}

func (v testVars) List(prefix string) ([]VarMeta, error) {
	var out []VarMeta
	for p := range v {
		if strings.HasPrefix(p, prefix) {
			out = append(out, VarMeta{Namespace: "default", Path: p})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func TestNomadVar(t *testing.T) {
	vars := testVars{"nomad/jobs/web": {"user": "u1", "pass": "p1"}, "nomad/jobs/web/g": {"x": "y"}}
	for _, tc := range []struct {
		name, text, want, err string
	}{
		{"items", `{{ with nomadVar "nomad/jobs/web" }}{{ .user }}:{{ .pass }}{{ end }}`, "u1:p1", ""},
		{"range", `{{ range $k, $v := nomadVar "nomad/jobs/web" }}{{ $k }}={{ $v }};{{ end }}`, "pass=p1;user=u1;", ""},
		{"exists", `{{ nomadVarExists "nomad/jobs/web" }} {{ nomadVarExists "nomad/jobs/nope" }}`, "true false", ""},
		{"list", `{{ range nomadVarList "nomad/jobs/" }}{{ .Path }} {{ end }}`, "nomad/jobs/web nomad/jobs/web/g ", ""},
		{"missing", `{{ nomadVar "nomad/jobs/nope" }}`, "", "no such variable"},
		{"denied", `{{ nomadVar "denied" }}`, "", "access denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Render(Input{Name: "t", Text: tc.text}, Context{Vars: vars})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || string(res.Output) != tc.want || !res.UsesVars {
				t.Fatalf("got %q (uses vars %v), %v; want %q", res.Output, res.UsesVars, err, tc.want)
			}
		})
	}
}
