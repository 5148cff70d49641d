package dockertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// EnvStaticCaddy names a static Caddy binary (with the plugin) that
// BuildImageFromFiles is BuildImageDir with files given as paths to copy
// (a name in the build folder -> a path), where an empty path stands for
// inline, e.g. a test's Caddyfile.
func BuildImageFromFiles(name, dockerfile string, files map[string]string, inline string) (string, error) {
	contents := map[string][]byte{}
	for f, src := range files {
		data := []byte(inline)
		if src != "" {
			var err error
			if data, err = os.ReadFile(src); err != nil {
				return "", err
			}
		}
		contents[f] = data
	}
	return BuildImageDir(name, dockerfile, contents)
}

// StaticCaddy returns instead of building one.
const EnvStaticCaddy = "CADDY_DICER_E2E_STATIC_CADDY"

// Docker runs the docker CLI with args, against the Engine DOCKER_HOST
// names (the machine's by default), and returns its combined output.
// A service write Swarm refused as "update out of sequence" is made again,
// up to staleTries times: the CLI reads the service's version and writes
// at it, and Swarm's own bookkeeping (the update status of a rolling
// update just ended) may have moved the version in between. The refused
// write changed nothing.
func Docker(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for try := 1; ; try++ {
		out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
		if ctx.Err() != nil {
			err = errors.Join(err, ctx.Err())
		}
		if err == nil || try == staleTries || ctx.Err() != nil || !strings.Contains(string(out), "update out of sequence") {
			return string(out), err
		}
		time.Sleep(staleRetry) // Swarm's bookkeeping settles in milliseconds
	}
}

// staleTries and staleRetry bound Docker's retries of a stale service write.
const (
	staleTries = 5
	staleRetry = 200 * time.Millisecond
)

// BuildImageDir builds the image caddy-dicer-test/<name>:<RunID> from
// dockerfile and files (a name in the build folder -> its content), with
// the classic builder, so that nothing is pulled: FROM scratch or FROM a
// local image. The caller removes it.
func BuildImageDir(name, dockerfile string, files map[string][]byte) (string, error) {
	dir, err := os.MkdirTemp("", "cdt-image")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		return "", err
	}
	for f, data := range files {
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o755); err != nil {
			return "", err
		}
	}
	ref := "caddy-dicer-test/" + name + ":" + RunID()
	cmd := exec.Command("docker", "build", "--quiet", "--tag", ref, dir)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %v\n%s", ref, err, out)
	}
	return ref, nil
}

// StaticCaddy returns a static Caddy with the plugin (CGO_ENABLED=0, for
// an image with no libc): the binary EnvStaticCaddy names, or the one
// `make bin/image/caddy/caddy` builds (xcaddy, as `make image` does) in
// the checkout at root. who names the caller in what it prints.
func StaticCaddy(root, who string) (string, error) {
	if bin := os.Getenv(EnvStaticCaddy); bin != "" {
		fmt.Fprintf(os.Stderr, "%s: using the static Caddy %s (%s)\n", who, bin, EnvStaticCaddy)
		return bin, nil
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "%s: building the static Caddy with make bin/image/caddy/caddy\n", who)
	cmd := exec.Command("make", "-C", root, "bin/image/caddy/caddy")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building Caddy: %v\n%s", err, out.String())
	}
	return filepath.Join(root, "bin/image/caddy/caddy"), nil
}

// Published returns the 127.0.0.1:port where container publishes port
// (e.g. "80/tcp").
func Published(container, port string) (string, error) {
	out, err := Docker(30*time.Second, "port", container, port)
	if err != nil {
		return "", fmt.Errorf("docker port %s %s: %v\n%s", container, port, err, out)
	}
	for _, line := range strings.Fields(out) {
		if strings.HasPrefix(line, "127.0.0.1:") {
			return line, nil
		}
	}
	return "", fmt.Errorf("docker port %s %s: not published on 127.0.0.1: %s", container, port, out)
}
