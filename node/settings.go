package node

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/spf13/pflag"
)

// Setting is one setting of a configuration struct, named once by its
// field's hcl tag.
type Setting struct {
	// Path is its name in the HCL file: "data_dir", or "bridge.subnet"
	// inside a block.
	Path string
	// Flag is its flag: Path with '-' for '_' and '.' ("bridge-subnet");
	// empty for a setting the command line must not carry (a secret
	// would show in ps).
	Flag string
	// Aliases are older spellings of Flag, accepted, hidden, deprecated.
	Aliases []string
	Help    string
	index   []int
}

func flagName(path string) string {
	return strings.NewReplacer("_", "-", ".", "-").Replace(path)
}

// Settings lists the settings of the struct v points to (or is): every
// field with an hcl attribute tag, and those of its hcl blocks. Fields
// without an hcl tag, such as an embedded Config, are not v's settings,
// as gohcl does not decode them either. Tags besides hcl: help (the
// flag's usage), alias (comma-separated older flag names) and flag:"-"
// (no flag).
func Settings(v any) []Setting {
	t := reflect.TypeOf(v)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return settingsOf(t, "", nil, false)
}

// noFlag is set inside a block tagged flag:"-": its settings have no
// flags of their own (the block's command owns them).
func settingsOf(t reflect.Type, prefix string, index []int, noFlag bool) []Setting {
	var out []Setting
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("hcl")
		if tag == "" {
			continue
		}
		name, kind, _ := strings.Cut(tag, ",")
		idx := append(append([]int(nil), index...), i)
		switch kind {
		case "block":
			if f.Type.Kind() == reflect.Slice {
				// Labeled blocks: one setting, whose flag adds one block.
				out = append(out, Setting{Path: prefix + name, Flag: flagName(prefix + name), Help: f.Tag.Get("help"), index: idx})
				continue
			}
			bt := f.Type
			if bt.Kind() == reflect.Pointer {
				bt = bt.Elem()
			}
			out = append(out, settingsOf(bt, prefix+name+".", idx, noFlag || f.Tag.Get("flag") == "-")...)
		case "", "attr", "optional":
			s := Setting{Path: prefix + name, Help: f.Tag.Get("help"), index: idx}
			if !noFlag && f.Tag.Get("flag") != "-" {
				s.Flag = flagName(s.Path)
			}
			if a := f.Tag.Get("alias"); a != "" {
				s.Aliases = strings.Split(a, ",")
			}
			out = append(out, s)
		default:
			panic(fmt.Sprintf("node: setting %s%s: hcl tag kind %q is not a setting", prefix, name, kind))
		}
	}
	return out
}

// field is the field at index in the struct v, following (and, with
// alloc, allocating) block pointers; ok is false at a nil pointer.
func field(v reflect.Value, index []int, alloc bool) (reflect.Value, bool) {
	for _, i := range index {
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				if !alloc {
					return reflect.Value{}, false
				}
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		v = v.Field(i)
	}
	return v, true
}

// Flags are the flags bound to one configuration struct's settings.
type Flags struct {
	fs       *pflag.FlagSet
	src      reflect.Value
	settings []Setting
}

// BindFlags defines a flag for every setting of the struct v points to,
// with v's values as defaults; parsing the flags writes into v. Overlay
// then carries the flags that were given onto another configuration (one
// read from a file): the command line wins over the file, and a flag's
// default never does.
func BindFlags(fs *pflag.FlagSet, v any) *Flags {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("node: BindFlags needs a pointer to a struct, got %T", v))
	}
	b := &Flags{fs: fs, src: rv.Elem()}
	for _, s := range Settings(v) {
		if s.Flag == "" {
			continue
		}
		fv, _ := field(b.src, s.index, true)
		switch p := fv.Addr().Interface().(type) {
		case *string:
			fs.StringVar(p, s.Flag, *p, s.Help)
		case *int:
			fs.IntVar(p, s.Flag, *p, s.Help)
		case *bool:
			fs.BoolVar(p, s.Flag, *p, s.Help)
		case *[]string:
			fs.Var((*pathList)(p), s.Flag, s.Help)
		case *[]*HostVolume:
			fs.Var((*hostVolumes)(p), s.Flag, s.Help)
		default:
			panic(fmt.Sprintf("node: setting %s: no flag for type %s", s.Path, fv.Type()))
		}
		f := fs.Lookup(s.Flag)
		for _, a := range s.Aliases {
			fs.AddFlag(&pflag.Flag{Name: a, Usage: f.Usage, Value: f.Value, DefValue: f.DefValue, NoOptDefVal: f.NoOptDefVal})
			_ = fs.MarkDeprecated(a, "use --"+s.Flag)
		}
		b.settings = append(b.settings, s)
	}
	return b
}

// Changed reports whether the setting at path was given on the command
// line (under its name or an alias).
func (b *Flags) Changed(path string) bool {
	for _, s := range b.settings {
		if s.Path == path {
			return b.changed(s)
		}
	}
	return false
}

func (b *Flags) changed(s Setting) bool {
	for _, n := range append([]string{s.Flag}, s.Aliases...) {
		if b.fs.Changed(n) {
			return true
		}
	}
	return false
}

// Overlay sets, in dst (a pointer to the struct type BindFlags was given),
// every setting whose flag was given to the value the flag set.
func (b *Flags) Overlay(dst any) {
	dv := reflect.ValueOf(dst)
	if dv.Kind() != reflect.Pointer || dv.Elem().Type() != b.src.Type() {
		panic(fmt.Sprintf("node: Overlay onto %T, flags are bound to %s", dst, b.src.Type()))
	}
	for _, s := range b.settings {
		if !b.changed(s) {
			continue
		}
		from, _ := field(b.src, s.index, false)
		to, _ := field(dv.Elem(), s.index, true)
		if from.Kind() == reflect.Slice {
			// The destination must not share the flag's backing array.
			from = reflect.AppendSlice(reflect.MakeSlice(from.Type(), 0, from.Len()), from)
		}
		to.Set(from)
	}
}

// pathList is a list flag in $PATH form: "a:b:c", empty entries dropped;
// a second use replaces the first, as a string flag's does.
type pathList []string

func (l *pathList) String() string { return strings.Join(*l, ":") }

func (l *pathList) Set(s string) error {
	var out []string
	for _, p := range filepath.SplitList(s) {
		if p != "" {
			out = append(out, p)
		}
	}
	*l = out
	return nil
}

// Type is "string": the help shows the colon-separated form.
func (l *pathList) Type() string { return "string" }
