package jobspec

import "strings"

// Interpolate replaces each "${NAME}" in s whose NAME (spaces trimmed) is a
// key of vars by its value, and leaves every other "${...}" as it is, so
// that a later pass or the task itself can still see it. Replaced values
// are not scanned again.
//
// The job file's "$${X}" escape has already become "${X}" when the job was
// parsed, so a literal "${X}" in a job is replaced when X is a known key:
// the same ambiguity Nomad has.
func Interpolate(s string, vars map[string]string) string {
	if !strings.Contains(s, "${") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			break
		}
		j := strings.IndexByte(s[i+2:], '}')
		if j < 0 {
			break
		}
		end := i + 2 + j + 1
		if v, ok := vars[strings.TrimSpace(s[i+2:end-1])]; ok {
			b.WriteString(s[:i])
			b.WriteString(v)
		} else {
			b.WriteString(s[:end])
		}
		s = s[end:]
	}
	b.WriteString(s)
	return b.String()
}
