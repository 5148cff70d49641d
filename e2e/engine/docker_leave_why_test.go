package engine

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// R6b against the real Engine: a container killed (docker kill, as docker
// rm -f does first) leaves its rotation with a log line that says so, not
// "stopping".
func TestDocker_R6b_leave_says_what_happened(t *testing.T) {
	cli := engine(t)
	app := dockertest.Name("r6b-kill")
	host := hostName("r6b-kill")
	tester, logFile := dockerCaddy(t, "", fmt.Sprintf(`
:%d {
	reverse_proxy {
		dynamic docker app=%s 8080
	}
}`, httpPort, app))
	c := dockertest.Start(t, cli, dockertest.Options{Name: "r6b-kill", Labels: map[string]string{"app": app}})
	answersWithin(t, tester, host, http.StatusOK, hello("r6b-kill"), waitFor)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cli.ContainerKill(ctx, c.ID, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	want := `"why":"killed with SIGKILL (docker kill, docker rm -f, or the end of a stop's grace period)"`
	if !testkit.UntilEvery(waitFor, 10*time.Millisecond, func() bool {
		return len(testkit.LogLines(t, logFile, `"instance leaves rotation"`, `"instance":"`+c.Name+`"`, want)) == 1
	}) {
		t.Fatalf("no leave saying %s; the log about %s: %q", want, c.Name, testkit.LogLines(t, logFile, `"instance":"`+c.Name+`"`))
	}
}
