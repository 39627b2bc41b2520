// Package nomadapi serves Nomad's HTTP API v1 over one berth node, so that
// the nomad CLI and Nomad's Go API client work against a berth agent with
// NOMAD_ADDR and nothing else.
//
// It holds the translation only: Nomad's routes, query parameters, JSON
// shapes (the types of github.com/hashicorp/nomad/api) and error bodies.
// What a route does is the agent's, reached through Backend; the
// agent's listener puts TLS and the token in front of Handler.
package nomadapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
)

// Backend is what the Nomad API calls of the agent: one interface per
// group of routes, each in the file that serves them.
type Backend interface {
	AgentBackend
	JobsBackend
	AllocsBackend
	VarsBackend
}

// Sentinel errors a Backend returns; the server maps them to Nomad's
// status codes (checked with errors.Is).
var (
	// ErrNotFound: no such job, allocation, evaluation, variable...
	ErrNotFound = errors.New("not found")
	// ErrBadRequest: the request cannot be served as asked; the message
	// says what to change.
	ErrBadRequest = errors.New("bad request")
	// ErrConflict: a check-index or CAS mismatch.
	ErrConflict = errors.New("conflict")
)

// Server serves Nomad's API for one berth node.
type Server struct {
	b   Backend
	log *slog.Logger
	// state is what Nomad's clients follow that berth has no records of:
	// evaluations and deployments (evals.go).
	state *jobsState
}

// New returns a server over b.
func New(b Backend, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	return &Server{b: b, log: log, state: newJobsState()}
}

// route is one Nomad endpoint; path is a net/http ServeMux pattern.
type route struct {
	method, path string
	h            http.HandlerFunc
}

// Routes are the patterns served, for the agent's metrics and tests.
func (s *Server) Routes() []string {
	var ps []string
	for _, r := range s.routes() {
		ps = append(ps, r.method+" "+r.path)
	}
	return ps
}

func (s *Server) routes() []route {
	var rs []route
	rs = append(rs, s.agentRoutes()...)
	rs = append(rs, s.jobRoutes()...)
	rs = append(rs, s.allocRoutes()...)
	rs = append(rs, s.varRoutes()...)
	rs = append(rs, s.oneNodeRoutes()...)
	return rs
}

// Handler is the API. wrap instruments and logs each route under its
// pattern (may be nil). A route that is not served answers 404 with a
// body naming it, as Nomad's own unknown routes do.
func (s *Server) Handler(wrap func(pattern string, h http.Handler) http.Handler) http.Handler {
	if wrap == nil {
		wrap = func(_ string, h http.Handler) http.Handler { return h }
	}
	mux := http.NewServeMux()
	allowed := map[string][]string{}
	var paths []string
	for _, r := range s.routes() {
		if r.method == "" {
			mux.Handle(r.path, wrap("nomad "+r.path, r.h))
			continue
		}
		if allowed[r.path] == nil {
			paths = append(paths, r.path)
		}
		allowed[r.path] = append(allowed[r.path], r.method)
		mux.Handle(r.method+" "+r.path, wrap("nomad "+r.path, r.h))
	}
	for _, p := range paths {
		allow := strings.Join(allowed[p], ", ")
		mux.Handle(p, wrap("nomad "+p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, fmt.Errorf("method %s not allowed on %s (berth serves: %s)", r.Method, p, allow))
		})))
	}
	mux.Handle("/", wrap("nomad other", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Errorf("berth does not serve Nomad API route %s %s (see the README's table of Nomad routes)", r.Method, r.URL.Path))
	})))
	return withNomadHeaders(mux)
}

// withNomadHeaders sets the headers every Nomad answer carries; a client
// waiting on an index (a blocking query) reads them.
func withNomadHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Nomad-KnownLeader", "true")
		h.Set("X-Nomad-LastContact", "0")
		next.ServeHTTP(w, r)
	})
}

// Token returns the ACL token a request carries, as Nomad reads it:
// X-Nomad-Token, else an Authorization bearer token, else ?token= (how
// the CLI's websockets send it).
func Token(r *http.Request) string {
	if t := r.Header.Get("X-Nomad-Token"); t != "" {
		return t
	}
	if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return t
	}
	return r.URL.Query().Get("token")
}

// permissionDenied begins Nomad's 403 body; clients match on it.
const permissionDenied = "Permission denied"

// RequireToken answers 403 as Nomad does ("Permission denied") to a
// request without the right token; ok compares in constant time.
func RequireToken(ok func(string) bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ok(Token(r)) {
			writeError(w, http.StatusForbidden, fmt.Errorf("%s: set NOMAD_TOKEN (or -token) to the berth agent's API token (api.token / api.token_file)", permissionDenied))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// writeJSON answers v with Nomad's index header.
func writeJSON(w http.ResponseWriter, index uint64, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Nomad-Index", strconv.FormatUint(max(index, 1), 10))
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers as Nomad does: a plain-text body the CLI prints after
// "Unexpected response code: N".
func writeError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	fmt.Fprintln(w, err.Error())
}

// writeErr maps a Backend error to its status code.
func writeErr(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, ErrBadRequest):
		code = http.StatusBadRequest
	case errors.Is(err, ErrConflict):
		code = http.StatusConflict
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		code = http.StatusServiceUnavailable
	}
	writeError(w, code, err)
}

// decodeBody reads a JSON request body of at most maxBody bytes into v.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("request body: %w", err))
		return false
	}
	return true
}

// maxBody bounds a request body: a job with its source, a variable.
const maxBody = 4 << 20
