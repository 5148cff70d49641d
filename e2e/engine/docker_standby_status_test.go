package engine

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// Docker standby is shown as standby: a stopped container that a request
// would wake is `standby` in /dicer/instances and in
// caddy_dicer_instances{state="standby"}, explain says a request wakes it
// (not a bare 503), and one whose wake failed shows when it may be woken
// again and the Retry-After its requests get.
func TestDocker_Standby_shown_as_standby_and_in_backoff(t *testing.T) {
	s := newStandbyCase(t, "sb-shown", dockertest.Options{NoStart: true, Env: []string{"PORT=notaport"},
		Labels: map[string]string{"caddy.standby_after": "1h"}}, "")
	app, host := s.app, s.host

	st := onlyInstance(t, app)
	if st.State != "standby" || st.DaemonState != "stopped" || !strings.Contains(st.Verdict, "a request wakes it") {
		t.Errorf("a stopped container with caddy.standby_after: state %q (daemon %q), verdict %q; want standby (stopped), woken by a request",
			st.State, st.DaemonState, st.Verdict)
	}
	if got := metric(t, "caddy_dicer_instances", `kind="docker"`, `state="standby"`); got < 1 {
		t.Errorf(`caddy_dicer_instances{state="standby"} = %v, want at least 1`, got)
	}
	ex := explainHost(t, host)
	if ex.Wake != "wakes "+dockertest.Name("sb-shown") {
		t.Errorf("explain: wake %q, want the container woken by a request; routes %+v", ex.Wake, ex)
	}

	// The container exits at once when woken: its wake fails, and it is
	// in backoff.
	r, retry := getRetry(host, "/", 30*time.Second)
	if r.status != http.StatusServiceUnavailable || retry == "" {
		t.Fatalf("the request that wakes a broken container: %s, Retry-After %q; want 503 with one", r, retry)
	}
	st = onlyInstance(t, app)
	if st.NextWake == nil || time.Until(*st.NextWake) < 30*time.Second || st.RetryAfter < 30 || !strings.Contains(st.Verdict, "not woken again before") {
		t.Errorf("a container in wake backoff: next_wake %v, retry_after %d, verdict %q; want the backoff's end and about 60 s",
			st.NextWake, st.RetryAfter, st.Verdict)
	}
	ex = explainHost(t, host)
	if ex.RetryAfter < 30 || !strings.HasPrefix(ex.Wake, "503 with Retry-After") {
		t.Errorf("explain for a host whose container is in wake backoff: wake %q, retry_after %d", ex.Wake, ex.RetryAfter)
	}
}

// onlyInstance is the one instance of app in /dicer/instances.
func onlyInstance(t *testing.T, app string) diceradmin.InstanceStatus {
	t.Helper()
	var list []diceradmin.InstanceStatus
	adminJSON(t, "/dicer/instances?selector="+url.QueryEscape("app="+app), &list)
	if len(list) != 1 {
		t.Fatalf("/dicer/instances for app=%s: %d instances, want 1", app, len(list))
	}
	return list[0]
}

// explainHost is the one route's explanation of host.
func explainHost(t *testing.T, host string) diceradmin.RouteExplanation {
	t.Helper()
	var ex diceradmin.Explanation
	adminJSON(t, "/dicer/explain?host="+url.QueryEscape(host), &ex)
	if len(ex.Routes) != 1 {
		t.Fatalf("explain %s: %d routes, want 1", host, len(ex.Routes))
	}
	return ex.Routes[0]
}
