package testkit

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// AdminGet GETs path (e.g. "/config/", "/metrics") from the Caddy admin
// endpoint at addr (host:port) and returns the body; an error or a status
// other than 200 fails t.
func AdminGet(t testing.TB, addr, path string) string {
	t.Helper()
	res, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, res.StatusCode, body)
	}
	return string(body)
}

// MetricSum is the sum of the samples of metric name, in Prometheus's
// text format (a Caddy's /metrics), whose lines hold every one of labels
// (`kind="docker"`).
func MetricSum(t testing.TB, text, name string, labels ...string) float64 {
	t.Helper()
	sum := 0.0
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}
