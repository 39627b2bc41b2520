package jobspec

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// eval evaluates an expression with no variables defined. Nomad leaves
// "${attr.x}", "${NOMAD_ALLOC_ID}" and friends for the client to resolve at
// run time, so a template part that is a plain reference is kept as its
// source text, "${attr.x}", instead of failing. Anything that would need the
// variable's value now (arithmetic, function calls, conditionals on it) is an
// error, because Interpolate could never resolve it later.
func (p *parser) eval(e hclsyntax.Expression) (cty.Value, bool) {
	if len(hclsyntax.Variables(e)) == 0 {
		v, diags := e.Value(p.ectx)
		if diags.HasErrors() {
			p.addHCL(diags, e.Range())
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
	switch e := e.(type) {
	case *hclsyntax.TemplateWrapExpr:
		return p.evalTemplate([]hclsyntax.Expression{e.Wrapped})
	case *hclsyntax.TemplateExpr:
		return p.evalTemplate(e.Parts)
	case *hclsyntax.ParenthesesExpr:
		return p.eval(e.Expression)
	case *hclsyntax.TupleConsExpr:
		vals := make([]cty.Value, 0, len(e.Exprs))
		ok := true
		for _, el := range e.Exprs {
			v, elOK := p.eval(el)
			ok = ok && elOK
			vals = append(vals, v)
		}
		if !ok {
			return cty.NilVal, false
		}
		return cty.TupleVal(vals), true
	case *hclsyntax.ObjectConsExpr:
		return p.evalObject(e)
	case *hclsyntax.ScopeTraversalExpr:
		ref := p.source(e.Range())
		p.fail(e.Range(), fmt.Sprintf("bare reference %s is not allowed here", ref),
			fmt.Sprintf("runtime values are interpolated inside strings: write \"${%s}\"", ref))
		return cty.NilVal, false
	default:
		p.failRuntime(e)
		return cty.NilVal, false
	}
}

func (p *parser) evalTemplate(parts []hclsyntax.Expression) (cty.Value, bool) {
	var b strings.Builder
	ok := true
	for _, part := range parts {
		if len(hclsyntax.Variables(part)) > 0 {
			if _, isRef := part.(*hclsyntax.ScopeTraversalExpr); !isRef {
				p.failRuntime(part)
				ok = false
				continue
			}
			b.WriteString("${")
			b.WriteString(p.source(part.Range()))
			b.WriteString("}")
			continue
		}
		v, diags := part.Value(p.ectx)
		if diags.HasErrors() {
			p.addHCL(diags, part.Range())
			ok = false
			continue
		}
		if v.IsNull() || !v.IsWhollyKnown() {
			p.fail(part.Range(), "null value in a string template", "")
			ok = false
			continue
		}
		s, err := convert.Convert(v, cty.String)
		if err != nil {
			p.fail(part.Range(), fmt.Sprintf("cannot put a %s into a string", v.Type().FriendlyName()), "")
			ok = false
			continue
		}
		b.WriteString(s.AsString())
	}
	if !ok {
		return cty.NilVal, false
	}
	return cty.StringVal(b.String()), true
}

func (p *parser) evalObject(e *hclsyntax.ObjectConsExpr) (cty.Value, bool) {
	vals := make(map[string]cty.Value, len(e.Items))
	ok := true
	for _, item := range e.Items {
		if len(hclsyntax.Variables(item.KeyExpr)) > 0 {
			p.failRuntime(item.KeyExpr)
			ok = false
			continue
		}
		kv, diags := item.KeyExpr.Value(p.ectx)
		if diags.HasErrors() {
			p.addHCL(diags, item.KeyExpr.Range())
			ok = false
			continue
		}
		ks, err := convert.Convert(kv, cty.String)
		if err != nil || ks.IsNull() || !ks.IsKnown() {
			p.fail(item.KeyExpr.Range(), "object key must be a string", "")
			ok = false
			continue
		}
		key := ks.AsString()
		if _, dup := vals[key]; dup {
			p.fail(item.KeyExpr.Range(), fmt.Sprintf("duplicate key %q", key), "each key may appear once")
			ok = false
			continue
		}
		v, vOK := p.eval(item.ValueExpr)
		if !vOK {
			ok = false
			continue
		}
		vals[key] = v
	}
	if !ok {
		return cty.NilVal, false
	}
	return cty.ObjectVal(vals), true
}

func (p *parser) failRuntime(e hclsyntax.Expression) {
	var refs []string
	for _, t := range hclsyntax.Variables(e) {
		refs = append(refs, p.source(t.SourceRange()))
	}
	p.fail(e.Range(), fmt.Sprintf("expression uses %s, which is only known at run time", strings.Join(refs, ", ")),
		"runtime values can only appear as plain interpolations such as \"${NOMAD_ALLOC_ID}\" or \"${attr.unique.hostname}\"; functions, operators and conditionals on them are not supported")
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
