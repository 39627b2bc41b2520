package jobspec

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

var checksumLen = map[string]int{"md5": 32, "sha1": 40, "sha256": 64, "sha512": 128}

func (p *parser) task(blk *hclsyntax.Block, g *Group, j *Job, groupWhere string) *Task {
	name := blk.Labels[0]
	where := fmt.Sprintf("task %q in %s", name, groupWhere)
	p.checkName(blk, "task")
	t := &Task{
		Name:        name,
		Config:      map[string]any{},
		KillTimeout: defaultKillTimeout,
		Resources:   Resources{CPU: 100, MemoryMB: 300},
		Restart:     g.Restart,
		Logs:        Logs{MaxFiles: 10, MaxFileSizeMB: 10},
		Pos:         p.pos(blk.TypeRange),
		ConfigPos:   p.pos(blk.TypeRange),
		DriverPos:   p.pos(blk.TypeRange),
	}
	attrs, blocks := p.content(blk.Body, schema{
		what: where,
		attrs: []string{"driver", "kill_timeout", "leader", "user", "env", "meta", "shutdown_delay", "kill_signal",
			"kind", "max_run_duration"},
		blocks: []blockSpec{
			{name: "config", single: true},
			{name: "env", single: true},
			{name: "meta", single: true},
			{name: "resources", single: true},
			{name: "restart", single: true},
			{name: "constraint"},
			{name: "affinity"},
			{name: "lifecycle", single: true},
			{name: "logs", single: true},
			{name: "artifact"},
			{name: "template"},
			{name: "service"},
			{name: "vault", single: true},
			{name: "identity", single: true},
			{name: "dispatch_payload", single: true},
			{name: "volume_mount"},
			{name: "csi_plugin", single: true},
			{name: "scaling", label: "scaling target"},
		},
	})

	n := len(p.diags)
	da := attrs["driver"]
	if d, ok := p.str(da, where); ok && d != "" {
		t.Driver = d
		t.DriverPos = p.pos(da.Expr.Range())
	} else if len(p.diags) == n {
		r := blk.TypeRange
		if da != nil {
			r = da.Expr.Range()
		}
		p.fail(r, fmt.Sprintf("task %q has no driver", name), "add driver = \"<name>\""+p.knownDrivers("; known drivers: "))
	}

	cfgOK := true
	var cfgBody *hclsyntax.Body
	cfgRange := blk.TypeRange
	if bs := blocks["config"]; len(bs) > 0 {
		cfgRange, cfgBody = bs[0].TypeRange, bs[0].Body
		t.ConfigPos = p.pos(cfgRange)
		t.Config, cfgOK = p.config(bs[0].Body, "config block of "+where)
	}
	if t.Driver != "" && p.opts.Drivers != nil {
		validate, known := p.opts.Drivers[t.Driver]
		switch {
		case !known:
			p.fail(da.Expr.Range(), fmt.Sprintf("unknown driver %q in %s", t.Driver, where), p.knownDrivers("known drivers: "))
		case validate != nil && cfgOK:
			p.driverConfig(validate(t.Config), t.Driver, where, cfgRange, cfgBody)
		}
	}

	if env, r, ok := p.stringMap("env", attrs, blocks, where); ok && env != nil {
		for _, k := range sortedKeys(env) {
			v := env[k]
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexFunc(k, unicode.IsControl) >= 0 || strings.Contains(v, "\x00") {
				p.fail(r, fmt.Sprintf("invalid environment variable %q in %s", k, where),
					"names must be non-empty without '=', NUL or control characters, values without NUL")
				continue
			}
			if strings.HasPrefix(k, reservedEnvPrefix) {
				p.warn(r, fmt.Sprintf("env %s in %s is ignored where berth sets it: NOMAD_* variables are the runtime's", k, where),
					"the runtime's value wins (NOMAD_ALLOC_ID, NOMAD_PORT_<label>, ...); rename the variable")
			}
		}
		t.Env = env
	}
	if m, r, ok := p.stringMap("meta", attrs, blocks, where); ok {
		p.checkMetaKeys(r, m, where)
		t.Meta = m
	}
	if a := attrs["kill_timeout"]; a != nil {
		if d, ok := p.duration(a, where); ok {
			t.KillTimeout = d
			if max := p.opts.MaxKillTimeout; max > 0 && d > max {
				p.warn(a.Expr.Range(), fmt.Sprintf("kill_timeout %s in %s is longer than this node's max_kill_timeout %s", d, where, max),
					fmt.Sprintf("the task gets %s to stop (client.max_kill_timeout), as in Nomad", max))
			}
		}
	}
	if d, ok := p.duration(attrs["shutdown_delay"], where); ok {
		t.ShutdownDelay = d
	}
	if a := attrs["max_run_duration"]; a != nil {
		if d, ok := p.duration(a, where); ok {
			t.MaxRunDuration = d
		}
		p.warn(a.NameRange, fmt.Sprintf("max_run_duration in %s is a berth extension", where),
			"Nomad 1.6.5 refuses it (\"Unsupported argument\"); berth kills and fails the task when it runs longer")
	}
	if a := attrs["kill_signal"]; a != nil {
		if s, ok := p.str(a, where); ok {
			t.KillSignal = s
			if _, known := SignalNumber(s); !known {
				p.warn(a.Expr.Range(), fmt.Sprintf("kill_signal %q in %s is not a signal berth knows", s, where),
					"Nomad accepts any name here and fails at stop time; write e.g. \"SIGINT\" or \"SIGQUIT\"")
			}
		}
	}
	if b, ok := p.boolean(attrs["leader"], where); ok {
		t.Leader = b
	}
	if s, ok := p.str(attrs["user"], where); ok {
		t.User = s
		if check := p.opts.Users[t.Driver]; check != nil && s != "" {
			if err := check(s); err != nil {
				p.fail(attrs["user"].Expr.Range(), fmt.Sprintf("user %q of %s: %v", s, where, err),
					"name a user that exists on this node and that its settings allow (tasks.user_denylist)")
			}
		}
	}
	if s, ok := p.str(attrs["kind"], where); ok {
		t.Kind = s
	}
	if bs := blocks["resources"]; len(bs) > 0 {
		t.Resources = p.resources(bs[0], t.Resources, where)
	}
	if bs := blocks["restart"]; len(bs) > 0 {
		t.Restart = p.restart(bs[0], g.Restart, where)
	}
	for _, b := range blocks["constraint"] {
		if c, ok := p.constraint(b, where, true); ok {
			t.Constraints = append(t.Constraints, c)
		}
	}
	for _, b := range blocks["affinity"] {
		p.affinity(b, where)
	}
	if bs := blocks["lifecycle"]; len(bs) > 0 {
		t.Lifecycle = p.lifecycle(bs[0], where)
	}
	if bs := blocks["logs"]; len(bs) > 0 {
		t.Logs = p.logs(bs[0], t.Logs, where)
	}
	for _, b := range blocks["artifact"] {
		if a := p.artifact(b, where); a != nil {
			t.Artifacts = append(t.Artifacts, a)
		}
	}
	for _, b := range blocks["template"] {
		t.Templates = append(t.Templates, p.template(b, where))
	}
	for _, b := range blocks["service"] {
		t.Services = append(t.Services, p.service(b, where, name))
	}
	if bs := blocks["vault"]; len(bs) > 0 {
		t.Vault = p.vault(bs[0], where)
	}
	if bs := blocks["identity"]; len(bs) > 0 {
		t.Identity = p.identity(bs[0], where)
	}
	if bs := blocks["dispatch_payload"]; len(bs) > 0 {
		t.DispatchPayload = p.dispatchPayload(bs[0], where)
	}
	for _, b := range blocks["volume_mount"] {
		t.VolumeMounts = append(t.VolumeMounts, p.volumeMount(b, where))
	}
	if bs := blocks["csi_plugin"]; len(bs) > 0 {
		attrs := p.check(bs[0], csiPluginShape, "csi_plugin block in "+where)
		if attrs["id"] == nil || attrs["mount_dir"] == nil {
			p.fail(bs[0].TypeRange, fmt.Sprintf("csi_plugin in %s needs id and mount_dir", where), "")
		}
		var typ string
		p.oneOf(attrs["type"], where, &typ, "node", "controller", "monolith")
		p.warn(bs[0].TypeRange, fmt.Sprintf("csi_plugin in %s is accepted and ignored", where), "berth does not run CSI plugins")
	}
	for _, b := range blocks["scaling"] {
		p.check(b, taskScalingShape, fmt.Sprintf("scaling %q in %s", b.Labels[0], where))
		p.clusterOnly(b, where, "task scaling is Nomad Enterprise's dynamic application sizing")
	}
	return t
}

// driverConfig turns a driver validator's error into diagnostics: a
// warning-only error (Warning() true) is a warning, and an error that names
// its field (ConfigField()) points at that key of the config block.
func (p *parser) driverConfig(err error, driver, where string, cfgRange hcl.Range, body *hclsyntax.Body) {
	if err == nil {
		return
	}
	var leaves []error
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		leaves = append(leaves, e)
	}
	walk(err)
	for _, e := range leaves {
		r := cfgRange
		var fe interface{ ConfigField() string }
		if errors.As(e, &fe) && body != nil {
			key := fe.ConfigField()
			if i := strings.IndexAny(key, ".["); i >= 0 {
				key = key[:i]
			}
			if a := body.Attributes[key]; a != nil {
				r = a.NameRange
			} else {
				for _, b := range body.Blocks {
					if b.Type == key {
						r = b.TypeRange
						break
					}
				}
			}
		}
		var w interface{ Warning() bool }
		if errors.As(e, &w) && w.Warning() {
			p.warn(r, fmt.Sprintf("config for driver %q in %s: %v", driver, where, e), "")
			continue
		}
		p.fail(r, fmt.Sprintf("invalid config for driver %q in %s: %v", driver, where, e), "")
	}
}

func (p *parser) lifecycle(blk *hclsyntax.Block, where string) *Lifecycle {
	w := "lifecycle block in " + where
	attrs, _ := p.content(blk.Body, schema{what: w, attrs: []string{"hook", "sidecar"}})
	l := &Lifecycle{}
	if a := attrs["hook"]; a != nil {
		p.oneOf(a, w, &l.Hook, HookPrestart, HookPoststart, HookPoststop)
	}
	if b, ok := p.boolean(attrs["sidecar"], w); ok {
		l.Sidecar = b
	}
	if l.Hook == "" && attrs["hook"] == nil {
		p.warn(blk.TypeRange, fmt.Sprintf("%s has no hook, so the task is a main task", w), "Nomad drops a lifecycle block without hook; set hook = \"prestart\", \"poststart\" or \"poststop\"")
		return nil
	}
	return l
}

func (p *parser) logs(blk *hclsyntax.Block, base Logs, where string) Logs {
	w := "logs block in " + where
	attrs, _ := p.content(blk.Body, schema{what: w, attrs: []string{"max_files", "max_file_size", "disabled", "enabled"}})
	l := base
	if v, ok := p.integer(attrs["max_files"], w, -maxInt32, maxInt32); ok {
		if v < 1 {
			p.fail(attrs["max_files"].Expr.Range(), fmt.Sprintf("minimum number of files is 1; got %d", v), "in "+w)
		}
		l.MaxFiles = v
	}
	if v, ok := p.integer(attrs["max_file_size"], w, -maxInt32, maxInt32); ok {
		if v < 1 {
			p.fail(attrs["max_file_size"].Expr.Range(), fmt.Sprintf("minimum file size is 1MB; got %d", v), "in "+w)
		}
		l.MaxFileSizeMB = v
	}
	if b, ok := p.boolean(attrs["disabled"], w); ok {
		l.Disabled = b
	}
	if b, ok := p.boolean(attrs["enabled"], w); ok && !b {
		l.Disabled = true
	}
	return l
}

// escapesAllocDir reports whether rel, taken relative to the directory
// prefix inside the allocation directory, leads out of it, as Nomad's check.
func escapesAllocDir(prefix, rel string) bool {
	const root = "/alloc"
	p := path.Clean(path.Join(root, prefix, rel))
	return p != root && !strings.HasPrefix(p, root+"/")
}

// hostSource is the host path a local artifact source names when it is
// certainly outside the allocation directory: absolute (the allocation's
// ID, in its directory's path, is not known before it runs) or climbing
// out of it; "" for a URL, a path inside, or one with interpolations, which
// the runner checks once they are filled in.
func hostSource(src string) string {
	s := src
	if getter, rest, ok := strings.Cut(s, "::"); ok && getter == "file" {
		s = rest
	}
	if strings.Contains(s, "${") {
		return ""
	}
	if rest, ok := strings.CutPrefix(s, "file://"); ok {
		host, p, _ := strings.Cut(rest, "/")
		if host != "" && host != "localhost" {
			return ""
		}
		return path.Clean("/" + p)
	}
	if i := strings.Index(s, "://"); i > 0 {
		return ""
	}
	if path.IsAbs(s) {
		return path.Clean(s)
	}
	if escapesAllocDir("task", s) {
		return "<task dir>/" + s
	}
	return ""
}

func (p *parser) artifact(blk *hclsyntax.Block, where string) *Artifact {
	w := "artifact block in " + where
	n := len(p.diags)
	attrs, blocks := p.content(blk.Body, schema{
		what:   w,
		attrs:  []string{"source", "destination", "mode"},
		blocks: []blockSpec{{name: "options", single: true}, {name: "headers", single: true}},
	})
	a := &Artifact{Destination: "local/", Mode: "any", Pos: p.pos(blk.TypeRange)}
	if s, ok := p.str(attrs["source"], w); ok {
		a.Source = s
	}
	if s, ok := p.str(attrs["destination"], w); ok && s != "" {
		a.Destination = s
	}
	p.oneOf(attrs["mode"], w, &a.Mode, "any", "file", "dir")
	for _, name := range []string{"options", "headers"} {
		bs := blocks[name]
		if len(bs) == 0 {
			continue
		}
		bw := name + " block in " + w
		battrs, _ := p.content(bs[0].Body, schema{what: bw, anyAttrs: true})
		m := map[string]string{}
		for _, ba := range sortedAttrMap(battrs) {
			if s, ok := p.str(ba, bw); ok {
				m[ba.Name] = s
			}
		}
		if name == "options" {
			a.Options = m
		} else {
			a.Headers = m
		}
	}
	if len(p.diags) > n {
		return nil
	}
	switch {
	case strings.TrimSpace(a.Source) == "":
		p.fail(blk.TypeRange, fmt.Sprintf("%s: source must be specified", w), "set source = \"https://...\" or a local path")
		return nil
	case hostSource(a.Source) != "":
		p.fail(attrs["source"].Expr.Range(), fmt.Sprintf("artifact source %q in %s reads %s on the host: local paths and file:// URLs must name something inside the allocation directory", a.Source, where, hostSource(a.Source)),
			"use a path relative to the task directory (e.g. \"../alloc/data/app.tgz\", made by a prestart task) or an http(s):// URL")
		return nil
	case escapesAllocDir("task", a.Destination):
		r := blk.TypeRange
		if da := attrs["destination"]; da != nil {
			r = da.Expr.Range()
		}
		p.fail(r, fmt.Sprintf("artifact destination %q in %s escapes the allocation directory", a.Destination, where), "use a path inside the task directory, e.g. \"local/\"")
		return nil
	}
	if sum, ok := a.Options["checksum"]; ok {
		typ, val, found := strings.Cut(sum, ":")
		want, known := checksumLen[typ]
		r := blocks["options"][0].Body.Attributes["checksum"].Expr.Range()
		switch {
		case !found || val == "":
			p.fail(r, fmt.Sprintf("checksum %q in %s is not type:value", sum, w), "write checksum = \"sha256:<hex>\"")
		case !known:
			p.fail(r, fmt.Sprintf("unsupported checksum type %q in %s", typ, w), "use md5, sha1, sha256 or sha512")
		case len(val) != want || !isHex(val):
			p.fail(r, fmt.Sprintf("invalid %s checksum in %s: want %d hex digits, got %q", typ, w, want, val), "")
		default:
			a.ChecksumType, a.Checksum = typ, strings.ToLower(val)
		}
	}
	return a
}

func isHex(s string) bool {
	for _, r := range strings.ToLower(s) {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

func (p *parser) dispatchPayload(blk *hclsyntax.Block, where string) *DispatchPayload {
	w := "dispatch_payload block in " + where
	attrs, _ := p.content(blk.Body, schema{what: w, attrs: []string{"file"}})
	d := &DispatchPayload{Pos: p.pos(blk.TypeRange)}
	if a := attrs["file"]; a != nil {
		if s, ok := p.str(a, w); ok {
			d.File = s
			if escapesAllocDir("task/local", s) {
				p.fail(a.Expr.Range(), fmt.Sprintf("dispatch_payload file %q in %s escapes the allocation directory", s, where), "the file is relative to the task's local/ directory")
			}
		}
	}
	return d
}

func (p *parser) volumeMount(blk *hclsyntax.Block, where string) *VolumeMount {
	w := "volume_mount block in " + where
	attrs, _ := p.content(blk.Body, schema{what: w, attrs: []string{"volume", "destination", "read_only", "propagation_mode"}})
	vm := &VolumeMount{PropagationMode: "private", Pos: p.pos(blk.TypeRange)}
	if s, ok := p.str(attrs["volume"], w); ok {
		vm.Volume = s
	}
	if s, ok := p.str(attrs["destination"], w); ok {
		vm.Destination = s
	}
	if b, ok := p.boolean(attrs["read_only"], w); ok {
		vm.ReadOnly = b
	}
	p.oneOf(attrs["propagation_mode"], w, &vm.PropagationMode, "private", "host-to-task", "bidirectional")
	return vm
}

func (p *parser) vault(blk *hclsyntax.Block, where string) *Vault {
	w := "vault block in " + where
	attrs, _ := p.content(blk.Body, schema{what: w, attrs: []string{"policies", "namespace", "env", "change_mode", "change_signal", "disable_file"}})
	v := &Vault{Env: true, ChangeMode: "restart", Pos: p.pos(blk.TypeRange)}
	if l, ok := p.strList(attrs["policies"], w); ok {
		v.Policies = l
	}
	if s, ok := p.str(attrs["namespace"], w); ok {
		v.Namespace = s
	}
	if b, ok := p.boolean(attrs["env"], w); ok {
		v.Env = b
	}
	if b, ok := p.boolean(attrs["disable_file"], w); ok {
		v.DisableFile = b
	}
	if s, ok := p.str(attrs["change_signal"], w); ok {
		v.ChangeSignal = s
	}
	p.oneOf(attrs["change_mode"], w, &v.ChangeMode, "noop", "restart", "signal")
	if v.ChangeMode == "signal" && v.ChangeSignal == "" {
		p.fail(blk.TypeRange, fmt.Sprintf("%s has change_mode \"signal\" and no change_signal", w), "")
	}
	p.warn(blk.TypeRange, fmt.Sprintf("vault in %s is accepted, but berth has no Vault", where),
		"the task gets no Vault token; Nomad refuses the job where Vault is not enabled")
	return v
}

func (p *parser) identity(blk *hclsyntax.Block, where string) *Identity {
	w := "identity block in " + where
	attrs, _ := p.content(blk.Body, schema{what: w, attrs: []string{"env", "file"}})
	id := &Identity{Pos: p.pos(blk.TypeRange)}
	if b, ok := p.boolean(attrs["env"], w); ok {
		id.Env = b
	}
	if b, ok := p.boolean(attrs["file"], w); ok {
		id.File = b
	}
	p.warn(blk.TypeRange, fmt.Sprintf("identity in %s is accepted and ignored", where), "berth issues no workload identities")
	return id
}

func (p *parser) resources(blk *hclsyntax.Block, base Resources, where string) Resources {
	w := "resources block in " + where
	attrs, blocks := p.content(blk.Body, schema{
		what:   w,
		attrs:  []string{"cpu", "cores", "memory", "memory_max", "disk", "iops"},
		blocks: []blockSpec{{name: "network"}, {name: "device", label: "device name"}},
	})
	r := base
	if v, ok := p.integer(attrs["cpu"], w, 1, maxInt32); ok {
		r.CPU = v
	}
	if v, ok := p.integer(attrs["cores"], w, 0, maxInt32); ok && v > 0 {
		if attrs["cpu"] != nil {
			p.fail(attrs["cores"].NameRange, fmt.Sprintf("%s sets both cpu and cores", w), "reserve either MHz (cpu) or whole cores (cores), not both")
		}
		r.Cores, r.CPU = v, 0
	}
	if v, ok := p.integer(attrs["memory"], w, 10, maxInt32); ok {
		r.MemoryMB = v
	}
	if a := attrs["memory_max"]; a != nil {
		if v, ok := p.integer(a, w, MemoryUnlimited, maxInt32); ok {
			switch {
			case v == MemoryUnlimited:
				p.warn(a.Expr.Range(), fmt.Sprintf("memory_max = -1 in %s means no memory limit", w),
					"Nomad 1.6.5 refuses -1 (\"MemoryMaxMB value (-1) should be larger than MemoryMB value\"); later Nomad versions accept it")
			case v != 0 && v < r.MemoryMB:
				p.fail(a.Expr.Range(), fmt.Sprintf("memory_max (%d MB) in %s is below memory (%d MB)", v, w, r.MemoryMB), "memory_max is the upper limit: make it >= memory, or -1 for no limit")
			}
			r.MemoryMaxMB = v
		}
	}
	for _, name := range []string{"disk", "iops"} {
		if a := attrs[name]; a != nil {
			p.integer(a, w, 0, maxInt32)
			p.warn(a.NameRange, fmt.Sprintf("%s in %s is deprecated in Nomad and ignored", name, w), "")
		}
	}
	for _, b := range blocks["network"] {
		p.check(b, taskNetworkShape, "network block in "+w)
		p.warn(b.TypeRange, fmt.Sprintf("network in %s is deprecated since Nomad 0.12 and ignored", w), "declare ports in the group's network block")
	}
	for _, b := range blocks["device"] {
		p.check(b, deviceShape, fmt.Sprintf("device %q in %s", b.Labels[0], w))
		p.warn(b.TypeRange, fmt.Sprintf("device %q in %s is accepted and ignored", b.Labels[0], w), "berth schedules no device plugins")
	}
	return r
}
