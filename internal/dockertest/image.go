package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/client"
)

// ImageRepo is the repository of the test image; its tag is a short hash
// of the helloserver binary, so an unchanged binary reuses the image.
const ImageRepo = "caddy-dicer-test/hello"

// dockerfile builds the test image from nothing but the static binary:
// no base image, so nothing is pulled.
const dockerfile = `FROM scratch
COPY hello /hello
EXPOSE 8080
HEALTHCHECK NONE
LABEL caddy-dicer.test.image=hello
ENTRYPOINT ["/hello"]
`

// images holds the test image of each daemon (by its host: a test may use
// the Engine and Podman side by side), built once per process.
var images struct {
	mu    sync.Mutex
	byDae map[string]*builtImage
}

type builtImage struct {
	once sync.Once
	ref  string
	err  error
}

// BuildImage returns the test image's reference, building it once per
// process: it compiles ./helloserver with CGO_ENABLED=0 for the Engine's
// architecture and builds an image FROM scratch holding it, tagged
// ImageRepo:<hash of the binary>. An image with that tag already on the
// Engine is reused. Nothing is pulled from a registry.
//
// The image's entrypoint is /hello, which serves HTTP on 8080 (see the
// helloserver command); it has no health check unless the container sets
// one (HealthCheck).
func BuildImage(ctx context.Context, cli client.APIClient) (string, error) {
	images.mu.Lock()
	if images.byDae == nil {
		images.byDae = map[string]*builtImage{}
	}
	image := images.byDae[cli.DaemonHost()]
	if image == nil {
		image = &builtImage{}
		images.byDae[cli.DaemonHost()] = image
	}
	images.mu.Unlock()
	image.once.Do(func() {
		image.ref, image.err = buildImage(ctx, cli)
		if image.err != nil {
			image.err = fmt.Errorf("dockertest: building the test image: %w", image.err)
		}
	})
	return image.ref, image.err
}

func buildImage(ctx context.Context, cli client.APIClient) (string, error) {
	// Compiling is the toolchain's work, not the Engine's: on a fresh
	// machine with a cold build cache and other builds beside it, it took
	// over two minutes (killed, and every test of the package failed with
	// it). It gets its own, generous bound; the Engine's calls keep theirs.
	compileCtx, cancelCompile := context.WithTimeout(ctx, compileTimeout)
	defer cancelCompile()
	verCtx, cancelVer := context.WithTimeout(ctx, opTimeout)
	defer cancelVer()
	ver, err := cli.ServerVersion(verCtx)
	if err != nil {
		return "", fmt.Errorf("asking the Engine its platform: %w", err)
	}
	if ver.Os != "" && ver.Os != "linux" {
		return "", fmt.Errorf("the Engine runs %s containers; the test image is for linux", ver.Os)
	}
	arch := ver.Arch
	if arch == "" {
		arch = runtime.GOARCH
	}
	bin, err := compileHello(compileCtx, arch)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	sum := sha256.Sum256(bin)
	ref := ImageRepo + ":" + hex.EncodeToString(sum[:])[:12]
	if _, err := cli.ImageInspect(ctx, ref); err == nil {
		return ref, nil
	} else if !isNotFound(err) {
		return "", fmt.Errorf("looking for %s: %w", ref, err)
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{
		{"Dockerfile", 0o644, []byte(dockerfile)},
		{"hello", 0o755, bin},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: time.Unix(0, 0)}); err != nil {
			return "", err
		}
		if _, err := tw.Write(f.data); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	resp, err := cli.ImageBuild(ctx, &buf, build.ImageBuildOptions{
		Tags:        []string{ref},
		Remove:      true,
		ForceRemove: true,
		Version:     build.BuilderV1, // the classic builder: no BuildKit session needed
	})
	if err != nil {
		return "", fmt.Errorf("building %s: %w", ref, err)
	}
	defer resp.Body.Close()
	if err := readBuildOutput(resp.Body); err != nil {
		return "", fmt.Errorf("building %s: %w", ref, err)
	}
	if _, err := cli.ImageInspect(ctx, ref); err != nil {
		return "", fmt.Errorf("built %s but cannot find it: %w", ref, err)
	}
	return ref, nil
}

// readBuildOutput drains the build's JSON message stream and returns the
// error it reports, if any.
func readBuildOutput(r io.Reader) error {
	dec := json.NewDecoder(r)
	var last []string
	for {
		var msg struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if s := strings.TrimSpace(msg.Stream); s != "" {
			last = append(last, s)
			if len(last) > 10 {
				last = last[1:]
			}
		}
		if msg.Error != "" || msg.ErrorDetail != nil {
			text := msg.Error
			if text == "" {
				text = msg.ErrorDetail.Message
			}
			return fmt.Errorf("%s (output: %s)", text, strings.Join(last, " | "))
		}
	}
}

// compileTimeout bounds the compilation of the helloserver binary.
const compileTimeout = 15 * time.Minute

// compileHello builds the helloserver command, statically, for linux/arch,
// and returns the binary. The build is reproducible (-trimpath, no build
// ID), so its hash names the image.
func compileHello(ctx context.Context, arch string) ([]byte, error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return nil, errors.New("cannot locate the dockertest sources")
	}
	src := filepath.Join(filepath.Dir(self), "helloserver")
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go") //nolint:staticcheck // a fallback only
	}
	dir, err := os.MkdirTemp("", "dockertest-hello")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "hello")
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=", "-o", out, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s: %w\n%s", src, err, msg)
	}
	return os.ReadFile(out)
}
