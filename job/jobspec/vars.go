package jobspec

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	hcljson "github.com/hashicorp/hcl/v2/json"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"

	"github.com/berth/berth/internal/hcllimit"
)

// VarEnvPrefix starts the environment variables that set job variables,
// as in Nomad: NOMAD_VAR_<name>=<value>.
const VarEnvPrefix = "NOMAD_VAR_"

// variable is one declared input variable of the job file.
type variable struct {
	name      string
	typ       cty.Type
	def       cty.Value
	hasDef    bool
	desc      string
	sensitive bool
	checks    []varCheck
	rng       hcl.Range // the block (or the attribute of a variables block)
	defRng    hcl.Range

	val    cty.Value
	set    bool
	source string // "default", "-var", "NOMAD_VAR_<name>", a file path
	srcRng hcl.Range
}

type varCheck struct {
	cond, msg hclsyntax.Expression
	rng       hcl.Range
}

// fnCtx evaluates what may only use functions: defaults, locals' inputs.
func (p *parser) fnCtx() *hcl.EvalContext {
	return &hcl.EvalContext{Functions: p.ectx.Functions}
}

// literal evaluates a value given outside the job file (-var, -var-file,
// NOMAD_VAR_): no functions nor variables, but for expressions and
// templates within the budget.
func (p *parser) literal(e hcl.Expression) (cty.Value, hcl.Diagnostics) {
	n, ok := e.(hclsyntax.Node)
	if !ok {
		// JSON: no for expressions, and its strings are templates only
		// when evaluated with a context.
		return e.Value(nil)
	}
	injectBudget(n)
	return e.Value(&hcl.EvalContext{Functions: map[string]function.Function{budgetFuncName: p.ectx.Functions[budgetFuncName]}})
}

// variables reads every variable and variables block, assigns values
// (default < NOMAD_VAR_ < -var-file < -var, as Nomad) and sets var.* in
// p.ectx.
func (p *parser) variables(blocks map[string][]*hclsyntax.Block) {
	decl := map[string]*variable{}
	var order []string
	add := func(v *variable) {
		if first, dup := decl[v.name]; dup {
			p.fail(v.rng, fmt.Sprintf("duplicate variable %q", v.name), fmt.Sprintf("the first is at %s", p.pos(first.rng)))
			return
		}
		decl[v.name] = v
		order = append(order, v.name)
	}
	for _, b := range blocks["variable"] {
		if v := p.variableBlock(b); v != nil {
			add(v)
		}
	}
	for _, b := range blocks["variables"] {
		attrs, _ := p.content(b.Body, schema{what: "variables block", anyAttrs: true})
		for _, a := range sortedAttrMap(attrs) {
			v := &variable{name: a.Name, typ: cty.DynamicPseudoType, rng: a.NameRange}
			if !hclsyntax.ValidIdentifier(a.Name) {
				p.fail(a.NameRange, fmt.Sprintf("invalid variable name %q", a.Name), "a name starts with a letter and holds letters, digits, '_' and '-'")
				continue
			}
			val, diags := a.Expr.Value(p.fnCtx())
			if diags.HasErrors() {
				p.addHCL(diags, a.Expr.Range())
				continue
			}
			v.def, v.hasDef, v.defRng = val, true, a.Expr.Range()
			add(v)
		}
	}

	for _, name := range order {
		if v := decl[name]; v.hasDef {
			v.val, v.set, v.source, v.srcRng = v.def, true, "default", v.defRng
		}
	}
	p.envVars(decl)
	for _, f := range p.opts.VarFiles {
		src, err := os.ReadFile(f)
		if err != nil {
			p.fail(p.fileStart(), fmt.Sprintf("cannot read -var-file %s: %v", f, err), "")
			continue
		}
		p.varFile(f, src, decl)
	}
	for _, f := range p.opts.VarFileSources {
		p.varFile(f.Name, f.Src, decl)
	}
	p.argVars(decl)

	vals := make(map[string]cty.Value, len(decl))
	for _, name := range order {
		v := decl[name]
		if !v.set {
			p.fail(v.rng, fmt.Sprintf("variable %q is required and has no value", name),
				fmt.Sprintf("pass -var %s=..., a -var-file that sets it, or %s%s=... in the environment, or give it a default", name, VarEnvPrefix, name))
			vals[name] = cty.NullVal(v.typ)
			continue
		}
		vals[name] = p.checkVariable(v)
	}
	p.ectx.Variables["var"] = cty.ObjectVal(vals)
	p.vars = decl
}

func (p *parser) variableBlock(b *hclsyntax.Block) *variable {
	name := b.Labels[0]
	where := fmt.Sprintf("variable %q", name)
	if !hclsyntax.ValidIdentifier(name) {
		p.fail(b.LabelRanges[0], fmt.Sprintf("invalid variable name %q", name), "a name starts with a letter and holds letters, digits, '_' and '-'")
		return nil
	}
	attrs, blocks := p.content(b.Body, schema{
		what:   where,
		attrs:  []string{"type", "default", "description", "sensitive"},
		blocks: []blockSpec{{name: "validation"}},
	})
	v := &variable{name: name, typ: cty.DynamicPseudoType, rng: b.TypeRange}
	if a := attrs["type"]; a != nil {
		t, diags := typeexpr.TypeConstraint(a.Expr)
		if diags.HasErrors() {
			p.addHCL(diags, a.Expr.Range())
		} else {
			v.typ = t
		}
	}
	if a := attrs["description"]; a != nil {
		if s, ok := p.strFn(a, where); ok {
			v.desc = s
		}
	}
	if a := attrs["sensitive"]; a != nil {
		if val, diags := a.Expr.Value(p.fnCtx()); diags.HasErrors() {
			p.addHCL(diags, a.Expr.Range())
		} else if bv, err := convert.Convert(val, cty.Bool); err != nil || bv.IsNull() {
			p.fail(a.Expr.Range(), fmt.Sprintf("sensitive in %s must be true or false", where), "")
		} else {
			v.sensitive = bv.True()
		}
		p.warn(a.NameRange, fmt.Sprintf("sensitive in %s is not part of Nomad 1.6.5's variable block", where),
			"berth accepts it and does nothing with it yet; Nomad 1.6.5 refuses the job file")
	}
	if a := attrs["default"]; a != nil {
		val, diags := a.Expr.Value(p.fnCtx())
		if diags.HasErrors() {
			p.addHCL(diags, a.Expr.Range())
		} else if cv, err := convert.Convert(val, v.typ); err != nil {
			p.fail(a.Expr.Range(), fmt.Sprintf("default of %s does not match its type %s: %v", where, typeexpr.TypeString(v.typ), err), "")
		} else {
			v.def, v.hasDef, v.defRng = cv, true, a.Expr.Range()
		}
	}
	for _, vb := range blocks["validation"] {
		w := "validation block in " + where
		va, _ := p.content(vb.Body, schema{what: w, attrs: []string{"condition", "error_message"}})
		c, m := va["condition"], va["error_message"]
		if c == nil || m == nil {
			p.fail(vb.TypeRange, fmt.Sprintf("%s needs condition and error_message", w), "")
			continue
		}
		for _, t := range hclsyntax.Variables(c.Expr) {
			if t.RootName() != "var" || len(t) < 2 || !isAttr(t[1], name) {
				p.fail(t.SourceRange(), fmt.Sprintf("the condition of %s may only refer to var.%s", w, name), "")
			}
		}
		v.checks = append(v.checks, varCheck{cond: c.Expr, msg: m.Expr, rng: vb.TypeRange})
	}
	return v
}

func isAttr(step hcl.Traverser, name string) bool {
	a, ok := step.(hcl.TraverseAttr)
	return ok && a.Name == name
}

// strFn reads a string attribute that may only use functions.
func (p *parser) strFn(a *hclsyntax.Attribute, where string) (string, bool) {
	v, diags := a.Expr.Value(p.fnCtx())
	if diags.HasErrors() {
		p.addHCL(diags, a.Expr.Range())
		return "", false
	}
	s, err := convert.Convert(v, cty.String)
	if err != nil || s.IsNull() {
		p.fail(a.Expr.Range(), fmt.Sprintf("%s in %s must be a string", a.Name, where), "")
		return "", false
	}
	return s.AsString(), true
}

// checkVariable converts a variable's value to its type and runs its
// validation blocks; it returns the value var.<name> has.
func (p *parser) checkVariable(v *variable) cty.Value {
	cv, err := convert.Convert(v.val, v.typ)
	if err != nil {
		p.fail(v.srcRng, fmt.Sprintf("invalid value for variable %q from %s: %v", v.name, v.source, err),
			fmt.Sprintf("its type is %s", typeexpr.TypeString(v.typ)))
		return cty.UnknownVal(v.typ)
	}
	for _, c := range v.checks {
		ctx := &hcl.EvalContext{Functions: p.ectx.Functions, Variables: map[string]cty.Value{"var": cty.ObjectVal(map[string]cty.Value{v.name: cv})}}
		res, diags := c.cond.Value(ctx)
		if diags.HasErrors() {
			p.addHCL(diags, c.cond.Range())
			continue
		}
		ok, err := convert.Convert(res, cty.Bool)
		if err != nil || ok.IsNull() || !ok.IsKnown() {
			p.fail(c.cond.Range(), fmt.Sprintf("the validation condition of variable %q is not a bool", v.name), "")
			continue
		}
		if ok.True() {
			continue
		}
		msg := "the value is not valid"
		if mv, diags := c.msg.Value(ctx); !diags.HasErrors() {
			if ms, err := convert.Convert(mv, cty.String); err == nil && !ms.IsNull() && ms.IsKnown() {
				msg = ms.AsString()
			}
		}
		p.fail(v.srcRng, fmt.Sprintf("invalid value for variable %q from %s: %s", v.name, v.source, msg),
			fmt.Sprintf("checked by the validation rule at %s", p.pos(c.rng)))
	}
	return cv
}

// rawValue turns a command-line or environment value into a cty value:
// a variable of a primitive type (or no type) takes it as a string, which
// converts to its number or bool; a collection or structural type parses
// it as an HCL expression ("[1, 2]", "{ a = 1 }"), as Nomad does.
func (p *parser) rawValue(v *variable, raw, source string) (cty.Value, bool) {
	if v.typ.IsPrimitiveType() || v.typ == cty.DynamicPseudoType {
		return cty.StringVal(raw), true
	}
	// The same limits as a file's: the value comes from an API client too.
	diags := hcllimit.Check([]byte("x = "+raw), source, false)
	var expr hclsyntax.Expression
	if !diags.HasErrors() {
		expr, diags = hclsyntax.ParseExpression([]byte(raw), source, hcl.InitialPos)
	}
	if !diags.HasErrors() {
		var val cty.Value
		val, diags = p.literal(expr)
		if !diags.HasErrors() {
			return val, true
		}
	}
	p.fail(v.rng, fmt.Sprintf("invalid value for variable %q from %s: %s", v.name, source, diags[0].Summary),
		fmt.Sprintf("%s; a value of type %s is written in HCL, e.g. '[\"a\", \"b\"]' or '{ k = \"v\" }'", diags[0].Detail, typeexpr.TypeString(v.typ)))
	return cty.NilVal, false
}

func (p *parser) envVars(decl map[string]*variable) {
	env := append([]string(nil), p.opts.Env...)
	sort.Strings(env)
	for _, kv := range env {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, VarEnvPrefix) {
			continue
		}
		name := strings.TrimPrefix(k, VarEnvPrefix)
		v := decl[name]
		if v == nil {
			continue // Nomad ignores NOMAD_VAR_ for undeclared names too
		}
		if cv, ok := p.rawValue(v, val, k); ok {
			v.val, v.set, v.source, v.srcRng = cv, true, k, v.rng
		}
	}
}

func (p *parser) argVars(decl map[string]*variable) {
	for _, arg := range p.opts.Vars {
		name, val, ok := strings.Cut(arg, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			p.fail(p.fileStart(), fmt.Sprintf("-var %q is not NAME=VALUE", arg), "write -var name=value")
			continue
		}
		v := decl[name]
		if v == nil {
			p.fail(p.fileStart(), fmt.Sprintf("-var %s: the job file declares no variable %q", arg, name),
				p.declareHint(name, decl))
			continue
		}
		if cv, ok := p.rawValue(v, val, "-var "+name); ok {
			v.val, v.set, v.source, v.srcRng = cv, true, "-var "+name, v.rng
		}
	}
}

func (p *parser) declareHint(name string, decl map[string]*variable) string {
	best, bestDist := "", 3
	names := make([]string, 0, len(decl))
	for n := range decl {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if d := editDistance(name, n); d < bestDist {
			best, bestDist = n, d
		}
	}
	hint := fmt.Sprintf("declare it with variable %q { type = string } in the job file", name)
	if best != "" {
		hint = fmt.Sprintf("did you mean %q? or %s", best, hint)
	}
	return hint
}

// VarFile is a -var-file's name (which says its format: JSON for *.json,
// HCL otherwise; and is used in positions) and its content.
type VarFile struct {
	Name string
	Src  []byte
}

// varFile applies a -var-file: HCL (name = value lines) or, for a .json
// name, a JSON object.
func (p *parser) varFile(path string, src []byte, decl map[string]*variable) {
	var (
		f     *hcl.File
		diags hcl.Diagnostics
	)
	isJSON := strings.EqualFold(filepath.Ext(path), ".json")
	if d := hcllimit.Check(src, path, isJSON); d.HasErrors() {
		p.addHCL(d, hcl.Range{Filename: path, Start: hcl.InitialPos, End: hcl.InitialPos})
		return
	}
	if isJSON {
		f, diags = hcljson.Parse(src, path)
	} else {
		f, diags = hclsyntax.ParseConfig(src, path, hcl.InitialPos)
	}
	if diags.HasErrors() {
		p.addHCL(diags, hcl.Range{Filename: path, Start: hcl.InitialPos, End: hcl.InitialPos})
		return
	}
	attrs, diags := f.Body.JustAttributes()
	if diags.HasErrors() {
		p.addHCL(diags, hcl.Range{Filename: path, Start: hcl.InitialPos, End: hcl.InitialPos})
		return
	}
	names := make([]string, 0, len(attrs))
	for n := range attrs {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return attrs[names[i]].Range.Start.Byte < attrs[names[j]].Range.Start.Byte })
	for _, n := range names {
		a := attrs[n]
		v := decl[n]
		if v == nil {
			p.fail(a.NameRange, fmt.Sprintf("-var-file %s sets %q, which the job file does not declare", path, n), p.declareHint(n, decl))
			continue
		}
		val, diags := p.literal(a.Expr)
		if diags.HasErrors() {
			p.addHCL(diags, a.Expr.Range())
			continue
		}
		v.val, v.set, v.source, v.srcRng = val, true, path, a.Expr.Range()
	}
}

// locals evaluates every locals block in dependency order, so a local may
// use another declared later, and sets local.* in p.ectx.
func (p *parser) locals(blocks []*hclsyntax.Block) {
	pending := map[string]*hclsyntax.Attribute{}
	var order []*hclsyntax.Attribute
	for _, b := range blocks {
		attrs, _ := p.content(b.Body, schema{what: "locals block", anyAttrs: true})
		for _, a := range sortedAttrMap(attrs) {
			if first, dup := pending[a.Name]; dup {
				p.fail(a.NameRange, fmt.Sprintf("duplicate local %q", a.Name), fmt.Sprintf("the first is at %s", p.pos(first.NameRange)))
				continue
			}
			pending[a.Name] = a
			order = append(order, a)
		}
	}
	done := map[string]cty.Value{}
	p.ectx.Variables["local"] = cty.EmptyObjectVal
	for len(pending) > 0 {
		progress := false
		for _, a := range order {
			if _, ok := pending[a.Name]; !ok || !localsReady(a, pending) {
				continue
			}
			delete(pending, a.Name)
			progress = true
			if v, ok := p.eval(a.Expr); ok {
				done[a.Name] = v
			} else {
				done[a.Name] = cty.DynamicVal
			}
			p.ectx.Variables["local"] = cty.ObjectVal(done)
		}
		if !progress {
			// A cycle: report each local left, at the reference that waits.
			for _, a := range order {
				if _, ok := pending[a.Name]; ok {
					p.fail(a.NameRange, fmt.Sprintf("local %q depends on itself through other locals", a.Name), "break the cycle")
				}
			}
			return
		}
	}
}

func localsReady(a *hclsyntax.Attribute, pending map[string]*hclsyntax.Attribute) bool {
	for _, t := range hclsyntax.Variables(a.Expr) {
		if t.RootName() != "local" || len(t) < 2 {
			continue
		}
		if at, ok := t[1].(hcl.TraverseAttr); ok {
			if _, wait := pending[at.Name]; wait {
				return false
			}
		}
	}
	return true
}
