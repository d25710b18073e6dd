package watertight_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/route"
)

// TestConfigRoute checks that each endpoint of Config.Route gets its own
// policies from the sections, named after it, unless it holds its own.
func TestConfigRoute(t *testing.T) {
	own, err := breaker.New(breaker.Config{Name: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	p, err := watertight.New("chat", watertight.Config{
		Breaker: &breaker.Config{ConsecutiveFailures: 3},
		Attempt: &deadline.Config{Timeout: time.Second},
		Route:   &route.Config{Endpoints: []route.Endpoint{{Name: "eu"}, {Name: "us", Breaker: own}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	r := p.Router()
	if r == nil || r.Name() != "chat" || p.Breaker() != nil {
		t.Fatalf("Router() = %v, Breaker() = %v; want the router named chat, and no shared breaker", r, p.Breaker())
	}
	eps := r.Endpoints()
	eu, ok := eps[0].Breaker.(*breaker.Breaker)
	if !ok || eu == own || eps[1].Breaker != own {
		t.Fatalf("endpoint breakers %v, %v; want a new one for eu and its own for us", eps[0].Breaker, eps[1].Breaker)
	}
	at, ok := eps[0].Attempt.(*deadline.Deadline)
	if !ok || at.Timeout() != time.Second || eps[1].Attempt == eps[0].Attempt {
		t.Fatalf("endpoint attempts %v, %v; want one each, of 1s", eps[0].Attempt, eps[1].Attempt)
	}
	for range 5 {
		p.Execute(context.Background(), func(ctx context.Context) error {
			if ep, _ := route.EndpointOf(ctx); ep.Name == "eu" {
				return errDependency
			}
			return nil
		})
	}
	if eu.State() == breaker.Closed && eu.Counts().TotalFailures == 0 {
		t.Errorf("eu's breaker saw none of its failures")
	}
}

func TestConfigRouteErrors(t *testing.T) {
	r, err := route.New(route.Config{Name: "r", Endpoints: []route.Endpoint{{Name: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  watertight.Config
		want string
	}{
		{watertight.Config{Route: &route.Config{}}, "watertight: Route: Config.Endpoints must not be empty"},
		{watertight.Config{Route: &route.Config{Endpoints: []route.Endpoint{{Name: "a"}, {Name: "a"}}}}, `watertight: Route: Config.Endpoints[1].Name "a"`},
		{watertight.Config{Breaker: &breaker.Config{FailureRatio: 2}, Route: &route.Config{Endpoints: []route.Endpoint{{Name: "a"}}}},
			`watertight: Breaker: Config.FailureRatio`},
		{watertight.Config{Route: &route.Config{Endpoints: []route.Endpoint{{Name: "a"}}}, Use: compose.Policies{Route: r}},
			"both Route and Use.Route"},
		{watertight.Config{Deadline: &deadline.Config{Timeout: time.Second}, Attempt: &deadline.Config{Timeout: time.Minute},
			Route: &route.Config{Endpoints: []route.Endpoint{{Name: "a"}}}}, "longer than"},
	} {
		p, err := watertight.New("chat", tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New = %v, %v; want an error with %q", p, err, tc.want)
		}
	}
}

// TestConfigRouteSectionNames checks that a section's own Name gets each
// endpoint's name added, and that a section is checked even when every
// endpoint holds its own policy.
func TestConfigRouteSectionNames(t *testing.T) {
	p, err := watertight.New("chat", watertight.Config{
		Breaker: &breaker.Config{Name: "chat-breaker"},
		Route:   &route.Config{Endpoints: []route.Endpoint{{Name: "eu"}, {Name: "us"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var got []string
	for _, e := range p.Router().Endpoints() {
		b := e.Breaker.(*breaker.Breaker)
		b.ForceOpen()
		var re *policy.RejectedError
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); errors.As(err, &re) {
			got = append(got, re.Name)
		}
	}
	if strings.Join(got, ",") != "chat-breaker.eu,chat-breaker.us" {
		t.Errorf("endpoint breakers named %v; want chat-breaker.eu and chat-breaker.us", got)
	}

	own, _ := breaker.New(breaker.Config{Name: "own"})
	defer own.Close()
	_, err = watertight.New("chat", watertight.Config{
		Breaker: &breaker.Config{FailureRatio: 7},
		Route:   &route.Config{Endpoints: []route.Endpoint{{Name: "eu", Breaker: own}}},
	})
	if err == nil || !strings.Contains(err.Error(), "watertight: Breaker: ") {
		t.Errorf("New with an invalid section no endpoint uses = %v; want the section's error", err)
	}
}
