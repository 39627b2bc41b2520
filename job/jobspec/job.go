package jobspec

import (
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Nomad's defaults, by job type.
func defaultRestart(jobType string) RestartPolicy {
	if jobType == TypeBatch || jobType == TypeSysbatch {
		return RestartPolicy{Attempts: 3, Interval: 24 * time.Hour, Delay: 15 * time.Second, Mode: RestartFail}
	}
	return RestartPolicy{Attempts: 2, Interval: 30 * time.Minute, Delay: 15 * time.Second, Mode: RestartFail}
}

// defaultReschedule is Nomad 1.6.5's reschedule policy of a job type
// (structs.DefaultBatchJobReschedulePolicy, DefaultServiceJobReschedulePolicy).
func defaultReschedule(jobType string) ReschedulePolicy {
	r := ReschedulePolicy{Delay: 30 * time.Second, DelayFunction: "exponential", MaxDelay: time.Hour, Unlimited: true}
	if jobType == TypeBatch {
		r = ReschedulePolicy{Attempts: 1, Interval: 24 * time.Hour, Delay: 5 * time.Second, DelayFunction: "constant"}
	}
	r.Applies = r.applies(jobType)
	return r
}

// applies reports whether the runner reschedules with r in a job of
// jobType: as Nomad, in batch and service jobs (never system nor
// sysbatch), when it allows attempts or is unlimited.
func (r ReschedulePolicy) applies(jobType string) bool {
	return (jobType == TypeBatch || jobType == TypeService) && (r.Unlimited || r.Attempts > 0)
}

const (
	defaultKillTimeout = 5 * time.Second
	// Nomad refuses restart intervals shorter than this.
	minRestartInterval = 5 * time.Second
	maxInt32           = math.MaxInt32
)

var portLabelRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_-]+$`) })

func (p *parser) file(body *hclsyntax.Body) *Job {
	n := len(p.diags)
	_, blocks := p.content(body, schema{
		what:     "the job file",
		topLevel: true,
		blocks: []blockSpec{
			{name: "job", label: "job ID", single: true},
			{name: "variable", label: "variable name"},
			{name: "variables"},
			{name: "locals"},
		},
	})
	p.variables(blocks)
	p.locals(blocks["locals"])
	jobs := blocks["job"]
	if len(jobs) == 0 {
		if len(p.diags) == n {
			p.fail(p.fileStart(), "no job block in the file", "a job file holds one job \"<id>\" { ... } block")
		}
		return nil
	}
	return p.job(jobs[0])
}

// jobKeys is what a job body may hold: one row per key; see row for how the
// table is read and how to add a key.
var jobKeys = []row{
	{name: "id", form: attrForm, verdict: runs, always: true, handle: jobID},
	{name: "name", form: attrForm, verdict: runs, handle: func(p *parser, s *scope, f field) {
		if x, ok := p.str(f.attr, s.where); ok && x != "" {
			s.job.Name = x
		}
	}},
	{name: "type", form: attrForm, verdict: runs, handle: jobType},
	{name: "namespace", form: attrForm, verdict: runs, handle: jobNamespace},
	{name: "region", form: attrForm, verdict: runs, handle: func(p *parser, s *scope, f field) {
		if x, ok := p.str(f.attr, s.where); ok && x != "" {
			p.checkIdent(f.attr.Expr.Range(), "region", x)
			s.job.Region = x
		}
	}},
	{name: "datacenters", form: attrForm, verdict: placement, handle: jobDatacenters},
	intKey("priority", 1, 100, parsed, func(s *scope) *int { return &s.job.Priority }),
	metaRow,
	{name: "node_pool", form: attrForm, verdict: placement, handle: func(p *parser, s *scope, f field) {
		if x, ok := p.str(f.attr, s.where); ok && x != "" {
			s.job.NodePool = x
		}
		p.warn(f.attr.NameRange, fmt.Sprintf("node_pool in %s does not apply on one node", s.where),
			"berth's node is in node pool \"default\"; a job in another pool (not \"all\") is refused by run")
	}},
	{name: "all_at_once", form: attrForm, verdict: ignored, handle: func(p *parser, s *scope, f field) {
		p.boolean(f.attr, s.where)
		p.warn(f.attr.NameRange, fmt.Sprintf("all_at_once in %s does not apply on one node; accepted and ignored", s.where),
			"it asks the scheduler to place all allocations at once across the cluster")
	}},
	{name: "consul_token", form: attrForm, verdict: ignored, handle: jobToken},
	{name: "vault_token", form: attrForm, verdict: ignored, handle: jobToken},
	constraintRow,
	affinityRow,
	spreadRow,
	updateRow,
	migrateRow,
	{name: "multiregion", form: blockForm, single: true, verdict: ignored,
		handle: ignoredBlock(multiregionShape, "multiregion deploys a job to several regions of a federation")},
	vaultRow,
	// The job's reschedule block is its groups' default (newGroup).
	{name: "reschedule", form: blockForm, single: true, verdict: runs, handle: func(p *parser, _ *scope, f field) {
		p.jobResched = f.blocks[0]
	}},
	{name: "periodic", form: blockForm, single: true, verdict: runs, handle: func(p *parser, s *scope, f field) {
		j := s.job
		j.Periodic = p.periodic(f.blocks[0], s.where)
		if !j.RunsToCompletion() && j.Periodic.Enabled {
			p.fail(f.blocks[0].TypeRange, fmt.Sprintf("periodic can only be used with \"batch\" or \"sysbatch\" jobs; %s is a %s job", s.where, j.Type),
				"set type = \"batch\"")
		}
	}},
	{name: "parameterized", form: blockForm, single: true, verdict: runs, handle: func(p *parser, s *scope, f field) {
		j := s.job
		j.Parameterized = p.parameterized(f.blocks[0], s.where)
		if !j.RunsToCompletion() {
			p.fail(f.blocks[0].TypeRange, fmt.Sprintf("parameterized can only be used with \"batch\" or \"sysbatch\" jobs; %s is a %s job", s.where, j.Type),
				"set type = \"batch\"")
		}
	}},
	// Read by jobGroups, in source order: a task written directly in
	// the job (Nomad's older form) is a group of its name.
	{name: "group", form: blockForm, label: "group name", verdict: runs},
	{name: "task", form: blockForm, label: "task name", verdict: runs},
}

func (p *parser) job(blk *hclsyntax.Block) *Job {
	j := &Job{
		ID:          blk.Labels[0],
		Type:        TypeService,
		Namespace:   "default",
		Region:      "global",
		Datacenters: []string{"*"},
		Priority:    50,
		NodePool:    "default",
		Pos:         p.pos(blk.TypeRange),
	}
	s := &scope{where: fmt.Sprintf("job %q", j.ID), blk: blk, job: j, idRange: blk.LabelRanges[0]}
	p.walk(jobKeys, s)
	p.jobVault, p.jobCanary = s.vault, s.canary
	p.jobGroups(blk, j, s.where)
	p.jobVault, p.jobResched, p.jobCanary = nil, nil, nil
	p.placementWarnings(j)
	return j
}

// jobID reads the id attribute, which replaces the block's label, and
// checks the ID either names.
func jobID(p *parser, s *scope, f field) {
	j := s.job
	if a := f.attr; a != nil {
		if x, ok := p.str(a, s.where); ok {
			j.ID, s.idRange = x, a.Expr.Range()
			s.where = fmt.Sprintf("job %q", x)
		}
	}
	switch {
	case j.ID == "":
		p.fail(s.idRange, "job ID is empty", "name the job: job \"<id>\" { ... }")
	case strings.ContainsAny(j.ID, " \t\r\n\x00"):
		p.fail(s.idRange, fmt.Sprintf("job ID %q contains whitespace or a NUL byte", j.ID), "use letters, digits, '-', '_' and '.'")
	default:
		p.checkIdent(s.idRange, "job ID", j.ID)
	}
	j.Name = j.ID
}

func jobType(p *parser, s *scope, f field) {
	if t, ok := p.str(f.attr, s.where); ok {
		switch t {
		case TypeBatch, TypeService, TypeSystem, TypeSysbatch:
			s.job.Type = t
		default:
			p.fail(f.attr.Expr.Range(), fmt.Sprintf("invalid job type %q", t), "use \"service\", \"batch\", \"system\" or \"sysbatch\"")
		}
	}
}

func jobNamespace(p *parser, s *scope, f field) {
	a := f.attr
	if x, ok := p.str(a, s.where); ok {
		if x == "" {
			p.fail(a.Expr.Range(), "namespace must not be empty", "omit it to use \"default\"")
		} else {
			p.checkNamespace(a.Expr.Range(), x)
			s.job.Namespace = x
		}
	}
}

func jobDatacenters(p *parser, s *scope, f field) {
	if dcs, ok := p.strList(f.attr, s.where); ok {
		switch {
		case slices.Contains(dcs, ""):
			p.fail(f.attr.Expr.Range(), "datacenters must not contain an empty name", "omit it to mean any datacenter (\"*\")")
		case len(dcs) > 0:
			s.job.Datacenters = dcs
		}
	}
}

func jobToken(p *parser, s *scope, f field) {
	p.str(f.attr, s.where)
	p.warn(f.attr.NameRange, fmt.Sprintf("%s in %s is accepted and ignored", f.attr.Name, s.where), "berth has neither Consul nor Vault")
}

// jobGroups reads the job's groups and, in the older form Nomad still
// reads, tasks written directly in the job: each becomes a group of its
// own name.
func (p *parser) jobGroups(blk *hclsyntax.Block, j *Job, where string) {
	type entry struct {
		blk  *hclsyntax.Block
		task bool
	}
	var entries []entry
	for _, b := range blk.Body.Blocks {
		if (b.Type == "group" || b.Type == "task") && len(b.Labels) == 1 {
			entries = append(entries, entry{b, b.Type == "task"})
		}
	}
	seen := map[string]*hclsyntax.Block{}
	for _, e := range entries {
		name := e.blk.Labels[0]
		if first, dup := seen[name]; dup {
			p.fail(e.blk.LabelRanges[0], fmt.Sprintf("duplicate group %q in %s", name, where),
				fmt.Sprintf("group names must be unique (a task written directly in the job is a group of its name); the first is at %s", p.pos(first.TypeRange)))
			continue
		}
		seen[name] = e.blk
		if e.task {
			j.Groups = append(j.Groups, p.taskGroup(e.blk, j))
		} else {
			j.Groups = append(j.Groups, p.group(e.blk, j))
		}
	}
	if len(entries) == 0 {
		p.fail(blk.TypeRange, fmt.Sprintf("%s has no group", where), "add group \"<name>\" { task \"<name>\" { driver = \"...\" } }")
	}
}

// placementWarnings tells validate what run would refuse on this node.
func (p *parser) placementWarnings(j *Job) {
	if r := p.opts.Resources; r != nil {
		for _, m := range j.Missing(*r) {
			if m.Kind == PlaceCSIVolume {
				continue // the volume's own warning says it
			}
			p.warns = append(p.warns, Diagnostic{File: m.Pos.File, Line: m.Pos.Line, Column: m.Pos.Column,
				Summary: fmt.Sprintf("%s in %s is not offered by this node", m.What, m.Where),
				Detail:  m.Node + "; the file is valid, but run refuses the job on this node"})
		}
	}
	if p.opts.Node == nil {
		return
	}
	for _, u := range j.Unmet(p.opts.Node) {
		consequence := "; the file is valid, but run refuses the job on this node"
		if u.Kind == PlaceDatacenters {
			consequence = "; berth runs the job anyway (its node's datacenter is not configurable yet); Nomad would not place it here"
		}
		p.warns = append(p.warns, Diagnostic{File: u.Pos.File, Line: u.Pos.Line, Column: u.Pos.Column,
			Summary: fmt.Sprintf("%s in %s is not met by this node", u.What, u.Where),
			Detail:  u.Node + consequence})
	}
}

func (p *parser) checkUpdateAllowed(b *hclsyntax.Block, j *Job) {
	if j.RunsToCompletion() {
		p.fail(b.TypeRange, fmt.Sprintf("job type %q does not allow an update block", j.Type), "remove it: batch jobs are not deployed")
	}
}

func (p *parser) checkMigrateAllowed(b *hclsyntax.Block, j *Job) {
	if j.Type != TypeService {
		p.fail(b.TypeRange, fmt.Sprintf("job type %q does not allow a migrate block", j.Type), "migrate is for service jobs")
	}
}

func (p *parser) parameterized(blk *hclsyntax.Block, where string) *Parameterized {
	w := "parameterized block in " + where
	attrs, _ := p.content(blk.Body, schema{what: w, attrs: []string{"payload", "meta_required", "meta_optional"}})
	pj := &Parameterized{Payload: PayloadOptional, Pos: p.pos(blk.TypeRange)}
	p.oneOf(attrs["payload"], w, &pj.Payload, PayloadOptional, PayloadRequired, PayloadForbidden)
	if l, ok := p.strList(attrs["meta_required"], w); ok {
		pj.MetaRequired = l
	}
	if l, ok := p.strList(attrs["meta_optional"], w); ok {
		pj.MetaOptional = l
	}
	var both []string
	for _, k := range pj.MetaRequired {
		if slices.Contains(pj.MetaOptional, k) {
			both = append(both, k)
		}
	}
	if len(both) > 0 {
		p.fail(attrs["meta_optional"].Expr.Range(), fmt.Sprintf("meta_required and meta_optional in %s share keys: %s", w, strings.Join(both, ", ")),
			"a key is either required or optional")
	}
	return pj
}

// taskGroup is a task written directly in the job: a group of count 1
// named after it, holding it.
func (p *parser) taskGroup(blk *hclsyntax.Block, j *Job) *Group {
	g := p.newGroup(blk, j)
	g.Tasks = []*Task{p.task(blk, g, j, fmt.Sprintf("group %q", g.Name))}
	p.finishGroup(g, blk, j, fmt.Sprintf("group %q", g.Name))
	return g
}

// checkName applies the name rule (nameProblem) to a group's or task's
// label: the runner puts them in file names, CNI_ARGS and the task's
// environment.
func (p *parser) checkName(blk *hclsyntax.Block, kind string) {
	p.checkIdent(blk.LabelRanges[0], kind+" name", blk.Labels[0])
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
	return r
}

func (p *parser) network(blk *hclsyntax.Block, where string) Network {
	w := "network block in " + where
	n := Network{Mode: NetworkHost, Pos: p.pos(blk.TypeRange), ModePos: p.pos(blk.TypeRange)}
	attrs, blocks := p.content(blk.Body, schema{
		what:   w,
		attrs:  []string{"mode", "hostname", "mbits"},
		blocks: []blockSpec{{name: "port", label: "port label"}, {name: "dns", single: true}, {name: "cni", single: true}},
	})
	if a := attrs["mbits"]; a != nil {
		p.integer(a, w, 0, maxInt32)
		p.warn(a.NameRange, fmt.Sprintf("mbits in %s is deprecated in Nomad and ignored", w), "")
	}
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
						p.nodeFact(a.Expr.Range(), fmt.Sprintf("network mode %q: %v", m, err),
							fmt.Sprintf("add a CNI network configuration named %q (a .conflist whose \"name\" is %q) to this node's CNI config directory (cni_config_dir), or use mode = \"bridge\"", name, name))
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
		if !portLabelRE().MatchString(label) {
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
			p.checkCNIArgs(cattrs["args"].Expr.Range(), m, cw)
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
	p.expandDynamic(body)
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

// rangeOfElement is the source range of list element i when the list is
// written literally, so an error can point at the bad element.
func rangeOfElement(a *hclsyntax.Attribute, i int) hcl.Range {
	if tup, ok := unwrapIter(a.Expr).(*hclsyntax.TupleConsExpr); ok && i < len(tup.Exprs) {
		return tup.Exprs[i].Range()
	}
	return a.Expr.Range()
}
