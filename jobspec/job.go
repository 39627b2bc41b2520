package jobspec

import (
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Nomad's defaults, by job type.
func defaultRestart(jobType string) RestartPolicy {
	if jobType == TypeBatch {
		return RestartPolicy{Attempts: 3, Interval: 24 * time.Hour, Delay: 15 * time.Second, Mode: RestartFail}
	}
	return RestartPolicy{Attempts: 2, Interval: 30 * time.Minute, Delay: 15 * time.Second, Mode: RestartFail}
}

func defaultReschedule(jobType string) ReschedulePolicy {
	if jobType == TypeBatch {
		return ReschedulePolicy{Attempts: 1, Interval: 24 * time.Hour, Delay: 5 * time.Second, DelayFunction: "constant"}
	}
	return ReschedulePolicy{Delay: 30 * time.Second, DelayFunction: "exponential", MaxDelay: time.Hour, Unlimited: true}
}

const (
	defaultKillTimeout = 5 * time.Second
	// Nomad refuses restart intervals shorter than this.
	minRestartInterval = 5 * time.Second
	maxInt32           = math.MaxInt32
)

var portLabelRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func (p *parser) file(body *hclsyntax.Body) *Job {
	n := len(p.diags)
	_, blocks := p.content(body, schema{
		what:   "the job file",
		blocks: []blockSpec{{name: "job", label: "job ID", single: true}},
	})
	jobs := blocks["job"]
	if len(jobs) == 0 {
		if len(p.diags) == n {
			p.fail(p.fileStart(), "no job block in the file", "a job file holds one job \"<id>\" { ... } block")
		}
		return nil
	}
	return p.job(jobs[0])
}

func (p *parser) job(blk *hclsyntax.Block) *Job {
	id := blk.Labels[0]
	where := fmt.Sprintf("job %q", id)
	j := &Job{
		ID:          id,
		Type:        TypeService,
		Namespace:   "default",
		Region:      "global",
		Datacenters: []string{"*"},
		Priority:    50,
		Pos:         p.pos(blk.TypeRange),
	}
	if strings.ContainsAny(id, " \t\r\n\x00") {
		p.fail(blk.LabelRanges[0], fmt.Sprintf("job ID %q contains whitespace or a NUL byte", id), "use letters, digits, '-', '_' and '.'")
	}
	attrs, blocks := p.content(blk.Body, schema{
		what:  where,
		attrs: []string{"type", "namespace", "datacenters", "region", "priority", "meta"},
		blocks: []blockSpec{
			{name: "periodic", single: true},
			{name: "constraint"},
			{name: "group", label: "group name"},
			{name: "meta", single: true},
		},
	})

	if a := attrs["type"]; a != nil {
		if t, ok := p.str(a, where); ok {
			switch t {
			case TypeBatch, TypeService:
				j.Type = t
			case "system", "sysbatch":
				p.fail(a.Expr.Range(), fmt.Sprintf("job type %q is not supported by berth", t),
					"system and sysbatch jobs run one allocation on every node of a cluster and berth is a single node: use type = \"batch\" (run to completion) or \"service\" (keep running)")
			default:
				p.fail(a.Expr.Range(), fmt.Sprintf("invalid job type %q", t), "use \"batch\" or \"service\"")
			}
		}
	}
	if a := attrs["namespace"]; a != nil {
		if s, ok := p.str(a, where); ok {
			if s == "" {
				p.fail(a.Expr.Range(), "namespace must not be empty", "omit it to use \"default\"")
			} else {
				j.Namespace = s
			}
		}
	}
	if s, ok := p.str(attrs["region"], where); ok && s != "" {
		j.Region = s
	}
	if a := attrs["datacenters"]; a != nil {
		if dcs, ok := p.strList(a, where); ok {
			if len(dcs) == 0 || slices.Contains(dcs, "") {
				p.fail(a.Expr.Range(), "datacenters must list at least one non-empty name", "omit it to mean any datacenter (\"*\")")
			} else {
				j.Datacenters = dcs
			}
		}
	}
	if v, ok := p.integer(attrs["priority"], where, 1, 100); ok {
		j.Priority = v
	}
	if m, _, ok := p.stringMap("meta", attrs, blocks, where); ok {
		j.Meta = m
	}
	for _, b := range blocks["constraint"] {
		if c, ok := p.constraint(b, where); ok {
			j.Constraints = append(j.Constraints, c)
		}
	}
	if bs := blocks["periodic"]; len(bs) > 0 {
		j.Periodic = p.periodic(bs[0], where)
		if j.Type != TypeBatch {
			p.fail(bs[0].TypeRange, fmt.Sprintf("periodic is only allowed in batch jobs; %s is a %s job", where, j.Type),
				"set type = \"batch\"")
		}
	}

	seen := map[string]*hclsyntax.Block{}
	for _, b := range blocks["group"] {
		name := b.Labels[0]
		if first, dup := seen[name]; dup {
			p.fail(b.LabelRanges[0], fmt.Sprintf("duplicate group %q in %s", name, where),
				fmt.Sprintf("group names must be unique; the first is at %s", p.pos(first.TypeRange)))
			continue
		}
		seen[name] = b
		j.Groups = append(j.Groups, p.group(b, j))
	}
	if !hasBlock(blk.Body, "group") {
		p.fail(blk.TypeRange, fmt.Sprintf("%s has no group", where), "add group \"<name>\" { task \"<name>\" { driver = \"...\" } }")
	}

	if dc := p.opts.Node["node.datacenter"]; dc != "" && !slices.Contains(j.Datacenters, "*") && !slices.Contains(j.Datacenters, dc) {
		p.warn(blk.TypeRange, fmt.Sprintf("datacenters %v do not include this node's datacenter %q", j.Datacenters, dc),
			"berth runs the job anyway; Nomad would not place it on this node")
	}
	return j
}

func (p *parser) group(blk *hclsyntax.Block, j *Job) *Group {
	name := blk.Labels[0]
	where := fmt.Sprintf("group %q", name)
	p.checkName(blk, "group")
	g := &Group{
		Name:       name,
		Count:      1,
		Restart:    defaultRestart(j.Type),
		Reschedule: defaultReschedule(j.Type),
		Network:    Network{Mode: NetworkHost, Pos: p.pos(blk.TypeRange), ModePos: p.pos(blk.TypeRange)},
		Pos:        p.pos(blk.TypeRange),
	}
	attrs, blocks := p.content(blk.Body, schema{
		what:  where,
		attrs: []string{"count", "meta"},
		blocks: []blockSpec{
			{name: "restart", single: true},
			{name: "reschedule", single: true},
			{name: "network", single: true},
			{name: "constraint"},
			{name: "meta", single: true},
			{name: "task", label: "task name"},
		},
	})
	if v, ok := p.integer(attrs["count"], where, 0, maxInt32); ok {
		g.Count = v
	}
	if m, _, ok := p.stringMap("meta", attrs, blocks, where); ok {
		g.Meta = m
	}
	if bs := blocks["restart"]; len(bs) > 0 {
		g.Restart = p.restart(bs[0], g.Restart, where)
	}
	if bs := blocks["reschedule"]; len(bs) > 0 {
		g.Reschedule = p.reschedule(bs[0], g.Reschedule, where)
	}
	if bs := blocks["network"]; len(bs) > 0 {
		g.Network = p.network(bs[0], where)
	}
	for _, b := range blocks["constraint"] {
		if c, ok := p.constraint(b, where); ok {
			g.Constraints = append(g.Constraints, c)
		}
	}
	seen := map[string]*hclsyntax.Block{}
	var leader *hclsyntax.Block
	for _, b := range blocks["task"] {
		tname := b.Labels[0]
		if first, dup := seen[tname]; dup {
			p.fail(b.LabelRanges[0], fmt.Sprintf("duplicate task %q in %s", tname, where),
				fmt.Sprintf("task names must be unique in a group; the first is at %s", p.pos(first.TypeRange)))
			continue
		}
		seen[tname] = b
		t := p.task(b, g, where)
		if t.Leader {
			if leader != nil {
				p.fail(b.TypeRange, fmt.Sprintf("task %q and task %q in %s are both leader", leader.Labels[0], tname, where),
					"at most one task of a group may set leader = true")
			}
			leader = b
		}
		g.Tasks = append(g.Tasks, t)
	}
	if !hasBlock(blk.Body, "task") {
		p.fail(blk.TypeRange, fmt.Sprintf("%s has no task", where), "add task \"<name>\" { driver = \"...\" config { ... } }")
	}
	return g
}

// checkName rejects names that cannot become a path component; the runner
// uses group and task names in directory and unit names.
func (p *parser) checkName(blk *hclsyntax.Block, kind string) {
	name := blk.Labels[0]
	if strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		p.fail(blk.LabelRanges[0], fmt.Sprintf("%s name %q is not allowed", kind, name),
			"names must not contain '/' or NUL and must not be \".\" or \"..\"")
	}
}

func hasBlock(b *hclsyntax.Body, typ string) bool {
	for _, blk := range b.Blocks {
		if blk.Type == typ {
			return true
		}
	}
	return false
}

func (p *parser) restart(blk *hclsyntax.Block, base RestartPolicy, where string) RestartPolicy {
	w := "restart block in " + where
	n := len(p.diags)
	attrs, _ := p.content(blk.Body, schema{what: w, attrs: []string{"attempts", "interval", "delay", "mode"}})
	r := base
	if v, ok := p.integer(attrs["attempts"], w, 0, maxInt32); ok {
		r.Attempts = v
	}
	if d, ok := p.duration(attrs["interval"], w); ok {
		r.Interval = d
	}
	if d, ok := p.duration(attrs["delay"], w); ok {
		r.Delay = d
	}
	if a := attrs["mode"]; a != nil {
		if m, ok := p.str(a, w); ok {
			if m != RestartFail && m != RestartDelay {
				p.fail(a.Expr.Range(), fmt.Sprintf("invalid restart mode %q", m),
					"use \"fail\" (give up once attempts are used up in the interval) or \"delay\" (wait for the next interval and try again)")
			} else {
				r.Mode = m
			}
		}
	}
	if len(p.diags) > n {
		return r
	}
	// Nomad's own consistency rules, so a job valid here is valid there.
	switch {
	case r.Attempts == 0 && r.Mode != RestartFail:
		p.fail(blk.TypeRange, fmt.Sprintf("restart policy in %s with mode %q and 0 attempts is ambiguous", where, r.Mode),
			"set mode = \"fail\" or attempts > 0")
	case r.Interval < minRestartInterval:
		p.fail(blk.TypeRange, fmt.Sprintf("restart interval in %s must be at least %s, got %s", where, minRestartInterval, r.Interval), "")
	case r.Delay > 0 && int64(r.Attempts) > int64(r.Interval/r.Delay):
		p.fail(blk.TypeRange, fmt.Sprintf("restart policy in %s cannot fit %d attempts %s apart into an interval of %s", where, r.Attempts, r.Delay, r.Interval),
			"lower attempts or delay, or raise interval")
	}
	return r
}

func (p *parser) reschedule(blk *hclsyntax.Block, base ReschedulePolicy, where string) ReschedulePolicy {
	w := "reschedule block in " + where
	attrs, _ := p.content(blk.Body, schema{what: w, attrs: []string{"attempts", "interval", "delay", "delay_function", "max_delay", "unlimited"}})
	r := base
	r.Set = true
	if v, ok := p.integer(attrs["attempts"], w, 0, maxInt32); ok {
		r.Attempts = v
	}
	if d, ok := p.duration(attrs["interval"], w); ok {
		r.Interval = d
	}
	if d, ok := p.duration(attrs["delay"], w); ok {
		r.Delay = d
	}
	if d, ok := p.duration(attrs["max_delay"], w); ok {
		r.MaxDelay = d
	}
	if b, ok := p.boolean(attrs["unlimited"], w); ok {
		r.Unlimited = b
	}
	if a := attrs["delay_function"]; a != nil {
		if f, ok := p.str(a, w); ok {
			switch f {
			case "constant", "exponential", "fibonacci":
				r.DelayFunction = f
			default:
				p.fail(a.Expr.Range(), fmt.Sprintf("invalid delay_function %q", f), "use \"constant\", \"exponential\" or \"fibonacci\"")
			}
		}
	}
	p.warn(blk.TypeRange, fmt.Sprintf("reschedule in %s has no effect on berth", where),
		"rescheduling moves a failed allocation to another node and berth runs on one node; use restart to retry in place")
	return r
}

func (p *parser) network(blk *hclsyntax.Block, where string) Network {
	w := "network block in " + where
	n := Network{Mode: NetworkHost, Pos: p.pos(blk.TypeRange), ModePos: p.pos(blk.TypeRange)}
	attrs, blocks := p.content(blk.Body, schema{
		what:   w,
		attrs:  []string{"mode", "hostname"},
		blocks: []blockSpec{{name: "port", label: "port label"}, {name: "dns", single: true}, {name: "cni", single: true}},
	})
	if a := attrs["mode"]; a != nil {
		n.ModePos = p.pos(a.Expr.Range())
		if m, ok := p.str(a, w); ok {
			switch {
			case m == NetworkHost || m == NetworkNone || m == NetworkBridge:
				n.Mode = m
			case strings.HasPrefix(m, NetworkCNIPrefix):
				name := strings.TrimPrefix(m, NetworkCNIPrefix)
				if name == "" || strings.ContainsAny(name, "/ \t\r\n\x00") {
					p.fail(a.Expr.Range(), fmt.Sprintf("network mode %q does not name a CNI network", m),
						"write mode = \"cni/<network name>\", the name of a conflist in the CNI config directory")
					break
				}
				n.Mode, n.CNI = m, name
				if p.opts.Network != nil {
					if err := p.opts.Network(name); err != nil {
						p.fail(a.Expr.Range(), fmt.Sprintf("network mode %q: %v", m, err), "")
					}
				}
			default:
				p.fail(a.Expr.Range(), fmt.Sprintf("invalid network mode %q", m),
					"use \"host\", \"none\", \"bridge\" or \"cni/<network name>\"")
			}
		}
	}
	if s, ok := p.str(attrs["hostname"], w); ok {
		n.Hostname = s
	}

	labels := map[string]*hclsyntax.Block{}
	statics := map[int]string{}
	for _, b := range blocks["port"] {
		label := b.Labels[0]
		if first, dup := labels[label]; dup {
			p.fail(b.LabelRanges[0], fmt.Sprintf("duplicate port %q in %s", label, w),
				fmt.Sprintf("the first is at %s", p.pos(first.TypeRange)))
			continue
		}
		labels[label] = b
		if !portLabelRE.MatchString(label) {
			p.fail(b.LabelRanges[0], fmt.Sprintf("port label %q is not allowed", label),
				"use letters, digits, '_' and '-': the label becomes part of NOMAD_PORT_<label>")
			continue
		}
		port, ok := p.port(b, w)
		if !ok {
			continue
		}
		if port.Static != 0 {
			if other, dup := statics[port.Static]; dup {
				p.fail(b.TypeRange, fmt.Sprintf("static port %d is used by port %q and port %q", port.Static, other, label), "")
				continue
			}
			statics[port.Static] = label
		}
		n.Ports = append(n.Ports, port)
	}
	if n.Mode == NetworkNone && len(n.Ports) > 0 {
		p.fail(blk.TypeRange, fmt.Sprintf("%s has ports but mode \"none\"", w),
			"a group with mode \"none\" has no interface to publish ports on: remove the ports or pick another mode")
	}
	if bs := blocks["dns"]; len(bs) > 0 {
		n.DNS = p.dns(bs[0], w)
	}
	if bs := blocks["cni"]; len(bs) > 0 {
		cw := "cni block in " + w
		cattrs, _ := p.content(bs[0].Body, schema{what: cw, attrs: []string{"args"}})
		if m, ok := p.strMap(cattrs["args"], cw); ok {
			n.CNIArgs = m
		}
		if n.CNI == "" {
			p.fail(bs[0].TypeRange, fmt.Sprintf("cni block in %s needs a CNI network mode, got %q", where, n.Mode),
				"cni args are passed to CNI plugins: set mode = \"cni/<network name>\"")
		}
	}
	return n
}

func (p *parser) port(blk *hclsyntax.Block, where string) (Port, bool) {
	w := fmt.Sprintf("port %q in %s", blk.Labels[0], where)
	n := len(p.diags)
	attrs, _ := p.content(blk.Body, schema{what: w, attrs: []string{"static", "to", "host_network"}})
	port := Port{Label: blk.Labels[0], Pos: p.pos(blk.TypeRange)}
	if v, ok := p.integer(attrs["static"], w, 0, 65535); ok {
		port.Static = v
	}
	if v, ok := p.integer(attrs["to"], w, -1, 65535); ok {
		port.To = v
	}
	if s, ok := p.str(attrs["host_network"], w); ok {
		port.HostNetwork = s
	}
	return port, len(p.diags) == n
}

func (p *parser) dns(blk *hclsyntax.Block, where string) *DNS {
	w := "dns block in " + where
	attrs, _ := p.content(blk.Body, schema{what: w, attrs: []string{"servers", "searches", "options"}})
	d := &DNS{}
	if a := attrs["servers"]; a != nil {
		if servers, ok := p.strList(a, w); ok {
			for _, s := range servers {
				if _, err := netip.ParseAddr(s); err != nil {
					p.fail(a.Expr.Range(), fmt.Sprintf("dns server %q is not an IP address", s), "write servers = [\"1.1.1.1\", \"2606:4700:4700::1111\"]")
				}
			}
			d.Servers = servers
		}
	}
	if l, ok := p.strList(attrs["searches"], w); ok {
		d.Searches = l
	}
	if l, ok := p.strList(attrs["options"], w); ok {
		d.Options = l
	}
	return d
}

func (p *parser) task(blk *hclsyntax.Block, g *Group, groupWhere string) *Task {
	name := blk.Labels[0]
	where := fmt.Sprintf("task %q in %s", name, groupWhere)
	p.checkName(blk, "task")
	t := &Task{
		Name:        name,
		Config:      map[string]any{},
		KillTimeout: defaultKillTimeout,
		Resources:   Resources{CPU: 100, MemoryMB: 300},
		Restart:     g.Restart,
		Pos:         p.pos(blk.TypeRange),
		ConfigPos:   p.pos(blk.TypeRange),
		DriverPos:   p.pos(blk.TypeRange),
	}
	attrs, blocks := p.content(blk.Body, schema{
		what:  where,
		attrs: []string{"driver", "kill_timeout", "leader", "user", "env", "meta"},
		blocks: []blockSpec{
			{name: "config", single: true},
			{name: "env", single: true},
			{name: "meta", single: true},
			{name: "resources", single: true},
			{name: "restart", single: true},
			{name: "constraint"},
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
	cfgRange := blk.TypeRange
	if bs := blocks["config"]; len(bs) > 0 {
		cfgRange = bs[0].TypeRange
		t.ConfigPos = p.pos(cfgRange)
		t.Config, cfgOK = p.config(bs[0].Body, "config block of "+where)
	}
	if t.Driver != "" && p.opts.Drivers != nil {
		validate, known := p.opts.Drivers[t.Driver]
		switch {
		case !known:
			p.fail(da.Expr.Range(), fmt.Sprintf("unknown driver %q in %s", t.Driver, where), p.knownDrivers("known drivers: "))
		case validate != nil && cfgOK:
			if err := validate(t.Config); err != nil {
				p.fail(cfgRange, fmt.Sprintf("invalid config for driver %q in %s: %v", t.Driver, where, err), "")
			}
		}
	}

	if env, r, ok := p.stringMap("env", attrs, blocks, where); ok && env != nil {
		for k, v := range env {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(v, "\x00") {
				p.fail(r, fmt.Sprintf("invalid environment variable %q in %s", k, where),
					"names must be non-empty without '=' or NUL, values without NUL")
			}
		}
		t.Env = env
	}
	if m, _, ok := p.stringMap("meta", attrs, blocks, where); ok {
		t.Meta = m
	}
	if d, ok := p.duration(attrs["kill_timeout"], where); ok {
		t.KillTimeout = d
	}
	if b, ok := p.boolean(attrs["leader"], where); ok {
		t.Leader = b
	}
	if s, ok := p.str(attrs["user"], where); ok {
		t.User = s
	}
	if bs := blocks["resources"]; len(bs) > 0 {
		t.Resources = p.resources(bs[0], t.Resources, where)
	}
	if bs := blocks["restart"]; len(bs) > 0 {
		t.Restart = p.restart(bs[0], g.Restart, where)
	}
	for _, b := range blocks["constraint"] {
		if c, ok := p.constraint(b, where); ok {
			t.Constraints = append(t.Constraints, c)
		}
	}
	return t
}

func (p *parser) knownDrivers(prefix string) string {
	if p.opts.Drivers == nil {
		return ""
	}
	if len(p.opts.Drivers) == 0 {
		return prefix + "none (no driver is enabled)"
	}
	names := make([]string, 0, len(p.opts.Drivers))
	for n := range p.opts.Drivers {
		names = append(names, n)
	}
	sort.Strings(names)
	return prefix + strings.Join(names, ", ")
}

// config decodes a driver's config block without a schema: the driver's
// validator judges it. Nested blocks become lists of maps so that a block
// written once and a block written three times have the same shape.
func (p *parser) config(body *hclsyntax.Body, where string) (map[string]any, bool) {
	out := make(map[string]any, len(body.Attributes))
	ok := true
	for _, a := range sortedAttrs(body) {
		v, vOK := p.eval(a.Expr)
		if !vOK {
			ok = false
			continue
		}
		g, err := toGo(v)
		if err != nil {
			p.fail(a.Expr.Range(), fmt.Sprintf("%s in %s: %v", a.Name, where, err), "")
			ok = false
			continue
		}
		out[a.Name] = g
	}
	for _, b := range body.Blocks {
		if len(b.Labels) > 0 {
			p.fail(b.LabelRanges[0], fmt.Sprintf("labelled block %s %q in %s is not supported", b.Type, b.Labels[0], where),
				fmt.Sprintf("write %s { ... } and put the name inside", b.Type))
			ok = false
			continue
		}
		if _, isAttr := body.Attributes[b.Type]; isAttr {
			p.fail(b.TypeRange, fmt.Sprintf("%s in %s is set both as an attribute and as a block", b.Type, where), "keep one")
			ok = false
			continue
		}
		m, mOK := p.config(b.Body, fmt.Sprintf("%s block in %s", b.Type, where))
		if !mOK {
			ok = false
			continue
		}
		list, _ := out[b.Type].([]any)
		out[b.Type] = append(list, m)
	}
	return out, ok
}

func (p *parser) resources(blk *hclsyntax.Block, base Resources, where string) Resources {
	w := "resources block in " + where
	attrs, _ := p.content(blk.Body, schema{what: w, attrs: []string{"cpu", "cores", "memory", "memory_max"}})
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
		if v, ok := p.integer(a, w, 0, maxInt32); ok {
			if v != 0 && v < r.MemoryMB {
				p.fail(a.Expr.Range(), fmt.Sprintf("memory_max (%d MB) in %s is below memory (%d MB)", v, w, r.MemoryMB), "memory_max is the upper limit: make it >= memory")
			}
			r.MemoryMaxMB = v
		}
	}
	return r
}

// rangeOfElement is the source range of list element i when the list is
// written literally, so an error can point at the bad element.
func rangeOfElement(a *hclsyntax.Attribute, i int) hcl.Range {
	if tup, ok := a.Expr.(*hclsyntax.TupleConsExpr); ok && i < len(tup.Exprs) {
		return tup.Exprs[i].Range()
	}
	return a.Expr.Range()
}
