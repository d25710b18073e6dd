package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests if a goroutine outlives them: the server's,
// the page's sampler, the storm's callers, or chromedp's.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
