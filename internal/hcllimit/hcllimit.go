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
	// MaxDepth is how deeply brackets, braces, parentheses and template
	// interpolations may nest; real job files use less than 20.
	MaxDepth = 256
	// MaxBytes bounds a file's size.
	MaxBytes = 4 << 20
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
	depth := 0
	for _, t := range toks {
		switch t.Type {
		case hclsyntax.TokenOBrace, hclsyntax.TokenOBrack, hclsyntax.TokenOParen,
			hclsyntax.TokenTemplateInterp, hclsyntax.TokenTemplateControl, hclsyntax.TokenOQuote, hclsyntax.TokenOHeredoc:
			depth++
			if depth > MaxDepth {
				return tooDeep(filename, t.Range)
			}
		case hclsyntax.TokenCBrace, hclsyntax.TokenCBrack, hclsyntax.TokenCParen,
			hclsyntax.TokenTemplateSeqEnd, hclsyntax.TokenCQuote, hclsyntax.TokenCHeredoc:
			if depth > 0 {
				depth--
			}
		}
	}
	return nil
}

// checkJSON counts brackets and braces outside strings.
func checkJSON(src []byte, filename string) hcl.Diagnostics {
	depth, line, col := 0, 1, 1
	inString, escaped := false, false
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
			if depth > MaxDepth {
				p := hcl.Pos{Line: line, Column: col, Byte: i}
				return tooDeep(filename, hcl.Range{Filename: filename, Start: p, End: p})
			}
		case c == ']' || c == '}':
			if depth > 0 {
				depth--
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

func tooDeep(filename string, r hcl.Range) hcl.Diagnostics {
	return hcl.Diagnostics{{
		Severity: hcl.DiagError,
		Summary:  "Nested too deeply",
		Detail:   fmt.Sprintf("%s nests brackets, braces or interpolations more than %d levels deep here; berth refuses such files before parsing them", filename, MaxDepth),
		Subject:  &r,
	}}
}
