package httppolicy

import "testing"

// A remaining count is digits only and fits an int64: a 19-digit count
// above math.MaxInt64 once wrapped to a negative number, which the gate
// took for a quota spent.
func TestParseCount(t *testing.T) {
	for s, want := range map[string]int64{"0": 0, "59": 59, "9223372036854775807": 1<<63 - 1} {
		if got, ok := parseCount(s); !ok || got != want {
			t.Errorf("parseCount(%q) = %d, %v; want %d, true", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "-1", "+1", " 1", "1 ", "1.5", "0x10", "1_000", "9300000000000000000", "99999999999999999999"} {
		if got, ok := parseCount(s); ok {
			t.Errorf("parseCount(%q) = %d, true; want malformed", s, got)
		}
	}
}
