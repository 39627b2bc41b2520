package ui

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
)

// cookieName is the session cookie; its path is Prefix, so it is never
// sent with API requests.
const cookieName = "berth_session"

// maxLoginBody bounds a login form.
const maxLoginBody = 4096

// Gate serves the status page where credentials are needed (the agent's
// TCP listener). Requests outside Prefix, and any that carry an
// Authorization header (the API's bearer token, checked there), go to
// guarded. Under Prefix, POST /ui/login checks a token with check and
// sets the session cookie; a request with a valid session cookie goes to
// open (the handler the unix socket serves, which mounts Handler); any
// other gets 401 and the login page.
//
// The token is never logged, and neither is the cookie.
func (u *UI) Gate(check func(token string) bool, open, guarded http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !underPrefix(r.URL.Path) || r.Header.Get("Authorization") != "" {
			guarded.ServeHTTP(w, r)
			return
		}
		switch {
		case r.URL.Path == "/ui/login" && r.Method == http.MethodPost:
			u.login(w, r, check)
		case r.URL.Path == "/ui/logout" && r.Method == http.MethodPost:
			u.logout(w, r)
		case u.validSession(r):
			open.ServeHTTP(w, r)
		default:
			next := safeNext(r.URL.RequestURI())
			if r.URL.Path == "/ui/login" {
				next = Prefix
			}
			u.loginPage(w, r, http.StatusUnauthorized, next, "")
		}
	})
}

func underPrefix(p string) bool { return p == "/ui" || strings.HasPrefix(p, Prefix) }

type loginView struct {
	Next    string
	Message string
}

func (u *UI) loginPage(w http.ResponseWriter, r *http.Request, code int, next, msg string) {
	// A browser is told how to authenticate by the page itself; the
	// header is for API clients that came to the wrong place.
	w.Header().Set("WWW-Authenticate", `Bearer realm="berth"`)
	u.render(w, r, code, "login", page{Title: "Sign in", Login: true, Body: loginView{Next: next, Message: msg}})
}

func (u *UI) login(w http.ResponseWriter, r *http.Request, check func(string) bool) {
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	if err := r.ParseForm(); err != nil {
		u.loginPage(w, r, http.StatusBadRequest, Prefix, "The login form could not be read: send it again.")
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	token := strings.TrimSpace(r.PostForm.Get("token"))
	if token == "" || !check(token) {
		reason := "invalid token"
		if token == "" {
			reason = "no token"
		}
		u.log.Warn("status page login rejected", "remote", r.RemoteAddr, "reason", reason)
		u.loginPage(w, r, http.StatusUnauthorized, next, "That token is not this agent's (api.token or api.token_file).")
		return
	}
	exp := u.now().Add(u.ttl)
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: u.sign(exp), Path: Prefix,
		Expires: exp, MaxAge: int(u.ttl.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
		// Secure would keep the cookie from ever being sent: the agent's
		// TCP listener is plain HTTP (as its bearer token is).
	})
	u.log.Info("status page login", "remote", r.RemoteAddr, "expires", exp.Format(time.RFC3339))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (u *UI) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Prefix, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// safeNext keeps a redirect after login on the status page: anything
// else (another host, "//host", the API) becomes Prefix.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.ContainsAny(next, "\\\r\n\t") {
		return Prefix
	}
	p, q, _ := strings.Cut(next, "?")
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && !strings.HasSuffix(clean, "/") {
		clean += "/"
	}
	if !strings.HasPrefix(clean, Prefix) {
		return Prefix
	}
	if q != "" {
		clean += "?" + q
	}
	return clean
}

// A session cookie is "<expiry, Unix seconds>.<HMAC-SHA256 of it under
// the UI's key>": nothing is kept per session, and every session ends
// when the agent restarts (the key is new).
func (u *UI) sign(exp time.Time) string {
	e := strconv.FormatInt(exp.Unix(), 10)
	return e + "." + base64.RawURLEncoding.EncodeToString(u.mac(e))
}

func (u *UI) mac(exp string) []byte {
	m := hmac.New(sha256.New, u.key[:])
	m.Write([]byte("berth ui session\x00" + exp))
	return m.Sum(nil)
}

func (u *UI) validSession(r *http.Request) bool {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return false
	}
	e, sig, ok := strings.Cut(c.Value, ".")
	if !ok {
		return false
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, u.mac(e)) {
		return false
	}
	exp, err := strconv.ParseInt(e, 10, 64)
	return err == nil && u.now().Unix() < exp
}
