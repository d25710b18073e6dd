// Command telemetry shows watertight's traces and metrics leaving the
// process through the OpenTelemetry SDK: metrics on a Prometheus /metrics
// endpoint; spans over OTLP/HTTP if the standard OTEL_EXPORTER_OTLP_*
// variables name a collector, and as JSON to stderr or stdout if -spans asks.
//
// It runs a small storm through four pipelines (see [RunStorm]): 20 calls
// of 50 ms at once into a bulkhead of 2 with no queue, calls that succeed on
// their second attempt, a call whose attempts outlive their timeout, and a
// dependency that always fails until a breaker opens. Then it scrapes its
// own /metrics over HTTP, prints the watertight_* samples, and shuts down,
// or with -serve keeps serving /metrics until interrupted, running the storm
// again every -every if that is set (for a Prometheus and the Grafana
// dashboard in grafana/ to watch).
//
// Usage, from examples/telemetry:
//
//	go run . [-addr 127.0.0.1:9464] [-serve [-every 5s]] [-spans off|stderr|stdout] [-pretty] [-buckets]
//	OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 go run .
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h: the usage is printed; asking for it is no failure
		}
		fmt.Fprintln(os.Stderr, "telemetry:", err)
		os.Exit(1)
	}
}

// usage heads the command's -h output; the flags follow.
const usage = `Usage: go run . [flags]   (from examples/telemetry)

Runs a storm through four watertight pipelines, serves their metrics on
/metrics (Prometheus format), scrapes it and prints the watertight_* samples.
Spans go over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT (or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, and as JSON only if -spans asks.
There are no subcommands.

Flags:
`

// run is the command: the storm summary and the scrape go to stdout,
// progress to stderr, spans where -spans says (nowhere by default).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("telemetry", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	addr := fs.String("addr", "127.0.0.1:9464", "address of the Prometheus /metrics endpoint")
	serve := fs.Bool("serve", false, "keep serving /metrics after the storm, until interrupted")
	every := fs.Duration("every", 0, "with -serve, run the storm again at this interval (0: once)")
	spans := fs.String("spans", "off", "where the stdout trace exporter writes spans as JSON: off, stderr or stdout")
	pretty := fs.Bool("pretty", false, "indent the spans' JSON")
	buckets := fs.Bool("buckets", false, "print the histogram's _bucket samples too")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: the command has no subcommands (see -h)", fs.Arg(0))
	}
	if *every < 0 || (*every > 0 && !*serve) {
		return fmt.Errorf("-every must be > 0 and used with -serve, got %v", *every)
	}
	cfg := SetupConfig{ServiceName: "watertight-telemetry-demo", PrettySpans: *pretty}
	switch *spans {
	case "stderr":
		cfg.SpanWriter = stderr
	case "stdout":
		cfg.SpanWriter = stdout
	case "off":
	default:
		return fmt.Errorf("-spans must be stderr, stdout or off, got %q", *spans)
	}

	tel, shutdown, err := Setup(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		// A fresh ctx: the flush must happen even after an interrupt.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = errors.Join(err, shutdown(sctx))
	}()
	if tel.OTLP {
		fmt.Fprintln(stderr, "exporting spans over OTLP/HTTP (OTEL_EXPORTER_OTLP_* is set)")
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", tel.Handler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = errors.Join(err, srv.Shutdown(sctx))
		if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
	}()
	metricsURL := "http://" + ln.Addr().String() + "/metrics"

	storm, err := RunStorm(ctx, tel.TracerProvider, tel.MeterProvider, StormConfig{}, stdout)
	// storm's observable instruments stay registered until it is closed,
	// after the last scrape or when a later storm replaces it.
	defer func() { storm.Close() }()
	if err != nil {
		return err
	}
	// Spans leave in batches; flush them now so that they come before the
	// scrape rather than at shutdown. A collector that cannot be reached
	// loses the spans but does not stop the demo.
	if err := tel.TracerProvider.ForceFlush(ctx); err != nil {
		fmt.Fprintln(stderr, "flushing spans:", err)
	}

	fmt.Fprintf(stdout, "\n$ curl -s %s | grep '^watertight_'", metricsURL)
	if !*buckets {
		fmt.Fprint(stdout, " | grep -v _bucket")
	}
	fmt.Fprintln(stdout)
	if err := scrape(ctx, metricsURL, stdout, *buckets); err != nil {
		return err
	}

	if *serve {
		fmt.Fprintf(stderr, "serving %s; interrupt to stop\n", metricsURL)
		return keepServing(ctx, tel, &storm, served, *every)
	}
	return nil
}

// keepServing serves /metrics until ctx ends or the server stops, running
// a storm again every every (0: never); storm is the latest, replaced in
// place so that the caller closes the one left.
func keepServing(ctx context.Context, tel *Telemetry, storm *Storm, served chan error, every time.Duration) error {
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-served:
			served <- err // for the deferred Shutdown
			return nil
		case <-tick:
			next, err := RunStorm(ctx, tel.TracerProvider, tel.MeterProvider, StormConfig{}, io.Discard)
			if err != nil {
				next.Close()
				if ctx.Err() != nil {
					return nil // interrupted mid-storm
				}
				return err
			}
			storm.Close()
			*storm = next
		}
	}
}

// scrape GETs url and copies its watertight_* samples to w, skipping
// histogram buckets unless buckets is set.
func scrape(ctx context.Context, url string, w io.Writer, buckets bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	// A client of its own, so that its keep-alive connection is closed here.
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "watertight_") {
			continue
		}
		if !buckets && strings.Contains(line, "_bucket{") {
			continue
		}
		fmt.Fprintln(w, line)
	}
	return sc.Err()
}
