package nomadapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	napi "github.com/hashicorp/nomad/api"
)

// VarsBackend stores Nomad Variables.
type VarsBackend interface {
	// ListVars lists the variables of namespace ns ("" for all) under
	// prefix.
	ListVars(ctx context.Context, ns, prefix string) ([]*Variable, error)
	// GetVar is one variable; ErrNotFound when there is none.
	GetVar(ctx context.Context, ns, path string) (*Variable, error)
	// PutVar writes v; with cas set, its modify index must be *cas (0:
	// it must not exist), else a *VarConflictError.
	PutVar(ctx context.Context, v *Variable, cas *uint64) (*Variable, error)
	// DeleteVar removes a variable, checked as PutVar.
	DeleteVar(ctx context.Context, ns, path string, cas *uint64) error
}

// Variable is a Nomad Variable as the backend keeps it.
type Variable struct {
	Namespace, Path          string
	Items                    map[string]string
	CreateIndex, ModifyIndex uint64
	CreateTime, ModifyTime   time.Time
}

// VarConflictError is a check-and-set that failed: Current is the
// variable as it is (nil: none). It matches ErrConflict.
type VarConflictError struct {
	Current *Variable
	Err     error
}

func (e *VarConflictError) Error() string        { return e.Err.Error() }
func (e *VarConflictError) Unwrap() error        { return e.Err }
func (e *VarConflictError) Is(target error) bool { return target == ErrConflict }

// maxVarSize is Nomad's bound on a variable's items.
const maxVarSize = 64 << 10

func (s *Server) varRoutes() []route {
	return []route{
		{http.MethodGet, "/v1/vars", s.handleVarList},
		{http.MethodGet, "/v1/var/{path...}", s.handleVarGet},
		{http.MethodPut, "/v1/var/{path...}", s.handleVarPut},
		{http.MethodPost, "/v1/var/{path...}", s.handleVarPut},
		{http.MethodDelete, "/v1/var/{path...}", s.handleVarDelete},
	}
}

func queryNamespace(r *http.Request) string {
	ns := r.URL.Query().Get("namespace")
	switch ns {
	case "":
		return "default"
	case "*":
		return ""
	}
	return ns
}

func (v *Variable) metadata() napi.VariableMetadata {
	return napi.VariableMetadata{
		Namespace: v.Namespace, Path: v.Path, CreateIndex: v.CreateIndex, ModifyIndex: v.ModifyIndex,
		CreateTime: v.CreateTime.UnixNano(), ModifyTime: v.ModifyTime.UnixNano(),
	}
}

func (v *Variable) nomad() *napi.Variable {
	items := napi.VariableItems{}
	for k, x := range v.Items {
		items[k] = x
	}
	return &napi.Variable{
		Namespace: v.Namespace, Path: v.Path, CreateIndex: v.CreateIndex, ModifyIndex: v.ModifyIndex,
		CreateTime: v.CreateTime.UnixNano(), ModifyTime: v.ModifyTime.UnixNano(), Items: items,
	}
}

func (s *Server) handleVarList(w http.ResponseWriter, r *http.Request) {
	l, err := s.b.ListVars(r.Context(), queryNamespace(r), r.URL.Query().Get("prefix"))
	if err != nil {
		writeErr(w, err)
		return
	}
	out := make([]napi.VariableMetadata, 0, len(l))
	var index uint64
	for _, v := range l {
		out = append(out, v.metadata())
		index = max(index, v.ModifyIndex)
	}
	writeJSON(w, index, out)
}

func (s *Server) handleVarGet(w http.ResponseWriter, r *http.Request) {
	path := r.PathValue("path")
	v, err := s.b.GetVar(r.Context(), queryNamespace(r), path)
	if errors.Is(err, ErrNotFound) {
		writeError(w, http.StatusNotFound, errors.New("variable not found"))
		return
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, v.ModifyIndex, v.nomad())
}

// varPathRE is what Nomad allows in a variable's path.
var varPathRE = regexp.MustCompile(`^[a-zA-Z0-9\-_~/]{1,128}$`)

// checkVarPath is Nomad's validation of a variable's path.
func checkVarPath(p string) error {
	if !varPathRE.MatchString(p) {
		return fmt.Errorf("invalid path %q: use at most 128 letters, digits, '-', '_', '~' and '/'", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" {
			return fmt.Errorf("invalid path %q: empty segment", p)
		}
	}
	if (p == "nomad" || strings.HasPrefix(p, "nomad/")) && p != "nomad/jobs" && !strings.HasPrefix(p, "nomad/jobs/") {
		return fmt.Errorf(`invalid path %q: "nomad" is a reserved top-level directory path, but you may write variables to "nomad/jobs" or below`, p)
	}
	return nil
}

// casParam is ?cas=N, nil when absent.
func casParam(w http.ResponseWriter, r *http.Request) (*uint64, bool) {
	c := r.URL.Query().Get("cas")
	if c == "" {
		return nil, true
	}
	n, err := strconv.ParseUint(c, 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("cas %q: use the variable's modify index", c))
		return nil, false
	}
	return &n, true
}

// writeConflict answers a failed check-and-set as Nomad does: 409 with
// the variable as it is (an empty one when there is none).
func writeConflict(w http.ResponseWriter, err error) bool {
	var ce *VarConflictError
	if !errors.As(err, &ce) {
		return false
	}
	cur := &napi.Variable{}
	if ce.Current != nil {
		cur = ce.Current.nomad()
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusConflict)
	_ = json.NewEncoder(w).Encode(cur)
	return true
}

func (s *Server) handleVarPut(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for _, op := range []string{"lock-acquire", "lock-release", "lock-renew"} {
		if q.Has(op) {
			writeError(w, http.StatusNotImplemented, fmt.Errorf("berth does not serve variable locks (%s): one node has no one to share the lock with", op))
			return
		}
	}
	path := r.PathValue("path")
	if err := checkVarPath(path); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	cas, ok := casParam(w, r)
	if !ok {
		return
	}
	var in napi.Variable
	if !decodeBody(w, r, &in) {
		return
	}
	if in.Path != "" && in.Path != path {
		writeError(w, http.StatusBadRequest, fmt.Errorf("variable path %q in the body is not the request's %q", in.Path, path))
		return
	}
	if len(in.Items) == 0 {
		writeError(w, http.StatusBadRequest, errors.New("variable missing required Items object"))
		return
	}
	size := 0
	for k, v := range in.Items {
		size += len(k) + len(v)
	}
	if size > maxVarSize {
		writeError(w, http.StatusBadRequest, fmt.Errorf("variables are limited to %d bytes in total size; this one's items are %d", maxVarSize, size))
		return
	}
	ns := in.Namespace
	if ns == "" || r.URL.Query().Get("namespace") != "" {
		ns = queryNamespace(r)
	}
	if ns == "" {
		writeError(w, http.StatusBadRequest, errors.New(`a variable is written to one namespace, not "*"`))
		return
	}
	v, err := s.b.PutVar(r.Context(), &Variable{Namespace: ns, Path: path, Items: in.Items}, cas)
	if writeConflict(w, err) {
		return
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, v.ModifyIndex, v.nomad())
}

func (s *Server) handleVarDelete(w http.ResponseWriter, r *http.Request) {
	cas, ok := casParam(w, r)
	if !ok {
		return
	}
	ns := queryNamespace(r)
	if ns == "" {
		writeError(w, http.StatusBadRequest, errors.New(`a variable is deleted from one namespace, not "*"`))
		return
	}
	err := s.b.DeleteVar(r.Context(), ns, r.PathValue("path"), cas)
	if writeConflict(w, err) {
		return
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("X-Nomad-Index", "1")
	w.WriteHeader(http.StatusNoContent)
}
