package hedge

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A panic in an attempt is not carried to Do's caller, as errgroup does
// not carry one: the program crashes with it, whether the call has its
// outcome yet or not. Run in a child process; the child's output says
// whether Do returned first. (Do may return while the panic unwinds, as
// errgroup's Wait may.)
func TestHedgeAttemptPanicCrashes(t *testing.T) {
	if mode := os.Getenv("WATERTIGHT_HEDGE_PANIC"); mode != "" {
		attemptPanic(mode == "late")
		return
	}
	for _, mode := range []string{"early", "late"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHedgeAttemptPanicCrashes$", "-test.count=1")
		cmd.Env = append(os.Environ(), "WATERTIGHT_HEDGE_PANIC="+mode)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Fatalf("%s: child ended with %v, want exit status 2 (a crash); output:\n%s", mode, err, out)
		}
		s := string(out)
		returned := strings.Index(s, "Do returned winner <nil>")
		crashed := strings.Index(s, "panic: attempt 1 panicked")
		switch {
		case crashed < 0:
			t.Errorf("%s: no crash with the attempt's panic; output:\n%s", mode, s)
		case mode == "late" && (returned < 0 || returned > crashed):
			t.Errorf("late: want the winner returned, then the loser's panic; output:\n%s", s)
		}
	}
}

// attemptPanic runs a hedged call whose first attempt panics: before the
// hedge wins, or, if late, after it has won and Do has returned. It never
// returns, the panic ending the process.
func attemptPanic(late bool) {
	h, err := New(Config{Delay: time.Millisecond})
	if err != nil {
		panic(err)
	}
	release := make(chan struct{})
	v, err := Do(context.Background(), h, nil, func(ctx context.Context) (string, error) {
		if Attempt(ctx) == 1 {
			if late {
				<-release // ignores ctx
			}
			panic("attempt 1 panicked")
		}
		time.Sleep(time.Second)
		return "winner", nil
	})
	fmt.Fprintln(os.Stderr, "Do returned", v, err)
	close(release)
	select {} // the loser's panic ends the process
}
