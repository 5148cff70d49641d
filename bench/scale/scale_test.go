// Package scale measures what a catalog full of instances that never
// accept costs through a real Caddy (R1b): the repository's test daemon
// (internal/dicertest, in process) lists N running instances whose port
// refuses (a crash-looping app, a wrong port, a tenant's doing) and one
// that answers; then instances that answer appear by event. It is a
// measurement, not run by CI:
//
//	make build
//	CADDY_DICER_P5=1 go test -count=1 -timeout 60m -v ./bench/scale/
//
// CADDY_DICER_SCALE_LOGS, if set, is a folder to keep Caddy's logs in
// (its standard error too: GODEBUG=gctrace=1 shows the heap at each
// collection).
// CADDY_DICER_SCALE_HEAP, if set, is a folder to keep Caddy's heap
// profiles in (heap-LABEL-N.pb.gz, after a collection, once every verdict
// is in): `go tool pprof -top -sample_index=inuse_space` reads them.
// CADDY_DICER_SCALE_CADDY names the Caddy binaries to compare in one run,
// as label=path pairs separated by commas (default: this=bin/caddy), e.g.
// base=/tmp/base/bin/caddy,this=bin/caddy; CADDY_DICER_SCALE_N the
// catalog sizes (default 10000,50000). It reports, per binary and size:
// the time from Caddy's start to its first routed request (to the
// instance that answers), the time from each of 20 instance-created events
// (one every 250 ms from then on, each instance listening before its
// event) to the first request routed to it, p50 and p99 (of 20), and the
// same for 10 events once every never-accepting instance has had its
// readiness verdict; Caddy's resident memory per instance (current and
// peak, over a run with no instance), its goroutines, its CPU time and its
// warnings.
// Everything stays on loopback (127.77.0.0/16 and 127.80.0.0/14).
package scale

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

const (
	events        = 20                     // events during the first seconds
	eventSpacing  = 250 * time.Millisecond // between two of them
	steadyEvents  = 10                     // events once every verdict is in
	verdictWindow = 90 * time.Second       // longest wait for the verdicts
	warningText   = `"msg":"instance did not accept a connection in time`
	returnedText  = `"msg":"returned the first listing's memory to the operating system"`
	returnWindow  = 5 * time.Second // longest wait for it, after the steady events
)

// binary is one Caddy build under test.
type binary struct{ label, path string }

// result is one run: one binary, one catalog size.
type result struct {
	n                   int
	firstRouting        time.Duration
	early, steady       []time.Duration
	rssKB, hwmKB        int64 // the RSS at the first events (the most of both readings before 2026-12-07's second pass), the peak
	settledKB           int64 // the RSS once every verdict is in and the steady events routed (after the burst's memory is returned, if it is)
	cpu                 time.Duration
	warnings, verdicted int
	goroutines          int // the most Caddy ran at one of the first events
}

func TestScale_never_accepting_catalog(t *testing.T) {
	if os.Getenv("CADDY_DICER_P5") == "" {
		t.Skip("a measurement: set CADDY_DICER_P5=1")
	}
	bins := binaries(t)
	sizes := catalogSizes(t)
	base := map[string]result{}
	for _, b := range bins {
		base[b.label] = measure(t, b, 0)
		t.Logf("%-6s n=0: first routing %s, RSS %d KB settled, %d KB at the first events (peak %d KB)", b.label, base[b.label].firstRouting.Round(time.Millisecond), base[b.label].settledKB, base[b.label].rssKB, base[b.label].hwmKB)
	}
	var table []string
	for _, n := range sizes {
		for _, b := range bins {
			r := measure(t, b, n)
			row := fmt.Sprintf("| %s | %d | %s | %s / %s | %s / %s | %.1f KB / %.1f KB / %.1f KB | %d | %.1f s | %d |",
				b.label, n, r.firstRouting.Round(time.Millisecond),
				ms(pct(r.early, 50)), ms(pct(r.early, 99)), ms(pct(r.steady, 50)), ms(pct(r.steady, 99)),
				float64(r.settledKB-base[b.label].settledKB)/float64(n),
				float64(r.rssKB-base[b.label].rssKB)/float64(n), float64(r.hwmKB-base[b.label].hwmKB)/float64(n),
				r.goroutines, r.cpu.Seconds(), r.warnings)
			t.Log(row)
			table = append(table, row)
		}
	}
	t.Log("\n| binary | never-accepting instances | start to first routed request | event to first routed request, first 5 s, p50 / p99 of 20 | same once every verdict is in, p50 / p99 of 10 | Caddy RSS per instance, settled / at the first events / peak | Caddy goroutines, most at an event of the first 5 s | Caddy CPU | readiness warnings |\n|---|---|---|---|---|---|---|---|---|\n" +
		strings.Join(table, "\n"))
}

// binaries reads CADDY_DICER_SCALE_CADDY.
func binaries(t *testing.T) []binary {
	spec := os.Getenv("CADDY_DICER_SCALE_CADDY")
	if spec == "" {
		spec = "this=../../bin/caddy"
	}
	var out []binary
	for _, part := range strings.Split(spec, ",") {
		label, path, ok := strings.Cut(part, "=")
		if !ok {
			t.Fatalf("CADDY_DICER_SCALE_CADDY: %q is not label=path", part)
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(abs); err != nil {
			t.Fatalf("Caddy binary %s: %v (run make build)", label, err)
		}
		out = append(out, binary{label, abs})
	}
	return out
}

// catalogSizes reads CADDY_DICER_SCALE_N.
func catalogSizes(t *testing.T) []int {
	spec := os.Getenv("CADDY_DICER_SCALE_N")
	if spec == "" {
		spec = "10000,50000"
	}
	var out []int
	for _, s := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("CADDY_DICER_SCALE_N: %q is not a positive number", s)
		}
		out = append(out, n)
	}
	return out
}

// measure runs one Caddy binary in front of a test daemon holding n
// never-accepting instances.
func measure(t *testing.T, b binary, n int) result {
	t.Helper()
	dir := t.TempDir()
	port := testkit.FreePort(t, "127.77.0.1")
	d := dicertest.New()
	defer d.Close()
	for i := range n {
		d.CreateInstance(&dicerpb.Instance{
			Name: fmt.Sprintf("never-%05d", i), Hostname: fmt.Sprintf("never-%05d", i),
			Labels: map[string]string{"caddy.host": fmt.Sprintf("never-%05d.scale.test", i)},
			Ip:     neverIP(i), State: dicerpb.InstanceState_INSTANCE_STATE_RUNNING,
		})
	}
	serve(t, d, "ready-0", "127.77.0.2", port)
	sock := filepath.Join(dir, "dicer.sock")
	if err := d.ServeUnix(sock); err != nil {
		t.Fatal(err)
	}

	httpPort, adminPort := testkit.FreePort(t, "127.0.0.1"), testkit.FreePort(t, "127.0.0.1")
	config := filepath.Join(dir, "Caddyfile")
	logFile := filepath.Join(dir, "caddy.log")
	writeFile(t, config, fmt.Sprintf(`{
	admin 127.0.0.1:%d
	auto_https off
	log {
		output file %s
	}
}

http://:%d {
	bind 127.0.0.1
	reverse_proxy {
		dynamic dicer {
			address unix:%s
			port %d
		}
	}
}
`, adminPort, logFile, httpPort, sock, port))
	start, pid, stop := startCaddy(t, b.path, config, dir)
	defer stop()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	url := fmt.Sprintf("http://127.0.0.1:%d/", httpPort)

	var r result
	r.n = n
	first, ok := untilRouted(client, url, "ready-0.scale.test", start, 5*time.Minute)
	if !ok {
		t.Fatalf("%s n=%d: ready-0 not routed within 5 minutes of Caddy's start; log:\n%s", b.label, n, tail(logFile))
	}
	r.firstRouting = first
	routedAt := start.Add(first)

	event := func(name, ip string) time.Duration {
		serve(t, d, name, ip, port)
		sent := time.Now()
		d.CreateInstance(&dicerpb.Instance{
			Name: name, Hostname: name, Labels: map[string]string{"caddy.host": name + ".scale.test"},
			Ip: ip, State: dicerpb.InstanceState_INSTANCE_STATE_RUNNING,
		})
		took, ok := untilRouted(client, url, name+".scale.test", sent, time.Minute)
		if !ok {
			t.Fatalf("%s n=%d: %s not routed within a minute of its event; log:\n%s", b.label, n, name, tail(logFile))
		}
		return took
	}
	for i := range events {
		time.Sleep(time.Until(routedAt.Add(time.Duration(i) * eventSpacing))) // the schedule of the events
		r.early = append(r.early, event(fmt.Sprintf("early-%02d", i), fmt.Sprintf("127.77.1.%d", i+1)))
		r.goroutines = max(r.goroutines, goroutines(client, adminPort))
	}
	r.rssKB, r.hwmKB = memory(t, pid)
	// Every never-accepting instance gets its verdict after
	// readiness_timeout (5 s): wait for them all to be routable.
	deadline := time.Now().Add(verdictWindow)
	for r.verdicted = routable(client, adminPort); r.verdicted < n+1+events && time.Now().Before(deadline); r.verdicted = routable(client, adminPort) {
		time.Sleep(100 * time.Millisecond) // poll the condition
	}
	for i := range steadyEvents {
		r.steady = append(r.steady, event(fmt.Sprintf("steady-%02d", i), fmt.Sprintf("127.77.2.%d", i+1)))
	}
	// A build that returns the burst's memory says so once in its log,
	// after the last verdict: wait for that line (a build that does not
	// never writes it), then read the RSS it left.
	for deadline := time.Now().Add(returnWindow); count(logFile, returnedText) == 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond) // poll the condition
	}
	var hwm int64
	r.settledKB, hwm = memory(t, pid)
	r.hwmKB = max(r.hwmKB, hwm)
	r.cpu = cpuTime(t, pid)
	if keep := os.Getenv("CADDY_DICER_SCALE_HEAP"); keep != "" {
		saveHeap(t, client, adminPort, filepath.Join(keep, fmt.Sprintf("heap-%s-%d.pb.gz", b.label, n)))
	}
	r.warnings = count(logFile, warningText)
	if keep := os.Getenv("CADDY_DICER_SCALE_LOGS"); keep != "" {
		data, _ := os.ReadFile(logFile)
		writeFile(t, filepath.Join(keep, fmt.Sprintf("caddy-%s-%d.log", b.label, n)), string(data))
		data, _ = os.ReadFile(filepath.Join(dir, "stderr"))
		writeFile(t, filepath.Join(keep, fmt.Sprintf("caddy-%s-%d.stderr", b.label, n)), string(data))
	}
	t.Logf("%s n=%d: events %v", b.label, n, r.early)
	t.Logf("%s n=%d: first routing %s; events p50 %s p99 %s; steady p50 %s p99 %s; %d routable; RSS %d KB settled, %d KB at the first events, peak %d KB; CPU %s; %d warnings",
		b.label, n, first.Round(time.Millisecond), ms(pct(r.early, 50)), ms(pct(r.early, 99)),
		ms(pct(r.steady, 50)), ms(pct(r.steady, 99)), r.verdicted, r.settledKB, r.rssKB, r.hwmKB, r.cpu.Round(10*time.Millisecond), r.warnings)
	return r
}

// neverIP is the address of never-accepting instance i: nothing listens
// there, so the kernel refuses.
func neverIP(i int) string {
	return fmt.Sprintf("127.%d.%d.%d", 80+i>>16, (i>>8)&0xff, i&0xff)
}

// serve starts the hello server of an instance that listens before its
// event.
func serve(t *testing.T, d *dicertest.Daemon, name, ip string, port int) {
	t.Helper()
	stop, err := dicertest.ServeHello(net.JoinHostPort(ip, strconv.Itoa(port)), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	if name == "ready-0" {
		d.CreateInstance(&dicerpb.Instance{
			Name: name, Hostname: name, Labels: map[string]string{"caddy.host": name + ".scale.test"},
			Ip: ip, State: dicerpb.InstanceState_INSTANCE_STATE_RUNNING,
		})
	}
}

// untilRouted asks Caddy for host, name.scale.test, until the instance
// name answers (200 with its hello: a route that matched nothing answers
// an empty 200), and returns the time from since until then.
func untilRouted(client *http.Client, url, host string, since time.Time, limit time.Duration) (time.Duration, bool) {
	want := "hello from " + strings.TrimSuffix(host, ".scale.test") + "\n"
	deadline := since.Add(limit)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Host = host
		res, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(res.Body, 1<<10))
			res.Body.Close()
			if res.StatusCode == http.StatusOK && string(body) == want {
				return time.Since(since), true
			}
		}
		time.Sleep(200 * time.Microsecond) // poll the condition
	}
	return 0, false
}

// routable is the number of routable instances Caddy's admin API reports
// (caddy_dicer_routable_instances).
func routable(client *http.Client, adminPort int) int {
	res, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", adminPort))
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "caddy_dicer_routable_instances{") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			return int(v)
		}
	}
	return -1
}

// goroutines is the number of goroutines Caddy runs (its admin API's
// pprof endpoint), -1 if unknown.
func goroutines(client *http.Client, adminPort int) int {
	res, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/goroutine?debug=1", adminPort))
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	line, _ := bufio.NewReader(res.Body).ReadString('\n') // "goroutine profile: total N"
	n, err := strconv.Atoi(strings.TrimSpace(line[strings.LastIndexByte(line, ' ')+1:]))
	if err != nil {
		return -1
	}
	return n
}

// saveHeap writes Caddy's heap profile (its admin API's pprof endpoint,
// after a collection) to path.
func saveHeap(t *testing.T, client *http.Client, adminPort int, path string) {
	t.Helper()
	res, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap?gc=1", adminPort))
	if err != nil {
		t.Errorf("heap profile: %v", err)
		return
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Errorf("heap profile: %v (status %d)", err, res.StatusCode)
		return
	}
	writeFile(t, path, string(data))
	if res, err = client.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap?debug=1", adminPort)); err == nil {
		data, _ = io.ReadAll(res.Body)
		res.Body.Close()
		writeFile(t, strings.TrimSuffix(path, ".pb.gz")+".txt", string(data)) // with the runtime's MemStats
	}
}

// memory is the process's resident memory now and at its peak, in KB.
func memory(t *testing.T, pid int) (rss, hwm int64) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = v
		case "VmHWM:":
			hwm = v
		}
	}
	return rss, hwm
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command (which may hold spaces) in parentheses.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

func count(file, text string) int {
	data, _ := os.ReadFile(file)
	return strings.Count(string(data), text)
}

func tail(file string) string {
	data, _ := os.ReadFile(file)
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// pct is the p-th percentile of ds (nearest rank).
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// startCaddy runs binary on the Caddyfile config with its home in dir,
// and returns when it started, its process ID, and stop, which ends it
// (SIGTERM, then a kill after 30 s) and waits for it.
func startCaddy(t *testing.T, binary, config, dir string) (start time.Time, pid int, stop func()) {
	t.Helper()
	cmd := exec.Command(binary, "run", "--config", config, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
	if stderr, err := os.Create(filepath.Join(dir, "stderr")); err == nil { // GODEBUG=gctrace=1 writes there
		defer stderr.Close()
		cmd.Stderr = stderr
	}
	start = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return start, cmd.Process.Pid, func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
}
