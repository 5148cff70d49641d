// Command cpuload sends requests at a fixed rate to two URLs at the same
// time, for as long as it is told, and prints how many each answered.
// bench/cpu.sh reads two Caddys' CPU time around it: at a fixed rate,
// well below what a Caddy can serve, each request is served alone, so its
// CPU time does not depend on how many requests the scheduler happened to
// batch, as it does when wrk keeps Caddy saturated.
//
// Usage: cpuload -host cpu.localhost -rate 2000 -conns 8 -duration 10s URL...
// prints one line per URL: "<answered> <failed>".
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	host := flag.String("host", "", "the Host header")
	rate := flag.Float64("rate", 2000, "requests per second to each URL")
	conns := flag.Int("conns", 8, "connections to each URL, each sending in turn")
	duration := flag.Duration("duration", 10*time.Second, "how long to send")
	flag.Parse()
	urls := flag.Args()
	if len(urls) == 0 || *rate <= 0 || *conns <= 0 {
		fmt.Fprintln(os.Stderr, "usage: cpuload [-host H] [-rate R] [-conns C] [-duration D] URL...")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	interval := time.Duration(float64(*conns) / *rate * float64(time.Second))
	ok, failed := make([]atomic.Int64, len(urls)), make([]atomic.Int64, len(urls))
	var wg sync.WaitGroup
	for u, url := range urls {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *conns, DisableCompression: true}}
		for c := range *conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Connections start spread over one interval, not at once.
				next := time.Now().Add(interval * time.Duration(c) / time.Duration(*conns))
				for {
					if d := time.Until(next); d > 0 {
						select {
						case <-ctx.Done():
							return
						case <-time.After(d):
						}
					}
					if ctx.Err() != nil {
						return
					}
					next = next.Add(interval)
					if send(client, url, *host) {
						ok[u].Add(1)
					} else {
						failed[u].Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	for u := range urls {
		fmt.Println(ok[u].Load(), failed[u].Load())
	}
}

// send makes one GET and reads the answer through; true for a 2xx.
func send(client *http.Client, url, host string) bool {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	if host != "" {
		req.Host = host
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode/100 == 2
}
