package jobspec

import (
	"fmt"
	"slices"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// Dynamic blocks, as Nomad has them (HCL's dynblock extension, which
// Nomad applies to the whole job before decoding it):
//
//	dynamic "port" {
//	  for_each = local.ports     # a list, set, map or object
//	  iterator = p               # optional; the block's type by default
//	  labels   = [p.key]         # optional; the generated block's labels
//	  content { static = p.value }
//	}
//
// generates one "port" block per element, in place of the dynamic block,
// before the body is checked against its schema: a generated block is
// read as if written out, and anything wrong in it is reported at the
// content's file:line:col. The content is not copied as text; its
// expressions are wrapped (iterExpr) so they evaluate with the iterator
// bound, which keeps their source ranges.

// iterExpr is an expression of a dynamic block's content, evaluated with
// the block's iterator (name) bound to val. Embedding the expression keeps
// its range and its children for the HCL walkers.
type iterExpr struct {
	hclsyntax.Expression
	name string
	val  cty.Value
}

func (e *iterExpr) Value(ctx *hcl.EvalContext) (cty.Value, hcl.Diagnostics) {
	var child *hcl.EvalContext
	if ctx == nil {
		child = &hcl.EvalContext{}
	} else {
		child = ctx.NewChild()
	}
	child.Variables = map[string]cty.Value{e.name: e.val}
	return e.Expression.Value(child)
}

// unwrapIter is the expression as written in the file.
func unwrapIter(e hclsyntax.Expression) hclsyntax.Expression {
	for {
		w, ok := e.(*iterExpr)
		if !ok {
			return e
		}
		e = w.Expression
	}
}

// expandDynamic replaces body's dynamic blocks by the blocks they
// generate, in place, once per body. A dynamic block in error is reported
// and dropped.
func (p *parser) expandDynamic(body *hclsyntax.Body) {
	if p.expanded[body] {
		return
	}
	if p.expanded == nil {
		p.expanded = map[*hclsyntax.Body]bool{}
	}
	p.expanded[body] = true
	has := false
	for _, b := range body.Blocks {
		has = has || b.Type == "dynamic"
	}
	if !has {
		return
	}
	out := make(hclsyntax.Blocks, 0, len(body.Blocks))
	for _, b := range body.Blocks {
		if b.Type != "dynamic" {
			out = append(out, b)
			continue
		}
		if p.budget.err == nil {
			out = append(out, p.dynamic(b)...)
		}
	}
	if p.budget.err != nil {
		// What was generated before the limit is not read: the job is
		// refused, and reading it would take the time the limit saves.
		out = slices.DeleteFunc(slices.Clone(body.Blocks), func(b *hclsyntax.Block) bool { return b.Type == "dynamic" })
	}
	body.Blocks = out
}

var dynamicSchema = schema{
	what:   "dynamic block",
	attrs:  []string{"for_each", "iterator", "labels"},
	blocks: []blockSpec{{name: "content", single: true}},
}

// dynamic returns the blocks one dynamic block generates.
func (p *parser) dynamic(blk *hclsyntax.Block) []*hclsyntax.Block {
	if !p.checkLabels(blk, blockSpec{name: "dynamic", label: "block type"}, "a dynamic block") {
		return nil
	}
	typ := blk.Labels[0]
	sc := dynamicSchema
	sc.what = fmt.Sprintf("dynamic %q", typ)
	n := len(p.diags)
	attrs, blocks := p.content(blk.Body, sc)
	if attrs["for_each"] == nil {
		p.fail(blk.TypeRange, fmt.Sprintf("dynamic %q has no for_each", typ), "write for_each = <a list, set, map or object>")
	}
	if len(blocks["content"]) == 0 {
		p.fail(blk.TypeRange, fmt.Sprintf("dynamic %q has no content block", typ), "write content { ... } with the generated block's body")
	}
	iter := typ
	if a := attrs["iterator"]; a != nil {
		t, ok := unwrapIter(a.Expr).(*hclsyntax.ScopeTraversalExpr)
		if !ok || len(t.Traversal) != 1 {
			p.fail(a.Expr.Range(), fmt.Sprintf("iterator of dynamic %q must be a name", typ), "write iterator = it (no quotes)")
		} else {
			iter = t.Traversal.RootName()
		}
	}
	if len(p.diags) > n {
		return nil
	}
	coll, ok := p.forEach(attrs["for_each"], typ)
	if !ok {
		return nil
	}
	content := blocks["content"][0]
	var out []*hclsyntax.Block
	for it := coll.ElementIterator(); it.Next(); {
		k, v := it.Element()
		if err := p.budget.charge(1, 0); err != nil {
			p.failBudget(blk.TypeRange)
			return nil
		}
		val := cty.ObjectVal(map[string]cty.Value{"key": k, "value": v})
		gen, ok := p.generate(blk, content, attrs["labels"], iter, val)
		if !ok {
			return out
		}
		out = append(out, gen)
	}
	return out
}

// forEach evaluates a dynamic block's for_each: a collection to iterate.
func (p *parser) forEach(a *hclsyntax.Attribute, typ string) (cty.Value, bool) {
	v, ok := p.eval(a.Expr)
	if !ok {
		return cty.NilVal, false
	}
	t := v.Type()
	if v.IsNull() || !(t.IsCollectionType() || t.IsObjectType() || t.IsTupleType()) {
		p.fail(a.Expr.Range(), fmt.Sprintf("for_each of dynamic %q must be a list, set, map or object, got %s", typ, describe(v)),
			"an iterable collection is required")
		return cty.NilVal, false
	}
	return v, true
}

// generate makes one block of a dynamic block's content, its iterator
// bound to val.
func (p *parser) generate(dyn, content *hclsyntax.Block, labels *hclsyntax.Attribute, iter string, val cty.Value) (*hclsyntax.Block, bool) {
	gen := &hclsyntax.Block{
		Type:            dyn.Labels[0],
		Body:            bindIter(content.Body, iter, val),
		TypeRange:       dyn.LabelRanges[0],
		OpenBraceRange:  content.OpenBraceRange,
		CloseBraceRange: content.CloseBraceRange,
	}
	if labels == nil {
		return gen, true
	}
	lv, ok := p.eval(&iterExpr{Expression: labels.Expr, name: iter, val: val})
	if !ok {
		return nil, false
	}
	l, err := convert.Convert(lv, cty.List(cty.String))
	if err != nil || l.IsNull() {
		p.fail(labels.Expr.Range(), fmt.Sprintf("labels of dynamic %q must be a list of strings, got %s", dyn.Labels[0], describe(lv)), "")
		return nil, false
	}
	for it := l.ElementIterator(); it.Next(); {
		_, ev := it.Element()
		if ev.IsNull() {
			p.fail(labels.Expr.Range(), fmt.Sprintf("labels of dynamic %q must not contain null", dyn.Labels[0]), "")
			return nil, false
		}
		gen.Labels = append(gen.Labels, ev.AsString())
		gen.LabelRanges = append(gen.LabelRanges, labels.Expr.Range())
	}
	return gen, true
}

// bindIter copies body with every expression in it, nested blocks
// included, bound to the iterator. Nested dynamic blocks are copied as
// they are and expanded when their body is read, inside this binding.
func bindIter(body *hclsyntax.Body, name string, val cty.Value) *hclsyntax.Body {
	out := &hclsyntax.Body{
		Attributes: make(hclsyntax.Attributes, len(body.Attributes)),
		SrcRange:   body.SrcRange,
		EndRange:   body.EndRange,
	}
	for k, a := range body.Attributes {
		c := *a
		c.Expr = &iterExpr{Expression: a.Expr, name: name, val: val}
		out.Attributes[k] = &c
	}
	for _, b := range body.Blocks {
		c := *b
		c.Body = bindIter(b.Body, name, val)
		out.Blocks = append(out.Blocks, &c)
	}
	return out
}
