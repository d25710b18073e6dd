package grpcpolicy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/grpcpolicy"
)

func TestParsePushback(t *testing.T) {
	maxD := time.Duration(1<<63 - 1)
	for _, tc := range []struct {
		vals []string // nil: no trailer
		want grpcpolicy.Pushback
	}{
		{nil, grpcpolicy.Pushback{}},
		{[]string{"0"}, grpcpolicy.Pushback{Set: true}},
		{[]string{"1500"}, grpcpolicy.Pushback{Set: true, Delay: 1500 * time.Millisecond}},
		{[]string{"007"}, grpcpolicy.Pushback{Set: true, Delay: 7 * time.Millisecond}},
		{[]string{"99999999999999999999999"}, grpcpolicy.Pushback{Set: true, Delay: maxD}},
		{[]string{"9223372036854"}, grpcpolicy.Pushback{Set: true, Delay: 9223372036854 * time.Millisecond}},
		{[]string{"9223372036855"}, grpcpolicy.Pushback{Set: true, Delay: maxD}},
		{[]string{"-1"}, grpcpolicy.Pushback{Set: true, Stop: true}},
		{[]string{"+5"}, grpcpolicy.Pushback{Set: true, Stop: true}},
		{[]string{""}, grpcpolicy.Pushback{Set: true, Stop: true}},
		{[]string{" 5"}, grpcpolicy.Pushback{Set: true, Stop: true}},
		{[]string{"1.5"}, grpcpolicy.Pushback{Set: true, Stop: true}},
		{[]string{"1", "2"}, grpcpolicy.Pushback{Set: true, Stop: true}},
	} {
		var md metadata.MD
		if tc.vals != nil {
			md = metadata.MD{grpcpolicy.PushbackKey: tc.vals}
		}
		if got := grpcpolicy.ParsePushback(md); got != tc.want {
			t.Errorf("ParsePushback(%q) = %+v, want %+v", tc.vals, got, tc.want)
		}
	}
}

func TestDefaultClassify(t *testing.T) {
	delay := grpcpolicy.Pushback{Set: true, Delay: time.Second}
	stop := grpcpolicy.Pushback{Set: true, Stop: true}
	for _, tc := range []struct {
		code codes.Code
		pb   grpcpolicy.Pushback
		want grpcpolicy.Verdict
	}{
		{codes.Unavailable, grpcpolicy.Pushback{}, grpcpolicy.Retryable},
		{codes.Unavailable, delay, grpcpolicy.Retryable},
		{codes.Unavailable, stop, grpcpolicy.Failure},
		{codes.ResourceExhausted, grpcpolicy.Pushback{}, grpcpolicy.CallerError},
		{codes.ResourceExhausted, delay, grpcpolicy.Retryable},
		{codes.ResourceExhausted, stop, grpcpolicy.CallerError},
		{codes.DeadlineExceeded, grpcpolicy.Pushback{}, grpcpolicy.Failure},
		{codes.Internal, delay, grpcpolicy.Failure},
		{codes.Unknown, grpcpolicy.Pushback{}, grpcpolicy.Failure},
		{codes.DataLoss, grpcpolicy.Pushback{}, grpcpolicy.Failure},
		{codes.InvalidArgument, delay, grpcpolicy.CallerError},
		{codes.NotFound, grpcpolicy.Pushback{}, grpcpolicy.CallerError},
		{codes.AlreadyExists, grpcpolicy.Pushback{}, grpcpolicy.CallerError},
		{codes.PermissionDenied, grpcpolicy.Pushback{}, grpcpolicy.CallerError},
		{codes.Unauthenticated, grpcpolicy.Pushback{}, grpcpolicy.CallerError},
		{codes.FailedPrecondition, grpcpolicy.Pushback{}, grpcpolicy.CallerError},
		{codes.Aborted, grpcpolicy.Pushback{}, grpcpolicy.CallerError},
		{codes.OutOfRange, grpcpolicy.Pushback{}, grpcpolicy.CallerError},
		{codes.Unimplemented, grpcpolicy.Pushback{}, grpcpolicy.CallerError},
		{codes.Canceled, grpcpolicy.Pushback{}, grpcpolicy.CallerError},
	} {
		if got := grpcpolicy.DefaultClassify(tc.code, tc.pb); got != tc.want {
			t.Errorf("DefaultClassify(%v, %+v) = %v, want %v", tc.code, tc.pb, got, tc.want)
		}
	}
	if s := grpcpolicy.Verdict(9).String(); s != "Verdict(9)" {
		t.Errorf("String = %q", s)
	}
}

func TestDefaultServerIsFailure(t *testing.T) {
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		want := c == codes.Unknown || c == codes.Internal || c == codes.Unavailable || c == codes.DataLoss || c == codes.DeadlineExceeded
		if got := grpcpolicy.DefaultServerIsFailure(c); got != want {
			t.Errorf("DefaultServerIsFailure(%v) = %v", c, got)
		}
	}
}

func TestStatusError(t *testing.T) {
	orig := status.Error(codes.Unavailable, "down")
	se := &grpcpolicy.StatusError{Err: orig, Code: codes.Unavailable, Pushback: grpcpolicy.Pushback{Set: true, Delay: time.Second}}
	if se.Error() != orig.Error() || !errors.Is(se, orig) || status.Code(se) != codes.Unavailable {
		t.Errorf("StatusError %v does not stand for %v", se, orig)
	}
	if se.RetryAfter() != time.Second || se.ErrorType() != "UNAVAILABLE" {
		t.Errorf("RetryAfter %v, ErrorType %q", se.RetryAfter(), se.ErrorType())
	}
	se.Pushback.Delay = 0
	if se.RetryAfter() != time.Nanosecond {
		t.Errorf("RetryAfter of a 0ms pushback = %v, want 1ns: retry at once", se.RetryAfter())
	}
	se.Pushback.Stop = true
	if se.RetryAfter() != 0 {
		t.Errorf("RetryAfter with Stop = %v", se.RetryAfter())
	}
	var zero grpcpolicy.StatusError
	if status.Code(&zero) != codes.OK || zero.Error() != "grpcpolicy: status OK" || zero.ErrorType() != "OK" {
		t.Errorf("zero StatusError: %v, %q", status.Code(&zero), zero.Error())
	}
	if (&grpcpolicy.StatusError{Code: 42}).ErrorType() != "CODE_42" {
		t.Error("unknown code's ErrorType")
	}
}

func TestStreamTimeoutError(t *testing.T) {
	var zero grpcpolicy.StreamTimeoutError
	if !errors.Is(&zero, deadline.ErrExceeded) || !errors.Is(&zero, context.DeadlineExceeded) || !zero.Timeout() ||
		status.Code(&zero) != codes.DeadlineExceeded || zero.ErrorType() != "timeout" || zero.Error() != "grpcpolicy: stream stream timeout of 0s exceeded" {
		t.Errorf("zero StreamTimeoutError: %q", zero.Error())
	}
}
