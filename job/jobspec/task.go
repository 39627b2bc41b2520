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

// taskKeys is what a task body may hold: one row per key; see row for how the
// table is read and how to add a key.
var taskKeys = []row{
	{name: "driver", form: attrForm, verdict: runs, always: true, handle: taskDriver},
	{name: "config", form: blockForm, single: true, verdict: runs, always: true, handle: taskConfig},
	{name: "env", form: eitherForm, single: true, verdict: runs, handle: taskEnv},
	metaRow,
	{name: "kill_timeout", form: attrForm, verdict: runs, handle: taskKillTimeout},
	shutdownDelayRow,
	{name: "max_run_duration", form: attrForm, verdict: runs, handle: func(p *parser, s *scope, f field) {
		if d, ok := p.duration(f.attr, s.where); ok {
			s.task.MaxRunDuration = d
		}
		p.warn(f.attr.NameRange, fmt.Sprintf("max_run_duration in %s is a berth extension", s.where),
			"Nomad 1.6.5 refuses it (\"Unsupported argument\"); berth kills and fails the task when it runs longer")
	}},
	{name: "kill_signal", form: attrForm, verdict: runs, handle: func(p *parser, s *scope, f field) {
		if x, ok := p.str(f.attr, s.where); ok {
			s.task.KillSignal = x
			if _, known := SignalNumber(x); !known {
				p.warn(f.attr.Expr.Range(), fmt.Sprintf("kill_signal %q in %s is not a signal berth knows", x, s.where),
					"Nomad accepts any name here and fails at stop time; write e.g. \"SIGINT\" or \"SIGQUIT\"")
			}
		}
	}},
	boolKey("leader", runs, func(s *scope) *bool { return &s.task.Leader }),
	{name: "user", form: attrForm, verdict: runs, handle: taskUser},
	strKey("kind", parsed, func(s *scope) *string { return &s.task.Kind }),
	{name: "resources", form: blockForm, single: true, verdict: runs, handle: func(p *parser, s *scope, f field) {
		s.task.Resources = p.resources(f.blocks[0], s.task.Resources, s.where)
	}},
	restartRow,
	constraintRow,
	affinityRow,
	{name: "lifecycle", form: blockForm, single: true, verdict: runs, handle: func(p *parser, s *scope, f field) {
		s.task.Lifecycle = p.lifecycle(f.blocks[0], s.where)
	}},
	{name: "logs", form: blockForm, single: true, verdict: runs, handle: func(p *parser, s *scope, f field) {
		s.task.Logs = p.logs(f.blocks[0], s.task.Logs, s.where)
	}},
	{name: "artifact", form: blockForm, verdict: runs, handle: func(p *parser, s *scope, f field) {
		for _, b := range f.blocks {
			if a := p.artifact(b, s.where); a != nil {
				s.task.Artifacts = append(s.task.Artifacts, a)
			}
		}
	}},
	{name: "template", form: blockForm, verdict: runs, handle: func(p *parser, s *scope, f field) {
		for _, b := range f.blocks {
			s.task.Templates = append(s.task.Templates, p.template(b, s.where))
		}
	}},
	serviceRow,
	vaultRow,
	{name: "identity", form: blockForm, verdict: ignored, handle: taskIdentities},
	{name: "schedule", form: blockForm, single: true, verdict: ignored, handle: taskSchedule},
	{name: "dispatch_payload", form: blockForm, single: true, verdict: runs, handle: func(p *parser, s *scope, f field) {
		s.task.DispatchPayload = p.dispatchPayload(f.blocks[0], s.where)
	}},
	{name: "volume_mount", form: blockForm, verdict: runs, handle: func(p *parser, s *scope, f field) {
		for _, b := range f.blocks {
			s.task.VolumeMounts = append(s.task.VolumeMounts, p.volumeMount(b, s.where))
		}
	}},
	{name: "csi_plugin", form: blockForm, single: true, verdict: ignored, handle: taskCSIPlugin},
	{name: "scaling", form: blockForm, label: "scaling target", verdict: ignored, handle: func(p *parser, s *scope, f field) {
		for _, b := range f.blocks {
			p.check(b, taskScalingShape, fmt.Sprintf("scaling %q in %s", b.Labels[0], s.where))
			p.clusterOnly(b, s.where, "task scaling is Nomad Enterprise's dynamic application sizing")
		}
	}},
}

func (p *parser) task(blk *hclsyntax.Block, g *Group, j *Job, groupWhere string) *Task {
	name := blk.Labels[0]
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
	p.walk(taskKeys, &scope{where: fmt.Sprintf("task %q in %s", name, groupWhere), blk: blk, job: j, group: g, task: t})
	return t
}

func taskDriver(p *parser, s *scope, f field) {
	n := len(p.diags)
	if d, ok := p.str(f.attr, s.where); ok && d != "" {
		s.task.Driver = d
		s.task.DriverPos = p.pos(f.attr.Expr.Range())
	} else if len(p.diags) == n {
		r := s.blk.TypeRange
		if f.attr != nil {
			r = f.attr.Expr.Range()
		}
		p.fail(r, fmt.Sprintf("task %q has no driver", s.task.Name), "add driver = \"<name>\""+p.knownDrivers("; known drivers: "))
	}
}

// taskConfig reads the config block, absent or not, and has the driver
// validate it.
func taskConfig(p *parser, s *scope, f field) {
	t := s.task
	cfgOK := true
	var cfgBody *hclsyntax.Body
	cfgRange := s.blk.TypeRange
	if len(f.blocks) > 0 {
		cfgRange, cfgBody = f.blocks[0].TypeRange, f.blocks[0].Body
		t.ConfigPos = p.pos(cfgRange)
		t.Config, cfgOK = p.config(cfgBody, "config block of "+s.where)
	}
	if t.Driver == "" || p.opts.Drivers == nil {
		return
	}
	validate, known := p.opts.Drivers[t.Driver]
	switch {
	case !known:
		p.nodeFact(s.attrs["driver"].Expr.Range(), fmt.Sprintf("driver %q of %s is not on this node", t.Driver, s.where), p.missingDriver(t.Driver))
	case validate != nil && cfgOK:
		p.driverConfig(validate(t.Config), t.Driver, s.where, cfgRange, cfgBody)
	}
}

func taskEnv(p *parser, s *scope, _ field) {
	env, r, ok := p.stringMap("env", s.attrs, s.blocks, s.where)
	if !ok || env == nil {
		return
	}
	for _, k := range sortedKeys(env) {
		v := env[k]
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexFunc(k, unicode.IsControl) >= 0 || strings.Contains(v, "\x00") {
			p.fail(r, fmt.Sprintf("invalid environment variable %q in %s", k, s.where),
				"names must be non-empty without '=', NUL or control characters, values without NUL")
			continue
		}
		if strings.HasPrefix(k, reservedEnvPrefix) {
			p.warn(r, fmt.Sprintf("env %s in %s is ignored where berth sets it: NOMAD_* variables are the runtime's", k, s.where),
				"the runtime's value wins (NOMAD_ALLOC_ID, NOMAD_PORT_<label>, ...); rename the variable")
		}
	}
	s.task.Env = env
}

func taskKillTimeout(p *parser, s *scope, f field) {
	if d, ok := p.duration(f.attr, s.where); ok {
		s.task.KillTimeout = d
		if max := p.opts.MaxKillTimeout; max > 0 && d > max {
			p.warn(f.attr.Expr.Range(), fmt.Sprintf("kill_timeout %s in %s is longer than this node's max_kill_timeout %s", d, s.where, max),
				fmt.Sprintf("the task gets %s to stop (client.max_kill_timeout), as in Nomad", max))
		}
	}
}

func taskUser(p *parser, s *scope, f field) {
	x, ok := p.str(f.attr, s.where)
	if !ok {
		return
	}
	s.task.User = x
	if check := p.opts.Users[s.task.Driver]; check != nil && x != "" {
		if err := check(x); err != nil {
			p.nodeFact(f.attr.Expr.Range(), fmt.Sprintf("user %q of %s: %v", x, s.where, err),
				fmt.Sprintf("create the user on this node (useradd %s), or name one that exists and that its settings allow (tasks.user_denylist in the agent's config)", x))
		}
	}
}

func taskCSIPlugin(p *parser, s *scope, f field) {
	b := f.blocks[0]
	attrs := p.check(b, csiPluginShape, "csi_plugin block in "+s.where)
	if attrs["id"] == nil || attrs["mount_dir"] == nil {
		p.fail(b.TypeRange, fmt.Sprintf("csi_plugin in %s needs id and mount_dir", s.where), "")
	}
	var typ string
	p.oneOf(attrs["type"], s.where, &typ, "node", "controller", "monolith")
	p.warn(b.TypeRange, fmt.Sprintf("csi_plugin in %s is accepted and ignored", s.where), "berth does not run CSI plugins")
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
		p.nodeFact(r, fmt.Sprintf("invalid config for driver %q in %s: %v", driver, where, e),
			fmt.Sprintf("fix the config block (the README's \"Driver config keys\" lists what the %s driver takes), or the node setting the error names", driver))
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
	if sum, ok := a.Options["checksum"]; ok && !strings.Contains(sum, "${") {
		// With ${...} in it (e.g. "${NOMAD_META_sum}") it is read at run
		// time, after interpolation, as Nomad does.
		r := blocks["options"][0].Body.Attributes["checksum"].Expr.Range()
		typ, val, err := ParseChecksum(sum, w)
		var ce *checksumError
		if errors.As(err, &ce) {
			p.fail(r, ce.msg, ce.hint)
		} else {
			a.ChecksumType, a.Checksum = typ, val
		}
	}
	return a
}

// ErrChecksum is an artifact checksum berth cannot check.
var ErrChecksum = errors.New("invalid artifact checksum")

// checksumError says what is wrong with a checksum and how to write it.
type checksumError struct{ msg, hint string }

func (e *checksumError) Error() string        { return e.msg }
func (e *checksumError) Is(target error) bool { return target == ErrChecksum }

// ParseChecksum reads an artifact's options.checksum, "type:hex" with type
// md5, sha1, sha256 or sha512, for the artifact described by where; the
// value comes back in lower case. Its error matches ErrChecksum.
func ParseChecksum(sum, where string) (typ, val string, err error) {
	typ, val, found := strings.Cut(sum, ":")
	want, known := checksumLen[typ]
	switch {
	case !found || val == "":
		return "", "", &checksumError{fmt.Sprintf("checksum %q in %s is not type:value", sum, where), "write checksum = \"sha256:<hex>\""}
	case !known:
		return "", "", &checksumError{fmt.Sprintf("unsupported checksum type %q in %s", typ, where), "use md5, sha1, sha256 or sha512"}
	case len(val) != want || !isHex(val):
		return "", "", &checksumError{fmt.Sprintf("invalid %s checksum in %s: want %d hex digits, got %q", typ, where, want, val), ""}
	}
	return typ, strings.ToLower(val), nil
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
