package agent

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/node/ui"
	"github.com/berth/berth/store"
)

// route is one API endpoint.
type route struct {
	method, path string
	h            http.HandlerFunc
}

// routes builds the API. Every route is instrumented under its pattern
// (never the request path: IDs would become label values); a known path
// with the wrong method gets 405, an unknown one 404, both as JSON.
func (a *Agent) routes() http.Handler {
	rs := []route{
		{http.MethodGet, "/v1/health", a.handleHealth},
		{http.MethodGet, "/v1/agent/self", a.handleSelf},
		{http.MethodPost, "/v1/agent/drain", a.handleDrain},
		{http.MethodGet, "/v1/jobs", a.handleJobs},
		{http.MethodPost, "/v1/jobs", a.handleSubmit},
		{http.MethodPost, "/v1/jobs/plan", a.handlePlan},
		{http.MethodGet, "/v1/job/{id}", a.handleJob},
		{http.MethodDelete, "/v1/job/{id}", a.handleStop},
		{http.MethodGet, "/v1/job/{id}/versions", a.handleJobVersions},
		{http.MethodPost, "/v1/job/{id}/dispatch", a.handleDispatch},
		{http.MethodGet, "/v1/allocations", a.handleAllocs},
		{http.MethodGet, "/v1/allocation/{id}", a.handleAlloc},
		{http.MethodGet, "/v1/allocation/{id}/logs/{task}", a.handleLogs},
		{http.MethodPost, "/v1/allocation/{id}/stop", a.handleAllocStop},
		{http.MethodPost, "/v1/allocation/{id}/restart", a.handleAllocRestart},
		{http.MethodPost, "/v1/allocation/{id}/signal", a.handleAllocSignal},
		{http.MethodGet, "/v1/allocation/{id}/exec", a.handleExec},
		{http.MethodGet, "/v1/namespaces", a.handleNamespaces},
		{http.MethodGet, "/v1/services", a.handleServices},
		{http.MethodGet, "/v1/service/{name}", a.handleService},
		{http.MethodPost, "/v1/gc", a.handleGC},
		{http.MethodGet, "/metrics", a.handleMetrics},
	}
	mux := http.NewServeMux()
	allowed := map[string][]string{}
	var paths []string
	for _, r := range rs {
		if allowed[r.path] == nil {
			paths = append(paths, r.path)
		}
		allowed[r.path] = append(allowed[r.path], r.method)
		mux.Handle(r.method+" "+r.path, a.met.InstrumentHandler(r.path, a.logRequests(r.path, r.h)))
	}
	for _, p := range paths {
		allow := strings.Join(allowed[p], ", ")
		mux.Handle(p, a.met.InstrumentHandler(p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, "method %s not allowed on %s; allowed: %s", r.Method, p, allow)
		})))
	}
	// The status page (package ui); on TCP, Run puts it behind its gate.
	mux.Handle(ui.Prefix, a.met.InstrumentHandler(ui.Prefix, a.logRequests(ui.Prefix, a.uiPage.Handler())))
	mux.Handle("/", a.met.InstrumentHandler("other", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no API route %s %s", r.Method, r.URL.Path)
	})))
	return mux
}

// requireToken guards the TCP listener: every request must carry the
// bearer token. The comparison is of SHA-256 digests in constant time, so
// neither the token's content nor its length leaks through timing.
func (a *Agent) requireToken(next http.Handler) http.Handler {
	reject := a.met.InstrumentHandler("unauthorized", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="berth"`)
		writeError(w, http.StatusUnauthorized, "missing or invalid bearer token")
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || !a.tokenOK(got) {
			reason := "invalid token"
			if !ok {
				reason = "no bearer token"
			}
			a.rejects.reject(r.RemoteAddr, r.Method, r.URL.Path, reason)
			reject.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// tokenOK reports whether got (surrounding white space ignored) is the
// API's token. The comparison is of SHA-256 digests in constant time.
func (a *Agent) tokenOK(got string) bool {
	want := sha256.Sum256([]byte(a.set.token))
	sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
	return subtle.ConstantTimeCompare(sum[:], want[:]) == 1
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (a *Agent) logRequests(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(rec, r)
		lvl := a.log.Debug
		if rec.code >= 500 {
			lvl = a.log.Warn
		}
		lvl("API request", "method", r.Method, "route", route, "path", r.URL.Path, "code", rec.code,
			"remote", r.RemoteAddr, "ms", float64(time.Since(start).Microseconds())/1000)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, api.ErrorResponse{Error: fmt.Sprintf(format, args...)})
}

// writeErr maps an error to its status: invalid input 400, unknown 404,
// draining 503, anything else 500.
func writeErr(w http.ResponseWriter, err error) {
	var diags jobspec.Diagnostics
	switch {
	case errors.As(err, &diags):
		writeJSON(w, http.StatusBadRequest, api.ErrorResponse{Error: diags.Error(), Diagnostics: wireDiagnostics(diags)})
	case errors.Is(err, ErrInvalidName), errors.Is(err, errBadRequest), errors.Is(err, jobspec.ErrDispatch):
		writeError(w, http.StatusBadRequest, "%v", err)
	case errors.Is(err, ErrJobNotFound), errors.Is(err, store.ErrNotFound), errors.Is(err, os.ErrNotExist):
		writeError(w, http.StatusNotFound, "%v", err)
	case errors.Is(err, ErrDraining):
		writeError(w, http.StatusServiceUnavailable, "%v", err)
	case errors.Is(err, ErrIndexMismatch):
		writeError(w, http.StatusConflict, "%v", err)
	default:
		writeError(w, http.StatusInternalServerError, "%v", err)
	}
}

var errBadRequest = errors.New("bad request")

// decodeBody reads one JSON object of at most api.MaxBodyBytes into v;
// unknown fields and trailing data are errors.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	if r.ContentLength > api.MaxBodyBytes {
		writeError(w, http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", api.MaxBodyBytes)
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, api.MaxBodyBytes)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("trailing data after the JSON object")
			var mbe *http.MaxBytesError
			if errors.As(terr, &mbe) {
				err = terr
			}
		}
	}
	if err == nil {
		return true
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		writeError(w, http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", mbe.Limit)
	case errors.Is(err, io.EOF):
		writeError(w, http.StatusBadRequest, "empty request body: send a JSON object")
	default:
		writeError(w, http.StatusBadRequest, "malformed JSON body: %v", err)
	}
	return false
}

func (a *Agent) handleHealth(w http.ResponseWriter, r *http.Request) {
	if a.isDraining() {
		writeJSON(w, http.StatusServiceUnavailable, api.Health{Status: "draining", Version: a.version})
		return
	}
	writeJSON(w, http.StatusOK, api.Health{Status: "ok", Version: a.version, Reconciling: a.isReconciling()})
}

func (a *Agent) handleSelf(w http.ResponseWriter, r *http.Request) {
	self, err := a.self(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, self)
}

// handleDrain starts a drain: every job stopped, every network torn
// down, then the agent exits. It answers at once (a drain lasts as long
// as the slowest kill_timeout); the client waits for the agent to go.
func (a *Agent) handleDrain(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	n := len(a.runningLocked())
	a.mu.Unlock()
	if r.URL.Query().Get("wait") != "true" {
		go func() { _ = a.requestDrain(context.WithoutCancel(r.Context())) }()
		writeJSON(w, http.StatusAccepted, api.DrainResponse{Draining: true, Jobs: n, PID: os.Getpid()})
		return
	}
	// The answer is the drain's report: a drain lasts as long as the
	// slowest kill_timeout, so no write deadline applies.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	if err := a.requestDrain(context.WithoutCancel(r.Context())); err != nil {
		writeErr(w, err)
		return
	}
	a.mu.Lock()
	rep := a.drainReport
	a.mu.Unlock()
	if rep == nil {
		// Run ended without draining (an API or reconcile failure).
		rep = &api.DrainResponse{PID: os.Getpid()}
	}
	rep.Draining = true
	writeJSON(w, http.StatusOK, rep)
}

func (a *Agent) self(ctx context.Context) (*api.AgentSelf, error) {
	by, _, err := a.allocCounts(ctx, "")
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	draining, reconciling, last := a.draining, a.reconciling, a.lastGC
	a.mu.Unlock()
	return &api.AgentSelf{
		Version: a.version, PID: os.Getpid(), StartedAt: a.started, Draining: draining, Reconciling: reconciling,
		Config: a.cfg.summary(a.tcpAddr), Jobs: a.jobCounts(), Allocations: by, LastGC: last,
	}, nil
}

// submitRequest decodes and checks a job submission body.
func submitRequest(w http.ResponseWriter, r *http.Request) (api.JobSubmitRequest, bool) {
	var req api.JobSubmitRequest
	if !decodeBody(w, r, &req) {
		return req, false
	}
	if req.Filename == "" {
		req.Filename = "job.nomad.hcl"
	}
	// Only ever used in positions: a base name without control characters.
	req.Filename = filepath.Base(req.Filename)
	if len(req.Filename) > 255 || strings.IndexFunc(req.Filename, func(c rune) bool { return c < 0x20 || c == 0x7f }) >= 0 {
		writeError(w, http.StatusBadRequest, "filename %q: use a plain file name", req.Filename)
		return req, false
	}
	if err := checkVarFiles(&req); err != nil {
		writeErr(w, err)
		return req, false
	}
	return req, true
}

func (a *Agent) handleSubmit(w http.ResponseWriter, r *http.Request) {
	req, ok := submitRequest(w, r)
	if !ok {
		return
	}
	resp, err := a.submit(r.Context(), req)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (a *Agent) handlePlan(w http.ResponseWriter, r *http.Request) {
	req, ok := submitRequest(w, r)
	if !ok {
		return
	}
	resp, err := a.plan(r.Context(), req)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (a *Agent) handleJobs(w http.ResponseWriter, r *http.Request) {
	jobs, err := a.listJobs(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, jobs)
}

func (a *Agent) handleJob(w http.ResponseWriter, r *http.Request) {
	st, err := a.jobStatus(r.Context(), r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (a *Agent) handleJobVersions(w http.ResponseWriter, r *http.Request) {
	vs, err := a.JobVersions(r.Context(), r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, vs)
}

// stopOptions reads DELETE /v1/job/{id}'s purge and detach.
func stopOptions(r *http.Request) (api.JobStopOptions, error) {
	var o api.JobStopOptions
	for name, v := range map[string]*bool{"purge": &o.Purge, "detach": &o.Detach} {
		s := r.URL.Query().Get(name)
		if s == "" {
			continue
		}
		b, err := strconv.ParseBool(s)
		if err != nil {
			return o, fmt.Errorf("%w: %s %q: use true or false", errBadRequest, name, s)
		}
		*v = b
	}
	return o, nil
}

func (a *Agent) handleStop(w http.ResponseWriter, r *http.Request) {
	o, err := stopOptions(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	resp, err := a.stop(r.Context(), r.PathValue("id"), o)
	if err != nil {
		writeErr(w, err)
		return
	}
	code := http.StatusOK
	if !resp.Stopped {
		code = http.StatusAccepted
	}
	writeJSON(w, code, resp)
}

func (a *Agent) handleAllocs(w http.ResponseWriter, r *http.Request) {
	job := r.URL.Query().Get("job")
	if job != "" {
		if err := validJobID(job); err != nil {
			writeErr(w, err)
			return
		}
	}
	allocs, err := a.node.Store.ListAllocations(r.Context(), store.AllocFilter{JobID: job})
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wireAllocStubs(allocs))
}

// allocIDRE is an allocation ID (a UUID) or a prefix of one.
var allocIDRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f][0-9a-f-]{0,35}$`) })

// findAlloc returns the allocation with that ID or unique ID prefix.
func (a *Agent) findAlloc(ctx context.Context, id string) (*store.Allocation, error) {
	if !allocIDRE().MatchString(id) {
		return nil, fmt.Errorf("%w: allocation ID %q: use the ID (a UUID) or a prefix of it", ErrInvalidName, id)
	}
	al, err := a.node.Store.GetAllocation(ctx, id)
	if err == nil || !errors.Is(err, store.ErrNotFound) || len(id) == 36 {
		return al, err
	}
	all, err := a.node.Store.ListAllocations(ctx, store.AllocFilter{})
	if err != nil {
		return nil, err
	}
	var match []*store.Allocation
	for _, c := range all {
		if strings.HasPrefix(c.ID, id) {
			match = append(match, c)
		}
	}
	switch len(match) {
	case 0:
		return nil, fmt.Errorf("allocation %s: %w", id, store.ErrNotFound)
	case 1:
		return match[0], nil
	}
	var ids []string
	for i, m := range match {
		if i == 5 {
			ids = append(ids, "...")
			break
		}
		ids = append(ids, m.ID)
	}
	return nil, fmt.Errorf("%w: allocation ID prefix %q matches %d allocations (%s): give more of it", errBadRequest, id, len(match), strings.Join(ids, ", "))
}

func (a *Agent) handleAlloc(w http.ResponseWriter, r *http.Request) {
	al, err := a.findAlloc(r.Context(), r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, a.allocWithServices(r.Context(), al))
}

func (a *Agent) handleNamespaces(w http.ResponseWriter, r *http.Request) {
	list, err := attach.ListNamespaces(r.Context(), a.node.Attach)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, WireNamespaces(list))
}

func (a *Agent) handleGC(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var req api.GCRequest
	if s := q.Get("dry_run"); s != "" {
		var err error
		if req.DryRun, err = strconv.ParseBool(s); err != nil {
			writeError(w, http.StatusBadRequest, "dry_run %q: use true or false", s)
			return
		}
	}
	for _, p := range q["foreign_prefix"] {
		if err := validName("foreign prefix", p); err != nil {
			writeErr(w, err)
			return
		}
	}
	for _, n := range q["foreign_network"] {
		if err := validName("foreign network", n); err != nil {
			writeErr(w, err)
			return
		}
	}
	req.ForeignPrefixes, req.ForeignNetworks = q["foreign_prefix"], q["foreign_network"]
	if a.isDraining() {
		writeErr(w, ErrDraining)
		return
	}
	rep, err := a.collect(r.Context(), "api", req, true)
	if err != nil {
		writeErr(w, fmt.Errorf("gc: %w", err))
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

func (a *Agent) handleMetrics(w http.ResponseWriter, r *http.Request) {
	a.refreshGauges(r.Context())
	a.met.Handler().ServeHTTP(w, r)
}
