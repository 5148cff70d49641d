package caddydicer

// Every upstream source and permission that follows one daemon is a
// backend's module (adminapi.Backends reads them from Caddy's module
// registry by this mark), so a new backend is never left out of a list
// the plugin shows.

// FollowsDaemon marks an upstream source that follows one daemon
// (adminapi.Follower).
func (*upstreamSource) FollowsDaemon() {}

// FollowsDaemon marks a permission that follows one daemon
// (adminapi.Follower).
func (*hostPermission) FollowsDaemon() {}
