// Package hcllimit checks an HCL or JSON file's size and nesting before a
// parser sees it. HCL's parsers recurse once per nesting level, so a file
// of `x = [[[[...` 100,000 deep overflows the goroutine stack and kills the
// process (a root agent, for one request): the check is a flat pass over
// the lexer's tokens, in constant stack.
package hcllimit

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

const (
	// MaxDepth is how deeply brackets, braces, parentheses, template
	// interpolations and operators may nest; real job files use less
	// than 20.
	MaxDepth = 256
	// MaxBytes bounds a file's size.
	MaxBytes = 4 << 20
	// MaxItems bounds the items of one list, object, argument list or
	// block body: go-cty turns a tuple or object into a list or map in
	// time that grows with the square of its length (sortTypes), so a
	// literal of 2 million items stalls whatever converts it.
	MaxItems = 4096
)

// Check returns an error diagnostic, positioned where the limit is
// crossed, when src is larger than MaxBytes or nests deeper than MaxDepth.
// json selects JSON's syntax instead of HCL's native one.
func Check(src []byte, filename string, json bool) hcl.Diagnostics {
	start := hcl.Range{Filename: filename, Start: hcl.InitialPos, End: hcl.InitialPos}
	if len(src) > MaxBytes {
		return hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "File too large",
			Detail:   fmt.Sprintf("%s is %d bytes; berth reads files of at most %d bytes", filename, len(src), MaxBytes),
			Subject:  &start,
		}}
	}
	if json {
		return checkJSON(src, filename)
	}
	toks, _ := hclsyntax.LexConfig(src, filename, hcl.InitialPos)
	return checkTokens(toks, filename)
}

// level is one open bracket: what opened it and how many operators the
// expression being written inside it has so far.
type level struct {
	open       hclsyntax.TokenType
	ops, items int
}

// checkTokens counts, at each token, how deep the parse tree is there:
// one per open bracket, brace, parenthesis, quote or interpolation, plus
// one per operator (unary !/-, binary, and each ?: of a conditional) in
// the expressions still open. HCL parses `!!!!x`, `a ? b : c ? d : e` and
// `1 + 1 + 1` into trees as deep as they have operators and recurses that
// deep, in more than linear time for unary chains (10 KB of "!" took over
// a second). A comma, or a newline or '=' directly inside a body or an
// object, starts a new expression.
func checkTokens(toks hclsyntax.Tokens, filename string) hcl.Diagnostics {
	stack := []level{{open: hclsyntax.TokenOBrace}}
	depth := 0 // len(stack)-1 plus every level's ops
	for _, t := range toks {
		top := &stack[len(stack)-1]
		switch t.Type {
		case hclsyntax.TokenOBrace, hclsyntax.TokenOBrack, hclsyntax.TokenOParen,
			hclsyntax.TokenTemplateInterp, hclsyntax.TokenTemplateControl, hclsyntax.TokenOQuote, hclsyntax.TokenOHeredoc:
			stack = append(stack, level{open: t.Type})
			depth++
		case hclsyntax.TokenCBrace, hclsyntax.TokenCBrack, hclsyntax.TokenCParen,
			hclsyntax.TokenTemplateSeqEnd, hclsyntax.TokenCQuote, hclsyntax.TokenCHeredoc:
			if len(stack) > 1 {
				depth -= 1 + top.ops
				stack = stack[:len(stack)-1]
			}
		case hclsyntax.TokenComma:
			depth -= top.ops
			top.ops = 0
			if top.items++; top.items > MaxItems && len(stack) > 1 {
				return tooMany(filename, t.Range)
			}
		case hclsyntax.TokenNewline, hclsyntax.TokenEqual:
			if top.open == hclsyntax.TokenOBrace {
				depth -= top.ops
				top.ops = 0
				if t.Type == hclsyntax.TokenEqual {
					if top.items++; top.items > MaxItems && len(stack) > 1 {
						return tooMany(filename, t.Range)
					}
				}
			}
		case hclsyntax.TokenBang, hclsyntax.TokenMinus, hclsyntax.TokenPlus, hclsyntax.TokenStar,
			hclsyntax.TokenSlash, hclsyntax.TokenPercent, hclsyntax.TokenEqualOp, hclsyntax.TokenNotEqual,
			hclsyntax.TokenLessThan, hclsyntax.TokenLessThanEq, hclsyntax.TokenGreaterThan,
			hclsyntax.TokenGreaterThanEq, hclsyntax.TokenAnd, hclsyntax.TokenOr, hclsyntax.TokenQuestion:
			top.ops++
			depth++
		default:
			continue
		}
		if depth > MaxDepth {
			return tooDeep(filename, t.Range)
		}
	}
	return nil
}

// checkJSON counts brackets and braces, and the items in each, outside
// strings.
func checkJSON(src []byte, filename string) hcl.Diagnostics {
	depth, line, col := 0, 1, 1
	inString, escaped := false, false
	items := []int{0}
	for i, c := range src {
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString && c == '"':
			inString = false
		case inString:
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			items = append(items, 0)
			if depth > MaxDepth {
				p := hcl.Pos{Line: line, Column: col, Byte: i}
				return tooDeep(filename, hcl.Range{Filename: filename, Start: p, End: p})
			}
		case c == ']' || c == '}':
			if depth > 0 {
				depth--
				items = items[:len(items)-1]
			}
		case c == ',':
			if items[len(items)-1]++; items[len(items)-1] > MaxItems {
				p := hcl.Pos{Line: line, Column: col, Byte: i}
				return tooMany(filename, hcl.Range{Filename: filename, Start: p, End: p})
			}
		}
		if c == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return nil
}

func tooMany(filename string, r hcl.Range) hcl.Diagnostics {
	return hcl.Diagnostics{{
		Severity: hcl.DiagError,
		Summary:  "Too many items",
		Detail:   fmt.Sprintf("%s has more than %d items in one list, object, argument list or block here; berth refuses such files before parsing them: keep large data outside the job file", filename, MaxItems),
		Subject:  &r,
	}}
}

func tooDeep(filename string, r hcl.Range) hcl.Diagnostics {
	return hcl.Diagnostics{{
		Severity: hcl.DiagError,
		Summary:  "Nested too deeply",
		Detail:   fmt.Sprintf("%s nests more than %d levels deep here (each open bracket, brace, parenthesis, quote or interpolation counts one, and so does each operator and each ?: in an expression); berth refuses such files before parsing them: split the expression, or compute the value outside the job file", filename, MaxDepth),
		Subject:  &r,
	}}
}
