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
	r := p.reschedule(b, base, where)
	r.Applies = r.applies(j.Type)
	return r
}

// groupKeys is what a group body may hold: one row per key; see row for how the
// table is read and how to add a key.
var groupKeys = []row{
	{name: "count", form: attrForm, verdict: runs, handle: groupCount},
	metaRow,
	shutdownDelayRow,
	{name: "stop_after_client_disconnect", form: attrForm, verdict: ignored, handle: clientDisconnect},
	{name: "max_client_disconnect", form: attrForm, verdict: ignored, handle: clientDisconnect},
	restartRow,
	{name: "reschedule", form: blockForm, single: true, verdict: runs, handle: func(p *parser, s *scope, f field) {
		s.group.Reschedule = p.groupReschedule(f.blocks[0], s.group.Reschedule, s.job, s.where)
	}},
	{name: "network", form: blockForm, single: true, verdict: runs, handle: func(p *parser, s *scope, f field) {
		s.group.Network = p.network(f.blocks[0], s.where)
	}},
	constraintRow,
	affinityRow,
	spreadRow,
	updateRow,
	migrateRow,
	{name: "scaling", form: blockForm, single: true, verdict: ignored, handle: func(p *parser, s *scope, f field) {
		p.scaling(f.blocks[0], s.where)
	}},
	{name: "consul", form: blockForm, single: true, verdict: ignored, handle: func(p *parser, s *scope, f field) {
		p.check(f.blocks[0], consulShape, "consul block in "+s.where)
		p.warn(f.blocks[0].TypeRange, fmt.Sprintf("consul in %s is accepted and ignored", s.where), "berth has no Consul")
	}},
	{name: "disconnect", form: blockForm, single: true, verdict: ignored, handle: func(p *parser, s *scope, f field) {
		p.check(f.blocks[0], disconnectShape, "disconnect block in "+s.where)
		p.warn(f.blocks[0].TypeRange, fmt.Sprintf("disconnect in %s does not apply on one node; accepted and ignored", s.where),
			"disconnect is Nomad 1.8's; Nomad 1.6.5 refuses the block")
	}},
	vaultRow,
	{name: "ephemeral_disk", form: blockForm, single: true, verdict: parsed, handle: func(p *parser, s *scope, f field) {
		s.group.EphemeralDisk = p.ephemeralDisk(f.blocks[0], s.where)
	}},
	{name: "volume", form: blockForm, label: "volume name", verdict: runs, handle: groupVolumes},
	serviceRow,
	{name: "task", form: blockForm, label: "task name", verdict: runs, handle: groupTasks},
}

func (p *parser) group(blk *hclsyntax.Block, j *Job) *Group {
	g := p.newGroup(blk, j)
	s := &scope{where: fmt.Sprintf("group %q", g.Name), blk: blk, job: j, group: g}
	p.walk(groupKeys, s)
	if !hasBlock(blk.Body, "task") {
		p.fail(blk.TypeRange, fmt.Sprintf("%s has no task", s.where), "add task \"<name>\" { driver = \"...\" config { ... } }")
	}
	p.finishGroup(g, blk, j, s.where)
	return g
}

func groupCount(p *parser, s *scope, f field) {
	g, j, a := s.group, s.job, f.attr
	if v, ok := p.integer(a, s.where, 0, maxInt32); ok {
		g.Count = v
		switch {
		case j.Type == TypeSystem && v > 1:
			p.fail(a.Expr.Range(), fmt.Sprintf("%s has count %d; count cannot exceed 1 in a system job", s.where, v), "a system job runs one allocation per node")
		case j.Type == TypeSysbatch && v > 1:
			p.warn(a.Expr.Range(), fmt.Sprintf("count %d in %s is ignored: a sysbatch job runs one allocation per node", v, s.where), "")
		}
	}
	if (j.Type == TypeSystem || j.Type == TypeSysbatch) && g.Count > 1 {
		g.Count = 1
	}
}

// clientDisconnect reads stop_after_client_disconnect or
// max_client_disconnect; Nomad allows one of the two.
func clientDisconnect(p *parser, s *scope, f field) {
	a := f.attr
	p.duration(a, s.where)
	p.warn(a.NameRange, fmt.Sprintf("%s in %s does not apply on one node; accepted and ignored", a.Name, s.where),
		"it is about a client losing contact with the servers; berth is both")
	if a.Name == "max_client_disconnect" && s.attrs["stop_after_client_disconnect"] != nil {
		p.fail(a.NameRange, fmt.Sprintf("%s sets both max_client_disconnect and stop_after_client_disconnect", s.where), "keep one")
	}
}

func groupVolumes(p *parser, s *scope, f field) {
	g := s.group
	for _, b := range f.blocks {
		if g.Volumes == nil {
			g.Volumes = map[string]*Volume{}
		}
		if first, dup := g.Volumes[b.Labels[0]]; dup {
			p.fail(b.LabelRanges[0], fmt.Sprintf("duplicate volume %q in %s", b.Labels[0], s.where), fmt.Sprintf("the first is at %s", first.Pos))
			continue
		}
		canaries := 0
		switch {
		case s.canary != nil:
			canaries = *s.canary
		case p.jobCanary != nil:
			canaries = *p.jobCanary
		}
		g.Volumes[b.Labels[0]] = p.volume(b, s.job, canaries, s.where)
	}
}

// groupTasks reads the group's tasks, which inherit its vault block.
func groupTasks(p *parser, s *scope, f field) {
	seen := map[string]*hclsyntax.Block{}
	for _, b := range f.blocks {
		tname := b.Labels[0]
		if first, dup := seen[tname]; dup {
			p.fail(b.LabelRanges[0], fmt.Sprintf("duplicate task %q in %s", tname, s.where),
				fmt.Sprintf("task names must be unique in a group; the first is at %s", p.pos(first.TypeRange)))
			continue
		}
		seen[tname] = b
		t := p.task(b, s.group, s.job, s.where)
		if t.Vault == nil && s.vault != nil {
			t.Vault = s.vault
		}
		s.group.Tasks = append(s.group.Tasks, t)
	}
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
		p.checkVolumeMounts(g, t, where)
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

func (p *parser) volume(blk *hclsyntax.Block, j *Job, canaries int, where string) *Volume {
	w := fmt.Sprintf("volume %q in %s", blk.Labels[0], where)
	attrs, blocks := p.content(blk.Body, schema{
		what:   w,
		attrs:  []string{"type", "source", "read_only", "access_mode", "attachment_mode", "per_alloc"},
		blocks: []blockSpec{{name: "mount_options", single: true}},
	})
	v := &Volume{Name: blk.Labels[0], Type: VolumeHost, Pos: p.pos(blk.TypeRange)}
	p.oneOf(attrs["type"], w, &v.Type, VolumeHost, VolumeCSI)
	for name, dst := range map[string]*string{"source": &v.Source, "access_mode": &v.AccessMode, "attachment_mode": &v.AttachmentMode} {
		if s, ok := p.str(attrs[name], w); ok {
			*dst = s
		}
	}
	if b, ok := p.boolean(attrs["read_only"], w); ok {
		v.ReadOnly = b
	}
	if a := attrs["per_alloc"]; a != nil {
		if b, ok := p.boolean(a, w); ok {
			v.PerAlloc = b
		}
		// As Nomad's validation: one allocation per node has no index to
		// tell volumes apart.
		switch {
		case v.PerAlloc && (j.Type == TypeSystem || j.Type == TypeSysbatch):
			p.fail(a.NameRange, fmt.Sprintf("%s cannot be per_alloc in a %s job", w, j.Type),
				"a system or sysbatch job runs one allocation per node; remove per_alloc")
		case v.PerAlloc && canaries > 0:
			// A canary would need a volume of an index beyond count.
			p.fail(a.NameRange, fmt.Sprintf("%s cannot be per_alloc when canaries are in use (update canary = %d)", w, canaries),
				"remove per_alloc, or canary from the update block")
		}
	}
	mountOptions := blocks["mount_options"]
	if len(mountOptions) > 0 {
		mw := "mount_options block in " + w
		ma, _ := p.content(mountOptions[0].Body, schema{what: mw, attrs: []string{"fs_type", "mount_flags"}})
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
	switch v.Type {
	case VolumeHost:
		p.csiOnly(attrs, mountOptions, v, w)
	case VolumeCSI:
		p.warn(blk.TypeRange, fmt.Sprintf("%s is a CSI volume, which berth cannot mount", w),
			"the file is valid, but run refuses the job: berth has no CSI plugins; use type = \"host\" with a host volume of the node's configuration")
	}
	return v
}

// csiOnly refuses, as Nomad 1.6.5's validation does, what only a CSI
// volume has: a host volume is a directory of the node, mounted as it is.
// An empty access_mode or attachment_mode is Nomad's "unset"; a
// mount_options block is refused even when empty.
func (p *parser) csiOnly(attrs map[string]*hclsyntax.Attribute, mountOptions []*hclsyntax.Block, v *Volume, w string) {
	const fix = "access_mode, attachment_mode and mount_options are for type = \"csi\" volumes; remove it"
	if a := attrs["attachment_mode"]; a != nil && v.AttachmentMode != "" {
		p.fail(a.NameRange, fmt.Sprintf("%s: host volumes cannot have an attachment mode", w), fix)
	}
	if a := attrs["access_mode"]; a != nil && v.AccessMode != "" {
		p.fail(a.NameRange, fmt.Sprintf("%s: host volumes cannot have an access mode", w), fix)
	}
	if len(mountOptions) > 0 {
		p.fail(mountOptions[0].TypeRange, fmt.Sprintf("%s: host volumes cannot have mount options", w), fix)
	}
}

// AllServices is the group's services followed by its tasks'.
func (g *Group) AllServices() []*Service {
	out := append([]*Service(nil), g.Services...)
	for _, t := range g.Tasks {
		out = append(out, t.Services...)
	}
	return out
}

// checkVolumeMounts: each volume_mount names a volume of the group. A
// raw_exec task's are refused at run: raw_exec has no filesystem
// isolation to mount into, and Nomad's fails such a task when it starts
// ("does not support host volumes") though its validate accepts the job.
func (p *parser) checkVolumeMounts(g *Group, t *Task, where string) {
	for _, vm := range t.VolumeMounts {
		v := g.Volumes[vm.Volume]
		if v == nil {
			p.failAt(vm.Pos, fmt.Sprintf("volume_mount in task %q references undefined volume %q", t.Name, vm.Volume),
				fmt.Sprintf("declare volume %q { type = \"host\" source = \"...\" } in %s", vm.Volume, where))
			continue
		}
		if t.Driver == "raw_exec" && v.Type == VolumeHost {
			p.nodeFactAt(vm.Pos, fmt.Sprintf("volume_mount of volume %q in task %q: the raw_exec driver does not support host volumes", vm.Volume, t.Name),
				"a raw_exec task sees the host's filesystem: use the host volume's path directly, or driver = \"exec\"")
		}
	}
}
