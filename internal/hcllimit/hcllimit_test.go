package hcllimit

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	deep := func(open, close string, n int) string {
		return "x = " + strings.Repeat(open, n) + strings.Repeat(close, n) + "\n"
	}
	tests := []struct {
		name    string
		src     string
		json    bool
		wantErr string
		line    int
	}{
		{"ordinary job", "job \"j\" {\n  group \"g\" { task \"t\" { config { args = [\"a\", \"${NOMAD_ALLOC_ID}\"] } } }\n}\n", false, "", 0},
		{"at the limit", deep("[", "]", MaxDepth), false, "", 0},
		{"lists 100000 deep", deep("[", "]", 100000), false, "Nested too deeply", 1},
		{"objects deep", deep("{a=", "}", 300), false, "Nested too deeply", 1},
		{"interpolations deep", "x = \"" + strings.Repeat("${\"", 300) + strings.Repeat("\"}", 300) + "\"\n", false, "Nested too deeply", 1},
		{"deep on line 3", "a = 1\nb = 2\n" + deep("(", ")", 400), false, "Nested too deeply", 3},
		{"json ok", `{"job": {"j": {"group": [1, 2, {"x": "[[[["}]}}}`, true, "", 0},
		{"json deep", strings.Repeat("[", 60000) + strings.Repeat("]", 60000), true, "Nested too deeply", 1},
		{"unary not chain", "x = " + strings.Repeat("!", 10000) + "true\n", false, "Nested too deeply", 1},
		{"unary minus chain", "a = 1\nx = " + strings.Repeat("-", 10000) + "1\n", false, "Nested too deeply", 2},
		{"conditional chain", "x = " + strings.Repeat("true ? 1 : ", 1000) + "1\n", false, "Nested too deeply", 1},
		{"nested conditionals", "x = " + strings.Repeat("true ? ", 1000) + "1" + strings.Repeat(" : 2", 1000) + "\n", false, "Nested too deeply", 1},
		{"operator chain", "x = " + strings.Repeat("1 + ", 2500) + "1\n", false, "Nested too deeply", 1},
		{"operator chain over lines in parens", "x = (" + strings.Repeat("1 +\n", 2500) + "1)\n", false, "Nested too deeply", 256},
		{"operators in interpolations", "x = \"" + strings.Repeat("${1 + ", 200) + "1" + strings.Repeat("}", 200) + "\"\n", false, "Nested too deeply", 1},
		{"many short expressions", strings.Repeat("x = !true && 1 + 2 * 3 > -4 ? 5 : 6\n", 2000), false, "", 0},
		{"long list of short expressions", "x = [" + strings.Repeat("-1 + 2, ", 3000) + "]\n", false, "", 0},
		{"object of short expressions", "x = {\n" + strings.Repeat("  a = !true || false\n", 3000) + "}\n", false, "", 0},
		{"list of 5000 items", "a = 1\nx = [" + strings.Repeat("1,", 5000) + "]\n", false, "Too many items", 2},
		{"object of 5000 items", "x = {\n" + strings.Repeat("a = 1\n", 5000) + "}\n", false, "Too many items", 4098},
		{"list of 4000 items", "x = [" + strings.Repeat("1,", 4000) + "]\n", false, "", 0},
		{"5000 attributes at the top", strings.Repeat("a = 1\n", 5000), false, "", 0},
		{"json list of 5000 items", `{"a": [` + strings.Repeat("1,", 5000) + `1]}`, true, "Too many items", 1},
		{"json string with commas", `{"a": "` + strings.Repeat(",", 5000) + `"}`, true, "", 0},
		{"too large", strings.Repeat("#", MaxBytes+1), false, "File too large", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Check([]byte(tt.src), "f.hcl", tt.json)
			if tt.wantErr == "" {
				if d.HasErrors() {
					t.Fatalf("unexpected: %v", d)
				}
				return
			}
			if !d.HasErrors() || d[0].Summary != tt.wantErr || d[0].Subject == nil || d[0].Subject.Start.Line != tt.line {
				t.Fatalf("got %v, want %q at line %d", d, tt.wantErr, tt.line)
			}
		})
	}
}
