package main

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

// TestUsage checks -h: the usage goes to stderr and lists every scenario,
// both subcommands and the flags; an unknown subcommand or a stray
// argument is refused rather than ignored, and the subcommands parse with
// their flags.
func TestUsage(t *testing.T) {
	var stderr bytes.Buffer
	if _, err := parseArgs([]string{"-h"}, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parseArgs(-h) = %v, want flag.ErrHelp", err)
	}
	out := stderr.String()
	for _, s := range scenarios {
		if !strings.Contains(out, s.title) {
			t.Errorf("usage lacks %q:\n%s", s.title, out)
		}
	}
	for _, want := range []string{"\n  quota ", "\n  stall ", "-json", "-duration"} {
		if !strings.Contains(out, want) {
			t.Errorf("usage lacks %q:\n%s", want, out)
		}
	}
	if cmd, err := parseArgs(nil, &stderr); err != nil || cmd.name != "" {
		t.Errorf("parseArgs() = %+v, %v", cmd, err)
	}
	if _, err := parseArgs([]string{"stream"}, &stderr); err == nil || !strings.Contains(err.Error(), `"stream"`) {
		t.Errorf("parseArgs(stream) = %v, want an error naming the argument", err)
	}
	if _, err := parseArgs([]string{"stall", "extra"}, &stderr); err == nil || !strings.Contains(err.Error(), `"extra"`) {
		t.Errorf("parseArgs(stall extra) = %v, want an error naming the argument", err)
	}
	cmd, err := parseArgs([]string{"quota", "-json", "-duration", "5s"}, &stderr)
	if err != nil || cmd.name != "quota" || !cmd.json || cmd.duration != 5*time.Second {
		t.Errorf("parseArgs(quota -json -duration 5s) = %+v, %v", cmd, err)
	}
	if _, err := parseArgs([]string{"quota", "-duration", "0s"}, &stderr); err == nil {
		t.Error("parseArgs(quota -duration 0s) accepted")
	}
	if cmd, err := parseArgs([]string{"stall", "-json"}, &stderr); err != nil || cmd.name != "stall" || !cmd.json {
		t.Errorf("parseArgs(stall -json) = %+v, %v", cmd, err)
	}
}
