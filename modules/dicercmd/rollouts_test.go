package dicercmd

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/rollout"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// `caddy dicer rollouts` shows a route's rollouts per hosts (R4f), and
// says why one is refused (no room in the fleet's record) or waits (its
// weights cannot be written: the switches record is full).
func TestRollouts_R4f_table_shows_hosts_and_what_blocks(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	list := []diceradmin.RolloutStatus{
		{Route: "app=shop", Hosts: "a.example", State: rollout.State{Old: "v1", New: "v2", Steps: []int{20, 100}, Verdict: rollout.Rolling,
			StepStart: now.Add(-5 * time.Second)}, Share: 20, Blocked: "its weights are not written: full; its step waits"},
		{Route: "app=shop", Hosts: "b.example", State: rollout.State{Old: "b1", New: "b2"}, Blocked: "no rollout recorded: 1000 rollouts under way"},
		{Route: "app=web", State: rollout.State{Old: "w1", New: "w2", Steps: []int{100}, Verdict: rollout.Done, Ended: now.Add(-time.Minute)},
			Share: 100, Drained: true},
	}
	var b strings.Builder
	if err := printRollouts(&b, list, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"HOSTS", "a.example", "blocked: its weights are not written", "b.example", "refused",
		"blocked: no rollout recorded", "done (old drained)", "*"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
}

// The dashboard (R13d) shows the rollouts (R4f) as GET /dicer/rollouts
// gives them: the page reads that route, `caddy dicer dashboard` relays
// its GET and not its POST (promote and abort stay with the command),
// and in a browser each rollout is a row with its versions, step,
// shares, error rates, p99s, verdict and why, a tenant's text shown as
// text.
func TestDashboard_R4f_shows_rollouts(t *testing.T) {
	if !strings.Contains(string(pageOf(t)), `get("/dicer/rollouts")`) {
		t.Fatal("the dashboard page does not read /dicer/rollouts")
	}
	hostile := `<img src=x onerror="window.pwned=1">`
	list := []diceradmin.RolloutStatus{{Kind: "docker", Daemon: "unix:///d.sock", Route: "tenant=true port 8080", Hosts: "a.example",
		State: rollout.State{Old: "a1", New: "a2" + hostile, Steps: []int{20, 50, 100}, Step: 0, Verdict: rollout.RolledBack,
			Why:        "step 20% failed: error rate 5.00% over the old version's 0.10%",
			OldFigures: rollout.Figures{Requests: 1000, ErrorRate: 0.1, P99: 12 * time.Millisecond},
			NewFigures: rollout.Figures{Requests: 200, ErrorRate: 5, P99: 40 * time.Millisecond}},
		Share: 0, Decider: true},
		{Kind: "docker", Daemon: "unix:///d.sock", Route: "tenant=true port 8080", Hosts: "b.example",
			State: rollout.State{Old: "b1", New: "b2", Steps: []int{20, 50, 100}, Step: 1, Verdict: rollout.Rolling}, Share: 50,
			Blocked: "its weights are not written: the switches record is full"}}
	body, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	var posted atomic.Int32
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			posted.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/dicer/rollouts" {
			_, _ = w.Write(body)
			return
		}
		_, _ = io.WriteString(w, `[]`)
	}))
	defer admin.Close()
	base, token := serveDashboardCommand(t, strings.TrimPrefix(admin.URL, "http://"))
	res, err := http.Post(base+"dicer/rollouts?token="+token, "application/json", strings.NewReader(`{"route":"x","action":"abort"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode == http.StatusOK || posted.Load() != 0 {
		t.Errorf("POST /dicer/rollouts through the dashboard: %d, relayed %d", res.StatusCode, posted.Load())
	}
	if testing.Short() {
		t.Skip("the browser's part: not with -short")
	}
	b := testkit.StartBrowser(t)
	if err := b.Navigate(base+"?token="+token, ""); err != nil {
		t.Fatal(err)
	}
	rows := `[...document.querySelectorAll("#rollouts tbody tr")].map(tr => [...tr.children].map(td => td.textContent))`
	var got [][]string
	if _, ok := b.Until(context.Background(), 15*time.Second, rows, func(v json.RawMessage) bool {
		return json.Unmarshal(v, &got) == nil && len(got) == 2 && len(got[0]) == 11
	}); !ok {
		t.Fatalf("the rollouts table: %q", got)
	}
	a, bb := got[0], got[1]
	for i, want := range []string{"docker unix:///d.sock", "tenant=true port 8080", "a.example", "a1", "a2" + hostile, "1/3 (20%,50%,100%)",
		"100% / 0%", "0.10% of 1000 / 5.00% of 200", "12ms / 40ms", "rolled_back, decided here", "step 20% failed: error rate 5.00% over the old version's 0.10%"} {
		if a[i] != want {
			t.Errorf("A's row, cell %d: %q, want %q", i, a[i], want)
		}
	}
	if bb[2] != "b.example" || bb[5] != "2/3 (20%,50%,100%)" || bb[6] != "50% / 50%" || bb[9] != "rolling" ||
		!strings.HasPrefix(bb[10], "blocked: its weights are not written") {
		t.Errorf("B's row: %q", bb)
	}
	var pwned any
	if err := b.Eval(`window.pwned === undefined && document.querySelectorAll("#rollouts img").length === 0`, &pwned); err != nil || pwned != true {
		t.Errorf("a tenant's version ran as markup: %v %v", pwned, err)
	}
}

// pageOf is the dashboard page as served.
func pageOf(t *testing.T) []byte {
	t.Helper()
	rec := httptest.NewRecorder()
	if err := diceradmin.ServeDashboard(rec); err != nil {
		t.Fatal(err)
	}
	return rec.Body.Bytes()
}
