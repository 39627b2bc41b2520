package ui

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The pages of a fixture agent in headless Chromium: they render without
// a console error or a blocked resource, refresh themselves, fit a
// phone's width, and the fragment login works. Screenshots of the views
// the real agent test cannot produce (a pending teardown, gc errors, a
// lost allocation, a full hour of history) go to ScreenshotDir as
// fixture-*.png.
func TestBrowserFixture(t *testing.T) {
	b := NewBrowser(t)
	dir := ScreenshotDir(t)
	f := newFixture()
	start := time.Now()
	const token = "fixture-token-0123456789"
	u := New(Options{
		Source: f, History: fixtureHistory(), Refresh: time.Second,
		Now: func() time.Time { return fixtureNow.Add(time.Since(start)) },
	})
	open := u.Handler()
	guarded := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		open.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(u.Gate(func(s string) bool { return s == token }, open, guarded))
	t.Cleanup(srv.Close)

	// Signed out: the login page, 401.
	if code := b.Open(srv.URL + "/ui/"); code != http.StatusUnauthorized {
		t.Fatalf("/ui/ without a session: %d, want 401", code)
	}
	b.WaitVisible("#login")
	b.Screenshot(dir, "fixture-login")
	b.Settle("login page", regexp.MustCompile(`status of 401`))

	// The fragment signs in, and leaves the address bar.
	b.Blank()
	b.Open(srv.URL + "/ui/#token=" + token)
	b.WaitVisible("#overview")
	href := Eval[string](b, `location.href`)
	if strings.Contains(href, token) || strings.Contains(href, "#") {
		t.Errorf("address after login is %q: the token must be gone", href)
	}
	b.Settle("login by fragment", regexp.MustCompile(`status of 401`))

	pages := []struct{ name, path, sel string }{
		{"fixture-overview", "/ui/", "#overview"},
		{"fixture-namespaces", "/ui/namespaces", "#namespaces"},
		{"fixture-job-periodic", "/ui/job/tick", "#job"},
		{"fixture-job-dead", "/ui/job/broken", "#job"},
		{"fixture-alloc-running", "/ui/alloc/" + f.allocs[0].ID, "#alloc"},
		{"fixture-alloc-failed", "/ui/alloc/" + f.allocs[3].ID, "#alloc"},
		{"fixture-alloc-lost", "/ui/alloc/" + f.allocs[len(f.allocs)-1].ID[:8], "#alloc"},
	}
	for _, p := range pages {
		if code := b.Open(srv.URL + p.path); code != http.StatusOK {
			t.Errorf("%s: %d", p.path, code)
		}
		b.WaitVisible(p.sel)
		b.Screenshot(dir, p.name)
		b.Settle(p.path)
	}

	if code := b.Open(srv.URL + "/ui/job/nope"); code != http.StatusNotFound {
		t.Errorf("/ui/job/nope: %d, want 404", code)
	}
	b.WaitVisible("#error")
	b.Settle("not found page", regexp.MustCompile(`status of 404`))

	b.Open(srv.URL + "/ui/")
	b.WaitRefresh("overview", 5*time.Second)
	b.Settle("overview refreshed")

	b.Phone(true)
	for _, p := range []struct{ name, path, sel string }{
		{"fixture-phone-overview", "/ui/", "#overview"},
		{"fixture-phone-alloc", "/ui/alloc/" + f.allocs[1].ID, "#alloc"},
	} {
		b.Open(srv.URL + p.path)
		b.WaitVisible(p.sel)
		b.NoHorizontalScroll(p.name)
		b.Screenshot(dir, p.name)
		b.Settle(p.name)
	}
}
