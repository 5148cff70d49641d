package testkit

import (
	"io"
	"net/http"
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
