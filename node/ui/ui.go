// Package ui is the agent's status page: server-rendered HTML under /ui/
// with inline SVG plots and no external assets, refreshing itself, and
// readable on a phone. It renders from the API's wire types (package
// api), which it gets from a Source the agent implements, and from a
// History of the last hour the agent feeds; it never reads berth's
// records itself.
//
// On the unix socket the page needs nothing more than the socket's file
// mode. On TCP, Gate puts it behind the API's bearer token: the token
// comes once, in the URL's fragment (…/ui/#token=T, which browsers never
// send to a server) or through a login form, and the agent answers with
// an HttpOnly, SameSite=Strict session cookie signed with a key that
// lives only in this process.
package ui

import (
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/berth/berth/api"
)

// ErrNotFound is what a Source returns (wrapped) for a job, allocation or
// log that does not exist; the page answers 404.
var ErrNotFound = errors.New("not found")

// Source is what the status page reads. The agent implements it over its
// own state; tests implement it with fixtures. Every method is called per
// request, with the request's context.
type Source interface {
	Self(ctx context.Context) (*api.AgentSelf, error)
	Jobs(ctx context.Context) ([]api.JobStub, error)
	Job(ctx context.Context, id string) (*api.JobStatus, error)
	// Allocations are the stored allocations (of one job when job is
	// not empty), newest first.
	Allocations(ctx context.Context, job string) ([]api.Allocation, error)
	// Allocation accepts an ID or a unique prefix of one.
	Allocation(ctx context.Context, id string) (*api.Allocation, error)
	Namespaces(ctx context.Context) ([]api.NetnsEntry, error)
	// LogTail is the end of a task's stdout or stderr ("stdout",
	// "stderr"), at most max bytes.
	LogTail(ctx context.Context, allocID, task, stream string, max int64) ([]byte, error)
}

// Options configure a UI.
type Options struct {
	Source Source
	// History is what the plots and the gc table show; nil shows none.
	History *History
	Logger  *slog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Refresh is how often a page reloads its content; 5 s when zero,
	// never when negative.
	Refresh time.Duration
	// SessionTTL is how long a login lasts; 12 h when zero.
	SessionTTL time.Duration
}

// Prefix is where the status page is mounted.
const Prefix = "/ui/"

// Limits of what one page shows.
const (
	overviewAllocs = 25
	logTailBytes   = 4096
)

//go:embed templates/*.html assets/*
var files embed.FS

// UI serves the status page. Create it with New.
type UI struct {
	src     Source
	hist    *History
	log     *slog.Logger
	now     func() time.Time
	refresh time.Duration
	ttl     time.Duration
	key     [32]byte // signs session cookies; never leaves this process
	pages   map[string]*template.Template
	css     template.CSS
	js      template.JS
	mux     *http.ServeMux
}

// New returns the status page over opts.Source.
func New(opts Options) *UI {
	u := &UI{src: opts.Source, hist: opts.History, log: opts.Logger, now: opts.Now, refresh: opts.Refresh, ttl: opts.SessionTTL}
	if u.log == nil {
		u.log = slog.Default()
	}
	if u.now == nil {
		u.now = time.Now
	}
	if u.refresh == 0 {
		u.refresh = 5 * time.Second
	}
	if u.ttl <= 0 {
		u.ttl = 12 * time.Hour
	}
	_, _ = rand.Read(u.key[:]) // never fails (crypto/rand)
	u.pages = parsePages()
	u.css = template.CSS(mustRead("assets/style.css"))
	u.js = template.JS(mustRead("assets/page.js"))

	m := http.NewServeMux()
	m.HandleFunc("GET /ui/{$}", u.overview)
	m.HandleFunc("GET /ui/namespaces", u.namespaces)
	m.HandleFunc("GET /ui/job/{id}", u.job)
	m.HandleFunc("GET /ui/alloc/{id}", u.alloc)
	// Already authorized (the unix socket, or a session): nothing to log
	// in to.
	m.HandleFunc("GET /ui/login", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
	})
	m.HandleFunc("POST /ui/login", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
	})
	m.HandleFunc("POST /ui/logout", u.logout)
	m.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		u.fail(w, r, fmt.Errorf("no page %s: %w", r.URL.Path, ErrNotFound))
	})
	u.mux = m
	return u
}

// Handler serves the status page without asking for credentials: mount it
// at Prefix where the listener itself is the access control (the unix
// socket), and behind Gate elsewhere.
func (u *UI) Handler() http.Handler { return u.mux }

func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) { u.mux.ServeHTTP(w, r) }

func mustRead(name string) string {
	b, err := fs.ReadFile(files, name)
	if err != nil {
		panic(err) // embedded at build time
	}
	return string(b)
}

func parsePages() map[string]*template.Template {
	out := map[string]*template.Template{}
	for _, p := range []string{"overview", "job", "alloc", "namespaces", "login", "error"} {
		t := template.New("layout.html").Funcs(funcs)
		out[p] = template.Must(t.ParseFS(files, "templates/layout.html", "templates/parts.html", "templates/"+p+".html"))
	}
	return out
}

// page is what layout.html renders around a page's content.
type page struct {
	Title     string
	Nav       string // the active tab: "overview", "namespaces"
	Nonce     string
	CSS       template.CSS
	JS        template.JS
	RefreshMS int64
	Now       time.Time
	Agent     *api.AgentSelf // nil when it could not be read
	SignedIn  bool           // the request came with a session cookie
	Login     bool           // the login page: no header links
	Body      any
}

func (u *UI) render(w http.ResponseWriter, r *http.Request, code int, name string, p page) {
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	p.Nonce = base64.RawURLEncoding.EncodeToString(nonce[:])
	p.CSS, p.JS, p.Now = u.css, u.js, u.now()
	if u.refresh > 0 && !p.Login {
		p.RefreshMS = u.refresh.Milliseconds()
	}
	if r != nil {
		if c, err := r.Cookie(cookieName); err == nil && c.Value != "" {
			p.SignedIn = true
		}
	}
	var buf bytes.Buffer
	if err := u.pages[name].Execute(&buf, p); err != nil {
		u.log.Error("status page: rendering failed", "page", name, "err", err)
		http.Error(w, "status page: rendering failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	// Everything is inline and nothing is fetched but the page itself:
	// only this response's own script and style run.
	h.Set("Content-Security-Policy", fmt.Sprintf("default-src 'none'; script-src 'nonce-%[1]s'; style-src 'nonce-%[1]s'; img-src data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'", p.Nonce))
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// fail renders an error page: 404 for ErrNotFound, 500 otherwise.
func (u *UI) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusInternalServerError
	if errors.Is(err, ErrNotFound) {
		code = http.StatusNotFound
	} else {
		u.log.Warn("status page: cannot read the agent's state", "path", r.URL.Path, "err", err)
	}
	u.render(w, r, code, "error", page{
		Title: http.StatusText(code), Agent: u.self(r.Context()),
		Body: errorView{Code: code, Status: http.StatusText(code), Message: err.Error()},
	})
}

type errorView struct {
	Code            int
	Status, Message string
}

// self is the agent's own description for the header; nil on error
// (the page still renders what it can).
func (u *UI) self(ctx context.Context) *api.AgentSelf {
	s, err := u.src.Self(ctx)
	if err != nil {
		return nil
	}
	return s
}

func (u *UI) snapshot() Snapshot {
	if u.hist == nil {
		return Snapshot{}
	}
	return u.hist.Snapshot(u.now())
}

func (u *UI) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	self, err := u.src.Self(ctx)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	jobs, err := u.src.Jobs(ctx)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	allocs, err := u.src.Allocations(ctx, "")
	if err != nil {
		u.fail(w, r, err)
		return
	}
	nss, err := u.src.Namespaces(ctx)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	snap := u.snapshot()
	v := overviewView{
		Jobs: jobs, AllocTotal: len(allocs), Namespaces: len(nss),
		Pending: pendingTeardowns(nss), GC: snap.GC, LastGC: self.LastGC,
		JobCounts: counts(self.Jobs, api.JobRunning, api.JobStopping, api.JobDead),
		AllocCounts: counts(self.Allocations, api.AllocPending, api.AllocRunning, api.AllocComplete,
			api.AllocFailed, api.AllocLost),
		LatencyPlot: [2]*plot{latencyPlot(snap.Minutes, wide), latencyPlot(snap.Minutes, narrow)},
		RatePlot:    [2]*plot{ratePlot(snap.Minutes, wide), ratePlot(snap.Minutes, narrow)},
		Hour:        hourTotals(snap.Minutes),
	}
	for i := range allocs {
		if i == overviewAllocs {
			break
		}
		v.Allocs = append(v.Allocs, newAllocRow(&allocs[i]))
	}
	v.AllocMore = len(allocs) - len(v.Allocs)
	for _, n := range nss {
		if len(n.Holders) > 0 {
			v.Held++
		}
	}
	u.render(w, r, http.StatusOK, "overview", page{Title: "berth agent", Nav: "overview", Agent: self, Body: v})
}

func (u *UI) namespaces(w http.ResponseWriter, r *http.Request) {
	nss, err := u.src.Namespaces(r.Context())
	if err != nil {
		u.fail(w, r, err)
		return
	}
	v := namespacesView{Pending: pendingTeardowns(nss)}
	for _, ns := range nss {
		if ns.Berth {
			v.Berth = append(v.Berth, ns)
		} else {
			v.Others = append(v.Others, ns)
		}
	}
	u.render(w, r, http.StatusOK, "namespaces", page{Title: "Namespaces", Nav: "namespaces", Agent: u.self(r.Context()), Body: v})
}

func (u *UI) job(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	st, err := u.src.Job(ctx, id)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	allocs, err := u.src.Allocations(ctx, st.ID)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	v := jobView{Status: st}
	for i := range allocs {
		v.Allocs = append(v.Allocs, newAllocRow(&allocs[i]))
	}
	u.render(w, r, http.StatusOK, "job", page{Title: "Job " + st.ID, Agent: u.self(ctx), Body: v})
}

func (u *UI) alloc(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	al, err := u.src.Allocation(ctx, r.PathValue("id"))
	if err != nil {
		u.fail(w, r, err)
		return
	}
	v := allocView{Alloc: al, Row: newAllocRow(al), Steps: timingSteps(al.Timings)}
	for _, t := range al.Tasks {
		tl := taskLogs{Task: t.Name}
		for _, stream := range []string{"stdout", "stderr"} {
			s := logStream{Name: stream}
			b, err := u.src.LogTail(ctx, al.ID, t.Name, stream, logTailBytes)
			switch {
			case errors.Is(err, ErrNotFound):
				s.Missing = true
			case err != nil:
				s.Err = err.Error()
			default:
				s.Text, s.Truncated = tailText(b, logTailBytes)
			}
			tl.Streams = append(tl.Streams, s)
		}
		v.Logs = append(v.Logs, tl)
	}
	u.render(w, r, http.StatusOK, "alloc", page{Title: "Allocation " + shortID(al.ID), Agent: u.self(ctx), Body: v})
}

// tailText makes a log tail printable: valid UTF-8, and without the
// partial first line when the tail was cut.
func tailText(b []byte, max int) (string, bool) {
	cut := len(b) >= max
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	if cut {
		if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
			s = s[i+1:]
		}
	}
	return s, cut
}
