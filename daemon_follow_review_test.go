package caddydicer

import (
	"errors"
	"testing"
)

// R2g: follow replaces no placeholder, so `follow {env.FOLLOW}` would be
// the selector "the label {env.FOLLOW} exists", valid and matching no
// container: a Caddy that silently follows nothing. A placeholder is
// refused, naming follow, in the setting and in the variable.
func TestSettingError_R2g_follow_placeholder_refused(t *testing.T) {
	for _, tc := range []struct{ value, env string }{
		{"{env.FOLLOW}", ""},
		{"env={env.STAGE}", ""},
		{"", "{env.FOLLOW}"},
	} {
		_, err := followSelector(tc.value, func(string) string { return tc.env })
		var se *SettingError
		if !errors.As(err, &se) || se.Setting != "follow" {
			t.Errorf("follow %q, %s=%q: %v; want an error naming follow", tc.value, FollowEnv, tc.env, err)
		}
	}
	if _, err := followSelector("env=prod", nil); err != nil {
		t.Errorf("follow env=prod: %v", err)
	}
}
