package httppolicy

import "testing"

// TestUsageKeysAreExact: the counts are read from the keys the package doc
// names (total_tokens, prompt_tokens, ...), spelled as they are: a key
// that differs in case is no count.
func TestUsageKeysAreExact(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want int
	}{
		{`{"prompt_tokens":5,"completion_tokens":7,"TOTAL_TOKENS":1}`, 12},
		{`{"input_tokens":5,"output_tokens":7,"Output_Tokens":0}`, 12},
		{`{"total_tokens":12,"Total_Tokens":"many"}`, 12},
	} {
		n, ok := usageTokens([]byte(tc.raw))
		if !ok || n != tc.want {
			t.Errorf("usageTokens(%s) = %d, %v; want %d, true", tc.raw, n, ok, tc.want)
		}
	}
}
