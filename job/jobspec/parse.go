// Package jobspec parses and validates Nomad job files for berth.
//
// It reads Nomad 1.6.5's job language (HCL2 with variables, locals and
// Nomad's functions) and accepts what Nomad accepts: blocks that only mean
// something to a cluster, or need a service berth does not have, are
// accepted with one warning each. Whether this node can run the job
// (constraints, datacenters, node pool) is Placement's question, not
// validation's. Anything Nomad does not know is a file:line:col error:
// unknown blocks and attributes are never skipped silently. Runtime
// interpolations such as "${NOMAD_ALLOC_ID}" are kept as literal text, as
// Nomad does; the runner resolves them with Interpolate.
package jobspec

import (
	"context"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// NodeAttrs are the node's attributes by their interpolation name without
// "${}": "attr.unique.hostname", "attr.kernel.name", "node.unique.name",
// "meta.rack", ...
type NodeAttrs map[string]string

// ParseOptions carries what the caller knows about the node it runs on.
// Nil fields skip the matching check.
type ParseOptions struct {
	// Node is used to evaluate constraints; nil skips evaluation (syntax and
	// operators are still checked).
	Node NodeAttrs
	// Drivers maps each known driver to a validator of its config block.
	// A nil validator accepts any config.
	Drivers map[string]func(config map[string]any) error
	// Users maps a driver to a check of a task's user on this node (it
	// exists, it is not denied); drivers without one are not checked.
	Users map[string]func(user string) error
	// Network is called with <name> for network mode "cni/<name>".
	Network func(name string) error
	// Resources is what the node offers beyond its attributes (host
	// volumes, CNI networks that map ports); what the job asks and the
	// node lacks is a warning (run refuses it). Nil skips the check.
	Resources *NodeResources
	// Vars are -var NAME=VALUE arguments, in order (a later one wins).
	Vars []string
	// VarFiles are -var-file paths, HCL or (named *.json) JSON, in order.
	VarFiles []string
	// VarFileSources are -var-files already read (what a client sent the
	// agent), applied after VarFiles, in order.
	VarFileSources []VarFile
	// Env is searched for NOMAD_VAR_<name>=<value>; the caller passes
	// os.Environ() to honour the process environment, nil for none.
	Env []string
	// BaseDir is where file() and the other filesystem functions resolve
	// relative paths, as Nomad: the working directory when empty. A path
	// missing there is looked up next to the job file.
	BaseDir string
	// AllowFS enables the filesystem functions (file, fileexists, ...),
	// as Nomad's CLI does; without it they are errors, as in Nomad's API.
	AllowFS bool
	// EvalTimeout bounds the time the job file's evaluation may take;
	// 0 is DefaultEvalTimeout. The other bounds (MaxEvalElements,
	// MaxEvalBytes) are fixed.
	EvalTimeout time.Duration
	// MaxKillTimeout is the node's max_kill_timeout: a longer kill_timeout
	// is a warning (the runner cuts it). 0 means no limit.
	MaxKillTimeout time.Duration
	// NodeWarnings makes what only this node decides a warning instead of
	// an error: a driver it does not have, a task user it lacks or denies,
	// a CNI network missing from its config dir, a template it cannot
	// render (Consul, Vault, Nomad variables), a driver config its driver
	// refuses. Nomad's `job validate` knows no node and accepts them:
	// berth's validate sets it; run, plan and the agent leave it false, so
	// the job is refused, naming what to install or configure, before
	// anything is created.
	NodeWarnings bool
	// DriverHint says what to install or configure on this node for a
	// driver it does not have; nil names this node's drivers only.
	DriverHint func(driver string) string
}

// ParseFile reads and parses one job file; see Parse.
func ParseFile(path string, opts ParseOptions) (*Job, error) {
	return ParseFileContext(context.Background(), path, opts)
}

// ParseFileContext is ParseFile whose evaluation stops when ctx ends.
func ParseFileContext(ctx context.Context, path string, opts ParseOptions) (*Job, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read job file %s: %w", path, err)
	}
	return ParseContext(ctx, src, path, opts)
}

// Parse parses and validates a job. filename is used in positions. On any
// problem in the file it returns a Diagnostics error listing all of them,
// which matches ErrInvalidJob.
func Parse(src []byte, filename string, opts ParseOptions) (*Job, error) {
	return ParseContext(context.Background(), src, filename, opts)
}

// ParseContext is Parse whose evaluation stops, with a positioned error,
// when ctx ends (an API client that left) or its budget is spent: a
// deadline (opts.EvalTimeout), MaxEvalElements and MaxEvalBytes.
func ParseContext(ctx context.Context, src []byte, filename string, opts ParseOptions) (*Job, error) {
	if filename == "" {
		filename = "<input>"
	}
	base := opts.BaseDir
	if base == "" {
		base, _ = os.Getwd()
	}
	jobDir := ""
	if filename != "<input>" {
		if abs, err := filepath.Abs(filename); err == nil {
			jobDir = filepath.Dir(abs)
		}
	}
	b := newBudget(ctx, opts.EvalTimeout)
	p := &parser{
		filename: filename,
		src:      src,
		opts:     opts,
		budget:   b,
		ectx: &hcl.EvalContext{
			Functions: functions(base, jobDir, opts.AllowFS, b),
			Variables: map[string]cty.Value{"var": cty.EmptyObjectVal, "local": cty.EmptyObjectVal},
		},
		now:    time.Now(),
		jobDir: jobDir,
	}
	if err := CheckSource(src, filename); err != nil {
		return nil, err
	}
	f, hdiags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if hdiags.HasErrors() {
		p.addHCL(hdiags, p.fileStart())
		return nil, p.diags.sorted()
	}
	body, ok := f.Body.(*hclsyntax.Body)
	if !ok {
		p.fail(p.fileStart(), "not a native HCL file", "")
		return nil, p.diags.sorted()
	}
	if p.checkNumbers(body); len(p.diags) > 0 {
		return nil, p.diags.sorted()
	}
	injectBudget(body)
	job := p.file(body)
	if b.err != nil && !b.reported {
		// A limit reached inside try() or can(), which turned it into a
		// value: the job is still refused.
		p.failBudget(p.fileStart())
	}
	if b.reported {
		// What failed after the limit (a group whose attributes were
		// not evaluated, a job with no group left) is its consequence.
		p.diags = p.diags[:b.diagIndex+1]
		return nil, p.diags.sorted()
	}
	if len(p.diags) > 0 || job == nil {
		if len(p.diags) == 0 {
			p.fail(p.fileStart(), "invalid job", "")
		}
		return nil, p.diags.sorted()
	}
	job.Warnings = p.warns.sorted()
	if opts.AllowFS {
		job.Dir = jobDir
	}
	return job, nil
}

type parser struct {
	filename string
	src      []byte
	opts     ParseOptions
	budget   *budget
	diags    Diagnostics
	warns    Diagnostics
	ectx     *hcl.EvalContext
	now      time.Time
	vars     map[string]*variable
	// jobDir is the job file's directory ("" for text without a file).
	jobDir string
	// providerNoted: the note about services without provider was given.
	providerNoted bool
	// The job's vault and reschedule blocks, which its groups inherit.
	jobVault   *Vault
	jobResched *hclsyntax.Block
	// jobCanary is the job's update canary, which its groups inherit
	// (nil: none).
	jobCanary *int
	// expanded: bodies whose dynamic blocks were expanded.
	expanded map[*hclsyntax.Body]bool
}

// failAt and warnAt report at a position already recorded in the job.
func (p *parser) failAt(pos Pos, summary, detail string) {
	p.diags = append(p.diags, Diagnostic{File: pos.File, Line: pos.Line, Column: pos.Column, Summary: clip(summary), Detail: clip(detail)})
}

func (p *parser) warnAt(pos Pos, summary, detail string) {
	p.warns = append(p.warns, Diagnostic{File: pos.File, Line: pos.Line, Column: pos.Column, Summary: summary, Detail: detail})
}

// failBudget reports the limit the budget reached, at r.
func (p *parser) failBudget(r hcl.Range) {
	p.budget.reported, p.budget.diagIndex = true, len(p.diags)
	p.fail(r, "evaluation limit reached", strings.TrimPrefix(p.budget.err.Error(), ErrEvalLimit.Error()+": "))
}

func (p *parser) fileStart() hcl.Range {
	start := hcl.Pos{Line: 1, Column: 1}
	return hcl.Range{Filename: p.filename, Start: start, End: start}
}

func (p *parser) pos(r hcl.Range) Pos {
	file := r.Filename
	if file == "" {
		file = p.filename
	}
	return Pos{File: file, Line: r.Start.Line, Column: r.Start.Column}
}

func (p *parser) diag(r hcl.Range, summary, detail string) Diagnostic {
	pos := p.pos(r)
	return Diagnostic{File: pos.File, Line: pos.Line, Column: pos.Column, Summary: summary, Detail: detail}
}

func (p *parser) fail(r hcl.Range, summary, detail string) {
	p.diags = append(p.diags, p.diag(r, clip(summary), clip(detail)))
}

// clip keeps a diagnostic readable when it quotes a huge value from the file.
func clip(s string) string {
	const maxLen = 600
	if len(s) <= maxLen {
		return s
	}
	return strings.ToValidUTF8(s[:maxLen], "") + "..."
}

// Numbers beyond float64's range are useless in a job and expensive: cty
// turns them into decimal text (string conversion, templates) in time that
// grows with the exponent, so "1e99999999" would stall the parser.
const maxBinaryExp = 1100

// checkNumbers rejects such number literals before anything evaluates them.
func (p *parser) checkNumbers(body *hclsyntax.Body) {
	hclsyntax.VisitAll(body, func(n hclsyntax.Node) hcl.Diagnostics {
		lit, ok := n.(*hclsyntax.LiteralValueExpr)
		if !ok || lit.Val.Type() != cty.Number || lit.Val.IsNull() || !lit.Val.IsKnown() {
			return nil
		}
		if !numberInRange(lit.Val) {
			p.fail(lit.SrcRange, fmt.Sprintf("number %s is out of range", clipNum(p.source(lit.SrcRange))),
				"numbers must fit a 64-bit float (about ±1.8e308)")
		}
		return nil
	})
}

func numberInRange(v cty.Value) bool {
	bf := v.AsBigFloat()
	if bf.IsInf() {
		return false
	}
	if bf.Sign() == 0 {
		return true
	}
	exp := bf.MantExp(nil)
	return exp > -maxBinaryExp && exp < maxBinaryExp
}

func clipNum(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

func (p *parser) warn(r hcl.Range, summary, detail string) {
	p.warns = append(p.warns, p.diag(r, summary, detail))
}

// addHCL keeps HCL's own errors, which are good, with our position format.
// Once the budget is spent, the first error says which limit was reached
// and the others, its consequences, are dropped.
func (p *parser) addHCL(diags hcl.Diagnostics, fallback hcl.Range) {
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		if p.budget.err != nil {
			if !p.budget.reported {
				r := fallback
				if d.Subject != nil {
					r = *d.Subject
				}
				p.failBudget(r)
			}
			return
		}
		r := fallback
		if d.Subject != nil {
			r = *d.Subject
		}
		p.fail(r, d.Summary, d.Detail)
	}
}

// schema lists what a block may contain. Nomad rejects anything else, and
// so do we: a misspelt field silently ignored is a job that runs wrongly.
type schema struct {
	what     string // "task \"web\"", for messages
	attrs    []string
	blocks   []blockSpec
	anyAttrs bool // meta and env blocks: any attribute name is a key
	// topLevel: the file's body, read before its variables, where a
	// dynamic block is not expanded.
	topLevel bool
}

type blockSpec struct {
	name   string
	label  string // "" for unlabelled blocks, else what the label names
	single bool
}

func (s schema) block(name string) *blockSpec {
	for i := range s.blocks {
		if s.blocks[i].name == name {
			return &s.blocks[i]
		}
	}
	return nil
}

func (s schema) valid() string {
	var parts []string
	if len(s.attrs) > 0 {
		parts = append(parts, "valid attributes: "+strings.Join(sortedCopy(s.attrs), ", "))
	}
	if len(s.blocks) > 0 {
		names := make([]string, len(s.blocks))
		for i, b := range s.blocks {
			names[i] = b.name
		}
		parts = append(parts, "valid blocks: "+strings.Join(sortedCopy(names), ", "))
	}
	if len(parts) == 0 {
		return "this block takes no attributes or blocks"
	}
	return strings.Join(parts, "; ")
}

// content checks a body against a schema and returns its attributes by
// name and its well-formed blocks by type, both in source order.
func (p *parser) content(b *hclsyntax.Body, s schema) (map[string]*hclsyntax.Attribute, map[string][]*hclsyntax.Block) {
	if !s.anyAttrs && !s.topLevel {
		p.expandDynamic(b)
	}
	attrs := make(map[string]*hclsyntax.Attribute)
	for _, a := range sortedAttrs(b) {
		if s.anyAttrs || slices.Contains(s.attrs, a.Name) {
			attrs[a.Name] = a
			continue
		}
		if s.block(a.Name) != nil {
			p.fail(a.NameRange, fmt.Sprintf("%q in %s is a block, not an attribute", a.Name, s.what),
				fmt.Sprintf("write %s { ... } without \"=\"", a.Name))
			continue
		}
		p.fail(a.NameRange, fmt.Sprintf("unknown attribute %q in %s", a.Name, s.what), suggest(a.Name, s))
	}
	blocks := make(map[string][]*hclsyntax.Block)
	for _, blk := range b.Blocks {
		spec := s.block(blk.Type)
		if spec == nil && blk.Type == "dynamic" && s.topLevel {
			p.fail(blk.TypeRange, fmt.Sprintf("a dynamic block may not be at the top of %s", s.what),
				"dynamic blocks generate blocks inside the job block")
			continue
		}
		if spec == nil {
			if s.anyAttrs || slices.Contains(s.attrs, blk.Type) {
				p.fail(blk.TypeRange, fmt.Sprintf("%q in %s is an attribute, not a block", blk.Type, s.what),
					fmt.Sprintf("write %s = ...", blk.Type))
				continue
			}
			p.fail(blk.TypeRange, fmt.Sprintf("unknown block %q in %s", blk.Type, s.what), suggest(blk.Type, s))
			continue
		}
		if !p.checkLabels(blk, *spec, s.what) {
			continue
		}
		if spec.single && len(blocks[blk.Type]) > 0 {
			first := blocks[blk.Type][0]
			p.fail(blk.TypeRange, fmt.Sprintf("duplicate %s block in %s", blk.Type, s.what),
				fmt.Sprintf("only one is allowed; the first is at %s", p.pos(first.TypeRange)))
			continue
		}
		blocks[blk.Type] = append(blocks[blk.Type], blk)
	}
	return attrs, blocks
}

func (p *parser) checkLabels(blk *hclsyntax.Block, spec blockSpec, where string) bool {
	switch {
	case spec.label == "" && len(blk.Labels) > 0:
		p.fail(blk.LabelRanges[0], fmt.Sprintf("%s block in %s takes no label, got %q", blk.Type, where, blk.Labels[0]),
			fmt.Sprintf("write %s { ... }", blk.Type))
		return false
	case spec.label != "" && len(blk.Labels) == 0:
		p.fail(blk.TypeRange, fmt.Sprintf("%s block in %s is missing its %s label", blk.Type, where, spec.label),
			fmt.Sprintf("write %s \"<%s>\" { ... }", blk.Type, spec.label))
		return false
	case spec.label != "" && len(blk.Labels) > 1:
		p.fail(blk.LabelRanges[1], fmt.Sprintf("%s block in %s takes one label (%s), got %d", blk.Type, where, spec.label, len(blk.Labels)),
			fmt.Sprintf("write %s \"<%s>\" { ... }", blk.Type, spec.label))
		return false
	case spec.label != "" && strings.TrimSpace(blk.Labels[0]) == "":
		p.fail(blk.LabelRanges[0], fmt.Sprintf("%s block in %s has an empty %s", blk.Type, where, spec.label), "")
		return false
	}
	return true
}

func sortedAttrs(b *hclsyntax.Body) []*hclsyntax.Attribute {
	out := make([]*hclsyntax.Attribute, 0, len(b.Attributes))
	for _, a := range b.Attributes {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SrcRange.Start.Byte < out[j].SrcRange.Start.Byte })
	return out
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	sort.Strings(out)
	return out
}

// suggest names the closest valid field when the user probably misspelt
// one, then lists all of them.
func suggest(name string, s schema) string {
	best, bestDist := "", 3
	cands := slices.Clone(s.attrs)
	for _, b := range s.blocks {
		cands = append(cands, b.name)
	}
	for _, c := range cands {
		if d := editDistance(name, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	if best != "" {
		return fmt.Sprintf("did you mean %q? %s", best, s.valid())
	}
	return s.valid()
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// value evaluates an attribute. A null value counts as not set.
func (p *parser) value(a *hclsyntax.Attribute) (cty.Value, bool) {
	if a == nil {
		return cty.NilVal, false
	}
	v, ok := p.eval(a.Expr)
	if !ok || v.IsNull() {
		return cty.NilVal, false
	}
	return v, true
}

func (p *parser) str(a *hclsyntax.Attribute, where string) (string, bool) {
	v, ok := p.value(a)
	if !ok {
		return "", false
	}
	s, err := convert.Convert(v, cty.String)
	if err != nil {
		p.fail(a.Expr.Range(), fmt.Sprintf("%s in %s must be a string, got %s", a.Name, where, v.Type().FriendlyName()), "")
		return "", false
	}
	return s.AsString(), true
}

func (p *parser) boolean(a *hclsyntax.Attribute, where string) (bool, bool) {
	v, ok := p.value(a)
	if !ok {
		return false, false
	}
	b, err := convert.Convert(v, cty.Bool)
	if err != nil {
		p.fail(a.Expr.Range(), fmt.Sprintf("%s in %s must be true or false, got %s", a.Name, where, describe(v)), "")
		return false, false
	}
	return b.True(), true
}

// integer reads a whole number in [lo, hi].
func (p *parser) integer(a *hclsyntax.Attribute, where string, lo, hi int64) (int, bool) {
	v, ok := p.value(a)
	if !ok {
		return 0, false
	}
	n, err := convert.Convert(v, cty.Number)
	if err != nil {
		p.fail(a.Expr.Range(), fmt.Sprintf("%s in %s must be a number, got %s", a.Name, where, describe(v)), "")
		return 0, false
	}
	bf := n.AsBigFloat()
	text := numText(n)
	if !bf.IsInt() {
		p.fail(a.Expr.Range(), fmt.Sprintf("%s in %s must be a whole number, got %s", a.Name, where, text), "")
		return 0, false
	}
	i, acc := bf.Int64()
	switch {
	case acc != big.Exact && bf.Sign() < 0, acc == big.Exact && i < lo:
		p.fail(a.Expr.Range(), fmt.Sprintf("%s must be >= %d, got %s", a.Name, lo, text), "in "+where)
		return 0, false
	case acc != big.Exact, i > hi:
		p.fail(a.Expr.Range(), fmt.Sprintf("%s must be <= %d, got %s", a.Name, hi, text), "in "+where)
		return 0, false
	}
	return int(i), true
}

func (p *parser) number(a *hclsyntax.Attribute, where string) (float64, bool) {
	v, ok := p.value(a)
	if !ok {
		return 0, false
	}
	n, err := convert.Convert(v, cty.Number)
	if err != nil {
		p.fail(a.Expr.Range(), fmt.Sprintf("%s in %s must be a number, got %s", a.Name, where, describe(v)), "")
		return 0, false
	}
	f, _ := n.AsBigFloat().Float64()
	return f, true
}

func (p *parser) duration(a *hclsyntax.Attribute, where string) (time.Duration, bool) {
	s, ok := p.str(a, where)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		p.fail(a.Expr.Range(), fmt.Sprintf("invalid duration %q for %s in %s", s, a.Name, where),
			"use a Go duration such as \"30s\", \"5m\" or \"1h30m\"")
		return 0, false
	}
	if d < 0 {
		p.fail(a.Expr.Range(), fmt.Sprintf("%s in %s must not be negative, got %s", a.Name, where, s), "")
		return 0, false
	}
	return d, true
}

func (p *parser) strList(a *hclsyntax.Attribute, where string) ([]string, bool) {
	v, ok := p.value(a)
	if !ok {
		return nil, false
	}
	l, err := convert.Convert(v, cty.List(cty.String))
	if err != nil {
		p.fail(a.Expr.Range(), fmt.Sprintf("%s in %s must be a list of strings, got %s", a.Name, where, describe(v)),
			fmt.Sprintf("write %s = [\"a\", \"b\"]", a.Name))
		return nil, false
	}
	out := make([]string, 0, l.LengthInt())
	for it := l.ElementIterator(); it.Next(); {
		_, ev := it.Element()
		if ev.IsNull() {
			p.fail(a.Expr.Range(), fmt.Sprintf("%s in %s must not contain null", a.Name, where), "")
			return nil, false
		}
		out = append(out, ev.AsString())
	}
	return out, true
}

func (p *parser) strMap(a *hclsyntax.Attribute, where string) (map[string]string, bool) {
	v, ok := p.value(a)
	if !ok {
		return nil, false
	}
	m, err := convert.Convert(v, cty.Map(cty.String))
	if err != nil {
		p.fail(a.Expr.Range(), fmt.Sprintf("%s in %s must be a map of strings, got %s", a.Name, where, describe(v)),
			fmt.Sprintf("write %s = { key = \"value\" }", a.Name))
		return nil, false
	}
	out := make(map[string]string, m.LengthInt())
	for it := m.ElementIterator(); it.Next(); {
		k, ev := it.Element()
		if ev.IsNull() {
			p.fail(a.Expr.Range(), fmt.Sprintf("%s in %s: key %q is null", a.Name, where, k.AsString()), "")
			return nil, false
		}
		out[k.AsString()] = ev.AsString()
	}
	return out, true
}

// stringMap reads a field that Nomad accepts both as an attribute
// (meta = { k = "v" }) and as a block (meta { k = "v" }).
func (p *parser) stringMap(name string, attrs map[string]*hclsyntax.Attribute, blocks map[string][]*hclsyntax.Block, where string) (map[string]string, hcl.Range, bool) {
	a := attrs[name]
	bs := blocks[name]
	switch {
	case a != nil && len(bs) > 0:
		p.fail(bs[0].TypeRange, fmt.Sprintf("%s in %s is set both as an attribute and as a block", name, where),
			fmt.Sprintf("keep one; the attribute is at %s", p.pos(a.NameRange)))
		return nil, hcl.Range{}, false
	case a != nil:
		m, ok := p.strMap(a, where)
		return m, a.Expr.Range(), ok
	case len(bs) > 0:
		blk := bs[0]
		inner := fmt.Sprintf("%s block in %s", name, where)
		battrs, _ := p.content(blk.Body, schema{what: inner, anyAttrs: true})
		out := make(map[string]string, len(battrs))
		ok := true
		for _, ba := range sortedAttrMap(battrs) {
			n := len(p.diags)
			if s, sOK := p.str(ba, inner); sOK {
				out[ba.Name] = s
			}
			ok = ok && len(p.diags) == n
		}
		return out, blk.TypeRange, ok
	}
	return nil, hcl.Range{}, true
}

func sortedAttrMap(m map[string]*hclsyntax.Attribute) []*hclsyntax.Attribute {
	out := make([]*hclsyntax.Attribute, 0, len(m))
	for _, a := range m {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SrcRange.Start.Byte < out[j].SrcRange.Start.Byte })
	return out
}

// describe names a value for an error: its type, and the value itself when
// it is a short scalar.
func describe(v cty.Value) string {
	if v.IsNull() {
		return "null"
	}
	if !v.IsKnown() {
		return v.Type().FriendlyName()
	}
	switch v.Type() {
	case cty.String:
		s := v.AsString()
		if len(s) > 40 {
			s = s[:40] + "..."
		}
		return fmt.Sprintf("string %q", s)
	case cty.Number:
		return "number " + numText(v)
	case cty.Bool:
		return fmt.Sprintf("bool %t", v.True())
	}
	return v.Type().FriendlyName()
}

// numText formats a number for a message without big.Float's decimal
// conversion, which is slow for huge exponents (see checkNumbers).
func numText(v cty.Value) string {
	bf := v.AsBigFloat()
	if i, acc := bf.Int64(); acc == big.Exact {
		return strconv.FormatInt(i, 10)
	}
	f, _ := bf.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}
