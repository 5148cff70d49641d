//go:build e2e && linux

package e2e

// Real Dicer mode: with DICER_ADDRESS and DICER_TOKEN set, the scenarios run
// against that daemon instead of the simulator. Our API subset has no
// CreateInstance, so instances are made with the dicer CLI; everything
// about the CLI here is an assumption taken from Dicer's docs, not verified
// against a daemon (see README.md). This mode cannot run without KVM and was
// not run by the suite's authors.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
)

// realDicer reports whether the suite targets a real daemon.
func realDicer() bool {
	return os.Getenv("DICER_ADDRESS") != "" && os.Getenv("DICER_TOKEN") != ""
}

// checkRealDicer checks what real Dicer mode needs before building Caddy.
func checkRealDicer() error {
	if os.Getenv("DICER_IMAGE") == "" {
		return errors.New("real Dicer mode needs DICER_IMAGE: an image serving HTTP on port 8080 that answers \"hello from $" + envHelloName + "\" (see e2e/README.md)")
	}
	if _, err := exec.LookPath(dicerCLI()); err != nil {
		return fmt.Errorf("real Dicer mode needs the dicer CLI (DICER_CLI, default dicer): %w", err)
	}
	return nil
}

func dicerCLI() string { return envOr("DICER_CLI", "dicer") }

// realHost drives a real Dicer daemon: the dicer CLI for changes, our gRPC
// client with DICER_TOKEN for reads. The CLI must reach the same daemon as
// DICER_ADDRESS (its local socket by default, or DICER_REMOTE). Instances
// are named cde2e-<run>-<name> and labelled cde2e.run=<run>, and deleted
// when the test ends.
type realHost struct {
	api   dicerpb.DaemonServiceClient
	runID string

	mu    sync.Mutex
	ports map[string]int
}

var (
	realOnce sync.Once
	realAPI  dicerpb.DaemonServiceClient
	realErr  error
)

func newRealHost(t *testing.T) dicerHost {
	t.Helper()
	realOnce.Do(func() {
		var conn *grpc.ClientConn
		conn, realErr = dialDaemon(os.Getenv("DICER_ADDRESS"), os.Getenv("DICER_TOKEN"))
		if realErr == nil {
			realAPI = dicerpb.NewDaemonServiceClient(conn)
		}
	})
	if realErr != nil {
		t.Fatal(realErr)
	}
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	return &realHost{api: realAPI, runID: hex.EncodeToString(id), ports: map[string]int{}}
}

// dialDaemon connects as the plugin does: plaintext on a unix socket,
// otherwise TLS pinned to the token's fingerprint with the token as a
// bearer credential.
func dialDaemon(address, token string) (*grpc.ClientConn, error) {
	if strings.HasPrefix(address, "unix") {
		return grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13}
	if i := strings.LastIndexByte(token, '_'); i > 0 && len(token)-i-1 == 64 && strings.Count(token, "_") == 2 {
		want := token[i+1:]
		cfg.InsecureSkipVerify = true // replaced by the fingerprint check
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no daemon certificate")
			}
			sum := sha256.Sum256(cs.PeerCertificates[0].RawSubjectPublicKeyInfo)
			if got := hex.EncodeToString(sum[:]); got != want {
				return fmt.Errorf("daemon fingerprint %s does not match the token's %s", got, want)
			}
			return nil
		}
	}
	return grpc.NewClient(address,
		grpc.WithTransportCredentials(credentials.NewTLS(cfg)),
		grpc.WithPerRPCCredentials(bearer("Bearer "+strings.TrimSpace(token))))
}

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }

// cli runs the dicer CLI, in this process's environment.
func (r *realHost) cli(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(dicerCLI(), args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dicer %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (r *realHost) settings() string {
	return "address {env.DICER_ADDRESS}\ntoken {env.DICER_TOKEN}"
}

func (r *realHost) tcpListener(*testing.T) (string, string) {
	return os.Getenv("DICER_ADDRESS"), os.Getenv("DICER_TOKEN")
}

func (r *realHost) selector(sel string) string { return sel + ",cde2e.run=" + r.runID }

func (r *realHost) instanceName(short string) string { return "cde2e-" + r.runID + "-" + short }

// run: dicer run -d --name N --label K=V... --env CADDY_DICER_E2E_HELLO_NAME=N
// [--network $DICER_NETWORK] [--publish P:8080] [--standby-after D] $DICER_IMAGE
func (r *realHost) run(t *testing.T, in instance) string {
	t.Helper()
	name := r.instanceName(in.name)
	args := []string{"run", "-d", "--name", name, "--label", "cde2e.run=" + r.runID, "--env", envHelloName + "=" + name}
	keys := make([]string, 0, len(in.labels))
	for k := range in.labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "--label", k+"="+in.labels[k])
	}
	if n := os.Getenv("DICER_NETWORK"); n != "" {
		args = append(args, "--network", n)
	}
	if in.publish {
		port := freeTCPPort(t)
		r.mu.Lock()
		r.ports[name] = port
		r.mu.Unlock()
		args = append(args, "--publish", fmt.Sprintf("%d:%d", port, guestPort))
	}
	if in.standbyAfter > 0 {
		args = append(args, "--standby-after", in.standbyAfter.String())
	}
	args = append(args, os.Getenv("DICER_IMAGE"))
	t.Cleanup(func() { _ = exec.Command(dicerCLI(), "rm", "--force", name).Run() })
	r.cli(t, args...)
	r.waitServing(t, name)
	return name
}

// waitServing waits until the instance runs and its service accepts
// connections on its address (guests take a while to boot).
func (r *realHost) waitServing(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		inst, err := r.api.GetInstance(context.Background(), &dicerpb.GetInstanceRequest{Name: name})
		if err == nil && inst.GetState() == dicerpb.InstanceState_INSTANCE_STATE_RUNNING && inst.GetIp() != "" {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(inst.GetIp(), strconv.Itoa(guestPort)), time.Second)
			if err == nil {
				c.Close()
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance %s not serving within 3m (last: %v, %v)", name, inst.GetState(), err)
		}
		time.Sleep(time.Second)
	}
}

func (r *realHost) stop(t *testing.T, name string) { t.Helper(); r.cli(t, "stop", name) }

func (r *realHost) start(t *testing.T, name string) {
	t.Helper()
	r.cli(t, "start", name)
	r.waitServing(t, name)
}

func (r *realHost) pause(t *testing.T, name string)  { t.Helper(); r.cli(t, "pause", name) }
func (r *realHost) resume(t *testing.T, name string) { t.Helper(); r.cli(t, "resume", name) }
func (r *realHost) remove(t *testing.T, name string) { t.Helper(); r.cli(t, "rm", "--force", name) }

// standby: an instance with standby_after is left idle until the daemon
// puts it on standby itself (its idle rule samples once a minute, so this
// takes standby_after plus a minute or two); one without is put there by
// hand with `dicer standby`.
func (r *realHost) standby(t *testing.T, name string) {
	t.Helper()
	inst, err := r.api.GetInstance(context.Background(), &dicerpb.GetInstanceRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if inst.GetStandbyAfter() == nil {
		r.cli(t, "standby", name)
		return
	}
	limit := inst.GetStandbyAfter().AsDuration() + 4*time.Minute
	deadline := time.Now().Add(limit)
	for r.state(t, name) != dicerpb.InstanceState_INSTANCE_STATE_STANDBY {
		if time.Now().After(deadline) {
			t.Fatalf("instance %s not on standby within %s", name, limit)
		}
		time.Sleep(5 * time.Second)
	}
}

func (r *realHost) state(t *testing.T, name string) dicerpb.InstanceState {
	t.Helper()
	inst, err := r.api.GetInstance(context.Background(), &dicerpb.GetInstanceRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return inst.GetState()
}

func (r *realHost) events(t *testing.T, name string) []*dicerpb.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := r.api.GetEvents(ctx, &dicerpb.GetEventsRequest{Kind: dicerpb.EventKind_EVENT_KIND_INSTANCE, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	var out []*dicerpb.Event
	for {
		res, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, res.GetEvents()...)
	}
}

func (r *realHost) hostPort(t *testing.T, name string) int {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.ports[name]
	if !ok {
		t.Fatalf("instance %s publishes no port", name)
	}
	return p
}
