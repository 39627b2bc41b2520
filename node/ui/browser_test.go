package ui

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// This file is the tests' headless Chromium (Debian's chromium package,
// which scripts/setup.sh installs), driven over the DevTools protocol.
// Its names are exported for the tests of package ui_test, which run it
// against a real agent.

// Browser is one headless Chromium with one tab. It records every
// console error, uncaught exception and error log entry (a failed
// resource, a blocked script or style) the pages produce.
type Browser struct {
	t   testing.TB
	ctx context.Context

	mu       sync.Mutex
	problems []string
}

// RequireChromium returns Chromium's path. On CI (CI=true) a missing
// Chromium fails the test: setup installs it there. Elsewhere it skips.
func RequireChromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const why = "Chromium not found: scripts/setup.sh installs Debian's chromium package"
	if os.Getenv("CI") == "true" {
		t.Fatal(why + " (CI=true: the browser tests must run)")
	}
	t.Skip(why)
	return ""
}

// NewBrowser starts Chromium with the flags this machine needs (as root,
// without a sandbox; no background connections, which its closed network
// refuses) and a fresh profile, until the test ends.
func NewBrowser(t testing.TB) *Browser {
	t.Helper()
	path := RequireChromium(t)
	var out strings.Builder
	var outMu sync.Mutex
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.WindowSize(1280, 900),
		chromedp.CombinedOutput(writerFunc(func(p []byte) (int, error) {
			outMu.Lock()
			defer outMu.Unlock()
			if out.Len() < 64<<10 {
				out.Write(p)
			}
			return len(p), nil
		})),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	b := &Browser{t: t, ctx: ctx}
	// The first call starts Chromium and the tab, tied to ctx itself: a
	// context derived from it for a timeout would end them with it.
	if err := chromedp.Do(ctx); err != nil {
		cancelTab()
		cancelAlloc()
		t.Fatalf("start chromium (%s): %v\n%s", path, err, out.String())
	}
	// Console, uncaught exceptions and the browser's log (failed loads,
	// blocked scripts and styles) in one stream, read until the tab ends.
	msgs := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type != chromedp.ConsoleError && m.Type != chromedp.ConsoleException && m.Type != "assert" {
				continue
			}
			p := string(m.Type) + ": " + m.Text
			if m.Source != "" {
				p += " [" + m.Source + "]"
			}
			if m.URL != "" {
				p += fmt.Sprintf(" at %s:%d", m.URL, m.Line+1)
			}
			b.mu.Lock()
			b.problems = append(b.problems, p)
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // kills Chromium and waits for it
		<-done
		if t.Failed() {
			outMu.Lock()
			t.Logf("chromium output:\n%s", out.String())
			outMu.Unlock()
		}
	})
	return b
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// Problems returns what the pages reported since the last call, and
// forgets it.
func (b *Browser) Problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.problems
	b.problems = nil
	return p
}

// Settle waits a moment for late console messages, then fails the test
// with every problem reported since the last call but those matching
// allow.
func (b *Browser) Settle(what string, allow ...*regexp.Regexp) {
	b.t.Helper()
	time.Sleep(300 * time.Millisecond)
	for _, p := range b.Problems() {
		ok := false
		for _, re := range allow {
			ok = ok || re.MatchString(p)
		}
		if !ok {
			b.t.Errorf("%s: %s", what, p)
		}
	}
}

// Do runs actions in the tab, failing the test after a minute.
func (b *Browser) Do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// Get runs one action that returns a value, failing the test after a
// minute.
func Get[T any](b *Browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// Open navigates to url and returns the HTTP status of the document.
func (b *Browser) Open(url string) int64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, chromedp.Navigate(url))
	if err != nil {
		b.t.Fatalf("open %s: %v", url, err)
	}
	if resp == nil {
		b.t.Fatalf("open %s: no response", url)
	}
	return resp.Status
}

// Blank leaves the current page for an empty one.
func (b *Browser) Blank() {
	b.t.Helper()
	b.Do("open about:blank", chromedp.Navigate("about:blank"))
}

// Text returns the text of the first element matching the CSS selector.
func (b *Browser) Text(sel string) string {
	b.t.Helper()
	return Get(b, "text of "+sel, chromedp.Text(chromedp.CSS(sel)))
}

// Eval evaluates a JavaScript expression.
func Eval[T any](b *Browser, expr string) T {
	b.t.Helper()
	return Get(b, "evaluate "+expr, chromedp.Evaluate[T](expr))
}

// Cookies returns the browser's cookies.
func (b *Browser) Cookies() []*network.Cookie {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{})
	if err != nil {
		b.t.Fatalf("cookies: %v", err)
	}
	return res.Cookies
}

// WaitVisible waits for an element matching the CSS selector.
func (b *Browser) WaitVisible(sel string) {
	b.t.Helper()
	b.Do("wait for "+sel, chromedp.WaitVisible(chromedp.CSS(sel)))
}

// Phone makes the viewport a phone's (390×844 CSS pixels, scale 2,
// touch), or the desktop window again.
func (b *Browser) Phone(on bool) {
	b.t.Helper()
	if on {
		b.Do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile, chromedp.EmulateTouch))
		return
	}
	b.Do("desktop viewport", chromedp.EmulateReset())
}

// ScreenshotDir is where the tests put their screenshots for review:
// $BERTH_SCREENSHOT_DIR, else .artifacts/screenshots at the repository's
// root (gitignored).
func ScreenshotDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("BERTH_SCREENSHOT_DIR")
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, ".artifacts", "screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("no go.mod above " + dir)
		}
	}
}

// Screenshot saves the whole page as <dir>/<name>.png and returns its
// path.
func (b *Browser) Screenshot(dir, name string) string {
	b.t.Helper()
	png := Get(b, "screenshot "+name, chromedp.FullScreenshot(100))
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
	return path
}

// NoHorizontalScroll fails the test when the page is wider than the
// viewport (tables scroll inside their own box instead).
func (b *Browser) NoHorizontalScroll(what string) {
	b.t.Helper()
	widths := Eval[[]float64](b, `[document.documentElement.scrollWidth, window.innerWidth]`)
	if len(widths) != 2 || widths[0] > widths[1] {
		b.t.Errorf("%s: page is %v CSS pixels wide in a %v wide viewport", what, widths[0], widths[1])
	}
}

// WaitRefresh waits until the page has replaced its content with a newer
// render (main's data-rendered grew).
func (b *Browser) WaitRefresh(what string, within time.Duration) {
	b.t.Helper()
	rendered := func() string {
		return Get(b, what, chromedp.AttributeValue(chromedp.CSS("#main"), "data-rendered")).Value
	}
	first := rendered()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
		if cur := rendered(); cur != first && cur != "" {
			return
		}
	}
	b.t.Errorf("%s: the page did not refresh its content within %s", what, within)
}
