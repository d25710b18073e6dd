package compose

import (
	"cmp"
	"errors"
	"slices"
	"sync/atomic"

	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// RejectionCount is the number of a pipeline's calls one policy rejected
// for one reason, as [Pipeline.Rejections] reports them.
type RejectionCount struct {
	Kind, Name, Reason string // those of the *policy.RejectedError
	Calls              int64
}

// CountRejections starts counting the pipeline's rejected calls, by the
// policy and reason of each *policy.RejectedError a call ends with (or
// whose retry gave up on one), for [Pipeline.Rejections]. A status page
// calls it. A call that succeeds pays nothing for it, before or after. A
// call that fails pays an atomic load before, and after, a look for a
// rejection in its error and, if rejected, a map read and an atomic add. It is safe for concurrent use, and calling
// it again does nothing.
func (p *Pipeline) CountRejections() { p.counting.Store(true) }

// count counts the call that ended with err if err is a rejection, or a
// retry that gave up on one.
func (p *Pipeline) count(err error) {
	rej, ok := err.(*policy.RejectedError)
	if !ok && !errors.As(err, &rej) {
		var ex *retry.ExhaustedError
		if !errors.As(err, &ex) || ex.Rejection == nil {
			return
		}
		rej = ex.Rejection
	}
	n, ok := p.rejected.Load(rej)
	if !ok {
		n, _ = p.rejected.LoadOrStore(rej, new(atomic.Int64))
	}
	n.(*atomic.Int64).Add(1)
}

// Rejections returns the rejected calls counted since CountRejections, by
// policy kind, name and reason, in that order. It takes no lock a call
// takes.
func (p *Pipeline) Rejections() []RejectionCount {
	var out []RejectionCount
	p.rejected.Range(func(k, v any) bool {
		rej := k.(*policy.RejectedError)
		out = append(out, RejectionCount{Kind: rej.Kind, Name: rej.Name, Reason: rej.Reason, Calls: v.(*atomic.Int64).Load()})
		return true
	})
	// Two error values may share a kind, name and reason: one per
	// priority, say. Their counts add up.
	slices.SortFunc(out, func(a, b RejectionCount) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Reason, b.Reason))
	})
	merged := out[:0]
	for _, r := range out {
		if k := len(merged) - 1; k >= 0 && merged[k].Kind == r.Kind && merged[k].Name == r.Name && merged[k].Reason == r.Reason {
			merged[k].Calls += r.Calls
			continue
		}
		merged = append(merged, r)
	}
	return merged
}
