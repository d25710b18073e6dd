package main

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
)

// TestUsage checks -h: the usage goes to stderr, lists every scenario and
// says there are no flags or subcommands; an argument is refused rather
// than ignored.
func TestUsage(t *testing.T) {
	var stderr bytes.Buffer
	if err := parseArgs([]string{"-h"}, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parseArgs(-h) = %v, want flag.ErrHelp", err)
	}
	out := stderr.String()
	for _, s := range scenarios {
		if !strings.Contains(out, s.title) {
			t.Errorf("usage lacks %q:\n%s", s.title, out)
		}
	}
	if !strings.Contains(out, "no flags and has no subcommands") {
		t.Errorf("usage does not say there are no flags or subcommands:\n%s", out)
	}
	if err := parseArgs(nil, &stderr); err != nil {
		t.Errorf("parseArgs() = %v", err)
	}
	if err := parseArgs([]string{"stream"}, &stderr); err == nil || !strings.Contains(err.Error(), `"stream"`) {
		t.Errorf("parseArgs(stream) = %v, want an error naming the argument", err)
	}
}
