// Package pages serves the pages a person's browser gets instead of an
// upstream's answer: the page while an instance wakes (R5h) and the
// maintenance page (R5i). A route that answers with a page returns, as its
// only upstream, the loopback listener of its Server, and sets on the
// request a header carrying the page's Data, signed with the Server's own
// key: reverse_proxy relays the page as it relays any answer, and no
// client can have a page say what it wants. No Caddy import.
package pages

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Header is the request header that carries a page's signed Data from the
// route to its Server.
const Header = "Caddy-Dicer-Page"

// Kinds of page.
const (
	// KindWaking: an instance is being woken; the page reloads every
	// Refresh seconds until it is ready (R5h).
	KindWaking = "waking"
	// KindMaintenance: the route's instances are in maintenance (R5i).
	KindMaintenance = "maintenance"
	// KindUnavailable: the wake failed, or could not start; the next try
	// is in RetryAfter seconds.
	KindUnavailable = "unavailable"
	// KindRemoved: the host's instance was removed while on standby, and
	// nothing will wake it (R5o); Message says which and when.
	KindRemoved = "removed"
	// KindAsleep: the answer to a request the instance ignores (R5r,
	// caddy.standby_ignore) while it is on standby (Message "asleep") or
	// on its way up ("waking"): 200, never a page, with StateHeader
	// saying which, so that a monitor tells asleep from down.
	KindAsleep = "asleep"
)

// StateHeader is the response header of a KindAsleep answer: `asleep` or
// `waking` (R5r).
const StateHeader = "Dicer-State"

// maxRemovedName bounds the instance name a removed page shows, in bytes.
const maxRemovedName = 128

// RemovedMessage is the message of a KindRemoved page: which instance
// (name clipped to 128 bytes, ID to 12 characters), when, and that
// nothing will wake it.
func RemovedMessage(name, id string, at time.Time) string {
	if len(name) > maxRemovedName {
		name = name[:maxRemovedName] + "..."
	}
	if len(id) > 12 {
		id = id[:12]
	}
	return fmt.Sprintf("Its container %s (%s) was removed at %s while on standby: nothing will wake it. "+
		"Deploy it again to serve this host.", name, id, at.UTC().Format(time.RFC3339))
}

// Data is what a page template is executed with.
type Data struct {
	// Kind is "waking", "maintenance", "unavailable" or "removed".
	Kind string `json:"k"`
	// Host is the request's host, as the client sent it.
	Host string `json:"h"`
	// Message is the maintenance message (from the caddy.maintenance label
	// or the admin switch), or why the service is unavailable.
	Message string `json:"m,omitempty"`
	// Refresh is how often, in seconds, the page reloads itself (0:
	// never); the default page puts it in a meta refresh.
	Refresh int `json:"r,omitempty"`
	// RetryAfter is the Retry-After of the answer, in seconds.
	RetryAfter int `json:"a,omitempty"`
}

//go:embed default.html
var defaultPage string

// maxHost bounds the host a page shows, in bytes.
const maxHost = 255

// Template is a parsed page template: Go's template language
// (text/template), parsed with html/template, which escapes every value
// for the place it lands in (text, attribute, URL, script).
type Template struct{ t *template.Template }

// Default is the built-in page.
func Default() *Template {
	return &Template{t: template.Must(template.New("page").Parse(defaultPage))}
}

// ParseFile reads and parses the template file at path, and executes it
// once with sample data of each kind, so that a broken template is an
// error at provision, not on a request.
func ParseFile(path string) (*Template, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := template.New("page").Parse(string(raw))
	if err != nil {
		return nil, err
	}
	tp := &Template{t: t}
	for _, k := range []string{KindWaking, KindMaintenance, KindUnavailable} {
		if _, err := tp.render(Data{Kind: k, Host: "example.com", Message: "sample", Refresh: 1, RetryAfter: 5}); err != nil {
			return nil, err
		}
	}
	return tp, nil
}

func (t *Template) render(d Data) ([]byte, error) {
	var b bytes.Buffer
	if err := t.t.Execute(&b, d); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// readTimeout bounds reads and writes of a page connection, as the
// stand-in's (R5e).
const readTimeout = 2 * time.Second

// Server is one route's page server: a loopback listener, started at the
// first page, closed by Close.
type Server struct {
	tmpl *Template
	key  []byte

	mu     sync.Mutex
	dial   string
	srv    *http.Server
	closed bool
	err    error // why it could not listen, said once
}

// NewServer returns a Server rendering tmpl (nil: Default()).
func NewServer(tmpl *Template) *Server {
	if tmpl == nil {
		tmpl = Default()
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return &Server{tmpl: tmpl, key: key}
}

// Dial returns the address to send a page request to, listening first if
// needed; "" if it is closed or cannot listen (err says why, the first
// time).
func (s *Server) Dial() (dial string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", nil
	}
	if s.dial != "" {
		return s.dial, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		first := s.err == nil
		s.err = err
		if first {
			return "", fmt.Errorf("page server: %w", err)
		}
		return "", nil
	}
	s.srv = &http.Server{
		Handler:           http.HandlerFunc(s.serve),
		ReadHeaderTimeout: readTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      readTimeout,
		IdleTimeout:       readTimeout,
	}
	s.srv.SetKeepAlivesEnabled(false) // one answer per connection (R5e)
	s.srv.Protocols = new(http.Protocols)
	s.srv.Protocols.SetHTTP1(true)
	s.srv.Protocols.SetUnencryptedHTTP2(true)
	srv := s.srv
	go func() { _ = srv.Serve(ln) }()
	s.dial = ln.Addr().String()
	return s.dial, nil
}

// Close shuts the listener; Dial returns "" from then on.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.srv != nil {
		return s.srv.Close()
	}
	return nil
}

// Sign returns the value of Header that asks the Server for d's page.
func (s *Server) Sign(d Data) string {
	if len(d.Host) > maxHost {
		d.Host = strings.ToValidUTF8(d.Host[:maxHost], "")
	}
	raw, _ := json.Marshal(d)
	body := base64.RawURLEncoding.EncodeToString(raw)
	return body + "." + base64.RawURLEncoding.EncodeToString(s.mac(body))
}

func (s *Server) mac(body string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(body))
	return m.Sum(nil)
}

// verify returns the Data of a header value Sign made.
func (s *Server) verify(v string) (Data, bool) {
	var d Data
	body, sig, ok := strings.Cut(v, ".")
	if !ok || len(v) > 4096 {
		return d, false
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.mac(body)) {
		return d, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || json.Unmarshal(raw, &d) != nil {
		return d, false
	}
	return d, true
}

// AcceptsHTML reports whether a request's Accept header asks for HTML: a
// browser's navigation does, curl and API clients do not.
func AcceptsHTML(h http.Header) bool {
	for _, v := range h.Values("Accept") {
		if strings.Contains(v, "text/html") {
			return true
		}
	}
	return false
}

// serve answers 503 with the page of the request's signed Data: HTML to
// a client that accepts it, else one line of plain text. A request
// without valid Data gets a plain 503.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	d, ok := s.verify(r.Header.Get(Header))
	if !ok {
		h.Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("503 Service Unavailable\n"))
		return
	}
	if d.Kind == KindAsleep { // R5r: wakeable, not down
		state, line := "asleep", "asleep: the service is on standby and wakes on its next request that is not ignored\n"
		if d.Message == "waking" {
			state, line = "waking", "waking: the service is on its way up\n"
		}
		h.Set(StateHeader, state)
		h.Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(line))
		return
	}
	if d.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(d.RetryAfter))
	}
	if !AcceptsHTML(r.Header) {
		h.Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("503 Service Unavailable: " + plainLine(d) + "\n"))
		return
	}
	page, err := s.tmpl.render(d)
	if err != nil {
		h.Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("503 Service Unavailable: " + plainLine(d) + "\n"))
		return
	}
	if d.Refresh > 0 {
		h.Set("Refresh", strconv.Itoa(d.Refresh))
	}
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data: https:")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(page)
}

// plainLine is the page as one line of text, with no control character.
func plainLine(d Data) string {
	var s string
	switch d.Kind {
	case KindWaking:
		s = "waking the service up"
	case KindMaintenance:
		s = "down for maintenance: " + d.Message
	case KindRemoved:
		s = "removed: " + d.Message
	default:
		s = "unavailable: " + d.Message
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

// RetrySeconds is a Retry-After of d in whole seconds, at least 1.
func RetrySeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}
