package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/redisstate"
)

// A replica is this program started again with roleEnv set: it reads its
// settings from the environment, says "ready" on stdout, waits for a line
// on stdin, runs its callers, and prints "done" and its counts as JSON.
const (
	roleEnv     = "FLEETQUOTA_ROLE"     // "replica"
	armEnv      = "FLEETQUOTA_ARM"      // armAlone or armShared
	redisEnv    = "FLEETQUOTA_REDIS"    // Redis's host:port
	providerEnv = "FLEETQUOTA_PROVIDER" // the provider's base URL
	durationEnv = "FLEETQUOTA_DURATION" // how long the callers call
	quotaEnv    = "FLEETQUOTA_QUOTA"    // the shared quota's name
)

const (
	armAlone  = "alone"
	armShared = "shared"
)

const (
	callers     = 8                      // goroutines calling the provider in each replica
	maxTokens   = 256                    // each request's max_tokens
	callTimeout = 5 * time.Second        // each call's deadline
	maxWait     = 2 * time.Second        // the longest a call waits for the rate limit
	pause       = 100 * time.Millisecond // a caller's pause after a rejection
)

// counts is what a replica's callers saw.
type counts struct {
	Served    int `json:"served"`    // answered 200
	Throttled int `json:"throttled"` // answered 429
	Rejected  int `json:"rejected"`  // rejected by watertight, never sent
	Failed    int `json:"failed"`    // anything else
}

// isReplica reports whether this process is a replica.
func isReplica() bool { return os.Getenv(roleEnv) != "" }

// runReplica runs this process as a replica and returns its exit code.
func runReplica() int {
	d, err := time.ParseDuration(os.Getenv(durationEnv))
	if err != nil {
		fmt.Println("error", durationEnv, err)
		return 1
	}
	c, closeAll, err := newReplicaClient(os.Getenv(armEnv))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer closeAll()
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return 1 // the parent is gone
	}
	n := callFor(c, os.Getenv(providerEnv), d)
	b, _ := json.Marshal(n)
	fmt.Println("done", string(b))
	return 0
}

// newReplicaClient returns the replica's client for arm, and a function
// that closes it and what it uses. Alone, its rate limit paces it to the
// whole quota; shared, it takes the fleet's quota in Redis.
func newReplicaClient(arm string) (*watertight.Client, func(), error) {
	rl := ratelimit.Config{MaxWait: maxWait}
	var closers []func() error
	switch arm {
	case armAlone:
		// A burst of one second's quota, as the provider's buckets (the
		// TokenBurst's default would be a minute's tokens).
		rl.RequestsPerSecond, rl.Burst = quotaRequests, burstRequests
		rl.TokensPerMinute, rl.TokenBurst = quotaTokens*60, burstTokens
	case armShared:
		client := redisstate.NewClient(&redis.UniversalOptions{Addrs: []string{os.Getenv(redisEnv)},
			ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
		closers = append(closers, client.Close)
		// A round trip gets 500 ms: on a loaded machine the default 20 ms
		// would put the replicas on their fallback, a share of the quota
		// each, which is not what this arm shows.
		q, err := redisstate.NewQuota(redisstate.QuotaConfig{
			Name:     os.Getenv(quotaEnv),
			Redis:    redisstate.Redis{Client: client, CallTimeout: 500 * time.Millisecond},
			Interval: time.Second, Requests: quotaRequests, Tokens: quotaTokens,
		})
		if err != nil {
			client.Close()
			return nil, nil, err
		}
		closers = append(closers, q.Close)
		rl.Shared = q
	default:
		return nil, nil, fmt.Errorf("%s=%q: want %q or %q", armEnv, arm, armAlone, armShared)
	}
	closeAll := func() { // the quota before its Redis client
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	// The bulkhead sizes the client's connection pool to its callers.
	c, err := watertight.NewHTTPClient("provider", watertight.Config{
		Bulkhead:  &bulkhead.Config{Limit: callers},
		RateLimit: &rl,
	}, watertight.HTTPOptions{})
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return c, func() { c.Close(); closeAll() }, nil
}

// outcome is how one call ended.
type outcome int

const (
	outServed outcome = iota
	outThrottled
	outRejected
	outFailed
)

// add counts o.
func (n *counts) add(o outcome) {
	switch o {
	case outServed:
		n.Served++
	case outThrottled:
		n.Throttled++
	case outRejected:
		n.Rejected++
	default:
		n.Failed++
	}
}

// callFor runs the replica's callers against the provider at url until d
// has passed, each call after the last, and returns what they saw.
func callFor(c *watertight.Client, url string, d time.Duration) counts {
	var (
		mu  sync.Mutex
		n   counts
		wg  sync.WaitGroup
		end = time.Now().Add(d)
	)
	for range callers {
		wg.Go(func() {
			for time.Now().Before(end) {
				o := call(c, url)
				mu.Lock()
				n.add(o)
				mu.Unlock()
				if o == outRejected {
					// A rejection costs nothing: a caller that called again
					// at once would spin on Redis.
					time.Sleep(pause)
				}
			}
		})
	}
	wg.Wait()
	return n
}

// words fill the prompts.
var words = strings.Fields("the quick brown fox jumps over the lazy dog while a shared quota keeps the fleet in step")

// call makes one chat completion request through c and returns how it
// ended. The request declares its estimated tokens (ratelimit.WithCost):
// its prompt's, counted as the provider counts them, plus its max_tokens,
// the most its completion may use.
func call(c *watertight.Client, url string) outcome {
	var prompt strings.Builder
	for range 10 + rand.IntN(70) {
		prompt.WriteString(words[rand.IntN(len(words))] + " ")
	}
	body, _ := json.Marshal(map[string]any{
		"model": "fake-1", "max_tokens": maxTokens,
		"messages": []map[string]string{{"role": "user", "content": prompt.String()}},
	})
	cost := promptTokens(prompt.String()) + maxTokens
	ctx, cancel := context.WithTimeout(ratelimit.WithCost(context.Background(), cost), callTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	switch {
	case errors.Is(err, policy.ErrRejected):
		return outRejected
	case err != nil:
		return outFailed
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		return outFailed
	case resp.StatusCode == http.StatusOK:
		return outServed
	case resp.StatusCode == http.StatusTooManyRequests:
		return outThrottled
	}
	return outFailed
}
