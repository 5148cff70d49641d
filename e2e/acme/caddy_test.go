//go:build e2e && linux

package acme

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

const (
	httpsAddr = "127.0.0.1:443"
	adminAddr = "127.0.0.1:2019"
)

// setup is what a test runs Caddy against: the Engine (its containers,
// reached over veth links into their network stacks) and a Dicer test
// daemon on a unix socket (its instances, hello servers on loopback).
type setup struct {
	t     *testing.T
	cli   *client.Client
	dicer *dicertest.Daemon
	sock  string
	tag   string // unique per test: in every host name
	log   string // Caddy's JSON log
}

func newSetup(t *testing.T) *setup {
	t.Helper()
	s := &setup{t: t, cli: dockertest.Client(t), dicer: dicertest.New(), tag: randomHex(4)}
	t.Cleanup(s.dicer.Close)
	s.sock = filepath.Join(t.TempDir(), "dicer.sock")
	if err := s.dicer.ServeUnix(s.sock); err != nil {
		t.Fatal(err)
	}
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// host is a name unique to the test: <what>-<tag>.test.
func (s *setup) host(what string) string { return what + "-" + s.tag + ".test" }

// options of one Caddy.
type options struct {
	disable       string // "http" or "tlsalpn": the challenge turned off
	obtainOnClaim bool
}

// startCaddy runs the xcaddy-built Caddy on a config with on-demand TLS
// from Pebble, `permission daemons` over the Engine (only this run's
// containers) and the Dicer daemon, and a route `dynamic multi` by
// caddy.host over both; it is stopped when the test ends.
func (s *setup) startCaddy(o options) {
	t := s.t
	t.Helper()
	dir := t.TempDir()
	s.log = filepath.Join(dir, "caddy.log")
	disable := ""
	switch o.disable {
	case "http":
		disable = "disable_http_challenge"
	case "tlsalpn":
		disable = "disable_tlsalpn_challenge"
	}
	obtain := ""
	if o.obtainOnClaim {
		obtain = "obtain_on_claim"
	}
	sel := dockertest.RunLabel + "=" + dockertest.RunID()
	config := fmt.Sprintf(`{
	admin %[1]s
	http_port 80
	https_port 443
	grace_period 1ns
	skip_install_trust
	storage file_system %[2]s/storage
	ocsp_stapling off
	# Pebble's certificates live 45 s; certmagic renews at once any with
	# less than 5 renew_intervals left (10 min by default), so every
	# handshake would order again. 1 s: renewal in the last third, as
	# with real lifetimes (on-demand ones are skipped by maintenance).
	renew_interval 1s
	cert_issuer acme {
		dir %[7]s
		trusted_roots %[8]s
		email acme-test@example.org
		%[9]s
	}
	log {
		output file %[3]s {
			roll_disabled
		}
		format json
		level DEBUG
	}
	on_demand_tls {
		permission daemons {
			docker {
				selector %[4]s
				%[5]s
			}
			dicer {
				address unix:%[6]s
				%[5]s
			}
		}
	}
}

https:// {
	tls {
		on_demand
	}
	reverse_proxy {
		dynamic multi {
			docker {
			}
			dicer {
				address unix:%[6]s
			}
		}
	}
}
`, adminAddr, dir, s.log, sel, obtain, s.sock, directory, ca.httpsRoot, disable)
	file := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(caddyBin, "run", "--config", file, "--adapter", "caddyfile")
	out, err := os.Create(filepath.Join(dir, "caddy.out"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		list, _ := instancesListed() // before Caddy stops
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		out.Close()
		if t.Failed() {
			t.Logf("Caddy's instances (/dicer/instances):\n%s", list)
			b, _ := os.ReadFile(filepath.Join(dir, "caddy.out"))
			t.Logf("Caddy's output:\n%s", b)
			t.Logf("Caddy's log (last 60 lines):\n%s", tail(s.log, 60))
			t.Logf("Pebble's log (last 30 lines):\n%s", tail(ca.logFile, 30))
		}
	})
	testkit.Eventually(t, 30*time.Second, "Caddy serving (its admin API answering)", func() bool {
		select {
		case <-exited:
			t.Fatalf("Caddy exited:\n%s", readFile(filepath.Join(dir, "caddy.out")))
		default:
		}
		resp, err := http.Get("http://" + adminAddr + "/dicer/daemons")
		if err != nil {
			return false
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false
		}
		c, err := net.DialTimeout("tcp", httpsAddr, time.Second) // the admin API starts before the apps
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

func readFile(p string) string { b, _ := os.ReadFile(p); return string(b) }

func tail(p string, n int) string { return tailString(readFile(p), n) }

func tailString(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// container starts a test container claiming host and links its network
// stack to this namespace: a veth pair, one end moved into the
// container's namespace, and a /32 route each way, so that Caddy reaches
// the container's own address (on the Engine's bridge) and nothing else.
var vethSeq atomic.Int32

func (s *setup) container(name, host string) dockertest.Container {
	t := s.t
	t.Helper()
	// caddy.port: the image exposes 8080 but publishes nothing, and R3
	// routes an instance with no port label and no published port nowhere
	// (the 503 of earlier runs).
	c := dockertest.Start(t, s.cli, dockertest.Options{Name: s.tag + "-" + name, Labels: map[string]string{"caddy.host": host, "caddy.port": "8080", outerLabel: os.Getenv(envOuter)}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := s.cli.ContainerInspect(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	addr := ""
	for _, ep := range info.NetworkSettings.Networks {
		if ep != nil && ep.IPAddress != "" {
			addr = ep.IPAddress
		}
	}
	if addr == "" || info.State == nil || info.State.Pid == 0 {
		t.Fatalf("container %s: no address or no process (%q, pid %v)", c.Name, addr, info.State)
	}
	n := vethSeq.Add(1)
	ours, theirs := fmt.Sprintf("vacme%d", n), fmt.Sprintf("vacmec%d", n)
	local := fmt.Sprintf("10.213.201.%d", n)
	netns := fmt.Sprintf("/proc/%d/ns/net", info.State.Pid)
	steps := [][]string{
		{"ip", "link", "add", ours, "type", "veth", "peer", "name", theirs},
		{"ip", "link", "set", theirs, "netns", strconv.Itoa(info.State.Pid)},
		{"ip", "addr", "add", local + "/32", "dev", ours},
		{"ip", "link", "set", ours, "up"},
		{"ip", "route", "add", addr + "/32", "dev", ours, "src", local},
		{"nsenter", "--net=" + netns, "ip", "link", "set", theirs, "up"},
		{"nsenter", "--net=" + netns, "ip", "route", "add", local + "/32", "dev", theirs},
	}
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", ours).Run() })
	for _, st := range steps {
		if out, err := exec.Command(st[0], st[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("linking container %s: %s: %v: %s", c.Name, strings.Join(st, " "), err, out)
		}
	}
	s.waitListed(host)
	return c
}

// instance creates a running Dicer instance claiming host, served by a
// hello server on its own loopback address.
func (s *setup) instance(name, ip, host string) {
	t := s.t
	t.Helper()
	addr, stop, err := dicertest.ListenHello(ip+":0", name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	_, port, _ := net.SplitHostPort(addr)
	s.dicer.CreateInstance(&dicerpb.Instance{
		Name: name, Ip: ip, NetworkName: "default",
		Labels: map[string]string{"caddy.host": host, "caddy.port": port},
		State:  dicerpb.InstanceState_INSTANCE_STATE_RUNNING,
	})
	s.waitListed(host)
}

// waitListed waits until Caddy lists an instance claiming host as
// routable (admin API): a request sent before it knows the claim is
// refused a certificate, and before the instance is ready (R1a: a
// container's port is probed through the link, made after it started)
// answers 503, both rightly.
func (s *setup) waitListed(host string) {
	s.t.Helper()
	testkit.Eventually(s.t, 20*time.Second, "Caddy lists the instance claiming "+host+" as routable", func() bool {
		list, err := instancesListed()
		if err != nil {
			return false
		}
		var insts []struct {
			Labels   map[string]string `json:"labels"`
			Routable bool              `json:"routable"`
		}
		if json.Unmarshal([]byte(list), &insts) != nil {
			return false
		}
		for _, in := range insts {
			if in.Labels["caddy.host"] == host && in.Routable {
				return true
			}
		}
		return false
	})
}

// get sends one HTTPS request for host to Caddy, verifying the
// certificate against Pebble's root, and returns status, body, the time
// it took and the certificate served.
func get(host string, timeout time.Duration) (int, string, time.Duration, *x509.Certificate, error) {
	client := testkit.HTTPSClient(httpsAddr, ca.issueRoots, timeout)
	defer client.CloseIdleConnections()
	start := time.Now()
	resp, err := client.Get("https://" + host + "/")
	if err != nil {
		return 0, "", time.Since(start), nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	var leaf *x509.Certificate
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		leaf = resp.TLS.PeerCertificates[0]
	}
	return resp.StatusCode, string(body), took, leaf, err
}

// handshake completes a TLS handshake for name, verified against Pebble's
// root, and returns the certificate.
func handshake(name string) (*x509.Certificate, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return testkit.Handshake(ctx, httpsAddr, name, ca.issueRoots)
}

// logEntries returns the entries of Caddy's JSON log whose message is msg.
func (s *setup) logEntries(msg string) []map[string]any {
	f, err := os.Open(s.log)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if !strings.Contains(sc.Text(), msg) {
			continue
		}
		var e map[string]any
		if json.Unmarshal(sc.Bytes(), &e) == nil && e["msg"] == msg {
			out = append(out, e)
		}
	}
	return out
}

// logged returns the entries with message msg whose field key is value.
func (s *setup) logged(msg, key, value string) []map[string]any {
	var out []map[string]any
	for _, e := range s.logEntries(msg) {
		if v, _ := e[key].(string); v == value {
			out = append(out, e)
		}
	}
	return out
}

// instances lists the names of the instances Caddy follows (admin API).
func instancesListed() (string, error) {
	resp, err := http.Get("http://" + adminAddr + "/dicer/instances")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
