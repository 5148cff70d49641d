package dicertest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// ServeHello serves HTTP on addr, which must be an IPv4 loopback address
// (127.0.0.0/8), answering every request with "hello from <name>\n", as a
// stand-in for the service inside an instance. stop closes the server and
// its connections.
func ServeHello(addr, name string) (stop func(), err error) {
	_, stop, err = ListenHello(addr, name)
	return stop, err
}

// ListenHello is ServeHello that also returns the actual address, for an
// addr with port 0.
func ListenHello(addr, name string) (actual string, stop func(), err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", nil, fmt.Errorf("dicertest: %w", err)
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.To4() == nil || !ip.IsLoopback() {
		return "", nil, fmt.Errorf("dicertest: %s is not an IPv4 loopback address (127.0.0.0/8)", host)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("dicertest: %w", err)
	}
	body := "hello from " + name + "\n"
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, body)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return ln.Addr().String(), sync.OnceFunc(func() {
		_ = srv.Close()
		<-done
	}), nil
}
