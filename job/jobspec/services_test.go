package jobspec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Services without a provider are registered natively, said once; Consul's
// are accepted and said to go nowhere; script checks are not run.
func TestServiceProviders(t *testing.T) {
	src := `job "j" {
  group "g" {
    network {
      port "http" {}
    }
    service {
      name = "a"
      port = "http"
    }
    service {
      name = "b"
      port = "http"
    }
    task "t" {
      driver = "raw_exec"
      service {
        name     = "c"
        check {
          type     = "script"
          command  = "/bin/true"
          interval = "10s"
          timeout  = "2s"
        }
      }
      config {
        command = "/bin/true"
      }
    }
  }
  group "h" {
    service {
      name     = "d"
      provider = "consul"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
  }
}
`
	job, err := Parse([]byte(src), "j.hcl", ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := job.Groups[0]
	if s := g.Services[0]; s.Provider != "nomad" || !s.ProviderUnset {
		t.Errorf("service without provider: %q unset %v", s.Provider, s.ProviderUnset)
	}
	var all []string
	notes := 0
	for _, w := range job.Warnings {
		all = append(all, w.String())
		if strings.Contains(w.Summary, "names no provider") {
			notes++
		}
	}
	text := strings.Join(all, "\n")
	if notes != 1 {
		t.Errorf("%d notes about a missing provider, want 1:\n%s", notes, text)
	}
	for _, want := range []string{
		`j.hcl:6:5: service block in group "g" names no provider: berth registers it in its native catalog`,
		`j.hcl:18:9: script check in service block in task "t" in group "g" is not run`,
		`j.hcl:31:5: service block in group "h" uses provider "consul": berth has no Consul, so the service is not registered anywhere`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no warning %q in:\n%s", want, text)
		}
	}
	// A group mixing an unset provider (Consul, for Nomad) and "nomad" is
	// refused as Nomad refuses it.
	mixed := strings.Replace(src, `      name = "b"`, `      name = "b"
      provider = "nomad"`, 1)
	if _, err := Parse([]byte(mixed), "j.hcl", ParseOptions{}); err == nil || !strings.Contains(err.Error(), `uses provider "nomad" and service "a" uses "consul"`) {
		t.Errorf("mixed providers: %v", err)
	}
}

// What cannot render on berth is an error at its line and column in the
// job file, for inline templates (heredoc or quoted) and for a source
// next to the job file.
func TestTemplateFunctionsChecked(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "app.tpl"), []byte("ok\n{{ key \"a/b\" }}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	job := func(tmpl string) string {
		return `job "j" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
      template {
        destination = "local/out"
` + tmpl + `
      }
    }
  }
}
`
	}
	for _, tc := range []struct {
		name, tmpl, want string
	}{
		{"heredoc vault", "        data = <<EOT\nline one\n  {{ with secret \"x\" }}{{ end }}\nEOT", `j.hcl:12:11: template block in task "t" in group "g": template function "secret" reads Vault, and no Vault is configured`},
		{"quoted consul", `        data = "{{ range service \"web\" }}{{ end }}"`, `j.hcl:10:26: template block in task "t" in group "g": template function "service" reads Consul, and no Consul is configured`},
		{"unknown", `        data = "{{ nope }}"`, `template function "nope" does not exist`},
		{"source file", `        source = "app.tpl"`, `j.hcl:10:18: template block in task "t" in group "g", in app.tpl line 2: template function "key" reads Consul`},
		{"both", "        source = \"app.tpl\"\n        data = \"x\"", `has both source and data`},
		{"bad signal", "        data = \"x\"\n        change_mode = \"signal\"\n        change_signal = \"SIGNOPE\"", `change_signal "SIGNOPE", which is not a signal`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "j.hcl")
			if err := os.WriteFile(path, []byte(job(tc.tmpl)), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ParseFile(path, ParseOptions{AllowFS: true})
			if err == nil || !strings.Contains(err.Error(), strings.Replace(tc.want, "j.hcl:", path+":", 1)) {
				t.Errorf("err = %v\nwant %q", err, tc.want)
			}
		})
	}
	// Nomad's native functions pass.
	ok := job(`        data = "{{ range nomadService \"web\" }}{{ .Address }}:{{ .Port }}{{ end }} {{ env \"NOMAD_ALLOC_ID\" }}"`)
	if j, err := Parse([]byte(ok), "j.hcl", ParseOptions{}); err != nil {
		t.Errorf("native functions refused: %v", err)
	} else if j.Dir != "" {
		t.Errorf("Dir = %q for a job without the filesystem", j.Dir)
	}
}
