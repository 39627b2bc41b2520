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
