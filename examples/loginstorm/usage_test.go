package main

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
)

// TestUsage checks -h of the command and of each subcommand: the usage
// goes to stderr, the top level lists the subcommands, every flag is listed
// and no line gives a default twice (the flag package appends the default
// itself, so a usage string must not).
func TestUsage(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"-h"}, []string{"loginstorm upstream [flags]", "loginstorm app [flags]", "loginstorm load [flags]",
			`"loginstorm <subcommand> -h"`, "-delay", "-chats", "-logins", "-rounds", "-mode", "-json", "(default 30s)"}},
		{[]string{"help"}, []string{"loginstorm upstream [flags]", "loginstorm load [flags]", "-delay"}},
		{[]string{"upstream", "-h"}, []string{"Usage: loginstorm upstream [flags]", "-addr", "-delay", `(default "127.0.0.1:4001")`}},
		{[]string{"app", "-h"}, []string{"Usage: loginstorm app [flags]", "-addr", "-upstream", "-mode", `(default "shared")`}},
		{[]string{"load", "-h"}, []string{"Usage: loginstorm load [flags]", "-target", "-delay", "-chats", "-json"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Setenv("DELAY", "")
			t.Setenv("MODE", "")
			var stdout, stderr bytes.Buffer
			if err := run(t.Context(), tt.args, &stdout, &stderr); !errors.Is(err, flag.ErrHelp) {
				t.Fatalf("run(%q) = %v, want flag.ErrHelp", tt.args, err)
			}
			if stdout.Len() != 0 {
				t.Errorf("usage went to stdout: %q", stdout.String())
			}
			out := stderr.String()
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("usage lacks %q:\n%s", w, out)
				}
			}
			for line := range strings.Lines(out) {
				if strings.Count(line, "default") > 1 {
					t.Errorf("a line gives its default twice: %q", line)
				}
			}
		})
	}
}

// TestUsageDefaultFromEnv checks that -h shows the default that $DELAY and
// $MODE set, once.
func TestUsageDefaultFromEnv(t *testing.T) {
	t.Setenv("DELAY", "250")
	t.Setenv("MODE", "bulkhead")
	for args, want := range map[string]string{"upstream": "(default 250ms)", "app": `(default "bulkhead")`} {
		var stderr bytes.Buffer
		if err := run(t.Context(), []string{args, "-h"}, &stderr, &stderr); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s -h: %v", args, err)
		}
		if n := strings.Count(stderr.String(), want); n != 1 {
			t.Errorf("%s -h shows %q %d times, want once:\n%s", args, want, n, stderr.String())
		}
	}
}
