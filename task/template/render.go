package template

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"sort"
	"strings"
	gotemplate "text/template"
)

// Service is one instance as nomadService returns it, with
// consul-template's field names.
type Service struct {
	ID         string
	Name       string
	Namespace  string
	Node       string
	Datacenter string
	JobID      string
	AllocID    string
	Address    string
	Port       int
	Tags       ServiceTags
	Meta       map[string]string
}

// ServiceTags are a service's tags; Contains is what templates call.
type ServiceTags []string

// Contains reports whether the tags include v.
func (t ServiceTags) Contains(v string) bool { return contains(t, v) }

// ServiceSummary is one entry of nomadServices: a service name with the
// union of its instances' tags.
type ServiceSummary struct {
	Name      string
	Namespace string
	Tags      ServiceTags
}

// Catalog is what nomadService and nomadServices read: the registered
// instances of the node's native services, whatever their checks say, as
// Nomad 1.6.5's service catalog (it keeps no health): a check changing
// status changes nothing a template renders.
type Catalog interface {
	// Instances returns the instances of a service of namespace,
	// sorted by ID.
	Instances(namespace, name string) []*Service
	// Names lists the services of namespace, sorted by name.
	Names(namespace string) []ServiceSummary
}

// Input is one template to render.
type Input struct {
	// Name says which template this is in errors ("template local/app.conf").
	Name string
	Text string
	// Left and Right are the delimiters; empty means "{{" and "}}".
	Left, Right       string
	ErrorOnMissingKey bool
}

// Context is what a template can read.
type Context struct {
	// Env is the task's environment (env, envOrDefault, mustEnv).
	Env map[string]string
	// Sandbox is the directory file reads from (the task dir): relative
	// paths are taken from it and nothing outside it can be read.
	Sandbox string
	// Namespace is the job's: nomadService looks up services there.
	Namespace string
	// Catalog answers nomadService; nil means no services at all.
	Catalog Catalog
	// Vars answers nomadVar and nomadVarList; nil means no variables.
	Vars Variables
}

// Result is a rendered template.
type Result struct {
	Output []byte
	// UsesServices is set when the template called nomadService or
	// nomadServices: it must be rendered again when the catalog changes.
	UsesServices bool
	// UsesVars is set when the template read Nomad Variables: it must be
	// rendered again when they change.
	UsesVars bool
}

// render is the state of one execution.
type render struct {
	ctx          Context
	tmpl         *gotemplate.Template
	usesServices bool
	usesVars     bool
}

// Render executes in against c.
func Render(in Input, c Context) (*Result, error) {
	r := &render{ctx: c}
	left, right := in.Left, in.Right
	if left == "" {
		left = "{{"
	}
	if right == "" {
		right = "}}"
	}
	t := gotemplate.New(in.Name).Delims(left, right).Funcs(funcs(r))
	if in.ErrorOnMissingKey {
		t = t.Option("missingkey=error")
	}
	if _, err := t.Parse(in.Text); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	r.tmpl = t
	var b bytes.Buffer
	if err := t.Execute(&b, nil); err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	return &Result{Output: b.Bytes(), UsesServices: r.usesServices, UsesVars: r.usesVars}, nil
}

func (r *render) env(name string) string { return r.ctx.Env[name] }

func (r *render) envOrDefault(name, def string) string {
	if v, ok := r.ctx.Env[name]; ok {
		return v
	}
	return def
}

func (r *render) mustEnv(name string) (string, error) {
	if v, ok := r.ctx.Env[name]; ok {
		return v, nil
	}
	return "", fmt.Errorf("mustEnv: %s is not set in the task's environment", name)
}

// maxFile bounds what file reads into a template.
const maxFile = 16 << 20

// file reads a file inside the sandbox, as Nomad's template sandbox: a
// relative path from it, an absolute one only if inside it, and no
// symbolic link leading out.
func (r *render) file(p string) (string, error) {
	if r.ctx.Sandbox == "" {
		return "", fmt.Errorf("file %q: no task directory to read from", p)
	}
	root, err := filepath.EvalSymlinks(r.ctx.Sandbox)
	if err != nil {
		return "", fmt.Errorf("file %q: %w", p, err)
	}
	full := p
	if !filepath.IsAbs(p) {
		full = filepath.Join(root, p)
	}
	real, err := filepath.EvalSymlinks(full)
	if err != nil {
		return "", fmt.Errorf("file %q: %w", p, err)
	}
	if rel, err := filepath.Rel(root, real); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("file %q is outside the task directory %s, which is all a template may read", p, r.ctx.Sandbox)
	}
	f, err := os.Open(real)
	if err != nil {
		return "", fmt.Errorf("file %q: %w", p, err)
	}
	defer f.Close()
	var b bytes.Buffer
	n, err := b.ReadFrom(&limited{f, maxFile + 1})
	if err != nil {
		return "", fmt.Errorf("file %q: %w", p, err)
	}
	if n > maxFile {
		return "", fmt.Errorf("file %q is larger than %d bytes", p, maxFile)
	}
	return b.String(), nil
}

type limited struct {
	f *os.File
	n int64
}

func (l *limited) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("too large")
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.f.Read(p)
	l.n -= int64(n)
	return n, err
}

// nomadService is Nomad's: nomadService NAME, or nomadService COUNT KEY
// NAME for a stable subset of COUNT instances (rendezvous hashing on KEY,
// e.g. the allocation ID). NAME may be "TAG.NAME" to keep the instances
// with that tag, and end in "@REGION" (this node's only).
func (r *render) nomadService(args ...any) ([]*Service, error) {
	r.usesServices = true
	var name string
	count, key := -1, ""
	switch len(args) {
	case 1:
		s, ok := args[0].(string)
		if !ok {
			return nil, fmt.Errorf("nomadService: want a service name, got %T", args[0])
		}
		name = s
	case 3:
		n, err := toInt(args[0])
		if err != nil {
			return nil, fmt.Errorf("nomadService: count: %w", err)
		}
		k, ok1 := args[1].(string)
		s, ok2 := args[2].(string)
		if !ok1 || !ok2 {
			return nil, errors.New("nomadService: want COUNT KEY NAME")
		}
		count, key, name = int(n), k, s
	default:
		return nil, fmt.Errorf("nomadService: want NAME or COUNT KEY NAME, got %d arguments", len(args))
	}
	name, _, _ = strings.Cut(name, "@")
	tag := ""
	if t, n, ok := strings.Cut(name, "."); ok {
		tag, name = t, n
	}
	if name == "" {
		return nil, errors.New("nomadService: empty service name")
	}
	var out []*Service
	if r.ctx.Catalog != nil {
		for _, s := range r.ctx.Catalog.Instances(r.ctx.Namespace, name) {
			if tag == "" || s.Tags.Contains(tag) {
				out = append(out, s)
			}
		}
	}
	if count >= 0 && count < len(out) {
		out = subset(out, key, count)
	}
	return out, nil
}

// subset keeps the n instances whose hash with key is highest, in ID
// order: the same allocations keep the same instances while they live.
func subset(l []*Service, key string, n int) []*Service {
	type scored struct {
		s *Service
		h uint64
	}
	sc := make([]scored, len(l))
	for i, s := range l {
		h := fnv.New64a()
		h.Write([]byte(key))
		h.Write([]byte{0})
		h.Write([]byte(s.ID))
		sc[i] = scored{s, h.Sum64()}
	}
	sort.Slice(sc, func(i, j int) bool { return sc[i].h > sc[j].h })
	out := make([]*Service, 0, n)
	for _, x := range sc[:n] {
		out = append(out, x.s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (r *render) nomadServices(args ...string) ([]ServiceSummary, error) {
	r.usesServices = true
	if len(args) > 1 {
		return nil, fmt.Errorf("nomadServices: want at most one argument, got %d", len(args))
	}
	if r.ctx.Catalog == nil {
		return nil, nil
	}
	return r.ctx.Catalog.Names(r.ctx.Namespace), nil
}

// executeTemplate runs a template made with define, as consul-template's.
func (r *render) executeTemplate(name string, data ...any) (string, error) {
	var dot any
	switch len(data) {
	case 0:
	case 1:
		dot = data[0]
	default:
		return "", fmt.Errorf("executeTemplate: want a name and at most one value, got %d values", len(data))
	}
	var b bytes.Buffer
	if err := r.tmpl.ExecuteTemplate(&b, name, dot); err != nil {
		return "", err
	}
	return b.String(), nil
}
