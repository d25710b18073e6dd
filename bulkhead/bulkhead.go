package bulkhead

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/watertight/watertight/internal/slots"
	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

// Bulkhead limits the number of calls to one dependency that run at once,
// and lets a bounded number of further calls wait for a slot. Create one
// with [New]; the zero value is not usable. It is safe for concurrent use.
type Bulkhead struct {
	slots slots.Slots
	rej   telemetry.SlotRejections
	obs   telemetry.Observers

	mu  sync.Mutex // serialises Update; no call takes it
	cfg atomic.Pointer[Config]
}

// New returns a Bulkhead configured by cfg, or an error naming the first
// invalid field of cfg. It never panics.
func New(cfg Config) (*Bulkhead, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	in := telemetry.NewInstruments(cfg.MeterProvider)
	b := &Bulkhead{
		rej: telemetry.Rejecter{In: in, Kind: Kind, Name: cfg.Name, OnReject: cfg.OnReject}.Slots(ErrFull),
	}
	cfg.Reserve = maps.Clone(cfg.Reserve)
	b.cfg.Store(&cfg)
	b.slots.Owner = "bulkhead"
	b.slots.Init(cfg.Limit, cfg.MaxQueue, cfg.MaxWait, cfg.Reserve, cfg.keys())
	b.registerObservers(in.Meter, cfg.Name)
	return b, nil
}

// Execute runs fn once it holds a slot, and frees the slot when fn returns,
// panics or calls runtime.Goexit. It returns fn's error unchanged, or,
// without running fn, a rejection or ctx.Err() as the package
// documentation's table says. Execute panics if ctx or fn is nil.
func (b *Bulkhead) Execute(ctx context.Context, fn policy.Func) error {
	if fn == nil {
		panic("bulkhead: nil fn")
	}
	p, err := b.Acquire(ctx)
	if err != nil {
		return err
	}
	defer p.Release()
	return fn(ctx)
}

// Permit is a slot of a [Bulkhead], held from [Bulkhead.Acquire] until
// [Permit.Release]. The zero Permit holds nothing. Release makes a Permit
// zero, so a second Release of the same Permit does nothing; a copy is
// the same slot, so release only one of them.
type Permit struct {
	b *Bulkhead
	h slots.Held // the key the slot counts against, with MaxPerKey
}

// Release frees the slot, handing it to the oldest waiter of the highest
// priority waiting if that priority may take it (see Config.Reserve), and
// makes p zero: a deferred Release is safe after a failed Acquire.
func (p *Permit) Release() {
	if b := p.b; b != nil {
		h := p.h
		*p = Permit{}
		b.slots.Release(h)
	}
}

// Acquire takes a slot, waiting in the queue if need be. Its outcomes are
// those of [Bulkhead.Execute]. On a nil error the caller holds the slot
// until it calls [Permit.Release]; on any other error it holds nothing.
// Acquire panics if ctx is nil.
func (b *Bulkhead) Acquire(ctx context.Context) (Permit, error) {
	if ctx == nil {
		panic("bulkhead: nil Context")
	}
	o, h, err := b.slots.Acquire(ctx)
	if o != slots.Admitted {
		return Permit{}, b.rej.Refused(ctx, o, err)
	}
	return Permit{b, h}, nil
}

// Active returns the number of calls holding a slot now, including a waiter
// that has been handed a slot and has not yet woken. It is exact.
func (b *Bulkhead) Active() int { return b.slots.Active() }

// Queued returns the number of callers waiting for a slot now. It is exact.
func (b *Bulkhead) Queued() int { return b.slots.Queued() }

// QueuedBy returns the number of callers of priority p waiting for a slot
// now, 0 for an unknown priority. Like Active and Queued, it takes no
// lock.
func (b *Bulkhead) QueuedBy(p policy.Priority) int { return b.slots.QueuedBy(p) }

// Keys returns the number of keys with state now: with FairShare, the
// keys that have a caller waiting or hold a slot counted against
// MaxPerKey; calls without a key are not counted. It takes the
// bulkhead's lock.
func (b *Bulkhead) Keys() int { return b.slots.KeysTracked() }

// Limit returns the Config.Limit in force.
func (b *Bulkhead) Limit() int { return b.slots.Limit() }
