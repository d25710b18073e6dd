package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/httppolicy"
)

// heldUpstream is an upstream that answers 200 once released, counting
// the chats it holds.
type heldUpstream struct {
	release chan struct{}
	held    atomic.Int64
}

func (u *heldUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	u.held.Add(1)
	select {
	case <-u.release:
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
}

// tenantChat sends one chat of tenant to a's handler on a goroutine of
// wg, and adds its status code to codes once answered.
func tenantChat(a *app, wg *sync.WaitGroup, codes *[]int, mu *sync.Mutex, tenant string) {
	wg.Go(func() {
		req := httptest.NewRequest(http.MethodGet, "/chat", nil)
		req.Header.Set(tenantHeader, tenant)
		rec := httptest.NewRecorder()
		a.handler.ServeHTTP(rec, req)
		mu.Lock()
		*codes = append(*codes, rec.Code)
		mu.Unlock()
	})
}

// TestTenantHeaderKeysChats: the tenant a chat names in tenantHeader is
// the key the chats' compartment sees (HandlerConfig.Key, then the
// request's ctx through /chat). With the fair share, a quiet tenant's
// chat finds a slot while the noisy tenant holds its cap and waits for
// more; in fifo the noisy tenant holds every slot and the quiet chat
// gives up after its patience.
func TestTenantHeaderKeysChats(t *testing.T) {
	for _, arm := range tenantArms {
		t.Run(arm, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, err := newApp(arm, upstreams{slow: "http://upstream.invalid"}, time.Second)
				if err != nil {
					t.Fatal(err)
				}
				defer a.Close()
				up := &heldUpstream{release: make(chan struct{})}
				a.chat.Transport.(*httppolicy.Transport).Base = up
				var (
					wg, quietWG sync.WaitGroup
					mu          sync.Mutex
					codes       []int
					quiet       []int
				)
				for range chatLimit + 1 {
					tenantChat(a, &wg, &codes, &mu, tenantNoisy)
				}
				synctest.Wait()
				noisyIn := up.held.Load()
				tenantChat(a, &quietWG, &quiet, &mu, tenantQuiet)
				synctest.Wait()
				time.Sleep(chatMaxWait) // the patience of every chat still waiting
				synctest.Wait()
				quietIn := up.held.Load() - noisyIn
				close(up.release)
				wg.Wait()
				quietWG.Wait()
				wantNoisy, wantQuiet := int64(chatLimit), int64(0)
				if arm == armFair {
					wantNoisy, wantQuiet = tenantCap, 1
				}
				if noisyIn != wantNoisy || quietIn != wantQuiet {
					t.Errorf("the upstream held %d noisy chats and %d quiet; want %d and %d", noisyIn, quietIn, wantNoisy, wantQuiet)
				}
				want := []int{http.StatusOK}
				if arm == armFIFO {
					want = []int{http.StatusServiceUnavailable}
				}
				if !slices.Equal(quiet, want) {
					t.Errorf("the quiet chat got %v, want %v", quiet, want)
				}
			})
		})
	}
}

// TestTenantsJSONNames: tenants mode's JSON has the names the README
// gives: tenants, per arm (fifo, fair_share), per tenant (noisy, quiet):
// chats, chat_ok, chat_busy, chat_other, chat_200_p99_ms.
func TestTenantsJSONNames(t *testing.T) {
	arms := []tenantArm{
		{Arm: armFIFO, Tenants: map[string]tenantResult{tenantNoisy: {Sent: 90, OK: ms2d(30002), Busy: 89}, tenantQuiet: {Sent: 3, Busy: 3}}},
		{Arm: armFair, Tenants: map[string]tenantResult{tenantNoisy: {Sent: 90, Busy: 90}, tenantQuiet: {Sent: 3, OK: ms2d(1, 2, 3)}}},
	}
	var b bytes.Buffer
	if err := writeJSON(&b, params{Delay: time.Second}, nil, nil, arms); err != nil {
		t.Fatal(err)
	}
	var raw map[string]map[string]map[string]any
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b.Bytes(), &top); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(top["tenants"], &raw); err != nil {
		t.Fatalf("tenants: %v in %s", err, b.Bytes())
	}
	want := []string{"chat_200_p99_ms", "chat_busy", "chat_ok", "chat_other", "chats"}
	for _, arm := range []string{"fifo", "fair_share"} {
		for _, tenant := range []string{"noisy", "quiet"} {
			m, ok := raw[arm][tenant]
			if !ok {
				t.Errorf("no tenants.%s.%s in %s", arm, tenant, b.Bytes())
				continue
			}
			var keys []string
			for k := range m {
				keys = append(keys, k)
			}
			if slices.Sort(keys); !slices.Equal(keys, want) {
				t.Errorf("tenants.%s.%s has %v, want %v", arm, tenant, keys, want)
			}
		}
	}
	if p99 := raw["fair_share"]["noisy"]["chat_200_p99_ms"]; p99 != 0.0 {
		t.Errorf("a tenant with no 200 has chat_200_p99_ms %v, want 0", p99)
	}
}

// TestTenantWindowBound: the last chat of tenants mode's window gives up
// before the first slot frees, one delay in, exactly when the delay is
// over tenantMinDelay, as the README says; below it the counts race.
func TestTenantWindowBound(t *testing.T) {
	for _, d := range []time.Duration{0, time.Second, tenantMinDelay, tenantMinDelay + time.Millisecond, 2 * time.Second, 30 * time.Second} {
		if got, want := tenantWindow(d)+chatMaxWait < d, d > tenantMinDelay; got != want {
			t.Errorf("delay %v: the last chat gives up before the first slot frees: %v, want %v", d, got, want)
		}
	}
}
