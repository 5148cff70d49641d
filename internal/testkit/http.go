package testkit

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"sync"
	"time"
)

// Result is one request's outcome: its answer, or the error that kept it
// from being read whole, and how long it took.
type Result struct {
	Status int
	Body   string
	Header http.Header // nil when Err is set before an answer came
	Err    error
	Took   time.Duration
}

// String shows the answer as `200 "body"`, or `error: ...`.
func (r Result) String() string {
	if r.Err != nil {
		return "error: " + r.Err.Error()
	}
	return fmt.Sprintf("%d %q", r.Status, r.Body)
}

// Is reports whether the request was answered with status and, unless
// body is empty, with that body.
func (r Result) Is(status int, body string) bool {
	return r.Err == nil && r.Status == status && (body == "" || r.Body == body)
}

// Caddy sends requests to a Caddy's HTTP listener, naming the site by the
// Host header.
type Caddy struct {
	// Addr is the host:port of Caddy's HTTP listener, e.g. "127.0.0.1:9080".
	Addr string
	// Client sends the requests; nil means http.DefaultClient.
	Client *http.Client
}

// Get sends GET path (e.g. "/") for host to Caddy, given up when ctx ends,
// and reads the whole answer.
func (c Caddy) Get(ctx context.Context, host, path string) Result {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.Addr+path, nil)
	if err != nil {
		return Result{Err: err}
	}
	req.Host = host
	client := c.Client
	if client == nil {
		client = http.DefaultClient
	}
	start := time.Now()
	res, err := client.Do(req)
	if err != nil {
		return Result{Err: err, Took: time.Since(start)}
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return Result{Status: res.StatusCode, Body: string(body), Header: res.Header, Err: err, Took: time.Since(start)}
}

// GetWithin is Get of "/" for host, given up after timeout (a request that
// reaches a frozen instance may never be answered).
func (c Caddy) GetWithin(host string, timeout time.Duration) Result {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.Get(ctx, host, "/")
}

// Burst calls get n times at once and returns the results in the order of
// the calls.
//
//	results := testkit.Burst(100, func() testkit.Result { return caddy.GetWithin(host, 30*time.Second) })
func Burst[R any](n int, get func() R) []R {
	results := make([]R, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = get()
		}()
	}
	wg.Wait()
	return results
}

// Load calls a request function from several workers, back to back, until
// it is stopped, counting the answers that are OK by body and keeping the
// first ten others.
type Load struct {
	mu       sync.Mutex
	bodies   map[string]int
	failed   int
	failures []string
	quit     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// StartLoad starts workers that each call get back to back; ok says
// whether a result counts as served.
//
//	l := testkit.StartLoad(4, func() testkit.Result { return caddy.GetWithin(host, 10*time.Second) },
//		func(r testkit.Result) bool { return r.Is(http.StatusOK, "") })
//	defer l.Stop()
func StartLoad(workers int, get func() Result, ok func(Result) bool) *Load {
	l := &Load{bodies: map[string]int{}, quit: make(chan struct{})}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.quit:
					return
				default:
				}
				l.record(get(), ok)
			}
		}()
	}
	return l
}

func (l *Load) record(r Result, ok func(Result) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ok(r) {
		l.bodies[r.Body]++
		return
	}
	l.failed++
	if len(l.failures) < 10 {
		l.failures = append(l.failures, time.Now().Format("15:04:05.000")+" "+r.String())
	}
}

// Stop ends the load and waits for the requests under way. It may be
// called more than once.
func (l *Load) Stop() {
	l.stopOnce.Do(func() { close(l.quit) })
	l.wg.Wait()
}

// Served is how many requests were answered with body.
func (l *Load) Served(body string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bodies[body]
}

// Failed is how many requests were not served, and the first ten of them
// with the time they ended.
func (l *Load) Failed() (int, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed, append([]string(nil), l.failures...)
}

// Bodies is how many requests were answered with each body.
func (l *Load) Bodies() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.bodies)
}

// Total is how many requests ended, served or not.
func (l *Load) Total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.failed
	for _, c := range l.bodies {
		n += c
	}
	return n
}
