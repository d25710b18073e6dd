package adaptive

import "testing"

// An estimate hovering around n + 0.5 keeps the learned limit where it is;
// it moves once the estimate is 0.75 away.
func TestAdmissionHysteresis(t *testing.T) {
	c := controller{limit: 7, held: 7}
	for _, step := range []struct {
		estimate float64
		want     int
	}{
		{7.4, 7}, {7.6, 7}, {7.45, 7}, {7.7, 7}, {7.8, 8}, {7.3, 8}, {8.6, 8}, {7.25, 7}, {6.2, 6}, {9.9, 10},
	} {
		c.limit = step.estimate
		if got := c.admission(); got != step.want {
			t.Errorf("estimate %v: admission %d; want %d", step.estimate, got, step.want)
		}
	}
}
