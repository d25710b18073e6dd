package keyed_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/keyed"
)

// TestBoundInventedKeys: calls with a fresh random key each (an attacker
// inventing keys), from 8 goroutines, never find more than MaxKeys keys
// live; no call runs past its key's limit; the heap after is what it was
// before, within a few MiB. 1 000 000 calls (30 000 with -short).
func TestBoundInventedKeys(t *testing.T) {
	n := 1_000_000
	if testing.Short() {
		n = 30_000
	}
	const maxKeys, workers = 1000, 8
	var built, closed atomic.Int64
	g := newGroup(t, keyed.Config{New: bulkheads(1, &built, &closed), MaxKeys: maxKeys})
	// Half the calls reuse a key of a small pool, so that a key's limit
	// is met.
	var pool [16]string
	for i := range pool {
		pool[i] = randomKey()
	}
	var running sync.Map // key -> *atomic.Int64: its calls running now
	var over, maxLive atomic.Int64
	heapBefore := heapInUse()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				k := randomKey()
				if i%2 == 0 {
					k = pool[i%len(pool)]
				}
				err := g.Execute(key(k), func(context.Context) error {
					c, _ := running.LoadOrStore(k, new(atomic.Int64))
					if c.(*atomic.Int64).Add(1) > 1 {
						over.Add(1)
					}
					c.(*atomic.Int64).Add(-1)
					return nil
				})
				if err != nil && !errors.Is(err, bulkhead.ErrFull) {
					t.Errorf("call = %v", err)
					return
				}
				if i%1000 == 0 {
					for l := int64(g.Keys()); l > maxLive.Load(); {
						if maxLive.CompareAndSwap(maxLive.Load(), l) {
							break
						}
					}
				}
				if i%2 == 1 {
					running.Delete(k)
				}
			}
		})
	}
	wg.Wait()
	g.Close()
	heapAfter := heapInUse()
	t.Logf("%d calls, %d policies built, %d closed; most keys live seen %d (MaxKeys %d); heap in use %.1f MiB before, %.1f MiB after",
		n, built.Load(), closed.Load(), maxLive.Load(), maxKeys, float64(heapBefore)/(1<<20), float64(heapAfter)/(1<<20))
	if maxLive.Load() > maxKeys {
		t.Errorf("%d keys live, more than MaxKeys %d", maxLive.Load(), maxKeys)
	}
	if over.Load() != 0 {
		t.Errorf("%d calls ran past their key's limit of 1", over.Load())
	}
	if built.Load() != closed.Load() {
		t.Errorf("%d policies built, %d closed after Close", built.Load(), closed.Load())
	}
	if heapAfter > heapBefore+8<<20 {
		t.Errorf("heap in use grew from %d to %d bytes", heapBefore, heapAfter)
	}
}

func randomKey() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
