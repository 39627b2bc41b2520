package jobspec

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"unicode"

	"github.com/hashicorp/hcl/v2"
)

// maxNameLen bounds every name of a job: IDs, group and task names,
// namespace, region, meta keys (Nomad's namespace limit).
const maxNameLen = 128

// namespaceRE is Nomad's rule for namespace names.
var namespaceRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9-]{1,128}$`) })

// nameProblem is the one rule for every name of a job that reaches a
// path (task log files), CNI_ARGS (job ID, group, namespace, region: pairs
// K=V joined by ';') or a task's environment (NOMAD_*_NAME, NOMAD_META_<key>):
// not empty, at most 128 bytes, no control character (NUL, newline: they
// end a C string or forge a log line) nor formatting one (U+202E shows
// "abc" reversed), no '/' or '\' and not "." or ".."
// (a path component), no ';' or '=' (they would split a CNI_ARGS pair or
// an environment entry). Nomad's rules (no '/' in task names, no NUL or
// space in job IDs) are the model; berth's is stricter where its names go
// further. It returns what is wrong, or "".
func nameProblem(s string) string {
	switch {
	case s == "":
		return "is empty"
	case len(s) > maxNameLen:
		return fmt.Sprintf("is %d bytes long; the limit is %d", len(s), maxNameLen)
	case s == "." || s == "..":
		return "is a path component (\".\" or \"..\")"
	}
	for _, r := range s {
		switch {
		case r == 0:
			return "contains a NUL byte"
		case unicode.IsControl(r):
			return fmt.Sprintf("contains the control character %q", r)
		case unicode.Is(unicode.Cf, r):
			// U+202E and the other bidirectional and zero-width
			// controls make a name display as another one.
			return fmt.Sprintf("contains the invisible formatting character %U, which makes a name display as another", r)
		case r == '/' || r == '\\':
			return fmt.Sprintf("contains %q, which would make it a path", r)
		case r == ';' || r == '=':
			return fmt.Sprintf("contains %q, which separates CNI_ARGS pairs and environment entries", r)
		}
	}
	return ""
}

const nameHint = "use at most 128 letters, digits and punctuation other than '/', '\\', ';' and '=' (no control characters)"

// checkIdent fails at r when name breaks the rule; kind says what it
// names ("group name", `meta key in job "j"`).
func (p *parser) checkIdent(r hcl.Range, kind, name string) bool {
	if why := nameProblem(name); why != "" {
		p.fail(r, fmt.Sprintf("%s %q %s", kind, name, why), nameHint)
		return false
	}
	return true
}

// checkNamespace is Nomad's rule for namespaces.
func (p *parser) checkNamespace(r hcl.Range, ns string) {
	if !namespaceRE().MatchString(ns) {
		p.fail(r, fmt.Sprintf("namespace %q is not a valid namespace name", ns), "use 1 to 128 letters, digits and '-', as Nomad requires")
	}
}

// checkMetaKeys applies the rule to every key of a meta map: each becomes
// NOMAD_META_<key> in the task's environment. Values must not hold NUL.
func (p *parser) checkMetaKeys(r hcl.Range, m map[string]string, where string) {
	for _, k := range sortedKeys(m) {
		if p.checkIdent(r, "meta key in "+where, k) && strings.ContainsRune(m[k], 0) {
			p.fail(r, fmt.Sprintf("meta %q in %s has a NUL byte in its value", k, where), "environment values cannot hold NUL")
		}
	}
}

// checkCNIArgs: keys follow the name rule, values must not split a pair.
func (p *parser) checkCNIArgs(r hcl.Range, m map[string]string, where string) {
	for _, k := range sortedKeys(m) {
		if !p.checkIdent(r, "cni arg in "+where, k) {
			continue
		}
		if strings.HasPrefix(k, "BERTH_") || strings.HasPrefix(k, reservedEnvPrefix) {
			p.warn(r, fmt.Sprintf("cni arg %s in %s is ignored: BERTH_* and NOMAD_* args are the runtime's", k, where),
				"berth passes the allocation's identity (BERTH_ALLOC_ID, NOMAD_ALLOC_ID, ...) itself; rename the arg")
		}
		v := m[k]
		if strings.ContainsAny(v, ";=") || strings.IndexFunc(v, unicode.IsControl) >= 0 {
			p.fail(r, fmt.Sprintf("cni arg %s = %q in %s contains ';', '=' or a control character", k, v, where),
				"CNI_ARGS is K=V pairs joined by ';': a value cannot hold either")
		}
	}
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// reservedEnvPrefix starts the variables the runtime sets (NOMAD_ALLOC_ID,
// NOMAD_PORT_<label>...): a job's env block cannot override them.
const reservedEnvPrefix = "NOMAD_"
