package jobspec

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"

	"github.com/berth/berth/internal/hcllimit"
)

// The evaluation budget of one parse. Job files are small; these bounds
// are far above what a real one uses and far below what would hurt the
// process that parses it (a root agent parses what any token holder
// sends). setproduct(range(1000), range(1000), range(1000)) asked go-cty
// for 3e9 values and killed the agent; a yamldecode alias bomb or a for
// expression nested three deep over a 1,000-element list does as much.
const (
	// DefaultEvalTimeout bounds the time one job file's evaluation
	// (variables, locals, every attribute) may take.
	DefaultEvalTimeout = time.Second
	// MaxEvalElements bounds the collection elements that functions and
	// for expressions may produce while one job file is evaluated, in
	// all (about 150 bytes of memory each; an iteration of a for
	// expression counts one and allocates several times that).
	MaxEvalElements = 100_000
	// MaxEvalBytes bounds the string bytes functions and templates may
	// produce while one job file is evaluated, in all.
	MaxEvalBytes = 16 << 20
	// MaxEvalLength bounds one collection's length (hcllimit.MaxItems
	// for literals): go-cty converts a tuple or an object to a list or
	// a map (every function argument of a list type, every list field)
	// in time that grows with the square of its length, and cannot be
	// interrupted.
	MaxEvalLength = hcllimit.MaxItems
)

// ErrEvalLimit is matched (errors.Is) by the error a function returns
// when the evaluation budget is spent.
var ErrEvalLimit = errors.New("evaluation limit reached")

// budget is what is left of one parse's evaluation budget. The functions
// of the job language, every iteration of a for expression and every
// interpolation in a template charge it before they build anything, so a
// value too large is refused before it exists; the first limit reached
// sticks (err), and every later charge fails at once.
type budget struct {
	ctx      context.Context
	deadline time.Time
	timeout  time.Duration
	elems    int64
	bytes    int64
	err      error
	// reported: a diagnostic already says so (later failures are its
	// consequences and are not reported again); diagIndex is its index
	// in the parser's diagnostics.
	reported  bool
	diagIndex int
	checks    int
}

func newBudget(ctx context.Context, timeout time.Duration) *budget {
	if ctx == nil {
		ctx = context.Background()
	}
	if timeout <= 0 {
		timeout = DefaultEvalTimeout
	}
	return &budget{ctx: ctx, deadline: time.Now().Add(timeout), timeout: timeout, elems: MaxEvalElements, bytes: MaxEvalBytes}
}

func (b *budget) fail(format string, args ...any) error {
	if b.err == nil {
		b.err = fmt.Errorf("%w: "+format, append([]any{ErrEvalLimit}, args...)...)
	}
	return b.err
}

// check fails once the deadline passed or the caller gave up (an API
// client that left).
func (b *budget) check() error {
	if b.err != nil {
		return b.err
	}
	if err := b.ctx.Err(); err != nil {
		return b.fail("evaluation stopped: %v", context.Cause(b.ctx))
	}
	if time.Now().After(b.deadline) {
		return b.fail("evaluating the job file took longer than %s (a fixed limit); simplify its expressions", b.timeout)
	}
	return nil
}

// charge takes elems collection elements and n string bytes from what is
// left, or fails without taking anything.
func (b *budget) charge(elems, n int64) error {
	if err := b.check(); err != nil {
		return err
	}
	if elems > b.elems {
		return b.fail("the job file's expressions would build more than %d collection elements in all (a fixed limit); build large collections outside the job file", MaxEvalElements)
	}
	if n > b.bytes {
		return b.fail("the job file's expressions would build more than %d bytes of strings in all (a fixed limit); keep large text outside the job file", MaxEvalBytes)
	}
	b.elems -= elems
	b.bytes -= n
	return nil
}

// chargeValue charges v's size as a tree: a value shared at several
// places counts at each, since whatever reads it later (conversions, the
// driver's config, JSON) copies it at each. The walk stops as soon as
// the budget is spent, so it costs at most what is left.
func (b *budget) chargeValue(v cty.Value) error {
	elems, n, ok := b.measure(v, b.elems, b.bytes)
	switch {
	case b.err != nil:
		return b.err
	case !ok:
		return b.charge(b.elems+1, 0)
	}
	return b.charge(elems, n)
}

// checkLength fails for a collection longer than MaxEvalLength.
func (b *budget) checkLength(v cty.Value) error {
	if !v.IsKnown() || v.IsNull() {
		return nil
	}
	t := v.Type()
	if !t.IsCollectionType() && !t.IsTupleType() && !t.IsObjectType() {
		return nil
	}
	if n := v.LengthInt(); n > MaxEvalLength {
		return b.fail("a collection of %d elements; one collection holds at most %d (a fixed limit: converting it takes time that grows with the square of its length); keep large data outside the job file", n, MaxEvalLength)
	}
	return nil
}

// measure returns v's elements and string bytes, or ok false as soon as
// either is above its max (or the budget's time is up).
func (b *budget) measure(v cty.Value, maxElems, maxBytes int64) (elems, n int64, ok bool) {
	stack := []cty.Value{v}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if b.checks++; b.checks%4096 == 0 && b.check() != nil {
			return 0, 0, false
		}
		if v.IsNull() || !v.IsKnown() {
			continue
		}
		t := v.Type()
		switch {
		case t == cty.String:
			n += int64(len(v.AsString()))
		case t.IsListType() || t.IsTupleType() || t.IsSetType() || t.IsMapType() || t.IsObjectType():
			if b.checkLength(v) != nil {
				return 0, 0, false
			}
			elems += int64(v.LengthInt())
			if elems > maxElems {
				return 0, 0, false
			}
			for it := v.ElementIterator(); it.Next(); {
				_, ev := it.Element()
				stack = append(stack, ev)
			}
		}
		if n > maxBytes {
			return 0, 0, false
		}
	}
	return elems, n, true
}

// budgetFuncName is the function injected into for expressions and
// templates. A job file may call it too: it only charges the budget.
const budgetFuncName = "__berth_budget"

// budgetFunc returns its argument unchanged after charging one element
// and, for a string, its bytes, and checking a collection's length: it is
// what a for expression's every iteration and collection and a
// template's every interpolation call.
func (b *budget) budgetFunc() function.Function {
	return function.New(&function.Spec{
		Params: []function.Parameter{{
			Name: "v", Type: cty.DynamicPseudoType,
			AllowNull: true, AllowUnknown: true, AllowDynamicType: true, AllowMarked: true,
		}},
		Type: func(args []cty.Value) (cty.Type, error) { return args[0].Type(), nil },
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			if err := b.checkLength(args[0]); err != nil {
				return cty.NilVal, err
			}
			var n int64
			if v := args[0]; v.IsKnown() && !v.IsNull() && v.Type() == cty.String {
				n = int64(len(v.AsString()))
			}
			if err := b.charge(1, n); err != nil {
				return cty.NilVal, err
			}
			return args[0], nil
		},
	})
}

// injectBudget makes every for expression charge the budget once per
// element (its condition becomes __berth_budget(cond), or
// __berth_budget(true)) and every interpolation in a template charge
// its string: the two ways a job file builds large values without
// calling a function. HCL evaluates expressions by walking them and has
// no hook; this rewrite adds one, and keeps each expression's range, so
// errors point where they did.
func injectBudget(n hclsyntax.Node) hcl.Diagnostics {
	return hclsyntax.VisitAll(n, func(n hclsyntax.Node) hcl.Diagnostics {
		switch e := n.(type) {
		case *hclsyntax.FunctionCallExpr:
			if e.Name == budgetFuncName {
				return nil
			}
		case *hclsyntax.ForExpr:
			cond := e.CondExpr
			if cond == nil {
				cond = &hclsyntax.LiteralValueExpr{Val: cty.True, SrcRange: e.OpenRange}
			}
			if !isBudgetCall(cond) {
				e.CondExpr = budgetCall(cond)
			}
			// The collection too: what the for expression builds is as
			// long as what it goes over.
			if !isBudgetCall(e.CollExpr) {
				e.CollExpr = budgetCall(e.CollExpr)
			}
		case *hclsyntax.TemplateExpr:
			for i, part := range e.Parts {
				if _, lit := part.(*hclsyntax.LiteralValueExpr); !lit && !isBudgetCall(part) {
					e.Parts[i] = budgetCall(part)
				}
			}
		}
		return nil
	})
}

func budgetCall(e hclsyntax.Expression) *hclsyntax.FunctionCallExpr {
	r := e.Range()
	return &hclsyntax.FunctionCallExpr{
		Name: budgetFuncName, Args: []hclsyntax.Expression{e},
		NameRange: r, OpenParenRange: r, CloseParenRange: r,
	}
}

func isBudgetCall(e hclsyntax.Expression) bool {
	c, ok := e.(*hclsyntax.FunctionCallExpr)
	return ok && c.Name == budgetFuncName
}

// bigCount is |a| as an int64 when it fits, else max.
func bigCount(f *big.Float, max int64) int64 {
	if f.IsInf() {
		return max
	}
	f = new(big.Float).Abs(f)
	if f.Cmp(new(big.Float).SetInt64(max)) >= 0 {
		return max
	}
	i, _ := f.Int64()
	return i
}
