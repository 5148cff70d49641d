package standby

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"
)

// A dynamic upstream source only returns upstreams, and reverse_proxy
// answers "no upstreams" with a bare 503 of its own. A request that a wake
// cannot serve (wake_timeout, a failing container, a read-only socket)
// gets one upstream of the connection's own instead: a loopback listener
// that answers 503 with Retry-After, which reverse_proxy relays as it
// relays any answer.

// StandIn returns the dial address of the connection's upstream that
// answers 503 with this Retry-After (in whole seconds, at least 1):
// reverse_proxy relays its answer to the client as it is. "" if it cannot
// listen, or the connection is closing.
func (w *Waker) StandIn(retry time.Duration) string {
	secs := int((retry + time.Second - 1) / time.Second)
	secs = max(secs, 1)
	if secs > 60 {
		secs = (secs + 59) / 60 * 60 // a handful of stand-ins, whatever the backoff left
	}
	w.engine.mu.Lock()
	defer w.engine.mu.Unlock()
	if w.closed {
		return ""
	}
	s := w.standIns[secs]
	if s == nil {
		var err error
		if s, err = startStandIn(secs); err != nil {
			w.logger.Error("cannot answer 503 with Retry-After", zap.Error(err))
			return ""
		}
		w.standIns[secs] = s
	}
	return s.dial
}

// standIn is a loopback HTTP server answering every request with 503 and
// a fixed Retry-After, on a connection it closes after the answer (R5e):
// it keeps no idle connection, and one that sends nothing is closed after
// standInReadTimeout. It speaks HTTP/1.1 and h2c, not TLS: behind a
// reverse_proxy whose transport uses TLS its answer becomes a 502.
type standIn struct {
	dial string
	srv  *http.Server
}

// standInReadTimeout bounds how long a stand-in waits for a request's
// head and body on a connection, and how long it writes its answer.
const standInReadTimeout = 2 * time.Second

func startStandIn(secs int) (*standIn, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("stand-in upstream: %w", err)
	}
	retry := strconv.Itoa(secs)
	body := "503 Service Unavailable: waking the service up; retry in " + retry + " s\n"
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", retry)
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(body))
		}),
		ReadHeaderTimeout: standInReadTimeout,
		ReadTimeout:       standInReadTimeout,
		WriteTimeout:      standInReadTimeout,
		IdleTimeout:       standInReadTimeout,
	}
	// One answer per connection: nothing waits idle for a next request,
	// whoever opened it (reverse_proxy's pool, or any local process).
	srv.SetKeepAlivesEnabled(false)
	// HTTP/1.1, and HTTP/2 with prior knowledge for a reverse_proxy whose
	// transport says `versions h2c` (an HTTP/2 connection is closed after
	// IdleTimeout).
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = srv.Serve(ln) }()
	return &standIn{dial: ln.Addr().String(), srv: srv}, nil
}
