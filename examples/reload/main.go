// Command reload runs a service whose pipelines follow a JSON file. It
// reads the file again when it changes (polled every -poll) or on SIGHUP,
// and applies it with watertight's Pipeline.Update: the pipelines keep
// their state (a breaker's state, a learned limit, a rate-limit hold)
// and the calls they hold. A file that is invalid, or names a pipeline
// the service does not have, changes nothing: the service keeps the last
// good config and says so in its log.
//
// The file maps each pipeline's name to its watertight.Config in JSON:
//
//	{
//	  "chat":  {"bulkhead": {"limit": 10, "max_queue": 20, "max_wait": "1s"},
//	            "retry": {"max_attempts": 3}},
//	  "login": {"bulkhead": {"limit": 50}}
//	}
//
// Usage:
//
//	go run ./examples/reload [-config pipelines.json] [-addr 127.0.0.1:8080] [-poll 1s]
//
// Without -config it writes the file above to a temporary directory and
// logs its path: edit it (lower chat's limit, or break it) and watch the
// log, or send SIGHUP. GET /config answers the configs in force as JSON;
// GET /chat and GET /login run a call through their pipelines, and answer
// 503 with Retry-After when one is refused.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/watertight/watertight/policy"
)

// sample is the file written when no -config is given.
const sample = `{
  "chat":  {"bulkhead": {"limit": 10, "max_queue": 20, "max_wait": "1s"},
            "retry": {"max_attempts": 3}},
  "login": {"bulkhead": {"limit": 50}}
}
`

func main() {
	path := flag.String("config", "", "the JSON file of the pipelines' configs (default: a sample in a temporary directory)")
	addr := flag.String("addr", "127.0.0.1:8080", "the address to serve on")
	poll := flag.Duration("poll", time.Second, "how often to look at the file for a change")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*path, *addr, *poll, log); err != nil {
		log.Error(err.Error())
		os.Exit(1)
	}
}

func run(path, addr string, poll time.Duration, log *slog.Logger) error {
	if path == "" {
		dir, err := os.MkdirTemp("", "reload")
		if err != nil {
			return err
		}
		path = filepath.Join(dir, "pipelines.json")
		if err := os.WriteFile(path, []byte(sample), 0o644); err != nil {
			return err
		}
	}
	ps, err := Open(path, log)
	if err != nil {
		return err
	}
	defer ps.Close()
	log.Info("following the config file; edit it, or send SIGHUP", "path", path, "pid", os.Getpid())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go ps.Follow(ctx, poll, hup)

	srv := &http.Server{Addr: addr, Handler: ps.Handler()}
	go func() {
		<-ctx.Done()
		srv.Shutdown(context.Background())
	}()
	log.Info("serving", "addr", addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Handler serves /config, /chat and /login.
func (ps *Pipelines) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /config", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(ps.Configs())
	})
	for _, name := range []string{"chat", "login"} {
		mux.HandleFunc("GET /"+name, func(w http.ResponseWriter, r *http.Request) {
			p := ps.Pipeline(name)
			if p == nil {
				http.NotFound(w, r)
				return
			}
			err := p.Execute(r.Context(), func(ctx context.Context) error {
				// The dependency: a short piece of work.
				select {
				case <-time.After(10 * time.Millisecond):
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
			switch {
			case errors.Is(err, policy.ErrRejected):
				w.Header().Set("Retry-After", "1")
				http.Error(w, "busy", http.StatusServiceUnavailable)
			case err != nil:
				http.Error(w, err.Error(), http.StatusBadGateway)
			default:
				fmt.Fprintln(w, "ok")
			}
		})
	}
	return mux
}
