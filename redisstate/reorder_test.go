package redisstate_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watertight/watertight/redisstate"
)

// delayHook delays, once armed, the reply of one acquire script: its
// answer arrives after the answers of later calls.
type delayHook struct {
	armed   atomic.Bool
	delayed chan struct{}
	d       time.Duration
}

func (h *delayHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *delayHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *delayHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		name := strings.ToLower(cmd.Name())
		if (name == "evalsha" || name == "eval") && strings.Contains(cmd.String(), "replicas:since") && h.armed.CompareAndSwap(true, false) {
			close(h.delayed)
			time.Sleep(h.d)
		}
		return err
	}
}

// A replica keeps its latest complete answer by Redis's time, whatever the
// order the answers arrive in: replica A's call, answered with a count of
// 1, is read after its next call's answer, which counted all 3 replicas.
// A keeps 3, and its share of a Limit of 9 is 3.
func TestBudgetKeepsTheLatestCountOfAnswersOutOfOrder(t *testing.T) {
	s := startRedis(t)
	const limit = 9
	admin := newClient(t, s.Addr())
	hook := &delayHook{delayed: make(chan struct{}), d: 500 * time.Millisecond}
	ca := newClient(t, s.Addr())
	ca.AddHook(hook)
	a := newBudget(t, redisstate.BudgetConfig{Name: "reorder", Limit: limit, Replica: "A", Redis: patientRedis(ca)})
	b := newBudget(t, redisstate.BudgetConfig{Name: "reorder", Limit: limit, Replica: "B", Redis: patientRedis(newClient(t, s.Addr()))})
	c := newBudget(t, redisstate.BudgetConfig{Name: "reorder", Limit: limit, Replica: "C", Redis: patientRedis(newClient(t, s.Addr()))})
	nop := func(context.Context) error { return nil }
	ctx := context.Background()
	if err := a.Execute(ctx, nop); err != nil {
		t.Fatal(err)
	}
	// The count began a minute ago: complete.
	now, err := admin.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Set(ctx, "{watertight:budget:reorder}:replicas:since", now.Add(-time.Minute).UnixMilli(), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	hook.armed.Store(true)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := a.Execute(ctx, nop); err != nil {
			t.Error(err)
		}
	})
	<-hook.delayed
	for _, r := range []*redisstate.Budget{b, c, a} {
		if err := r.Execute(ctx, nop); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	s.Kill()
	var got []int
	for _, r := range []*redisstate.Budget{a, b, c} {
		got = append(got, shareOf(t, r, limit))
	}
	if got[0] != 3 {
		t.Errorf("shares with Redis away %v; want A's to be 3, from its latest answer", got)
	}
}
