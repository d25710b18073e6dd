package statuspage

import (
	"cmp"
	"maps"
	"slices"
	"sync"

	"github.com/watertight/watertight/compose"
)

// seconds is how far back the page shows rejections.
const seconds = 60

// history is one pipeline's rejections, second by second, for the last
// minute: the sampler adds a second, the page reads them.
type history struct {
	mu   sync.Mutex
	last map[compose.RejectionCount]int64 // the totals at the last sample, by key (Calls 0)
	ring map[compose.RejectionCount]*[seconds]int64
	at   int // the slot of the newest second
}

func newHistory() *history {
	return &history{last: map[compose.RejectionCount]int64{}, ring: map[compose.RejectionCount]*[seconds]int64{}}
}

// baseline takes the totals of now as the start, so that what was
// rejected before is no second's rejections.
func (h *history) baseline(totals []compose.RejectionCount) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range totals {
		k := t
		k.Calls = 0
		h.last[k] = t.Calls
	}
}

// sample takes the totals of now and adds the second since the last.
func (h *history) sample(totals []compose.RejectionCount) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.at = (h.at + 1) % seconds
	for _, r := range h.ring {
		r[h.at] = 0
	}
	for _, t := range totals {
		k := t
		k.Calls = 0
		r := h.ring[k]
		if r == nil {
			r = new([seconds]int64)
			h.ring[k] = r
		}
		r[h.at] = t.Calls - h.last[k]
		h.last[k] = t.Calls
	}
}

// lastMinute returns the rejections of each second of the last minute,
// oldest first, and the minute's by policy and reason.
func (h *history) lastMinute() ([]int64, []RejectionState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	per := make([]int64, seconds)
	var by []RejectionState
	for _, k := range slices.SortedFunc(maps.Keys(h.ring), compareKeys) {
		r, sum := h.ring[k], int64(0)
		for i := range seconds {
			n := r[(h.at+1+i)%seconds]
			per[i] += n
			sum += n
		}
		if sum > 0 {
			by = append(by, RejectionState{Kind: k.Kind, Name: k.Name, Reason: k.Reason, Calls: sum})
		}
	}
	return per, by
}

func compareKeys(a, b compose.RejectionCount) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Reason, b.Reason))
}
