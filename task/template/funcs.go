package template

import (
	"bytes"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Why a function of Nomad's template language cannot run here; the
// reason is the whole of the error.
var (
	consulFuncs = []string{"key", "keyExists", "keyOrDefault", "ls", "safeLs", "tree", "safeTree",
		"service", "services", "connect", "caRoots", "caLeaf", "node", "nodes", "datacenters", "checks"}
	vaultFuncs  = []string{"secret", "secrets", "pkiCert"}
	deniedFuncs = []string{"plugin", "writeToFile"}
)

// refusal says why name cannot be used, or "" when it can.
func refusal(name string) (summary, detail string) {
	switch {
	case contains(consulFuncs, name):
		return fmt.Sprintf("template function %q reads Consul, and no Consul is configured", name),
			"berth has no Consul: use nomadService/nomadServices (provider = \"nomad\") for services"
	case contains(vaultFuncs, name):
		return fmt.Sprintf("template function %q reads Vault, and no Vault is configured", name),
			"berth has no Vault: pass secrets another way (an artifact, a file in secrets/)"
	case contains(deniedFuncs, name):
		return fmt.Sprintf("template function %q is disabled, as in Nomad's default function_denylist", name), ""
	}
	return "", ""
}

func contains(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

// names is every function name the parser must accept so that Check can
// point at a refused one instead of failing the parse.
func names() map[string]any {
	m := funcs(&render{})
	stub := func(...any) (any, error) { return nil, nil }
	for _, l := range [][]string{consulFuncs, vaultFuncs, deniedFuncs} {
		for _, n := range l {
			m[n] = stub
		}
	}
	return m
}

// funcs is the function map of a render.
func funcs(r *render) map[string]any {
	return map[string]any{
		// Nomad's runtime.
		"env":           r.env,
		"envOrDefault":  r.envOrDefault,
		"mustEnv":       r.mustEnv,
		"file":          r.file,
		"nomadService":  r.nomadService,
		"nomadServices": r.nomadServices,
		// Nomad Variables of the job's own paths.
		"nomadVar":         r.nomadVar,
		"nomadVarExists":   r.nomadVarExists,
		"nomadVarList":     r.nomadVarList,
		"nomadVarListSafe": r.nomadVarList,
		"sockaddr":         sockaddr,
		// consul-template's helpers.
		"executeTemplate": r.executeTemplate,
		"timestamp":       timestamp,
		"toJSON":          toJSON,
		"toJSONPretty":    toJSONPretty,
		"parseJSON":       parseJSON,
		"parseBool":       strconv.ParseBool,
		"parseFloat":      func(s string) (float64, error) { return strconv.ParseFloat(s, 64) },
		"parseInt":        func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) },
		"parseUint":       func(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) },
		"split":           split,
		"join":            func(sep string, l []string) string { return strings.Join(l, sep) },
		"toLower":         strings.ToLower,
		"toUpper":         strings.ToUpper,
		"toTitle":         toTitle,
		"trimSpace":       strings.TrimSpace,
		"trim":            func(cut, s string) string { return strings.Trim(s, cut) },
		"trimPrefix":      func(p, s string) string { return strings.TrimPrefix(s, p) },
		"trimSuffix":      func(p, s string) string { return strings.TrimSuffix(s, p) },
		"replaceAll":      func(from, to, s string) string { return strings.ReplaceAll(s, from, to) },
		"regexMatch":      regexMatch,
		"regexReplaceAll": regexReplaceAll,
		"base64Encode":    func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) },
		"base64Decode":    b64Decode(base64.StdEncoding),
		"base64URLEncode": func(s string) string { return base64.URLEncoding.EncodeToString([]byte(s)) },
		"base64URLDecode": b64Decode(base64.URLEncoding),
		"sha256Hex":       func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) },
		"md5sum":          func(s string) string { h := md5.Sum([]byte(s)); return hex.EncodeToString(h[:]) },
		"contains":        func(v, l any) (bool, error) { return inList(l, v) },
		"in":              func(l, v any) (bool, error) { return inList(l, v) },
		"containsAll":     containsSome(func(found, n int) bool { return found == n }),
		"containsAny":     containsSome(func(found, n int) bool { return found > 0 }),
		"containsNone":    containsSome(func(found, n int) bool { return found == 0 }),
		"containsNotAll":  containsSome(func(found, n int) bool { return found < n }),
		"indent":          indent,
		"loop":            loop,
		"add":             arith("add"),
		"subtract":        arith("subtract"),
		"multiply":        arith("multiply"),
		"divide":          arith("divide"),
		"modulo":          arith("modulo"),
		"minimum":         arith("minimum"),
		"maximum":         arith("maximum"),
		"byTag":           byTag,
	}
}

// timestamp is consul-template's: now in RFC 3339 (UTC), "unix" seconds,
// or a Go layout.
func timestamp(layout ...string) (string, error) {
	now := time.Now().UTC()
	switch len(layout) {
	case 0:
		return now.Format(time.RFC3339), nil
	case 1:
		if layout[0] == "unix" {
			return strconv.FormatInt(now.Unix(), 10), nil
		}
		return now.Format(layout[0]), nil
	}
	return "", fmt.Errorf("timestamp: want at most one argument (a layout or \"unix\"), got %d", len(layout))
}

func toJSON(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("toJSON: %w", err)
	}
	return string(bytes.TrimSpace(b)), nil
}

func toJSONPretty(v any) (string, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", fmt.Errorf("toJSONPretty: %w", err)
	}
	return string(bytes.TrimSpace(b)), nil
}

func parseJSON(s string) (any, error) {
	if s == "" {
		return map[string]any{}, nil
	}
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, fmt.Errorf("parseJSON: %w", err)
	}
	return v, nil
}

func split(sep, s string) []string {
	s = strings.TrimSpace(s)
	if s == "" {
		return []string{}
	}
	return strings.Split(s, sep)
}

func toTitle(s string) string {
	prev := ' '
	return strings.Map(func(r rune) rune {
		defer func() { prev = r }()
		if unicode.IsSpace(prev) || unicode.IsPunct(prev) {
			return unicode.ToTitle(r)
		}
		return r
	}, s)
}

func regexMatch(re, s string) (bool, error) {
	c, err := regexp.Compile(re)
	if err != nil {
		return false, fmt.Errorf("regexMatch: %w", err)
	}
	return c.MatchString(s), nil
}

func regexReplaceAll(re, repl, s string) (string, error) {
	c, err := regexp.Compile(re)
	if err != nil {
		return "", fmt.Errorf("regexReplaceAll: %w", err)
	}
	return c.ReplaceAllString(s, repl), nil
}

func b64Decode(enc *base64.Encoding) func(string) (string, error) {
	return func(s string) (string, error) {
		b, err := enc.DecodeString(s)
		if err != nil {
			return "", fmt.Errorf("base64 decode: %w", err)
		}
		return string(b), nil
	}
}

// elems returns the elements of a slice or array.
func elems(l any) ([]any, error) {
	v := reflect.ValueOf(l)
	switch v.Kind() {
	case reflect.Slice, reflect.Array:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = v.Index(i).Interface()
		}
		return out, nil
	case reflect.Invalid:
		return nil, nil
	}
	return nil, fmt.Errorf("want a list, got %T", l)
}

func inList(l, v any) (bool, error) {
	if s, ok := l.(string); ok {
		// consul-template's in/contains also work on a string.
		return strings.Contains(s, fmt.Sprint(v)), nil
	}
	es, err := elems(l)
	if err != nil {
		return false, err
	}
	for _, e := range es {
		if reflect.DeepEqual(e, v) || fmt.Sprint(e) == fmt.Sprint(v) {
			return true, nil
		}
	}
	return false, nil
}

func containsSome(ok func(found, n int) bool) func(v, l any) (bool, error) {
	return func(v, l any) (bool, error) {
		want, err := elems(v)
		if err != nil {
			return false, err
		}
		found := 0
		for _, w := range want {
			in, err := inList(l, w)
			if err != nil {
				return false, err
			}
			if in {
				found++
			}
		}
		return ok(found, len(want)), nil
	}
}

func indent(spaces int, s string) (string, error) {
	if spaces < 0 {
		return "", fmt.Errorf("indent: %d spaces", spaces)
	}
	pad := strings.Repeat(" ", spaces)
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = pad + l
		}
	}
	return strings.Join(lines, "\n"), nil
}

// loop is consul-template's: loop N is 0..N-1, loop A B is A..B-1.
func loop(ns ...any) ([]int64, error) {
	var lo, hi int64
	switch len(ns) {
	case 1:
		n, err := toInt(ns[0])
		if err != nil {
			return nil, fmt.Errorf("loop: %w", err)
		}
		hi = n
	case 2:
		a, err := toInt(ns[0])
		if err != nil {
			return nil, fmt.Errorf("loop: %w", err)
		}
		b, err := toInt(ns[1])
		if err != nil {
			return nil, fmt.Errorf("loop: %w", err)
		}
		lo, hi = a, b
	default:
		return nil, fmt.Errorf("loop: want 1 or 2 arguments, got %d", len(ns))
	}
	if hi-lo > 1_000_000 {
		return nil, fmt.Errorf("loop: %d iterations is too many", hi-lo)
	}
	var out []int64
	for i := lo; i < hi; i++ {
		out = append(out, i)
	}
	return out, nil
}

func toInt(v any) (int64, error) {
	switch x := v.(type) {
	case string:
		return strconv.ParseInt(x, 10, 64)
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int(), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return int64(rv.Uint()), nil
	case reflect.Float32, reflect.Float64:
		return int64(rv.Float()), nil
	}
	return 0, fmt.Errorf("%v (%T) is not a number", v, v)
}

// number reads v as an integer when it is one, else as a float.
func number(v any) (i int64, f float64, isInt bool, err error) {
	if s, ok := v.(string); ok {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n, float64(n), true, nil
		}
		x, err := strconv.ParseFloat(s, 64)
		return 0, x, false, err
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int(), float64(rv.Int()), true, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return int64(rv.Uint()), float64(rv.Uint()), true, nil
	case reflect.Float32, reflect.Float64:
		return 0, rv.Float(), false, nil
	}
	return 0, 0, false, fmt.Errorf("%v (%T) is not a number", v, v)
}

// arith is consul-template's arithmetic, whose operands come reversed
// (`{{ 2 | add 3 }}` is add(3, 2)): op(b, a) computes a op b.
func arith(op string) func(b, a any) (any, error) {
	return func(b, a any) (any, error) {
		ai, af, aInt, err := number(a)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		bi, bf, bInt, err := number(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		if aInt && bInt {
			switch op {
			case "add":
				return ai + bi, nil
			case "subtract":
				return ai - bi, nil
			case "multiply":
				return ai * bi, nil
			case "divide", "modulo":
				if bi == 0 {
					return nil, fmt.Errorf("%s: by zero", op)
				}
				if op == "divide" {
					return ai / bi, nil
				}
				return ai % bi, nil
			case "minimum":
				return min(ai, bi), nil
			case "maximum":
				return max(ai, bi), nil
			}
		}
		switch op {
		case "add":
			return af + bf, nil
		case "subtract":
			return af - bf, nil
		case "multiply":
			return af * bf, nil
		case "divide":
			if bf == 0 {
				return nil, errors.New("divide: by zero")
			}
			return af / bf, nil
		case "modulo":
			if bf == 0 {
				return nil, errors.New("modulo: by zero")
			}
			return math.Mod(af, bf), nil
		case "minimum":
			return math.Min(af, bf), nil
		}
		return math.Max(af, bf), nil
	}
}

// byTag groups services by tag, as consul-template's byTag.
func byTag(l []*Service) map[string][]*Service {
	out := map[string][]*Service{}
	for _, s := range l {
		for _, t := range s.Tags {
			out[t] = append(out[t], s)
		}
	}
	for _, v := range out {
		sort.SliceStable(v, func(i, j int) bool { return v[i].ID < v[j].ID })
	}
	return out
}
