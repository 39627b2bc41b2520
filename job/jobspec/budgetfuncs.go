package jobspec

import (
	"fmt"
	"math"
	"math/big"
	"strings"

	ctyyaml "github.com/zclconf/go-cty-yaml"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"

	"github.com/berth/berth/internal/hcllimit"
)

// Bounds of single functions whose cost is not the size of what they
// return.
const (
	// maxBcryptCost: each step doubles bcrypt's time; 12 takes about a
	// quarter of a second, 31 would take days.
	maxBcryptCost = 12
	// maxParseIntLen: a number beyond float64's range is refused anyway
	// (checkNumbers), so longer digit strings are only a cost.
	maxParseIntLen = 1100
	// maxDistinct bounds distinct's list: go-cty compares each element
	// with every one kept, in time that grows with the square (900
	// elements took 0.7 s).
	maxDistinct = 500
	// maxRSAKeyLen bounds rsadecrypt's PEM key (8192-bit keys are about
	// 6.5 KiB): decryption time grows with the cube of the key size.
	maxRSAKeyLen = 16 << 10
)

// estimate returns an upper bound of what a call will build, from its
// arguments, before it runs; an error refuses the call.
type estimate func(b *budget, args []cty.Value) (elems, bytes int64, err error)

// estimates are the functions whose result can be far larger than their
// arguments (or whose cost is not their result): each is charged before
// it runs. Every other function is charged the size of its result after
// it ran, which is as large as its arguments at most.
var estimates = map[string]estimate{
	"range":         estimateRange,
	"setproduct":    estimateSetProduct,
	"flatten":       estimateFlatten,
	"format":        estimateFormat,
	"formatlist":    estimateFormatList,
	"indent":        estimateIndent,
	"join":          estimateJoin,
	"replace":       estimateReplace,
	"regex_replace": estimateRegexReplace,
	"jsonencode":    estimateEncode,
	"yamlencode":    estimateEncode,
	"jsondecode":    checkJSONDecode,
	"yamldecode":    checkYAMLDecode,
	"bcrypt":        checkBcrypt,
	"parseint":      checkParseInt,
	"rsadecrypt":    checkRSADecrypt,
	"distinct":      checkDistinct,
}

// postCharged lists the estimated functions whose result is still
// measured afterwards: the decoders, whose input says little about it
// (a YAML alias bomb).
var postCharged = map[string]bool{"jsondecode": true, "yamldecode": true}

// budgeted wraps every function of the table so that it first checks the
// deadline and the caller's context, then charges the budget (before the
// call when an estimate exists, after it otherwise). try and can are
// left alone: they only evaluate expressions whose calls are budgeted.
func budgeted(fns map[string]function.Function, b *budget) map[string]function.Function {
	out := make(map[string]function.Function, len(fns)+1)
	for name, f := range fns {
		if name == "try" || name == "can" {
			out[name] = f
			continue
		}
		out[name] = wrapFunc(name, f, b)
	}
	out[budgetFuncName] = b.budgetFunc()
	return out
}

func wrapFunc(name string, f function.Function, b *budget) function.Function {
	est := estimates[name]
	post := est == nil || postCharged[name]
	return function.New(&function.Spec{
		Params:   f.Params(),
		VarParam: f.VarParam(),
		Type: func(args []cty.Value) (cty.Type, error) {
			// Some functions do their work already to know their type
			// (flatten and concat of tuples, the decoders): the estimate
			// is checked first, and charged when the call runs.
			if est != nil && allKnown(args) {
				elems, n, err := est(b, args)
				if err != nil {
					return cty.NilType, err
				}
				if elems > b.elems || n > b.bytes {
					return cty.NilType, b.charge(elems, n)
				}
			}
			return f.ReturnTypeForValues(args)
		},
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			if err := b.charge(1, 0); err != nil {
				return cty.NilVal, err
			}
			if est != nil && allKnown(args) {
				elems, n, err := est(b, args)
				if err != nil {
					return cty.NilVal, err
				}
				if err := b.charge(elems, n); err != nil {
					return cty.NilVal, err
				}
			}
			v, err := f.Call(args)
			if err != nil {
				return v, err
			}
			if !post {
				// Charged before; the lengths are still checked.
				if _, _, ok := b.measure(v, math.MaxInt64, math.MaxInt64); !ok {
					return cty.NilVal, b.check()
				}
				return v, nil
			}
			if err := b.chargeValue(v); err != nil {
				return cty.NilVal, err
			}
			return v, nil
		},
	})
}

func allKnown(args []cty.Value) bool {
	for _, a := range args {
		if !a.IsWhollyKnown() {
			return false
		}
	}
	return true
}

// satMul and satAdd saturate at MaxInt64 instead of wrapping.
func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func str(v cty.Value) string {
	if v.IsNull() || v.Type() != cty.String {
		return ""
	}
	return v.AsString()
}

func length(v cty.Value) int64 {
	if v.IsNull() || !v.Type().IsCollectionType() && !v.Type().IsTupleType() && !v.Type().IsObjectType() {
		return 0
	}
	return int64(v.LengthInt())
}

// size is v's elements and string bytes as a tree, saturated just past
// what is left of the budget (which the charge then refuses).
func (b *budget) size(v cty.Value) (elems, n int64) {
	elems, n, ok := b.measure(v, b.elems, b.bytes)
	if !ok {
		return math.MaxInt64, math.MaxInt64
	}
	return elems, n
}

// range(start, limit, step) builds |limit-start|/|step| numbers.
func estimateRange(_ *budget, args []cty.Value) (int64, int64, error) {
	nums := make([]*big.Float, len(args))
	for i, a := range args {
		if a.IsNull() || a.Type() != cty.Number {
			return 0, 0, nil // cty refuses it
		}
		nums[i] = a.AsBigFloat()
	}
	start, end, step := new(big.Float), new(big.Float), big.NewFloat(1)
	switch len(nums) {
	case 1:
		end = nums[0]
	case 2:
		start, end = nums[0], nums[1]
	case 3:
		start, end, step = nums[0], nums[1], nums[2]
	default:
		return 0, 0, nil
	}
	if step.Sign() == 0 {
		return 0, 0, nil
	}
	span := new(big.Float).Sub(end, start)
	if span.Quo(span, step); span.Sign() < 0 {
		return 0, 0, nil // cty refuses it
	}
	return satAdd(bigCount(span, math.MaxInt64), 1), 0, nil
}

// setproduct(a, b, c) builds |a|*|b|*|c| tuples of 3.
func estimateSetProduct(_ *budget, args []cty.Value) (int64, int64, error) {
	prod := int64(1)
	for _, a := range args {
		prod = satMul(prod, length(a))
	}
	return satMul(prod, int64(len(args))+1), 0, nil
}

func estimateFlatten(b *budget, args []cty.Value) (int64, int64, error) {
	elems, _ := b.size(args[0])
	return elems, 0, nil
}

// formatWidths adds up the numbers in the verbs of a format string
// ("%0999999999d" pads to a gigabyte).
func formatWidths(f string) int64 {
	var total, cur int64
	inVerb := false
	for i := 0; i < len(f); i++ {
		c := f[i]
		switch {
		case !inVerb:
			inVerb = c == '%'
		case c >= '0' && c <= '9':
			cur = satAdd(satMul(cur, 10), int64(c-'0'))
		case c == '.' || c == '[' || c == ']' || c == '-' || c == '+' || c == '#' || c == ' ':
			total, cur = satAdd(total, cur), 0
		default:
			total, cur, inVerb = satAdd(total, cur), 0, false
		}
	}
	return satAdd(total, cur)
}

func estimateFormat(b *budget, args []cty.Value) (int64, int64, error) {
	n := satAdd(int64(len(str(args[0]))), formatWidths(str(args[0])))
	for _, a := range args[1:] {
		elems, bytes := b.size(a)
		n = satAdd(n, satAdd(bytes, satMul(elems+1, 32)))
	}
	return 0, n, nil
}

// formatlist builds as many strings as its longest list argument, each
// the format with one element of each list or the scalar arguments.
func estimateFormatList(b *budget, args []cty.Value) (int64, int64, error) {
	rows := int64(1)
	per := satAdd(int64(len(str(args[0]))), formatWidths(str(args[0])))
	var listBytes int64
	for _, a := range args[1:] {
		elems, bytes := b.size(a)
		if t := a.Type(); !a.IsNull() && (t.IsListType() || t.IsTupleType() || t.IsSetType()) {
			rows = max(rows, length(a))
			listBytes = satAdd(listBytes, satAdd(bytes, satMul(elems, 32)))
			continue
		}
		per = satAdd(per, satAdd(bytes, 32))
	}
	return rows, satAdd(listBytes, satMul(rows, per)), nil
}

func estimateIndent(_ *budget, args []cty.Value) (int64, int64, error) {
	s := str(args[1])
	spaces := int64(0)
	if !args[0].IsNull() && args[0].Type() == cty.Number {
		spaces = bigCount(args[0].AsBigFloat(), math.MaxInt64)
	}
	return 0, satAdd(int64(len(s)), satMul(spaces, int64(strings.Count(s, "\n"))+1)), nil
}

func estimateJoin(b *budget, args []cty.Value) (int64, int64, error) {
	var elems, n int64
	for _, a := range args[1:] {
		e, bytes := b.size(a)
		elems, n = satAdd(elems, e), satAdd(n, bytes)
	}
	return 0, satAdd(n, satMul(elems, int64(len(str(args[0]))))), nil
}

// replaced bounds the result of replacing in s at most matches times by
// repl, which may repeat the match ($0, ${1}) where it has a '$'.
func replaced(s, repl string, matches int64) int64 {
	per := int64(len(repl))
	if strings.Contains(repl, "$") {
		per = satMul(per, max(int64(len(s)), 1))
	}
	return satAdd(int64(len(s)), satMul(matches, per))
}

func estimateReplace(_ *budget, args []cty.Value) (int64, int64, error) {
	s, sub, repl := str(args[0]), str(args[1]), str(args[2])
	matches := int64(len(s)) + 1
	if len(sub) > 1 && !(strings.HasPrefix(sub, "/") && strings.HasSuffix(sub, "/")) {
		matches = int64(strings.Count(s, sub))
	}
	return 0, replaced(s, repl, matches), nil
}

func estimateRegexReplace(_ *budget, args []cty.Value) (int64, int64, error) {
	s := str(args[0])
	return 0, replaced(s, str(args[2]), int64(len(s))+1), nil
}

// jsonencode and yamlencode write each string escaped (at most 6 bytes
// per byte) and some punctuation per element.
func estimateEncode(b *budget, args []cty.Value) (int64, int64, error) {
	elems, n := b.size(args[0])
	return 0, satAdd(satMul(n, 6), satMul(elems+1, 16)), nil
}

// checkJSONDecode refuses JSON nested deeper than job files may be: the
// decoder recurses once per level.
func checkJSONDecode(_ *budget, args []cty.Value) (int64, int64, error) {
	if d := hcllimit.Check([]byte(str(args[0])), "jsondecode input", true); d.HasErrors() {
		return 0, 0, fmt.Errorf("the JSON text nests more than %d levels deep (a fixed limit)", hcllimit.MaxDepth)
	}
	return 0, 0, nil
}

// checkYAMLDecode refuses YAML whose value would be larger than the
// budget once its aliases are expanded (a "billion laughs" file of a
// few hundred bytes stands for 10^9 values, which go-cty builds as a
// graph but every later step walks as a tree, and compares types of that
// size while decoding), and YAML nested too deeply (its parser recurses).
func checkYAMLDecode(b *budget, args []cty.Value) (int64, int64, error) {
	src := str(args[0])
	depth := 0
	for i := 0; i < len(src); i++ {
		switch src[i] {
		case '[', '{':
			if depth++; depth > hcllimit.MaxDepth {
				return 0, 0, fmt.Errorf("the YAML text nests more than %d levels deep (a fixed limit)", hcllimit.MaxDepth)
			}
		case ']', '}':
			depth = max(depth-1, 0)
		}
	}
	ty, err := ctyyaml.Standard.ImpliedType([]byte(src))
	if err != nil {
		return 0, 0, nil // Unmarshal says what is wrong
	}
	if typeSize(ty, b.elems) > b.elems {
		return 0, 0, b.fail("the YAML text expands to more than the %d collection elements a job file may build in all (a fixed limit; anchors and aliases count at each use)", MaxEvalElements)
	}
	return 0, 0, nil
}

// typeSize counts the attributes and elements of a structural type as a
// tree, stopping past limit.
func typeSize(t cty.Type, limit int64) int64 {
	var n int64
	stack := []cty.Type{t}
	for len(stack) > 0 && n <= limit {
		t := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		switch {
		case t.IsTupleType():
			ets := t.TupleElementTypes()
			n += int64(len(ets))
			stack = append(stack, ets...)
		case t.IsObjectType():
			for _, at := range t.AttributeTypes() {
				n++
				stack = append(stack, at)
			}
		case t.IsCollectionType():
			n++
			stack = append(stack, t.ElementType())
		}
	}
	return n
}

func checkBcrypt(_ *budget, args []cty.Value) (int64, int64, error) {
	if len(args) > 1 && !args[1].IsNull() && args[1].Type() == cty.Number {
		if c := args[1].AsBigFloat(); c.Cmp(big.NewFloat(maxBcryptCost)) > 0 {
			return 0, 0, function.NewArgErrorf(1, "bcrypt cost %s is above %d (a fixed limit: each step doubles the time)", c.Text('g', 6), maxBcryptCost)
		}
	}
	return 0, 0, nil
}

func checkParseInt(_ *budget, args []cty.Value) (int64, int64, error) {
	if s := str(args[0]); len(s) > maxParseIntLen {
		return 0, 0, function.NewArgErrorf(0, "parseint of %d characters; at most %d (a fixed limit: larger numbers do not fit a job)", len(s), maxParseIntLen)
	}
	return 0, 0, nil
}

func checkDistinct(_ *budget, args []cty.Value) (int64, int64, error) {
	if n := length(args[0]); n > maxDistinct {
		return 0, 0, function.NewArgErrorf(0, "distinct of %d elements; at most %d (a fixed limit: its time grows with the square of the length)", n, maxDistinct)
	}
	return 0, 0, nil
}

func checkRSADecrypt(_ *budget, args []cty.Value) (int64, int64, error) {
	if k := str(args[1]); len(k) > maxRSAKeyLen {
		return 0, 0, function.NewArgErrorf(1, "the private key is %d bytes; at most %d (a fixed limit)", len(k), maxRSAKeyLen)
	}
	return 0, 0, nil
}
