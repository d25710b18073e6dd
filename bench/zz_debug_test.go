package bench

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

func TestZZRouteDebug(t *testing.T) {
	for _, sc := range []string{"hang"} {
		r := &routeRun{scenario: sc, jitter: routeJitter()}
		synctest.Test(t, func(t *testing.T) {
			go func() {
				time.Sleep(59 * time.Second)
				for s := 59; s < 200; s++ {
					if r.router != nil && (s < 70 || s > 115) {
						st := r.router.Status()[1]
						fmt.Printf("%d: ep1 %+v\n", s, st)
					}
					time.Sleep(time.Second)
				}
			}()
			r.simulate(t, routeWatertight)
		})
	}
}
