package jsonconf

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/watertight/watertight/internal/fielderr"
	"github.com/watertight/watertight/policy"
)

type inner struct {
	Name string  `json:"name"`
	Rate float64 `json:"rate"`
}

type outer struct {
	Wait    time.Duration           `json:"wait"`
	Count   uint8                   `json:"count"`
	On      bool                    `json:"on"`
	Inners  []inner                 `json:"inners"`
	Reserve map[policy.Priority]int `json:"reserve"`
	Labels  map[string]string       `json:"labels"`
	Ptr     *inner                  `json:"ptr"`
	Hook    func()                  `json:"-"`
	Untag   int
}

func TestRoundTrip(t *testing.T) {
	in := outer{
		Wait: 1500 * time.Millisecond, Count: 255, On: true,
		Inners:  []inner{{Name: "a", Rate: 0.1}, {}},
		Reserve: map[policy.Priority]int{policy.PriorityCritical: 2, policy.PriorityDefault: 0},
		Labels:  map[string]string{"a b": "<&>"},
		Ptr:     &inner{},
	}
	out, err := Marshal(in)
	want := `{"wait":"1.5s","count":255,"on":true,"inners":[{"name":"a","rate":0.1},{}],"reserve":{"critical":2,"default":0},"labels":{"a b":"\u003c\u0026\u003e"},"ptr":{}}`
	if err != nil || string(out) != want {
		t.Fatalf("Marshal = %s, %v; want %s", out, err, want)
	}
	var back outer
	if err := Read(out, &back, nil); err != nil || !reflect.DeepEqual(back, in) {
		t.Fatalf("Read = %+v, %v; want %+v", back, err, in)
	}
}

func TestReadKeepsWhatIsLeftOut(t *testing.T) {
	called := false
	old := &inner{Name: "old", Rate: 1}
	o := outer{Count: 3, Hook: func() { called = true }, Untag: 7, Ptr: old}
	if err := Read([]byte(`{"wait": "1s", "ptr": {"rate": 2}}`), &o, nil); err != nil {
		t.Fatal(err)
	}
	if o.Count != 3 || o.Untag != 7 || o.Wait != time.Second || *o.Ptr != (inner{"old", 2}) || *old != (inner{"old", 1}) {
		t.Errorf("after Read: %+v, Ptr %+v, old %+v", o, *o.Ptr, *old)
	}
	o.Hook()
	if !called {
		t.Error("Hook not kept")
	}
}

func TestReadErrors(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{`{"count": 256}`, "count: want an integer from 0 to 255, got 256"},
		{`{"on": 1}`, "on: want true or false, got 1"},
		{`{"on": "true"}`, `on: want true or false, got "true"`},
		{`{"Untag": 1}`, "Untag: unknown field"},
		{`{"inners": [{}, {"name": 1}]}`, "inners[1].name: want a string, got 1"},
		{`{"labels": {"a.b": 1}}`, `labels["a.b"]: want a string, got 1`},
		{`{"wait": "` + strings.Repeat("9", 60) + `"}`, `wait: want a duration such as "1.5s", got "999999999999999999999999999999999999999...`},
		{`{"inners": [{}] x}`, "invalid character 'x' after object key:value pair"},
		{`{"inners": [{} x]}`, "inners: invalid character 'x' after array element"},
		{`{"count": 1} {}`, "data after the value"},
		{`{"count": 1`, "unexpected end of JSON input"},
		{`{"inners": [{}`, "inners: unexpected end of JSON input"},
	} {
		var o outer
		err := Read([]byte(tc.doc), &o, nil)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Read(%s) = %v; want %s...", tc.doc, err, tc.want)
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("Read(%s) = %T; want an *Error", tc.doc, err)
		}
	}
}

// TestCheckPaths: a check's *fielderr.Error is named by its JSON path;
// a Go path with no JSON field keeps its Go spelling.
func TestCheckPaths(t *testing.T) {
	for _, tc := range []struct{ field, want string }{
		{"Count", "count"},
		{"Inners[2].Rate", "inners[2].rate"},
		{"Reserve[critical]", "reserve.critical"},
		{"Labels[a b]", `labels["a b"]`},
		{"Ptr.Name", "ptr.name"},
		{"Hook", "Hook"},
		{"Untag", "Untag"},
		{"Count.X", "Count.X"},
		{"Inners[1", "Inners[1"},
		{"Nope", "Nope"},
	} {
		var o outer
		err := Read([]byte(`{}`), &o, func(outer) error { return fielderr.New("p", tc.field, "is wrong") })
		if want := tc.want + ": is wrong"; err == nil || err.Error() != want {
			t.Errorf("field %s: %v; want %s", tc.field, err, want)
		}
	}
	err := Read([]byte(`{}`), &outer{}, func(outer) error { return errors.New("plain") })
	if err == nil || err.Error() != "plain" {
		t.Errorf("a plain error: %v", err)
	}
}

func TestMarshalRefuses(t *testing.T) {
	for _, v := range []any{
		outer{Inners: []inner{{Rate: math.NaN()}}},
		outer{Ptr: &inner{Rate: math.Inf(-1)}},
		outer{Reserve: map[policy.Priority]int{7: 1}},
		struct {
			C chan int `json:"c"`
		}{C: make(chan int)},
	} {
		if out, err := Marshal(v); err == nil {
			t.Errorf("Marshal(%+v) = %s; want an error", v, out)
		}
	}
}

func TestPrefix(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&Error{Path: "limit", Msg: "m"}, "bulkhead.limit: m"},
		{&Error{Path: "[0].name", Msg: "m"}, "bulkhead[0].name: m"},
		{&Error{Msg: "m"}, "bulkhead: m"},
		{errors.New("m"), "bulkhead: m"},
	} {
		if got := Prefix("bulkhead", tc.err).Error(); got != tc.want {
			t.Errorf("Prefix(%v) = %s; want %s", tc.err, got, tc.want)
		}
	}
}
