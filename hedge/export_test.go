package hedge

import "time"

// Settings returns h's delay in force and its resolved MaxHedges.
func Settings(h *Hedge) (time.Duration, int) { return h.delay(), h.s.MaxHedges }
