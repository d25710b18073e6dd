// Command fleetquota shows a fleet of three replicas keeping to a
// provider's quota together through Redis, with redisstate.Quota, where
// replicas that each pace themselves to the whole quota do not.
//
// It starts a redis-server of its own on a free loopback port, and a fake
// OpenAI-like provider with a quota of 20 requests and 6 000 tokens a
// second, enforced exactly, which answers 429 past it. Then it runs two
// arms, each of three replica processes (this program started again) of
// 8 callers that call the provider through watertight.NewHTTPClient:
//
//   - alone: each replica's rate limit paces it to the whole quota, as a
//     replica configured from the provider's documentation would;
//   - shared: the replicas' rate limits share one redisstate.Quota of the
//     provider's quota in Redis.
//
// For each arm it prints what the provider served and refused, what
// watertight rejected before sending, and the rates served against the
// quota.
//
// Usage, from examples/fleetquota (needs redis-server on PATH):
//
//	go run . [-duration 5s] [-json]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if isReplica() {
		os.Exit(runReplica())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cli(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "fleetquota:", err)
		stop()
		os.Exit(1)
	}
}

// cli parses args, runs both arms, and prints their results on stdout,
// as a table or JSON; progress goes to stderr.
func cli(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fleetquota", flag.ContinueOnError)
	fs.SetOutput(stderr)
	d := fs.Duration("duration", 5*time.Second, "how long the replicas call the provider in each arm")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *d <= 0 {
		return fmt.Errorf("-duration must be > 0, got %v", *d)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return errNoRedis
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	rep, err := run(ctx, bin, self, *d, stderr)
	if err != nil && ctx.Err() != nil {
		return errors.New("interrupted") // the replicas' ends say no more
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return rep.writeJSON(stdout)
	}
	rep.writeTable(stdout)
	return nil
}

// run starts Redis (the binary redisBin) and runs the arms, each for d,
// with replicas that are the program self. It says what it is doing on
// progress.
func run(ctx context.Context, redisBin, self string, d time.Duration, progress io.Writer) (report, error) {
	rep := newReport(d)
	r, err := startRedis(ctx, redisBin)
	if err != nil {
		return rep, err
	}
	defer r.stop()
	fmt.Fprintf(progress, "redis-server (pid %d) on %s\n", r.cmd.Process.Pid, r.addr)
	for _, arm := range []string{armAlone, armShared} {
		fmt.Fprintf(progress, "arm %s: %d replicas x %d callers for %v\n", arm, replicas, callers, d)
		a, err := runArm(ctx, self, arm, r.addr, d)
		if err != nil {
			return rep, fmt.Errorf("arm %s: %w", arm, err)
		}
		rep.Arms = append(rep.Arms, a)
	}
	return rep, nil
}
