package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	mrand "math/rand/v2"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berth/berth/internal/beneath"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
	tmpl "github.com/berth/berth/task/template"
)

// taskTemplates are one task's templates as last rendered.
type taskTemplates struct {
	i   int
	t   *jobspec.Task
	dir string // the task dir: relative destinations and file() start there
	// env is the task's environment without its env templates: what the
	// env function reads and what those templates add to.
	env  map[string]string
	list []*renderedTemplate
	// envVars are the env templates' KEY=VALUE pairs (guarded by ext.mu).
	envVars map[string]string
}

type renderedTemplate struct {
	spec         *jobspec.Template
	in           tmpl.Input
	dest         string
	content      []byte
	usesServices bool
	usesVars     bool
	env          map[string]string
}

// maxTemplateSource bounds a template's source file.
const maxTemplateSource = 4 << 20

// startTemplates renders task t's templates into its directory before it
// first starts, as Nomad's template hook: a template that cannot render
// keeps the task from starting (its error is an event). Templates that
// read services are rendered again when the catalog changes, and their
// change_mode applied.
func (a *allocRun) startTemplates(ctx context.Context, t *jobspec.Task, dt *driver.Task, vars map[string]string) error {
	if len(t.Templates) == 0 {
		return nil
	}
	i := a.taskIndex(t)
	tt := &taskTemplates{i: i, t: t, dir: driver.TaskDir(a.dir, t.Name), env: maps.Clone(dt.Env), envVars: map[string]string{}}
	watch := false
	var dests []string
	for _, spec := range t.Templates {
		rt, err := a.loadTemplate(tt, spec, vars)
		if err == nil {
			_, err = a.renderTemplate(tt, rt)
		}
		if err != nil {
			name := spec.Destination
			if rt != nil {
				name = rel(tt.dir, rt.dest)
			}
			err = fmt.Errorf("task %q: template %s: %w", t.Name, name, err)
			a.taskEvent(i, "Template Failure", err.Error())
			return err
		}
		tt.list = append(tt.list, rt)
		watch = watch || rt.watched()
		dests = append(dests, rel(tt.dir, rt.dest))
	}
	x := &a.ext
	x.mu.Lock()
	tt.envVars = tt.mergedEnv()
	if x.tmpl == nil {
		x.tmpl = map[int]*taskTemplates{}
	}
	x.tmpl[i] = tt
	if watch && !x.closed {
		wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		x.stopTmpl = append(x.stopTmpl, cancel)
		x.watchersWG.Add(1)
		go func() {
			defer x.watchersWG.Done()
			a.watchTemplates(wctx, tt)
		}()
	}
	x.mu.Unlock()
	a.taskEvent(i, "Templates Rendered", "Rendered "+strings.Join(dests, ", "))
	return nil
}

func (a *allocRun) taskIndex(t *jobspec.Task) int {
	for i, x := range a.group.Tasks {
		if x == t {
			return i
		}
	}
	return -1
}

func rel(dir, p string) string {
	if r, err := filepath.Rel(dir, p); err == nil {
		return r
	}
	return p
}

// mergedEnv is the KEY=VALUE pairs of the env templates, later ones
// winning.
func (tt *taskTemplates) mergedEnv() map[string]string {
	out := map[string]string{}
	for _, rt := range tt.list {
		maps.Copy(out, rt.env)
	}
	return out
}

// loadTemplate finds a template's text and destination. A source is read
// from the task dir (where artifacts land), as Nomad's; for a job run
// from its file (berth run), a source not there is read next to the job
// file.
func (a *allocRun) loadTemplate(tt *taskTemplates, spec *jobspec.Template, vars map[string]string) (*renderedTemplate, error) {
	dest, err := securePath(a.dir, a.hostPath(tt.dir, jobspec.Interpolate(spec.Destination, vars), vars))
	if err != nil {
		return nil, fmt.Errorf("destination: %w", err)
	}
	rt := &renderedTemplate{spec: spec, dest: dest}
	rt.in = tmpl.Input{Name: rel(tt.dir, dest), Left: spec.LeftDelimiter, Right: spec.RightDelimiter, ErrorOnMissingKey: spec.ErrorOnMissingKey}
	if spec.Source == "" {
		rt.in.Text = spec.Data
		return rt, nil
	}
	text, err := a.templateSource(tt, jobspec.Interpolate(spec.Source, vars))
	if err != nil {
		return rt, err
	}
	// Checked now: a source fetched as an artifact was not at validate.
	if iss := tmpl.Check(text, spec.LeftDelimiter, spec.RightDelimiter); len(iss) > 0 {
		return rt, fmt.Errorf("source %s line %s", spec.Source, iss[0])
	}
	rt.in.Text = text
	return rt, nil
}

func (a *allocRun) templateSource(tt *taskTemplates, src string) (string, error) {
	var tried []string
	read := func(p string, within bool) (string, bool, error) {
		if within {
			sp, err := securePath(a.dir, p)
			if err != nil {
				return "", false, err
			}
			p = sp
		}
		tried = append(tried, p)
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			return "", false, nil
		}
		if err != nil {
			return "", false, err
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxTemplateSource+1))
		if err != nil {
			return "", false, err
		}
		if len(b) > maxTemplateSource {
			return "", false, fmt.Errorf("source %s is larger than %d bytes", p, maxTemplateSource)
		}
		return string(b), true, nil
	}
	inTask := src
	if !filepath.IsAbs(src) {
		inTask = filepath.Join(tt.dir, src)
	}
	if isUnder(a.dir, inTask) || !filepath.IsAbs(src) {
		if text, ok, err := read(inTask, true); err != nil || ok {
			return text, err
		}
	}
	if dir := a.job.Dir; dir != "" {
		p := src
		if !filepath.IsAbs(src) {
			p = filepath.Join(dir, src)
		}
		if text, ok, err := read(p, false); err != nil || ok {
			return text, err
		}
	} else if filepath.IsAbs(src) && !isUnder(a.dir, src) {
		return "", fmt.Errorf("source %s is outside the allocation directory; a job sent to the agent reads templates from its task dir only (fetch it with an artifact)", src)
	}
	return "", fmt.Errorf("source %s not found (looked at %s)", src, strings.Join(tried, ", "))
}

// renderTemplate renders rt and writes it when its output changed. It
// reports whether it did.
func (a *allocRun) renderTemplate(tt *taskTemplates, rt *renderedTemplate) (bool, error) {
	c := tmpl.Context{Env: tt.env, Sandbox: tt.dir, Namespace: a.job.Namespace}
	if a.r.o.Services != nil {
		c.Catalog = a.r.o.Services
	}
	if a.r.o.Store != nil {
		c.Vars = a.templateVars(tt.t)
	}
	res, err := tmpl.Render(rt.in, c)
	if err != nil {
		return false, err
	}
	rt.usesServices, rt.usesVars = res.UsesServices, res.UsesVars
	if rt.content != nil && bytes.Equal(rt.content, res.Output) {
		return false, nil
	}
	if rt.spec.Env {
		env, err := tmpl.ParseEnv(res.Output)
		if err != nil {
			return false, fmt.Errorf("env = true: %w", err)
		}
		rt.env = env
	}
	if err := a.writeTemplate(rt, res.Output); err != nil {
		return false, err
	}
	rt.content = res.Output
	return true, nil
}

// writeTemplate replaces the destination at once (a new file renamed over
// it), with the template's perms and owner: a task reading it never sees
// half of it.
func (a *allocRun) writeTemplate(rt *renderedTemplate, b []byte) error {
	mode, err := strconv.ParseUint(rt.spec.Perms, 8, 32)
	if err != nil {
		return fmt.Errorf("perms %q: %w", rt.spec.Perms, err)
	}
	own := beneath.Keep
	if rt.spec.UID != nil {
		own.UID = *rt.spec.UID
	}
	if rt.spec.GID != nil {
		own.GID = *rt.spec.GID
	}
	return replaceUnder(a.dir, rt.dest, b, os.FileMode(mode), own)
}

// watched reports whether the template reads what may change: services
// or variables.
func (rt *renderedTemplate) watched() bool { return rt.usesServices || rt.usesVars }

// templateChanges returns what watchTemplates waits on: a channel closed
// at the next change of the catalog or of the variables (until ctx ends).
func (a *allocRun) templateChanges(ctx context.Context) func() <-chan struct{} {
	return func() <-chan struct{} {
		var svc, vars <-chan struct{}
		if reg := a.r.o.Services; reg != nil {
			svc = reg.Changed()
		}
		if s := a.r.o.Store; s != nil {
			vars = s.VariablesChanged()
		}
		if svc == nil || vars == nil {
			if svc == nil {
				return vars
			}
			return svc
		}
		out := make(chan struct{})
		go func() {
			select {
			case <-svc:
			case <-vars:
			case <-ctx.Done():
				return
			}
			close(out)
		}()
		return out
	}
}

// templateVars are the Nomad Variables task t's templates may read:
// those of its job's namespace at nomad/jobs/<job>, .../<group> and
// .../<group>/<task>, as Nomad's default workload identity allows (the
// parent's ID for a dispatched or periodic job's launch).
func (a *allocRun) templateVars(t *jobspec.Task) tmpl.Variables {
	job := a.job.ID
	if a.job.ParentID != "" {
		job = a.job.ParentID
	}
	base := "nomad/jobs/" + job
	ns := a.job.Namespace
	if ns == "" {
		ns = "default"
	}
	return &taskVars{s: a.r.o.Store, ns: ns, allowed: []string{base, base + "/" + a.group.Name, base + "/" + a.group.Name + "/" + t.Name}}
}

// taskVars reads the store's variables for a task's templates.
type taskVars struct {
	s       *store.Store
	ns      string
	allowed []string
}

// varsTimeout bounds a template's read of the store.
const varsTimeout = 10 * time.Second

func (v *taskVars) Var(path string) (map[string]string, bool, error) {
	if !slices.Contains(v.allowed, path) {
		return nil, false, fmt.Errorf("access denied: a task's templates read the variables %s only", strings.Join(v.allowed, ", "))
	}
	ctx, cancel := context.WithTimeout(context.Background(), varsTimeout)
	defer cancel()
	got, err := v.s.GetVariable(ctx, v.ns, path)
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return got.Items, true, nil
}

func (v *taskVars) List(prefix string) ([]tmpl.VarMeta, error) {
	ctx, cancel := context.WithTimeout(context.Background(), varsTimeout)
	defer cancel()
	l, err := v.s.ListVariables(ctx, v.ns, prefix)
	if err != nil {
		return nil, err
	}
	var out []tmpl.VarMeta
	for _, x := range l {
		if slices.Contains(v.allowed, x.Path) {
			out = append(out, tmpl.VarMeta{Namespace: x.Namespace, Path: x.Path, CreateIndex: x.CreateIndex, ModifyIndex: x.ModifyIndex, CreateTime: x.CreateTime, ModifyTime: x.ModifyTime})
		}
	}
	return out, nil
}

// watchTemplates renders tt's templates that read services or variables
// again whenever those change (after their wait's quiet time), writes
// what changed and applies the change modes.
func (a *allocRun) watchTemplates(ctx context.Context, tt *taskTemplates) {
	var waitMin, waitMax time.Duration
	for _, rt := range tt.list {
		if rt.watched() {
			waitMin, waitMax = max(waitMin, rt.spec.WaitMin), max(waitMax, rt.spec.WaitMax)
		}
	}
	changes := a.templateChanges(ctx)
	changed := changes()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		if changed = quiesce(ctx, changes, waitMin, waitMax); changed == nil {
			return
		}
		var rerendered []*renderedTemplate
		for _, rt := range tt.list {
			if !rt.watched() {
				continue
			}
			ok, err := a.renderTemplate(tt, rt)
			if err != nil {
				// The file keeps its last content.
				a.taskEvent(tt.i, "Template Failure", fmt.Sprintf("template %s: %v", rel(tt.dir, rt.dest), err))
				continue
			}
			if ok {
				rerendered = append(rerendered, rt)
			}
		}
		if len(rerendered) == 0 || ctx.Err() != nil {
			continue
		}
		a.ext.mu.Lock()
		tt.envVars = tt.mergedEnv()
		a.ext.mu.Unlock()
		a.applyChangeModes(ctx, tt, rerendered)
	}
}

// quiesce waits until the catalog has not changed for min, or max has
// passed since the first change (0: no bound), and returns the channel of
// the next change; nil when ctx ended.
func quiesce(ctx context.Context, changed func() <-chan struct{}, minWait, maxWait time.Duration) <-chan struct{} {
	ch := changed()
	if minWait <= 0 {
		return ch
	}
	var deadline <-chan time.Time
	if maxWait > 0 {
		t := time.NewTimer(maxWait)
		defer t.Stop()
		deadline = t.C
	}
	for {
		quiet := time.NewTimer(minWait)
		select {
		case <-ctx.Done():
			quiet.Stop()
			return nil
		case <-deadline:
			quiet.Stop()
			return changed()
		case <-quiet.C:
			return changed()
		case <-ch:
			quiet.Stop()
			ch = changed()
		}
	}
}

// applyChangeModes does what the re-rendered templates ask, as Nomad: a
// restart if any asks for one (then no signal is sent), else each signal
// once; scripts run either way; all after a random part of the largest
// splay.
func (a *allocRun) applyChangeModes(ctx context.Context, tt *taskTemplates, rts []*renderedTemplate) {
	var splay time.Duration
	restart := false
	var signals []string
	var scripts []*renderedTemplate
	var names []string
	for _, rt := range rts {
		names = append(names, rel(tt.dir, rt.dest))
		switch rt.spec.ChangeMode {
		case "restart":
			restart = true
		case "signal":
			if !containsStr(signals, rt.spec.ChangeSignal) {
				signals = append(signals, rt.spec.ChangeSignal)
			}
		case "script":
			scripts = append(scripts, rt)
		default:
			continue
		}
		splay = max(splay, rt.spec.Splay)
	}
	what := "Template " + strings.Join(names, ", ") + " re-rendered"
	if !restart && len(signals) == 0 && len(scripts) == 0 {
		a.taskEvent(tt.i, "Template Re-rendered", what+" (change_mode noop)")
		return
	}
	if splay > 0 && !sleep(ctx, time.Duration(mrand.Int64N(int64(splay)))) {
		return
	}
	if restart {
		// Nomad's words, with which templates.
		a.restartTask(tt.i, false, false, "Template with change_mode restart re-rendered: "+strings.Join(names, ", "))
	} else {
		for _, s := range signals {
			a.signalTask(ctx, tt.i, s, what)
		}
	}
	for _, rt := range scripts {
		a.runChangeScript(ctx, tt, rt, what)
	}
}

func containsStr(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// signalTask sends task i a signal without stopping it.
func (a *allocRun) signalTask(ctx context.Context, i int, sig, why string) {
	a.ext.mu.Lock()
	h := a.ext.handles[i]
	a.ext.mu.Unlock()
	if h == nil {
		return
	}
	num, ok := jobspec.SignalNumber(sig)
	s, canSignal := h.(driver.Signaler)
	if !ok || !canSignal {
		a.taskEvent(i, "Signal Failure", fmt.Sprintf("Cannot send %s", sig))
		return
	}
	a.taskEvent(i, TaskSignaling, fmt.Sprintf("%s, sending %s", why, sig))
	if err := s.Signal(ctx, num); err != nil {
		a.taskEvent(i, "Signal Failure", err.Error())
	}
}

// runChangeScript runs a template's change_script as the task would see
// it: in the allocation's namespace, with its environment, from its task
// dir. Only for raw_exec and exec tasks (berth does not exec into
// containers). A failure with fail_on_error kills the task.
func (a *allocRun) runChangeScript(ctx context.Context, tt *taskTemplates, rt *renderedTemplate, why string) {
	cs := rt.spec.ChangeScript
	err := func() error {
		if tt.t.Driver == "podman" || tt.t.Driver == "docker" {
			return fmt.Errorf("berth does not run change scripts in %s containers", tt.t.Driver)
		}
		sctx, cancel := context.WithTimeout(ctx, cs.Timeout)
		defer cancel()
		cmd := osexec.CommandContext(sctx, cs.Command, cs.Args...)
		cmd.Dir = tt.dir
		a.ext.mu.Lock()
		env := maps.Clone(tt.env)
		maps.Copy(env, tt.envVars)
		a.ext.mu.Unlock()
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := cmd.Start
		a.mu.Lock()
		path := ""
		if n := a.alloc.Network; n != nil {
			path = n.NetnsPath
		}
		a.mu.Unlock()
		var err error
		if path != "" {
			err = netns.WithPath(path, start)
		} else {
			err = start()
		}
		if err == nil {
			err = cmd.Wait()
		}
		if err != nil {
			if s := strings.TrimSpace(out.String()); s != "" {
				err = fmt.Errorf("%w: %s", err, s)
			}
			return err
		}
		return nil
	}()
	if err == nil {
		a.taskEvent(tt.i, "Template Script", fmt.Sprintf("%s, ran %s", why, cs.Command))
		return
	}
	msg := fmt.Sprintf("%s, change_script %s failed: %v", why, cs.Command, err)
	a.taskEvent(tt.i, "Template Script Failed", msg)
	if cs.FailOnError {
		a.restartTask(tt.i, true, true, msg)
	}
}
