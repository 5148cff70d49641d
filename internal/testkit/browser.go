package testkit

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Browser is a headless Chromium driven over the DevTools protocol, on
// one page: enough to load a page and read what a person would see. The
// protocol goes over a WebSocket, spoken here in a few dozen lines (text
// frames, the client masking them) rather than through a new dependency.
type Browser struct {
	cmd  *exec.Cmd
	conn net.Conn
	rd   *bufio.Reader

	wmu sync.Mutex // one frame written at a time
	mu  sync.Mutex
	id  int
	out map[int]chan cdpReply
	err error // why the read loop ended
}

type cdpReply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// ChromiumPath is the first of chromium, chromium-browser,
// google-chrome on PATH ("" if none): Debian's package is `chromium`.
func ChromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// StartBrowser starts headless Chromium on about:blank, closed at the end
// of t. It fails t when there is none (CI installs Debian's chromium).
func StartBrowser(t testing.TB) *Browser {
	t.Helper()
	bin := ChromiumPath()
	if bin == "" {
		t.Fatal("no chromium on PATH: apt-get install chromium (see .ci/run)")
	}
	dir := t.TempDir()
	cmd := exec.Command(bin, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--hide-scrollbars",
		"--window-size=1280,900", "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
		"--user-data-dir="+filepath.Join(dir, "profile"), "about:blank")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its helpers end with it
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	b := &Browser{cmd: cmd, out: map[int]chan cdpReply{}}
	t.Cleanup(b.close)
	ws := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if _, u, ok := strings.Cut(sc.Text(), "DevTools listening on "); ok {
				select {
				case ws <- strings.TrimSpace(u):
				default:
				}
			}
		}
	}()
	var browserURL string
	select {
	case browserURL = <-ws:
	case <-time.After(30 * time.Second):
		t.Fatal("chromium did not say where DevTools listens within 30 s")
	}
	u, err := url.Parse(browserURL)
	if err != nil {
		t.Fatal(err)
	}
	page, err := pageTarget(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.dial(page); err != nil {
		t.Fatal(err)
	}
	go b.readLoop()
	if _, err := b.Call("Page.enable", nil); err != nil {
		t.Fatal(err)
	}
	return b
}

// pageTarget is the WebSocket URL of the browser's first page.
func pageTarget(hostport string) (string, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + hostport + "/json/list")
		if err == nil {
			var list []struct {
				Type string `json:"type"`
				WS   string `json:"webSocketDebuggerUrl"`
			}
			err = json.NewDecoder(resp.Body).Decode(&list)
			resp.Body.Close()
			for _, p := range list {
				if p.Type == "page" && p.WS != "" {
					return p.WS, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no page target at %s: %v", hostport, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dial opens the WebSocket at raw (ws://host:port/path).
func (b *Browser) dial(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	conn, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	if err != nil {
		return err
	}
	key := make([]byte, 16)
	_, _ = rand.Read(key)
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", u.RequestURI(), u.Host, base64.StdEncoding.EncodeToString(key))
	rd := bufio.NewReader(conn)
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		conn.Close()
		return fmt.Errorf("websocket handshake: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		conn.Close()
		return fmt.Errorf("websocket handshake: %s", resp.Status)
	}
	b.conn, b.rd = conn, rd
	return nil
}

// writeText sends one masked text frame.
func (b *Browser) writeText(p []byte) error {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	hdr := []byte{0x81}
	switch n := len(p); {
	case n < 126:
		hdr = append(hdr, 0x80|byte(n))
	case n <= 0xffff:
		hdr = append(hdr, 0x80|126, byte(n>>8), byte(n))
	default:
		hdr = binary.BigEndian.AppendUint64(append(hdr, 0x80|127), uint64(n))
	}
	mask := make([]byte, 4)
	_, _ = rand.Read(mask)
	hdr = append(hdr, mask...)
	masked := make([]byte, len(p))
	for i := range p {
		masked[i] = p[i] ^ mask[i%4]
	}
	_, err := b.conn.Write(append(hdr, masked...))
	return err
}

// readMessage reads one message (text, possibly in fragments), answering
// pings.
func (b *Browser) readMessage() ([]byte, error) {
	var msg []byte
	for {
		var h [2]byte
		if _, err := io.ReadFull(b.rd, h[:]); err != nil {
			return nil, err
		}
		fin, op := h[0]&0x80 != 0, h[0]&0x0f
		n := uint64(h[1] & 0x7f)
		switch n {
		case 126:
			var x [2]byte
			if _, err := io.ReadFull(b.rd, x[:]); err != nil {
				return nil, err
			}
			n = uint64(binary.BigEndian.Uint16(x[:]))
		case 127:
			var x [8]byte
			if _, err := io.ReadFull(b.rd, x[:]); err != nil {
				return nil, err
			}
			n = binary.BigEndian.Uint64(x[:])
		}
		var mask []byte
		if h[1]&0x80 != 0 {
			mask = make([]byte, 4)
			if _, err := io.ReadFull(b.rd, mask); err != nil {
				return nil, err
			}
		}
		if n > 64<<20 {
			return nil, errors.New("websocket frame over 64 MiB")
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(b.rd, p); err != nil {
			return nil, err
		}
		if mask != nil {
			for i := range p {
				p[i] ^= mask[i%4]
			}
		}
		switch op {
		case 0x8:
			return nil, io.EOF
		case 0x9, 0xa: // ping, pong: nothing to do for DevTools
			continue
		}
		msg = append(msg, p...)
		if fin {
			return msg, nil
		}
	}
}

func (b *Browser) readLoop() {
	for {
		raw, err := b.readMessage()
		if err != nil {
			b.mu.Lock()
			b.err = err
			for id, ch := range b.out {
				close(ch)
				delete(b.out, id)
			}
			b.mu.Unlock()
			return
		}
		var m struct {
			ID int `json:"id"`
			cdpReply
		}
		if json.Unmarshal(raw, &m) != nil || m.ID == 0 {
			continue // an event
		}
		b.mu.Lock()
		ch := b.out[m.ID]
		delete(b.out, m.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- m.cdpReply
		}
	}
}

// Call sends a DevTools command and waits up to 30 s for its result.
func (b *Browser) Call(method string, params any) (json.RawMessage, error) {
	b.mu.Lock()
	if b.err != nil {
		b.mu.Unlock()
		return nil, b.err
	}
	b.id++
	id := b.id
	ch := make(chan cdpReply, 1)
	b.out[id] = ch
	b.mu.Unlock()
	msg, _ := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	if err := b.writeText(msg); err != nil {
		return nil, err
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return nil, fmt.Errorf("%s: the browser's connection ended", method)
		}
		if r.Error != nil {
			return nil, fmt.Errorf("%s: %s", method, r.Error.Message)
		}
		return r.Result, nil
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("%s: no answer within 30 s", method)
	}
}

// Navigate loads u in the page, with referrer as its Referer ("" none).
func (b *Browser) Navigate(u, referrer string) error {
	p := map[string]any{"url": u}
	if referrer != "" {
		p["referrer"] = referrer
	}
	_, err := b.Call("Page.navigate", p)
	return err
}

// Eval evaluates a JavaScript expression in the page and decodes its
// value (JSON-able) into v.
func (b *Browser) Eval(expr string, v any) error {
	raw, err := b.Call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true})
	if err != nil {
		return err
	}
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return err
	}
	if r.Exception != nil {
		return fmt.Errorf("evaluating %q: %s", expr, r.Exception.Text)
	}
	if len(r.Result.Value) == 0 {
		return json.Unmarshal([]byte("null"), v)
	}
	return json.Unmarshal(r.Result.Value, v)
}

// Screenshot saves a PNG of the page at path, making its directory.
func (b *Browser) Screenshot(path string) error {
	raw, err := b.Call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true})
	if err != nil {
		return err
	}
	var r struct {
		Data string `json:"data"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return err
	}
	png, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, png, 0o644)
}

// close ends the browser, and waits for it.
func (b *Browser) close() {
	if b.conn != nil {
		_ = b.conn.Close()
	}
	if b.cmd.Process != nil {
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL) // its process group: the renderers too
		_ = b.cmd.Wait()
	}
}

// Until reads expr every 50 ms until ok accepts its value, at most d; it
// returns how long that took and whether it did.
func (b *Browser) Until(ctx context.Context, d time.Duration, expr string, ok func(json.RawMessage) bool) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < d && ctx.Err() == nil {
		var v json.RawMessage
		if b.Eval(expr, &v) == nil && ok(v) {
			return time.Since(start), true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start), false
}
