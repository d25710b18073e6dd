package grpcpolicy_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/grpcpolicy"
	"github.com/watertight/watertight/policy"
)

// FuzzParsePushback: never panics, never negative, and agrees with
// strconv on the values it accepts.
func FuzzParsePushback(f *testing.F) {
	for _, s := range []string{"0", "1500", "-1", "+5", "", " 1", "1.5", "99999999999999999999", "9223372036855", "\x00"} {
		f.Add(s, false)
	}
	f.Add("10", true)
	f.Fuzz(func(t *testing.T, v string, twice bool) {
		vals := []string{v}
		if twice {
			vals = append(vals, v)
		}
		pb := grpcpolicy.ParsePushback(metadata.MD{grpcpolicy.PushbackKey: vals})
		if !pb.Set || pb.Delay < 0 || (pb.Stop && pb.Delay != 0) {
			t.Fatalf("ParsePushback(%q) = %+v", vals, pb)
		}
		digits := v != ""
		for i := 0; i < len(v); i++ {
			digits = digits && v[i] >= '0' && v[i] <= '9'
		}
		if twice || !digits {
			if !pb.Stop {
				t.Fatalf("ParsePushback(%q) = %+v, want Stop", vals, pb)
			}
			return
		}
		if pb.Stop {
			t.Fatalf("ParsePushback(%q) = %+v, want a delay", vals, pb)
		}
		ms, err := strconv.ParseInt(v, 10, 64)
		if err == nil && ms <= int64(1<<63-1)/int64(time.Millisecond) {
			if pb.Delay != time.Duration(ms)*time.Millisecond {
				t.Fatalf("ParsePushback(%q) = %v, want %dms", v, pb.Delay, ms)
			}
		} else if pb.Delay != time.Duration(1<<63-1) {
			t.Fatalf("ParsePushback(%q) = %v, want saturation", v, pb.Delay)
		}
	})
}

// FuzzMethodsKey: NewClient and NewServer never panic on a Methods key,
// accept exactly "/service" and "/service/method" (non-empty parts, no
// further slash), and route a call of an accepted full method name to it.
func FuzzMethodsKey(f *testing.F) {
	for _, k := range []string{"/a", "/a/b", "a/b", "/", "//", "/a/", "/a//b", "/a/b/c", "", "/pkg.Svc/Method"} {
		f.Add(k)
	}
	valid := regexp.MustCompile(`^/[^/]+(/[^/]+)?$`)
	bh, err := bulkhead.New(bulkhead.Config{Limit: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, key string) {
		m := map[string]policy.Policy{key: bh}
		c, cerr := grpcpolicy.NewClient(grpcpolicy.ClientConfig{Methods: m})
		_, serr := grpcpolicy.NewServer(grpcpolicy.ServerConfig{Methods: m})
		want := valid.MatchString(key)
		if (cerr == nil) != want || (serr == nil) != want {
			t.Fatalf("key %q: NewClient %v, NewServer %v; valid = %v", key, cerr, serr, want)
		}
		if !want || strings.Count(key, "/") != 2 {
			return
		}
		ran := false
		inv := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
			ran = bh.Active() == 1
			return nil
		}
		if err := c.UnaryInterceptor()(context.Background(), key, nil, nil, nil, inv); err != nil || !ran {
			t.Fatalf("call of %q: %v, guarded = %v", key, err, ran)
		}
	})
}
