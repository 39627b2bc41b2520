package template

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	gotemplate "text/template"
	"text/template/parse"
)

// Issue is one problem Check found, at a line and column of the template
// text (1-based; Column 0 when only the line is known).
type Issue struct {
	Line, Column int
	Summary      string
	Detail       string
}

func (i Issue) String() string {
	pos := strconv.Itoa(i.Line)
	if i.Column > 0 {
		pos += ":" + strconv.Itoa(i.Column)
	}
	return pos + ": " + i.Summary
}

// parseErrLine finds the line in text/template's "template: NAME:LINE: ..."
// or "template: NAME:LINE:COL: ...".
var parseErrLine = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^template: [^:]*:(\d+)(?::(\d+))?: (.*)$`) })

// Check parses text as Render would and returns what would keep it from
// rendering on berth: a syntax error, a function that does not exist, or
// one that needs Consul, Vault or Nomad variables, or that Nomad denies.
// Everything else (a missing key, a file not there yet) is only known
// when it renders.
func Check(text, left, right string) []Issue {
	if left == "" {
		left = "{{"
	}
	if right == "" {
		right = "}}"
	}
	t, err := gotemplate.New("t").Delims(left, right).Funcs(names()).Parse(text)
	if err != nil {
		iss := Issue{Line: 1, Summary: err.Error()}
		if m := parseErrLine().FindStringSubmatch(err.Error()); m != nil {
			iss.Line, _ = strconv.Atoi(m[1])
			if m[2] != "" {
				iss.Column, _ = strconv.Atoi(m[2])
			}
			iss.Summary = "template: " + m[3]
		}
		if fn := undefinedFunc().FindStringSubmatch(iss.Summary); fn != nil {
			iss.Summary = fmt.Sprintf("template function %q does not exist in berth's template language", fn[1])
			iss.Detail = "berth has Nomad's native functions (env, file, nomadService, nomadServices, sockaddr, ...) and consul-template's helpers; see the README"
		}
		return []Issue{iss}
	}
	var out []Issue
	for _, tt := range t.Templates() {
		if tt.Tree == nil || tt.Tree.Root == nil {
			continue
		}
		walk(tt.Tree.Root, func(n parse.Node) {
			id, ok := n.(*parse.IdentifierNode)
			if !ok {
				return
			}
			sum, detail := refusal(id.Ident)
			if sum == "" {
				return
			}
			iss := Issue{Summary: sum, Detail: detail}
			loc, _ := tt.Tree.ErrorContext(n)
			// loc is "NAME:LINE:COL", COL counted from 0.
			parts := strings.Split(loc, ":")
			if len(parts) >= 3 {
				iss.Line, _ = strconv.Atoi(parts[len(parts)-2])
				iss.Column, _ = strconv.Atoi(parts[len(parts)-1])
				iss.Column++
			}
			out = append(out, iss)
		})
	}
	return out
}

var undefinedFunc = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`function "([^"]+)" not defined`) })

// walk calls fn on n and every node below it.
func walk(n parse.Node, fn func(parse.Node)) {
	if n == nil {
		return
	}
	fn(n)
	switch x := n.(type) {
	case *parse.ListNode:
		if x == nil {
			return
		}
		for _, c := range x.Nodes {
			walk(c, fn)
		}
	case *parse.ActionNode:
		walkPipe(x.Pipe, fn)
	case *parse.IfNode:
		walkBranch(&x.BranchNode, fn)
	case *parse.RangeNode:
		walkBranch(&x.BranchNode, fn)
	case *parse.WithNode:
		walkBranch(&x.BranchNode, fn)
	case *parse.TemplateNode:
		walkPipe(x.Pipe, fn)
	case *parse.PipeNode:
		walkPipe(x, fn)
	case *parse.CommandNode:
		for _, a := range x.Args {
			walk(a, fn)
		}
	case *parse.ChainNode:
		walk(x.Node, fn)
	}
}

func walkPipe(p *parse.PipeNode, fn func(parse.Node)) {
	if p == nil {
		return
	}
	for _, c := range p.Cmds {
		walk(c, fn)
	}
}

func walkBranch(b *parse.BranchNode, fn func(parse.Node)) {
	walkPipe(b.Pipe, fn)
	if b.List != nil {
		walk(b.List, fn)
	}
	if b.ElseList != nil {
		walk(b.ElseList, fn)
	}
}
