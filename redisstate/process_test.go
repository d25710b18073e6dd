package redisstate_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/redisstate"
)

// Replicas as separate processes: the test binary started again with
// childEnv set to a role runs that role (from TestMain) instead of the
// tests, reading its parameters from the environment and talking to the
// parent on stdout.
const childEnv = "REDISSTATE_TEST_CHILD"

// runChild runs a child replica's role and returns its exit code.
func runChild(role string) int {
	addr, name := os.Getenv("REDIS_ADDR"), os.Getenv("POLICY_NAME")
	limit, _ := strconv.Atoi(os.Getenv("LIMIT"))
	client := redisstate.NewClient(&redis.UniversalOptions{Addrs: []string{addr}, PoolSize: 64, DialTimeout: time.Second,
		ReadTimeout: patience, WriteTimeout: patience}) // as newClient's
	defer client.Close()
	// Patient, as the parent's (patientRedis): a round trip timed out on a
	// loaded machine would lose a renewal or admit nothing.
	rd := redisstate.Redis{Client: client, CallTimeout: patience}
	switch role {
	case "budget-hold":
		// Take every lease, say so, and hang until killed.
		b, err := redisstate.NewBudget(redisstate.BudgetConfig{Name: name, Limit: limit, LeaseTTL: holdLeaseTTL, Redis: rd})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		var wg sync.WaitGroup
		for range limit {
			wg.Add(1)
			go b.Execute(context.Background(), func(context.Context) error { wg.Done(); select {} })
		}
		wg.Wait()
		fmt.Println("held")
		select {}
	case "budget-storm":
		b, err := redisstate.NewBudget(redisstate.BudgetConfig{Name: name, Limit: limit, MaxWait: 20 * time.Millisecond, Fallback: redisstate.FailClosed, Redis: rd})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		url := os.Getenv("UPSTREAM")
		d, _ := time.ParseDuration(os.Getenv("DURATION"))
		var mu sync.Mutex
		var admitted, rejected, failed int
		var wg sync.WaitGroup
		// At least d, and until this replica has been admitted once (a
		// loaded machine may give it no turn in d), within patience.
		start := time.Now()
		more := func() bool {
			mu.Lock()
			defer mu.Unlock()
			el := time.Since(start)
			return el < d || admitted == 0 && el < patience
		}
		for range 8 {
			wg.Go(func() {
				for more() {
					err := b.Execute(context.Background(), func(ctx context.Context) error {
						req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
						resp, err := http.DefaultClient.Do(req)
						if err != nil {
							return err
						}
						io.Copy(io.Discard, resp.Body)
						return resp.Body.Close()
					})
					mu.Lock()
					switch {
					case err == nil:
						admitted++
					case errors.Is(err, policy.ErrRejected):
						rejected++
					default:
						failed++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		fmt.Println("done", admitted, rejected, failed)
		return 0
	case "quota-replica":
		return runQuotaReplica(rd, name)
	case "breaker-watch":
		s, err := redisstate.NewSharedBreaker(redisstate.BreakerConfig{
			Breaker: breaker.Config{Name: name, OpenTimeout: 10 * time.Second}, Redis: rd})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		defer s.Close()
		time.Sleep(100 * time.Millisecond) // subscribed, or it polls
		fmt.Println("ready")
		for end := time.Now().Add(patience); time.Now().Before(end); time.Sleep(time.Millisecond) {
			if s.State() == breaker.Open {
				fmt.Println("open")
				return 0
			}
		}
		fmt.Println("never opened")
		return 1
	}
	fmt.Println("unknown role", role)
	return 2
}

// child is a replica process.
type child struct {
	cmd   *exec.Cmd
	lines chan string
}

// startChild starts the test binary as a replica in role, with env added.
func startChild(t *testing.T, role string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+role), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	})
	return c
}

// expect waits for the child's next line and checks its first word.
func (c *child) expect(t *testing.T, word string) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok || strings.Fields(l + " x")[0] != word {
			t.Fatalf("child said %q, want %q", l, word)
		}
		return l
	case <-time.After(2 * patience): // a child's own waits are bounded by patience
		t.Fatalf("child silent, want %q", word)
	}
	return ""
}

// holdLeaseTTL is the LeaseTTL of the child that holds every lease: a
// renewal due every 333 ms, and the lease lost only if it comes 667 ms late.
const holdLeaseTTL = time.Second

// TestProcessLeasesLapse: a replica process holds every lease of a budget
// (renewing them) until it is killed with SIGKILL; its leases then lapse
// within LeaseTTL and another replica is admitted. The renewals are seen
// in Redis (each lease's expiry moves on), so the test waits for them,
// not for a time.
func TestProcessLeasesLapse(t *testing.T) {
	s := startRedis(t)
	c := startChild(t, "budget-hold", "REDIS_ADDR="+s.Addr(), "POLICY_NAME=lapse", "LIMIT=3")
	c.expect(t, "held")
	rc := newClient(t, s.Addr())
	b := newBudget(t, redisstate.BudgetConfig{Name: "lapse", Limit: 3, LeaseTTL: 300 * time.Millisecond, Redis: patientRedis(rc)})
	nop := func(context.Context) error { return nil }
	expiries := func() map[string]float64 {
		z, err := rc.ZRangeWithScores(context.Background(), leasesKey("lapse"), 0, -1).Result()
		if err != nil || len(z) != 3 {
			t.Fatalf("leases: %v, %v; want the child's 3", z, err)
		}
		m := map[string]float64{}
		for _, e := range z {
			m[e.Member.(string)] = e.Score
		}
		return m
	}
	// Renewed: still held after each lease was renewed three times, more
	// than a LeaseTTL.
	first, renewed := expiries(), map[string]int{}
	last := maps.Clone(first)
	done := func() bool {
		for id := range first {
			if renewed[id] < 3 {
				return false
			}
		}
		return true
	}
	for start := time.Now(); !done(); time.Sleep(20 * time.Millisecond) {
		if err := b.Execute(context.Background(), nop); !errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("admitted while the child holds every lease (renewals seen %v): %v", renewed, err)
		}
		for id, e := range expiries() {
			if _, ok := first[id]; !ok {
				t.Fatalf("lease %s is not one of the child's %v", id, first)
			}
			if e > last[id] {
				last[id] = e
				renewed[id]++
			}
		}
		if time.Since(start) > patience {
			t.Fatalf("renewals seen in %v: %v, want 3 of each lease", patience, renewed)
		}
	}
	killed := time.Now()
	c.cmd.Process.Signal(syscall.SIGKILL)
	eventually(t, patience, "admitted after the holder was killed", func() bool {
		return b.Execute(context.Background(), nop) == nil
	})
	t.Logf("leases of the killed replica lapsed %v after the kill (LeaseTTL %v)", time.Since(killed), holdLeaseTTL)
}

// TestProcessStorm: three replica processes and this one storm a budget of
// 5 whose calls go to one HTTP upstream, which counts the requests it
// serves at once: never more than 5. (FailClosed, so that a round trip
// slowed past its deadline by four -race processes on a loaded machine
// cannot admit a call without a lease.)
func TestProcessStorm(t *testing.T) {
	s := startRedis(t)
	var u upstream
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.call(r.Context(), 2*time.Millisecond)
	}))
	defer srv.Close()
	const limit = 5
	env := []string{"REDIS_ADDR=" + s.Addr(), "POLICY_NAME=pstorm", "LIMIT=" + strconv.Itoa(limit), "UPSTREAM=" + srv.URL, "DURATION=1500ms"}
	var kids []*child
	for range 3 {
		kids = append(kids, startChild(t, "budget-storm", env...))
	}
	b := newBudget(t, redisstate.BudgetConfig{Name: "pstorm", Limit: limit, MaxWait: 20 * time.Millisecond, Fallback: redisstate.FailClosed, Redis: patientRedis(newClient(t, s.Addr()))})
	stop := make(chan struct{})
	time.AfterFunc(1500*time.Millisecond, func() { close(stop) })
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				b.Execute(context.Background(), func(ctx context.Context) error {
					resp, err := srv.Client().Get(srv.URL)
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					return err
				})
			}
		})
	}
	wg.Wait()
	for i, k := range kids {
		l := k.expect(t, "done")
		f := strings.Fields(l)
		t.Logf("process %d: admitted %s, rejected %s, failed %s", i, f[1], f[2], f[3])
		if f[1] == "0" || f[3] != "0" {
			t.Fatalf("process %d: %s", i, l)
		}
	}
	t.Logf("upstream: %d requests, at most %d at once", u.total.Load(), u.peak.Load())
	if p := u.peak.Load(); p > limit {
		t.Fatalf("upstream saw %d at once, over the global limit %d", p, limit)
	}
}

// TestProcessBreakerOpens: this process's failures open the breaker in two
// replica processes.
func TestProcessBreakerOpens(t *testing.T) {
	s := startRedis(t)
	env := []string{"REDIS_ADDR=" + s.Addr(), "POLICY_NAME=pbreaker"}
	a, b := startChild(t, "breaker-watch", env...), startChild(t, "breaker-watch", env...)
	a.expect(t, "ready")
	b.expect(t, "ready")
	r := newShared(t, redisstate.BreakerConfig{Breaker: breaker.Config{Name: "pbreaker", ConsecutiveFailures: 2, OpenTimeout: 10 * time.Second},
		Redis: patientRedis(newClient(t, s.Addr()))})
	failN(r, 2)
	a.expect(t, "open")
	b.expect(t, "open")
}
