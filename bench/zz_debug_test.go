package bench

import (
	"fmt"
	"testing"
	"testing/synctest"
)

func TestZZRouteDebug(t *testing.T) {
	for _, sc := range []string{"hang", "fail", "slow"} {
		r := &routeRun{scenario: sc, jitter: routeJitter()}
		synctest.Test(t, func(t *testing.T) { r.simulate(t, routeWatertight) })
		fmt.Println(sc)
		for b := 55; b < 240; b++ {
			if (b > 75 && b < 115) || (b > 125 && b < 175) || b > 205 {
				continue
			}
			fmt.Printf("%d:%d/%d/%d ", b, r.attempts[b][0].Load(), r.attempts[b][1].Load(), r.attempts[b][2].Load())
		}
		fmt.Println()
	}
}
