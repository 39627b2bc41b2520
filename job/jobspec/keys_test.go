package jobspec

import (
	"fmt"
	"strings"
	"testing"
)

// keySamples writes every key of jobKeys, groupKeys and taskKeys, as the
// README's table names them (`count`, `restart {}`): a valid use of it, or
// "" for a key the template below already holds. A row added to a table
// needs a sample here.
var keySamples = map[string]map[string]string{
	"job": {
		"id":               `id = "j2"`,
		"name":             `name = "n"`,
		"type":             `type = "service"`,
		"namespace":        `namespace = "ns"`,
		"region":           `region = "r"`,
		"datacenters":      `datacenters = ["dc1"]`,
		"priority":         `priority = 60`,
		"meta":             `meta = { a = "b" }`,
		"meta {}":          `meta { a = "b" }`,
		"node_pool":        `node_pool = "default"`,
		"all_at_once":      `all_at_once = true`,
		"consul_token":     `consul_token = "x"`,
		"vault_token":      `vault_token = "x"`,
		"constraint {}":    "constraint {\n attribute = \"${attr.kernel.name}\"\n value = \"linux\"\n}",
		"affinity {}":      "affinity {\n attribute = \"${node.datacenter}\"\n value = \"dc1\"\n weight = 50\n}",
		"spread {}":        `spread { attribute = "${node.datacenter}" }`,
		"update {}":        `update { max_parallel = 1 }`,
		"migrate {}":       `migrate { max_parallel = 1 }`,
		"multiregion {}":   `multiregion {}`,
		"vault {}":         `vault { policies = ["p"] }`,
		"reschedule {}":    `reschedule { delay = "30s" }`,
		"periodic {}":      "type = \"batch\"\nperiodic { cron = \"@daily\" }",
		"parameterized {}": "type = \"batch\"\nparameterized {}",
		"group {}":         "",
		"task {}":          "task \"t2\" {\n driver = \"raw_exec\"\n}",
	},
	"group": {
		"count":                        `count = 2`,
		"meta":                         `meta = { a = "b" }`,
		"meta {}":                      `meta { a = "b" }`,
		"shutdown_delay":               `shutdown_delay = "1s"`,
		"stop_after_client_disconnect": `stop_after_client_disconnect = "1h"`,
		"max_client_disconnect":        `max_client_disconnect = "1h"`,
		"restart {}":                   `restart { attempts = 1 }`,
		"reschedule {}":                `reschedule { delay = "30s" }`,
		"network {}":                   "network {\n port \"http\" {}\n}",
		"constraint {}":                "constraint {\n attribute = \"${attr.kernel.name}\"\n value = \"linux\"\n}",
		"affinity {}":                  "affinity {\n attribute = \"${node.datacenter}\"\n value = \"dc1\"\n weight = 50\n}",
		"spread {}":                    `spread { attribute = "${node.datacenter}" }`,
		"update {}":                    `update { max_parallel = 1 }`,
		"migrate {}":                   `migrate { max_parallel = 1 }`,
		"scaling {}":                   `scaling { max = 3 }`,
		"consul {}":                    `consul { namespace = "x" }`,
		"disconnect {}":                `disconnect { lost_after = "1h" }`,
		"vault {}":                     `vault { policies = ["p"] }`,
		"ephemeral_disk {}":            `ephemeral_disk { size = 500 }`,
		"volume {}":                    "volume \"v2\" {\n type = \"host\"\n source = \"v2\"\n}",
		"service {}":                   "service {\n name = \"s\"\n provider = \"nomad\"\n}",
		"task {}":                      "",
	},
	"task": {
		"driver":              "",
		"config {}":           "",
		"env":                 `env = { A = "b" }`,
		"env {}":              `env { A = "b" }`,
		"meta":                `meta = { a = "b" }`,
		"meta {}":             `meta { a = "b" }`,
		"kill_timeout":        `kill_timeout = "5s"`,
		"shutdown_delay":      `shutdown_delay = "1s"`,
		"max_run_duration":    `max_run_duration = "1h"`,
		"kill_signal":         `kill_signal = "SIGINT"`,
		"leader":              `leader = true`,
		"user":                `user = "nobody"`,
		"kind":                `kind = "x"`,
		"resources {}":        `resources { cpu = 200 }`,
		"restart {}":          `restart { attempts = 1 }`,
		"constraint {}":       "constraint {\n attribute = \"${attr.kernel.name}\"\n value = \"linux\"\n}",
		"affinity {}":         "affinity {\n attribute = \"${node.datacenter}\"\n value = \"dc1\"\n weight = 50\n}",
		"lifecycle {}":        `lifecycle { hook = "prestart" }`,
		"logs {}":             `logs { max_files = 2 }`,
		"artifact {}":         `artifact { source = "https://example.com/a.tgz" }`,
		"template {}":         "template {\n data = \"x\"\n destination = \"local/x\"\n}",
		"service {}":          "service {\n name = \"s\"\n provider = \"nomad\"\n}",
		"vault {}":            `vault { policies = ["p"] }`,
		"identity {}":         `identity { env = true }`,
		"schedule {}":         "schedule {\n cron {\n start = \"30 9 * * MON-FRI *\"\n end = \"0 16\"\n }\n}",
		"dispatch_payload {}": `dispatch_payload { file = "p" }`,
		"volume_mount {}":     "volume_mount {\n volume = \"tv\"\n destination = \"/v\"\n}",
		"csi_plugin {}":       "csi_plugin {\n id = \"c\"\n type = \"node\"\n mount_dir = \"/csi\"\n}",
		"scaling {}":          `scaling "cpu" { enabled = false }`,
	},
}

const keyTemplate = `job "j" {
@job@
  group "g" {
    volume "tv" {
      type   = "host"
      source = "tv"
    }
@group@
    task "t" {
      driver = "exec"
      config {
        command = "/bin/true"
      }
@task@
    }
  }
}
`

// sampleJob puts sample in body's place of the template and returns the
// file and the lines the sample spans.
func sampleJob(body, sample string) (src string, first, last int) {
	mark := "@" + body + "@"
	first = strings.Count(keyTemplate[:strings.Index(keyTemplate, mark)], "\n") + 1
	last = first + strings.Count(sample, "\n")
	src = strings.Replace(keyTemplate, mark, sample, 1)
	for _, m := range []string{"@job@", "@group@", "@task@"} {
		src = strings.Replace(src, m, "", 1)
	}
	return src, first, last
}

// Every key the tables accept parses when written in its body, and a key
// whose verdict is "warning" is warned about where it is written: the
// README's table says what the parser does.
func TestKeyVerdicts(t *testing.T) {
	for _, body := range bodies {
		for _, r := range body.rows {
			for _, e := range keyEntries(r) {
				sample, ok := keySamples[body.name][e]
				if !ok {
					t.Errorf("%s key `%s` has no sample in keySamples", body.name, e)
					continue
				}
				src, first, last := sampleJob(body.name, sample)
				name := fmt.Sprintf("%s.%s", body.name, e)
				job, err := Parse([]byte(src), name+".hcl", ParseOptions{})
				if err != nil {
					t.Errorf("%s: %v\n%s", name, err, src)
					continue
				}
				if r.verdict != ignored {
					continue
				}
				warned := false
				for _, w := range job.Warnings {
					warned = warned || (w.Line >= first && w.Line <= last)
				}
				if !warned {
					t.Errorf("%s: verdict %q, but no warning on lines %d-%d: %v", name, r.verdict, first, last, job.Warnings)
				}
			}
		}
	}
	for body, samples := range keySamples {
		for e := range samples {
			found := false
			for _, b := range bodies {
				for _, r := range b.rows {
					for _, x := range keyEntries(r) {
						found = found || (b.name == body && x == e)
					}
				}
			}
			if !found {
				t.Errorf("keySamples has %s key `%s`, which %sKeys has not", body, e, body)
			}
		}
	}
}
