package nomadapi

import (
	"fmt"
	"io"
	"net/http"
	"strconv"

	napi "github.com/hashicorp/nomad/api"
)

// AllocDir is an allocation's directory, opened for reading: every path
// is relative to it ("/" is its root) and cannot leave it, and a task's
// secrets are not read.
type AllocDir interface {
	Stat(path string) (*napi.AllocFileInfo, error)
	List(path string) ([]*napi.AllocFileInfo, error)
	// Open opens a regular file.
	Open(path string) (io.ReadSeekCloser, error)
	Close() error
}

func (s *Server) allocDir(w http.ResponseWriter, r *http.Request) (AllocDir, string, bool) {
	d, err := s.b.AllocFS(r.Context(), r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return nil, "", false
	}
	p := r.URL.Query().Get("path")
	if p == "" {
		p = "/"
	}
	return d, p, true
}

func (s *Server) handleFSList(w http.ResponseWriter, r *http.Request) {
	d, p, ok := s.allocDir(w, r)
	if !ok {
		return
	}
	defer d.Close()
	l, err := d.List(p)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 1, l)
}

func (s *Server) handleFSStat(w http.ResponseWriter, r *http.Request) {
	d, p, ok := s.allocDir(w, r)
	if !ok {
		return
	}
	defer d.Close()
	fi, err := d.Stat(p)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 1, fi)
}

func (s *Server) handleFSCat(w http.ResponseWriter, r *http.Request) {
	s.serveFile(w, r, 0, -1)
}

func (s *Server) handleFSReadAt(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	off, err1 := strconv.ParseInt(q.Get("offset"), 10, 64)
	limit, err2 := strconv.ParseInt(q.Get("limit"), 10, 64)
	if err1 != nil || err2 != nil || off < 0 {
		writeError(w, http.StatusBadRequest, fmt.Errorf("offset %q, limit %q: give both, in bytes", q.Get("offset"), q.Get("limit")))
		return
	}
	s.serveFile(w, r, off, limit)
}

// serveFile answers limit bytes (-1: all) of a file from off.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request, off, limit int64) {
	d, p, ok := s.allocDir(w, r)
	if !ok {
		return
	}
	defer d.Close()
	f, err := d.Open(p)
	if err != nil {
		writeErr(w, err)
		return
	}
	defer f.Close()
	if off > 0 {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			writeErr(w, fmt.Errorf("%s: %w", p, err))
			return
		}
	}
	var rd io.Reader = f
	if limit >= 0 {
		rd = io.LimitReader(f, limit)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	// The client may hang up mid-copy: nobody to tell.
	_, _ = io.Copy(w, rd)
}
