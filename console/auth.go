package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"
)

// cookieName is the session cookie.
const cookieName = "inorder_console"

// maxNameBytes bounds the name an operator gives at login.
const maxNameBytes = 64

// session is what the cookie proves: until when, whether its holder gave
// the admin token, and the name it gave for the operator log.
type session struct {
	Exp   int64  `json:"exp"`
	Admin bool   `json:"admin"`
	Name  string `json:"name"`
	// Nonce tells sessions of one name apart (the form token derives from
	// it).
	Nonce string `json:"nonce"`
	// Valid is set once the cookie was verified (not serialised).
	Valid bool `json:"-"`
}

// sessionKey derives the cookie-signing key from the tokens: changing
// either ends every session, and replicas with the same tokens accept each
// other's cookies.
func sessionKey(token, admin string) []byte {
	sum := sha256.Sum256([]byte("inorder-console-session-v1\x00" + token + "\x00" + admin))
	return sum[:]
}

func (h *handler) sign(payload string) string {
	m := hmac.New(sha256.New, h.key)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// session returns the request's verified session; ok is false without one.
func (h *handler) session(r *http.Request) (session, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return session{}, false
	}
	payload, sig, ok := strings.Cut(c.Value, ".")
	if !ok || !hmac.Equal([]byte(sig), []byte(h.sign(payload))) {
		return session{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return session{}, false
	}
	var s session
	if json.Unmarshal(raw, &s) != nil || time.Now().Unix() >= s.Exp {
		return session{}, false
	}
	s.Valid = true
	return s, true
}

// csrf is the form token of a session: every POST form carries it.
func (h *handler) csrf(s session) string {
	if !s.Valid {
		return ""
	}
	return h.sign("csrf\x00" + s.Nonce)
}

// tokenOK compares a given token with the expected one in constant time
// (hashes first, so the length leaks nothing either).
func tokenOK(given, want string) bool {
	g, w := sha256.Sum256([]byte(given)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// sameOrigin reports whether a POST comes from the console's own pages: its
// Origin names this host, or — browsers that send no Origin — its
// Sec-Fetch-Site says same-origin. A request with neither is refused.
func (h *handler) sameOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
	}
	return r.Header.Get("Sec-Fetch-Site") == "same-origin"
}

// read wraps a page that needs read access: a session, unless the console
// has no read token.
func (h *handler) read(page http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.opts.Token != "" {
			if _, ok := h.session(r); !ok {
				http.Redirect(w, r, h.opts.Prefix+"login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
		}
		page(w, r)
	}
}

type loginData struct {
	Next     string
	NeedRead bool
	HasAdmin bool
}

// safeNext keeps a redirect inside the console.
func (h *handler) safeNext(next string) string {
	if !strings.HasPrefix(next, h.opts.Prefix) || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return h.opts.Prefix
	}
	return next
}

func (h *handler) loginPage(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, http.StatusOK, "login", view{Title: "Log in", Data: loginData{
		Next: h.safeNext(r.URL.Query().Get("next")), NeedRead: h.opts.Token != "", HasAdmin: h.opts.AdminToken != ""}})
}

// login trades tokens, posted in the body, for a session cookie.
func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	d := loginData{Next: h.safeNext(r.PostForm.Get("next")), NeedRead: h.opts.Token != "", HasAdmin: h.opts.AdminToken != ""}
	token, admin := r.PostForm.Get("token"), r.PostForm.Get("admin_token")
	name := strings.TrimSpace(r.PostForm.Get("name"))
	s := session{Exp: time.Now().Add(SessionTTL).Unix(), Nonce: nonce()}
	switch {
	case admin != "" && h.opts.AdminToken != "" && tokenOK(admin, h.opts.AdminToken):
		// The admin token reads too.
		s.Admin = true
	case admin != "":
		h.log.WarnContext(r.Context(), "console login refused: wrong admin token", "remote", r.RemoteAddr)
		h.render(w, r, http.StatusUnauthorized, "login", view{Title: "Log in", Error: "wrong admin token", Data: d})
		return
	case h.opts.Token != "" && !tokenOK(token, h.opts.Token):
		h.log.WarnContext(r.Context(), "console login refused: wrong token", "remote", r.RemoteAddr)
		h.render(w, r, http.StatusUnauthorized, "login", view{Title: "Log in", Error: "wrong token", Data: d})
		return
	}
	if s.Admin && name == "" {
		h.render(w, r, http.StatusBadRequest, "login", view{Title: "Log in", Error: "give your name: the operator log records who acted", Data: d})
		return
	}
	if len(name) > maxNameBytes || !utf8.ValidString(name) || strings.ContainsFunc(name, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
		h.render(w, r, http.StatusBadRequest, "login", view{Title: "Log in", Error: "the name must be at most 64 bytes of printable text", Data: d})
		return
	}
	s.Name = name
	raw, _ := json.Marshal(s)
	payload := base64.RawURLEncoding.EncodeToString(raw)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: payload + "." + h.sign(payload), Path: h.opts.Prefix,
		MaxAge: int(SessionTTL / time.Second), HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	h.log.InfoContext(r.Context(), "console login", "name", name, "admin", s.Admin, "remote", r.RemoteAddr)
	http.Redirect(w, r, d.Next, http.StatusSeeOther)
}

func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: h.opts.Prefix, MaxAge: -1, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, h.opts.Prefix+"login", http.StatusSeeOther)
}

// sameHostURL reports whether s is a URL of this host (a safe place to go
// back to).
func sameHostURL(s, host string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Host == "" && strings.HasPrefix(u.Path, "/") || strings.EqualFold(u.Host, host)) && !strings.HasPrefix(s, "//")
}
