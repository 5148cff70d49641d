package diceradmin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"

	"github.com/caddyserver/caddy/v2"
)

// Caddy's passive health checks (fail_duration, max_fails, ...) keep their
// state per dial address in reverse_proxy, out of this plugin's reach
// except through reverse_proxy's own admin endpoint, /reverse_proxy/upstreams,
// which lists every address with its recent failures, dynamic upstreams
// included. explain asks it in process, so that a target the catalog calls
// routable but Caddy skips says so.

// passiveFails returns the recent failures reverse_proxy counts for each
// dial address (only those with some), nil if it cannot tell.
func passiveFails() map[string]int {
	info, err := caddy.GetModule("admin.api.reverse_proxy")
	if err != nil {
		return nil
	}
	router, ok := info.New().(caddy.AdminRouter)
	if !ok {
		return nil
	}
	for _, r := range router.Routes() {
		if r.Pattern != "/reverse_proxy/upstreams" {
			continue
		}
		rec := httptest.NewRecorder()
		if err := r.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, r.Pattern, nil)); err != nil || rec.Code != http.StatusOK {
			return nil
		}
		var list []struct {
			Address string `json:"address"`
			Fails   int    `json:"fails"`
		}
		if json.Unmarshal(rec.Body.Bytes(), &list) != nil {
			return nil
		}
		out := map[string]int{}
		for _, u := range list {
			if u.Fails > 0 {
				out[u.Address] += u.Fails
			}
		}
		return out
	}
	return nil
}

// passiveNote says what Caddy's passive health makes of a target with
// fails recent failures.
func passiveNote(fails int) string {
	what := "1 recent failure"
	if fails != 1 {
		what = strconv.Itoa(fails) + " recent failures"
	}
	return "; Caddy's passive health counts " + what + " at this address: a route whose max_fails is " +
		strconv.Itoa(fails) + " or less skips it until fail_duration has passed since the failures"
}
