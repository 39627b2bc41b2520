package jobspec

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar"
	homedir "github.com/mitchellh/go-homedir"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
)

// MaxFilesetEntries bounds the directory entries one fileset() call may
// walk: fileset("/", "**") walked the whole host for 29 minutes and
// 9.3 GB before.
const MaxFilesetEntries = 10_000

// fsRoots are the directories the filesystem functions may read beneath:
// the working directory (where Nomad resolves relative paths) and the job
// file's directory (where the files a job ships with are). A path
// outside both, after its symlinks are resolved, is refused: validating
// a job file must not read /etc/shadow, /dev/zero or walk "/".
type fsRoots struct {
	cwd, jobDir string
	b           *budget
}

// base is where a relative path resolves: the working directory, or the
// job file's directory when the path exists only there.
func (r fsRoots) base(p string) string {
	if filepath.IsAbs(p) || r.jobDir == "" || r.jobDir == r.cwd {
		return r.cwd
	}
	if _, err := os.Stat(filepath.Join(r.cwd, p)); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(r.jobDir, p)); err == nil {
			return r.jobDir
		}
	}
	return r.cwd
}

// resolve returns p as an absolute clean path (~ expanded) and the same
// with its symlinks resolved ("" when it does not exist), or an error
// when it lies outside the roots.
func (r fsRoots) resolve(fn, p string) (abs, real string, err error) {
	p, err = homedir.Expand(p)
	if err != nil {
		return "", "", fmt.Errorf("failed to expand ~: %w", err)
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(r.base(p), p)
	}
	abs = filepath.Clean(p)
	real, err = filepath.EvalSymlinks(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		real, err = "", nil
	case err != nil:
		return "", "", fmt.Errorf("failed to resolve %s: %w", abs, err)
	}
	check := abs
	if real != "" {
		check = real
	}
	if !r.inside(check) {
		return "", "", fmt.Errorf("%s() reads only beneath the working directory (%s) or the job file's directory (%s); %s is outside both: copy what the job needs next to the job file",
			fn, r.cwd, r.jobDirText(), abs)
	}
	return abs, real, nil
}

func (r fsRoots) jobDirText() string {
	if r.jobDir == "" {
		return "none: the job was not read from a file"
	}
	return r.jobDir
}

func (r fsRoots) inside(p string) bool {
	for _, root := range []string{r.cwd, r.jobDir} {
		if root == "" {
			continue
		}
		if rr, err := filepath.EvalSymlinks(root); err == nil {
			root = rr
		}
		if rel, err := filepath.Rel(root, p); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return true
		}
	}
	return false
}

func strParams(names ...string) []function.Parameter {
	out := make([]function.Parameter, len(names))
	for i, n := range names {
		out[i] = function.Parameter{Name: n, Type: cty.String}
	}
	return out
}

// fileFunc is file(path) or filebase64(path): one regular file beneath
// the roots (not /dev/zero, not a FIFO), as large as the budget's
// strings still allow.
func (r fsRoots) fileFunc(encBase64 bool) function.Function {
	name := "file"
	if encBase64 {
		name = "filebase64"
	}
	return function.New(&function.Spec{
		Params: strParams("path"),
		Type:   function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			if err := r.b.check(); err != nil {
				return cty.NilVal, err
			}
			abs, real, err := r.resolve(name, args[0].AsString())
			if err != nil {
				return cty.NilVal, err
			}
			if real == "" {
				return cty.NilVal, fmt.Errorf("no file exists at %s", abs)
			}
			f, err := os.Open(real)
			if err != nil {
				return cty.NilVal, fmt.Errorf("failed to read %s: %w", abs, err)
			}
			defer f.Close()
			fi, err := f.Stat()
			if err != nil {
				return cty.NilVal, fmt.Errorf("failed to read %s: %w", abs, err)
			}
			if !fi.Mode().IsRegular() {
				return cty.NilVal, fmt.Errorf("%s is not a regular file, but %q", abs, fi.Mode().String())
			}
			size := fi.Size()
			if encBase64 {
				size = size * 4 / 3
			}
			if err := r.b.charge(0, size); err != nil {
				return cty.NilVal, err
			}
			// The size may grow between Stat and read: read no more.
			src, err := io.ReadAll(io.LimitReader(f, fi.Size()))
			if err != nil {
				return cty.NilVal, fmt.Errorf("failed to read %s: %w", abs, err)
			}
			if encBase64 {
				return cty.StringVal(base64.StdEncoding.EncodeToString(src)), nil
			}
			if !utf8.Valid(src) {
				return cty.NilVal, fmt.Errorf("contents of %s are not valid UTF-8; use the filebase64 function to obtain the Base64 encoded contents", abs)
			}
			return cty.StringVal(string(src)), nil
		},
	})
}

func (r fsRoots) fileExistsFunc() function.Function {
	return function.New(&function.Spec{
		Params: strParams("path"),
		Type:   function.StaticReturnType(cty.Bool),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			abs, real, err := r.resolve("fileexists", args[0].AsString())
			if err != nil {
				return cty.NilVal, err
			}
			if real == "" {
				return cty.False, nil
			}
			fi, err := os.Stat(real)
			if err != nil {
				return cty.NilVal, fmt.Errorf("failed to stat %s", abs)
			}
			if fi.Mode().IsRegular() {
				return cty.True, nil
			}
			return cty.False, fmt.Errorf("%s is not a regular file, but %q", abs, fi.Mode().String())
		},
	})
}

// fileSetFunc is fileset(path, pattern): the regular files beneath path
// whose path relative to it matches pattern, walked in lexical order
// without following symlinked directories, at most MaxFilesetEntries
// entries and within the budget's deadline.
func (r fsRoots) fileSetFunc() function.Function {
	return function.New(&function.Spec{
		Params: strParams("path", "pattern"),
		Type:   function.StaticReturnType(cty.Set(cty.String)),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			if err := r.b.check(); err != nil {
				return cty.NilVal, err
			}
			abs, real, err := r.resolve("fileset", args[0].AsString())
			if err != nil {
				return cty.NilVal, err
			}
			pattern := filepath.ToSlash(filepath.Clean(args[1].AsString()))
			if _, err := doublestar.Match(pattern, ""); err != nil {
				return cty.NilVal, fmt.Errorf("failed to glob pattern (%s): %w", pattern, err)
			}
			if real == "" {
				return cty.SetValEmpty(cty.String), nil
			}
			// Without "**", nothing deeper than the pattern's own
			// segments can match: the walk does not go there.
			maxDepth := -1
			if !strings.Contains(pattern, "**") {
				maxDepth = strings.Count(pattern, "/") + 1
			}
			var matches []cty.Value
			seen := 0
			err = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					if p == real {
						return err
					}
					return nil // unreadable below: skipped, as Glob does
				}
				if seen++; seen > MaxFilesetEntries {
					return fmt.Errorf("fileset(%q, %q) walked more than %d entries (a fixed limit); give a narrower path", abs, pattern, MaxFilesetEntries)
				}
				if seen%256 == 0 {
					if err := r.b.check(); err != nil {
						return err
					}
				}
				if p == real {
					return nil
				}
				rel, err := filepath.Rel(real, p)
				if err != nil {
					return nil
				}
				rel = filepath.ToSlash(rel)
				if d.IsDir() && maxDepth >= 0 && strings.Count(rel, "/")+1 >= maxDepth {
					return filepath.SkipDir
				}
				if ok, _ := doublestar.Match(pattern, rel); !ok {
					return nil
				}
				fi, err := os.Stat(p)
				if err != nil || !fi.Mode().IsRegular() {
					return nil
				}
				if err := r.b.charge(1, int64(len(rel))); err != nil {
					return err
				}
				matches = append(matches, cty.StringVal(rel))
				return nil
			})
			if err != nil {
				return cty.NilVal, err
			}
			if len(matches) == 0 {
				return cty.SetValEmpty(cty.String), nil
			}
			slices.SortFunc(matches, func(a, b cty.Value) int { return strings.Compare(a.AsString(), b.AsString()) })
			return cty.SetVal(matches), nil
		},
	})
}
