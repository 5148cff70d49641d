package dockertest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
)

// The real-app test image (docs/realapps.md) holds real servers from
// Debian's packages: nginx, websocketd and a slow-to-answer app. Its
// command picks the app; Options.Cmd and Options.StopSignal override it.
var (
	// RealAppNginx is the image's default app: nginx on port 8080, "/"
	// answers hello(NAME), "/slow" the same line and SLOW_KB KiB (default
	// 256) more at 64 KiB a second. Its stop signal is SIGQUIT (graceful).
	RealAppNginx = []string{"/usr/local/bin/realapp-nginx"}
	// RealAppWebSocket is websocketd on port 8080: each connection is
	// greeted with "hello from NAME", then every message is echoed.
	RealAppWebSocket = []string{"/usr/local/bin/realapp-ws"}
	// RealAppSlow listens on port 8080 at once and answers GET with
	// hello(NAME) only READY_AFTER seconds (default 3) later.
	RealAppSlow = []string{"/usr/local/bin/realapp-slow"}
)

// RealAppSlowHealth is a health check of RealAppSlow every interval: healthy
// once it answers "/" with 200 within a second.
func RealAppSlowHealth(interval time.Duration) *container.HealthConfig {
	return &container.HealthConfig{
		Test:     []string{"CMD", "/usr/local/bin/realapp-slow", "--check"},
		Interval: interval,
		Timeout:  5 * time.Second,
		Retries:  1,
	}
}

// realAppsBuildTimeout bounds build.sh: a first build runs debootstrap
// (about two minutes here), later ones reuse the images.
const realAppsBuildTimeout = 15 * time.Minute

var realApps struct {
	once sync.Once
	ref  string
	err  error
}

// RealAppsImage returns the real-app test image's reference, running
// realapps/build.sh once per process. The script builds the image from
// Debian's packages with debootstrap and docker import (nothing is
// pulled) only when no image of the same content is on the Engine; that
// first build needs root and debootstrap.
func RealAppsImage(ctx context.Context) (string, error) {
	realApps.once.Do(func() {
		realApps.ref, realApps.err = buildRealApps(ctx)
		if realApps.err != nil {
			realApps.err = fmt.Errorf("dockertest: building the real-app image: %w", realApps.err)
		}
	})
	return realApps.ref, realApps.err
}

func buildRealApps(ctx context.Context) (string, error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate the dockertest sources")
	}
	script := filepath.Join(filepath.Dir(self), "realapps", "build.sh")
	ctx, cancel := context.WithTimeout(ctx, realAppsBuildTimeout)
	defer cancel()
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, script)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w\n%s", script, err, stderr.String())
	}
	lines := strings.Fields(string(out))
	if len(lines) == 0 {
		return "", fmt.Errorf("%s printed no image\n%s", script, stderr.String())
	}
	return lines[len(lines)-1], nil
}
