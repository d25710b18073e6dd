package redisstate

import (
	"testing"
	"time"
)

// VersionRecheck gives the tests how long a "too old" is kept.
const VersionRecheck = versionRecheck

// SetVersionClock makes the version check read its time from now until t
// ends.
func SetVersionClock(t testing.TB, now func() time.Time) {
	versionClock.Store(&now)
	t.Cleanup(func() { versionClock.Store(nil) })
}
