package watertight

import (
	"fmt"

	"github.com/watertight/watertight/internal/jsonconf"
)

// MarshalJSON returns cfg's sections as a JSON object, each written by
// its own MarshalJSON; a nil section is left out.
func (cfg Config) MarshalJSON() ([]byte, error) { return jsonconf.Marshal(cfg) }

// UnmarshalJSON reads the JSON object data into cfg. It refuses what
// [New] refuses of a Config without Use, with an error naming the JSON
// field: "bulkhead.limit: must be >= 1, got 0". A section set to null is
// nil; a section data leaves out keeps its value. On error cfg is
// unchanged.
func (cfg *Config) UnmarshalJSON(data []byte) error {
	return jsonconf.Read(data, cfg, checkSections)
}

// checkSections returns what New refuses across cfg's sections, each of
// them valid: two sections in one slot, an Attempt longer than the
// Deadline.
func checkSections(cfg Config) error {
	if cfg.Bulkhead != nil && cfg.Adaptive != nil {
		return &jsonconf.Error{Path: "adaptive", Msg: "both bulkhead and adaptive set (they take the same slot)"}
	}
	if d, a := cfg.Deadline, cfg.Attempt; d != nil && a != nil && d.Timeout > 0 && a.Timeout > d.Timeout {
		return &jsonconf.Error{Path: "attempt.timeout", Msg: fmt.Sprintf("%v is longer than deadline.timeout %v", a.Timeout, d.Timeout)}
	}
	return nil
}
