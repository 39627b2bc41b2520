package ui

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/api"
)

func fixtureUI(f *fixture, log io.Writer) *UI {
	if log == nil {
		log = io.Discard
	}
	return New(Options{
		Source: f, History: fixtureHistory(), Now: func() time.Time { return fixtureNow },
		Logger: slog.New(slog.NewTextHandler(log, nil)),
	})
}

func get(t testing.TB, h http.Handler, path string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// Every page renders the fixture's state, with the status its content
// calls for.
func TestPages(t *testing.T) {
	f := newFixture()
	h := fixtureUI(f, nil).Handler()
	web, failed, lost := f.allocs[0], f.allocs[3], f.allocs[len(f.allocs)-1]
	for _, tc := range []struct {
		path string
		code int
		want []string
	}{
		{"/ui/", 200, []string{
			`id="overview"`, "web", "tick", "broken", "*/20 * * * * * *", "15:10:00", // next launch
			"10.199.165.7", "http 127.0.0.1:28080→8080", "metrics 29100→9100", "probe 30000",
			"88 ms", "1.01 s", // setup (netns+add) and task of the newest tick
			"Failed tasks: tick (exit code 3)", "could not resume after an agent restart",
			"Another app is currently holding the xtables lock", // the pending teardown
			"periodic", "dry run", "lease 10.199.165.9 (private): no owner", "busy (pid 5150 (podman) fd 7)",
			`<svg class="plot"`, "setup: median", "complete, ", "berth 0.2.0 (abc1234)",
		}},
		{"/ui/namespaces", 200, []string{`id="namespaces"`, "pid 4242 (server) member", "/usr/bin/server --port 8080",
			"pid 5150 (podman) fd fd 7", "not berth's", "tearing-down"}},
		{"/ui/job/tick", 200, []string{`id="job"`, "Next launch", "*/20 * * * * * *", "probe dynamic", "tick", "raw_exec", failed.ID[:8]}},
		{"/ui/job/broken", 200, []string{"Last run", "netns /run/netns/x still mounted", "p99 120 ms", "pid 5150 (podman) fd 7", "3fa85f82: lost"}},
		{"/ui/alloc/" + web.ID, 200, []string{`id="alloc"`, web.ID, "10.199.165.1", "/run/netns/10.199.165.7", "http 127.0.0.1:28080→8080",
			"CNI ADD", "88 ms", "pid 4242", "listening on :8080", "GET / 200", "Task started by client"}},
		{"/ui/alloc/" + failed.ID, 200, []string{"failed", "Exit Code: 3", "CNI DEL", "netns remove", "exit → netns gone", "hello from tick", "No stderr log"}},
		{"/ui/alloc/" + lost.ID[:8], 200, []string{"lost", "137 (signal 9)", "Teardown retries", "Not set up", "Nothing timed yet"}},
		{"/ui/alloc/ffffffff", 404, []string{"404 Not Found", "allocation ffffffff"}},
		{"/ui/job/nope", 404, []string{`job &#34;nope&#34;`}},
		{"/ui/nope", 404, []string{"no page /ui/nope"}},
		{"/ui/login", 303, nil},
	} {
		w := get(t, h, tc.path)
		if w.Code != tc.code {
			t.Errorf("GET %s: %d, want %d\n%s", tc.path, w.Code, tc.code, w.Body)
			continue
		}
		body := w.Body.String()
		for _, s := range tc.want {
			if !strings.Contains(body, s) {
				t.Errorf("GET %s lacks %q", tc.path, s)
			}
		}
		if tc.code != 303 && !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
			t.Errorf("GET %s: Content-Type %q", tc.path, w.Header().Get("Content-Type"))
		}
	}
}

// The page fetches nothing: every link, form and script stays on it, and
// the only script and style are inline with the response's nonce.
func TestSelfContained(t *testing.T) {
	f := newFixture()
	h := fixtureUI(f, nil).Handler()
	ref := regexp.MustCompile(`\s(href|src|action|xlink:href)="([^"]*)"`)
	nonceRE := regexp.MustCompile(`'nonce-([A-Za-z0-9_-]+)'`)
	for _, path := range []string{"/ui/", "/ui/namespaces", "/ui/job/web", "/ui/alloc/" + f.allocs[0].ID, "/ui/job/nope"} {
		w := get(t, h, path)
		body := w.Body.String()
		for _, m := range ref.FindAllStringSubmatch(body, -1) {
			if v := m[2]; !strings.HasPrefix(v, "/ui/") && !strings.HasPrefix(v, "data:") {
				t.Errorf("%s: %s=%q leaves the page", path, m[1], v)
			}
		}
		if strings.Contains(body, "@import") || strings.Contains(body, "url(") {
			t.Errorf("%s: the style loads something", path)
		}
		csp := w.Header().Get("Content-Security-Policy")
		m := nonceRE.FindStringSubmatch(csp)
		if m == nil || !strings.Contains(csp, "default-src 'none'") {
			t.Fatalf("%s: Content-Security-Policy %q", path, csp)
		}
		for _, tag := range []string{"<script", "<style"} {
			if n, with := strings.Count(body, tag), strings.Count(body, tag+` nonce="`+m[1]+`"`); n != 1 || with != 1 {
				t.Errorf("%s: %d %s elements, %d with the nonce; want one with it", path, n, tag, with)
			}
		}
		for k, v := range map[string]string{"Cache-Control": "no-store", "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff"} {
			if got := w.Header().Get(k); got != v {
				t.Errorf("%s: %s %q, want %q", path, k, got, v)
			}
		}
	}
	// A new nonce every time.
	a, b := get(t, h, "/ui/").Header().Get("Content-Security-Policy"), get(t, h, "/ui/").Header().Get("Content-Security-Policy")
	if a == b {
		t.Errorf("two responses with the same nonce: %s", a)
	}
}

// What the agent's records hold (an event's message, a log, a holder's
// command line) is text: nothing in it becomes markup.
func TestEscapes(t *testing.T) {
	f := newFixture()
	const evil = `<script>alert(1)</script><img src=x onerror=alert(2)>`
	f.allocs[1].Events = append(f.allocs[1].Events, api.Event{Time: fixtureNow, Type: "Driver", Message: evil})
	f.allocs[1].StatusDesc = evil
	f.logs[f.allocs[1].ID+"/tick.stderr"] = evil + "\n\xff\xfe invalid UTF-8\n"
	f.nss[0].Holders[0].Cmdline = evil
	h := fixtureUI(f, nil).Handler()
	for _, path := range []string{"/ui/", "/ui/alloc/" + f.allocs[1].ID, "/ui/namespaces"} {
		body := get(t, h, path).Body.String()
		if strings.Contains(body, "<img") || strings.Contains(body, "<script>alert") {
			t.Errorf("%s: the record's text became markup", path)
		}
		if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("%s: the record's text is not shown escaped", path)
		}
	}
	if body := get(t, h, "/ui/alloc/"+f.allocs[1].ID).Body.String(); !strings.Contains(body, "\uFFFD") {
		t.Errorf("invalid UTF-8 in a log is not replaced")
	}
}

// A Source that fails gives a 500 page that says why; the header still
// renders without the agent's description.
func TestSourceError(t *testing.T) {
	f := newFixture()
	f.err = errors.New("store closed")
	var log bytes.Buffer
	h := fixtureUI(f, &log).Handler()
	w := get(t, h, "/ui/")
	if w.Code != 500 || !strings.Contains(w.Body.String(), "store closed") || !strings.Contains(w.Body.String(), "agent state unavailable") {
		t.Errorf("failing source: %d\n%s", w.Code, w.Body)
	}
	if !strings.Contains(log.String(), "store closed") {
		t.Errorf("the failure is not logged: %s", log.String())
	}
}

// An agent with nothing yet: no jobs, no history, no gc.
func TestEmpty(t *testing.T) {
	f := &fixture{self: api.AgentSelf{Version: "dev", StartedAt: fixtureNow}}
	u := New(Options{Source: f, Now: func() time.Time { return fixtureNow }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	body := get(t, u.Handler(), "/ui/").Body.String()
	for _, want := range []string{"No jobs.", "No allocations.", "None: every teardown completed.", "No garbage collection since the agent started.", "no history"} {
		if !strings.Contains(body, want) {
			t.Errorf("empty overview lacks %q", want)
		}
	}
}

func TestTailText(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
		cut  bool
	}{
		{"a\nb\n", 10, "a\nb\n", false},
		{"artial\nwhole\n", 13, "whole\n", true},
		{"no newline at all", 17, "no newline at all", true},
		{"\xffx\n", 10, "\uFFFDx\n", false},
	} {
		got, cut := tailText([]byte(tc.in), tc.max)
		if got != tc.want || cut != tc.cut {
			t.Errorf("tailText(%q, %d) = %q, %v; want %q, %v", tc.in, tc.max, got, cut, tc.want, tc.cut)
		}
	}
}

func TestFormatting(t *testing.T) {
	for _, tc := range []struct {
		ms   float64
		want string
	}{{0, "–"}, {0.42, "0.4 ms"}, {9.96, "10.0 ms"}, {88.4, "88 ms"}, {1010, "1.01 s"}, {61_000, "1m1s"}, {3_600_000, "1h0m0s"}} {
		if got := fmtMS(tc.ms); got != tc.want {
			t.Errorf("fmtMS(%v) = %q, want %q", tc.ms, got, tc.want)
		}
	}
	now := fixtureNow
	for _, tc := range []struct {
		t    time.Time
		want string
	}{
		{time.Time{}, "–"}, {now, "now"}, {now.Add(-42 * time.Second), "42s ago"}, {now.Add(34 * time.Second), "in 34s"},
		{now.Add(-61 * time.Minute), "1h01m ago"}, {now.Add(-72 * time.Hour), "3d ago"},
	} {
		if got := relTime(tc.t, now); got != tc.want {
			t.Errorf("relTime(%v) = %q, want %q", tc.t, got, tc.want)
		}
	}
	if got := portText(api.PortMapping{Label: "http", HostIP: "::1", HostPort: 8080, To: 8080}); got != "http [::1]:8080" {
		t.Errorf("portText = %q", got)
	}
}

func TestSafeNext(t *testing.T) {
	for in, want := range map[string]string{
		"":                    "/ui/",
		"/ui/":                "/ui/",
		"/ui/job/web":         "/ui/job/web",
		"/ui/alloc/x?y=1":     "/ui/alloc/x?y=1",
		"/ui/../v1/jobs":      "/ui/",
		"//evil.example/ui/":  "/ui/",
		"https://evil/ui/":    "/ui/",
		"/ui/\\evil":          "/ui/",
		"/ui/x\r\nSet-Cookie": "/ui/",
		"/v1/jobs":            "/ui/",
		"/ui/namespaces/":     "/ui/namespaces/",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

// The gate on TCP: the API's requests pass to its own check; the page
// needs a session from the login form, which takes only the token; the
// cookie is HttpOnly, SameSite=Strict, scoped to the page, and cannot be
// forged or outlive its expiry; and the token is never logged.
func TestGate(t *testing.T) {
	const token = "the-token-0123456789"
	f := newFixture()
	var log bytes.Buffer
	now := fixtureNow
	u := New(Options{Source: f, Now: func() time.Time { return now }, Logger: slog.New(slog.NewTextHandler(&log, nil)), SessionTTL: time.Hour})
	var apiCalls []string
	guarded := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		apiCalls = append(apiCalls, r.URL.Path)
		w.WriteHeader(http.StatusTeapot)
	})
	h := u.Gate(func(s string) bool { return s == token }, u.Handler(), guarded)

	post := func(path string, form url.Values, cookies ...*http.Cookie) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for _, c := range cookies {
			r.AddCookie(c)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	withCookie := func(path string, c *http.Cookie) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.AddCookie(c)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}

	// The API and any request with credentials of its own go to its check.
	for _, tc := range []struct{ path, auth string }{{"/v1/jobs", ""}, {"/metrics", ""}, {"/ui/", "Bearer " + token}, {"/ui/", "Bearer wrong"}} {
		apiCalls = nil
		w := get(t, h, tc.path, "Authorization", tc.auth)
		if w.Code != http.StatusTeapot || len(apiCalls) != 1 {
			t.Errorf("GET %s (Authorization %q): %d, API handler called %d times", tc.path, tc.auth, w.Code, len(apiCalls))
		}
	}
	// No session: 401 and the login form, which comes back to the page.
	for _, p := range []string{"/ui/", "/ui/job/web", "/ui", "/ui/login"} {
		w := get(t, h, p)
		want := p
		if p == "/ui/login" || p == "/ui" {
			want = "/ui/"
		}
		if w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), `name="next" value="`+want+`"`) {
			t.Errorf("GET %s without a session: %d\n%s", p, w.Code, w.Body)
		}
	}

	// A wrong token, or none, is refused.
	for _, bad := range []string{"", "wrong", token + "x"} {
		w := post("/ui/login", url.Values{"token": {bad}, "next": {"/ui/job/web"}})
		if w.Code != http.StatusUnauthorized || len(w.Result().Cookies()) != 0 || !strings.Contains(w.Body.String(), "not this agent") {
			t.Errorf("login with %q: %d, cookies %v", bad, w.Code, w.Result().Cookies())
		}
	}
	// The token (with the white space a paste adds) gives the cookie.
	w := post("/ui/login", url.Values{"token": {" " + token + "\n"}, "next": {"/ui/job/web"}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ui/job/web" {
		t.Fatalf("login: %d, Location %q", w.Code, w.Header().Get("Location"))
	}
	cs := w.Result().Cookies()
	if len(cs) != 1 {
		t.Fatalf("login: cookies %v", cs)
	}
	c := cs[0]
	if c.Name != cookieName || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/ui/" || c.MaxAge != 3600 || strings.Contains(c.Value, token) {
		t.Errorf("session cookie %+v", c)
	}
	if w := withCookie("/ui/job/web", c); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `id="job"`) || !strings.Contains(w.Body.String(), "Sign out") {
		t.Errorf("with the session: %d", w.Code)
	}
	if w := withCookie("/v1/jobs", c); w.Code != http.StatusTeapot {
		t.Errorf("the session cookie must not open the API: %d", w.Code)
	}
	// Forged, altered or expired sessions are refused.
	exp, _, _ := strings.Cut(c.Value, ".")
	for name, v := range map[string]string{
		"empty":        "",
		"no signature": exp,
		"other expiry": "99999999999." + strings.SplitN(c.Value, ".", 2)[1],
		"bad base64":   exp + ".!!!",
		"other key":    New(Options{Source: f, Now: func() time.Time { return now }}).sign(now.Add(time.Hour)),
	} {
		if w := withCookie("/ui/", &http.Cookie{Name: cookieName, Value: v}); w.Code != http.StatusUnauthorized {
			t.Errorf("cookie %s: %d, want 401", name, w.Code)
		}
	}
	now = now.Add(time.Hour + time.Second)
	if w := withCookie("/ui/", c); w.Code != http.StatusUnauthorized {
		t.Errorf("expired session: %d, want 401", w.Code)
	}
	// An open redirect is not offered.
	now = fixtureNow
	if w := post("/ui/login", url.Values{"token": {token}, "next": {"//evil.example/"}}); w.Header().Get("Location") != "/ui/" {
		t.Errorf("login with next=//evil.example/: Location %q", w.Header().Get("Location"))
	}
	// Sign out clears the cookie.
	w = post("/ui/logout", nil, c)
	if w.Code != http.StatusSeeOther || len(w.Result().Cookies()) != 1 || w.Result().Cookies()[0].MaxAge >= 0 {
		t.Errorf("logout: %d %v", w.Code, w.Result().Cookies())
	}
	// A body too large for a login form.
	if w := post("/ui/login", url.Values{"token": {strings.Repeat("x", 2*maxLoginBody)}}); w.Code != http.StatusBadRequest {
		t.Errorf("huge login form: %d, want 400", w.Code)
	}

	if strings.Contains(log.String(), token) || strings.Contains(log.String(), c.Value) {
		t.Errorf("the log holds the token or the cookie:\n%s", log.String())
	}
	for _, want := range []string{"status page login rejected", "reason=\"invalid token\"", "reason=\"no token\"", "msg=\"status page login\""} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
}
