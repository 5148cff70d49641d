// Command queueload keeps a number of clients each sending one request
// after another to a URL, for as long as it is told, and prints the
// answers' throughput, latency percentiles, and how many were 5xx or
// failed: bench/queue.sh runs it against the queue at capacity (R5q) and
// against Caddy's own max_requests with lb_try_duration.
//
// Usage: queueload -host queue.localhost -clients 16 -duration 10s URL
// prints one line: "<requests/s> <p50 ms> <p90 ms> <p99 ms> <max ms> <5xx> <failed> <total>".
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"
)

func main() {
	host := flag.String("host", "", "the Host header")
	clients := flag.Int("clients", 16, "clients, each sending its next request when the last is answered")
	duration := flag.Duration("duration", 10*time.Second, "how long to send")
	flag.Parse()
	if flag.NArg() != 1 || *clients <= 0 {
		fmt.Fprintln(os.Stderr, "usage: queueload [-host H] [-clients N] [-duration D] URL")
		os.Exit(2)
	}
	url := flag.Arg(0)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *clients, DisableCompression: true}}
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	var mu sync.Mutex
	var took []time.Duration
	fivexx, failed := 0, 0
	var wg sync.WaitGroup
	start := time.Now()
	for range *clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Host = *host
				t0 := time.Now()
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				d := time.Since(t0)
				mu.Lock()
				switch {
				case err != nil:
					failed++
				case resp.StatusCode >= 500:
					fivexx++
				default:
					took = append(took, d)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(took)
	pct := func(p float64) float64 {
		if len(took) == 0 {
			return 0
		}
		return float64(took[min(len(took)-1, int(p*float64(len(took))))]) / float64(time.Millisecond)
	}
	total := len(took) + fivexx + failed
	fmt.Printf("%.1f %.1f %.1f %.1f %.1f %d %d %d\n", float64(len(took))/elapsed.Seconds(),
		pct(.5), pct(.9), pct(.99), pct(1), fivexx, failed, total)
}
