package jobspec

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Operators with Nomad's meaning. distinct_hosts and distinct_property,
// scheduler rules that mean nothing on one node, are accepted apart.
var constraintOps = []string{
	"=", "==", "is", "!=", "not", "<", "<=", ">", ">=",
	"regexp", "set_contains", "set_contains_all", "set_contains_any",
	"version", "semver", "is_set", "is_not_set",
}

func (p *parser) constraint(blk *hclsyntax.Block, where string, taskLevel bool) (Constraint, bool) {
	w := "constraint in " + where
	n := len(p.diags)
	attrs, _ := p.content(blk.Body, schema{what: w, attrs: append([]string{"attribute", "operator", "value"}, constraintShorthands...)})
	c := Constraint{Operator: "=", Pos: p.pos(blk.TypeRange)}
	if s, ok := p.str(attrs["attribute"], w); ok {
		c.Attribute = s
	}
	if s, ok := p.str(attrs["value"], w); ok {
		c.Value = s
	}
	opRange := blk.TypeRange
	if a := attrs["operator"]; a != nil {
		opRange = a.Expr.Range()
		if s, ok := p.str(a, w); ok {
			c.Operator = s
		}
	}
	valRange := blk.TypeRange
	if a := attrs["value"]; a != nil {
		valRange = a.Expr.Range()
	}
	if !p.constraintShorthand(attrs, &c, w, &opRange, &valRange) {
		return c, false
	}
	if len(p.diags) > n {
		return c, false
	}
	if attrs["distinct_hosts"] != nil && c.Operator == "=" && c.Attribute == "" && attrs["value"] == nil {
		// Nomad 1.6.5 accepts a block holding only distinct_hosts = false
		// and places as if it were not there.
		p.warn(attrs["distinct_hosts"].NameRange, fmt.Sprintf("%s with distinct_hosts = false constrains nothing", w), "")
		return c, false
	}
	hasValue := attrs["value"] != nil || c.Value != ""
	switch {
	case c.Operator == "distinct_hosts" || c.Operator == "distinct_property":
		if taskLevel {
			p.fail(opRange, fmt.Sprintf("constraint operator %q is not allowed at task level (%s)", c.Operator, where),
				"put it in the group or the job")
			break
		}
		if c.Operator == "distinct_property" && c.Attribute == "" {
			p.fail(blk.TypeRange, fmt.Sprintf("distinct_property constraint in %s has no attribute", where), "")
			break
		}
		if c.Operator == "distinct_property" && c.Value != "" {
			if v, err := strconv.ParseUint(c.Value, 10, 64); err != nil || v == 0 {
				p.fail(valRange, fmt.Sprintf("distinct_property in %s must allow a count greater than 0, got %q", where, c.Value), "")
				break
			}
		}
		if c.Operator == "distinct_hosts" && c.Value != "" {
			if _, err := strconv.ParseBool(c.Value); err != nil {
				p.fail(valRange, fmt.Sprintf("distinct_hosts in %s must have a boolean value, got %q", where, c.Value), "")
				break
			}
		}
		p.warn(blk.TypeRange, fmt.Sprintf("%s constraint in %s does not apply on one node; accepted and ignored", c.Operator, where),
			"it spreads allocations over cluster nodes; berth runs them all on this node")
	case !slices.Contains(constraintOps, c.Operator):
		p.fail(opRange, fmt.Sprintf("unknown constraint operator %q in %s", c.Operator, where),
			"use one of: "+strings.Join(constraintOps, ", ")+", distinct_hosts, distinct_property")
	case c.Attribute == "":
		p.fail(blk.TypeRange, fmt.Sprintf("constraint in %s has no attribute", where),
			"write attribute = \"${attr.kernel.name}\" (or another node attribute)")
	case (c.Operator == "is_set" || c.Operator == "is_not_set") && c.Value != "":
		p.fail(valRange, fmt.Sprintf("constraint operator %q in %s takes no value", c.Operator, where), "remove value")
	case c.Operator != "is_set" && c.Operator != "is_not_set" && !hasValue:
		p.fail(blk.TypeRange, fmt.Sprintf("constraint with operator %q in %s has no value", c.Operator, where),
			"write value = \"...\"")
	case c.Operator == "regexp":
		if _, err := regexp.Compile(c.Value); err != nil {
			p.fail(valRange, fmt.Sprintf("invalid regexp %q in %s: %v", c.Value, w, err), "the syntax is Go's regexp (RE2)")
		}
	case c.Operator == "version" || c.Operator == "semver":
		if _, err := parseVersionConstraints(c.Value); err != nil {
			p.fail(valRange, fmt.Sprintf("invalid version constraint %q in %s: %v", c.Value, w, err),
				"write e.g. \">= 1.2, < 2.0\" or \"~> 1.4\"")
		}
	}
	return c, len(p.diags) == n
}

// constraintShorthands are the attribute forms of a constraint Nomad
// reads: "regexp = x" is operator "regexp" with value x, and so on.
var constraintShorthands = []string{
	"version", "semver", "regexp", "set_contains", "distinct_hosts", "distinct_property",
	"set_contains_all", "set_contains_any", "is_set", "is_not_set",
}

// constraintShorthand applies the attribute forms as Nomad 1.6.5 does, in
// its order (a later one wins): version, semver, regexp and set_contains
// set the operator and the value; distinct_hosts = true the operator;
// distinct_property the operator and the attribute. Nomad reads
// set_contains_all, set_contains_any, is_set and is_not_set there and
// applies none of them: a warning says so. It returns false when a value
// has the wrong type.
func (p *parser) constraintShorthand(attrs map[string]*hclsyntax.Attribute, c *Constraint, w string, opRange, valRange *hcl.Range) bool {
	ok := true
	for _, name := range constraintShorthands {
		a := attrs[name]
		if a == nil {
			continue
		}
		switch name {
		case "distinct_hosts":
			b, bOK := p.boolean(a, w)
			ok = ok && bOK
			if b {
				c.Operator, *opRange = name, a.NameRange
			}
		case "set_contains_all", "set_contains_any", "is_set", "is_not_set":
			_, sOK := p.str(a, w)
			ok = ok && sOK
			p.warn(a.NameRange, fmt.Sprintf("%s = ... in %s is accepted and not applied, as in Nomad 1.6.5", name, w),
				fmt.Sprintf("Nomad reads it and keeps operator %q; write operator = %q instead", c.Operator, name))
		default:
			s, sOK := p.str(a, w)
			ok = ok && sOK
			if !sOK || s == "" {
				continue
			}
			if name == "distinct_property" {
				c.Operator, c.Attribute, *opRange = name, s, a.NameRange
				continue
			}
			c.Operator, c.Value, *opRange, *valRange = name, s, a.NameRange, a.Expr.Range()
		}
	}
	return ok
}

// checkOperator checks an affinity's operator.
func (p *parser) checkOperator(op string, a *hclsyntax.Attribute, where string) {
	if !slices.Contains(constraintOps, op) {
		p.fail(a.Expr.Range(), fmt.Sprintf("unknown operator %q in %s", op, where), "use one of: "+strings.Join(constraintOps, ", "))
	}
}

func (c Constraint) describe() string {
	if c.Operator == "is_set" || c.Operator == "is_not_set" {
		return fmt.Sprintf("%q %s", c.Attribute, c.Operator)
	}
	return fmt.Sprintf("%q %s %q", c.Attribute, c.Operator, c.Value)
}

// resolve turns "${attr.x}" into the node's value; anything else is a
// literal, as in Nomad.
func resolve(target string, node NodeAttrs) (key, val string, isRef, found bool) {
	if strings.HasPrefix(target, "${") && strings.HasSuffix(target, "}") && len(target) >= 3 {
		key = strings.TrimSpace(target[2 : len(target)-1])
		val, found = node[key]
		return key, val, true, found
	}
	return "", target, false, true
}

// checkConstraint follows Nomad's scheduler (feasible.go): a missing
// attribute fails every operator but "!=", "not" and "is_not_set". On
// failure the detail shows what this node actually has.
func checkConstraint(c Constraint, node NodeAttrs) (bool, string) {
	lKey, l, lRef, lFound := resolve(c.Attribute, node)
	rKey, r, rRef, rFound := resolve(c.Value, node)
	var ok bool
	switch c.Operator {
	case "=", "==", "is":
		ok = lFound && rFound && l == r
	case "!=", "not":
		ok = lFound != rFound || (lFound && l != r)
	case "<", "<=", ">", ">=":
		ok = lFound && rFound && checkOrder(c.Operator, l, r)
	case "is_set":
		ok = lFound
	case "is_not_set":
		ok = !lFound
	case "regexp":
		if lFound && rFound {
			re, err := regexp.Compile(r)
			ok = err == nil && re.MatchString(l)
		}
	case "set_contains", "set_contains_all":
		ok = lFound && rFound && setContains(l, r, true)
	case "set_contains_any":
		ok = lFound && rFound && setContains(l, r, false)
	case "version", "semver":
		if lFound && rFound {
			cs, err := parseVersionConstraints(r)
			ok = err == nil && cs.match(l, c.Operator == "semver")
		}
	}
	if ok {
		return true, ""
	}
	var facts []string
	for _, side := range []struct {
		key, val   string
		ref, found bool
	}{{lKey, l, lRef, lFound}, {rKey, r, rRef, rFound}} {
		switch {
		case !side.ref:
		case side.found:
			facts = append(facts, fmt.Sprintf("this node has %s = %q", side.key, side.val))
		default:
			facts = append(facts, fmt.Sprintf("this node has no %s%s", side.key, closestKey(side.key, node)))
		}
	}
	if len(facts) == 0 {
		return false, "both sides are literals, so this constraint can never hold"
	}
	return false, strings.Join(facts, "; ")
}

func closestKey(key string, node NodeAttrs) string {
	best, bestDist := "", 4
	keys := make([]string, 0, len(node))
	for k := range node {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if d := editDistance(key, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

// checkOrder compares as integers, then floats, then strings, as Nomad.
func checkOrder(op, l, r string) bool {
	var cmp int
	if li, err1 := strconv.ParseInt(l, 10, 64); err1 == nil {
		if ri, err2 := strconv.ParseInt(r, 10, 64); err2 == nil {
			cmp = compare(li, ri)
			return orderHolds(op, cmp)
		}
	}
	if lf, err1 := strconv.ParseFloat(l, 64); err1 == nil {
		if rf, err2 := strconv.ParseFloat(r, 64); err2 == nil {
			cmp = compare(lf, rf)
			return orderHolds(op, cmp)
		}
	}
	return orderHolds(op, strings.Compare(l, r))
}

func compare[T int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func orderHolds(op string, cmp int) bool {
	switch op {
	case "<":
		return cmp < 0
	case "<=":
		return cmp <= 0
	case ">":
		return cmp > 0
	case ">=":
		return cmp >= 0
	}
	return false
}

func setContains(have, want string, all bool) bool {
	set := map[string]bool{}
	for _, s := range strings.Split(have, ",") {
		set[strings.TrimSpace(s)] = true
	}
	for _, s := range strings.Split(want, ",") {
		in := set[strings.TrimSpace(s)]
		if all && !in {
			return false
		}
		if !all && in {
			return true
		}
	}
	return all
}

// A small version comparator in the spirit of hashicorp/go-version, which
// is not a dependency of berth.

var (
	versionRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^v?([0-9]+(?:\.[0-9]+)*)(?:-([0-9A-Za-z.~-]+))?(?:\+[0-9A-Za-z.~-]+)?$`)
	})
	verConsRE   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(=|!=|>=|<=|>|<|~>)?\s*(\S+)$`) })
	maxSegments = 16
)

type version struct {
	segs []int64
	pre  string
}

func parseVersion(s string) (version, error) {
	m := versionRE().FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return version{}, fmt.Errorf("%q is not a version", s)
	}
	parts := strings.Split(m[1], ".")
	if len(parts) > maxSegments {
		return version{}, fmt.Errorf("%q has more than %d segments", s, maxSegments)
	}
	v := version{pre: m[2]}
	for _, part := range parts {
		n, err := strconv.ParseInt(part, 10, 64)
		if err != nil {
			return version{}, fmt.Errorf("%q: segment %q is too large", s, part)
		}
		v.segs = append(v.segs, n)
	}
	return v, nil
}

func (v version) cmp(o version, withPre bool) int {
	for i := 0; i < max(len(v.segs), len(o.segs)); i++ {
		var a, b int64
		if i < len(v.segs) {
			a = v.segs[i]
		}
		if i < len(o.segs) {
			b = o.segs[i]
		}
		if c := compare(a, b); c != 0 {
			return c
		}
	}
	if !withPre || v.pre == o.pre {
		return 0
	}
	// A pre-release sorts before its release (semver 2.0 §11).
	switch {
	case v.pre == "":
		return 1
	case o.pre == "":
		return -1
	}
	return comparePre(v.pre, o.pre)
}

func comparePre(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < min(len(as), len(bs)); i++ {
		ai, aErr := strconv.ParseInt(as[i], 10, 64)
		bi, bErr := strconv.ParseInt(bs[i], 10, 64)
		var c int
		switch {
		case aErr == nil && bErr == nil:
			c = compare(ai, bi)
		case aErr == nil:
			c = -1
		case bErr == nil:
			c = 1
		default:
			c = strings.Compare(as[i], bs[i])
		}
		if c != 0 {
			return c
		}
	}
	return compare(int64(len(as)), int64(len(bs)))
}

type verConstraint struct {
	op string
	v  version
}

type verConstraints []verConstraint

func parseVersionConstraints(s string) (verConstraints, error) {
	var out verConstraints
	for _, part := range strings.Split(s, ",") {
		m := verConsRE().FindStringSubmatch(strings.TrimSpace(part))
		if m == nil {
			return nil, fmt.Errorf("%q is not a version constraint", strings.TrimSpace(part))
		}
		v, err := parseVersion(m[2])
		if err != nil {
			return nil, err
		}
		op := m[1]
		if op == "" {
			op = "="
		}
		out = append(out, verConstraint{op: op, v: v})
	}
	return out, nil
}

// match checks every constraint. With "version" a pre-release suffix on the
// node's value is ignored, so a kernel "6.1.0-28-amd64" is 6.1.0; "semver"
// orders pre-releases before their release.
func (cs verConstraints) match(s string, semver bool) bool {
	v, err := parseVersion(s)
	if err != nil {
		return false
	}
	for _, c := range cs {
		cmp := v.cmp(c.v, semver)
		var ok bool
		switch c.op {
		case "=":
			ok = cmp == 0
		case "!=":
			ok = cmp != 0
		case "~>":
			// ~> 1.2.3 means >= 1.2.3 and < 1.3; all but the last segment fixed.
			ok = cmp >= 0
			for i := 0; ok && i < len(c.v.segs)-1; i++ {
				var seg int64
				if i < len(v.segs) {
					seg = v.segs[i]
				}
				ok = seg == c.v.segs[i]
			}
		default:
			ok = orderHolds(c.op, cmp)
		}
		if !ok {
			return false
		}
	}
	return true
}
