package redisstate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/redisstate"
)

// The fleet's quota: 60 requests and 20 000 tokens a second, bursts of
// one second's quota (the defaults).
const (
	fleetRequests = 60
	fleetTokens   = 20000
	fleetBurst    = 60
	fleetTokBurst = 20000
	fleetCallers  = 8
)

// fakeProvider answers like an LLM provider with a quota of fleetRequests
// and fleetTokens a second, each in a bucket of one second's quota, on one
// clock. It lets a request through if the bucket has room for it, with a
// slack of a tenth of a burst for the network's jitter (and, for tokens,
// one call more, for the settlement in flight), and answers 429 with
// Retry-After: 1 otherwise. A request names its usage (use=N), which the
// provider charges and answers in an OpenAI usage field.
type fakeProvider struct {
	mu     sync.Mutex
	epoch  time.Time
	reqTAT float64 // seconds since epoch
	tokTAT float64
	ok     []arrival
	n429   int
}

type arrival struct {
	at     time.Duration
	tokens int
}

const maxUse = 840 // the largest usage a replica sends: 700 x 1.2

func (p *fakeProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	use, _ := strconv.Atoi(r.URL.Query().Get("use"))
	reqT, tokT := 1.0/fleetRequests, 1.0/fleetTokens
	p.mu.Lock()
	now := time.Since(p.epoch)
	s := now.Seconds()
	rq := max(p.reqTAT, s) + reqT
	tk := max(p.tokTAT, s) + float64(use)*tokT
	if rq-s > 1.1*fleetBurst*reqT || tk-s > (1.1*fleetTokBurst+maxUse)*tokT {
		p.n429++
		p.mu.Unlock()
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	p.reqTAT, p.tokTAT = rq, tk
	p.ok = append(p.ok, arrival{now, use})
	p.mu.Unlock()
	time.Sleep(time.Duration(20+rand.IntN(40)) * time.Millisecond) // the answer's generation
	fmt.Fprintf(w, `{"usage":{"total_tokens":%d}}`, use)
}

// window returns the most requests and tokens in any interval d of the
// arrivals.
func window(as []arrival, d time.Duration) (reqs, toks int) {
	j, sum := 0, 0
	for i, a := range as {
		sum += a.tokens
		for as[j].at <= a.at-d {
			sum -= as[j].tokens
			j++
		}
		reqs, toks = max(reqs, i-j+1), max(toks, sum)
	}
	return reqs, toks
}

// runQuotaReplica is a child replica: fleetCallers goroutines call the
// provider for DURATION, through a Limiter that shares the quota through
// Redis (SHARED=1) or paces this replica alone to the whole quota. Each
// call declares an estimate of 100 to 700 tokens and uses 0.5 to 1.2 times
// it. It prints "done <ok> <rejected> <429> <other>".
func runQuotaReplica(rd redisstate.Redis, name string) int {
	cfg := ratelimit.Config{MaxWait: 2 * time.Second}
	if os.Getenv("SHARED") == "1" {
		q, err := redisstate.NewQuota(redisstate.QuotaConfig{Name: name, Redis: rd, Interval: time.Second,
			Requests: fleetRequests, Tokens: fleetTokens})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		defer q.Close()
		cfg.Shared = q
	} else {
		cfg.RequestsPerSecond, cfg.TokensPerMinute = fleetRequests, fleetTokens*60
	}
	l, err := ratelimit.New(cfg)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer l.Close()
	d, _ := time.ParseDuration(os.Getenv("DURATION"))
	url := os.Getenv("UPSTREAM")
	var mu sync.Mutex
	var counts [4]int
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for range fleetCallers {
		wg.Go(func() {
			for time.Now().Before(end) {
				k := quotaCall(l, url)
				mu.Lock()
				counts[k]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	fmt.Println("done", counts[0], counts[1], counts[2], counts[3])
	return 0
}

// quotaCall makes one call through l and returns how it ended: 0 served,
// 1 rejected, 2 a 429, 3 anything else.
func quotaCall(l *ratelimit.Limiter, url string) int {
	est := 100 + rand.IntN(601)
	use := int(float64(est) * (0.5 + 0.7*rand.Float64()))
	ctx, cancel := context.WithTimeout(ratelimit.WithCost(context.Background(), est), 3*time.Second)
	defer cancel()
	err := l.Execute(ctx, func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, "GET", url+"?use="+strconv.Itoa(use), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			return &httppolicy.StatusError{StatusCode: 429, RetryAfterDelay: time.Second}
		}
		var body struct {
			Usage struct {
				TotalTokens int `json:"total_tokens"`
			} `json:"usage"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return err
		}
		ratelimit.ReportUsage(ctx, body.Usage.TotalTokens)
		return nil
	})
	var se *httppolicy.StatusError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, policy.ErrRejected):
		return 1
	case errors.As(err, &se):
		return 2
	}
	return 3
}

// fleetRun is what one run of the fleet test saw.
type fleetRun struct {
	served, rejected, n429, other int
	elapsed                       time.Duration
	tokens, biggest               int
	winReqs, winToks              int
}

// runFleet runs n replica processes against a fresh provider for d.
func runFleet(t *testing.T, addr, name string, shared bool, n int, d time.Duration) fleetRun {
	p := &fakeProvider{epoch: time.Now()}
	srv := httptest.NewServer(p)
	defer srv.Close()
	on := map[bool]string{true: "1", false: "0"}[shared]
	cs := make([]*child, n)
	for i := range cs {
		cs[i] = startChild(t, "quota-replica", "REDIS_ADDR="+addr, "POLICY_NAME="+name, "SHARED="+on,
			"UPSTREAM="+srv.URL, "DURATION="+d.String())
	}
	var r fleetRun
	for _, c := range cs {
		f := strings.Fields(c.expect(t, "done"))
		v := func(i int) int { n, _ := strconv.Atoi(f[i]); return n }
		r.served, r.rejected, r.n429, r.other = r.served+v(1), r.rejected+v(2), r.n429+v(3), r.other+v(4)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	as := slices.Clone(p.ok)
	if len(as) == 0 {
		t.Fatal("the provider served nothing")
	}
	r.elapsed = as[len(as)-1].at
	for _, a := range as {
		r.tokens, r.biggest = r.tokens+a.tokens, max(r.biggest, a.tokens)
	}
	r.winReqs, r.winToks = window(as, time.Second)
	if r.n429 != p.n429 {
		t.Errorf("replicas saw %d 429s, the provider sent %d", r.n429, p.n429)
	}
	return r
}

// TestQuotaFleet: four replica processes of eight callers each share a
// quota of 60 requests and 20 000 tokens a second through a real Redis,
// against a provider of that quota. With the Quota, the provider answers
// no 429, the fleet is admitted at most the quota's rate over the run (plus
// its burst, plus 1%), at most quota plus burst in any second (as the
// provider sees them: plus a tenth of a burst for the trip), and tokens
// within quota plus burst plus the largest call. Without it, each replica
// paces itself to the whole quota, and the provider answers 429s.
func TestQuotaFleet(t *testing.T) {
	s := startRedis(t)
	const d = 4 * time.Second
	with := runFleet(t, s.Addr(), "fleet", true, 4, d)
	without := runFleet(t, s.Addr(), "fleet-off", false, 4, d)
	for _, x := range []struct {
		name string
		r    fleetRun
	}{{"with the shared quota", with}, {"each replica alone", without}} {
		r := x.r
		t.Logf("%s: %d served, %d rejected, %d 429s, %d other in %v; %.1f requests/s and %.0f tokens/s served; most in a second: %d requests, %d tokens; largest call %d tokens",
			x.name, r.served, r.rejected, r.n429, r.other, r.elapsed.Round(time.Millisecond),
			float64(r.served)/r.elapsed.Seconds(), float64(r.tokens)/r.elapsed.Seconds(), r.winReqs, r.winToks, r.biggest)
	}
	secs := with.elapsed.Seconds()
	if with.n429 != 0 {
		t.Errorf("with the shared quota the provider answered %d 429s, want none", with.n429)
	}
	if most := fleetBurst + fleetRequests*secs*1.01; float64(with.served) > most {
		t.Errorf("%d requests served in %.2fs, more than the burst plus the rate plus 1%% (%.0f)", with.served, secs, most)
	}
	// The quota counts admissions by Redis's clock; the provider sees them
	// later, each after its own trip, so its windows get the slack its
	// bucket gives the network's jitter.
	if most := fleetRequests + fleetBurst + fleetBurst/10; with.winReqs > most {
		t.Errorf("%d requests in one second at the provider, more than quota plus burst plus jitter (%d)", with.winReqs, most)
	}
	if most := fleetTokens + fleetTokBurst + with.biggest; with.winToks > most {
		t.Errorf("%d tokens in one second, more than quota plus burst plus the largest call (%d)", with.winToks, most)
	}
	if most := fleetTokBurst + fleetTokens*secs + float64(with.biggest); float64(with.tokens) > most {
		t.Errorf("%d tokens in %.2fs, more than burst plus rate plus the largest call (%.0f)", with.tokens, secs, most)
	}
	if without.n429 == 0 {
		t.Errorf("replicas pacing themselves alone got no 429: the provider's quota was never exceeded, so the test shows nothing")
	}
}
