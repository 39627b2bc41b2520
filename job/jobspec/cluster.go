package jobspec

import (
	"fmt"
	"sort"

	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// kind is the type an attribute of a checked-only block must have.
type kind int

const (
	kStr kind = iota
	kBool
	kInt
	kNum
	kDur
	kStrList
	kStrMap
	kAny
)

// shape describes a block berth accepts and checks but does not act on
// (update, migrate, spread, ...): its attributes with their kinds and its
// nested blocks. opaque blocks (Consul Connect, scaling policies) take
// anything; their values are still evaluated, so a typo in an expression is
// still an error.
type shape struct {
	attrs  map[string]kind
	blocks map[string]nested
	opaque bool
	// freeAttrs: every attribute name is a key (headers, meta), of kind
	// freeKind.
	freeAttrs bool
	freeKind  kind
}

type nested struct {
	label  string
	single bool
	s      *shape
}

func (s *shape) schema(what string) schema {
	sc := schema{what: what, anyAttrs: s.freeAttrs}
	for a := range s.attrs {
		sc.attrs = append(sc.attrs, a)
	}
	sort.Strings(sc.attrs)
	for b, n := range s.blocks {
		sc.blocks = append(sc.blocks, blockSpec{name: b, label: n.label, single: n.single})
	}
	sort.Slice(sc.blocks, func(i, j int) bool { return sc.blocks[i].name < sc.blocks[j].name })
	return sc
}

// check checks blk against s and returns its attributes, so a caller can
// read the few fields it needs.
func (p *parser) check(blk *hclsyntax.Block, s *shape, where string) map[string]*hclsyntax.Attribute {
	if s.opaque {
		p.evalAll(blk.Body)
		return nil
	}
	attrs, blocks := p.content(blk.Body, s.schema(where))
	for _, a := range sortedAttrMap(attrs) {
		k, ok := s.attrs[a.Name]
		if !ok {
			k = s.freeKind
		}
		p.checkKind(a, k, where)
	}
	for name, bs := range blocks {
		n := s.blocks[name]
		for _, b := range bs {
			w := name + " block in " + where
			if len(b.Labels) > 0 {
				w = fmt.Sprintf("%s %q in %s", name, b.Labels[0], where)
			}
			p.check(b, n.s, w)
		}
	}
	return attrs
}

func (p *parser) checkKind(a *hclsyntax.Attribute, k kind, where string) {
	switch k {
	case kStr:
		p.str(a, where)
	case kBool:
		p.boolean(a, where)
	case kInt:
		p.integer(a, where, -maxInt32, maxInt32)
	case kNum:
		p.number(a, where)
	case kDur:
		p.duration(a, where)
	case kStrList:
		p.strList(a, where)
	case kStrMap:
		p.strMap(a, where)
	default:
		p.value(a)
	}
}

// evalAll evaluates every attribute under body.
func (p *parser) evalAll(body *hclsyntax.Body) {
	p.expandDynamic(body)
	for _, a := range sortedAttrs(body) {
		p.value(a)
	}
	for _, b := range body.Blocks {
		p.evalAll(b.Body)
	}
}

// clusterOnly warns, once per block, that a block means something only to
// a cluster of nodes.
func (p *parser) clusterOnly(blk *hclsyntax.Block, where, why string) {
	p.warn(blk.TypeRange, fmt.Sprintf("%s in %s does not apply on one node; accepted and ignored", blk.Type, where), why)
}

var (
	updateShape = &shape{attrs: map[string]kind{
		"max_parallel": kInt, "health_check": kStr, "min_healthy_time": kDur, "healthy_deadline": kDur,
		"progress_deadline": kDur, "auto_revert": kBool, "auto_promote": kBool, "canary": kInt, "stagger": kDur,
	}}
	migrateShape = &shape{attrs: map[string]kind{
		"max_parallel": kInt, "health_check": kStr, "min_healthy_time": kDur, "healthy_deadline": kDur,
	}}
	// The attribute forms (version = ..., ...) are Nomad's shorthand for
	// operator and value, as in a constraint.
	affinityShape = &shape{attrs: map[string]kind{"attribute": kStr, "operator": kStr, "value": kStr, "weight": kInt,
		"version": kStr, "semver": kStr, "regexp": kStr, "set_contains": kStr, "set_contains_all": kStr, "set_contains_any": kStr}}
	spreadShape = &shape{
		attrs:  map[string]kind{"attribute": kStr, "weight": kInt},
		blocks: map[string]nested{"target": {label: "target value", s: &shape{attrs: map[string]kind{"percent": kInt}}}},
	}
	scalingShape = &shape{
		attrs:  map[string]kind{"min": kInt, "max": kInt, "enabled": kBool, "type": kStr},
		blocks: map[string]nested{"policy": {single: true, s: &shape{opaque: true}}},
	}
	consulShape      = &shape{attrs: map[string]kind{"namespace": kStr}}
	multiregionShape = &shape{opaque: true}
	// disconnect is Nomad 1.8's; 1.6.5 refuses it (see README).
	disconnectShape = &shape{attrs: map[string]kind{
		"lost_after": kDur, "replace": kBool, "reconcile": kStr, "stop_on_client_after": kDur,
	}}
	csiPluginShape = &shape{attrs: map[string]kind{
		"id": kStr, "type": kStr, "mount_dir": kStr, "stage_publish_base_dir": kStr, "health_timeout": kDur,
	}}
	taskScalingShape = &shape{
		attrs:  map[string]kind{"min": kInt, "max": kInt, "enabled": kBool},
		blocks: map[string]nested{"policy": {single: true, s: &shape{opaque: true}}},
	}
	deviceShape = &shape{
		attrs: map[string]kind{"count": kInt},
		blocks: map[string]nested{
			"constraint": {s: &shape{attrs: map[string]kind{"attribute": kStr, "operator": kStr, "value": kStr}}},
			"affinity":   {s: affinityShape},
		},
	}
	taskNetworkShape = &shape{opaque: true}
)

// affinity checks an affinity block as Nomad's validation does.
func (p *parser) affinity(blk *hclsyntax.Block, where string) {
	w := "affinity in " + where
	attrs := p.check(blk, affinityShape, w)
	if a := attrs["weight"]; a != nil {
		if v, ok := p.integer(a, w, -maxInt32, maxInt32); ok {
			switch {
			case v == 0:
				p.fail(a.Expr.Range(), fmt.Sprintf("affinity weight in %s cannot be zero", where), "use a weight from -100 to 100, not 0")
			case v < -100 || v > 100:
				p.fail(a.Expr.Range(), fmt.Sprintf("affinity weight in %s must be within [-100, 100], got %d", where, v), "")
			}
		}
	}
	if a := attrs["operator"]; a != nil {
		if op, ok := p.str(a, w); ok {
			switch op {
			case "is_set", "is_not_set", "distinct_hosts", "distinct_property":
				p.fail(a.Expr.Range(), fmt.Sprintf("operator %q is not allowed in an affinity", op), "")
			default:
				p.checkOperator(op, a, where)
			}
		}
	}
	p.clusterOnly(blk, where, "affinities rank nodes of a cluster; berth has one node")
}

func (p *parser) spread(blk *hclsyntax.Block, where string) {
	w := "spread in " + where
	attrs := p.check(blk, spreadShape, w)
	if attrs["attribute"] == nil {
		p.fail(blk.TypeRange, fmt.Sprintf("%s has no attribute", w), "write attribute = \"${node.datacenter}\"")
	}
	if a := attrs["weight"]; a != nil {
		if v, ok := p.integer(a, w, -maxInt32, maxInt32); ok && (v < 0 || v > 100) {
			p.fail(a.Expr.Range(), fmt.Sprintf("spread weight in %s must be from 0 to 100, got %d", where, v), "")
		}
	}
	sum := 0
	seen := map[string]bool{}
	for _, t := range blk.Body.Blocks {
		if t.Type != "target" || len(t.Labels) != 1 {
			continue
		}
		if seen[t.Labels[0]] {
			p.fail(t.LabelRanges[0], fmt.Sprintf("duplicate spread target %q in %s", t.Labels[0], where), "")
		}
		seen[t.Labels[0]] = true
		if a := t.Body.Attributes["percent"]; a != nil {
			if v, ok := p.integer(a, w, -maxInt32, maxInt32); ok {
				if v < 0 || v > 100 {
					p.fail(a.Expr.Range(), fmt.Sprintf("spread target percent in %s must be from 0 to 100, got %d", where, v), "")
				}
				sum += v
			}
		}
	}
	if sum > 100 {
		p.fail(blk.TypeRange, fmt.Sprintf("sum of spread target percentages in %s must not be greater than 100%%; got %d%%", where, sum), "")
	}
	p.clusterOnly(blk, where, "spread distributes allocations over nodes; berth has one node")
}

// update checks an update block and returns its canary (nil: not set),
// which a per_alloc volume cannot have.
func (p *parser) update(blk *hclsyntax.Block, where string) *int {
	w := "update block in " + where
	attrs := p.check(blk, updateShape, w)
	var canary *int
	if v, ok := p.integer(attrs["canary"], w, 0, maxInt32); ok {
		canary = &v
	}
	if a := attrs["health_check"]; a != nil {
		if s, ok := p.str(a, w); ok && s != "checks" && s != "task_states" && s != "manual" {
			p.fail(a.Expr.Range(), fmt.Sprintf("invalid health_check %q in %s", s, w), "use \"checks\", \"task_states\" or \"manual\"")
		}
	}
	if a := attrs["max_parallel"]; a != nil {
		if v, ok := p.integer(a, w, -maxInt32, maxInt32); ok && v < 0 {
			p.fail(a.Expr.Range(), fmt.Sprintf("max_parallel in %s must be >= 0, got %d", w, v), "")
		}
	}
	p.clusterOnly(blk, where, "update drives rolling deployments across a cluster; berth replaces a job's allocations when it is submitted again")
	return canary
}

func (p *parser) migrate(blk *hclsyntax.Block, where string) {
	w := "migrate block in " + where
	attrs := p.check(blk, migrateShape, w)
	if a := attrs["health_check"]; a != nil {
		if s, ok := p.str(a, w); ok && s != "checks" && s != "task_states" {
			p.fail(a.Expr.Range(), fmt.Sprintf("invalid health_check %q in %s", s, w), "use \"checks\" or \"task_states\"")
		}
	}
	p.clusterOnly(blk, where, "migrate moves allocations off a draining node to other nodes")
}

func (p *parser) scaling(blk *hclsyntax.Block, where string) {
	w := "scaling block in " + where
	attrs := p.check(blk, scalingShape, w)
	if attrs["max"] == nil {
		p.fail(blk.TypeRange, fmt.Sprintf("%s needs max", w), "write max = <count>")
	} else if mx, ok := p.integer(attrs["max"], w, -maxInt32, maxInt32); ok {
		if mn, ok := p.integer(attrs["min"], w, -maxInt32, maxInt32); ok && mn > mx {
			p.fail(attrs["min"].Expr.Range(), fmt.Sprintf("min (%d) in %s is above max (%d)", mn, w, mx), "")
		}
	}
	if a := attrs["type"]; a != nil {
		if s, ok := p.str(a, w); ok && s != "horizontal" {
			p.fail(a.Expr.Range(), fmt.Sprintf("invalid scaling type %q in %s", s, w), "a group's scaling type is \"horizontal\"")
		}
	}
	p.clusterOnly(blk, where, "scaling policies are for Nomad's autoscaler; berth runs count allocations")
}
