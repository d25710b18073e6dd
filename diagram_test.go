package watertight_test

import (
	"os"
	"strings"
	"testing"
)

// diagram returns the order diagram in text: the lines from the one that is
// "caller" to the one that is "fn" (trimmed), with prefix removed from each.
func diagram(t *testing.T, text, prefix string) string {
	t.Helper()
	var out []string
	in := false
	for _, line := range strings.Split(text, "\n") {
		line, found := strings.CutPrefix(line, prefix)
		if !found {
			if in {
				break
			}
			continue
		}
		if strings.TrimSpace(line) == "caller" {
			in = true
		}
		if in {
			out = append(out, strings.TrimRight(line, " "))
			if strings.TrimSpace(line) == "fn" {
				return strings.Join(out, "\n")
			}
		}
	}
	t.Fatalf("no diagram from \"caller\" to \"fn\" found")
	return ""
}

// TestOrderDiagramsAgree keeps the README's copy of the order diagram equal
// to the one source, compose's package documentation.
func TestOrderDiagramsAgree(t *testing.T) {
	doc, err := os.ReadFile("compose/doc.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	want := diagram(t, string(doc), "//\t")
	got := diagram(t, string(readme), "")
	if got != want {
		t.Errorf("README.md's order diagram differs from compose/doc.go's (the source); copy it over.\nREADME:\n%s\n\ncompose/doc.go:\n%s", got, want)
	}
}
