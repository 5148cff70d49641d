package scale

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// R5l on Dicer's API, through a real Caddy: N wakeable instances on
// standby (default 10,000), each with a caddy.host of its own,
// standby_after and a published port, listed by the repository's test
// daemon (internal/dicertest, in process; not Dicer itself). On Dicer the
// daemon puts instances on standby and wakes them on a connection to a
// published port: Caddy keeps no timer for them, so this measures what
// Caddy keeps per sleeper and how it routes a wake, not an idle loop.
// Twenty of them, at random among the N, are real guests of a
// dicertest.Host (a process each, frozen on standby, woken by a
// connection to its published port after WakeDelay); the others are the
// daemon's records alone (nothing listens on their ports: Caddy only
// lists them). A measurement, not run by CI:
//
//	make build
//	CADDY_DICER_SLEEPERS=10000 go test -count=1 -timeout 30m -run TestScale_R5l_sleepers -v ./bench/scale/
//
// CADDY_DICER_SCALE_CADDY names the binaries to compare, as for
// TestScale_never_accepting_catalog. Per binary it reports Caddy's heap
// after a collection (its admin API's heap profile, gc=1) and its resident
// memory, with the 20 guests only and with all N, and the difference per
// instance; and the wake of the 20, one at a time: request to 200 less
// WakeDelay, median and max. Everything stays on loopback (127.78.0.0/16
// for the guests, published ports on 127.0.0.1).
func TestScale_R5l_sleepers(t *testing.T) {
	spec := os.Getenv("CADDY_DICER_SLEEPERS")
	if spec == "" {
		t.Skip("a measurement: set CADDY_DICER_SLEEPERS=10000 (the number of instances on standby)")
	}
	n, err := strconv.Atoi(spec)
	if err != nil || n < sleeperGuests {
		t.Fatalf("CADDY_DICER_SLEEPERS=%q: want a number of instances, at least %d", spec, sleeperGuests)
	}
	var rows []string
	for _, b := range binaries(t) {
		few := measureSleepers(t, b, n, false)
		all := measureSleepers(t, b, n, true)
		others := float64(n - sleeperGuests)
		rows = append(rows, fmt.Sprintf("| %s | %d | %.0f B | %.0f B | %s / %s | %s |", b.label, n,
			float64(all.heap-few.heap)/others, float64(all.rssKB-few.rssKB)*1024/others,
			ms(median(all.wakes)), ms(slices.Max(all.wakes)), all.listed.Round(time.Millisecond)))
		t.Log(rows[len(rows)-1])
	}
	t.Logf("\n| binary | instances on standby | Caddy heap per instance (after GC) | Caddy RSS per instance | wake: request -> 200 less WakeDelay (%s), median / max of %d | start to all listed |\n|---|---|---|---|---|---|\n%s",
		sleeperWake, sleeperGuests, strings.Join(rows, "\n"))
}

const (
	sleeperGuests = 20                     // real guests among the instances
	sleeperWake   = 200 * time.Millisecond // the Host's WakeDelay
	sleeperPort   = 8080                   // the guests' port
	guestNameEnv  = "CADDY_DICER_SCALE_GUEST_NAME"
	guestAddrEnv  = "CADDY_DICER_SCALE_GUEST_ADDR"
)

// sleepersResult is one run of measureSleepers.
type sleepersResult struct {
	heap   int64 // Caddy's HeapAlloc after a collection, bytes
	rssKB  int64
	wakes  []time.Duration // request to 200, less WakeDelay
	listed time.Duration   // Caddy's start to the catalog listing every instance
}

// TestScaleGuestProcess is not a test: it is a guest process of
// TestScale_R5l_sleepers (the helper-process pattern), and returns at once
// in a normal run.
func TestScaleGuestProcess(t *testing.T) {
	name, addr := os.Getenv(guestNameEnv), os.Getenv(guestAddrEnv)
	if name == "" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := dicertest.ServeHelloProcess(ctx, addr, name); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	os.Exit(0)
}

func guestCommand(name, addr string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestScaleGuestProcess$")
	cmd.Env = append(os.Environ(), guestNameEnv+"="+name, guestAddrEnv+"="+addr)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// measureSleepers runs binary b in front of a test daemon listing the 20
// guests on standby and, if all, the other n-20 instances on standby too;
// with all, it wakes the guests one at a time.
func measureSleepers(t *testing.T, b binary, n int, all bool) sleepersResult {
	t.Helper()
	dir := t.TempDir()
	d := dicertest.New()
	defer d.Close()
	h, err := dicertest.NewHost(d, dicertest.HostConfig{Subnet: "127.0.0.0/8", Gateway: "127.0.0.1",
		Command: guestCommand, WakeDelay: sleeperWake})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	name := func(i int) string { return fmt.Sprintf("sleeper-%05d", i) }
	host := func(i int) string { return name(i) + ".scale.test" }
	standbyAfter := durationpb.New(10 * time.Minute)
	guests := rand.New(rand.NewPCG(25, 10000)).Perm(n)[:sleeperGuests]
	isGuest := map[int]bool{}
	for k, i := range guests {
		isGuest[i] = true
		if _, err := h.Run(dicertest.InstanceSpec{Name: name(i), IP: fmt.Sprintf("127.78.0.%d", k+1), Port: sleeperPort,
			Labels:       map[string]string{"caddy.host": host(i)},
			Publish:      []*dicerpb.PortMapping{{GuestPort: sleeperPort}},
			StandbyAfter: 10 * time.Minute}); err != nil {
			t.Fatal(err)
		}
		if err := h.Standby(name(i)); err != nil {
			t.Fatal(err)
		}
	}
	if all {
		for i := range n {
			if isGuest[i] {
				continue
			}
			d.CreateInstance(&dicerpb.Instance{
				Name: name(i), Hostname: name(i), NetworkName: "default",
				Ip:           fmt.Sprintf("127.79.%d.%d", i>>8, i&0xff),
				Labels:       map[string]string{"caddy.host": host(i)},
				Ports:        []*dicerpb.PortMapping{{HostPort: uint32(20000 + i), GuestPort: sleeperPort, Protocol: dicerpb.Protocol_PROTOCOL_TCP}},
				State:        dicerpb.InstanceState_INSTANCE_STATE_STANDBY,
				StandbyAfter: standbyAfter,
			})
		}
	}
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
`, adminPort, logFile, httpPort, sock, sleeperPort))
	start, pid, stop := startCaddy(t, b.path, config, dir)
	defer stop()
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer client.CloseIdleConnections()

	want := sleeperGuests
	if all {
		want = n
	}
	var r sleepersResult
	deadline := start.Add(5 * time.Minute)
	for standbyCount(client, adminPort) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: Caddy's catalog does not list %d instances on standby 5 minutes after its start; log:\n%s", b.label, want, tail(logFile))
		}
		time.Sleep(50 * time.Millisecond) // poll the condition
	}
	r.listed = time.Since(start)
	time.Sleep(2 * time.Second)     // let the listing's garbage go before the figures
	heapAlloc(t, client, adminPort) // a first collection
	r.heap = heapAlloc(t, client, adminPort)
	r.rssKB, _ = memory(t, pid)
	t.Logf("%s, %d instances: all listed %s after Caddy's start; heap %d KB, RSS %d KB", b.label, want,
		r.listed.Round(time.Millisecond), r.heap/1024, r.rssKB)
	if !all {
		return r
	}
	for _, i := range guests {
		if s := h.State(name(i)); s != dicerpb.InstanceState_INSTANCE_STATE_STANDBY {
			t.Fatalf("%s is %s before its wake, want on standby", name(i), dicertest.StateName(s))
		}
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/", httpPort), nil)
		req.Host = host(i)
		sent := time.Now()
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: wake of %s: %v; log:\n%s", b.label, name(i), err, tail(logFile))
		}
		body, _ := readAll(res)
		took := time.Since(sent)
		if res.StatusCode != http.StatusOK || body != dicertest.HelloBody(name(i)) {
			t.Fatalf("%s: wake of %s: %d %q", b.label, name(i), res.StatusCode, body)
		}
		if s := h.State(name(i)); s != dicerpb.InstanceState_INSTANCE_STATE_RUNNING {
			t.Errorf("%s is %s after its wake, want running", name(i), dicertest.StateName(s))
		}
		r.wakes = append(r.wakes, took-sleeperWake)
	}
	t.Logf("%s: wakes less WakeDelay %v", b.label, r.wakes)
	return r
}

// standbyCount is the number of instances Caddy's admin API lists on
// standby, -1 if unknown.
func standbyCount(client *http.Client, adminPort int) int {
	res, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/dicer/instances", adminPort))
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	var list []struct {
		State string `json:"state"`
	}
	if err := json.NewDecoder(res.Body).Decode(&list); err != nil {
		return -1
	}
	k := 0
	for _, s := range list {
		if s.State == "standby" {
			k++
		}
	}
	return k
}

// heapAlloc is Caddy's HeapAlloc after a collection, as its admin API's
// heap profile reports it.
func heapAlloc(t *testing.T, client *http.Client, adminPort int) int64 {
	t.Helper()
	res, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap?debug=1&gc=1", adminPort))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no HeapAlloc in Caddy's heap profile")
	return 0
}

func readAll(res *http.Response) (string, error) {
	defer res.Body.Close()
	var sb strings.Builder
	_, err := bufio.NewReader(res.Body).WriteTo(&sb)
	return sb.String(), err
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return (s[len(s)/2] + s[(len(s)-1)/2]) / 2
}
