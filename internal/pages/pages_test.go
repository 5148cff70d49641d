package pages

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func get(t *testing.T, dial, accept, token string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+dial+"/", nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if token != "" {
		req.Header.Set(Header, token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// The page shows the signed data escaped; a forged or missing header gets
// a plain 503; a client that does not accept HTML gets one line (R5h, R5i).
func TestPages_R5i_signed_escaped_and_plain(t *testing.T) {
	s := NewServer(nil)
	defer s.Close()
	dial, err := s.Dial()
	if err != nil || dial == "" {
		t.Fatalf("Dial: %q, %v", dial, err)
	}
	hostile := `<script>alert("x")</script> & 'q'`
	tok := s.Sign(Data{Kind: KindMaintenance, Host: "shop.test", Message: hostile, RetryAfter: 30})
	resp, body := get(t, dial, "text/html,application/xhtml+xml", tok)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "30" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("maintenance page: %d, Retry-After %q, %q", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"))
	}
	if strings.Contains(body, "<script>") || !strings.Contains(body, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; &#39;q&#39;") {
		t.Fatalf("the message is not escaped as text:\n%s", body)
	}
	_, plain := get(t, dial, "*/*", tok)
	if plain != "503 Service Unavailable: down for maintenance: "+hostile+"\n" {
		t.Fatalf("plain answer %q", plain)
	}
	forged := tok[:len(tok)-2] + "AA"
	if _, b := get(t, dial, "text/html", forged); b != "503 Service Unavailable\n" {
		t.Fatalf("forged header answered %q, want a plain 503", b)
	}
	if _, b := get(t, dial, "text/html", ""); b != "503 Service Unavailable\n" {
		t.Fatalf("no header answered %q, want a plain 503", b)
	}
	resp, body = get(t, dial, "text/html", s.Sign(Data{Kind: KindWaking, Host: "a.test", Refresh: 1, RetryAfter: 1}))
	if resp.Header.Get("Refresh") != "1" || !strings.Contains(body, `<meta http-equiv="refresh" content="1">`) {
		t.Fatalf("waking page: Refresh %q, body:\n%s", resp.Header.Get("Refresh"), body)
	}
	if resp.Close != true && resp.Header.Get("Connection") != "close" {
		t.Error("page connection kept alive (R5e)")
	}
	s.Close()
	if d, _ := s.Dial(); d != "" {
		t.Fatalf("Dial after Close: %q", d)
	}
}

// A template file is checked at parse time, and used.
func TestPages_R5h_template_file(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.html")
	os.WriteFile(bad, []byte("{{.Nope}}"), 0o600)
	if _, err := ParseFile(bad); err == nil {
		t.Fatal("a template naming a missing field parsed")
	}
	good := filepath.Join(dir, "good.html")
	os.WriteFile(good, []byte(`<p title="{{.Host}}">{{.Kind}} {{.Message}}</p>`), 0o600)
	tp, err := ParseFile(good)
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(tp)
	defer s.Close()
	dial, _ := s.Dial()
	_, body := get(t, dial, "text/html", s.Sign(Data{Kind: KindMaintenance, Host: `x" onload="y`, Message: "<i>"}))
	if body != `<p title="x&#34; onload=&#34;y">maintenance &lt;i&gt;</p>` {
		t.Fatalf("custom page: %s", body)
	}
}
