package slots

import "github.com/watertight/watertight/internal/fielderr"

// share returns key's share, or nil if key has none: it neither waits
// nor holds a counted slot. Without Fair, key is always "". s.mu must be
// held.
func (s *Slots) share(key string) *share {
	if key == "" {
		return &s.all
	}
	return s.keys[key]
}

// shareFor returns key's share, made if key has none. s.mu must be held.
func (s *Slots) shareFor(key string) *share {
	if sh := s.share(key); sh != nil {
		return sh
	}
	sh := s.spare
	if sh != nil {
		s.spare = nil
	} else {
		sh = &share{}
	}
	sh.init(key)
	s.keys[key] = sh
	return sh
}

// prune removes sh if it is idle, so that a key's state lasts no longer
// than its calls: keys invented by a caller leave nothing behind. One
// removed share is kept for the next key, so that a key counted on every
// call (MaxPerKey) does not allocate on every call. Nothing refers to an
// idle share: its waiters and counted slots are gone. s.mu must be held.
func (s *Slots) prune(sh *share) {
	if sh != &s.all && sh.held == 0 && sh.waiting() == 0 && s.keys[sh.key] == sh {
		delete(s.keys, sh.key)
		*sh = share{}
		s.spare = sh
	}
}

// atCap reports whether sh holds MaxPerKey slots or more. s.mu must be
// held.
func (s *Slots) atCap(sh *share) bool {
	return s.maxPerKey > 0 && sh != nil && sh.held >= s.maxPerKey
}

// count counts a slot just taken by key, if MaxPerKey is set, and
// returns what Release needs. s.mu must be held.
func (s *Slots) count(key string) Held {
	if s.maxPerKey == 0 {
		return Held{}
	}
	sh := s.shareFor(key)
	sh.held++
	return Held{sh}
}

// Fair reports whether the waiters are served key by key (Keys.Fair).
func (s *Slots) Fair() bool { return s.fair }

// KeysTracked returns the number of keys that have state now: that wait or
// hold a counted slot. It takes the lock.
func (s *Slots) KeysTracked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

// CheckKeys returns an error naming the first invalid field of pkg's
// Config among FairShare and MaxPerKey, which must be >= 0 and needs
// FairShare.
func CheckKeys(pkg string, k Keys) error {
	switch {
	case k.MaxPerKey < 0:
		return fielderr.New(pkg, "MaxPerKey", "must be >= 0, got %d", k.MaxPerKey)
	case k.MaxPerKey > 0 && !k.Fair:
		return fielderr.New(pkg, "MaxPerKey", "needs FairShare: a key at its cap waits in its own line")
	}
	return nil
}
