// Command statuspage runs a small service whose calls go through three
// watertight pipelines, and serves the live state of those pipelines with
// package statuspage at /debug/watertight:
//
//   - chat: a bulkhead of 4 with a queue of 8, 3 attempts, 100 requests/s,
//     a breaker that opens on the 5th failure in a row, and a 200 ms
//     timeout per attempt, over an upstream that fails 2% of its calls;
//   - login: a bulkhead of 2, nothing else;
//   - search: 2 attempts, routed over two endpoints, eu and us, each with
//     a breaker and a timeout per attempt of its own.
//
// A steady load runs through all three. With -storm, the chat upstream
// goes down for 3 s at once and then every -storm interval, while 16
// callers hammer it (see [Service.Storm]).
//
// Usage, from examples/statuspage:
//
//	go run . [-addr 127.0.0.1:8080] [-storm 45s]
//
// Then open http://127.0.0.1:8080/debug/watertight (JSON:
// ?format=json). During a storm, chat's breaker turns open (in red, with
// the time it stays open until), its bulkhead fills, and the calls
// rejected in the last minute rise, by policy and reason, with a
// sparkline. 30 s later the breaker turns half-open, and its first probe
// closes it. The page reloads itself every 2 s; it has no JavaScript.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "statuspage:", err)
		os.Exit(1)
	}
}

// stormLength is how long each storm of -storm lasts.
const stormLength = 3 * time.Second

// run serves the service until ctx is done.
func run(ctx context.Context, args []string, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("statuspage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "address to serve on")
	storm := fs.Duration("storm", 0, "run a storm on chat at once and then at this interval (0: never)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 || *storm < 0 {
		return fmt.Errorf("usage: go run . [-addr host:port] [-storm interval]")
	}
	svc, err := NewService()
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, svc.Close()) }()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stderr, "serving http://%s%s; interrupt to stop\n", ln.Addr(), PagePath)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { svc.Load(ctx) })
	if *storm > 0 {
		wg.Go(func() { storms(ctx, svc, *storm) })
	}
	select {
	case <-ctx.Done():
	case err = <-served:
	}
	cancel()
	wg.Wait()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	return errors.Join(err, srv.Shutdown(sctx))
}

// storms runs a storm of stormLength at once and then every every, until
// ctx is done.
func storms(ctx context.Context, svc *Service, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, stormLength)
		svc.Storm(sctx)
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
