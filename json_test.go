package watertight_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/retry"
	"github.com/watertight/watertight/route"
)

// TestConfigJSONRefuses reads documents that are malformed or describe an
// invalid Config: each fails, without a panic, with an error that names
// the value's JSON path.
func TestConfigJSONRefuses(t *testing.T) {
	deep := strings.Repeat("[", 200) + strings.Repeat("]", 200)
	for _, tc := range []struct{ doc, want string }{
		// Not a JSON object.
		{``, "unexpected end of JSON input"},
		{`   `, "unexpected end of JSON input"},
		{`[]`, "want an object, got []"},
		{`"bulkhead"`, `want an object, got "bulkhead"`},
		{`{"bulkhead": {"limit": 10}} x`, "invalid character 'x' after top-level value"},
		{`{"bulkhead": {"limit": 10}`, "unexpected end of JSON input"},
		{strings.Repeat("[", 20000), "invalid character '[' exceeded max depth"},
		// Unknown and repeated fields, at every level.
		{`{"bulkhed": {}}`, "bulkhed: unknown field"},
		{`{"Bulkhead": {"limit": 1}}`, "Bulkhead: unknown field"},
		{`{"": 1}`, `[""]: unknown field`},
		{`{"use": {}}`, "use: unknown field"},
		{`{"bulkhead": {"limt": 1}}`, "bulkhead.limt: unknown field"},
		{`{"bulkhead": {"limit": 1, "on_reject": null}}`, "bulkhead.on_reject: unknown field"},
		{`{"retry": {"budget": {}}}`, "retry.budget: unknown field"},
		{`{"route": {"endpoints": [{"name": "a", "wieght": 1}]}}`, "route.endpoints[0].wieght: unknown field"},
		{`{"bulkhead": {"x": {"y": ` + deep + `}}}`, "bulkhead.x: unknown field"},
		{`{"bulkhead": {"limit": 1, "limit": 2}}`, "bulkhead.limit: repeated field"},
		{`{"retry": {}, "retry": {}}`, "retry: repeated field"},
		// Wrong types.
		{`{"bulkhead": 3}`, "bulkhead: want an object, got 3"},
		{`{"bulkhead": [{"limit": 1}]}`, `bulkhead: want an object, got [{"limit": 1}]`},
		{`{"bulkhead": {"name": 7, "limit": 1}}`, "bulkhead.name: want a string, got 7"},
		{`{"bulkhead": {"limit": null}}`, "bulkhead.limit: want a number, got null"},
		{`{"bulkhead": {"limit": true}}`, "bulkhead.limit: want a number, got true"},
		{`{"bulkhead": {"limit": ` + deep + `}}`, "bulkhead.limit: want a number, got [[[["},
		{`{"retry": {"max_attempts": "3"}}`, `retry.max_attempts: want a number, got "3"`},
		{`{"retry": {"max_attempts": 2.5}}`, "retry.max_attempts: want an integer from"},
		{`{"retry": {"max_attempts": 1e3}}`, "retry.max_attempts: want an integer from"},
		{`{"bulkhead": {"limit": 3, "reserve": [1]}}`, "bulkhead.reserve: want an object, got [1]"},
		{`{"bulkhead": {"limit": 3, "reserve": {"critical": "1"}}}`, `bulkhead.reserve.critical: want a number, got "1"`},
		{`{"route": {"endpoints": {"name": "a"}}}`, "route.endpoints: want an array"},
		{`{"route": {"endpoints": [3]}}`, "route.endpoints[0]: want an object, got 3"},
		// Numbers out of the field's range, and strings for numbers JSON lacks.
		{`{"bulkhead": {"limit": 99999999999999999999}}`, "bulkhead.limit: want an integer from -9223372036854775808 to 9223372036854775807, got 99999999999999999999"},
		{`{"bulkhead": {"limit": 1` + strings.Repeat("0", 400) + `}}`, "bulkhead.limit: want an integer from"},
		{`{"breaker": {"min_requests": -1}}`, "breaker.min_requests: want an integer from 0 to 4294967295, got -1"},
		{`{"breaker": {"half_open_requests": 4294967296}}`, "breaker.half_open_requests: want an integer from 0 to 4294967295"},
		{`{"rate_limit": {"requests_per_second": 1e400}}`, "rate_limit.requests_per_second: want a number within float64's range, got 1e400"},
		{`{"rate_limit": {"requests_per_second": "NaN"}}`, `rate_limit.requests_per_second: want a number, got "NaN"`},
		{`{"rate_limit": {"tokens_per_minute": "Infinity"}}`, `rate_limit.tokens_per_minute: want a number, got "Infinity"`},
		// Durations.
		{`{"deadline": {"timeout": 30}}`, `deadline.timeout: want a duration string such as "1.5s", got 30`},
		{`{"deadline": {"timeout": "30"}}`, `deadline.timeout: want a duration such as "1.5s", got "30"`},
		{`{"deadline": {"timeout": "9999999999h"}}`, `deadline.timeout: want a duration such as "1.5s"`},
		{`{"deadline": {"timeout": "-1s"}}`, "deadline.timeout: must be > 0, got -1s"},
		{`{"attempt": {}}`, "attempt.timeout: must be > 0, got 0s"},
		{`{"rate_limit": {"max_hold": "1h", "max_wait": "-5m"}}`, "rate_limit.max_wait: must be >= 0, got -5m0s"},
		{`{"breaker": {"open_timeout": "-1ns"}}`, "breaker.open_timeout: must be >= 0, got -1ns"},
		{`{"adaptive": {"probe_interval": "-1s"}}`, "adaptive.probe_interval: must be >= 0 (0 means 30s), got -1s"},
		{`{"route": {"endpoints": [{"name": "a"}], "decay": "25h"}}`, "route.decay: must be >= 0 and at most 24h0m0s, got 25h0m0s"},
		// Values the policies' New refuse.
		{`{"bulkhead": {"limit": 0}}`, "bulkhead.limit: must be >= 1, got 0"},
		{`{"bulkhead": {}}`, "bulkhead.limit: must be >= 1, got 0"},
		{`{"bulkhead": {"limit": 1, "max_queue": -2}}`, "bulkhead.max_queue: must be >= 0 or Unbounded (-1), got -2"},
		{`{"bulkhead": {"limit": 1, "max_per_key": 2}}`, "bulkhead.max_per_key: needs FairShare"},
		{`{"bulkhead": {"limit": 1, "fair_share": true, "max_per_key": -1}}`, "bulkhead.max_per_key: must be >= 0, got -1"},
		{`{"adaptive": {"fair_share": 1}}`, "adaptive.fair_share: want true or false, got 1"},
		{`{"bulkhead": {"limit": 3, "reserve": {"urgent": 1}}}`, "bulkhead.reserve.urgent: unknown priority"},
		{`{"bulkhead": {"limit": 3, "reserve": {"sheddable": 1}}}`, "bulkhead.reserve.sheddable: must not be set"},
		{`{"bulkhead": {"limit": 3, "reserve": {"critical": 3}}}`, "bulkhead.reserve.critical: = 3 leaves no slot of 3 open"},
		{`{"bulkhead": {"limit": 3, "reserve": {"critical": 1, "critical": 1}}}`, "bulkhead.reserve.critical: repeated field"},
		{`{"adaptive": {"min_limit": 5, "max_limit": 3}}`, "adaptive.max_limit: must be >= MinLimit (5), got 3"},
		{`{"adaptive": {"tolerance": 0.5}}`, "adaptive.tolerance: must be finite and >= 1 (0 means 1.25), got 0.5"},
		{`{"adaptive": {"max_limit": 4, "reserve": {"default": -1}}}`, "adaptive.reserve.default: must be >= 0, got -1"},
		{`{"retry": {"max_attempts": -1}}`, "retry.max_attempts: must be >= 1, got -1"},
		{`{"retry": {"initial_interval": "2s", "max_interval": "1s"}}`, "retry.max_interval: (1s) must be >= Config.InitialInterval (2s)"},
		{`{"retry": {"jitter": 2}}`, "retry.jitter: must be at most 1, got 2"},
		{`{"rate_limit": {"burst": -1}}`, "rate_limit.burst: must be >= 0, got -1"},
		{`{"rate_limit": {"requests_per_second": -1}}`, "rate_limit.requests_per_second: must be a finite number >= 0, got -1"},
		{`{"breaker": {"failure_ratio": 2}}`, "breaker.failure_ratio: must be in [0, 1] (0 turns the rule off), got 2"},
		{`{"breaker": {"slow_call_ratio": 0.5}}`, "breaker.slow_call_duration: must be > 0 with SlowCallRatio set, got 0s"},
		{`{"breaker": {"slow_call_ratio": 0.5, "slow_call_duration": "1m", "window": "1m"}}`, "breaker.slow_call_duration: (1m0s) must be at most 9/10 of Window (1m0s)"},
		{`{"route": {"endpoints": [{}]}}`, "route.endpoints[0].name: must not be empty"},
		{`{"route": {"endpoints": [{"name": "a"}, {"name": "a"}]}}`, `route.endpoints[1].name: "a" is also endpoint 0's`},
		{`{"route": {"endpoints": [{"name": "a", "weight": 5000}]}}`, "route.endpoints[0].weight: must be 0 (1) or from 0.001 to 1000, got 5000"},
		{`{"route": {"endpoints": [{"name": "a", "max_concurrent": -1}]}}`, "route.endpoints[0].max_concurrent: must be >= 0 (0 means no cap), got -1"},
		{`{"route": {"endpoints": [{"name": "a"}], "outlier_factor": 1}}`, "route.outlier_factor: must be > 1, or negative for none, got 1"},
		{`{"route": {"endpoints": [` + strings.Repeat(`{"name": "a"},`, 64) + `{"name": "a"}]}}`, "route.endpoints: holds 65 endpoints, more than 64"},
		// Across sections, as New checks them.
		{`{"bulkhead": {"limit": 1}, "adaptive": {}}`, "adaptive: both bulkhead and adaptive set (they take the same slot)"},
		{`{"deadline": {"timeout": "1s"}, "attempt": {"timeout": "2s"}}`, "attempt.timeout: 2s is longer than deadline.timeout 1s"},
	} {
		before := watertight.Config{Retry: &retry.Config{MaxAttempts: 7}}
		cfg := before
		err := json.Unmarshal([]byte(tc.doc), &cfg)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Unmarshal(%.60s):\n got %v\nwant %s...", tc.doc, err, tc.want)
		}
		if !reflect.DeepEqual(cfg, before) {
			t.Errorf("Unmarshal(%.60s) failed but changed the Config to %+v", tc.doc, cfg)
		}
	}
}

// TestConfigJSONTrailingData gives UnmarshalJSON, which encoding/json
// hands one value, more than one.
func TestConfigJSONTrailingData(t *testing.T) {
	var cfg watertight.Config
	for _, doc := range []string{`{} {}`, `{"bulkhead": {"limit": 1}} x`} {
		if err := cfg.UnmarshalJSON([]byte(doc)); err == nil || !strings.Contains(err.Error(), "after") {
			t.Errorf("UnmarshalJSON(%s) = %v; want an error about data after the value", doc, err)
		}
	}
	var b bulkhead.Config
	if err := b.UnmarshalJSON([]byte(`{"limit": 1}]`)); err == nil {
		t.Errorf("bulkhead.Config.UnmarshalJSON with a trailing ] = nil")
	}
}

// TestConfigJSONNull: null leaves a section nil, and the whole Config
// unchanged.
func TestConfigJSONNull(t *testing.T) {
	cfg := watertight.Config{Bulkhead: &bulkhead.Config{Limit: 3}, Retry: &retry.Config{MaxAttempts: 2}}
	if err := json.Unmarshal([]byte(`{"bulkhead": null, "route": null}`), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Bulkhead != nil || cfg.Route != nil || cfg.Retry == nil || cfg.Retry.MaxAttempts != 2 {
		t.Errorf("after null sections: %+v; want Bulkhead and Route nil, Retry kept", cfg)
	}
	if err := json.Unmarshal([]byte(`null`), &cfg); err != nil || cfg.Retry == nil {
		t.Errorf("Unmarshal(null) = %v, %+v; want the Config unchanged", err, cfg)
	}
}

// TestConfigJSONKeepsWhatIsNotData: reading sets the data fields and
// leaves the hooks and Use, which JSON does not hold.
func TestConfigJSONKeepsWhatIsNotData(t *testing.T) {
	called := false
	cfg := watertight.Config{Bulkhead: &bulkhead.Config{Limit: 1, OnReject: func(context.Context, *policy.RejectedError) { called = true }}}
	if err := json.Unmarshal([]byte(`{"bulkhead": {"limit": 5}}`), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Bulkhead.Limit != 5 || cfg.Bulkhead.OnReject == nil {
		t.Fatalf("Bulkhead = %+v; want Limit 5 and OnReject kept", cfg.Bulkhead)
	}
	cfg.Bulkhead.OnReject(nil, nil)
	if !called {
		t.Error("OnReject is not the one set before reading")
	}
	out, err := json.Marshal(watertight.Config{Retry: &retry.Config{MaxAttempts: 2, ShouldRetry: func(error) bool { return true }, Budget: &retry.Budget{}}})
	if err != nil || string(out) != `{"retry":{"max_attempts":2}}` {
		t.Errorf("Marshal = %s, %v; want the hooks and Budget left out", out, err)
	}
}

// TestConfigJSONSectionsAlone: each policy package's Config writes and
// reads the same JSON on its own, durations as strings.
func TestConfigJSONSectionsAlone(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{bulkhead.Config{Limit: 2, MaxWait: 1500 * time.Millisecond, Reserve: map[policy.Priority]int{policy.PriorityCritical: 1}}, `{"limit":2,"max_wait":"1.5s","reserve":{"critical":1}}`},
		{bulkhead.Config{Limit: 2, FairShare: true, MaxPerKey: 1}, `{"limit":2,"fair_share":true,"max_per_key":1}`},
		{adaptive.Config{MaxLimit: 50, ProbeInterval: time.Minute, Tolerance: 1.5}, `{"max_limit":50,"tolerance":1.5,"probe_interval":"1m0s"}`},
		{deadline.Config{Name: "d", Timeout: time.Second}, `{"name":"d","timeout":"1s"}`},
		{retry.Config{MaxAttempts: 4, MaxInterval: 2 * time.Second, Jitter: -1}, `{"max_attempts":4,"max_interval":"2s","jitter":-1}`},
		{ratelimit.Config{RequestsPerSecond: 0.5, MaxHold: time.Hour}, `{"requests_per_second":0.5,"max_hold":"1h0m0s"}`},
		{breaker.Config{FailureRatio: 0.25, Window: 10 * time.Second, HalfOpenRequests: 2}, `{"failure_ratio":0.25,"window":"10s","half_open_requests":2}`},
		{route.Config{Endpoints: []route.Endpoint{{Name: "a", Weight: 2}, {Name: "b", MaxConcurrent: 10}}, Decay: 5 * time.Second}, `{"endpoints":[{"name":"a","weight":2},{"name":"b","max_concurrent":10}],"decay":"5s"}`},
	} {
		out, err := json.Marshal(tc.v)
		if err != nil || string(out) != tc.want {
			t.Errorf("Marshal(%T) = %s, %v; want %s", tc.v, out, err, tc.want)
			continue
		}
		back := reflect.New(reflect.TypeOf(tc.v))
		if err := json.Unmarshal(out, back.Interface()); err != nil || !reflect.DeepEqual(back.Elem().Interface(), tc.v) {
			t.Errorf("Unmarshal(%s) = %+v, %v; want %+v", out, back.Elem().Interface(), err, tc.v)
		}
	}
	var rc route.Config
	if err := json.Unmarshal([]byte(`{"endpoints": [{"name": "a"}]}`), &rc); err != nil {
		t.Errorf("route.Config without a name: %v; want it read, as watertight.New names it", err)
	}
	if _, err := route.New(rc); err == nil {
		t.Error("route.New of a Config read without a name succeeded")
	}
}

// TestConfigJSONWritesBackWhatItRead: a document read and written back
// gives the same document, zero fields left out.
func TestConfigJSONWritesBackWhatItRead(t *testing.T) {
	docs := []string{
		`{}`,
		`{"breaker":{}}`,
		`{"bulkhead":{"name":"b","limit":10,"max_queue":-1,"max_wait":"1.5s","reserve":{"critical":2,"default":1}},"deadline":{"timeout":"30s"},"retry":{"max_attempts":5,"initial_interval":"250ms","max_interval":"8s","jitter":0.25},"rate_limit":{"requests_per_second":12.5,"burst":3,"tokens_per_minute":90000,"token_burst":4000,"max_hold":"2m0s","max_wait":"20s"},"breaker":{"consecutive_failures":3,"failure_ratio":0.5,"min_requests":20,"slow_call_ratio":0.3,"slow_call_duration":"5s","slow_call_min_calls":4,"window":"1m0s","open_timeout":"45s","half_open_requests":2},"attempt":{"timeout":"10s"},"route":{"name":"r","endpoints":[{"name":"eu","weight":2,"max_concurrent":10},{"name":"us"}],"decay":"5s","outlier_factor":-1,"max_ejected_share":1,"probe_interval":"3s"}}`,
		`{"adaptive":{"min_limit":2,"max_limit":100,"initial_limit":10,"max_queue":5,"max_wait":"1s","reserve":{},"tolerance":1.5,"probe_interval":"1m0s"}}`,
	}
	quick, err := os.ReadFile("testdata/quickstart.json")
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, quick); err != nil {
		t.Fatal(err)
	}
	for _, doc := range append(docs, compact.String()) {
		var cfg watertight.Config
		if err := json.Unmarshal([]byte(doc), &cfg); err != nil {
			t.Errorf("Unmarshal(%s): %v", doc, err)
			continue
		}
		if out, err := json.Marshal(cfg); err != nil || string(out) != doc {
			t.Errorf("read and written back:\n got %s, %v\nwant %s", out, err, doc)
		}
		p, err := watertight.New("p", cfg)
		if err != nil {
			t.Errorf("New from %s: %v", doc, err)
		}
		p.Close()
	}
}

// TestConfigJSONRoundTrip: reading back what Marshal wrote of a valid
// Config gives the same Config, and the same bytes written again.
func TestConfigJSONRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genValidConfig().Draw(t, "cfg")
		out, err := json.Marshal(cfg)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		var back watertight.Config
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("Unmarshal(%s): %v", out, err)
		}
		if !reflect.DeepEqual(back, cfg) {
			t.Fatalf("%s read back as\n%+v\nwant %+v", out, back, cfg)
		}
		if again, err := json.Marshal(back); err != nil || !bytes.Equal(again, out) {
			t.Fatalf("written again: %s, %v; want %s", again, err, out)
		}
		p, err := watertight.New("p", back)
		if err != nil {
			t.Fatalf("New(%s): %v", out, err)
		}
		p.Close()
	})
}

// TestConfigJSONRefusesWhatNewRefuses: for random Configs, valid or not,
// reading what Marshal wrote fails exactly when watertight.New fails, and
// otherwise gives the same Config.
func TestConfigJSONRefusesWhatNewRefuses(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig().Draw(t, "cfg")
		out, err := json.Marshal(cfg)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		var back watertight.Config
		readErr := json.Unmarshal(out, &back)
		p, newErr := watertight.New("p", cfg)
		p.Close()
		if cfg.Route != nil && len(cfg.Route.Endpoints) == 0 && readErr == nil {
			// Read, for the endpoints an HTTP client or an update fills in.
			return
		}
		if (readErr == nil) != (newErr == nil) {
			t.Fatalf("%s:\nUnmarshal: %v\nNew: %v", out, readErr, newErr)
		}
		if readErr == nil && !reflect.DeepEqual(back, cfg) {
			t.Fatalf("%s read back as\n%+v\nwant %+v", out, back, cfg)
		}
	})
}

// genConfig draws Configs whose fields lie mostly in their valid ranges,
// and sometimes just outside them.
func genConfig() *rapid.Generator[watertight.Config] {
	return rapid.Custom(func(t *rapid.T) watertight.Config {
		var c watertight.Config
		switch rapid.IntRange(0, 2).Draw(t, "slot") {
		case 1:
			c.Bulkhead = &bulkhead.Config{
				Name: genName().Draw(t, "name"), Limit: rapid.IntRange(0, 50).Draw(t, "limit"),
				MaxQueue: rapid.IntRange(-2, 20).Draw(t, "max_queue"), MaxWait: genDuration().Draw(t, "max_wait"),
				Reserve: genReserve().Draw(t, "reserve"), FairShare: rapid.Bool().Draw(t, "fair_share"),
				MaxPerKey: rapid.IntRange(-1, 5).Draw(t, "max_per_key"),
			}
		case 2:
			c.Adaptive = &adaptive.Config{
				MinLimit: rapid.IntRange(-1, 10).Draw(t, "min"), MaxLimit: rapid.IntRange(0, 300).Draw(t, "max"),
				InitialLimit: rapid.IntRange(0, 30).Draw(t, "initial"), MaxQueue: rapid.IntRange(-1, 20).Draw(t, "max_queue"),
				MaxWait: genDuration().Draw(t, "max_wait"), Reserve: genReserve().Draw(t, "reserve"),
				Tolerance: rapid.Float64Range(0.5, 3).Draw(t, "tolerance"), ProbeInterval: genDuration().Draw(t, "probe"),
				FairShare: rapid.Bool().Draw(t, "fair_share"), MaxPerKey: rapid.IntRange(-1, 5).Draw(t, "max_per_key"),
			}
		}
		c.Deadline = maybe(t, "deadline", genDeadline())
		c.Attempt = maybe(t, "attempt", genDeadline())
		c.Retry = maybe(t, "retry", rapid.Custom(func(t *rapid.T) retry.Config {
			return retry.Config{
				Name: genName().Draw(t, "name"), MaxAttempts: rapid.IntRange(-1, 10).Draw(t, "attempts"),
				InitialInterval: genDuration().Draw(t, "initial"), MaxInterval: genDuration().Draw(t, "max"),
				Jitter: rapid.Float64Range(-1, 1.2).Draw(t, "jitter"),
			}
		}))
		c.RateLimit = maybe(t, "rate_limit", rapid.Custom(func(t *rapid.T) ratelimit.Config {
			return ratelimit.Config{
				RequestsPerSecond: rapid.Float64Range(-0.1, 1e6).Draw(t, "rps"), Burst: rapid.IntRange(-1, 100).Draw(t, "burst"),
				TokensPerMinute: rapid.Float64Range(0, 1e9).Draw(t, "tpm"), TokenBurst: rapid.IntRange(0, 1e6).Draw(t, "token_burst"),
				MaxHold: genDuration().Draw(t, "max_hold"), MaxWait: genDuration().Draw(t, "max_wait"),
			}
		}))
		c.Breaker = maybe(t, "breaker", genBreaker())
		c.Route = maybe(t, "route", genRoute())
		return c
	})
}

func maybe[T any](t *rapid.T, label string, g *rapid.Generator[T]) *T {
	if !rapid.Bool().Draw(t, label+"?") {
		return nil
	}
	v := g.Draw(t, label)
	return &v
}

func genName() *rapid.Generator[string] {
	return rapid.OneOf(rapid.Just(""), rapid.SampledFrom([]string{"a", "b", "llm.eu", "ü \"q\""}), rapid.String())
}

// genDuration draws durations, mostly valid: a few negative, and the
// extremes.
func genDuration() *rapid.Generator[time.Duration] {
	return rapid.OneOf(
		rapid.Just(time.Duration(0)),
		rapid.Map(rapid.Int64Range(-2, int64(time.Hour)), func(n int64) time.Duration { return time.Duration(n) }),
		rapid.SampledFrom([]time.Duration{time.Millisecond, time.Second, 24 * time.Hour, math.MaxInt64, math.MinInt64}),
	)
}

func genReserve() *rapid.Generator[map[policy.Priority]int] {
	return rapid.OneOf(
		rapid.Just[map[policy.Priority]int](nil),
		rapid.MapOfN(rapid.SampledFrom([]policy.Priority{policy.PrioritySheddable, policy.PriorityDefault, policy.PriorityCritical}),
			rapid.IntRange(-1, 10), 0, 3),
	)
}

func genDeadline() *rapid.Generator[deadline.Config] {
	return rapid.Custom(func(t *rapid.T) deadline.Config {
		return deadline.Config{Name: genName().Draw(t, "name"), Timeout: genDuration().Draw(t, "timeout")}
	})
}

func genBreaker() *rapid.Generator[breaker.Config] {
	return rapid.Custom(func(t *rapid.T) breaker.Config {
		c := breaker.Config{
			ConsecutiveFailures: rapid.Uint32().Draw(t, "consecutive"), FailureRatio: rapid.Float64Range(-0.1, 1).Draw(t, "ratio"),
			MinRequests: rapid.Uint32().Draw(t, "min_requests"), Window: genDuration().Draw(t, "window"),
			OpenTimeout: genDuration().Draw(t, "open"), HalfOpenRequests: rapid.Uint32Range(0, 10).Draw(t, "half_open"),
		}
		if rapid.Bool().Draw(t, "slow?") {
			c.SlowCallRatio = rapid.Float64Range(0, 1).Draw(t, "slow_ratio")
			c.SlowCallDuration = genDuration().Draw(t, "slow_duration")
			c.SlowCallMinCalls = rapid.Uint32().Draw(t, "slow_min")
		}
		return c
	})
}

func genRoute() *rapid.Generator[route.Config] {
	return rapid.Custom(func(t *rapid.T) route.Config {
		eps := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) route.Endpoint {
			return route.Endpoint{
				Name:          rapid.SampledFrom([]string{"", "a", "b", "c", "d"}).Draw(t, "name"),
				Weight:        rapid.OneOf(rapid.Just(0.0), rapid.Float64Range(0, 1001)).Draw(t, "weight"),
				MaxConcurrent: rapid.IntRange(-1, 100).Draw(t, "max_concurrent"),
			}
		}), 0, 4).Draw(t, "endpoints")
		return route.Config{
			Name: genName().Draw(t, "name"), Endpoints: eps, Decay: genDuration().Draw(t, "decay"),
			OutlierFactor:   rapid.Float64Range(-1, 10).Draw(t, "outlier"),
			MaxEjectedShare: rapid.Float64Range(0, 1.1).Draw(t, "share"),
			ProbeInterval:   genDuration().Draw(t, "probe"),
		}
	})
}

// FuzzConfigJSON reads any bytes as a Config; one that is read is written
// and read again to the same Config and the same bytes, and New accepts
// it, unless it has a route with no endpoints (which JSON may leave to an
// HTTP client's HTTPOptions): New refuses that, naming the endpoints.
func FuzzConfigJSON(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		var cfg watertight.Config
		if err := json.Unmarshal(data, &cfg); err != nil {
			if err.Error() == "" {
				t.Fatal("an error without text")
			}
			return
		}
		out, err := json.Marshal(cfg)
		if err != nil {
			t.Fatalf("Marshal of a Config read from %q: %v", data, err)
		}
		var back watertight.Config
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("%s, written from %q, does not read back: %v", out, data, err)
		}
		if !reflect.DeepEqual(back, cfg) {
			t.Fatalf("%s read back as %+v; want %+v", out, back, cfg)
		}
		if again, err := json.Marshal(back); err != nil || !bytes.Equal(again, out) {
			t.Fatalf("written again: %s, %v; want %s", again, err, out)
		}
		p, err := watertight.New("p", cfg)
		if cfg.Route != nil && len(cfg.Route.Endpoints) == 0 {
			if err == nil || !strings.Contains(err.Error(), "Endpoints") {
				t.Fatalf("New of %s, a route with no endpoints: %v, want an error naming the endpoints", out, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("New refuses %s, which reads: %v", out, err)
		}
		p.Close()
	})
}

// genValidConfig draws Configs that New accepts.
func genValidConfig() *rapid.Generator[watertight.Config] {
	return rapid.Custom(func(t *rapid.T) watertight.Config {
		var c watertight.Config
		switch rapid.IntRange(0, 2).Draw(t, "slot") {
		case 1:
			limit := rapid.IntRange(1, 50).Draw(t, "limit")
			c.Bulkhead = &bulkhead.Config{
				Name: genName().Draw(t, "name"), Limit: limit,
				MaxQueue: rapid.IntRange(-1, 20).Draw(t, "max_queue"), MaxWait: genValidDuration(math.MaxInt64).Draw(t, "max_wait"),
				Reserve: genValidReserve(limit).Draw(t, "reserve"),
			}
			c.Bulkhead.FairShare, c.Bulkhead.MaxPerKey = drawValidKeys(t)
		case 2:
			a := genValidAdaptive().Draw(t, "adaptive")
			c.Adaptive = &a
		}
		c.Deadline = maybe(t, "deadline", genValidDeadline(math.MaxInt64))
		maxAttempt := time.Duration(math.MaxInt64)
		if c.Deadline != nil {
			maxAttempt = c.Deadline.Timeout
		}
		c.Attempt = maybe(t, "attempt", genValidDeadline(maxAttempt))
		c.Retry = maybe(t, "retry", genValidRetry())
		c.RateLimit = maybe(t, "rate_limit", rapid.Custom(func(t *rapid.T) ratelimit.Config {
			return ratelimit.Config{
				Name:              genName().Draw(t, "name"),
				RequestsPerSecond: rapid.Float64Range(0, 1e6).Draw(t, "rps"), Burst: rapid.IntRange(0, 100).Draw(t, "burst"),
				TokensPerMinute: rapid.Float64Range(0, 1e9).Draw(t, "tpm"), TokenBurst: rapid.IntRange(0, 1e6).Draw(t, "token_burst"),
				MaxHold: genValidDuration(math.MaxInt64).Draw(t, "max_hold"), MaxWait: genValidDuration(math.MaxInt64).Draw(t, "max_wait"),
			}
		}))
		c.Breaker = maybe(t, "breaker", genValidBreaker())
		c.Route = maybe(t, "route", genValidRoute())
		return c
	})
}

// genValidDuration draws durations from 0 to most.
func genValidDuration(most time.Duration) *rapid.Generator[time.Duration] {
	return rapid.OneOf(
		rapid.Just(time.Duration(0)),
		rapid.Just(most),
		rapid.Map(rapid.Int64Range(0, int64(min(most, time.Hour))), func(n int64) time.Duration { return time.Duration(n) }),
		rapid.Map(rapid.Int64Range(0, int64(most)), func(n int64) time.Duration { return time.Duration(n) }),
	)
}

func genValidDeadline(most time.Duration) *rapid.Generator[deadline.Config] {
	return rapid.Custom(func(t *rapid.T) deadline.Config {
		d := genValidDuration(most).Draw(t, "timeout")
		return deadline.Config{Name: genName().Draw(t, "name"), Timeout: max(d, 1)}
	})
}

// genValidReserve draws reserves that leave a slot of limit open.
func genValidReserve(limit int) *rapid.Generator[map[policy.Priority]int] {
	return rapid.Custom(func(t *rapid.T) map[policy.Priority]int {
		if rapid.Bool().Draw(t, "nil") {
			return nil
		}
		r := map[policy.Priority]int{}
		for _, p := range []policy.Priority{policy.PriorityDefault, policy.PriorityCritical} {
			if rapid.Bool().Draw(t, p.String()+"?") {
				r[p] = rapid.IntRange(0, (limit-1)/2).Draw(t, p.String())
			}
		}
		return r
	})
}

// drawValidKeys draws a valid FairShare and MaxPerKey: a cap needs the
// fair share.
func drawValidKeys(t *rapid.T) (fair bool, maxPerKey int) {
	if fair = rapid.Bool().Draw(t, "fair_share"); fair {
		maxPerKey = rapid.IntRange(0, 5).Draw(t, "max_per_key")
	}
	return fair, maxPerKey
}

func genValidAdaptive() *rapid.Generator[adaptive.Config] {
	return rapid.Custom(func(t *rapid.T) adaptive.Config {
		c := adaptive.Config{
			Name: genName().Draw(t, "name"), MinLimit: rapid.IntRange(0, 10).Draw(t, "min"),
			MaxQueue: rapid.IntRange(-1, 20).Draw(t, "max_queue"), MaxWait: genValidDuration(math.MaxInt64).Draw(t, "max_wait"),
			ProbeInterval: genValidDuration(math.MaxInt64).Draw(t, "probe"),
		}
		c.FairShare, c.MaxPerKey = drawValidKeys(t)
		lo, hi := max(c.MinLimit, adaptive.DefaultMinLimit), adaptive.DefaultMaxLimit
		if rapid.Bool().Draw(t, "max?") {
			c.MaxLimit = rapid.IntRange(lo, 300).Draw(t, "max")
			hi = c.MaxLimit
		}
		if rapid.Bool().Draw(t, "initial?") {
			c.InitialLimit = rapid.IntRange(lo, hi).Draw(t, "initial")
		}
		c.Reserve = genValidReserve(hi).Draw(t, "reserve")
		if rapid.Bool().Draw(t, "tolerance?") {
			c.Tolerance = rapid.Float64Range(1, 3).Draw(t, "tolerance")
		}
		return c
	})
}

func genValidRetry() *rapid.Generator[retry.Config] {
	return rapid.Custom(func(t *rapid.T) retry.Config {
		c := retry.Config{
			Name: genName().Draw(t, "name"), MaxAttempts: rapid.IntRange(0, 10).Draw(t, "attempts"),
			InitialInterval: genValidDuration(time.Hour).Draw(t, "initial"), Jitter: rapid.Float64Range(-1, 1).Draw(t, "jitter"),
		}
		initial := cmp.Or(c.InitialInterval, 100*time.Millisecond)
		if initial > 10*time.Second || rapid.Bool().Draw(t, "max?") {
			c.MaxInterval = initial + genValidDuration(math.MaxInt64-initial).Draw(t, "max")
		}
		return c
	})
}

func genValidBreaker() *rapid.Generator[breaker.Config] {
	return rapid.Custom(func(t *rapid.T) breaker.Config {
		c := breaker.Config{
			Name:                genName().Draw(t, "name"),
			ConsecutiveFailures: rapid.Uint32().Draw(t, "consecutive"), FailureRatio: rapid.Float64Range(0, 1).Draw(t, "ratio"),
			MinRequests: rapid.Uint32().Draw(t, "min_requests"), OpenTimeout: genValidDuration(math.MaxInt64).Draw(t, "open"),
			HalfOpenRequests: rapid.Uint32Range(0, 10).Draw(t, "half_open"),
		}
		if rapid.Bool().Draw(t, "window?") {
			c.Window = time.Duration(rapid.Int64Range(10, int64(24*time.Hour)).Draw(t, "window"))
		}
		if rapid.Bool().Draw(t, "slow?") {
			bucket := cmp.Or(c.Window, breaker.DefaultWindow) / 10
			c.SlowCallRatio = rapid.Float64Range(0.01, 1).Draw(t, "slow_ratio")
			c.SlowCallDuration = time.Duration(rapid.Int64Range(1, int64(9*bucket)).Draw(t, "slow_duration"))
			c.SlowCallMinCalls = rapid.Uint32().Draw(t, "slow_min")
		}
		return c
	})
}

func genValidRoute() *rapid.Generator[route.Config] {
	return rapid.Custom(func(t *rapid.T) route.Config {
		names := rapid.Permutation([]string{"a", "b", "eu", "us-1"}).Draw(t, "names")
		eps := make([]route.Endpoint, rapid.IntRange(1, 4).Draw(t, "n"))
		for i := range eps {
			eps[i] = route.Endpoint{Name: names[i], MaxConcurrent: rapid.IntRange(0, 100).Draw(t, "max_concurrent")}
			if rapid.Bool().Draw(t, "weight?") {
				eps[i].Weight = rapid.Float64Range(0.001, 1000).Draw(t, "weight")
			}
		}
		c := route.Config{
			Name: genName().Draw(t, "name"), Endpoints: eps,
			Decay: genValidDuration(24*time.Hour).Draw(t, "decay"), ProbeInterval: genValidDuration(24*time.Hour).Draw(t, "probe"),
		}
		switch rapid.IntRange(0, 2).Draw(t, "outlier?") {
		case 1:
			c.OutlierFactor = rapid.Float64Range(1.001, 10).Draw(t, "outlier")
		case 2:
			c.OutlierFactor = -rapid.Float64Range(0.001, 10).Draw(t, "outlier")
		}
		if rapid.Bool().Draw(t, "share?") {
			c.MaxEjectedShare = rapid.Float64Range(0.01, 1).Draw(t, "share")
		}
		return c
	})
}
