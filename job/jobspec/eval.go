package jobspec

import (
	"errors"
	"fmt"
	"math"
	"math/big"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// eval evaluates an expression in the job language: var.* and local.* are
// the job's variables and locals, functions are Nomad's. Any other
// reference (attr.*, node.*, meta.*, NOMAD_*, env.*) is a runtime value, and
// as in Nomad it evaluates to its own text in "${...}", so "${attr.x}",
// attr.x and upper(attr.x) all parse, and Interpolate resolves what is left
// at run time.
//
// Its value counts against the parse's budget as a tree (what reads it
// later copies it), so locals that double a value at each step stop at
// the limit, at the attribute that crosses it.
func (p *parser) eval(e hclsyntax.Expression) (cty.Value, bool) {
	if p.budget.reported {
		return cty.NilVal, false
	}
	v, diags := e.Value(p.evalCtx(e))
	if diags.HasErrors() {
		p.addHCL(diags, e.Range())
		return cty.NilVal, false
	}
	if p.budget.err == nil {
		_ = p.budget.chargeValue(v)
	}
	if p.budget.err != nil {
		p.failBudget(e.Range())
		return cty.NilVal, false
	}
	if !v.IsWhollyKnown() {
		p.fail(e.Range(), "value is not known when the job is parsed", "")
		return cty.NilVal, false
	}
	if !valueInRange(v) {
		p.fail(e.Range(), "number is out of range", "numbers must fit a 64-bit float (about ±1.8e308)")
		return cty.NilVal, false
	}
	return v, true
}

// evalCtx is p.ectx plus placeholders for the runtime references e makes.
func (p *parser) evalCtx(e hclsyntax.Expression) *hcl.EvalContext {
	var tree map[string]*refNode
	for _, t := range hclsyntax.Variables(unwrapIter(e)) {
		root := t.RootName()
		if root == "var" || root == "local" {
			continue
		}
		if tree == nil {
			tree = map[string]*refNode{}
		}
		n := tree[root]
		if n == nil {
			n = &refNode{}
			tree[root] = n
		}
		for _, step := range t[1:] {
			var key string
			switch s := step.(type) {
			case hcl.TraverseAttr:
				key = s.Name
			case hcl.TraverseIndex:
				if s.Key.Type() != cty.String || s.Key.IsNull() {
					key = ""
				} else {
					key = s.Key.AsString()
				}
			}
			if key == "" {
				break
			}
			if n.kids == nil {
				n.kids = map[string]*refNode{}
			}
			kid := n.kids[key]
			if kid == nil {
				kid = &refNode{}
				n.kids[key] = kid
			}
			n = kid
		}
		if n.text == "" {
			n.text = "${" + p.source(t.SourceRange()) + "}"
		}
	}
	if tree == nil {
		return p.ectx
	}
	ctx := p.ectx.NewChild()
	ctx.Variables = make(map[string]cty.Value, len(tree))
	for k, n := range tree {
		ctx.Variables[k] = n.value()
	}
	return ctx
}

// refNode is one step of a runtime reference: a leaf is its "${...}" text,
// an inner step an object of the steps below it.
type refNode struct {
	text string
	kids map[string]*refNode
}

func (n *refNode) value() cty.Value {
	if len(n.kids) == 0 {
		return cty.StringVal(n.text)
	}
	attrs := make(map[string]cty.Value, len(n.kids))
	for k, kid := range n.kids {
		attrs[k] = kid.value()
	}
	return cty.ObjectVal(attrs)
}

// source returns the text of r, or "?" if r is not inside the file (which
// would be an HCL bug; it must not panic the parser).
func (p *parser) source(r hcl.Range) string {
	if r.Start.Byte < 0 || r.End.Byte > len(p.src) || r.Start.Byte > r.End.Byte {
		return "?"
	}
	return string(p.src[r.Start.Byte:r.End.Byte])
}

var errNotFinite = errors.New("number is too large")

// toGo converts a cty value to plain Go values for a driver's config:
// string, int64 for whole numbers that fit, float64 otherwise, bool,
// []any, map[string]any, nil.
func toGo(v cty.Value) (any, error) {
	if v.IsNull() {
		return nil, nil
	}
	if !v.IsKnown() {
		return nil, errors.New("value is not known")
	}
	t := v.Type()
	switch {
	case t == cty.String:
		return v.AsString(), nil
	case t == cty.Bool:
		return v.True(), nil
	case t == cty.Number:
		bf := v.AsBigFloat()
		if bf.IsInf() {
			return nil, errNotFinite
		}
		if bf.IsInt() {
			if i, acc := bf.Int64(); acc == big.Exact {
				return i, nil
			}
		}
		f, _ := bf.Float64()
		if math.IsInf(f, 0) {
			return nil, errNotFinite
		}
		return f, nil
	case t.IsListType() || t.IsTupleType() || t.IsSetType():
		out := make([]any, 0, v.LengthInt())
		for it := v.ElementIterator(); it.Next(); {
			_, ev := it.Element()
			g, err := toGo(ev)
			if err != nil {
				return nil, err
			}
			out = append(out, g)
		}
		return out, nil
	case t.IsMapType() || t.IsObjectType():
		out := make(map[string]any, v.LengthInt())
		for it := v.ElementIterator(); it.Next(); {
			k, ev := it.Element()
			g, err := toGo(ev)
			if err != nil {
				return nil, fmt.Errorf("key %q: %w", k.AsString(), err)
			}
			out[k.AsString()] = g
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported value of type %s", t.FriendlyName())
}

func valueInRange(v cty.Value) bool {
	if v.IsNull() || !v.IsKnown() {
		return true
	}
	t := v.Type()
	switch {
	case t == cty.Number:
		return numberInRange(v)
	case t.IsListType() || t.IsTupleType() || t.IsSetType() || t.IsMapType() || t.IsObjectType():
		for it := v.ElementIterator(); it.Next(); {
			if _, ev := it.Element(); !valueInRange(ev) {
				return false
			}
		}
	}
	return true
}
