package jobspec

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2/hclsyntax"
)

const defaultDiskMB = 300

func (p *parser) newGroup(blk *hclsyntax.Block, j *Job) *Group {
	g := &Group{
		Name:          blk.Labels[0],
		Count:         1,
		Restart:       defaultRestart(j.Type),
		Reschedule:    defaultReschedule(j.Type),
		Network:       Network{Mode: NetworkHost, Pos: p.pos(blk.TypeRange), ModePos: p.pos(blk.TypeRange)},
		EphemeralDisk: EphemeralDisk{SizeMB: defaultDiskMB},
		Pos:           p.pos(blk.TypeRange),
	}
	p.checkName(blk, "group")
	if r := p.jobResched; r != nil {
		g.Reschedule = p.groupReschedule(r, g.Reschedule, j, fmt.Sprintf("job %q", j.ID))
	}
	return g
}

func (p *parser) groupReschedule(b *hclsyntax.Block, base ReschedulePolicy, j *Job, where string) ReschedulePolicy {
	if j.Type == TypeSystem || j.Type == TypeSysbatch {
		p.fail(b.TypeRange, fmt.Sprintf("%s jobs should not have a reschedule policy", j.Type), "remove the reschedule block")
		return base
	}
	return p.reschedule(b, base, where)
}

func (p *parser) group(blk *hclsyntax.Block, j *Job) *Group {
	g := p.newGroup(blk, j)
	where := fmt.Sprintf("group %q", g.Name)
	attrs, blocks := p.content(blk.Body, schema{
		what:  where,
		attrs: []string{"count", "meta", "shutdown_delay", "stop_after_client_disconnect", "max_client_disconnect"},
		blocks: []blockSpec{
			{name: "restart", single: true},
			{name: "reschedule", single: true},
			{name: "network", single: true},
			{name: "constraint"},
			{name: "affinity"},
			{name: "spread"},
			{name: "meta", single: true},
			{name: "task", label: "task name"},
			{name: "volume", label: "volume name"},
			{name: "ephemeral_disk", single: true},
			{name: "update", single: true},
			{name: "migrate", single: true},
			{name: "service"},
			{name: "scaling", single: true},
			{name: "consul", single: true},
			{name: "vault", single: true},
			{name: "disconnect", single: true},
		},
	})
	if a := attrs["count"]; a != nil {
		if v, ok := p.integer(a, where, 0, maxInt32); ok {
			g.Count = v
			switch {
			case j.Type == TypeSystem && v > 1:
				p.fail(a.Expr.Range(), fmt.Sprintf("%s has count %d; count cannot exceed 1 in a system job", where, v), "a system job runs one allocation per node")
			case j.Type == TypeSysbatch && v > 1:
				p.warn(a.Expr.Range(), fmt.Sprintf("count %d in %s is ignored: a sysbatch job runs one allocation per node", v, where), "")
			}
		}
	}
	if j.Type == TypeSystem || j.Type == TypeSysbatch {
		if g.Count > 1 {
			g.Count = 1
		}
	}
	if m, r, ok := p.stringMap("meta", attrs, blocks, where); ok {
		p.checkMetaKeys(r, m, where)
		g.Meta = m
	}
	if d, ok := p.duration(attrs["shutdown_delay"], where); ok {
		g.ShutdownDelay = d
	}
	stop, maxDisc := attrs["stop_after_client_disconnect"], attrs["max_client_disconnect"]
	for _, a := range []*hclsyntax.Attribute{stop, maxDisc} {
		if a != nil {
			p.duration(a, where)
			p.warn(a.NameRange, fmt.Sprintf("%s in %s does not apply on one node; accepted and ignored", a.Name, where),
				"it is about a client losing contact with the servers; berth is both")
		}
	}
	if stop != nil && maxDisc != nil {
		p.fail(maxDisc.NameRange, fmt.Sprintf("%s sets both max_client_disconnect and stop_after_client_disconnect", where), "keep one")
	}
	if bs := blocks["restart"]; len(bs) > 0 {
		g.Restart = p.restart(bs[0], g.Restart, where)
	}
	if bs := blocks["reschedule"]; len(bs) > 0 {
		g.Reschedule = p.groupReschedule(bs[0], g.Reschedule, j, where)
	}
	if bs := blocks["network"]; len(bs) > 0 {
		g.Network = p.network(bs[0], where)
	}
	for _, b := range blocks["constraint"] {
		if c, ok := p.constraint(b, where, false); ok {
			g.Constraints = append(g.Constraints, c)
		}
	}
	for _, b := range blocks["affinity"] {
		if j.Type == TypeSystem {
			p.fail(b.TypeRange, fmt.Sprintf("system job %q may not have an affinity block", j.ID), "")
		}
		p.affinity(b, where)
	}
	for _, b := range blocks["spread"] {
		if j.Type == TypeSystem {
			p.fail(b.TypeRange, fmt.Sprintf("system job %q may not have a spread block", j.ID), "")
		}
		p.spread(b, where)
	}
	if bs := blocks["update"]; len(bs) > 0 {
		p.checkUpdateAllowed(bs[0], j)
		p.update(bs[0], where)
	}
	if bs := blocks["migrate"]; len(bs) > 0 {
		p.checkMigrateAllowed(bs[0], j)
		p.migrate(bs[0], where)
	}
	if bs := blocks["scaling"]; len(bs) > 0 {
		p.scaling(bs[0], where)
	}
	if bs := blocks["consul"]; len(bs) > 0 {
		p.check(bs[0], consulShape, "consul block in "+where)
		p.warn(bs[0].TypeRange, fmt.Sprintf("consul in %s is accepted and ignored", where), "berth has no Consul")
	}
	if bs := blocks["disconnect"]; len(bs) > 0 {
		p.check(bs[0], disconnectShape, "disconnect block in "+where)
		p.warn(bs[0].TypeRange, fmt.Sprintf("disconnect in %s does not apply on one node; accepted and ignored", where),
			"disconnect is Nomad 1.8's; Nomad 1.6.5 refuses the block")
	}
	var groupVault *Vault
	if bs := blocks["vault"]; len(bs) > 0 {
		groupVault = p.vault(bs[0], where)
	}
	if bs := blocks["ephemeral_disk"]; len(bs) > 0 {
		g.EphemeralDisk = p.ephemeralDisk(bs[0], where)
	}
	for _, b := range blocks["volume"] {
		if g.Volumes == nil {
			g.Volumes = map[string]*Volume{}
		}
		if first, dup := g.Volumes[b.Labels[0]]; dup {
			p.fail(b.LabelRanges[0], fmt.Sprintf("duplicate volume %q in %s", b.Labels[0], where), fmt.Sprintf("the first is at %s", first.Pos))
			continue
		}
		g.Volumes[b.Labels[0]] = p.volume(b, where)
	}
	for _, b := range blocks["service"] {
		g.Services = append(g.Services, p.service(b, where, ""))
	}

	seen := map[string]*hclsyntax.Block{}
	for _, b := range blocks["task"] {
		tname := b.Labels[0]
		if first, dup := seen[tname]; dup {
			p.fail(b.LabelRanges[0], fmt.Sprintf("duplicate task %q in %s", tname, where),
				fmt.Sprintf("task names must be unique in a group; the first is at %s", p.pos(first.TypeRange)))
			continue
		}
		seen[tname] = b
		t := p.task(b, g, j, where)
		if t.Vault == nil && groupVault != nil {
			t.Vault = groupVault
		}
		g.Tasks = append(g.Tasks, t)
	}
	if !hasBlock(blk.Body, "task") && !hasBlock(blk.Body, "dynamic") {
		p.fail(blk.TypeRange, fmt.Sprintf("%s has no task", where), "add task \"<name>\" { driver = \"...\" config { ... } }")
	}
	p.finishGroup(g, blk, j, where)
	return g
}

// finishGroup checks what spans the group's tasks.
func (p *parser) finishGroup(g *Group, blk *hclsyntax.Block, j *Job, where string) {
	var leader *Task
	for _, t := range g.Tasks {
		if t.Vault == nil && p.jobVault != nil {
			t.Vault = p.jobVault
		}
		if t.Leader {
			if leader != nil {
				p.fail(blk.TypeRange, fmt.Sprintf("task %q and task %q in %s are both leader", leader.Name, t.Name, where),
					"only one task may be marked as leader")
			}
			leader = t
		}
		for _, vm := range t.VolumeMounts {
			if g.Volumes[vm.Volume] == nil {
				p.failAt(vm.Pos, fmt.Sprintf("volume_mount in task %q references undefined volume %q", t.Name, vm.Volume),
					fmt.Sprintf("declare volume %q { type = \"host\" source = \"...\" } in %s", vm.Volume, where))
			}
		}
		if !t.Logs.Disabled {
			if use := t.Logs.MaxFiles * t.Logs.MaxFileSizeMB; use >= g.EphemeralDisk.SizeMB {
				p.failAt(t.Pos, fmt.Sprintf("log storage of task %q (%d MB) must be less than the ephemeral disk of %s (%d MB)", t.Name, use, where, g.EphemeralDisk.SizeMB),
					"lower logs max_files or max_file_size, or raise ephemeral_disk size")
			}
		}
		for _, s := range t.Services {
			p.checkServicePort(s, g, where)
		}
	}
	// Compared as Nomad sees them: a service without provider is Consul's.
	var provider *Service
	for _, s := range g.AllServices() {
		if provider == nil {
			provider = s
		} else if s.nomadProvider() != provider.nomadProvider() {
			p.failAt(s.Pos, fmt.Sprintf("service %q in %s uses provider %q and service %q uses %q", s.Name, where, s.nomadProvider(), provider.Name, provider.nomadProvider()),
				"all services of a group must use the same provider")
		}
	}
	for _, s := range g.Services {
		p.checkServicePort(s, g, where)
		if s.Task != "" && g.Task(s.Task) == nil {
			p.failAt(s.Pos, fmt.Sprintf("service %q in %s names task %q, which the group does not have", s.Name, where, s.Task), "")
		}
	}
}

// checkServicePort warns about a port label the group does not define:
// Nomad accepts the file and fails at registration.
func (p *parser) checkServicePort(s *Service, g *Group, where string) {
	if s.Port == "" || strings.ContainsAny(s.Port, "0123456789") && isNumber(s.Port) {
		return
	}
	for _, port := range g.Network.Ports {
		if port.Label == s.Port {
			return
		}
	}
	p.warnAt(s.Pos, fmt.Sprintf("service %q in %s uses port %q, which the group's network does not define", s.Name, where, s.Port),
		"add network { port \""+s.Port+"\" {} }")
}

func isNumber(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

func (p *parser) ephemeralDisk(blk *hclsyntax.Block, where string) EphemeralDisk {
	w := "ephemeral_disk block in " + where
	attrs, _ := p.content(blk.Body, schema{what: w, attrs: []string{"size", "sticky", "migrate"}})
	d := EphemeralDisk{SizeMB: defaultDiskMB}
	if v, ok := p.integer(attrs["size"], w, 10, maxInt32); ok {
		d.SizeMB = v
	}
	if v, ok := p.boolean(attrs["sticky"], w); ok {
		d.Sticky = v
	}
	if v, ok := p.boolean(attrs["migrate"], w); ok {
		d.Migrate = v
	}
	if d.Sticky || d.Migrate {
		p.warn(blk.TypeRange, fmt.Sprintf("sticky and migrate in %s do not apply on one node; accepted and ignored", w), "")
	}
	return d
}

func (p *parser) volume(blk *hclsyntax.Block, where string) *Volume {
	w := fmt.Sprintf("volume %q in %s", blk.Labels[0], where)
	attrs, blocks := p.content(blk.Body, schema{
		what:   w,
		attrs:  []string{"type", "source", "read_only", "access_mode", "attachment_mode", "per_alloc"},
		blocks: []blockSpec{{name: "mount_options", single: true}},
	})
	v := &Volume{Name: blk.Labels[0], Type: "host", Pos: p.pos(blk.TypeRange)}
	p.oneOf(attrs["type"], w, &v.Type, "host", "csi")
	for name, dst := range map[string]*string{"source": &v.Source, "access_mode": &v.AccessMode, "attachment_mode": &v.AttachmentMode} {
		if s, ok := p.str(attrs[name], w); ok {
			*dst = s
		}
	}
	if b, ok := p.boolean(attrs["read_only"], w); ok {
		v.ReadOnly = b
	}
	if b, ok := p.boolean(attrs["per_alloc"], w); ok {
		v.PerAlloc = b
	}
	if bs := blocks["mount_options"]; len(bs) > 0 {
		mw := "mount_options block in " + w
		ma, _ := p.content(bs[0].Body, schema{what: mw, attrs: []string{"fs_type", "mount_flags"}})
		if s, ok := p.str(ma["fs_type"], mw); ok {
			v.FSType = s
		}
		if l, ok := p.strList(ma["mount_flags"], mw); ok {
			v.MountFlags = l
		}
	}
	if v.Source == "" {
		p.fail(blk.TypeRange, fmt.Sprintf("%s has no source", w), "set source = \"<volume name>\"")
	}
	if v.Type == "csi" {
		p.warn(blk.TypeRange, fmt.Sprintf("%s is a CSI volume, which berth cannot mount", w), "accepted by validate; a task that mounts it cannot run on berth")
	} else {
		p.warn(blk.TypeRange, fmt.Sprintf("%s is a host volume, which berth does not mount yet", w), "accepted by validate")
	}
	return v
}

// AllServices is the group's services followed by its tasks'.
func (g *Group) AllServices() []*Service {
	out := append([]*Service(nil), g.Services...)
	for _, t := range g.Tasks {
		out = append(out, t.Services...)
	}
	return out
}
