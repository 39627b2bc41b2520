package jobspec

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	tmpl "github.com/berth/berth/task/template"
)

// Service is a service block of a group or a task. With provider "nomad"
// (also when no provider is given) berth registers it in its native
// catalog and runs its http and tcp checks (package service).
type Service struct {
	Name              string   `json:"name"`
	Port              string   `json:"port,omitempty"`
	Tags              []string `json:"tags,omitempty"`
	CanaryTags        []string `json:"canary_tags,omitempty"`
	EnableTagOverride bool     `json:"enable_tag_override,omitempty"`
	AddressMode       string   `json:"address_mode"`
	Address           string   `json:"address,omitempty"`
	Task              string   `json:"task,omitempty"`
	Provider          string   `json:"provider"`
	// ProviderUnset: the block named no provider. Nomad then uses Consul;
	// berth registers it natively ("nomad") and says so once.
	ProviderUnset   bool              `json:"provider_unset,omitempty"`
	OnUpdate        string            `json:"on_update"`
	Meta            map[string]string `json:"meta,omitempty"`
	CanaryMeta      map[string]string `json:"canary_meta,omitempty"`
	TaggedAddresses map[string]string `json:"tagged_addresses,omitempty"`
	Checks          []*Check          `json:"checks,omitempty"`
	CheckRestart    *CheckRestart     `json:"check_restart,omitempty"`
	// Identity is newer Nomad's (1.7+) service identity, recorded only.
	Identity *Identity `json:"identity,omitempty"`
	// Connect is true when the service has a connect block (Consul
	// Connect), which berth cannot provide.
	Connect bool `json:"connect,omitempty"`
	Pos     Pos  `json:"pos"`
}

// Check is a service check.
type Check struct {
	Name                   string              `json:"name"`
	Type                   string              `json:"type"`
	Command                string              `json:"command,omitempty"`
	Args                   []string            `json:"args,omitempty"`
	Path                   string              `json:"path,omitempty"`
	Protocol               string              `json:"protocol,omitempty"`
	Port                   string              `json:"port,omitempty"`
	Expose                 bool                `json:"expose,omitempty"`
	Interval               time.Duration       `json:"interval"`
	Timeout                time.Duration       `json:"timeout"`
	AddressMode            string              `json:"address_mode,omitempty"`
	Method                 string              `json:"method,omitempty"`
	Header                 map[string][]string `json:"header,omitempty"`
	Body                   string              `json:"body,omitempty"`
	GRPCService            string              `json:"grpc_service,omitempty"`
	GRPCUseTLS             bool                `json:"grpc_use_tls,omitempty"`
	TLSSkipVerify          bool                `json:"tls_skip_verify,omitempty"`
	TLSServerName          string              `json:"tls_server_name,omitempty"`
	InitialStatus          string              `json:"initial_status,omitempty"`
	SuccessBeforePassing   int                 `json:"success_before_passing,omitempty"`
	FailuresBeforeCritical int                 `json:"failures_before_critical,omitempty"`
	OnUpdate               string              `json:"on_update,omitempty"`
	Task                   string              `json:"task,omitempty"`
	CheckRestart           *CheckRestart       `json:"check_restart,omitempty"`
	Pos                    Pos                 `json:"pos"`
}

// CheckRestart restarts a task whose check stays unhealthy.
type CheckRestart struct {
	Limit          int           `json:"limit"`
	Grace          time.Duration `json:"grace"`
	IgnoreWarnings bool          `json:"ignore_warnings,omitempty"`
}

// Template is a task's template block, rendered by package template
// before the task starts and again when the services it reads change.
type Template struct {
	Source            string        `json:"source,omitempty"`
	Destination       string        `json:"destination"`
	Data              string        `json:"data,omitempty"`
	ChangeMode        string        `json:"change_mode"`
	ChangeSignal      string        `json:"change_signal,omitempty"`
	ChangeScript      *ChangeScript `json:"change_script,omitempty"`
	Splay             time.Duration `json:"splay"`
	Perms             string        `json:"perms"`
	UID               *int          `json:"uid,omitempty"`
	GID               *int          `json:"gid,omitempty"`
	LeftDelimiter     string        `json:"left_delimiter"`
	RightDelimiter    string        `json:"right_delimiter"`
	Env               bool          `json:"env,omitempty"`
	ErrorOnMissingKey bool          `json:"error_on_missing_key,omitempty"`
	WaitMin           time.Duration `json:"wait_min,omitempty"`
	WaitMax           time.Duration `json:"wait_max,omitempty"`
	VaultGrace        time.Duration `json:"vault_grace,omitempty"`
	Pos               Pos           `json:"pos"`
}

// ChangeScript is what a template with change_mode "script" runs.
type ChangeScript struct {
	Command     string        `json:"command"`
	Args        []string      `json:"args,omitempty"`
	Timeout     time.Duration `json:"timeout"`
	FailOnError bool          `json:"fail_on_error,omitempty"`
}

var checkTypes = []string{"http", "tcp", "script", "grpc"}

func (p *parser) service(blk *hclsyntax.Block, where string, task string) *Service {
	w := "service block in " + where
	attrs, blocks := p.content(blk.Body, schema{
		what: w,
		attrs: []string{"name", "port", "tags", "canary_tags", "enable_tag_override", "address_mode", "address",
			"task", "provider", "on_update"},
		blocks: []blockSpec{
			{name: "check"}, {name: "check_restart", single: true}, {name: "connect", single: true},
			{name: "meta", single: true}, {name: "canary_meta", single: true}, {name: "tagged_addresses", single: true},
			{name: "identity", single: true},
		},
	})
	s := &Service{AddressMode: "auto", OnUpdate: "require_healthy", Task: task, Pos: p.pos(blk.TypeRange)}
	if v, ok := p.str(attrs["name"], w); ok {
		s.Name = v
	}
	if v, ok := p.str(attrs["port"], w); ok {
		s.Port = v
	}
	if v, ok := p.strList(attrs["tags"], w); ok {
		s.Tags = v
	}
	if v, ok := p.strList(attrs["canary_tags"], w); ok {
		s.CanaryTags = v
	}
	if v, ok := p.boolean(attrs["enable_tag_override"], w); ok {
		s.EnableTagOverride = v
	}
	if v, ok := p.str(attrs["address"], w); ok {
		s.Address = v
	}
	if v, ok := p.str(attrs["task"], w); ok {
		s.Task = v
	}
	p.oneOf(attrs["address_mode"], w, &s.AddressMode, "alloc", "auto", "driver", "host")
	p.oneOf(attrs["provider"], w, &s.Provider, "consul", "nomad")
	p.oneOf(attrs["on_update"], w, &s.OnUpdate, "require_healthy", "ignore_warnings", "ignore")
	for _, name := range []string{"meta", "canary_meta", "tagged_addresses"} {
		m, _, ok := p.stringMap(name, attrs, blocks, w)
		if !ok {
			continue
		}
		switch name {
		case "meta":
			s.Meta = m
		case "canary_meta":
			s.CanaryMeta = m
		default:
			s.TaggedAddresses = m
		}
	}
	if bs := blocks["check_restart"]; len(bs) > 0 {
		s.CheckRestart = p.checkRestart(bs[0], w)
	}
	if bs := blocks["connect"]; len(bs) > 0 {
		s.Connect = true
		p.evalAll(bs[0].Body)
		p.warn(bs[0].TypeRange, fmt.Sprintf("connect in %s needs Consul Connect, which berth does not have; accepted and ignored", w), "")
	}
	if bs := blocks["identity"]; len(bs) > 0 {
		// Newer Nomad's (1.7+): the service's identity for Consul.
		s.Identity = p.identity(bs[0], w)
	}
	for _, cb := range blocks["check"] {
		if c := p.serviceCheck(cb, w); c != nil {
			s.Checks = append(s.Checks, c)
		}
	}
	if s.Provider == "nomad" && s.Connect {
		p.fail(blk.TypeRange, fmt.Sprintf("%s uses provider \"nomad\" with connect", w), "Consul Connect needs provider \"consul\"")
	}
	p.serviceNotes(s, blk, w)
	return s
}

// nomadProvider is the provider as Nomad reads the block: Consul's when
// none is named.
func (s *Service) nomadProvider() string {
	if s.ProviderUnset {
		return "consul"
	}
	return s.Provider
}

// serviceNotes settles the provider and warns about what berth's native
// catalog does not do.
func (p *parser) serviceNotes(s *Service, blk *hclsyntax.Block, where string) {
	switch {
	case s.Provider == "":
		s.Provider, s.ProviderUnset = "nomad", true
		if !p.providerNoted && !s.Connect {
			p.providerNoted = true
			p.warn(blk.TypeRange, fmt.Sprintf("%s names no provider: berth registers it in its native catalog, as provider = \"nomad\" (Nomad's default is Consul)", where),
				"set provider = \"nomad\" to say so; this is said once per job")
		}
	case s.Provider == "consul" && !s.Connect:
		p.warn(blk.TypeRange, fmt.Sprintf("%s uses provider \"consul\": berth has no Consul, so the service is not registered anywhere and its checks do not run", where),
			"use provider = \"nomad\" for berth's native catalog")
	}
	if s.Provider != "nomad" || s.ProviderUnset && s.Connect {
		return
	}
	for _, c := range s.Checks {
		if c.Type == "script" || c.Type == "grpc" {
			p.warnAt(c.Pos, fmt.Sprintf("%s check in %s is not run: Nomad's native provider runs only http and tcp checks", c.Type, where),
				"use type = \"http\" or \"tcp\", or provider = \"consul\" on a Nomad cluster with Consul")
		}
	}
	if len(s.CanaryTags) > 0 || len(s.CanaryMeta) > 0 || len(s.TaggedAddresses) > 0 || s.EnableTagOverride {
		p.warnAt(s.Pos, fmt.Sprintf("canary_tags, canary_meta, tagged_addresses and enable_tag_override in %s do nothing without Consul and deployments; accepted and ignored", where), "")
	}
}

func (p *parser) checkRestart(blk *hclsyntax.Block, where string) *CheckRestart {
	w := "check_restart block in " + where
	attrs, _ := p.content(blk.Body, schema{what: w, attrs: []string{"limit", "grace", "ignore_warnings"}})
	cr := &CheckRestart{Grace: time.Second}
	if v, ok := p.integer(attrs["limit"], w, 0, maxInt32); ok {
		cr.Limit = v
	}
	if v, ok := p.duration(attrs["grace"], w); ok {
		cr.Grace = v
	}
	if v, ok := p.boolean(attrs["ignore_warnings"], w); ok {
		cr.IgnoreWarnings = v
	}
	return cr
}

func (p *parser) serviceCheck(blk *hclsyntax.Block, where string) *Check {
	w := "check block in " + where
	n := len(p.diags)
	attrs, blocks := p.content(blk.Body, schema{
		what: w,
		attrs: []string{"name", "type", "command", "args", "path", "protocol", "port", "expose", "interval", "timeout",
			"address_mode", "method", "body", "grpc_service", "grpc_use_tls", "tls_skip_verify", "tls_server_name",
			"initial_status", "success_before_passing", "failures_before_critical", "on_update", "task"},
		blocks: []blockSpec{{name: "header", single: true}, {name: "check_restart", single: true}},
	})
	c := &Check{Pos: p.pos(blk.TypeRange)}
	strs := map[string]*string{
		"name": &c.Name, "command": &c.Command, "path": &c.Path, "protocol": &c.Protocol, "port": &c.Port,
		"address_mode": &c.AddressMode, "method": &c.Method, "body": &c.Body, "grpc_service": &c.GRPCService,
		"tls_server_name": &c.TLSServerName, "task": &c.Task,
	}
	for name, dst := range strs {
		if v, ok := p.str(attrs[name], w); ok {
			*dst = v
		}
	}
	if v, ok := p.strList(attrs["args"], w); ok {
		c.Args = v
	}
	for name, dst := range map[string]*bool{"expose": &c.Expose, "grpc_use_tls": &c.GRPCUseTLS, "tls_skip_verify": &c.TLSSkipVerify} {
		if v, ok := p.boolean(attrs[name], w); ok {
			*dst = v
		}
	}
	if v, ok := p.duration(attrs["interval"], w); ok {
		c.Interval = v
	}
	if v, ok := p.duration(attrs["timeout"], w); ok {
		c.Timeout = v
	}
	if v, ok := p.integer(attrs["success_before_passing"], w, 0, maxInt32); ok {
		c.SuccessBeforePassing = v
	}
	if v, ok := p.integer(attrs["failures_before_critical"], w, 0, maxInt32); ok {
		c.FailuresBeforeCritical = v
	}
	p.oneOf(attrs["type"], w, &c.Type, checkTypes...)
	p.oneOf(attrs["initial_status"], w, &c.InitialStatus, "passing", "warning", "critical")
	p.oneOf(attrs["on_update"], w, &c.OnUpdate, "require_healthy", "ignore_warnings", "ignore")
	if bs := blocks["header"]; len(bs) > 0 {
		hw := "header block in " + w
		hattrs, _ := p.content(bs[0].Body, schema{what: hw, anyAttrs: true})
		c.Header = map[string][]string{}
		for _, a := range sortedAttrMap(hattrs) {
			if l, ok := p.strList(a, hw); ok {
				c.Header[a.Name] = l
			}
		}
	}
	if bs := blocks["check_restart"]; len(bs) > 0 {
		c.CheckRestart = p.checkRestart(bs[0], w)
	}
	if len(p.diags) > n {
		return c
	}
	// Nomad's own rules for a check.
	switch {
	case c.Type == "":
		p.fail(blk.TypeRange, fmt.Sprintf("%s has no type", w), "set type = \"http\", \"tcp\", \"script\" or \"grpc\"")
	case c.Interval < time.Second:
		p.fail(blk.TypeRange, fmt.Sprintf("%s: interval must be at least 1s", w), "set interval = \"10s\"")
	case c.Timeout < time.Second:
		p.fail(blk.TypeRange, fmt.Sprintf("%s: timeout must be at least 1s", w), "set timeout = \"2s\"")
	case c.Type == "http" && c.Path == "":
		p.fail(blk.TypeRange, fmt.Sprintf("http %s needs a path", w), "set path = \"/health\"")
	case c.Type == "script" && c.Command == "":
		p.fail(blk.TypeRange, fmt.Sprintf("script %s needs a command", w), "")
	}
	return c
}

// oneOf reads a string attribute that must be one of allowed.
func (p *parser) oneOf(a *hclsyntax.Attribute, where string, dst *string, allowed ...string) {
	s, ok := p.str(a, where)
	if !ok {
		return
	}
	for _, v := range allowed {
		if s == v {
			*dst = s
			return
		}
	}
	p.fail(a.Expr.Range(), fmt.Sprintf("invalid %s %q in %s", a.Name, s, where), "use one of: "+strings.Join(quoteAll(allowed), ", "))
}

func quoteAll(l []string) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = strconv.Quote(s)
	}
	return out
}

func (p *parser) template(blk *hclsyntax.Block, where string) *Template {
	w := "template block in " + where
	n := len(p.diags)
	attrs, blocks := p.content(blk.Body, schema{
		what: w,
		attrs: []string{"source", "destination", "data", "change_mode", "change_signal", "splay", "perms", "uid", "gid",
			"left_delimiter", "right_delimiter", "env", "error_on_missing_key", "vault_grace"},
		blocks: []blockSpec{{name: "change_script", single: true}, {name: "wait", single: true}},
	})
	t := &Template{ChangeMode: "restart", Splay: 5 * time.Second, Perms: "0644", LeftDelimiter: "{{", RightDelimiter: "}}", Pos: p.pos(blk.TypeRange)}
	for name, dst := range map[string]*string{"source": &t.Source, "destination": &t.Destination, "data": &t.Data,
		"change_signal": &t.ChangeSignal, "perms": &t.Perms, "left_delimiter": &t.LeftDelimiter, "right_delimiter": &t.RightDelimiter} {
		if v, ok := p.str(attrs[name], w); ok {
			*dst = v
		}
	}
	p.oneOf(attrs["change_mode"], w, &t.ChangeMode, "noop", "restart", "signal", "script")
	if v, ok := p.duration(attrs["splay"], w); ok {
		t.Splay = v
	}
	if v, ok := p.duration(attrs["vault_grace"], w); ok {
		t.VaultGrace = v
	}
	if v, ok := p.integer(attrs["uid"], w, -1, maxInt32); ok {
		t.UID = &v
	}
	if v, ok := p.integer(attrs["gid"], w, -1, maxInt32); ok {
		t.GID = &v
	}
	if v, ok := p.boolean(attrs["env"], w); ok {
		t.Env = v
	}
	if v, ok := p.boolean(attrs["error_on_missing_key"], w); ok {
		t.ErrorOnMissingKey = v
	}
	if bs := blocks["wait"]; len(bs) > 0 {
		ww := "wait block in " + w
		wa, _ := p.content(bs[0].Body, schema{what: ww, attrs: []string{"min", "max"}})
		if v, ok := p.duration(wa["min"], ww); ok {
			t.WaitMin = v
		}
		if v, ok := p.duration(wa["max"], ww); ok {
			t.WaitMax = v
		}
		if t.WaitMax != 0 && t.WaitMin > t.WaitMax {
			p.fail(bs[0].TypeRange, fmt.Sprintf("%s: min is greater than max", ww), "")
		}
	}
	if bs := blocks["change_script"]; len(bs) > 0 {
		cw := "change_script block in " + w
		ca, _ := p.content(bs[0].Body, schema{what: cw, attrs: []string{"command", "args", "timeout", "fail_on_error"}})
		cs := &ChangeScript{Timeout: 5 * time.Second}
		if v, ok := p.str(ca["command"], cw); ok {
			cs.Command = v
		}
		if v, ok := p.strList(ca["args"], cw); ok {
			cs.Args = v
		}
		if v, ok := p.duration(ca["timeout"], cw); ok {
			cs.Timeout = v
		}
		if v, ok := p.boolean(ca["fail_on_error"], cw); ok {
			cs.FailOnError = v
		}
		t.ChangeScript = cs
	}
	if len(p.diags) > n {
		return t
	}
	switch {
	case t.Source == "" && t.Data == "":
		p.fail(blk.TypeRange, fmt.Sprintf("%s has neither source nor data", w), "must specify a source path or have an embedded template (data)")
	case t.Destination == "":
		p.fail(blk.TypeRange, fmt.Sprintf("%s has no destination", w), "must specify a destination for the template, e.g. destination = \"local/app.conf\"")
	case escapesAllocDir("task", t.Destination):
		p.fail(attrs["destination"].Expr.Range(), fmt.Sprintf("template destination %q in %s escapes the allocation directory", t.Destination, where), "use a path inside the task directory, e.g. \"local/...\"")
	case t.ChangeMode == "script" && (t.ChangeScript == nil || t.ChangeScript.Command == ""):
		p.fail(blk.TypeRange, fmt.Sprintf("%s has change_mode \"script\" and no change_script command", w), "")
	}
	if _, err := strconv.ParseUint(t.Perms, 8, 12); err != nil && attrs["perms"] != nil {
		p.fail(attrs["perms"].Expr.Range(), fmt.Sprintf("perms %q in %s is not an octal mode", t.Perms, w), "write perms = \"0644\"")
	}
	if t.ChangeMode == "signal" {
		if _, ok := SignalNumber(t.ChangeSignal); !ok {
			p.fail(blk.TypeRange, fmt.Sprintf("%s has change_mode \"signal\" and change_signal %q, which is not a signal of this system", w, t.ChangeSignal),
				"set change_signal = \"SIGHUP\" (or another signal)")
		}
	}
	if t.Source != "" && t.Data != "" {
		p.fail(blk.TypeRange, fmt.Sprintf("%s has both source and data", w), "use one: an inline template (data) or a file (source)")
	}
	p.checkTemplate(t, attrs, w)
	if t.VaultGrace != 0 {
		p.warn(attrs["vault_grace"].Expr.Range(), fmt.Sprintf("vault_grace in %s does nothing: berth has no Vault", w), "")
	}
	return t
}

// checkTemplate reports, at their place in the job file, what keeps the
// template from rendering on berth (template.Check): a Consul, Vault or
// Nomad variables function, one that does not exist, a syntax error. An
// inline template is checked here; a source file when it is next to the
// job file (one fetched as an artifact is checked when it renders).
func (p *parser) checkTemplate(t *Template, attrs map[string]*hclsyntax.Attribute, where string) {
	var text string
	var at *hclsyntax.Attribute
	file := ""
	switch {
	case t.Data != "":
		text, at = t.Data, attrs["data"]
	case t.Source != "" && p.opts.AllowFS && p.jobDir != "" && !filepath.IsAbs(t.Source):
		b, err := os.ReadFile(filepath.Join(p.jobDir, t.Source))
		if err != nil {
			return
		}
		text, at, file = string(b), attrs["source"], t.Source
	default:
		return
	}
	for _, iss := range tmpl.Check(text, t.LeftDelimiter, t.RightDelimiter) {
		r := at.Expr.Range()
		summary := fmt.Sprintf("%s: %s", where, iss.Summary)
		if file != "" {
			summary = fmt.Sprintf("%s, in %s line %d: %s", where, file, iss.Line, iss.Summary)
		} else {
			r.Start = p.templatePos(r.Start, iss.Line, iss.Column)
		}
		fix := iss.Detail
		if fix == "" {
			fix = "fix the template: it is parsed when the task starts, where Nomad's client fails the task too"
		}
		p.nodeFact(r, summary, fix)
	}
}

// templatePos maps line and column of an inline template to the job file:
// a heredoc's text starts on the line after "<<EOT", a quoted string's
// just after its quote (its later lines are only approximate when the
// string spells newlines as \n).
func (p *parser) templatePos(start hcl.Pos, line, col int) hcl.Pos {
	heredoc := start.Byte < len(p.src) && strings.HasPrefix(string(p.src[start.Byte:min(start.Byte+2, len(p.src))]), "<<")
	switch {
	case heredoc:
		pos := hcl.Pos{Line: start.Line + line, Column: max(col, 1)}
		return pos
	case line <= 1:
		return hcl.Pos{Line: start.Line, Column: start.Column + max(col, 1)}
	}
	return start
}
