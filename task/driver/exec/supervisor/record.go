package supervisor

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The spec and the status are written as lines of "key value", the value
// quoted as a Go string: readable with cat, decoded with strconv alone, so
// that the supervisor links no encoding package. A key may repeat (a list).
//
// Each record is a table of codecs (below), one row per field, walked
// in order by write and looked up by key by read: the two cannot list the
// fields differently.

type writer struct{ b bytes.Buffer }

func (w *writer) str(k, v string) {
	w.b.WriteString(k)
	w.b.WriteByte(' ')
	w.b.WriteString(strconv.Quote(v))
	w.b.WriteByte('\n')
}

func (w *writer) num(k string, v int64) { w.str(k, strconv.FormatInt(v, 10)) }
func (w *writer) unum(k string, v uint64) {
	w.str(k, strconv.FormatUint(v, 10))
}

func (w *writer) flag(k string, v bool) {
	if v {
		w.str(k, "true")
	}
}

type field struct{ key, val string }

// parse reads a record; unknown keys are the caller's business.
func parse(b []byte) ([]field, error) {
	var out []field
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" {
			continue
		}
		k, q, ok := strings.Cut(line, " ")
		if !ok {
			return nil, fmt.Errorf("line %d: no value", n)
		}
		v, err := strconv.Unquote(q)
		if err != nil {
			return nil, fmt.Errorf("line %d (%s): %w", n, k, err)
		}
		out = append(out, field{k, v})
	}
	return out, sc.Err()
}

// reader decodes fields into typed values, keeping the first error.
type reader struct{ err error }

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *reader) int(f field) int {
	v, err := strconv.Atoi(f.val)
	if err != nil {
		r.fail(fmt.Errorf("%s: %w", f.key, err))
	}
	return v
}

func (r *reader) int64(f field) int64 {
	v, err := strconv.ParseInt(f.val, 10, 64)
	if err != nil {
		r.fail(fmt.Errorf("%s: %w", f.key, err))
	}
	return v
}

func (r *reader) uint64(f field) uint64 {
	v, err := strconv.ParseUint(f.val, 10, 64)
	if err != nil {
		r.fail(fmt.Errorf("%s: %w", f.key, err))
	}
	return v
}

// codec is one field of a record of type T: the keys it is written as
// (one, or a record's keys for a list of records), how it writes its
// lines (none for an empty optional field), and how it reads one line of
// one of its keys.
type codec[T any] struct {
	keys []string
	put  func(w *writer, v *T)
	set  func(r *reader, v *T, f field)
}

// table is a record's fields in the order they are written.
type table[T any] []codec[T]

// write encodes v: the protocol version, then each field in turn.
func (t table[T]) write(v *T) []byte {
	var w writer
	w.num("version", Version)
	for _, c := range t {
		c.put(&w, v)
	}
	return w.b.Bytes()
}

// read decodes b into v. It stops at the first key of no field
// (unknown), which the caller refuses or ignores; err is the first value
// that did not decode.
func (t table[T]) read(b []byte, v *T) (version int, unknown string, err error) {
	fields, err := parse(b)
	if err != nil {
		return 0, "", err
	}
	byKey := make(map[string]int, len(t))
	for i, c := range t {
		for _, k := range c.keys {
			byKey[k] = i
		}
	}
	var r reader
	for _, f := range fields {
		if f.key == "version" {
			version = r.int(f)
			continue
		}
		i, ok := byKey[f.key]
		if !ok {
			if unknown == "" {
				unknown = f.key
			}
			continue
		}
		t[i].set(&r, v, f)
	}
	return version, unknown, r.err
}

// The field kinds. p returns the field of a record.

func str[T any](key string, p func(*T) *string) codec[T] {
	return codec[T]{[]string{key},
		func(w *writer, v *T) { w.str(key, *p(v)) },
		func(_ *reader, v *T, f field) { *p(v) = f.val }}
}

// strOmitEmpty is a string written only when not empty.
func strOmitEmpty[T any](key string, p func(*T) *string) codec[T] {
	c := str(key, p)
	return when(func(v *T) bool { return *p(v) != "" }, c)
}

// strs is a list of strings, one line each.
func strs[T any](key string, p func(*T) *[]string) codec[T] {
	return codec[T]{[]string{key},
		func(w *writer, v *T) {
			for _, s := range *p(v) {
				w.str(key, s)
			}
		},
		func(_ *reader, v *T, f field) { *p(v) = append(*p(v), f.val) }}
}

func num[T any](key string, p func(*T) *int) codec[T] {
	return codec[T]{[]string{key},
		func(w *writer, v *T) { w.num(key, int64(*p(v))) },
		func(r *reader, v *T, f field) { *p(v) = r.int(f) }}
}

// numOmitZero is a number written only when not 0.
func numOmitZero[T any](key string, p func(*T) *int) codec[T] {
	return when(func(v *T) bool { return *p(v) != 0 }, num(key, p))
}

// nums is a list of numbers, one line each.
func nums[T any](key string, p func(*T) *[]int) codec[T] {
	return codec[T]{[]string{key},
		func(w *writer, v *T) {
			for _, n := range *p(v) {
				w.num(key, int64(n))
			}
		},
		func(r *reader, v *T, f field) { *p(v) = append(*p(v), r.int(f)) }}
}

func num64[T any](key string, p func(*T) *int64) codec[T] {
	return codec[T]{[]string{key},
		func(w *writer, v *T) { w.num(key, *p(v)) },
		func(r *reader, v *T, f field) { *p(v) = r.int64(f) }}
}

func unum64[T any](key string, p func(*T) *uint64) codec[T] {
	return codec[T]{[]string{key},
		func(w *writer, v *T) { w.unum(key, *p(v)) },
		func(r *reader, v *T, f field) { *p(v) = r.uint64(f) }}
}

// unixNano is a time as nanoseconds since the epoch.
func unixNano[T any](key string, p func(*T) *time.Time) codec[T] {
	return codec[T]{[]string{key},
		func(w *writer, v *T) { w.num(key, p(v).UnixNano()) },
		func(r *reader, v *T, f field) { *p(v) = time.Unix(0, r.int64(f)) }}
}

// boolFlag is written only when true, and read as true whatever its value
// (the task spec's and the status's flags).
func boolFlag[T any](key string, p func(*T) *bool) codec[T] {
	return codec[T]{[]string{key},
		func(w *writer, v *T) { w.flag(key, *p(v)) },
		func(_ *reader, v *T, _ field) { *p(v) = true }}
}

// boolValue is written only when true, and read as its value (the enter
// spec's flags).
func boolValue[T any](key string, p func(*T) *bool) codec[T] {
	c := boolFlag(key, p)
	c.set = func(_ *reader, v *T, f field) { *p(v) = f.val == "true" }
	return c
}

// when writes c only when cond holds; it is read whenever present.
func when[T any](cond func(*T) bool, c codec[T]) codec[T] {
	put := c.put
	c.put = func(w *writer, v *T) {
		if cond(v) {
			put(w, v)
		}
	}
	return c
}

// within is the fields of a struct inside T (embedded Credentials).
func within[T, U any](p func(*T) *U, t table[U]) table[T] {
	out := make(table[T], len(t))
	for i, c := range t {
		out[i] = codec[T]{c.keys,
			func(w *writer, v *T) { c.put(w, p(v)) },
			func(r *reader, v *T, f field) { c.set(r, p(v), f) }}
	}
	return out
}

// optional is the fields of a struct T points to: none written when the
// pointer is nil, and the struct made by the first of them read.
func optional[T, U any](p func(*T) **U, t table[U]) table[T] {
	out := make(table[T], len(t))
	for i, c := range t {
		out[i] = codec[T]{c.keys,
			func(w *writer, v *T) {
				if u := *p(v); u != nil {
					c.put(w, u)
				}
			},
			func(r *reader, v *T, f field) {
				if *p(v) == nil {
					*p(v) = new(U)
				}
				c.set(r, *p(v), f)
			}}
	}
	return out
}

// records is a list of records of type U, each written as t's fields in
// turn: t's first key starts a record, its other keys fill in the last.
func records[T, U any](p func(*T) *[]U, t table[U]) codec[T] {
	var keys []string
	for _, c := range t {
		keys = append(keys, c.keys...)
	}
	first := keys[0]
	return codec[T]{keys,
		func(w *writer, v *T) {
			for i := range *p(v) {
				for _, c := range t {
					c.put(w, &(*p(v))[i])
				}
			}
		},
		func(r *reader, v *T, f field) {
			list := p(v)
			if f.key == first {
				var u U
				*list = append(*list, u)
			} else if len(*list) == 0 {
				r.fail(fmt.Errorf("%s before %s", f.key, first))
				return
			}
			for _, c := range t {
				if c.keys[0] == f.key {
					c.set(r, &(*list)[len(*list)-1], f)
				}
			}
		}}
}
