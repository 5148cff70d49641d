package dockertest

import "os"

// FollowEnv is the variable the Docker and Swarm modules' `follow` setting
// defaults to (R2g; the root package's FollowEnv, which this package does
// not import).
const FollowEnv = "CADDY_DICER_FOLLOW"

// FollowSelector is the follow selector of this test process's containers
// and networks: RunLabel=RunID().
func FollowSelector() string { return RunLabel + "=" + RunID() }

// FollowRun sets CADDY_DICER_FOLLOW to FollowSelector in this process's
// environment, so that every Caddy of the run (loaded in this process, or
// started by it, which inherits its environment) follows only the
// containers the helpers made for it (R2g): not those of another test
// process or of another Caddy on the same Engine, which it would
// otherwise route, wake, put on standby and heal. A package's TestMain
// calls it, before any Caddy starts, when every container its Caddys
// must see is made by the helpers.
func FollowRun() {
	if err := os.Setenv(FollowEnv, FollowSelector()); err != nil {
		panic(err)
	}
}
