package ui

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The Namespaces view lists berth's namespaces first and folds the rest
// behind their count; the allocation page shows its services with their
// health and each check's last output.
func TestReportPages(t *testing.T) {
	f := newFixture()
	h := fixtureUI(f, nil).Handler()
	body := get(t, h, "/ui/namespaces").Body.String()
	ib, io := strings.Index(body, f.nss[len(f.nss)-2].Name), strings.Index(body, "cni-00000000")
	if ib < 0 || io < 0 || ib > io {
		t.Errorf("berth's namespace (at %d) is not listed before the others (at %d)", ib, io)
	}
	if !strings.Contains(body, `<details id="others-netns"`) || !strings.Contains(body, "6 other namespaces on this host, not berth's") {
		t.Errorf("the others are not folded behind their count:\n%s", body)
	}
	body = get(t, h, "/ui/alloc/"+f.allocs[0].ID).Body.String()
	for _, want := range []string{`id="services"`, "web-metrics", "10.199.165.7:8080", `st-ok">passing`, `st-bad">critical`,
		"HTTP GET http://10.199.165.7:8080/health: 200 OK", "connect: connection refused"} {
		if !strings.Contains(body, want) {
			t.Errorf("allocation page lacks %q", want)
		}
	}
	if body := get(t, h, "/ui/alloc/"+f.allocs[3].ID).Body.String(); !strings.Contains(body, "No services registered.") {
		t.Errorf("an allocation without services does not say so")
	}
}

// The same in Chromium: the others stay folded until opened, and the
// services table is visible.
func TestReportBrowserNamespacesAndServices(t *testing.T) {
	b := NewBrowser(t)
	f := newFixture()
	start := time.Now()
	u := New(Options{Source: f, History: fixtureHistory(), Refresh: time.Hour,
		Now: func() time.Time { return fixtureNow.Add(time.Since(start)) }})
	srv := httptest.NewServer(u.Handler())
	t.Cleanup(srv.Close)

	b.Open(srv.URL + "/ui/namespaces")
	b.WaitVisible("#namespaces")
	first := Eval[string](b, `document.querySelector("#namespaces table.netns tbody tr td").textContent`)
	if !strings.Contains(first, f.allocs[0].ID) {
		t.Errorf("first namespace row is %q, want berth's", first)
	}
	if Eval[bool](b, `document.querySelector("#others-netns").open`) {
		t.Error("the other namespaces are unfolded")
	}
	if n := Eval[int](b, `[...document.querySelectorAll("#namespaces tr")].filter(r => r.checkVisibility()).length`); n != 1+2 {
		t.Errorf("%d table rows visible, want berth's 2 and a header", n)
	}
	b.Settle("namespaces")

	b.Open(srv.URL + "/ui/alloc/" + f.allocs[0].ID)
	b.WaitVisible("#services table.services")
	if got := b.Text("#services"); !strings.Contains(got, "critical") || !strings.Contains(got, "connection refused") {
		t.Errorf("services section: %q", got)
	}
	b.Settle("alloc with services")
}
