package retry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// A panic in the first attempt while its hedge runs (and would win later)
// is carried to the caller as documented: the call panics with it, no
// success is published, and the hedge is canceled with ErrHedgeLost.
func TestHedgeLoserPanicBeforeWinner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := mustHedge(t, HedgeConfig{Delay: time.Millisecond})
		var hedgeCause atomic.Value
		var v string
		func() {
			defer func() {
				if r := recover(); r != "first attempt panicked" {
					t.Errorf("recovered %v, want the first attempt's panic", r)
				}
			}()
			v, _ = Hedged(t.Context(), h, nil, func(ctx context.Context) (string, error) {
				if Attempt(ctx) == 1 {
					time.Sleep(5 * time.Millisecond)
					panic("first attempt panicked")
				}
				select {
				case <-time.After(10 * time.Millisecond):
					return "hedge", nil // would have won
				case <-ctx.Done():
					hedgeCause.Store(context.Cause(ctx))
					return "", ctx.Err()
				}
			})
			t.Errorf("Hedged returned")
		}()
		synctest.Wait()
		if c, _ := hedgeCause.Load().(error); !errors.Is(c, ErrHedgeLost) {
			t.Errorf("the hedge's cause = %v, want ErrHedgeLost", c)
		}
		if v != "" {
			t.Errorf("Hedged returned %q", v)
		}
	})
}

// A losing attempt that panics after the call has its outcome has no
// caller to carry its panic to: as documented, the program crashes with
// it. Run in a child process; the child's output says the call returned
// the winner's value first.
func TestHedgeLatePanicCrashes(t *testing.T) {
	if os.Getenv("WATERTIGHT_HEDGE_LATE_PANIC") == "1" {
		latePanic()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHedgeLatePanicCrashes$", "-test.count=1")
	cmd.Env = append(os.Environ(), "WATERTIGHT_HEDGE_LATE_PANIC=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("child ended with %v, want exit status 2 (a crash); output:\n%s", err, out)
	}
	s := string(out)
	returned := strings.Index(s, "Hedged returned winner <nil>")
	crashed := strings.Index(s, "panic: losing attempt panicked late")
	if returned < 0 || crashed < returned {
		t.Errorf("want the winner returned, then the loser's panic; output:\n%s", s)
	}
}

// latePanic runs a hedged call whose first attempt ignores its context,
// then panics after the hedge has won and Hedged has returned: it never
// returns, the panic ending the process.
func latePanic() {
	h, err := NewHedge(HedgeConfig{Delay: time.Millisecond})
	if err != nil {
		panic(err)
	}
	release := make(chan struct{})
	v, err := Hedged(context.Background(), h, nil, func(ctx context.Context) (string, error) {
		if Attempt(ctx) == 1 {
			<-release // ignores ctx
			panic("losing attempt panicked late")
		}
		return "winner", nil
	})
	fmt.Fprintln(os.Stderr, "Hedged returned", v, err)
	close(release)
	select {} // the loser's panic ends the process
}
