//go:build e2e && linux

// Package layer4 is the end-to-end test of the layer-4 handler
// (`dicer_proxy`, R14): Caddy built with xcaddy, caddy-l4 and this
// checkout's plugin and layer4 package, as the docs tell users to build
// it, running on this machine against the real Docker Engine: containers
// of the test image (HTTP over TCP) and of a Redis image built here from
// Debian's redis-server package (nothing is pulled).
package layer4

import (
	"archive/tar"
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
)

const module = "github.com/caddy-dicer/caddy-dicer"

// The run's shared fixture, set before m.Run.
var (
	cli        *client.Client
	caddyBin   string
	redisImage string // "" when redis-server is not installed here
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e/layer4: skipped under -short: needs the Docker Engine and the network to build Caddy; run make test-e2e")
		os.Exit(0)
	}
	// Every container its Caddys see is made by dockertest (the images by
	// docker import; containers only by dockertest.Start): they follow
	// this run's only (R2g).
	dockertest.FollowRun()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if cli, err = dockertest.NewClient(); err != nil {
		fmt.Fprintf(os.Stderr, "FATAL: e2e/layer4: no Engine client: %v\n", err)
		return 1
	}
	defer cli.Close()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := dockertest.Cleanup(ctx, cli); err != nil {
			fmt.Fprintf(os.Stderr, "e2e/layer4: cleanup: %v\n", err)
		}
		if redisImage != "" {
			_, _ = dockertest.Docker(time.Minute, "rmi", "-f", redisImage)
		}
	}()
	dir, err := os.MkdirTemp("", "cdl4-build")
	if err != nil {
		fmt.Fprintf(os.Stderr, "FATAL: e2e/layer4: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if caddyBin, err = buildCaddy(dir); err != nil {
		fmt.Fprintf(os.Stderr, "FATAL: e2e/layer4: %v\n", err)
		return 1
	}
	if redisImage, err = buildRedisImage(); err != nil {
		fmt.Fprintf(os.Stderr, "FATAL: e2e/layer4: the Redis image: %v\n", err)
		return 1
	}
	return m.Run()
}

// buildCaddy builds Caddy with caddy-l4 and this checkout's plugin and
// layer4 package, with the build line docs/layer4.md gives, into dir.
//
// CADDY_DICER_E2E_L4_CADDY=<path> reuses a build between runs: the Caddy
// at path runs as it is; if there is none yet, it is built there and kept
// (remove it after changing the code):
//
//	CADDY_DICER_E2E_L4_CADDY=/tmp/caddy-l4 go test -tags e2e -count=1 -run Redis ./e2e/layer4
func buildCaddy(dir string) (string, error) {
	bin := filepath.Join(dir, "caddy")
	if keep := os.Getenv("CADDY_DICER_E2E_L4_CADDY"); keep != "" {
		keep, err := filepath.Abs(keep)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(keep); err == nil {
			return keep, nil
		}
		bin = keep
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		return "", err
	}
	caddyVersion, xcaddyVersion := envOr("CADDY_VERSION", "v2.11.9"), envOr("XCADDY_VERSION", "v0.4.5")
	cmd := exec.Command("go", "run", "github.com/caddyserver/xcaddy/cmd/xcaddy@"+xcaddyVersion,
		"build", caddyVersion,
		"--with", "github.com/mholt/caddy-l4@v0.1.2",
		// xcaddy resolves an unpublished module only at the zero pseudo-version.
		"--with", module+"@v0.0.0-00010101000000-000000000000="+root,
		// Unversioned, so that xcaddy takes the layer4 package from the
		// checkout rather than look it up in the module proxy.
		"--replace", module+"="+root,
		"--with", module+"/modules/l4dicer",
		"--output", bin)
	cmd.Dir = root
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("xcaddy build: %v\n%s", err, out)
	}
	fmt.Fprintf(os.Stderr, "e2e/layer4: built Caddy with caddy-l4 at %s in %s\n", bin, time.Since(start).Round(100*time.Millisecond))
	return bin, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// buildRedisImage builds an image holding Debian's redis-server, as
// installed on this machine (apt-get install redis-server), and the shared
// libraries it loads: FROM scratch, nothing pulled.
func buildRedisImage() (string, error) {
	bin, err := filepath.EvalSymlinks("/usr/bin/redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server is not installed (apt-get install redis-server): %w", err)
	}
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return "", fmt.Errorf("ldd %s: %w", bin, err)
	}
	// redis-server is a link to redis-check-rdb, which acts by the name it
	// is run as: the image holds the binary under the server's name.
	files := []string{"/usr/bin/redis-server"}
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				files = append(files, f)
			}
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			return "", err
		}
		data, err := os.ReadFile(real)
		if err != nil {
			return "", err
		}
		name := strings.TrimPrefix(f, "/")
		for d := filepath.Dir(name); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return "", err
		}
		if _, err := tw.Write(data); err != nil {
			return "", err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: "tmp/", Mode: 0o1777, Typeflag: tar.TypeDir}); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	ref := "caddy-dicer-test/l4-redis:" + dockertest.RunID()
	cmd := exec.Command("docker", "import",
		"--change", `CMD ["/usr/bin/redis-server", "--protected-mode", "no", "--save", "", "--appendonly", "no", "--port", "6379"]`,
		"--change", "WORKDIR /tmp",
		"-", ref)
	cmd.Stdin = &buf
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("docker import: %v\n%s", err, out)
	}
	return ref, nil
}

// caddyProc is a running Caddy.
type caddyProc struct {
	cmd     *exec.Cmd
	logPath string
}

// startCaddy runs Caddy on caddyfile and waits until its admin endpoint
// (at admin) answers; it is stopped when the test ends.
func startCaddy(t *testing.T, admin, caddyfile string) *caddyProc {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(caddyfile), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &caddyProc{logPath: filepath.Join(dir, "caddy.log")}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(caddyBin, "run", "--config", path, "--adapter", "caddyfile")
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
		logFile.Close()
		if t.Failed() {
			t.Logf("Caddy's log:\n%s", p.logText())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", admin, time.Second)
		if err == nil {
			c.Close()
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("Caddy's admin endpoint %s did not answer within 30s: %v\n%s", admin, err, p.logText())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *caddyProc) logText() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}
