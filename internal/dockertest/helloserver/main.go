// Command helloserver is the static test server baked into the test image
// that dockertest builds: a stand-in for the service inside a container.
//
// It serves HTTP on :8080 (or :$PORT), answering every request with
// "hello from <$NAME, else the hostname>\n". /healthz answers 200 while the
// server is healthy and 503 otherwise; POST /health/bad and POST
// /health/good flip that, so a test can drive a container's health check
// over HTTP (the image has no shell). It starts healthy unless $HEALTH is
// "bad".
//
// To stand in for a real app's start and stop: it binds its port only
// $LISTEN_DELAY (a Go duration) after it starts; GET /slow?d=<duration>
// answers after that long; GET /drip?n=<bytes>&every=<duration> streams
// n bytes, one every duration (a stream that outlasts an idle time); and
// on SIGTERM it drains: it stops accepting
// connections at once, finishes the requests in flight, and exits
// $EXIT_DELAY after the signal (default: as soon as they are done). GET
// /first-request answers when the first HTTP request reached it (Unix
// time in nanoseconds): a readiness probe only connects, so this is the
// first request a proxy routed to it.
// /listening answers when it began to listen (Unix time in nanoseconds),
// so a test can tell an app's own start time from the delay in front of
// it; GET /first-request answers when the first HTTP request reached it
// (a readiness probe only connects: the first request a proxy routed).
//
// To stand in for a bad release (R4f's rollouts): $ERROR_RATE (a fraction
// from 0 to 1, such as 0.2) of the requests to / answer 500, evenly spread
// (every fifth for 0.2), and $DELAY (a Go duration) delays every answer
// of /.
//
// Every answer carries the request's path as it arrived in X-Path, so a
// test can tell whether a proxy stripped a prefix.
//
// POST or PUT /sha256 reads the whole body and answers
// "sha256=<hex> bytes=<n> count=<k>\n": its SHA-256, its length, and how
// many requests /sha256 has had in this process (this one included), so a
// test can tell that a body arrived whole and once.
//
// GET /burn?for=<duration> keeps one core busy for that long (at most 10
// minutes) in the background and answers at once: a container busy with
// no request open (R5r); GET /burning answers how many burns run.
//
// With -healthcheck it is the health check itself: it GETs
// http://127.0.0.1:$PORT/healthz and exits 0 on a 200, else 1.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	healthcheck := flag.Bool("healthcheck", false, "probe the running server's /healthz and exit 0 on 200, else 1")
	flag.Parse()
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	if *healthcheck {
		os.Exit(probe(port))
	}
	name := os.Getenv("NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	var healthy atomic.Bool
	healthy.Store(os.Getenv("HEALTH") != "bad")

	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if healthy.Load() {
			_, _ = io.WriteString(w, "ok\n")
			return
		}
		http.Error(w, "unhealthy", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("POST /health/bad", func(w http.ResponseWriter, _ *http.Request) {
		healthy.Store(false)
		_, _ = io.WriteString(w, "now unhealthy\n")
	})
	mux.HandleFunc("POST /health/good", func(w http.ResponseWriter, _ *http.Request) {
		healthy.Store(true)
		_, _ = io.WriteString(w, "now healthy\n")
	})
	body := "hello from " + name + "\n"
	errRate, _ := strconv.ParseFloat(os.Getenv("ERROR_RATE"), 64)
	delay := envDuration("DELAY")
	var served atomic.Int64
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(delay)
		n := served.Add(1)
		if errRate > 0 && int64(float64(n)*errRate) > int64(float64(n-1)*errRate) {
			http.Error(w, "a bad release", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, body)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		d, _ := time.ParseDuration(r.URL.Query().Get("d"))
		time.Sleep(d)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, body)
	})
	mux.HandleFunc("/drip", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		every, _ := time.ParseDuration(r.URL.Query().Get("every"))
		w.Header().Set("Content-Type", "application/octet-stream")
		flusher, _ := w.(http.Flusher)
		for i := range min(n, 10000) {
			if i > 0 {
				select {
				case <-time.After(every):
				case <-r.Context().Done():
					return
				}
			}
			if _, err := io.WriteString(w, "x"); err != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
	})
	// /burn?for=10s keeps one core busy for that long (at most 10 min),
	// answering at once: CPU with no request open (R5r).
	var burning atomic.Int64
	mux.HandleFunc("/burn", func(w http.ResponseWriter, r *http.Request) {
		d, _ := time.ParseDuration(r.URL.Query().Get("for"))
		d = min(d, 10*time.Minute)
		burning.Add(1)
		go func() {
			defer burning.Add(-1)
			x := uint64(1)
			for end := time.Now().Add(d); time.Now().Before(end); {
				for range 100000 {
					x = x*6364136223846793005 + 1442695040888963407
				}
			}
			if x == 42 {
				fmt.Fprintln(os.Stderr, "burn:", x) // keeps the loop from being optimised out
			}
		}()
		_, _ = io.WriteString(w, "burning for "+d.String()+"\n")
	})
	mux.HandleFunc("/burning", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, strconv.FormatInt(burning.Load(), 10)+"\n")
	})
	var hashed atomic.Int64
	sum := func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		k := hashed.Add(1)
		if err != nil {
			http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintf(w, "sha256=%s bytes=%d count=%d\n", hex.EncodeToString(h.Sum(nil)), n, k)
	}
	mux.HandleFunc("POST /sha256", sum)
	mux.HandleFunc("PUT /sha256", sum)
	var listening atomic.Int64
	mux.HandleFunc("/listening", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, strconv.FormatInt(listening.Load(), 10)+"\n")
	})
	var firstRequest atomic.Int64
	mux.HandleFunc("/first-request", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, strconv.FormatInt(firstRequest.Load(), 10)+"\n")
	})
	first := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		firstRequest.CompareAndSwap(0, time.Now().UnixNano())
		w.Header().Set("X-Path", r.URL.Path) // the path it got, after a proxy's stripping
		mux.ServeHTTP(w, r)
	})
	srv := &http.Server{Addr: ":" + port, Handler: first, ReadHeaderTimeout: 10 * time.Second}

	// PID 1 gets no default signal handling: drain on SIGTERM.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	drained := make(chan struct{})
	go func() {
		<-ctx.Done()
		exitAt := time.Now().Add(envDuration("EXIT_DELAY"))
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		time.Sleep(time.Until(exitAt))
		close(drained)
	}()
	time.Sleep(envDuration("LISTEN_DELAY"))
	ln, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helloserver:", err)
		os.Exit(1) //nolint:gocritic // nothing deferred matters once serving failed
	}
	listening.Store(time.Now().UnixNano())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "helloserver:", err)
		os.Exit(1)
	}
	<-drained
}

// envDuration reads a Go duration from the environment; 0 if unset or bad.
func envDuration(name string) time.Duration {
	d, _ := time.ParseDuration(os.Getenv(name))
	return d
}

func probe(port string) int {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://127.0.0.1:" + port + "/healthz")
	if err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		return 1
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(os.Stderr, "healthcheck: status", resp.StatusCode)
		return 1
	}
	return 0
}
