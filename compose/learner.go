package compose

import (
	"fmt"

	"github.com/watertight/watertight/internal/stage"
)

// checkLearners rejects a policy that learns from each attempt's latency
// (a stage.Observer: an adaptive limiter) in any slot but Bulkhead. compose
// reports latencies only to the Bulkhead slot's policy; elsewhere such a
// policy would never learn and would stay at its first probe's cap of 3
// while its gauge read the limit it started with.
func (p Policies) checkLearners() error {
	for _, s := range p.slots() {
		if s.p == nil || s.field == "Bulkhead" {
			continue
		}
		if tp, _ := stage.Of(s.p); tp != nil {
			if _, ok := tp.(stage.Observer); ok {
				return fmt.Errorf("compose: Policies.%s holds a %T, which learns from each attempt's latency; it works only in the Bulkhead slot", s.field, s.p)
			}
		}
	}
	return nil
}
