package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/watertight/watertight"
)

// Pipelines are the service's pipelines, by name, built from a JSON file
// and updated from it. It is safe for concurrent use.
type Pipelines struct {
	path   string
	log    *slog.Logger
	byName map[string]*watertight.Pipeline // fixed at Open

	mu   sync.Mutex // serialises Reload
	seen []byte     // the file's content last read, good or bad
}

// Open reads the file at path and builds a pipeline for each config in
// it. Each update the pipelines apply later is logged, with what changed.
func Open(path string, log *slog.Logger) (*Pipelines, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfgs, err := decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ps := &Pipelines{path: path, log: log, byName: map[string]*watertight.Pipeline{}, seen: data}
	for _, name := range slices.Sorted(maps.Keys(cfgs)) {
		cfg := cfgs[name]
		cfg.OnUpdate = ps.logChanges
		p, err := watertight.New(name, cfg)
		if err != nil {
			ps.Close()
			return nil, fmt.Errorf("%s: %s: %w", path, name, err)
		}
		ps.byName[name] = p
	}
	return ps, nil
}

// decode reads the file's pipelines. An error names the setting by its
// path, after the pipeline's name: "chat: bulkhead.limit: must be >= 1".
func decode(data []byte) (map[string]watertight.Config, error) {
	var raw map[string]json.RawMessage
	d := json.NewDecoder(bytes.NewReader(data))
	if err := d.Decode(&raw); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, errors.New("data after the JSON object")
	}
	cfgs := make(map[string]watertight.Config, len(raw))
	for name, doc := range raw {
		var cfg watertight.Config
		if err := json.Unmarshal(doc, &cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		cfgs[name] = cfg
	}
	return cfgs, nil
}

func (ps *Pipelines) logChanges(pipeline string, changes []watertight.Change) {
	for _, c := range changes {
		ps.log.Info("config: changed", "pipeline", pipeline, "setting", c.Path, "from", c.Old, "to", c.New)
	}
}

// Pipeline returns the pipeline named name, or nil.
func (ps *Pipelines) Pipeline(name string) *watertight.Pipeline { return ps.byName[name] }

// Configs returns each pipeline's Config in force.
func (ps *Pipelines) Configs() map[string]watertight.Config {
	out := map[string]watertight.Config{}
	for name, p := range ps.byName {
		out[name] = p.Config()
	}
	return out
}

// Close closes the pipelines.
func (ps *Pipelines) Close() {
	for _, p := range ps.byName {
		p.Close()
	}
}

// Reload reads the file again and, if it changed since it was last read,
// applies it to every pipeline. A file that cannot be read or decoded, or
// that names a pipeline the service does not have or leaves one out,
// changes nothing. If a pipeline refuses its config, those already
// updated are put back to the configs they had. The error says why. It
// reports whether the file had changed.
func (ps *Pipelines) Reload() (bool, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	data, err := os.ReadFile(ps.path)
	if err != nil {
		return true, err
	}
	if bytes.Equal(data, ps.seen) {
		return false, nil
	}
	ps.seen = data
	cfgs, err := decode(data)
	if err != nil {
		return true, err
	}
	return true, ps.apply(cfgs)
}

// apply updates each pipeline to its config in cfgs. If one refuses, the
// pipelines already updated go back to the configs they had.
func (ps *Pipelines) apply(cfgs map[string]watertight.Config) error {
	for name := range cfgs {
		if ps.byName[name] == nil {
			return fmt.Errorf("%s: no such pipeline: pipelines cannot be added at run time", name)
		}
	}
	var done []string
	prev := ps.Configs()
	for _, name := range slices.Sorted(maps.Keys(ps.byName)) {
		cfg, ok := cfgs[name]
		if !ok {
			return ps.undo(done, prev, fmt.Errorf("%s: missing: pipelines cannot be removed at run time", name))
		}
		if err := ps.byName[name].Update(cfg); err != nil {
			return ps.undo(done, prev, fmt.Errorf("%s: %w", name, err))
		}
		done = append(done, name)
	}
	return nil
}

// undo puts the pipelines named in done back to their configs in prev,
// and returns err.
func (ps *Pipelines) undo(done []string, prev map[string]watertight.Config, err error) error {
	for _, name := range done {
		if uerr := ps.byName[name].Update(prev[name]); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}
	return err
}

// Follow reloads the file every poll and at each signal on hup, until ctx
// is done, and logs what came of it.
func (ps *Pipelines) Follow(ctx context.Context, poll time.Duration, hup <-chan os.Signal) {
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-hup:
			ps.log.Info("config: SIGHUP: reading the file again")
			ps.mu.Lock()
			ps.seen = nil // read it even if it did not change
			ps.mu.Unlock()
		}
		changed, err := ps.Reload()
		switch {
		case err != nil:
			ps.log.Error("config: invalid, keeping the last good config", "path", ps.path, "error", err)
		case changed:
			ps.log.Info("config: applied", "path", ps.path)
		}
	}
}
